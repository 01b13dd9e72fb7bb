//! Many handshakes at once, for a listener anyone who can reach it may connect to: a rank wiring
//! its group, and the job's store. Every connection must prove the job secret ([`crate::auth`])
//! before anything else is read from it; until it does, it costs the acceptor one slot and one
//! descriptor and delays nobody.
//!
//! - Handshakes run concurrently on non-blocking sockets, driven by one `poll`: a stranger that
//!   connects and stays silent holds only its own handshake, never a peer's.
//! - Each step reads only the handshakes `poll` found readable, and accepts at most
//!   [`ACCEPT_BATCH`] new connections before it looks at them again: a stranger that connects,
//!   writes garbage and closes is refused in the next step, and never pushes anyone out.
//! - At most [`capacity`] handshakes are pending (a quarter of the soft limit on open files,
//!   between [`MIN_PENDING`] and [`MAX_PENDING`]). Only when that many are pending does a new
//!   connection push out the oldest *silent* one (a genuine peer answers the challenge within a
//!   moment of receiving it; a stranger never does), and a peer that is pushed out all the same
//!   (a machine so loaded that its answer came late) dials again: [`crate::auth::connect_retrying`].
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

/// The fewest handshakes a listener keeps pending before it pushes one out.
pub(crate) const MIN_PENDING: usize = 128;
/// The most handshakes a listener keeps pending, however many descriptors it may open.
pub(crate) const MAX_PENDING: usize = 4096;
/// New connections accepted per step before the pending ones are looked at again.
pub(crate) const ACCEPT_BATCH: usize = 64;
/// How long one handshake may take.
pub(crate) const WINDOW: Duration = Duration::from_secs(10);
/// Refused connections reported one by one; the rest are counted.
pub(crate) const LOGGED: usize = 5;

/// Where refusals are reported (one whole line each).
pub(crate) type Log = Arc<dyn Fn(&str) + Send + Sync>;

/// How many handshakes may be pending at once in this process: a quarter of its soft limit on
/// open files (the rest is for its links, pipes and files), within [`MIN_PENDING`] and
/// [`MAX_PENDING`].
pub(crate) fn capacity() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `lim`, which is valid and writable.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX)
    } else {
        0
    };
    (soft / 4).clamp(MIN_PENDING, MAX_PENDING)
}

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

/// What one look at a pending handshake found.
enum Progress {
    /// It proved the secret, claiming this.
    Proven(u64),
    /// Nothing decisive yet.
    Waiting,
    /// It failed, for this reason.
    Refused(String),
}

/// The handshakes in progress on one listener.
pub(crate) struct Handshakes {
    secret: Secret,
    /// Who is accepting, for log lines (`rank 3`, `psyne store`).
    who: String,
    log: Log,
    /// Oldest first.
    pending: VecDeque<Pending>,
    capacity: usize,
    refused: usize,
}

impl Handshakes {
    /// Handshakes for connections proving `secret`, reported as `who` through `log`.
    pub(crate) fn new(secret: Secret, who: impl Into<String>, log: Log) -> Handshakes {
        Handshakes::with_capacity(secret, who, log, capacity())
    }

    /// [`Handshakes::new`], keeping at most `capacity` handshakes pending.
    pub(crate) fn with_capacity(
        secret: Secret,
        who: impl Into<String>,
        log: Log,
        capacity: usize,
    ) -> Handshakes {
        Handshakes {
            secret,
            who: who.into(),
            log,
            pending: VecDeque::new(),
            capacity: capacity.max(1),
            refused: 0,
        }
    }

    /// Connections refused so far.
    pub(crate) fn refused(&self) -> usize {
        self.refused
    }

    /// Waits up to `timeout` for `listener` (non-blocking) or a pending handshake to be ready,
    /// advances the handshakes that are, accepts what is waiting (at most [`ACCEPT_BATCH`]) and
    /// returns those that proved the secret; handshakes end by `deadline` at the latest.
    pub(crate) fn step(
        &mut self,
        listener: &TcpListener,
        timeout: Duration,
        deadline: Instant,
    ) -> Vec<Proven> {
        let ready = self.wait(listener, timeout);
        let proven = self.advance_ready(&ready);
        self.expire();
        self.accept_waiting(listener, deadline);
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

    /// Polls the listener and every pending handshake; returns, per pending handshake (in
    /// order), whether it has something to read (data, an end, or an error).
    fn wait(&self, listener: &TcpListener, timeout: Duration) -> Vec<bool> {
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
        let rc = unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                left.as_millis().min(1000) as i32,
            )
        };
        // A failed poll (EINTR) reports nothing ready: the next step looks again.
        fds[1..].iter().map(|f| rc > 0 && f.revents != 0).collect()
    }

    /// Advances the pending handshakes `ready` marks; returns those that proved the secret.
    fn advance_ready(&mut self, ready: &[bool]) -> Vec<Proven> {
        let mut proven = Vec::new();
        let mut still = VecDeque::with_capacity(self.pending.len());
        let mut flags = ready.iter().copied();
        while let Some(mut p) = self.pending.pop_front() {
            // Connections accepted after the poll have no flag: they are looked at next step.
            if !flags.next().unwrap_or(false) {
                still.push_back(p);
                continue;
            }
            match self.advance(&mut p) {
                Progress::Proven(claim) => proven.push(Proven {
                    claim,
                    stream: p.stream,
                    from: p.from,
                }),
                Progress::Waiting => still.push_back(p),
                Progress::Refused(why) => self.refuse(p.from, &why),
            }
        }
        self.pending = still;
        proven
    }

    /// Refuses the handshakes whose time is up.
    fn expire(&mut self) {
        let now = Instant::now();
        let (late, on_time): (Vec<Pending>, Vec<Pending>) =
            self.pending.drain(..).partition(|p| now >= p.until);
        self.pending = on_time.into();
        for p in late {
            self.refuse(p.from, "the handshake timed out");
        }
    }

    fn accept_waiting(&mut self, listener: &TcpListener, deadline: Instant) {
        for _ in 0..ACCEPT_BATCH {
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
            if self.pending.len() >= self.capacity {
                self.push_out_one();
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

    /// Makes room: refuses the oldest handshake that has sent nothing (or the oldest, if every
    /// one has sent something).
    fn push_out_one(&mut self) {
        let victim = self.pending.iter().position(|p| p.got == 0).unwrap_or(0);
        if let Some(p) = self.pending.remove(victim) {
            self.refuse(p.from, "pushed out by newer connections, still silent");
        }
    }

    /// Reads what arrived of `p`'s reply; proven once it is whole and proves the secret.
    fn advance(&self, p: &mut Pending) -> Progress {
        while p.got < REPLY {
            match p.stream.read(&mut p.reply[p.got..]) {
                Ok(0) => {
                    return Progress::Refused(
                        "it closed the connection during the handshake".into(),
                    )
                }
                Ok(n) => p.got += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Progress::Waiting,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Progress::Refused(auth::described(&e)),
            }
        }
        if let Err(e) = p.stream.set_nonblocking(false) {
            return Progress::Refused(e.to_string());
        }
        match auth::verify(&mut p.stream, &self.secret, &p.nonce, &p.reply) {
            Ok(claim) => Progress::Proven(claim),
            Err(e) => Progress::Refused(e.message().to_string()),
        }
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

    #[test]
    fn a_peer_gets_through_a_full_listener_by_pushing_out_silent_strangers_or_dialling_again() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let secret = Secret::generate().unwrap();
        let mut hs = Handshakes::with_capacity(secret.clone(), "test", Arc::new(|_: &str| {}), 4);
        // Room for 4, and 40 strangers that say nothing: 36 of them are pushed out.
        let strangers: Vec<TcpStream> =
            (0..40).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let deadline = Instant::now() + Duration::from_secs(20);
        let peer = std::thread::spawn(move || {
            let dial = || TcpStream::connect(addr).map_err(|e| crate::Error::io("dialling", e));
            auth::connect_retrying(dial, &secret, 7, deadline).map(|_| ())
        });
        let mut proven = Vec::new();
        while proven.is_empty() && Instant::now() < deadline {
            proven.extend(hs.step(&listener, Duration::from_millis(20), deadline));
            assert!(hs.pending.len() <= 4, "{} pending", hs.pending.len());
        }
        peer.join().unwrap().expect("the peer's handshake");
        assert_eq!(proven.iter().map(|p| p.claim).collect::<Vec<_>>(), vec![7]);
        assert!(hs.refused() >= 36, "{} refused", hs.refused());
        drop(strangers);
    }

    #[test]
    fn the_capacity_follows_the_open_files_limit_within_bounds() {
        let c = capacity();
        assert!((MIN_PENDING..=MAX_PENDING).contains(&c), "{c}");
    }
}
