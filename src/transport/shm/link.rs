//! One pair of rings in a shared segment as a non-blocking [`Link`].

use super::ring::Ring;
use super::segment::Segment;
use crate::transport::Link;
use std::io::{self, IoSlice};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// How long one futex wait lasts at most before the peer's liveness is checked again.
const LIVENESS_CHECK: Duration = Duration::from_millis(5);

/// A shared-memory link to a peer on the same host.
pub struct ShmLink {
    tx: Ring,
    rx: Ring,
    /// The authenticated TCP connection to the same peer: no data flows on it after the upgrade;
    /// its end of stream tells that the peer's process is gone (or gave up the group).
    liveness: TcpStream,
    // Declared last: the mapping must outlive the rings that point into it (fields drop in order).
    _segment: Segment,
}

impl ShmLink {
    /// A link sending on `tx` and receiving on `rx`, both inside `segment`.
    pub(crate) fn new(
        segment: Segment,
        tx: Ring,
        rx: Ring,
        liveness: TcpStream,
    ) -> io::Result<ShmLink> {
        liveness.set_nonblocking(true)?;
        Ok(ShmLink {
            tx,
            rx,
            liveness,
            _segment: segment,
        })
    }

    /// Looks (without blocking) whether the peer's end of the TCP connection has closed; if so,
    /// marks the receiving ring closed, so reads drain what is there and then see the end, and
    /// writes fail.
    fn probe_peer(&self) {
        let mut byte = [0u8; 1];
        // SAFETY: `byte` is a valid writable buffer of 1 byte for the duration of the call, and
        // the descriptor belongs to `self.liveness`, which is alive. MSG_PEEK leaves the stream
        // as it is; a return of 0 is end of stream.
        let n = unsafe {
            libc::recv(
                self.liveness.as_raw_fd(),
                byte.as_mut_ptr().cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        if n == 0 {
            // The peer can no longer write: closing its ring on our side is what it would do.
            self.rx.close();
        }
    }
}

impl Link for ShmLink {
    fn write_some(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if self.rx.is_closed() {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the peer closed its side of the shared-memory link (it exited or gave up the group)",
            ));
        }
        match self.tx.write(bufs) {
            0 if bufs.iter().all(|b| b.is_empty()) => Ok(0),
            0 => Err(io::ErrorKind::WouldBlock.into()),
            n => Ok(n),
        }
    }

    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.rx.read(buf) {
            0 if buf.is_empty() => Ok(0),
            // Closed: whatever was written before the close has been read (a second look
            // closes the race between the last write and the close flag).
            0 if self.rx.is_closed() => Ok(self.rx.read(buf)),
            0 => Err(io::ErrorKind::WouldBlock.into()),
            n => Ok(n),
        }
    }

    fn poll_fd(&self) -> Option<RawFd> {
        None
    }

    fn block(&self, read: bool, write: bool, timeout: Duration) {
        let t = timeout.min(LIVENESS_CHECK);
        if read && write {
            // Either may unblock the step: take turns, briefly.
            self.rx.wait_readable(t / 2);
            self.tx.wait_writable(t / 2);
        } else if read {
            self.rx.wait_readable(t);
        } else if write {
            self.tx.wait_writable(t);
        }
        self.probe_peer();
    }

    fn pending(&self) -> bool {
        self.probe_peer();
        self.rx.readable() > 0 || self.rx.is_closed()
    }

    fn close_write(&mut self) {
        self.tx.close();
        let _ = self.liveness.shutdown(Shutdown::Write);
    }

    fn transport(&self) -> &'static str {
        "shm"
    }
}
