//! Many handshakes at once, for a listener anyone who can reach it may connect to: a rank wiring
//! its group, and the job's store. Every connection must prove the job secret ([`crate::auth`])
//! before anything else is read from it; until it does, it costs the acceptor one slot and one
//! descriptor and delays nobody.
//!
//! - Handshakes run concurrently on non-blocking sockets, driven by one `poll`: a stranger that
//!   connects and stays silent holds only its own handshake, never a peer's.
//! - At most [`MAX_PENDING`] handshakes are pending; a new connection beyond that pushes out the
//!   oldest pending one (a genuine peer answers within a moment of connecting, so it is the
//!   silent ones that go).
//! - Each handshake has [`WINDOW`] to complete (or the caller's deadline, if sooner).
//! - Refused connections are reported one line each for the first [`LOGGED`]; after that they
//!   are counted and [`Handshakes::finish`] reports how many more there were.

use crate::auth::{self, Secret, REPLY};
use std::collections::VecDeque;
use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Handshakes pending at once, at most.
pub(crate) const MAX_PENDING: usize = 128;
/// How long one handshake may take.
pub(crate) const WINDOW: Duration = Duration::from_secs(10);
/// Refused connections reported one by one; the rest are counted.
pub(crate) const LOGGED: usize = 5;

/// Where refusals are reported (one whole line each).
pub(crate) type Log = Arc<dyn Fn(&str) + Send + Sync>;

/// A connection that proved the job secret.
pub(crate) struct Proven {
    /// What the connector claims to be (its rank, or [`auth::STORE_CLIENT`]).
    pub(crate) claim: u64,
    /// The connection, blocking again.
    pub(crate) stream: TcpStream,
    /// Where it came from.
    pub(crate) from: SocketAddr,
}

struct Pending {
    stream: TcpStream,
    from: SocketAddr,
    nonce: [u8; 16],
    reply: [u8; REPLY],
    got: usize,
    until: Instant,
}

/// The handshakes in progress on one listener.
pub(crate) struct Handshakes {
    secret: Secret,
    /// Who is accepting, for log lines (`rank 3`, `psyne store`).
    who: String,
    log: Log,
    pending: VecDeque<Pending>,
    refused: usize,
}

impl Handshakes {
    /// Handshakes for connections proving `secret`, reported as `who` through `log`.
    pub(crate) fn new(secret: Secret, who: impl Into<String>, log: Log) -> Handshakes {
        Handshakes {
            secret,
            who: who.into(),
            log,
            pending: VecDeque::new(),
            refused: 0,
        }
    }

    /// Connections refused so far.
    pub(crate) fn refused(&self) -> usize {
        self.refused
    }

    /// Waits up to `timeout` for `listener` (non-blocking) or a pending handshake to be ready,
    /// then accepts what is waiting, advances every handshake and returns those that proved the
    /// secret; handshakes end by `deadline` at the latest.
    pub(crate) fn step(
        &mut self,
        listener: &TcpListener,
        timeout: Duration,
        deadline: Instant,
    ) -> Vec<Proven> {
        self.wait(listener, timeout);
        self.accept_waiting(listener, deadline);
        let mut proven = Vec::new();
        let mut still = VecDeque::with_capacity(self.pending.len());
        let now = Instant::now();
        while let Some(mut p) = self.pending.pop_front() {
            match self.advance(&mut p) {
                Ok(Some(claim)) => proven.push(Proven {
                    claim,
                    stream: p.stream,
                    from: p.from,
                }),
                Ok(None) if now >= p.until => self.refuse(p.from, "the handshake timed out"),
                Ok(None) => still.push_back(p),
                Err(why) => self.refuse(p.from, &why),
            }
        }
        self.pending = still;
        proven
    }

    /// Reports how many refusals went unreported, if any, and drops the pending handshakes.
    pub(crate) fn finish(&mut self) {
        if let Some(line) = self.summary() {
            (self.log)(&line);
        }
        self.pending.clear();
    }

    /// The line saying how many refusals went unreported, if any.
    pub(crate) fn summary(&self) -> Option<String> {
        let more = self.refused.checked_sub(LOGGED).filter(|&m| m > 0)?;
        Some(format!(
            "{}: refused {more} more connection(s) that did not prove the job's secret",
            self.who
        ))
    }

    fn wait(&self, listener: &TcpListener, timeout: Duration) {
        let mut fds: Vec<libc::pollfd> = std::iter::once(listener.as_raw_fd())
            .chain(self.pending.iter().map(|p| p.stream.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let soonest = self.pending.iter().map(|p| p.until).min();
        let left = soonest.map_or(timeout, |u| {
            timeout.min(u.saturating_duration_since(Instant::now()))
        });
        // SAFETY: `fds` is a valid, exclusively borrowed array of pollfd for the whole call, and
        // its length is passed as the count.
        unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                left.as_millis().min(1000) as i32,
            );
        }
    }

    fn accept_waiting(&mut self, listener: &TcpListener, deadline: Instant) {
        loop {
            let (mut stream, from) = match listener.accept() {
                Ok(c) => c,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return, // nothing waiting (or a transient failure: look again later)
            };
            let _ = stream.set_nodelay(true);
            let nonce = match stream
                .set_nonblocking(true)
                .and_then(|()| auth::challenge(&mut stream))
            {
                Ok(n) => n,
                Err(e) => {
                    self.refuse(from, &auth::described(&e));
                    continue;
                }
            };
            if self.pending.len() >= MAX_PENDING {
                if let Some(oldest) = self.pending.pop_front() {
                    self.refuse(oldest.from, "pushed out by newer connections, still silent");
                }
            }
            self.pending.push_back(Pending {
                stream,
                from,
                nonce,
                reply: [0; REPLY],
                got: 0,
                until: deadline.min(Instant::now() + WINDOW),
            });
        }
    }

    /// Reads what arrived of `p`'s reply; the claim once it is whole and proves the secret.
    fn advance(&self, p: &mut Pending) -> Result<Option<u64>, String> {
        while p.got < REPLY {
            match p.stream.read(&mut p.reply[p.got..]) {
                Ok(0) => return Err("it closed the connection during the handshake".into()),
                Ok(n) => p.got += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(auth::described(&e)),
            }
        }
        p.stream.set_nonblocking(false).map_err(|e| e.to_string())?;
        auth::verify(&mut p.stream, &self.secret, &p.nonce, &p.reply)
            .map(Some)
            .map_err(|e| e.message().to_string())
    }

    /// Counts a refused connection, and reports it if it is among the first [`LOGGED`].
    pub(crate) fn refuse(&mut self, from: SocketAddr, why: &str) {
        self.refused += 1;
        if self.refused <= LOGGED {
            let later = if self.refused == LOGGED {
                " (further refusals are counted, not shown)"
            } else {
                ""
            };
            (self.log)(&format!(
                "{}: refused a connection from {from}: {why}{later}",
                self.who
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn a_silent_connection_is_refused_as_timed_out_and_a_peer_gets_through_meanwhile() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = lines.clone();
        let log: Log = Arc::new(move |l: &str| sink.lock().unwrap().push(l.to_string()));
        let secret = Secret::generate().unwrap();
        let mut hs = Handshakes::new(secret.clone(), "test", log);
        let _silent = TcpStream::connect(addr).unwrap();
        let peer = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            auth::connect(&mut s, &secret, 7, Instant::now() + Duration::from_secs(5))
        });
        let deadline = Instant::now() + Duration::from_millis(300);
        let mut proven = Vec::new();
        while Instant::now() < deadline + Duration::from_millis(50) {
            proven.extend(hs.step(&listener, Duration::from_millis(20), deadline));
        }
        peer.join().unwrap().expect("the peer's handshake");
        assert_eq!(proven.iter().map(|p| p.claim).collect::<Vec<_>>(), vec![7]);
        let lines = lines.lock().unwrap();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("timed out"), "{lines:?}");
    }
}
