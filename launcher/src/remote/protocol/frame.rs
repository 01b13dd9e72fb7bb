//! Frames on a byte stream: a little-endian `u32` length, then the body (pure).

use super::codec::WireError;

/// The largest frame accepted (a piece of a rank's output is at most [`crate::output::PIECE`]).
pub const MAX_FRAME: usize = 16 << 20;

/// Splits a byte stream into frame bodies: feed it what was read, take whole frames out.
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: Vec<u8>,
    start: usize,
}

impl FrameReader {
    /// An empty reader.
    pub fn new() -> FrameReader {
        FrameReader::default()
    }

    /// Adds bytes read from the stream.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame body, `Ok(None)` if more bytes are needed, or an error for a frame
    /// longer than [`MAX_FRAME`] (the stream cannot be trusted after that).
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, WireError> {
        let have = &self.buf[self.start..];
        let Some(len) = have.get(..4) else {
            return Ok(None);
        };
        let mut word = [0u8; 4];
        word.copy_from_slice(len);
        let n = u32::from_le_bytes(word) as usize;
        if n > MAX_FRAME {
            return Err(WireError(format!(
                "a frame of {n} bytes (at most {MAX_FRAME}); is something else writing to the \
                 agent's stdout?"
            )));
        }
        if have.len() < 4 + n {
            return Ok(None);
        }
        let body = have[4..4 + n].to_vec();
        self.start += 4 + n;
        if self.start > 1 << 20 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        Ok(Some(body))
    }

    /// Whether bytes of an unfinished frame are held.
    pub fn is_mid_frame(&self) -> bool {
        self.start < self.buf.len()
    }
}
