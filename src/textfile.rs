//! Reading a text file a user named (a hostfile, an SSH config, a psybench preset or report):
//! bounded, and only where a text file can be.
//!
//! [`read`] refuses what is not a file of text before reading a byte of it: a directory, a
//! device (`/dev/zero`, `/dev/urandom`, a terminal) or a socket is an error naming what it is.
//! A pipe is read like a file (so `--hostfile <(make-hosts)` and `/dev/stdin` from a pipe work),
//! as is a named FIFO, which waits for its writer as `cat` would. Whatever it is, at most the
//! caller's limit is read: a larger file is an error saying the limit, never a read until memory
//! runs out. A NUL byte or bytes that are not UTF-8 are an error naming the line they are on.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// Reads the text file at `path`, at most `limit` bytes (see the module docs). The error's
/// message says what is wrong (`a character device, not a file`, `larger than 16 MiB`, `line 3
/// is not text (a NUL byte)`); the caller names the file.
pub fn read(path: &Path, limit: u64) -> io::Result<String> {
    // Checked before opening: opening a device can have effects of its own.
    check_kind(&std::fs::metadata(path)?.file_type())?;
    let file = File::open(path)?;
    check_kind(&file.metadata()?.file_type())?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(invalid(format!("larger than {}", size(limit))));
    }
    text(bytes)
}

/// Refuses anything but a regular file or a pipe, saying what it is.
fn check_kind(kind: &std::fs::FileType) -> io::Result<()> {
    let what = if kind.is_file() || kind.is_fifo() {
        return Ok(());
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("it is {what}, not a file of text"),
    ))
}

/// `bytes` as text, or an error naming the first line with a NUL byte or bytes that are not
/// UTF-8.
fn text(bytes: Vec<u8>) -> io::Result<String> {
    if let Some(at) = bytes.iter().position(|&b| b == 0) {
        return Err(invalid(format!(
            "line {} is not text (a NUL byte); is it a binary file?",
            line_of(&bytes, at)
        )));
    }
    String::from_utf8(bytes).map_err(|e| {
        let line = line_of(e.as_bytes(), e.utf8_error().valid_up_to());
        invalid(format!(
            "line {line} is not text (bytes that are not UTF-8); is it a binary file?"
        ))
    })
}

/// The number (from 1) of the line that byte `at` of `bytes` is on.
fn line_of(bytes: &[u8], at: usize) -> usize {
    bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1
}

/// `limit` in words: `16 MiB`, `1 GiB`, or bytes.
fn size(limit: u64) -> String {
    match limit {
        l if l >= 1 << 30 && l % (1 << 30) == 0 => format!("{} GiB", l >> 30),
        l if l >= 1 << 20 && l % (1 << 20) == 0 => format!("{} MiB", l >> 20),
        l if l >= 1 << 10 && l % (1 << 10) == 0 => format!("{} KiB", l >> 10),
        l => format!("{l} bytes"),
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(r: io::Result<String>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn devices_and_directories_are_refused_and_files_read() {
        let limit = 1 << 20;
        let zero = message(read(Path::new("/dev/zero"), limit));
        assert_eq!(zero, "it is a character device, not a file of text");
        assert!(message(read(Path::new("/"), limit)).contains("a directory"));
        let dir = std::env::temp_dir().join(format!("psyrun-textfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("f");
        std::fs::write(&f, "a\nb\n").unwrap();
        assert_eq!(read(&f, limit).unwrap(), "a\nb\n");
        assert_eq!(message(read(&f, 3)), "larger than 3 bytes");
        std::fs::write(&f, b"ok\nok\nx\0y\n").unwrap();
        assert!(message(read(&f, limit)).starts_with("line 3 is not text (a NUL byte)"));
        std::fs::write(&f, b"ok\n\xff\n").unwrap();
        assert!(message(read(&f, limit)).starts_with("line 2 is not text (bytes that are not"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_pipe_is_read_up_to_the_limit() {
        use std::process::{Command, Stdio};
        let mut child = Command::new("yes").stdout(Stdio::piped()).spawn().unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(child.stdout.as_ref().unwrap());
        let path = format!("/proc/self/fd/{fd}");
        let r = read(Path::new(&path), 1 << 16);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(message(r), "larger than 64 KiB");
        assert_eq!(size(16 << 20), "16 MiB");
        assert_eq!(size(1 << 30), "1 GiB");
    }
}
