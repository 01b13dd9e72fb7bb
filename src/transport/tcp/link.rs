//! One TCP connection as a non-blocking [`Link`].

use crate::transport::Link;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};

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
        let mut p = libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `p` is a valid pollfd for the duration of the call; a zero timeout never blocks.
        unsafe { libc::poll(&mut p, 1, 0) > 0 }
    }

    fn close_write(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Write);
    }

    fn transport(&self) -> &'static str {
        "tcp"
    }
}
