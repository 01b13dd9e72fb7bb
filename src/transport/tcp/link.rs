//! One TCP connection as a non-blocking [`Link`], and the polls on a connection the other
//! transports share (they keep their pair's TCP connection to notice a peer that dies).
//!
//! The send buffer ([`send_buffer_for`]) is 128 KiB (the kernel doubles it) to a peer on the same
//! host, 4 MiB across hosts, or `PSY_TCP_SNDBUF` bytes. Over loopback a sender that may run far
//! ahead of its receiver writes megabytes into socket memory that the receiver then reads back
//! from beyond the caches; a 128 KiB buffer keeps sender and receiver within a few hundred KiB of
//! each other. Measured (`results/tcp-sndbuf/`): 0.33–0.80 of the time for every collective
//! from 256 KiB to 64 MiB (all-reduce of 1 MiB excepted, 10% slower), no change below. Below 64 KiB loopback stalls (a 64 KiB-segment sender
//! waits on delayed acknowledgements: 19 ms per 64 KiB broadcast at 32 KiB), hence the floor.
//! With it, writing large messages in slices (as send/recv did until then, `results/archive/tcp-slices/`)
//! gained nothing, so every message is written whole.

use crate::transport::{Link, TransportKind};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// A TCP connection to one peer.
pub struct TcpLink {
    stream: TcpStream,
}

/// `PSY_TCP_SNDBUF`: the send buffer of every TCP link, in bytes (clamped to
/// [`MIN_SEND_BUFFER`]..=64 MiB; the kernel doubles it and caps it at `net.core.wmem_max`).
pub const SEND_BUFFER_VAR: &str = "PSY_TCP_SNDBUF";
/// The send buffer of a link to a peer on the same host.
pub const SAME_HOST_SEND_BUFFER: usize = 128 << 10;
/// The send buffer of a link to a peer on another host.
pub const CROSS_HOST_SEND_BUFFER: usize = 4 << 20;
/// The smallest send buffer `PSY_TCP_SNDBUF` may set.
pub const MIN_SEND_BUFFER: usize = 64 << 10;

/// The value of [`SEND_BUFFER_VAR`] in bytes (a `K`/`M` suffix allowed), clamped; `None` when
/// unset or unreadable.
pub fn parse_send_buffer(text: Option<&str>) -> Option<usize> {
    let bytes = crate::units::parse_size(text?.trim())?;
    Some((bytes.min(64 << 20) as usize).max(MIN_SEND_BUFFER))
}

/// The send buffer for a link: `set` (from [`SEND_BUFFER_VAR`]) if given, else by where the peer
/// lives.
pub fn send_buffer_for(same_host: bool, set: Option<usize>) -> usize {
    set.unwrap_or(if same_host {
        SAME_HOST_SEND_BUFFER
    } else {
        CROSS_HOST_SEND_BUFFER
    })
}

impl TcpLink {
    /// Wraps an authenticated stream, switching it to non-blocking mode with a send buffer of
    /// `send_buffer` bytes ([`send_buffer_for`]).
    pub fn new(stream: TcpStream, send_buffer: usize) -> io::Result<TcpLink> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        socket2::SockRef::from(&stream).set_send_buffer_size(send_buffer)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_send_buffer_follows_the_peer_unless_set() {
        assert_eq!(send_buffer_for(true, None), 128 << 10);
        assert_eq!(send_buffer_for(false, None), 4 << 20);
        assert_eq!(send_buffer_for(true, Some(1 << 20)), 1 << 20);
        assert_eq!(parse_send_buffer(Some("256K")), Some(256 << 10));
        assert_eq!(parse_send_buffer(Some(" 8 ")), Some(MIN_SEND_BUFFER));
        assert_eq!(parse_send_buffer(Some("1G")), Some(64 << 20));
        assert_eq!(parse_send_buffer(Some("lots")), None);
        assert_eq!(parse_send_buffer(None), None);
    }

    #[test]
    fn a_link_asks_the_kernel_for_its_send_buffer() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let link = TcpLink::new(stream, 200 << 10).unwrap();
        let got = socket2::SockRef::from(&link.stream)
            .send_buffer_size()
            .unwrap();
        // Linux doubles the request for its bookkeeping.
        assert_eq!(got, 400 << 10);
    }
}
