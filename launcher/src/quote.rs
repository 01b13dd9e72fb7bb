//! Shell quoting: how psyrun writes a word (a program, an argument, a value, a path) so that it
//! can be pasted into a POSIX shell unchanged. Used wherever psyrun shows a command (the dry run,
//! the routes to the hosts) and in the command line that starts an agent over SSH.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

/// `text` as a POSIX shell word: unchanged when it needs no quoting, in single quotes when it is
/// printable text, else as `$'...'` with escapes (so newlines and non-UTF-8 bytes show exactly).
pub fn shell_quote(text: &OsStr) -> String {
    let bytes = text.as_bytes();
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"_@%+=:,./-".contains(&b);
    if !bytes.is_empty() && bytes.iter().all(|&b| plain(b)) {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.chars().any(char::is_control) => format!("'{}'", s.replace('\'', r"'\''")),
        _ => ansi_c_quote(bytes),
    }
}

/// `bytes` as a `$'...'` word: printable ASCII as it is, the usual escapes, `\xNN` for the rest.
fn ansi_c_quote(bytes: &[u8]) -> String {
    let mut out = String::from("$'");
    for &b in bytes {
        match b {
            b'\n' => out.push_str(r"\n"),
            b'\t' => out.push_str(r"\t"),
            b'\r' => out.push_str(r"\r"),
            b'\\' => out.push_str(r"\\"),
            b'\'' => out.push_str(r"\'"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!(r"\x{b:02x}")),
        }
    }
    out.push('\'');
    out
}

/// A program and its arguments as one shell command line, each word quoted.
pub fn command_line<'a>(program: &'a OsStr, args: impl IntoIterator<Item = &'a OsStr>) -> String {
    let words: Vec<String> = std::iter::once(program)
        .chain(args)
        .map(shell_quote)
        .collect();
    words.join(" ")
}
