//! Reading a text file a user named (a hostfile, an SSH config, a psybench preset or report, a
//! tuning file): bounded, and only where a text file can be. One reader for psyrun, psybench and
//! the library.
//!
//! [`read`] and [`read_regular`] refuse what is not a file of text before reading a byte of it:
//! a directory, a device (`/dev/zero`, `/dev/urandom`, a terminal) or a socket is an error naming
//! what it is. [`read`], for the tools' command lines, reads a pipe like a file (so `--hostfile
//! <(make-hosts)` and `/dev/stdin` from a pipe work), as it does a named FIFO, which waits for its
//! writer as `cat` would. [`read_regular`], for what every rank of a job reads on its own
//! (`PSY_TUNING`), takes regular files only: it opens without blocking (`O_NONBLOCK`), so a FIFO
//! is refused at once rather than holding every rank in `open` outside any deadline. Whatever it
//! is, at most the caller's limit is read: a larger file is an error saying the limit, never a
//! read until memory runs out. A NUL byte or bytes that are not UTF-8 are an error naming the
//! line they are on.

use std::fs::OpenOptions;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Reads the text file (or pipe) at `path`, at most `limit` bytes (see the module docs). The
/// error's message says what is wrong (`a character device, not a file`, `larger than 16 MiB`,
/// `line 3 is not text (a NUL byte)`); the caller names the file.
pub fn read(path: &Path, limit: u64) -> io::Result<String> {
    read_as(path, limit, Accept::FilesAndPipes)
}

/// Reads the regular file at `path`, at most `limit` bytes, without ever blocking in `open`: a
/// FIFO, a pipe, a device, a directory or a socket is refused, saying what it is (see the module
/// docs). For files every rank of a job reads, where a read that waits would wait outside the
/// job's deadline.
pub fn read_regular(path: &Path, limit: u64) -> io::Result<String> {
    read_as(path, limit, Accept::RegularOnly)
}

/// What a reader takes besides regular files.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Accept {
    /// Pipes and FIFOs too, read to their end (a FIFO's `open` waits for its writer).
    FilesAndPipes,
    /// Regular files only; opened with `O_NONBLOCK`, so not even a FIFO swapped in after the
    /// check can block.
    RegularOnly,
}

/// Reads the regular file at `path` as bytes, at most `limit` of them, as [`read_regular`]
/// does (the same refusals), but without asking for text: for a binary file every rank or a
/// restarted job reads, such as a checkpoint.
pub fn read_regular_bytes(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    bytes_as(path, limit, Accept::RegularOnly)
}

fn read_as(path: &Path, limit: u64, accept: Accept) -> io::Result<String> {
    text(bytes_as(path, limit, accept)?)
}

fn bytes_as(path: &Path, limit: u64, accept: Accept) -> io::Result<Vec<u8>> {
    // Checked before opening: opening a device can have effects of its own.
    check_kind(&std::fs::metadata(path)?.file_type(), accept)?;
    let mut options = OpenOptions::new();
    options.read(true);
    if accept == Accept::RegularOnly {
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    let file = options.open(path)?;
    // Checked again on what was opened: the path may name something else by now.
    check_kind(&file.metadata()?.file_type(), accept)?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(invalid(format!("larger than {}", size(limit))));
    }
    Ok(bytes)
}

/// Refuses what `accept` does not take, saying what it is.
fn check_kind(kind: &std::fs::FileType, accept: Accept) -> io::Result<()> {
    let what = if kind.is_file() || (kind.is_fifo() && accept == Accept::FilesAndPipes) {
        return Ok(());
    } else if kind.is_fifo() {
        "a FIFO or pipe"
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
    let not = match accept {
        Accept::FilesAndPipes => "not a file of text",
        Accept::RegularOnly => "not a regular file",
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("it is {what}, {not}"),
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
        let dir = std::env::temp_dir().join(format!("psyne-textfile-read-{}", std::process::id()));
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

    #[test]
    fn read_regular_refuses_a_fifo_without_waiting_for_a_writer_and_reads_files() {
        let dir = std::env::temp_dir().join(format!("psyne-textfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No writer ever opens it: a blocking open would never return.
        let e = message(read_regular(&fifo, 1 << 20));
        assert_eq!(e, "it is a FIFO or pipe, not a regular file");
        let zero = message(read_regular(Path::new("/dev/zero"), 1 << 20));
        assert_eq!(zero, "it is a character device, not a regular file");
        let f = dir.join("f");
        std::fs::write(&f, "[shm 2]\n").unwrap();
        assert_eq!(read_regular(&f, 1 << 20).unwrap(), "[shm 2]\n");
        assert_eq!(message(read_regular(&f, 4)), "larger than 4 bytes");
        assert_eq!(read_regular_bytes(&f, 8).unwrap(), b"[shm 2]\n");
        let e = read_regular_bytes(&fifo, 8).unwrap_err().to_string();
        assert_eq!(e, "it is a FIFO or pipe, not a regular file");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
