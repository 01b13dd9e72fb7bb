//! Ranks as threads in one process, wired through an in-memory store over real sockets and real
//! shared memory.

#![allow(dead_code)]

use psyne::tuning::Tuning;
use psyne::Communicator;
use psyne::MemoryStore;
use psyne::TransportPolicy;
use psyne::{Group, GroupOptions};
use std::sync::Arc;
use std::time::Duration;

/// How the ranks of a test group reach each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wiring {
    /// Every pair over TCP.
    Tcp,
    /// Every pair over shared memory (all ranks on one host).
    Shm,
    /// Two fake hosts (the lower half of the ranks and the upper half): shared memory inside
    /// each, TCP between them.
    Mixed,
    /// Fake hosts of these many ranks each, in blocks of consecutive ranks (`[3, 1, 2]`: ranks
    /// 0-2, 3, 4-5): shared memory inside each, TCP between them. The counts must add up to the
    /// group's size.
    Hosts(&'static [usize]),
    /// Fake hosts named per rank (rank `r` is on host `hosts[r]`), for interleaved layouts:
    /// shared memory inside each, TCP between them.
    HostOf(&'static [usize]),
    /// Two fake hosts (as [`Wiring::Mixed`]) with `PSY_TRANSPORT=auto`: shared memory inside
    /// each, RDMA between them where this machine has an active RDMA port, TCP where it has none.
    AutoHosts,
    /// `PSY_TRANSPORT=rdma`: every pair over RDMA (through the adapter's loopback here).
    Rdma,
}

impl Wiring {
    /// The fake host key of `rank` of `size`, if the wiring fakes hosts.
    fn fake_host(self, rank: usize, size: usize) -> Option<String> {
        let host = match self {
            Wiring::Tcp | Wiring::Shm | Wiring::Rdma => return None,
            Wiring::Mixed | Wiring::AutoHosts => usize::from(rank >= size / 2),
            Wiring::Hosts(counts) => {
                assert_eq!(
                    counts.iter().sum::<usize>(),
                    size,
                    "{self:?} for {size} ranks"
                );
                let mut end = 0;
                counts
                    .iter()
                    .position(|&n| {
                        end += n;
                        rank < end
                    })
                    .expect("the counts add up to the size")
            }
            Wiring::HostOf(hosts) => {
                assert_eq!(hosts.len(), size, "{self:?} for {size} ranks");
                hosts[rank]
            }
        };
        Some(format!("fake-host-{host}"))
    }
}

/// Runs `f(group)` on `size` threads, one rank each, wired as `wiring` says, and returns their
/// results in rank order.
pub fn with_wiring<R: Send + 'static>(
    size: usize,
    wiring: Wiring,
    timeout: Duration,
    f: impl Fn(Group) -> R + Send + Sync + 'static,
) -> Vec<R> {
    with_tuning(size, wiring, timeout, Tuning::default(), f)
}

/// [`with_wiring`] with an algorithm policy (as `PSY_ALGO` would give) for every rank.
pub fn with_tuning<R: Send + 'static>(
    size: usize,
    wiring: Wiring,
    timeout: Duration,
    tuning: Tuning,
    f: impl Fn(Group) -> R + Send + Sync + 'static,
) -> Vec<R> {
    try_with_tuning(size, wiring, timeout, tuning, move |g| {
        f(g.expect("forming the group"))
    })
}

/// [`with_wiring`], handing each rank the result of forming the group (to test failures).
pub fn try_with_wiring<R: Send + 'static>(
    size: usize,
    wiring: Wiring,
    timeout: Duration,
    f: impl Fn(psyne::Result<Group>) -> R + Send + Sync + 'static,
) -> Vec<R> {
    try_with_tuning(size, wiring, timeout, Tuning::default(), f)
}

/// [`try_with_wiring`] with an algorithm policy for every rank.
pub fn try_with_tuning<R: Send + 'static>(
    size: usize,
    wiring: Wiring,
    timeout: Duration,
    tuning: Tuning,
    f: impl Fn(psyne::Result<Group>) -> R + Send + Sync + 'static,
) -> Vec<R> {
    try_with_options(size, wiring, timeout, tuning, |_| {}, f)
}

/// As [`try_with_tuning`], with `tweak` applied to every rank's options last.
pub fn try_with_options<R: Send + 'static>(
    size: usize,
    wiring: Wiring,
    timeout: Duration,
    tuning: Tuning,
    tweak: fn(&mut GroupOptions),
    f: impl Fn(psyne::Result<Group>) -> R + Send + Sync + 'static,
) -> Vec<R> {
    // Each group gets its own key prefix, which also keeps the shared-memory segment names of
    // tests running at the same time in this process apart.
    static GROUPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let prefix = format!(
        "test{}",
        GROUPS.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    );
    let store = Arc::new(MemoryStore::new());
    let f = Arc::new(f);
    let threads: Vec<_> = (0..size)
        .map(|rank| {
            let (store, f, prefix) = (store.clone(), f.clone(), prefix.clone());
            let tuning = tuning.clone();
            std::thread::spawn(move || {
                let mut opts = GroupOptions::local(rank, size, prefix);
                opts.tunables.timeout = timeout;
                opts.tunables.tuning = tuning;
                opts.tunables.transport.policy = match wiring {
                    Wiring::Tcp => TransportPolicy::Tcp,
                    Wiring::AutoHosts => TransportPolicy::Auto,
                    Wiring::Rdma => TransportPolicy::Rdma,
                    _ => TransportPolicy::Shm,
                };
                if let Some(key) = wiring.fake_host(rank, size) {
                    opts.host_key = key;
                }
                tweak(&mut opts);
                let store: Arc<dyn psyne::Store> = store;
                f(Group::builder(opts).shared_store(store).build())
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("a rank thread panicked"))
        .collect()
}

/// [`with_wiring`] over TCP.
pub fn with_ranks<R: Send + 'static>(
    size: usize,
    timeout: Duration,
    f: impl Fn(Group) -> R + Send + Sync + 'static,
) -> Vec<R> {
    with_wiring(size, Wiring::Tcp, timeout, f)
}

/// Three ranks on one host: rank `on_board` makes a small all-reduce (the node board), the others
/// an all-gather too large for it (a ring over the links). Every rank must fail, and none with a
/// timeout; returns their errors by rank.
pub fn board_call_against_a_ring(
    on_board: usize,
    tweak: fn(&mut GroupOptions),
) -> Vec<psyne::Error> {
    let t = Duration::from_secs(10);
    let results = try_with_options(3, Wiring::Shm, t, Tuning::default(), tweak, move |g| {
        let g = g?;
        if g.rank() == on_board {
            g.all_reduce(&mut [1.0f32; 16], psyne::ReduceOp::Sum)
        } else {
            g.all_gather(&vec![1.0f32; 4096]).map(drop)
        }
    });
    let errors: Vec<psyne::Error> = results
        .into_iter()
        .enumerate()
        .map(|(rank, r)| r.err().unwrap_or_else(|| panic!("rank {rank} returned Ok")))
        .collect();
    for (rank, e) in errors.iter().enumerate() {
        assert_ne!(e.kind(), psyne::ErrorKind::Timeout, "rank {rank}: {e}");
    }
    errors
}

/// A one-shot signal between ranks that are threads of this test: one opens it, others wait for
/// it with a deadline (an ordering event instead of a sleep).
#[derive(Default)]
pub struct Gate {
    open: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
}

impl Gate {
    /// A closed gate, shared.
    pub fn new() -> std::sync::Arc<Gate> {
        std::sync::Arc::new(Gate::default())
    }

    /// Opens the gate for every waiter, now and later.
    pub fn open(&self) {
        *self.open.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.opened.notify_all();
    }

    /// Waits until the gate is open, at most `limit`; fails naming `what` if it never opened.
    pub fn wait(&self, limit: Duration, what: &str) -> psyne::Result<()> {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let (_open, waited) = self
            .opened
            .wait_timeout_while(open, limit, |open| !*open)
            .unwrap_or_else(|p| p.into_inner());
        if waited.timed_out() {
            return Err(psyne::Error::invalid(format!(
                "{what} did not happen within {limit:?}"
            )));
        }
        Ok(())
    }
}

/// A reusable meeting point for ranks that are threads of this test: each `wait` returns once all
/// `parties` have arrived, or fails after `limit` naming `what` (an ordering event, not a sleep).
pub struct Rendezvous {
    parties: usize,
    state: std::sync::Mutex<(usize, u64)>,
    changed: std::sync::Condvar,
}

impl Rendezvous {
    /// A meeting point for `parties` threads, shared.
    pub fn new(parties: usize) -> std::sync::Arc<Rendezvous> {
        std::sync::Arc::new(Rendezvous {
            parties,
            state: std::sync::Mutex::new((0, 0)),
            changed: std::sync::Condvar::new(),
        })
    }

    /// Waits until every party has called `wait` this round, at most `limit`.
    pub fn wait(&self, limit: Duration, what: &str) -> psyne::Result<()> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let round = state.1;
        state.0 += 1;
        if state.0 == self.parties {
            *state = (0, round + 1);
            self.changed.notify_all();
            return Ok(());
        }
        let (_state, waited) = self
            .changed
            .wait_timeout_while(state, limit, |s| s.1 == round)
            .unwrap_or_else(|p| p.into_inner());
        if waited.timed_out() {
            return Err(psyne::Error::invalid(format!(
                "{what}: not every rank arrived within {limit:?}"
            )));
        }
        Ok(())
    }
}
