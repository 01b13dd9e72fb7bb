//! One TCP connection as a non-blocking [`Link`], and the polls on a connection the other
//! transports share (they keep their pair's TCP connection to notice a peer that dies).
//!
//! Point-to-point messages of 1 MiB and more ([`SLICED_FROM`]) are written in slices of 256 KiB
//! ([`SLICE`]), with the step engine reading between them. Measured, not derived: a 2-rank ring
//! shift (even ranks send then receive, odd ranks the reverse, as psybench's) of 1 MiB took 347 µs
//! written whole and 244 µs sliced here, 64 MiB 41.4 ms and 27.3 ms (`results/tcp-slices/`). A C
//! probe without psyne (`results/tcp-loopback/`) gains the same way when both sides send at once,
//! and not when one side only sends, whose writes it found best whole; why the kernel's loopback
//! behaves so is not worked out.
//! Collectives are left whole: their messages gained at some sizes and lost at others.

use crate::transport::{Link, Traffic, TransportKind};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// A TCP connection to one peer.
pub struct TcpLink {
    stream: TcpStream,
    /// Whether the link carries point-to-point messages now ([`Link::set_traffic`]).
    point_to_point: bool,
    /// Whether the message being written goes out in slices (decided at its first write).
    slicing: bool,
}

/// Point-to-point messages from this size on (header included) are written in slices.
pub const SLICED_FROM: usize = 1 << 20;
/// The most bytes one write of a sliced message takes.
pub const SLICE: usize = 256 << 10;

impl TcpLink {
    /// Wraps an authenticated stream, switching it to non-blocking mode.
    pub fn new(stream: TcpStream) -> io::Result<TcpLink> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        Ok(TcpLink {
            stream,
            point_to_point: false,
            slicing: false,
        })
    }
}

impl Link for TcpLink {
    fn set_traffic(&mut self, traffic: Traffic) {
        self.point_to_point = traffic == Traffic::Eager;
    }

    fn write_some(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        // A write whose first slice holds (the rest of) a header starts a message.
        if bufs.first().is_some_and(|h| !h.is_empty()) {
            let total: usize = bufs.iter().map(|b| b.len()).sum();
            self.slicing = self.point_to_point && total >= SLICED_FROM;
        }
        if !self.slicing {
            return self.stream.write_vectored(bufs);
        }
        let (slice, used) = first_bytes(bufs, SLICE);
        self.stream.write_vectored(&slice[..used])
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

/// The first `limit` bytes of `bufs` (a header and its data: the first two slices), and how many
/// slices they take.
fn first_bytes<'a>(bufs: &'a [io::IoSlice<'a>], limit: usize) -> ([io::IoSlice<'a>; 2], usize) {
    let mut out = [io::IoSlice::new(&[]), io::IoSlice::new(&[])];
    let mut left = limit;
    let mut used = 0;
    for (slot, b) in out.iter_mut().zip(bufs) {
        if left == 0 {
            break;
        }
        let n = b.len().min(left);
        *slot = io::IoSlice::new(&b[..n]);
        left -= n;
        used += 1;
    }
    (out, used)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_takes_the_header_and_the_first_bytes_of_the_data() {
        let (h, d) = ([7u8; 40], vec![1u8; 1 << 20]);
        let bufs = [io::IoSlice::new(&h), io::IoSlice::new(&d)];
        let (s, used) = first_bytes(&bufs, SLICE);
        assert_eq!(used, 2);
        assert_eq!((s[0].len(), s[1].len()), (40, SLICE - 40));
        let rest = [io::IoSlice::new(&[]), io::IoSlice::new(&d[..100])];
        let (s, used) = first_bytes(&rest, SLICE);
        assert_eq!((used, s[0].len(), s[1].len()), (2, 0, 100));
    }
}
