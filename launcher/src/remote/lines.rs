//! psyrun's side of the ranks' output in a multi-host job: the agents' Output frames to the
//! console and the `--output-dir` files, every line whole.
//!
//! Frames from every host arrive on one thread, interleaved. A line longer than
//! [`crate::output::PIECE`] comes in several frames and is open on the console from its first to
//! its last; frames of other rank streams that arrive meanwhile are held back, each stream's in
//! order, and written once the line closes. What is held is bounded by [`HOLD_LIMIT`] bytes:
//! past it, or when the open line's host is lost, the open line is ended on the console where
//! it is (its rest, if any, follows as a new line with its prefix again).

use crate::output::{Console, Look, Piece, RankFiles, Sink, Stream};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The most output bytes held back while another rank's long line is open.
pub const HOLD_LIMIT: usize = 64 << 20;

/// A rank stream: (rank, 0 for stdout or 1 for stderr).
type Key = (usize, usize);

/// One Output frame's content.
#[derive(Debug)]
pub struct Frame {
    /// When the agent read it, microseconds since the Unix epoch.
    pub time_us: u64,
    /// The line goes on in the stream's next frame.
    pub more: bool,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// Per-rank output destinations on psyrun's side.
pub struct Outputs {
    /// Each rank's stdout and stderr sinks.
    sinks: Vec<[Sink; 2]>,
    /// Each rank's host.
    host_of: Vec<usize>,
    /// The stream whose line is open on the console, if any.
    open: Option<Key>,
    /// Frames held back while another stream's line is open.
    held: BTreeMap<Key, VecDeque<Frame>>,
    held_bytes: usize,
}

impl Outputs {
    /// Destinations for every rank: the console as `looks` say, and `files`; `host_of` names
    /// each rank's host.
    pub fn new(
        console: &Arc<Console>,
        looks: &[Look],
        files: Vec<RankFiles>,
        host_of: Vec<usize>,
    ) -> Outputs {
        let sinks = looks
            .iter()
            .zip(files)
            .map(|(look, [out, err])| {
                [
                    look.sink(console, Stream::Stdout, out),
                    look.sink(console, Stream::Stderr, err),
                ]
            })
            .collect();
        Outputs {
            sinks,
            host_of,
            open: None,
            held: BTreeMap::new(),
            held_bytes: 0,
        }
    }

    /// Takes one Output frame of rank `rank`'s stream `stream` (0 stdout, else stderr).
    pub fn frame(&mut self, rank: usize, stream: u8, frame: Frame) {
        if rank >= self.sinks.len() {
            return;
        }
        let key = (rank, Stream::from_number(stream) as usize);
        if self.open.map_or(true, |o| o == key) && !self.held.contains_key(&key) {
            self.write(key, &frame);
        } else {
            self.held_bytes += frame.bytes.len();
            self.held.entry(key).or_default().push_back(frame);
            if self.held_bytes > HOLD_LIMIT {
                self.break_open();
            }
        }
        self.release();
    }

    /// Host `host`'s link is gone: its open line, if any, ends here, and what was held for it
    /// is written.
    pub fn host_closed(&mut self, host: usize) {
        if self
            .open
            .is_some_and(|(rank, _)| self.host_of.get(rank) == Some(&host))
        {
            self.break_open();
        }
        self.release();
    }

    /// Writes every frame still held (the job is over).
    pub fn flush(&mut self) {
        loop {
            self.release();
            if self.held.is_empty() {
                break;
            }
            self.break_open();
        }
        self.break_open();
    }

    /// Writes one frame to its stream's sink; its line is open after it unless it ends it.
    fn write(&mut self, key: Key, frame: &Frame) {
        let piece = Piece {
            bytes: &frame.bytes,
            first: self.open != Some(key),
            last: !frame.more,
        };
        let time = SystemTime::UNIX_EPOCH + Duration::from_micros(frame.time_us);
        self.sinks[key.0][key.1].piece(piece, time);
        self.open = frame.more.then_some(key);
    }

    /// Ends the open line on the console where it is.
    fn break_open(&mut self) {
        if let Some((rank, s)) = self.open.take() {
            self.sinks[rank][s].end_line();
        }
    }

    /// Writes held frames while they may go: the open stream's, or, with no line open, any
    /// stream's (lowest rank first).
    fn release(&mut self) {
        loop {
            let key = match self.open {
                Some(key) => key,
                None => match self.held.keys().next() {
                    Some(&key) => key,
                    None => return,
                },
            };
            let Some(queue) = self.held.get_mut(&key) else {
                return;
            };
            let Some(frame) = queue.pop_front() else {
                return;
            };
            if queue.is_empty() {
                self.held.remove(&key);
            }
            self.held_bytes -= frame.bytes.len();
            self.write(key, &frame);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
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

    fn outputs(ranks: usize) -> (Outputs, Shared) {
        let out = Shared::default();
        let console = Arc::new(Console::new(Box::new(out.clone()), Box::new(Vec::new())));
        let looks: Vec<Look> = (0..ranks)
            .map(|r| Look {
                prefix: format!("[{r}] "),
                timestamp: false,
                show: true,
            })
            .collect();
        let files = (0..ranks).map(|_| [None, None]).collect();
        (
            Outputs::new(&console, &looks, files, (0..ranks).collect()),
            out,
        )
    }

    fn f(more: bool, bytes: &str) -> Frame {
        Frame {
            time_us: 0,
            more,
            bytes: bytes.as_bytes().to_vec(),
        }
    }

    #[test]
    fn other_streams_wait_while_a_long_line_is_open() {
        let (mut o, out) = outputs(3);
        o.frame(0, 0, f(true, "aa"));
        o.frame(1, 0, f(false, "one\n"));
        o.frame(2, 0, f(true, "cc"));
        o.frame(0, 0, f(true, "aa"));
        o.frame(1, 0, f(false, "two\n"));
        o.frame(0, 0, f(false, "a\n"));
        o.frame(2, 0, f(false, "c\n"));
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text, "[0] aaaaa\n[1] one\n[1] two\n[2] ccc\n");
    }

    #[test]
    fn a_lost_host_ends_its_open_line_and_flush_writes_the_rest() {
        let (mut o, out) = outputs(2);
        o.frame(0, 0, f(true, "half"));
        o.frame(1, 0, f(false, "next\n"));
        o.host_closed(0);
        o.frame(1, 1, f(true, "open"));
        o.frame(0, 0, f(false, "x\n"));
        o.flush();
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text, "[0] half\n[1] next\n[0] x\n");
    }
}
