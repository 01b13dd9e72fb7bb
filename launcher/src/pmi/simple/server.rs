//! The service's one thread: poll(2) over the wake-up socket and every rank's socket, the
//! barrier across hosts, deadlines.

use super::conn::{Conn, Read1, State};
use super::kvs::Kvs;
use super::round::Barrier;
use super::wire::{self, Framing, Message};
use crate::pmi::{Exchange, JobMap, Report, Reporter};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Receives each message of a rank (`rank`, then the text: `-> ` a request as parsed, `<- ` a
/// reply as sent).
pub type Tracer = Arc<dyn Fn(usize, &str) + Send + Sync>;

/// What other threads tell the server thread.
#[derive(Debug)]
pub enum Event {
    /// A rank's socket (the service's end), from `rank_access`.
    Rank(usize, UnixStream),
    /// The result of the exchange of a barrier round.
    Exchanged(u64, Result<Vec<Vec<u8>>, String>),
}

/// Sends [`Event`]s to the server thread and wakes it.
#[derive(Debug, Clone)]
pub struct Waker {
    tx: Sender<Event>,
    wake: Arc<UnixStream>,
}

impl Waker {
    /// A waker that writes to `wake` (non-blocking) after each event.
    pub fn new(tx: Sender<Event>, wake: UnixStream) -> std::io::Result<Waker> {
        wake.set_nonblocking(true)?;
        Ok(Waker {
            tx,
            wake: Arc::new(wake),
        })
    }

    /// Sends `event`; false if the server thread has ended.
    pub fn send(&self, event: Event) -> bool {
        let sent = self.tx.send(event).is_ok();
        self.wake_up();
        sent
    }

    /// Wakes the server thread (a full socket means it is awake already).
    pub fn wake_up(&self) {
        let _ = std::io::Write::write(&mut &*self.wake, &[1]);
    }
}

/// What the service and its thread share.
#[derive(Debug, Default)]
pub struct Control {
    /// Set by the service's drop: the thread ends.
    pub stop: AtomicBool,
    /// Why connections were dropped or barriers failed, in order (for the launcher's messages).
    pub problems: Mutex<Vec<String>>,
    /// Shared-memory files the ranks announced ([`super::leftovers::announced_segment`]).
    pub segments: Mutex<Vec<std::path::PathBuf>>,
}

impl Control {
    /// Notes a shared-memory file if `value` announces one.
    pub fn note_segment(&self, value: &str) {
        let Some(path) = super::leftovers::announced_segment(value) else {
            return;
        };
        if let Ok(mut s) = self.segments.lock() {
            if !s.contains(&path) {
                s.push(path);
            }
        }
    }

    /// Records a problem.
    pub fn problem(&self, text: String) {
        if let Ok(mut p) = self.problems.lock() {
            p.push(text);
        }
    }
}

/// A PMI-2 `info-getnodeattr` with `wait=TRUE` waiting for its key.
#[derive(Debug)]
pub struct Waiter {
    /// The waiting rank's local index.
    pub local: usize,
    /// Its request.
    pub request: Message,
    /// The key.
    pub key: String,
    /// When it gets a not-found answer.
    pub deadline: Instant,
}

/// The state of one host's service, owned by its thread.
pub struct Server {
    /// The job.
    pub map: Arc<JobMap>,
    /// This host's node index.
    pub node: usize,
    /// The job-wide all-gather.
    pub exchange: Arc<dyn Exchange>,
    /// Where reports go.
    pub report: Reporter,
    /// The bound on every wait.
    pub timeout: Duration,
    /// Connections by local rank (`None` until `rank_access`).
    pub conns: Vec<Option<Conn>>,
    /// The key-value space.
    pub kvs: Kvs,
    /// Bytes each local rank has put.
    pub put_bytes: Vec<usize>,
    /// The barrier in progress.
    pub barrier: Barrier,
    /// Node-attribute requests waiting.
    pub waiters: Vec<Waiter>,
    /// `PMI_process_mapping` (`None` if the map is inconsistent).
    pub mapping: Option<String>,
    /// Shared with the service.
    pub control: Arc<Control>,
    /// For exchange threads.
    pub waker: Waker,
    /// Where messages are traced, if anywhere.
    pub trace: Option<Tracer>,
    events: Receiver<Event>,
    wake_rx: UnixStream,
}

/// The poll timeout when nothing has a deadline (the stop flag is also checked after wake-ups).
const IDLE_POLL: Duration = Duration::from_secs(3600);

impl Server {
    /// A server for `node` of `map`; `events` and `wake_rx` are the other ends of `waker`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        map: Arc<JobMap>,
        node: usize,
        exchange: Arc<dyn Exchange>,
        report: Reporter,
        timeout: Duration,
        control: Arc<Control>,
        waker: Waker,
        events: Receiver<Event>,
        wake_rx: UnixStream,
    ) -> std::io::Result<Server> {
        wake_rx.set_nonblocking(true)?;
        let local = map.hosts.get(node).map_or(0, |h| h.ranks.len());
        let mapping = super::mapping::process_mapping(&map);
        Ok(Server {
            map,
            node,
            exchange,
            report,
            timeout,
            conns: (0..local).map(|_| None).collect(),
            kvs: Kvs::default(),
            put_bytes: vec![0; local],
            barrier: Barrier::default(),
            waiters: Vec::new(),
            mapping,
            control,
            waker,
            trace: None,
            events,
            wake_rx,
        })
    }

    /// Traces messages to `trace`.
    pub fn with_trace(mut self, trace: Option<Tracer>) -> Server {
        self.trace = trace;
        self
    }

    /// Traces `text` for the rank of local index `local`.
    pub fn trace(&self, local: usize, text: impl FnOnce() -> String) {
        if let Some(trace) = &self.trace {
            trace(self.map.hosts[self.node].ranks[local], &text());
        }
    }

    /// Serves until the service is dropped; every socket closes when it returns.
    pub fn run(mut self) {
        while !self.control.stop.load(Ordering::SeqCst) {
            let (mut fds, owners) = self.poll_set();
            let timeout = self.poll_timeout();
            // SAFETY: `fds` is a valid, exclusively borrowed array of `fds.len()` pollfd
            // structures for the duration of the call; the descriptors in it stay open (they
            // are owned by `self`, which is not touched during the call).
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
            if n < 0 {
                let err = std::io::Error::last_os_error();
                if err.kind() != std::io::ErrorKind::Interrupted {
                    self.control.problem(format!("poll failed: {err}"));
                    std::thread::sleep(Duration::from_millis(10));
                }
                continue;
            }
            self.drain_wake();
            self.drain_events();
            for (pfd, &local) in fds[1..].iter().zip(&owners) {
                self.on_ready(local, pfd.revents);
            }
            self.check_deadlines(Instant::now());
        }
    }

    /// The wake-up socket, then each open connection (with the local index of each).
    fn poll_set(&self) -> (Vec<libc::pollfd>, Vec<usize>) {
        let mut fds = vec![libc::pollfd {
            fd: self.wake_rx.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let mut owners = Vec::new();
        for (local, conn) in self.conns.iter().enumerate() {
            let Some((conn, fd)) = conn.as_ref().and_then(|c| Some((c, c.fd()?))) else {
                continue;
            };
            let out = if conn.wants_write() { libc::POLLOUT } else { 0 };
            fds.push(libc::pollfd {
                fd,
                events: libc::POLLIN | out,
                revents: 0,
            });
            owners.push(local);
        }
        (fds, owners)
    }

    /// Milliseconds until the nearest deadline (-1 never happens: an idle poll still ends).
    fn poll_timeout(&self) -> libc::c_int {
        let now = Instant::now();
        let nearest = self
            .waiters
            .iter()
            .map(|w| w.deadline)
            .chain(self.barrier.deadline(self.timeout))
            .min();
        let wait = nearest.map_or(IDLE_POLL, |d| d.saturating_duration_since(now));
        // Round up so a deadline is past when poll returns.
        (wait.as_millis() + 1).min(libc::c_int::MAX as u128) as libc::c_int
    }

    fn drain_wake(&mut self) {
        let mut buf = [0u8; 256];
        while matches!(self.wake_rx.read(&mut buf), Ok(n) if n > 0) {}
    }

    fn drain_events(&mut self) {
        while let Ok(event) = self.events.try_recv() {
            match event {
                Event::Rank(rank, stream) => self.add_rank(rank, stream),
                Event::Exchanged(round, result) => self.exchanged(round, result),
            }
        }
    }

    fn add_rank(&mut self, rank: usize, stream: UnixStream) {
        let Some(local) = self.local_index(rank) else {
            return;
        };
        match Conn::new(rank, stream) {
            Ok(conn) => self.conns[local] = Some(conn),
            Err(e) => self
                .control
                .problem(format!("rank {rank}: its PMI socket cannot be set up: {e}")),
        }
    }

    /// The local index of `rank` on this host.
    pub fn local_index(&self, rank: usize) -> Option<usize> {
        match self.map.locate(rank) {
            Some((node, local)) if node == self.node && local < self.conns.len() => Some(local),
            _ => None,
        }
    }

    fn on_ready(&mut self, local: usize, revents: libc::c_short) {
        if revents & libc::POLLOUT != 0 {
            if let Some(conn) = self.conns[local].as_mut() {
                conn.flush();
            }
        }
        if revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) == 0 {
            return;
        }
        let Some(read) = self.conns[local].as_mut().map(Conn::read) else {
            return;
        };
        let (messages, end) = match read {
            Read1::Messages(m) => (m, None),
            Read1::Closed(m) => (m, Some(None)),
            Read1::Garbage(m, why) => (m, Some(Some(why))),
        };
        for m in messages {
            self.handle(local, m);
        }
        match end {
            None => {}
            Some(None) => self.closed(local),
            Some(Some(why)) => self.drop_rank(local, &why),
        }
    }

    /// The rank's end closed.
    fn closed(&mut self, local: usize) {
        let Some(conn) = self.conns[local].as_mut() else {
            return;
        };
        conn.close();
        if conn.state == State::Open {
            let rank = conn.rank;
            self.drop_rank(local, &format!("rank {rank} closed PMI_FD before finalize"));
        }
    }

    /// Closes a rank's connection for `why` (recorded) and fails a barrier it can no longer
    /// join.
    pub fn drop_rank(&mut self, local: usize, why: &str) {
        let Some(conn) = self.conns[local].as_mut() else {
            return;
        };
        let rank = conn.rank;
        let why = match why.starts_with("rank ") {
            true => why.to_string(),
            false => format!("rank {rank}: {why}; its PMI connection is closed"),
        };
        // Recorded before the rank can see its socket close.
        self.control.problem(why.clone());
        conn.close();
        conn.state = State::Lost;
        self.waiters.retain(|w| w.local != local);
        self.barrier_check(&why);
    }

    /// Sends `cmd` with `pairs` to a local rank in `framing`, echoing `thrid` (PMI-2 threads).
    pub fn send(
        &mut self,
        local: usize,
        framing: Framing,
        cmd: &str,
        mut pairs: Vec<(String, String)>,
        thrid: Option<&str>,
    ) {
        if let Some(t) = thrid {
            pairs.push(("thrid".into(), t.to_string()));
        }
        let bytes = wire::format(framing, cmd, &pairs);
        self.trace(local, || {
            format!("<- {}", String::from_utf8_lossy(&bytes).trim_end())
        });
        let Some(conn) = self.conns[local].as_mut() else {
            return;
        };
        if !conn.send(&bytes) {
            self.drop_rank(local, "it does not read its PMI replies");
        }
    }

    /// Sends a report.
    pub fn report(&self, report: Report) {
        (self.report)(report);
    }

    fn check_deadlines(&mut self, now: Instant) {
        let (late, waiting): (Vec<Waiter>, Vec<Waiter>) = std::mem::take(&mut self.waiters)
            .into_iter()
            .partition(|w| w.deadline <= now);
        self.waiters = waiting;
        for w in late {
            let text = format!(
                "no rank of this host put node attribute {} within {:?}",
                w.key, self.timeout
            );
            self.fail(w.local, &w.request, &text);
        }
        if self
            .barrier
            .deadline(self.timeout)
            .is_some_and(|d| d <= now)
        {
            let why = self.barrier_timeout_reason();
            self.barrier_fail(&why);
        }
    }
}
