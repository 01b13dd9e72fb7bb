//! psyrun's console: its stdout and stderr behind one lock, taken in turns by whole lines.
//!
//! A short line is written in one `write_all` under the lock. A long line is written in pieces
//! as it is read ([`Console::write_piece`]), and between its first piece and its last the line
//! is *open*: every other writer (other ranks, psyrun's own messages) waits, so no other line
//! lands inside it, and the ranks held back block on their full pipes rather than psyrun
//! buffering their output. A writer whose line is open but who has written nothing for
//! [`STALL`] (a rank that printed half a line and went quiet) loses its turn when someone else
//! wants to write: its line is ended on the console there with a newline, and the rest of it,
//! if it ever comes, starts a new line with its prefix again.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long an open line may stay silent before another writer may end it and go ahead.
pub const STALL: Duration = Duration::from_secs(1);

/// One writer of lines to the console (one rank's stdout or stderr).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterId(u64);

impl WriterId {
    /// A writer id no other writer in this process has.
    pub fn new() -> WriterId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        WriterId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

impl Default for WriterId {
    fn default() -> WriterId {
        WriterId::new()
    }
}

/// A line whose first piece is on the console and whose last is not yet.
#[derive(Debug, Clone, Copy)]
struct Open {
    writer: WriterId,
    stream: Stream,
    /// When its writer last wrote a piece.
    last: Instant,
}

struct State {
    streams: [Box<dyn Write + Send>; 2],
    open: Option<Open>,
}

impl State {
    fn write(&mut self, stream: Stream, bytes: &[u8]) -> std::io::Result<()> {
        let w = &mut self.streams[stream as usize];
        w.write_all(bytes)?;
        w.flush()
    }
}

/// psyrun's two output streams, behind one lock: with `2>&1` both are the same pipe, where two
/// large writes from different locks could still mix.
pub struct Console {
    state: Mutex<State>,
    /// Signalled when an open line closes.
    turn: Condvar,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Console")
    }
}

impl Console {
    /// psyrun's own stdout and stderr, unbuffered (duplicated descriptors).
    pub fn stdio() -> std::io::Result<Console> {
        use std::os::fd::AsFd;
        let out = std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
        let err = std::fs::File::from(std::io::stderr().as_fd().try_clone_to_owned()?);
        Ok(Console::new(Box::new(out), Box::new(err)))
    }

    /// A console over any two writers (tests use in-memory ones). They should be unbuffered, or
    /// flush on every write.
    pub fn new(out: Box<dyn Write + Send>, err: Box<dyn Write + Send>) -> Console {
        Console {
            state: Mutex::new(State {
                streams: [out, err],
                open: None,
            }),
            turn: Condvar::new(),
        }
    }

    /// Writes `bytes` (one or more whole lines) to `stream` in one `write_all`, in its turn.
    pub fn write(&self, stream: Stream, bytes: &[u8]) -> std::io::Result<()> {
        self.turn(None).write(stream, bytes)
    }

    /// Writes one piece of a line of `writer`'s in its turn: `framed` is the line's head (its
    /// timestamp and prefix, `head` bytes) followed by the piece. The head is written only if
    /// the line is not open already (its first piece, or the rest of a line that lost its turn).
    /// Unless `last`, the line stays open and other writers wait (see the module docs).
    pub fn write_piece(
        &self,
        writer: WriterId,
        stream: Stream,
        framed: &[u8],
        head: usize,
        last: bool,
    ) -> std::io::Result<()> {
        let mut state = self.turn(Some(writer));
        let continuing = state.open.is_some_and(|o| o.writer == writer);
        let bytes = if continuing {
            framed.get(head..).unwrap_or_default()
        } else {
            framed
        };
        let written = state.write(stream, bytes);
        if last {
            state.open = None;
            self.turn.notify_all();
        } else {
            state.open = Some(Open {
                writer,
                stream,
                last: Instant::now(),
            });
        }
        written
    }

    /// Ends `writer`'s open line, if it has one, with a newline (its stream ended mid-line).
    pub fn end_line(&self, writer: WriterId) {
        let mut state = self.lock();
        if let Some(open) = state.open.filter(|o| o.writer == writer) {
            let _ = state.write(open.stream, b"\n");
            state.open = None;
            self.turn.notify_all();
        }
    }

    /// Prints one of psyrun's own messages on stderr: `psyrun: TEXT`.
    pub fn message(&self, text: &str) {
        // If stderr is gone there is nowhere left to report anything.
        let _ = self.write(Stream::Stderr, format!("psyrun: {text}\n").as_bytes());
    }

    /// The lock, taken even if a panicking writer poisoned it (the writers stay usable).
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The lock, once no line but `me`'s is open: waits while another writer's line is open and
    /// that writer wrote within [`STALL`]; a line silent longer is ended with a newline.
    fn turn(&self, me: Option<WriterId>) -> MutexGuard<'_, State> {
        let mut state = self.lock();
        loop {
            let Some(open) = state.open else { return state };
            if Some(open.writer) == me {
                return state;
            }
            let quiet = open.last.elapsed();
            if quiet >= STALL {
                let _ = state.write(open.stream, b"\n");
                state.open = None;
                return state;
            }
            state = match self.turn.wait_timeout(state, STALL - quiet) {
                Ok((s, _)) => s,
                Err(p) => p.into_inner().0,
            };
        }
    }
}

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
