//! Where an output file (`--csv`, `--json`, `--plot`, `psybench plot -o`) really goes, and
//! writing it there without destroying what the path names.
//!
//! - A new path, or a regular file: replaced atomically (a temporary file beside it, then a
//!   rename), so a reader never sees half a file; progress rewrites it after every size.
//! - A symlink to a regular file: the file it points to is replaced that way; the link stays.
//! - Anything else — `-` (standard output), a FIFO, a terminal or another device such as
//!   `/dev/stdout`, a socket, a dangling symlink — is a stream: it is written through (opened for
//!   writing, never created, truncated or renamed over), once, with the final contents. Renaming
//!   over it would replace the device or the link with a regular file (as root, `/dev/stdout`
//!   itself), and a reader at a FIFO would get nothing.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// What an output path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// A regular file (or a new path) to replace atomically: the path itself, or the file a
    /// symlink resolves to.
    Replace(PathBuf),
    /// Standard output (`-`).
    Stdout,
    /// A FIFO, a device, a socket or a dangling symlink: written through, once, at the end.
    Stream(PathBuf),
}

impl Destination {
    /// What `path` names now.
    pub fn of(path: &Path) -> io::Result<Destination> {
        if path.as_os_str() == "-" {
            return Ok(Destination::Stdout);
        }
        let link = match fs::symlink_metadata(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Destination::Replace(path.to_path_buf()))
            }
            Err(e) => return Err(e),
            Ok(m) => m,
        };
        if link.file_type().is_file() {
            return Ok(Destination::Replace(path.to_path_buf()));
        }
        if !link.file_type().is_symlink() {
            return Ok(Destination::Stream(path.to_path_buf()));
        }
        match fs::metadata(path) {
            Ok(m) if m.file_type().is_file() => Ok(Destination::Replace(fs::canonicalize(path)?)),
            _ => Ok(Destination::Stream(path.to_path_buf())),
        }
    }

    /// Whether this destination takes every progress rewrite (regular files) or only the final
    /// contents (streams).
    pub fn takes_progress(&self) -> bool {
        matches!(self, Destination::Replace(_))
    }

    /// Writes `bytes` as the whole contents: atomically for a file, through for a stream.
    pub fn write_whole(&self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Destination::Replace(path) => with_temp_beside(path, "psybench", "", |tmp| {
                let mut f = fs::File::create(tmp)?;
                f.write_all(bytes)?;
                f.sync_all()?;
                fs::rename(tmp, path)
            }),
            Destination::Stdout => {
                let mut out = io::stdout().lock();
                out.write_all(bytes)?;
                out.flush()
            }
            Destination::Stream(path) => {
                // No create, no truncate: a FIFO, a device or a socket is written as it is.
                let mut f = fs::OpenOptions::new().write(true).open(path)?;
                f.write_all(bytes)?;
                f.flush()
            }
        }
    }
}

/// Runs `write` on a temporary path beside `path` (`.NAME.tmp-PID` then `suffix`; NAME is
/// `fallback` when `path` has no file name) and removes that file when `write` fails; `write`
/// is expected to rename it over `path` when it succeeds. Only for [`Destination::Replace`].
pub(crate) fn with_temp_beside<E>(
    path: &Path,
    fallback: &str,
    suffix: &str,
    write: impl FnOnce(&Path) -> Result<(), E>,
) -> Result<(), E> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| fallback.into());
    let tmp = dir.join(format!(".{name}.tmp-{}{suffix}", std::process::id()));
    let result = write(&tmp);
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}
