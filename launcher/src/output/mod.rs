//! Forwarding the ranks' output, line by line, without ever interleaving two lines.
//!
//! Each rank stream is read in pieces of at most [`PIECE`] bytes ([`for_each_piece`]). A line
//! that fits in one piece goes to the [`Console`] as one write; a longer one is streamed there
//! piece by piece while the console holds every other writer back (see [`console`]), so every
//! line arrives whole, however long, with its timestamp and prefix once, and psyrun holds at
//! most a piece per stream. psyrun's own messages go through the same console. A last line
//! without a newline is flushed at end of file with a newline added on the console; the
//! `--output-dir` copy keeps the bytes exactly.

pub mod console;

pub use console::{Console, Stream, WriterId};

use crate::error::Error;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The most of a line held in memory per rank stream: a line is read (and, over the wire, sent)
/// in pieces of at most this many bytes.
pub const PIECE: usize = 64 * 1024;

/// How long psyrun waits, once every rank has ended, for the ranks' output pipes to close (a
/// process that left its rank's process group may still hold them open).
pub const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// Where one rank stream's lines go: the console, as its [`Look`] says, and its file if any.
#[derive(Debug)]
pub struct Sink {
    console: Arc<Console>,
    stream: Stream,
    look: Look,
    /// The `--output-dir` file, if any, and its path for messages.
    file: Option<RankFile>,
    writer: WriterId,
    /// The current line's head (timestamp and prefix), then the piece being written.
    out: Vec<u8>,
    /// How long the head is.
    head: usize,
}

/// One piece of a line (see [`for_each_piece`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece<'a> {
    /// The bytes, newline included if this piece ends the line with one.
    pub bytes: &'a [u8],
    /// It starts a line.
    pub first: bool,
    /// It ends a line (with a newline, or at end of file).
    pub last: bool,
}

impl Sink {
    /// A sink for one rank stream.
    pub fn new(console: Arc<Console>, stream: Stream, look: Look, file: Option<RankFile>) -> Sink {
        Sink {
            console,
            stream,
            look,
            file,
            writer: WriterId::new(),
            out: Vec::new(),
            head: 0,
        }
    }

    /// Ends this stream's line on the console where it is, if it is open there (its stream
    /// ended, or was cut off, mid-line).
    pub fn end_line(&self) {
        self.console.end_line(self.writer);
    }

    /// Writes one piece of a line: to the file exactly, and (unless hidden) to the console,
    /// headed by the time `time` (the line's first piece's) and the prefix, a newline added to
    /// a last piece without one. Console write errors are ignored (so a rank never blocks on a
    /// closed stdout); a failing file is reported once and then no longer written.
    pub fn piece(&mut self, piece: Piece<'_>, time: SystemTime) {
        if let Some((file, path)) = &mut self.file {
            if let Err(e) = file.write_all(piece.bytes) {
                self.console.message(&format!(
                    "writing {}: {e}; no longer writing that file",
                    path.display()
                ));
                self.file = None;
            }
        }
        if !self.look.show {
            return;
        }
        if piece.first {
            self.out.clear();
            if self.look.timestamp {
                self.out.extend_from_slice(timestamp(time).as_bytes());
                self.out.push(b' ');
            }
            self.out.extend_from_slice(self.look.prefix.as_bytes());
            self.head = self.out.len();
        } else if piece.bytes.is_empty() && piece.last {
            // The stream ended right after a piece: end the line if it is still open.
            self.end_line();
            return;
        }
        self.out.truncate(self.head);
        self.out.extend_from_slice(piece.bytes);
        if piece.last && piece.bytes.last() != Some(&b'\n') {
            self.out.push(b'\n');
        }
        let _ =
            self.console
                .write_piece(self.writer, self.stream, &self.out, self.head, piece.last);
    }
}

/// How one rank's lines look on the console, as the command line asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Look {
    /// `[host][rank] ` with `--tag-output`, else empty.
    pub prefix: String,
    /// Stamp lines with the time they were read (`--timestamp-output`).
    pub timestamp: bool,
    /// Show them at all (`--ranks`).
    pub show: bool,
}

/// How every rank's lines look, for the whole job: built from the command line
/// (`--tag-output`, `--timestamp-output`, `--ranks`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LookPlan {
    /// Prefix lines with `[host][rank] `.
    pub tag: bool,
    /// Stamp lines with the time they were read.
    pub timestamp: bool,
    /// Show only these ranks' lines (sorted, no duplicates); all if `None`.
    pub show: Option<Vec<usize>>,
}

impl LookPlan {
    /// The look of rank `rank`, which runs on `host`.
    pub fn look(&self, host: &str, rank: usize) -> Look {
        Look {
            prefix: if self.tag {
                format!("[{host}][{rank}] ")
            } else {
                String::new()
            },
            timestamp: self.timestamp,
            show: self
                .show
                .as_ref()
                .map_or(true, |s| s.binary_search(&rank).is_ok()),
        }
    }
}

impl Look {
    /// A sink for one of the rank's streams with this look, and its `--output-dir` file if any.
    pub fn sink(&self, console: &Arc<Console>, stream: Stream, file: Option<RankFile>) -> Sink {
        Sink::new(console.clone(), stream, self.clone(), file)
    }
}

/// An `--output-dir` file and its path (for messages).
pub type RankFile = (File, PathBuf);

/// The `--output-dir` files of one rank: stdout's and stderr's.
pub type RankFiles = [Option<RankFile>; 2];

/// The `--output-dir` files of `n` ranks, created (with the directory) if `dir` is given, else
/// none.
pub fn open_output_files(dir: Option<&Path>, n: usize) -> Result<Vec<RankFiles>, Error> {
    let Some(dir) = dir else {
        return Ok((0..n).map(|_| [None, None]).collect());
    };
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("creating --output-dir {}", dir.display()), e))?;
    let open = |rank: usize, stream: Stream| {
        let path = dir.join(format!("rank.{rank}.{}", stream.name()));
        File::create(&path)
            .map(|f| Some((f, path.clone())))
            .map_err(|e| Error::io(format!("creating {}", path.display()), e))
    };
    (0..n)
        .map(|r| Ok([open(r, Stream::Stdout)?, open(r, Stream::Stderr)?]))
        .collect()
}

/// Copies `reader` to `sink` line by line until end of file or a read error, each line stamped
/// with the time its first piece was read.
pub fn forward(reader: impl Read, mut sink: Sink) {
    for_each_piece(reader, |piece| sink.piece(piece, SystemTime::now()));
}

/// Calls `f` with each piece of each line read from `reader`, in order, until end of file or a
/// read error: a line of at most [`PIECE`] bytes (newline included) is one piece; a longer one
/// is a first piece of [`PIECE`] bytes, then whatever each read brings (at most [`PIECE`]). A
/// line cut short by the end is ended by a last piece (possibly empty).
pub fn for_each_piece(reader: impl Read, mut f: impl FnMut(Piece<'_>)) {
    let mut reader = BufReader::with_capacity(PIECE, reader);
    let mut line: Vec<u8> = Vec::new();
    let mut first = true;
    loop {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if buf.is_empty() {
            break;
        }
        let take = buf
            .iter()
            .position(|&b| b == b'\n')
            .map_or(buf.len(), |i| i + 1)
            .min(PIECE - line.len());
        line.extend_from_slice(&buf[..take]);
        reader.consume(take);
        let last = line.last() == Some(&b'\n');
        // A line's first piece waits to be whole or full (so a short line is one write); once
        // a line is under way, what arrives goes on at once.
        if last || line.len() >= PIECE || !first {
            f(Piece {
                bytes: &line,
                first,
                last,
            });
            first = last;
            line.clear();
        }
    }
    if !line.is_empty() || !first {
        f(Piece {
            bytes: &line,
            first,
            last: true,
        });
    }
}

/// `time` as ISO 8601 in UTC with microseconds: `2026-11-21T10:00:00.123456Z`. Times before
/// 1970 print as 1970-01-01T00:00:00.000000Z.
pub fn timestamp(time: std::time::SystemTime) -> String {
    let since = time
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:06}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60,
        since.subsec_micros()
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for days after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::console::STALL;
    use super::*;
    use std::sync::Mutex;

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    fn look(prefix: &str, timestamp: bool, show: bool) -> Look {
        Look {
            prefix: prefix.into(),
            timestamp,
            show,
        }
    }

    fn console() -> (Arc<Console>, Shared, Shared) {
        let (out, err) = (Shared::default(), Shared::default());
        let console = Console::new(Box::new(out.clone()), Box::new(err.clone()));
        (Arc::new(console), out, err)
    }

    fn run(input: &[u8], prefix: &str) -> (String, String) {
        let (console, out, err) = console();
        forward(
            input,
            look(prefix, false, true).sink(&console, Stream::Stderr, None),
        );
        (out.text(), err.text())
    }

    #[test]
    fn lines_are_prefixed_and_a_last_partial_line_is_ended() {
        let (out, err) = run(b"a\n\nbc\nlast", "[7] ");
        assert_eq!(out, "");
        assert_eq!(err, "[7] a\n[7] \n[7] bc\n[7] last\n");
        assert_eq!(run(b"", "[0] ").1, "");
    }

    #[test]
    fn timestamps_are_iso_8601_utc_with_microseconds() {
        use std::time::{Duration, UNIX_EPOCH};
        let at =
            |s: u64, us: u64| timestamp(UNIX_EPOCH + Duration::from_micros(s * 1_000_000 + us));
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(at(951_782_400, 1), "2000-02-29T00:00:00.000001Z");
        assert_eq!(at(1_795_255_200, 123_456), "2026-11-21T10:00:00.123456Z");
        assert_eq!(at(4_107_542_399, 999_999), "2100-02-28T23:59:59.999999Z");
        assert_eq!(at(253_402_300_799, 0), "9999-12-31T23:59:59.000000Z");
        assert_eq!(
            timestamp(UNIX_EPOCH - Duration::from_secs(5)),
            "1970-01-01T00:00:00.000000Z"
        );
    }

    #[test]
    fn hidden_lines_still_reach_the_file_and_stamps_come_first() {
        let dir = std::env::temp_dir().join(format!("psyrun-output-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let (console, out, _) = console();
        let file = Some((File::create(&path).unwrap(), path.clone()));
        forward(
            &b"one\ntwo"[..],
            look("[h][1] ", false, false).sink(&console, Stream::Stdout, file),
        );
        assert!(out.text().is_empty());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\ntwo");
        forward(
            &b"x\n"[..],
            look("[h][1] ", true, true).sink(&console, Stream::Stdout, None),
        );
        let text = out.text();
        let (stamp, rest) = text.split_once(' ').unwrap();
        assert_eq!(rest, "[h][1] x\n");
        assert_eq!(stamp.len(), "2026-11-21T10:00:00.123456Z".len(), "{stamp}");
        assert!(stamp.starts_with("20") && stamp.ends_with('Z'), "{stamp}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn lines_come_in_pieces_of_at_most_piece_bytes() {
        let mut input = vec![b'x'; 2 * PIECE + 10];
        input.extend_from_slice(b"\nnext\n");
        input.extend_from_slice(&vec![b'y'; PIECE]);
        let mut pieces = Vec::new();
        for_each_piece(&input[..], |p| {
            pieces.push((p.bytes.len(), p.first, p.last));
        });
        let want = [
            (PIECE, true, false),
            (PIECE, false, false),
            (11, false, true),
            (5, true, true),
            (PIECE, true, false),
            (0, false, true),
        ];
        assert_eq!(pieces, want);
    }

    #[test]
    fn a_long_line_is_whole_and_prefixed_once() {
        let mut input = vec![b'x'; 3 * PIECE + 10];
        input.push(b'\n');
        input.extend_from_slice(b"next");
        let (_, err) = run(&input, "[2] ");
        let want = format!("[2] {}\n[2] next\n", "x".repeat(3 * PIECE + 10));
        assert!(err == want, "{} bytes", err.len());
    }

    #[test]
    fn lines_from_many_threads_never_mix() {
        let (console, out, _) = console();
        let threads: Vec<_> = (0..4)
            .map(|r| {
                let console = console.clone();
                std::thread::spawn(move || {
                    // Every fifth line is longer than a piece.
                    let lines: String = (0..200)
                        .map(|i| {
                            let n = if i % 5 == 0 { 3 * PIECE / 2 } else { 5000 };
                            format!("{}\n", r.to_string().repeat(n))
                        })
                        .collect();
                    let sink =
                        look(&format!("[{r}] "), false, true).sink(&console, Stream::Stdout, None);
                    forward(lines.as_bytes(), sink);
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let text = out.text();
        assert_eq!(text.lines().count(), 800);
        for l in text.lines() {
            let r = &l[1..2];
            let body = &l[4..];
            assert!(body.len() == 5000 || body.len() == 3 * PIECE / 2);
            assert!(body.bytes().all(|b| b == r.as_bytes()[0]), "mixed line");
        }
    }

    #[test]
    fn a_silent_open_line_loses_its_turn_after_the_stall() {
        let (console, out, _) = console();
        let w = WriterId::new();
        console
            .write_piece(w, Stream::Stdout, b"[0] aaa", 4, false)
            .unwrap();
        let t0 = std::time::Instant::now();
        console.write(Stream::Stdout, b"other\n").unwrap();
        assert!(t0.elapsed() >= STALL);
        console
            .write_piece(w, Stream::Stdout, b"[0] bbb\n", 4, true)
            .unwrap();
        assert_eq!(out.text(), "[0] aaa\nother\n[0] bbb\n");
    }
}
