//! Forwarding the ranks' output, line by line, without ever interleaving two lines.
//!
//! Every line goes to psyrun's stdout or stderr as one `write_all` on an unbuffered descriptor,
//! made while holding the [`Console`]'s one lock, so two lines never mix, even with `2>&1`. psyrun's own
//! messages go through the same lock. A last line without a newline is flushed at end of file
//! with a newline added on the console (the `--output-dir` copy keeps the bytes exactly). A line
//! longer than [`MAX_LINE`] is forwarded in pieces of that size, each ended with a newline on the
//! console, so a program that never prints a newline cannot make psyrun hold unbounded memory.

use crate::args::Launch;
use crate::Error;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// The longest piece forwarded as one line: longer lines are split.
pub const MAX_LINE: usize = 1 << 20;

/// How long psyrun waits, once every rank has ended, for the ranks' output pipes to close (a
/// process that left its rank's process group may still hold them open).
pub const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// Which of a rank's streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout = 0,
    /// Standard error.
    Stderr = 1,
}

impl Stream {
    /// `stdout` or `stderr`, as used in `--output-dir` file names.
    pub fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }

    /// The stream numbered `n` (as the agents number them): 0 is stdout, anything else stderr.
    pub fn from_number(n: u8) -> Stream {
        if n == 0 {
            Stream::Stdout
        } else {
            Stream::Stderr
        }
    }
}

/// psyrun's two output streams, behind one lock: with `2>&1` both are the same pipe, where two
/// large writes from different locks could still mix.
pub struct Console {
    streams: Mutex<[Box<dyn Write + Send>; 2]>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Console")
    }
}

impl Console {
    /// psyrun's own stdout and stderr, unbuffered (duplicated descriptors).
    pub fn stdio() -> std::io::Result<Console> {
        let out = File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
        let err = File::from(std::io::stderr().as_fd().try_clone_to_owned()?);
        Ok(Console::new(Box::new(out), Box::new(err)))
    }

    /// A console over any two writers (tests use in-memory ones). They should be unbuffered, or
    /// flush on every write.
    pub fn new(out: Box<dyn Write + Send>, err: Box<dyn Write + Send>) -> Console {
        Console {
            streams: Mutex::new([out, err]),
        }
    }

    /// Writes `bytes` (one or more whole lines) to `stream` in one `write_all` under the lock.
    pub fn write(&self, stream: Stream, bytes: &[u8]) -> std::io::Result<()> {
        // A panic while holding the lock leaves the writers usable: take it anyway.
        let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        let w = &mut streams[stream as usize];
        w.write_all(bytes)?;
        w.flush()
    }

    /// Prints one of psyrun's own messages on stderr: `psyrun: TEXT`.
    pub fn message(&self, text: &str) {
        // If stderr is gone there is nowhere left to report anything.
        let _ = self.write(Stream::Stderr, format!("psyrun: {text}\n").as_bytes());
    }
}

/// Where one rank stream's lines go.
#[derive(Debug)]
pub struct Sink<'a> {
    /// psyrun's console.
    pub console: &'a Console,
    /// Which console stream.
    pub stream: Stream,
    /// The prefix of every console line (`[host][3] ` with `--tag-output`, else empty).
    pub prefix: String,
    /// Put the time each line was read before the prefix (`--timestamp-output`).
    pub timestamp: bool,
    /// Show the lines on the console at all (`--ranks` leaves some ranks out); the file, if
    /// any, gets them either way.
    pub show: bool,
    /// The `--output-dir` file, if any, and its path for messages.
    pub file: Option<RankFile>,
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

impl Look {
    /// The look of rank `rank`, which runs on `host`, under `launch`.
    pub fn of(launch: &Launch, host: &str, rank: usize) -> Look {
        Look {
            prefix: if launch.tag_output {
                format!("[{host}][{rank}] ")
            } else {
                String::new()
            },
            timestamp: launch.timestamp_output,
            show: launch
                .show_ranks
                .as_ref()
                .map_or(true, |s| s.contains(rank)),
        }
    }

    /// A sink for one of the rank's streams with this look, and its `--output-dir` file if any.
    pub fn sink<'a>(
        &self,
        console: &'a Console,
        stream: Stream,
        file: Option<RankFile>,
    ) -> Sink<'a> {
        Sink {
            console,
            stream,
            prefix: self.prefix.clone(),
            timestamp: self.timestamp,
            show: self.show,
            file,
        }
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

/// Copies `reader` to `sink` line by line until end of file or a read error. Console write
/// errors (a closed stdout) are ignored so the rank never blocks on a full pipe; a failing file
/// is reported once and then no longer written.
pub fn forward(reader: impl Read, mut sink: Sink<'_>) {
    let mut out: Vec<u8> = Vec::new();
    for_each_line(reader, |line| {
        emit(line, std::time::SystemTime::now(), &mut out, &mut sink)
    });
}

/// Calls `f` with each line read from `reader` (newline included; a last line without one as
/// it is; pieces of at most [`MAX_LINE`] bytes), until end of file or a read error.
pub fn for_each_line(reader: impl Read, mut f: impl FnMut(&[u8])) {
    let mut reader = BufReader::with_capacity(64 * 1024, reader);
    let mut line: Vec<u8> = Vec::new();
    loop {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if buf.is_empty() {
            break;
        }
        let (take, complete) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        let room = MAX_LINE - line.len();
        let take = take.min(room);
        line.extend_from_slice(&buf[..take]);
        reader.consume(take);
        if (complete && line.last() == Some(&b'\n')) || line.len() >= MAX_LINE {
            f(&line);
            line.clear();
        }
    }
    if !line.is_empty() {
        f(&line);
    }
}

/// Writes one line read at `time` to `sink`: to its file, and (unless hidden) to the console
/// with the timestamp and prefix, a newline added if it had none. `out` is scratch space.
pub fn emit(line: &[u8], time: std::time::SystemTime, out: &mut Vec<u8>, sink: &mut Sink<'_>) {
    if let Some((file, path)) = &mut sink.file {
        if let Err(e) = file.write_all(line) {
            sink.console.message(&format!(
                "writing {}: {e}; no longer writing that file",
                path.display()
            ));
            sink.file = None;
        }
    }
    if !sink.show {
        return;
    }
    out.clear();
    if sink.timestamp {
        out.extend_from_slice(timestamp(time).as_bytes());
        out.push(b' ');
    }
    out.extend_from_slice(sink.prefix.as_bytes());
    out.extend_from_slice(line);
    if line.last() != Some(&b'\n') {
        out.push(b'\n');
    }
    let _ = sink.console.write(sink.stream, out);
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
    use super::*;
    use std::sync::Arc;

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

    fn run(input: &[u8], prefix: &str) -> (String, String) {
        let (out, err) = (Shared::default(), Shared::default());
        let console = Console::new(Box::new(out.clone()), Box::new(err.clone()));
        forward(
            input,
            Sink {
                console: &console,
                stream: Stream::Stderr,
                prefix: prefix.into(),
                timestamp: false,
                show: true,
                file: None,
            },
        );
        let s = |x: Shared| String::from_utf8(x.0.lock().unwrap().clone()).unwrap();
        (s(out), s(err))
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
        let (out, err) = (Shared::default(), Shared::default());
        let console = Console::new(Box::new(out.clone()), Box::new(err.clone()));
        forward(
            &b"one\ntwo"[..],
            Sink {
                console: &console,
                stream: Stream::Stdout,
                prefix: "[h][1] ".into(),
                timestamp: false,
                show: false,
                file: Some((File::create(&path).unwrap(), path.clone())),
            },
        );
        assert!(out.0.lock().unwrap().is_empty());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\ntwo");
        forward(
            &b"x\n"[..],
            Sink {
                console: &console,
                stream: Stream::Stdout,
                prefix: "[h][1] ".into(),
                timestamp: true,
                show: true,
                file: None,
            },
        );
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let (stamp, rest) = text.split_once(' ').unwrap();
        assert_eq!(rest, "[h][1] x\n");
        assert_eq!(stamp.len(), "2026-11-21T10:00:00.123456Z".len(), "{stamp}");
        assert!(stamp.starts_with("20") && stamp.ends_with('Z'), "{stamp}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn huge_lines_are_split_at_the_limit() {
        let mut input = vec![b'x'; MAX_LINE + 10];
        input.push(b'\n');
        input.extend_from_slice(b"next\n");
        let (_, err) = run(&input, "");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].len(), MAX_LINE);
        assert_eq!(lines[1], "x".repeat(10));
        assert_eq!(lines[2], "next");
    }

    #[test]
    fn lines_from_many_threads_never_mix() {
        let out = Shared::default();
        let console = Arc::new(Console::new(
            Box::new(out.clone()),
            Box::new(Shared::default()),
        ));
        let threads: Vec<_> = (0..4)
            .map(|r| {
                let console = console.clone();
                std::thread::spawn(move || {
                    let line = format!("{}\n", r.to_string().repeat(5000));
                    let input = line.repeat(200);
                    forward(
                        input.as_bytes(),
                        Sink {
                            console: &console,
                            stream: Stream::Stdout,
                            prefix: format!("[{r}] "),
                            timestamp: false,
                            show: true,
                            file: None,
                        },
                    );
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 800);
        for l in text.lines() {
            let r = &l[1..2];
            assert_eq!(l, format!("[{r}] {}", r.repeat(5000)));
        }
    }
}
