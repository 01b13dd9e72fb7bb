//! Who may call a group: the process that created it ([`Birth`]), one thread at a time
//! ([`Claim`]).
//!
//! **Processes.** A child forked after a group was made inherits its memory: its links' sockets
//! and shared-memory rings, its node board, its sequence numbers. A call there would join the
//! parent's calls on the other ranks with the child's data (the peers cannot tell the two
//! processes apart) and leave the parent's state behind theirs. So every call checks that it runs
//! in the process that made the group and otherwise fails with [`ErrorKind::Usage`] before it
//! touches anything, and the refusal does not abort the links (that would shut down the
//! parent's sockets, which the child shares). The check is one relaxed load and compare: a
//! `pthread_atfork` handler, registered when the first group is made, counts forks in each
//! child, and a group remembers the count it was made at (`getpid()` is a system call on every
//! call since glibc 2.25 stopped caching it; it is used only where registering the handler
//! failed). A child that forks by a raw `clone` system call, bypassing the C library, is not seen.

use crate::error::{Error, ErrorKind, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Once;

/// Forks this process descends from since the handler was registered (incremented in each child).
static FORKS: AtomicU64 = AtomicU64::new(0);
/// Set if `pthread_atfork` failed: then forks are told by the process id.
static BY_PID: AtomicBool = AtomicBool::new(false);
static REGISTER: Once = Once::new();

extern "C" fn count_fork_in_child() {
    // Async-signal-safe: one atomic add.
    FORKS.fetch_add(1, Ordering::Relaxed);
}

fn forks() -> u64 {
    REGISTER.call_once(|| {
        // SAFETY: registers a child handler that only increments an atomic, which is safe in
        // the child of a multithreaded fork; no prepare or parent handler.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(count_fork_in_child)) };
        if rc != 0 {
            BY_PID.store(true, Ordering::Relaxed);
        }
    });
    FORKS.load(Ordering::Relaxed)
}

/// The process a group was made in.
pub(crate) struct Birth {
    forks: u64,
    pid: u32,
}

impl Birth {
    /// This process, now.
    pub(crate) fn here() -> Birth {
        Birth {
            forks: forks(),
            pid: std::process::id(),
        }
    }

    /// True if this is not the process the group was made in.
    #[inline]
    pub(crate) fn elsewhere(&self) -> bool {
        FORKS.load(Ordering::Relaxed) != self.forks
            || (BY_PID.load(Ordering::Relaxed) && std::process::id() != self.pid)
    }

    /// Fails with [`ErrorKind::Usage`] outside the process the group was made in; `what` names
    /// the call.
    #[inline]
    pub(crate) fn check(&self, what: &str) -> Result<()> {
        if self.elsewhere() {
            return Err(self.refusal(what));
        }
        Ok(())
    }

    #[cold]
    fn refusal(&self, what: &str) -> Error {
        Error::new(
            ErrorKind::Usage,
            format!(
                "{what} refused: this group was created in process {} and this is process {} (a child forked after the group was made); a group serves only the process that created it, since its connections and shared memory are its parent's. Form a new group in the child (psyne::init or Group::builder, as a job of its own), or leave the communication to the parent",
                self.pid,
                std::process::id()
            ),
        )
    }
}

/// A group's tickets, and which thread took the last one: one thread at a time has calls in
/// flight.
///
/// **Threads.** Ranks pair their calls by order: the `n`-th call of every rank is one
/// collective. Calls from two threads of one rank at once are ordered by whichever thread gets
/// there first, which differs from rank to rank, so they would pair wrong (wrong data, or a
/// mismatch error if they differ). So a call (blocking, or the issue of a non-blocking one) is
/// refused with [`ErrorKind::Usage`] while calls issued by another thread are in flight: issued
/// and not finished, non-blocking ones included until they complete. Calls from one thread run
/// in the order it issued them, blocking and non-blocking mixed; several threads may use a group
/// by turns (a call from another thread after this thread's calls finished is fine, and the
/// program must then make the turns the same on every rank, e.g. with a lock held across its
/// own calls and a fixed order), or each use their own group ([`crate::Group::split`]).
///
/// One word holds the next ticket (the low [`TICKET_BITS`] bits) and the number of the thread
/// that took the last one (above): the calls in flight are the tickets taken and not yet served,
/// so taking a ticket and checking who holds the group is one compare-and-swap, the same cost
/// as the plain ticket counter it replaces, and finishing a call serves its ticket as before.
/// The name of the thread that holds the group, for errors, is written only when another thread
/// takes it over.
#[derive(Default)]
pub(crate) struct Claim {
    /// The taker's thread number (above [`TICKET_BITS`]) and the next ticket (below).
    next: AtomicU64,
    /// The holder's number and description, updated when the holder changes.
    holder: std::sync::Mutex<(u64, String)>,
}

/// Bits of [`Claim`]'s word that number tickets (they wrap; so do thread numbers above them).
pub(crate) const TICKET_BITS: u32 = 40;
/// The mask of a ticket.
pub(crate) const TICKETS: u64 = (1 << TICKET_BITS) - 1;

/// A number per thread, never 0, for [`Claim`].
fn thread_number() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static NUMBER: u64 = match NEXT.fetch_add(1, Ordering::Relaxed) & ((1 << (64 - TICKET_BITS)) - 1) {
            0 => 1,
            n => n,
        };
    }
    NUMBER.with(|n| *n)
}

/// `thread 'main' (ThreadId(1))`, or `an unnamed thread (ThreadId(7))`.
fn this_thread() -> String {
    let t = std::thread::current();
    match t.name() {
        Some(name) => format!("thread '{name}' ({:?})", t.id()),
        None => format!("an unnamed thread ({:?})", t.id()),
    }
}

impl Claim {
    /// The next ticket, for call `what` from this thread; fails naming both threads if another
    /// thread has calls in flight (tickets taken beyond `served`, the tickets served so far).
    pub(crate) fn take(&self, what: &str, served: &AtomicU64) -> Result<u64> {
        let me = thread_number();
        let mut word = self.next.load(Ordering::SeqCst);
        loop {
            let (holder, ticket) = (word >> TICKET_BITS, word & TICKETS);
            if holder != me {
                // Read after `word`: a ticket the holder takes meanwhile changes `word`, and the
                // swap below fails and looks again.
                let in_flight = ticket.wrapping_sub(served.load(Ordering::SeqCst)) & TICKETS;
                if in_flight != 0 {
                    return Err(self.busy(what, holder));
                }
            }
            let next = me << TICKET_BITS | ((ticket + 1) & TICKETS);
            match self
                .next
                .compare_exchange_weak(word, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => break,
                Err(now) => word = now,
            }
        }
        if word >> TICKET_BITS != me {
            // This thread takes the group over (from none or from a thread whose calls all
            // finished): record who it is, for another thread's error.
            let mut holder = self.holder.lock().unwrap_or_else(|p| p.into_inner());
            *holder = (me, this_thread());
        }
        Ok(word & TICKETS)
    }

    #[cold]
    fn busy(&self, what: &str, holder: u64) -> Error {
        // The holder records its name just after taking its ticket: give it a moment to.
        let until = std::time::Instant::now() + std::time::Duration::from_millis(50);
        let other = loop {
            let recorded = self
                .holder
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            if recorded.0 == holder {
                break recorded.1;
            }
            if std::time::Instant::now() > until {
                break "another thread".to_string();
            }
            std::thread::yield_now();
        };
        Error::new(
            ErrorKind::Usage,
            format!(
                "{what} refused: group used from two threads at once: {} called it while {other} has calls on it in flight. Ranks pair calls by their order, which two threads would make differ from rank to rank (wrong results); use one group per thread (Group::split) or serialise the calls, the same way on every rank",
                this_thread()
            ),
        )
    }
}
