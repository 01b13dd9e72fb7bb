//! One TCP connection as a non-blocking [`Link`], and the polls on a connection the other
//! transports share (they keep their pair's TCP connection to notice a peer that dies).

use crate::transport::{Link, TransportKind};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// A TCP connection to one peer.
pub struct TcpLink {
    stream: TcpStream,
}

impl TcpLink {
    /// Wraps an authenticated stream, switching it to non-blocking mode.
    pub fn new(stream: TcpStream) -> io::Result<TcpLink> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        Ok(TcpLink { stream })
    }
}

impl Link for TcpLink {
    fn write_some(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.stream.write_vectored(bufs)
    }

    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.read(buf)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.stream.as_raw_fd())
    }

    fn pending(&self) -> bool {
        poll_readable(self.stream.as_raw_fd(), Duration::ZERO)
    }

    fn close_write(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Write);
    }

    fn transport(&self) -> TransportKind {
        TransportKind::Tcp
    }
}

/// Waits until `fd` is readable (data, end of stream or an error to report) or `timeout`
/// passes (zero: only looks); true if it is readable.
pub(crate) fn poll_readable(fd: RawFd, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: `p` is a valid pollfd for the duration of the call and we pass a count of 1.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

/// Looks, without blocking or consuming anything, whether the peer has closed its end of
/// `stream` (a liveness connection on which no data flows): true at end of stream.
pub(crate) fn peer_closed(stream: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    // SAFETY: `byte` is a valid writable buffer of 1 byte for the duration of the call, and the
    // descriptor belongs to `stream`, which is alive. MSG_PEEK leaves the stream as it is; a
    // return of 0 is end of stream.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            byte.as_mut_ptr().cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n == 0
}
