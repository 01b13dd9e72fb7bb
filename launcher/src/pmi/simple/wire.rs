//! The two wire formats on a `PMI_FD` socket, parsed and formatted without I/O.
//!
//! - PMI-1: one text line, `cmd=NAME key=value key=value\n`; a value ends at a space (a
//!   backslash keeps the next character in the value, as MPICH's `pmi_wire.c` reads it). The
//!   only multi-line message, `mcmd=spawn\n...endcmd\n`, is read whole so it can be refused.
//! - PMI-2: a 6-character decimal length (space padded), then that many bytes of
//!   `cmd=NAME;key=value;...;`. A `;` inside a value is written `;;` (MPICH's old `simple2pmi.c`
//!   and Slurm's `mpi/pmi2`; MPICH 4.1+ never sends one).
//!
//! Which format a message uses is decided per message, as Hydra's `PMIU_check_full_cmd` does:
//! PMI-1 messages start with `cmd=` or `mcmd=`, anything else is a PMI-2 length.

use std::fmt;

/// The framing of one message; a reply uses its request's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// PMI-1 text line.
    V1,
    /// PMI-2 length-prefixed message.
    V2,
}

/// One parsed request: its command and its `key=value` pairs in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// How it was framed.
    pub framing: Framing,
    /// The value of `cmd=` (`spawn` for `mcmd=spawn`).
    pub cmd: String,
    /// The other pairs, in order; a key without `=` has an empty value.
    pub pairs: Vec<(String, String)>,
}

impl Message {
    /// The value of the first pair named `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Display for Message {
    /// `cmd=NAME key=value ...` (PMI-1) or `cmd=NAME;key=value;...` (PMI-2).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sep = match self.framing {
            Framing::V1 => " ",
            Framing::V2 => ";",
        };
        write!(f, "cmd={}", self.cmd)?;
        for (k, v) in &self.pairs {
            write!(f, "{sep}{k}={v}")?;
        }
        Ok(())
    }
}

/// Why bytes on the socket are not a PMI message; the connection is then closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError(pub String);

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Length of the PMI-2 length prefix.
pub const V2_PREFIX: usize = 6;

/// The first complete message at the start of `buf` and how many bytes it took, `None` if more
/// bytes are needed. A message (or the part of one seen so far) longer than `limit` bytes, or
/// bytes that are neither format, are an error.
pub fn next_message(buf: &[u8], limit: usize) -> Result<Option<(Message, usize)>, WireError> {
    if buf.is_empty() {
        return Ok(None);
    }
    if is_v1_start(buf) {
        return next_v1(buf, limit);
    }
    next_v2(buf, limit)
}

/// Whether `buf` starts (or may start, being short) with `cmd=` or `mcmd=`.
fn is_v1_start(buf: &[u8]) -> bool {
    let n = buf.len();
    b"cmd="[..n.min(4)] == buf[..n.min(4)] || b"mcmd="[..n.min(5)] == buf[..n.min(5)]
}

fn next_v1(buf: &[u8], limit: usize) -> Result<Option<(Message, usize)>, WireError> {
    let multi = buf.starts_with(b"mcmd=");
    let end = if multi {
        find(buf, b"endcmd\n").map(|at| at + b"endcmd\n".len())
    } else {
        buf.iter().position(|&b| b == b'\n').map(|at| at + 1)
    };
    let Some(end) = end else {
        return if buf.len() > limit {
            Err(WireError(format!(
                "a PMI-1 line longer than {limit} bytes (no newline): {}",
                preview(buf)
            )))
        } else {
            Ok(None)
        };
    };
    if end > limit {
        return Err(WireError(format!(
            "a PMI-1 message of {end} bytes, over the limit of {limit}"
        )));
    }
    let text = text(&buf[..end])?;
    let msg = if multi {
        Message {
            framing: Framing::V1,
            cmd: "spawn".into(),
            pairs: Vec::new(),
        }
    } else {
        parse_v1(text.trim_end_matches('\n'))?
    };
    Ok(Some((msg, end)))
}

fn next_v2(buf: &[u8], limit: usize) -> Result<Option<(Message, usize)>, WireError> {
    if buf.len() < V2_PREFIX {
        // A prefix in progress must already look like one.
        return match buf.iter().all(|b| b.is_ascii_digit() || *b == b' ') {
            true => Ok(None),
            false => Err(not_a_message(buf)),
        };
    }
    let prefix = std::str::from_utf8(&buf[..V2_PREFIX]).map_err(|_| not_a_message(buf))?;
    let len: usize = prefix.trim().parse().map_err(|_| not_a_message(buf))?;
    if len > limit {
        return Err(WireError(format!(
            "a PMI-2 message of {len} bytes, over the limit of {limit}"
        )));
    }
    let end = V2_PREFIX + len;
    if buf.len() < end {
        return Ok(None);
    }
    let msg = parse_v2(text(&buf[V2_PREFIX..end])?)?;
    Ok(Some((msg, end)))
}

fn not_a_message(buf: &[u8]) -> WireError {
    WireError(format!(
        "neither a PMI-1 line (`cmd=...`) nor a PMI-2 length prefix: {}",
        preview(buf)
    ))
}

fn text(bytes: &[u8]) -> Result<&str, WireError> {
    std::str::from_utf8(bytes).map_err(|_| {
        WireError(format!(
            "a PMI message that is not text: {}",
            preview(bytes)
        ))
    })
}

/// The first bytes of `buf`, printable, for error messages.
fn preview(buf: &[u8]) -> String {
    let head = &buf[..buf.len().min(60)];
    let s: String = head
        .iter()
        .map(|&b| match b {
            b' '..=b'~' => b as char,
            _ => '?',
        })
        .collect();
    format!("`{s}`{}", if buf.len() > 60 { "..." } else { "" })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Parses one PMI-1 line (without its newline). Values stay as sent (escapes included), so a
/// value put is got back byte for byte.
pub fn parse_v1(line: &str) -> Result<Message, WireError> {
    let mut pairs = Vec::new();
    let mut rest = line;
    loop {
        rest = rest.trim_start_matches(' ');
        if rest.is_empty() {
            break;
        }
        let key_end = rest.find([' ', '=']).unwrap_or(rest.len());
        let key = &rest[..key_end];
        rest = &rest[key_end..];
        let value = match rest.strip_prefix('=') {
            Some(after) => {
                let end = v1_value_end(after);
                rest = &after[end..];
                &after[..end]
            }
            None => "",
        };
        if key.is_empty() {
            return Err(WireError(format!("a PMI-1 pair without a key in `{line}`")));
        }
        pairs.push((key.to_string(), value.to_string()));
    }
    into_message(Framing::V1, pairs, line)
}

/// Where a PMI-1 value ends: at the first space not escaped by a backslash.
fn v1_value_end(s: &str) -> usize {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() && bytes[i] != b' ' {
        i += if bytes[i] == b'\\' && i + 1 < bytes.len() {
            2
        } else {
            1
        };
    }
    i
}

/// A PMI-1 value with its backslash escapes removed (for text meant for people, such as an
/// abort message).
pub fn unescape_v1(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => out.extend(chars.next().or(Some('\\'))),
            (c, false) => out.push(c),
        }
    }
    out
}

/// Parses the body of one PMI-2 message (after its length): `cmd=NAME;key=value;...`, with `;;`
/// read as a `;` inside a value.
pub fn parse_v2(body: &str) -> Result<Message, WireError> {
    let mut pairs = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let (pair, after) = split_v2_pair(rest);
        rest = after;
        if pair.is_empty() {
            continue;
        }
        let (key, value) = pair.split_once('=').unwrap_or((pair.as_str(), ""));
        if key.is_empty() {
            return Err(WireError(format!("a PMI-2 pair without a key in `{body}`")));
        }
        pairs.push((key.to_string(), value.to_string()));
    }
    into_message(Framing::V2, pairs, body)
}

/// The first `;`-terminated pair of `s` (with `;;` unescaped) and what follows it.
fn split_v2_pair(s: &str) -> (String, &str) {
    let bytes = s.as_bytes();
    let mut pair = String::new();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b';' {
            pair.push_str(&s[start..i]);
            if bytes.get(i + 1) == Some(&b';') {
                pair.push(';');
                i += 2;
                start = i;
                continue;
            }
            return (pair, &s[i + 1..]);
        }
        i += 1;
    }
    pair.push_str(&s[start..]);
    (pair, "")
}

/// Takes the leading `cmd` pair out of `pairs`.
fn into_message(
    framing: Framing,
    mut pairs: Vec<(String, String)>,
    text: &str,
) -> Result<Message, WireError> {
    match pairs.first() {
        Some((k, v)) if k == "cmd" && !v.is_empty() => {
            let cmd = pairs.remove(0).1;
            Ok(Message {
                framing,
                cmd,
                pairs,
            })
        }
        _ => Err(WireError(format!(
            "a PMI message that does not start with cmd=NAME: `{}`",
            text.chars().take(60).collect::<String>()
        ))),
    }
}

/// Formats a reply: `cmd=NAME` then `pairs`, in `framing`.
pub fn format(framing: Framing, cmd: &str, pairs: &[(String, String)]) -> Vec<u8> {
    match framing {
        Framing::V1 => format_v1(cmd, pairs),
        Framing::V2 => format_v2(cmd, pairs),
    }
}

fn format_v1(cmd: &str, pairs: &[(String, String)]) -> Vec<u8> {
    let mut s = format!("cmd={cmd}");
    for (k, v) in pairs {
        s.push(' ');
        s.push_str(k);
        s.push('=');
        s.push_str(v);
    }
    s.push('\n');
    s.into_bytes()
}

fn format_v2(cmd: &str, pairs: &[(String, String)]) -> Vec<u8> {
    let mut body = format!("cmd={cmd};");
    for (k, v) in pairs {
        body.push_str(k);
        body.push('=');
        body.push_str(&v.replace(';', ";;"));
        body.push(';');
    }
    format!("{:>width$}{body}", body.len(), width = V2_PREFIX).into_bytes()
}

/// `text` made safe as a value in `framing` for a message meant for people (an error): no
/// spaces or newlines in PMI-1 (old clients cut a value at a space), no `;` in PMI-2.
pub fn message_value(framing: Framing, text: &str) -> String {
    text.chars()
        .map(|c| match (framing, c) {
            (Framing::V1, ' ' | '\n' | '\\') => '_',
            (Framing::V2, ';' | '\n') => ',',
            (_, c) => c,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_pmi1_lines() {
        let (m, n) = next_message(b"cmd=put kvsname=k key=a value=x=y\ncmd=get", 100)
            .unwrap()
            .unwrap();
        assert_eq!(n, 34);
        assert_eq!(m.framing, Framing::V1);
        assert_eq!(m.cmd, "put");
        assert_eq!(
            m.pairs,
            pairs(&[("kvsname", "k"), ("key", "a"), ("value", "x=y")])
        );
        assert_eq!(m.get("value"), Some("x=y"));
        assert_eq!(next_message(b"cmd=get", 100), Ok(None));
        assert_eq!(next_message(b"cm", 100), Ok(None));
    }

    #[test]
    fn keeps_pmi1_escapes_and_unescapes_on_request() {
        let m = parse_v1("cmd=abort exitcode=7 message=a\\ b\\\\c  extra").unwrap();
        assert_eq!(m.get("message"), Some("a\\ b\\\\c"));
        assert_eq!(unescape_v1("a\\ b\\\\c"), "a b\\c");
        assert_eq!(m.get("extra"), Some(""));
        assert_eq!(m.get("exitcode"), Some("7"));
    }

    #[test]
    fn reads_a_spawn_whole() {
        let buf = b"mcmd=spawn\nnprocs=2\nexecname=x\nendcmd\ncmd=x\n";
        let (m, n) = next_message(buf, 1000).unwrap().unwrap();
        assert_eq!((m.cmd.as_str(), n), ("spawn", 38));
        assert_eq!(next_message(b"mcmd=spawn\nnprocs=2\n", 1000), Ok(None));
    }

    #[test]
    fn parses_pmi2_messages() {
        let raw = b"    42cmd=kvs-put;key=a;value=b;;c;thrid=0x1234;000";
        let (m, n) = next_message(raw, 100).unwrap().unwrap();
        assert_eq!(n, raw.len() - 3);
        assert_eq!(m.framing, Framing::V2);
        assert_eq!(m.cmd, "kvs-put");
        assert_eq!(
            m.pairs,
            pairs(&[("key", "a"), ("value", "b;c"), ("thrid", "0x1234")])
        );
        assert_eq!(next_message(b"  ", 100), Ok(None));
        assert_eq!(next_message(b"    20cmd=x;", 100), Ok(None));
        // Left-aligned lengths (old clients) too.
        let (m, _) = next_message(b"10    cmd=fence;", 100).unwrap().unwrap();
        assert_eq!(m.cmd, "fence");
    }

    #[test]
    fn formats_both_framings() {
        let p = pairs(&[("rc", "0"), ("value", "a;b")]);
        assert_eq!(
            format(Framing::V1, "get_result", &p),
            b"cmd=get_result rc=0 value=a;b\n"
        );
        let v2 = format(Framing::V2, "kvs-get-response", &p);
        assert_eq!(
            String::from_utf8(v2.clone()).unwrap(),
            "    37cmd=kvs-get-response;rc=0;value=a;;b;"
        );
        let (m, n) = next_message(&v2, 100).unwrap().unwrap();
        assert_eq!(n, v2.len());
        assert_eq!(m.get("value"), Some("a;b"));
    }

    #[test]
    fn refuses_garbage_and_oversized_input() {
        for bad in [&b"hello world\n"[..], b"\x00\x01", b"12345x", b"  -1cmd=x;"] {
            let err = next_message(bad, 100).unwrap_err();
            assert!(err.0.contains("neither"), "{bad:?}: {err}");
        }
        let long = [b"cmd=put value=".as_slice(), &[b'x'; 200]].concat();
        assert!(next_message(&long, 100)
            .unwrap_err()
            .0
            .contains("longer than"));
        assert!(next_message(b"999999cmd=", 100)
            .unwrap_err()
            .0
            .contains("over the limit"));
        assert!(next_message(b"=x\n", 100).is_err());
        assert!(parse_v1("key=x").is_err());
        assert!(parse_v1("cmd= a=b").is_err());
        assert!(parse_v2("=x;").is_err());
        assert!(next_message(b"cmd=\xff\n", 100)
            .unwrap_err()
            .0
            .contains("not text"));
    }

    #[test]
    fn error_text_fits_a_value() {
        assert_eq!(message_value(Framing::V1, "a b\\c"), "a_b_c");
        assert_eq!(message_value(Framing::V2, "a;b c"), "a,b c");
    }
}
