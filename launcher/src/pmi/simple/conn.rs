//! One rank's end of its `PMI_FD` socket: non-blocking, with bounded input and output buffers.

use super::wire::{self, Message};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;

/// The longest request accepted (a `put` of the longest key and value is about 1.1 KB).
pub const MESSAGE_MAX: usize = 16 * 1024;
/// Replies waiting for a rank that does not read them, before its connection is dropped.
pub const OUTPUT_MAX: usize = 1 << 20;

/// Where a rank's connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Open, not finalized.
    Open,
    /// It sent `finalize` (or `abort`): its end closing is expected.
    Done,
    /// Closed before finalize, or dropped for a protocol error.
    Lost,
}

/// A rank's connection.
#[derive(Debug)]
pub struct Conn {
    /// The rank.
    pub rank: usize,
    /// The socket (`None` once closed).
    stream: Option<UnixStream>,
    input: Vec<u8>,
    output: Vec<u8>,
    /// Where it stands.
    pub state: State,
    /// Whether it has sent a command yet.
    pub spoke: bool,
    /// Close once the queued replies are written.
    closing: bool,
}

/// What reading from a connection gave.
#[derive(Debug)]
pub enum Read1 {
    /// Complete messages (possibly none yet).
    Messages(Vec<Message>),
    /// Messages received before the peer closed its end.
    Closed(Vec<Message>),
    /// Messages before bytes that are not PMI, and why.
    Garbage(Vec<Message>, String),
}

impl Conn {
    /// A connection over `stream` (made non-blocking here).
    pub fn new(rank: usize, stream: UnixStream) -> std::io::Result<Conn> {
        stream.set_nonblocking(true)?;
        Ok(Conn {
            rank,
            stream: Some(stream),
            input: Vec::new(),
            output: Vec::new(),
            state: State::Open,
            spoke: false,
            closing: false,
        })
    }

    /// The socket's descriptor, while open.
    pub fn fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.stream.as_ref().map(|s| s.as_raw_fd())
    }

    /// Whether replies are waiting to be written.
    pub fn wants_write(&self) -> bool {
        !self.output.is_empty()
    }

    /// Reads what the socket has and splits it into messages.
    pub fn read(&mut self) -> Read1 {
        let mut closed = false;
        let mut chunk = [0u8; 4096];
        while let Some(stream) = self.stream.as_mut() {
            match stream.read(&mut chunk) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => self.input.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(_) => {
                    closed = true;
                    break;
                }
            }
            if self.input.len() > MESSAGE_MAX {
                break; // next_message reports it once no message completes.
            }
        }
        let mut messages = Vec::new();
        loop {
            match wire::next_message(&self.input, MESSAGE_MAX) {
                Ok(Some((m, used))) => {
                    self.input.drain(..used);
                    messages.push(m);
                }
                Ok(None) if closed => return Read1::Closed(messages),
                Ok(None) => return Read1::Messages(messages),
                Err(e) => return Read1::Garbage(messages, e.0),
            }
        }
    }

    /// Queues a reply and writes what the socket takes now. False if the rank has let too many
    /// replies pile up (the caller drops it).
    pub fn send(&mut self, bytes: &[u8]) -> bool {
        if self.stream.is_none() {
            return true;
        }
        self.output.extend_from_slice(bytes);
        self.flush();
        self.output.len() <= OUTPUT_MAX
    }

    /// Writes queued replies until the socket would block; closes it then if asked to and all
    /// is written.
    pub fn flush(&mut self) {
        self.write_out();
        if self.closing && self.output.is_empty() {
            self.close();
        }
    }

    fn write_out(&mut self) {
        while let (Some(stream), false) = (self.stream.as_mut(), self.output.is_empty()) {
            match stream.write(&self.output) {
                Ok(0) => break,
                Ok(n) => {
                    self.output.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(_) => {
                    // The rank is gone; reading will tell.
                    self.output.clear();
                    break;
                }
            }
        }
    }

    /// Closes the socket once the queued replies are written (or cannot be).
    pub fn close_after_replies(&mut self) {
        self.closing = true;
        self.flush();
    }

    /// Closes the socket, keeping the state.
    pub fn close(&mut self) {
        self.stream = None;
        self.input = Vec::new();
        self.output = Vec::new();
    }
}
