//! Arrival words: a barrier among the processes of one host through memory they all map.
//!
//! Each rank owns one [`Arrival`] line and is the only one to write its `epoch`: arriving at
//! barrier `k` is storing `k` there (with a description of the call, so ranks that arrive at
//! different calls can tell). Waiting for a peer is watching its line until its epoch reaches `k`:
//! a short poll, then yields, then futex sleeps on the peer's word, with the peer's process checked
//! for life between sleeps and a deadline over everything.
//!
//! Arriving is a compare-and-swap of the owner's `state` word to the epoch, and a peer that gives
//! up waiting for the owner withdraws its arrival with a compare-and-swap of the same word
//! ([`Arrival::withdraw`]): exactly one of the two happens, so a late owner cannot go on with a
//! call its peer gave up ([`super::withdraw`]). `epoch` mirrors `state` after each successful
//! arrival and is the word waiters sleep on.
//!
//! No lost wake-up: a waiter increments the peer's `sleepers` (SeqCst), then loads the epoch
//! (SeqCst) and sleeps only if it is behind, with that value as the futex's expected value; an
//! arriver stores its epoch (SeqCst), then loads `sleepers` (SeqCst) and wakes if it is not 0. If
//! the arriver saw 0, its load precedes the waiter's increment in the single SeqCst order, so the
//! waiter's load that follows sees the new epoch and does not sleep; otherwise the wake comes, and
//! the futex's compare-and-queue makes sure it is not missed.

use super::futex;
use super::withdraw::{Withdraw, Withdrawal};
use crate::wait::{process_alive, Next, Spinner, WaitPolicy};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::{Duration, Instant};

/// One rank's arrival line (64 bytes, in memory every rank of the host maps).
#[repr(C, align(64))]
pub struct Arrival {
    /// The last barrier this rank arrived at; the futex word. Stored only after `state` says so.
    epoch: AtomicU32,
    /// How many ranks are (about to be) asleep waiting on `epoch`.
    sleepers: AtomicU32,
    /// The owner's process id, to tell a dead peer from a slow one.
    pid: AtomicU32,
    /// The last barrier this rank arrived at (in the low 32 bits), or the withdrawal of the one
    /// it had not arrived at yet ([`Withdrawal`]): the word arrivals and withdrawals decide on.
    state: AtomicU64,
    /// What the owner called at its last two arrivals, by epoch parity, for mismatch checks
    /// (opaque to this module). Two, because a fast owner may arrive at the next barrier while a
    /// slow peer still checks the previous one; it cannot get two ahead (it waits for that peer).
    kind: [AtomicU32; 2],
    /// The owner's element counts, by epoch parity.
    count: [AtomicU64; 2],
}

const _: () = assert!(std::mem::size_of::<Arrival>() == 64);

/// How a wait for a peer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// The peer arrived.
    Arrived,
    /// The peer's process no longer exists.
    Gone,
    /// Another rank gave up waiting for the peer and withdrew its arrival.
    Withdrawn(Withdrawal),
    /// The deadline passed first.
    TimedOut,
    /// The caller's look between sleeps saw the owner doing something else.
    Elsewhere,
}

/// How long one futex sleep lasts at most before the peer's process is looked at again.
const LIFE_CHECK: Duration = Duration::from_millis(10);

impl Arrival {
    /// Records this process as the line's owner.
    pub fn claim(&self) {
        self.pid.store(std::process::id(), SeqCst);
    }

    /// The owner's process id (0 before [`Arrival::claim`]).
    pub fn pid(&self) -> u32 {
        self.pid.load(SeqCst)
    }

    /// Owner: arrives at barrier `epoch`, having called `(kind, count)`; wakes waiters. Fails,
    /// arriving nowhere, if a peer has withdrawn this arrival ([`Arrival::withdraw`]).
    pub fn arrive(&self, epoch: u32, kind: u32, count: u64) -> Result<(), Withdrawal> {
        let slot = (epoch & 1) as usize;
        self.kind[slot].store(kind, Relaxed);
        self.count[slot].store(count, Relaxed);
        // Only a withdrawal of `epoch` can replace what the owner loads here.
        let mut held = self.state.load(Relaxed);
        loop {
            if let Some(w) = Withdrawal::decode(held, u64::from(epoch)) {
                return Err(w);
            }
            // SeqCst: Release for the fields above.
            match self
                .state
                .compare_exchange_weak(held, u64::from(epoch), SeqCst, Relaxed)
            {
                Ok(_) => break,
                Err(now) => held = now,
            }
        }
        // SeqCst: ordered before the `sleepers` load.
        self.epoch.store(epoch, SeqCst);
        if self.sleepers.load(SeqCst) != 0 {
            futex::wake(&self.epoch, i32::MAX);
        }
        Ok(())
    }

    /// Withdraws the owner's arrival at `epoch` as `by` (this rank, giving up waiting for it):
    /// unless the owner arrived first, it never can. Wakes the ranks waiting for it.
    pub fn withdraw(&self, epoch: u32, by: Withdrawal) -> Withdraw {
        let mut held = self.state.load(SeqCst);
        loop {
            if let Some(w) = Withdrawal::decode(held, u64::from(epoch)) {
                return Withdraw::Already(w);
            }
            if !Withdrawal::is_withdrawal(held) && (held as u32).wrapping_sub(epoch) as i32 >= 0 {
                return Withdraw::Joined;
            }
            match self.state.compare_exchange_weak(
                held,
                by.encode(u64::from(epoch)),
                SeqCst,
                SeqCst,
            ) {
                Ok(_) => break,
                Err(now) => held = now,
            }
        }
        if self.sleepers.load(SeqCst) != 0 {
            // Waiters wake (the wait returns at a changed word or a wake-up) and look again.
            futex::wake(&self.epoch, i32::MAX);
        }
        Withdraw::Withdrew
    }

    /// The withdrawal of the owner's arrival at `epoch`, if a peer withdrew it.
    pub fn withdrawal(&self, epoch: u32) -> Option<Withdrawal> {
        Withdrawal::decode(self.state.load(SeqCst), u64::from(epoch))
    }

    /// What the owner called when it arrived at `epoch` (valid once [`Arrival::reached`] saw it,
    /// until the caller itself arrives at the next epoch).
    pub fn call(&self, epoch: u32) -> (u32, u64) {
        let slot = (epoch & 1) as usize;
        (
            self.kind[slot].load(Relaxed),
            self.count[slot].load(Relaxed),
        )
    }

    /// Whether the owner has arrived at `epoch` (or later; epochs wrap).
    pub fn reached(&self, epoch: u32) -> bool {
        self.epoch.load(SeqCst).wrapping_sub(epoch) as i32 >= 0
    }

    /// Waits until the owner reaches `epoch`: polls for `poll`, yields until `spin`, then sleeps,
    /// checking the owner's process (and asking `elsewhere` whether the owner is seen in another
    /// call) between sleeps, until `deadline`.
    pub fn wait_for(
        &self,
        epoch: u32,
        (poll, spin): (Duration, Duration),
        deadline: Instant,
        mut elsewhere: impl FnMut() -> bool,
    ) -> Waited {
        let mut spinner = Spinner::new(WaitPolicy { poll, spin });
        loop {
            if self.reached(epoch) {
                return Waited::Arrived;
            }
            if spinner.idle() != Next::Block {
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                return Waited::TimedOut;
            }
            if let Some(w) = self.withdrawal(epoch) {
                return Waited::Withdrawn(w);
            }
            if elsewhere() && !self.reached(epoch) {
                return Waited::Elsewhere;
            }
            if !process_alive(self.pid()) {
                // One more look: it may have arrived just before it exited.
                return if self.reached(epoch) {
                    Waited::Arrived
                } else {
                    Waited::Gone
                };
            }
            self.sleepers.fetch_add(1, SeqCst);
            let seen = self.epoch.load(SeqCst);
            if seen.wrapping_sub(epoch) as i32 >= 0 {
                self.sleepers.fetch_sub(1, SeqCst);
                return Waited::Arrived;
            }
            futex::wait(&self.epoch, seen, (deadline - now).min(LIFE_CHECK));
            self.sleepers.fetch_sub(1, SeqCst);
        }
    }
}

#[cfg(all(test, not(miri)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn line() -> Arrival {
        Arrival {
            epoch: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            pid: AtomicU32::new(0),
            state: AtomicU64::new(0),
            kind: Default::default(),
            count: Default::default(),
        }
    }

    #[test]
    fn a_sleeping_waiter_is_woken_by_the_arrival() {
        let a = Arc::new(line());
        a.claim();
        let a2 = Arc::clone(&a);
        let waiter = std::thread::spawn(move || {
            let t = Instant::now();
            let w = a2.wait_for(
                1,
                (Duration::ZERO, Duration::ZERO),
                t + Duration::from_secs(30),
                || false,
            );
            (w, t.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        a.arrive(1, 7, 99).expect("not withdrawn");
        let (w, took) = waiter.join().expect("waiter");
        assert_eq!(w, Waited::Arrived);
        assert!(took < Duration::from_secs(20), "woken only by the deadline");
        assert_eq!(a.call(1), (7, 99));
        assert!(a.reached(0) && a.reached(1) && !a.reached(2));
    }

    #[test]
    fn epochs_wrap_and_deadlines_and_dead_owners_end_waits() {
        let a = line();
        a.arrive(u32::MAX, 0, 0).expect("not withdrawn");
        a.arrive(2, 0, 0).expect("not withdrawn");
        assert!(a.reached(u32::MAX) && a.reached(2));
        let t = Instant::now();
        let w = a.wait_for(
            3,
            (Duration::ZERO, Duration::ZERO),
            t + Duration::from_millis(30),
            || false,
        );
        assert_eq!(w, Waited::TimedOut);
        // A child that has exited and been reaped: its pid names no process.
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawning true");
        let pid = child.id();
        child.wait().expect("waiting for true");
        a.pid.store(pid, SeqCst);
        let w = a.wait_for(
            3,
            (Duration::ZERO, Duration::ZERO),
            t + Duration::from_secs(30),
            || false,
        );
        assert_eq!(w, Waited::Gone);
        // The caller's look says the owner is busy elsewhere.
        a.pid.store(std::process::id(), SeqCst);
        let w = a.wait_for(
            3,
            (Duration::ZERO, Duration::ZERO),
            t + Duration::from_secs(30),
            || true,
        );
        assert_eq!(w, Waited::Elsewhere);
    }
}
