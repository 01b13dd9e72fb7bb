//! One TCP connection as a non-blocking [`Link`], and the polls on a connection the other
//! transports share (they keep their pair's TCP connection to notice a peer that dies).
//!
//! The send buffer ([`send_buffer_for`]) to a peer on the same host is 128 KiB (the kernel
//! doubles it), raised in calls of up to [`SMALL_CALL_MAX`] bytes so that each message is written
//! whole ([`SendBuffer::ByCall`]); 4 MiB across hosts; or `PSY_TCP_SNDBUF` bytes. Over loopback a
//! sender that may run far ahead of its receiver writes megabytes into socket memory that the
//! receiver then reads back from beyond the caches; a 128 KiB buffer keeps sender and receiver
//! within a few hundred KiB of each other. Measured (`results/tcp-sndbuf/`): 0.33–0.80 of the
//! time for every collective from 256 KiB to 64 MiB (all-reduce of 1 MiB excepted, 10% slower),
//! no change below; but in calls of up to 1 MiB a buffer the message fits in was faster
//! (`results/tcp-sndbuf/amd-2026-11-27.md`, `results/tcp-sndbuf/by-call/`), hence the raise.
//! Below 64 KiB loopback stalls (a 64 KiB-segment sender waits on delayed acknowledgements: 19 ms
//! per 64 KiB broadcast at 32 KiB), hence the floor. With it, writing large messages in slices
//! (as send/recv did until then, `results/archive/tcp-slices/`) gained nothing, so every message
//! is written whole.

use crate::transport::{Link, TransportKind};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// A TCP connection to one peer.
pub struct TcpLink {
    stream: TcpStream,
    buffer: SendBuffer,
    /// What the link last asked the kernel for.
    asked: usize,
    /// The bytes of the call whose messages the link sends now ([`Link::set_call_bytes`]).
    call_bytes: usize,
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

/// How a link sizes its send buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendBuffer {
    /// Always this many bytes.
    Fixed(usize),
    /// This many bytes, raised in calls of at most [`SMALL_CALL_MAX`] bytes, for writes of more
    /// than twice this and at most [`WHOLE_MAX`], to a power of two they fit in
    /// ([`SendBuffer::for_write`]).
    ByCall(usize),
}

/// The largest call (its work buffer's bytes) in which a [`SendBuffer::ByCall`] link raises its
/// buffer so that each message is written whole.
pub const SMALL_CALL_MAX: usize = 1 << 20;
/// The largest write (message and header) a [`SendBuffer::ByCall`] link raises its buffer for:
/// half a megabyte and its header. A link raises only for writes that do not fit the base
/// buffer (which the kernel doubles).
pub const WHOLE_MAX: usize = (512 << 10) + 4096;

impl SendBuffer {
    /// The buffer to ask for before writing `bytes` (what is left of the messages queued) in a
    /// call of `call_bytes`.
    pub fn for_write(self, bytes: usize, call_bytes: usize) -> usize {
        match self {
            SendBuffer::Fixed(b) => b,
            SendBuffer::ByCall(base)
                if call_bytes <= SMALL_CALL_MAX && bytes > 2 * base && bytes <= WHOLE_MAX =>
            {
                bytes.next_power_of_two()
            }
            SendBuffer::ByCall(base) => base,
        }
    }

    /// The buffer a link starts with.
    fn initial(self) -> usize {
        match self {
            SendBuffer::Fixed(b) | SendBuffer::ByCall(b) => b,
        }
    }
}

/// The send buffer for a link: `set` (from [`SEND_BUFFER_VAR`]) if given, else by where the peer
/// lives.
pub fn send_buffer_for(same_host: bool, set: Option<usize>) -> SendBuffer {
    match set {
        Some(b) => SendBuffer::Fixed(b),
        None if same_host => SendBuffer::ByCall(SAME_HOST_SEND_BUFFER),
        None => SendBuffer::Fixed(CROSS_HOST_SEND_BUFFER),
    }
}

impl TcpLink {
    /// Wraps an authenticated stream, switching it to non-blocking mode with its send buffer
    /// sized as `buffer` says ([`send_buffer_for`]).
    pub fn new(stream: TcpStream, buffer: SendBuffer) -> io::Result<TcpLink> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        let asked = buffer.initial();
        socket2::SockRef::from(&stream).set_send_buffer_size(asked)?;
        Ok(TcpLink {
            stream,
            buffer,
            asked,
            call_bytes: usize::MAX,
        })
    }
}

impl Link for TcpLink {
    fn write_some(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let bytes = bufs.iter().map(|b| b.len()).sum();
        let want = self.buffer.for_write(bytes, self.call_bytes);
        if want != self.asked {
            socket2::SockRef::from(&self.stream).set_send_buffer_size(want)?;
            self.asked = want;
        }
        self.stream.write_vectored(bufs)
    }

    fn set_call_bytes(&mut self, bytes: usize) {
        self.call_bytes = bytes;
    }

    fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.read(buf)
    }

    fn read_some_split(&mut self, head: &mut [u8], rest: &mut [u8]) -> io::Result<usize> {
        self.stream
            .read_vectored(&mut [io::IoSliceMut::new(head), io::IoSliceMut::new(rest)])
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
        assert_eq!(send_buffer_for(true, None), SendBuffer::ByCall(128 << 10));
        assert_eq!(send_buffer_for(false, None), SendBuffer::Fixed(4 << 20));
        assert_eq!(
            send_buffer_for(true, Some(1 << 20)),
            SendBuffer::Fixed(1 << 20)
        );
        assert_eq!(
            send_buffer_for(false, Some(1 << 20)),
            SendBuffer::Fixed(1 << 20)
        );
        assert_eq!(parse_send_buffer(Some("256K")), Some(256 << 10));
        assert_eq!(parse_send_buffer(Some(" 8 ")), Some(MIN_SEND_BUFFER));
        assert_eq!(parse_send_buffer(Some("1G")), Some(64 << 20));
        assert_eq!(parse_send_buffer(Some("lots")), None);
        assert_eq!(parse_send_buffer(None), None);
    }

    #[test]
    fn a_same_host_buffer_fits_the_messages_of_small_calls_only() {
        let b = SendBuffer::ByCall(128 << 10);
        let small = SMALL_CALL_MAX;
        assert_eq!(b.for_write(8, small), 128 << 10);
        assert_eq!(b.for_write(256 << 10, small), 128 << 10);
        assert_eq!(b.for_write((256 << 10) + 1, small), 512 << 10);
        assert_eq!(b.for_write((512 << 10) + 40, small), 1 << 20);
        assert_eq!(b.for_write(WHOLE_MAX + 1, small), 128 << 10);
        assert_eq!(b.for_write(1 << 20, small), 128 << 10);
        assert_eq!(b.for_write(512 << 10, small + 1), 128 << 10);
        assert_eq!(b.for_write(512 << 10, usize::MAX), 128 << 10);
        assert_eq!(
            SendBuffer::Fixed(64 << 10).for_write(300 << 10, 8),
            64 << 10
        );
    }

    #[test]
    fn a_split_read_fills_the_head_then_the_rest_and_never_reads_past_them() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut peer, _) = listener.accept().unwrap();
        let mut link = TcpLink::new(stream, SendBuffer::Fixed(128 << 10)).unwrap();
        let (mut head, mut rest) = ([0u8; 4], [0u8; 6]);
        let nothing = link.read_some_split(&mut head, &mut rest);
        assert_eq!(nothing.unwrap_err().kind(), io::ErrorKind::WouldBlock);
        peer.write_all(b"headfirst!next").unwrap();
        let mut got = 0;
        while got < 10 {
            let (h, r) = (&mut head[got.min(4)..], &mut rest[got.saturating_sub(4)..]);
            match link.read_some_split(h, r) {
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    poll_readable(link.stream.as_raw_fd(), Duration::from_secs(5));
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!((&head, &rest), (b"head", b"first!"));
        let mut next = [0u8; 8];
        poll_readable(link.stream.as_raw_fd(), Duration::from_secs(5));
        assert_eq!(
            link.read_some(&mut next).unwrap(),
            4,
            "the next message stays"
        );
        assert_eq!(&next[..4], b"next");
    }

    /// The kernel's buffer after `link` wrote `bytes`, or as much as the socket took (Linux
    /// doubles a request for its bookkeeping).
    fn buffer_after_writing(link: &mut TcpLink, bytes: usize) -> usize {
        let data = vec![0u8; bytes];
        match link.write_some(&[io::IoSlice::new(&data)]) {
            Ok(_) => {}
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{e}"),
        }
        socket2::SockRef::from(&link.stream)
            .send_buffer_size()
            .unwrap()
    }

    #[test]
    fn a_link_asks_the_kernel_for_its_send_buffer_and_follows_its_writes() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let _peer = listener.accept().unwrap();
        let mut link = TcpLink::new(stream, SendBuffer::Fixed(200 << 10)).unwrap();
        let got = socket2::SockRef::from(&link.stream)
            .send_buffer_size()
            .unwrap();
        assert_eq!(got, 400 << 10);
        assert_eq!(buffer_after_writing(&mut link, 300 << 10), 400 << 10);

        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let _peer = listener.accept().unwrap();
        let mut link = TcpLink::new(stream, SendBuffer::ByCall(128 << 10)).unwrap();
        assert_eq!(buffer_after_writing(&mut link, 300 << 10), 256 << 10);
        link.set_call_bytes(1 << 20);
        assert_eq!(buffer_after_writing(&mut link, 1000), 256 << 10);
        assert_eq!(buffer_after_writing(&mut link, 300 << 10), 1 << 20);
        link.set_call_bytes(4 << 20);
        assert_eq!(buffer_after_writing(&mut link, 300 << 10), 256 << 10);
    }
}
