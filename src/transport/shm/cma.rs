//! Single-copy transfer of large messages between processes of one host (cross-memory attach).
//!
//! Small messages go through a link's byte ring: the sender copies in, the receiver copies out.
//! For a large slice that is two copies of every byte. Instead the sender publishes a *pull
//! descriptor* (its process's address and length of the slice, and the stream position the bytes
//! belong at) in a [`PullSlot`] beside the ring, and the receiver copies the bytes straight from
//! the sender's memory into its destination with `process_vm_readv(2)`: one copy, done by the
//! kernel. The sender reports the bytes as sent only once the receiver has pulled them (the
//! slot's `pulled` counter), so its buffer is not modified or freed while they are read.
//!
//! Protocol (one slot per direction, one descriptor outstanding at a time):
//!
//! ```text
//! writer                                        reader
//! (ring holds inline bytes up to `at`)
//! addr, len, at = ...; pulled = 0   (Relaxed)
//! seq += 1                          (SeqCst)    s = seq (SeqCst); if s > done and head == at:
//! wake_reader                                       copy from (pid, addr + p) into dest
//!                                                   pulled = p + n     (SeqCst)
//! p = pulled (SeqCst); report p - reported          wake_writer; if p + n == len: done = s
//! when p == len: the slot is free again
//! ```
//!
//! The writer writes nothing into the ring while a descriptor is outstanding, so every inline byte
//! in the ring precedes the descriptor; the reader drains the ring up to `at`, pulls, then goes on
//! with the ring. Whether a receiver can pull from its peer (same user, no Yama or seccomp rule
//! against it) is tested once, when the link is set up ([`probe`]); the sender only posts
//! descriptors to a receiver that said it can.
//!
//! A peer process can only make this side read the peer's own memory (the kernel checks every
//! address against the peer's mappings) into a destination this side chose and clamped: a hostile
//! or corrupt peer causes wrong data or an error, never a write out of bounds.

use crate::transport::Traffic;
use std::io;
use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicU32, AtomicU64};

/// Slices shorter than this go through the ring unless `PSY_SHM_CMA_MIN` says otherwise.
pub const DEFAULT_MIN_PULL: usize = 64 << 10;

/// Under [`PullPolicy::ByTraffic`], the smallest point-to-point message pulled by a receiver
/// blocked receiving it ([`rendezvous_window`]).
pub const RENDEZVOUS_MIN_PULL: usize = 16 << 10;

/// Under [`PullPolicy::ByTraffic`], the smallest slice pulled when both sides of the pair send at
/// once ([`Traffic::Exchange`]).
pub const EXCHANGE_MIN_PULL: usize = 8 << 10;

/// Under [`PullPolicy::ByTraffic`], the largest slice sent by pull descriptor when only one side
/// of the pair is sending ([`Traffic::OneWay`]).
pub const ONE_WAY_MAX_PULL: usize = 1 << 20;

/// Under [`PullPolicy::ByTraffic`], the smallest slice pulled when both sides reduce while they
/// exchange ([`Traffic::ReducingExchange`]).
pub const REDUCING_EXCHANGE_MIN_PULL: usize = 1 << 20;

/// Under [`PullPolicy::ByTraffic`], the largest slice pulled for a reduce
/// ([`Traffic::ReducingOneWay`]), whose smallest is [`DEFAULT_MIN_PULL`].
pub const REDUCE_MAX_PULL: usize = 512 << 10;

/// `PSY_SHM_CMA`: `1` (or anything but `0`, `off`, `no`) sends every slice of at least
/// `PSY_SHM_CMA_MIN` bytes by pull descriptor; `0`, `off` or `no` sends none; unset: by traffic.
pub const CMA: &str = "PSY_SHM_CMA";
/// `PSY_SHM_CMA_MIN`: the smallest slice sent by pull descriptor (implies `PSY_SHM_CMA=1`).
pub const CMA_MIN: &str = "PSY_SHM_CMA_MIN";

/// Which slices a shared-memory link sends by pull descriptor (read once per group into
/// [`crate::transport::TransportTunables::shm_pulls`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullPolicy {
    /// None: every byte crosses the ring (`PSY_SHM_CMA=0`).
    Off,
    /// Every slice of at least `min` bytes (`PSY_SHM_CMA=1`, `PSY_SHM_CMA_MIN=BYTES`).
    Every {
        /// The smallest slice pulled.
        min: usize,
    },
    /// By the traffic the message belongs to (`pull_window`): the default.
    ByTraffic,
}

impl PullPolicy {
    /// From the values of `PSY_SHM_CMA` and `PSY_SHM_CMA_MIN`; an unreadable minimum counts as
    /// unset.
    pub fn parse(on: Option<&str>, min: Option<&str>) -> PullPolicy {
        let min = min.and_then(|v| v.trim().parse::<usize>().ok());
        match (on.map(str::trim), min) {
            (Some("0" | "off" | "no"), _) => PullPolicy::Off,
            (Some(_), m) | (None, m @ Some(_)) => PullPolicy::Every {
                min: m.map_or(DEFAULT_MIN_PULL, |v| v.max(1)),
            },
            (None, None) => PullPolicy::ByTraffic,
        }
    }
}

/// The slice lengths (`min..=max`) sent by pull descriptor under `policy` for messages of
/// `traffic`, or `None` for none.
///
/// A pulled slice counts as sent only once the receiver has pulled it, so a point-to-point send
/// ([`Traffic::Eager`]) is not pulled by this window: it completes as soon as the ring holds it,
/// and a program may send to a peer that is itself sending before it receives. Only when the
/// receiver is blocked receiving that very message ([`PullSlot::awaited`]) is it pulled, or what
/// the ring has not yet carried of it ([`rendezvous_window`]).
///
/// The default ([`PullPolicy::ByTraffic`]) follows what was measured on a 2-core host, 2 and 8
/// ranks (`results/versus-openmpi`, and the ring against pulls alternated in one session): a pull
/// is one copy, made by the receiver alone, while the ring is two copies that the two sides make
/// at the same time, so
/// - when both sides send at once ([`Traffic::Exchange`]: all-to-all, all-gather, reduce-scatter),
///   each core has its own copy to make either way and one copy beats two: pulls from 8 KiB
///   (`results/shm-pulls`: 0.72-0.80x the time at 16 KiB, 0.48-0.58x at 256 KiB-1 MiB);
/// - when one side sends ([`Traffic::OneWay`]), the ring's two copies overlap and win once
///   messages leave the cache, but below that a pull has less to synchronise: whole messages of
///   64 KiB to 1 MiB are pulled (broadcast at 256 KiB, scatter at 1 MiB: 0.60-0.62x the time;
///   pulled from 4 MiB, a broadcast or gather was 1.1x slower, `results/shm-pulls`);
/// - a receiver that reduces step by step (all-reduce, reduce) reads the ring into a window that
///   stays in the cache; pulled, it waits on the kernel copy before it can reduce: all-reduce was
///   1.2x slower with pulls up to 512 KiB messages and 1.4x faster from 1 MiB, so it pulls from
///   1 MiB; a reduce was 0.74-0.89x the time with pulls from 64 to 512 KiB and 1.13x at 1 MiB,
///   so it pulls whole messages of 64-512 KiB.
///
/// On a `crowded` host (more ranks than cores) exchanges pull from 64 KiB only: a pulled send
/// completes when its receiver has run the copy, which there waits for the receiver to be
/// scheduled, while a send into the ring completes at once (8 ranks on 2 cores, all-gather of
/// 64 KiB: 0.96x Open MPI's speed with pulls from 64 KiB, 0.40x with pulls from 8 KiB, in two
/// runs of `scripts/bench/versus-mpi.sh` on 2026-11-25 that were not kept).
pub fn pull_window(policy: PullPolicy, traffic: Traffic, crowded: bool) -> Option<(usize, usize)> {
    match policy {
        PullPolicy::Off => None,
        _ if matches!(traffic, Traffic::Eager { .. }) => None,
        PullPolicy::Every { min } => Some((min, usize::MAX)),
        PullPolicy::ByTraffic => match traffic {
            Traffic::Exchange if crowded => Some((DEFAULT_MIN_PULL, usize::MAX)),
            Traffic::Exchange => Some((EXCHANGE_MIN_PULL, usize::MAX)),
            Traffic::ReducingExchange => Some((REDUCING_EXCHANGE_MIN_PULL, usize::MAX)),
            Traffic::OneWay => Some((DEFAULT_MIN_PULL, ONE_WAY_MAX_PULL)),
            Traffic::ReducingOneWay => Some((DEFAULT_MIN_PULL, REDUCE_MAX_PULL)),
            Traffic::Eager { .. } => None,
        },
    }
}

/// The lengths (`min..=max`) of point-to-point messages sent by pull descriptor to a receiver
/// blocked receiving them (the sender then waits for the receiver's one copy instead of making
/// the ring's first), or `None` under [`PullPolicy::Off`]. A message whose receiver is not
/// waiting yet enters the ring a growing slice at a time, and once the receiver waits, the rest
/// is pulled. By default 16 KiB to 1 MiB: on 2 ranks, ping-pong (`psybench sendrecv`), this and
/// the late receiver's pulls took 0.61-0.88 of the time of whole messages from 64 KiB at
/// 16 KiB-1 MiB (`results/shm-p2p-rendezvous/late-receiver/`); pulls from 4 or 8 KiB did not
/// gain at 8 KiB, and without the maximum 4-16 MiB ran 0.7-0.9x as fast. On a `crowded` host,
/// where a receiver that waits may be asleep and its sender with it until it is scheduled, 64 KiB
/// to 1 MiB (8 ranks on 2 cores, 16 KiB: 1.2x slower pulled, within the rounds' spread; quick
/// runs, not kept).
pub fn rendezvous_window(policy: PullPolicy, crowded: bool) -> Option<(usize, usize)> {
    match policy {
        PullPolicy::Off => None,
        PullPolicy::Every { min } => Some((min, usize::MAX)),
        PullPolicy::ByTraffic if crowded => Some((DEFAULT_MIN_PULL, ONE_WAY_MAX_PULL)),
        PullPolicy::ByTraffic => Some((RENDEZVOUS_MIN_PULL, ONE_WAY_MAX_PULL)),
    }
}

/// One direction's pull descriptor, in the segment's header page (64-byte aligned).
#[repr(C, align(64))]
pub struct PullSlot {
    /// Descriptors ever posted; the writer bumps it to publish one.
    seq: AtomicU64,
    /// The stream position (ring bytes written before it) where the pulled bytes belong.
    at: AtomicU64,
    /// The address of the bytes in the writer's process.
    addr: AtomicU64,
    /// How many bytes.
    len: AtomicU64,
    _pad: [u64; 4],
    /// Bytes of the current descriptor the reader has pulled (its own cache line).
    pulled: AtomicU64,
    /// The point-to-point message (its number on the pair, from 1) the reader is blocked
    /// receiving; 0: none. Written by the reader, in its line.
    awaited: AtomicU64,
}

/// One side's facts for its peer, in the segment's header page.
#[repr(C, align(64))]
pub struct SideInfo {
    /// The process id.
    pub pid: AtomicU64,
    /// An address in this side's process holding [`PROBE_WORD`], for the peer's [`probe`].
    pub probe_addr: AtomicU64,
    /// 1 once this side has checked that it can pull from the peer: the peer may post
    /// descriptors to it.
    pub can_pull: AtomicU32,
}

/// The word [`probe`] expects to read from a peer.
pub const PROBE_WORD: u64 = u64::from_le_bytes(*b"PSYPULL1");

/// Where, in the segment's header page, each side's info and wishes and each direction's slot
/// live.
pub mod offsets {
    /// The lower rank's [`super::SideInfo`].
    pub const SIDE_LOWER: usize = 64;
    /// The higher rank's [`super::SideInfo`].
    pub const SIDE_HIGHER: usize = 128;
    /// The lower rank's [`crate::transport::shm::crossing::Wishes`].
    pub const WISHES_LOWER: usize = 256;
    /// The higher rank's [`crate::transport::shm::crossing::Wishes`].
    pub const WISHES_HIGHER: usize = 320;
    /// The slot of ring A (lower rank → higher).
    pub const SLOT_A: usize = 1024;
    /// The slot of ring B (higher rank → lower).
    pub const SLOT_B: usize = 2048;
}

const _: () = {
    assert!(size_of::<PullSlot>() == 128);
    assert!(offset_of!(PullSlot, pulled) == 64);
    assert!(size_of::<SideInfo>() == 64);
    assert!(offsets::SIDE_HIGHER - offsets::SIDE_LOWER >= size_of::<SideInfo>());
    assert!(offsets::WISHES_LOWER >= offsets::SIDE_HIGHER + size_of::<SideInfo>());
    assert!(
        offsets::WISHES_HIGHER - offsets::WISHES_LOWER
            >= size_of::<crate::transport::shm::crossing::Wishes>()
    );
    assert!(
        offsets::WISHES_HIGHER + size_of::<crate::transport::shm::crossing::Wishes>()
            <= offsets::SLOT_A
    );
    assert!(offsets::SLOT_B - offsets::SLOT_A >= size_of::<PullSlot>());
    assert!(offsets::SLOT_B + size_of::<PullSlot>() <= 4096);
};

use std::sync::atomic::Ordering::{Relaxed, SeqCst};

impl PullSlot {
    /// Writer: publishes a descriptor for `len` bytes at `addr` (in this process), belonging at
    /// stream position `at`; returns its sequence number. The previous descriptor must be fully
    /// pulled.
    pub fn post(&self, at: u64, addr: u64, len: u64) -> u64 {
        self.addr.store(addr, Relaxed);
        self.len.store(len, Relaxed);
        self.at.store(at, Relaxed);
        self.pulled.store(0, Relaxed);
        // SeqCst: a Release store (the fields above are visible to whoever sees the new number)
        // and ordered before the writer's check whether the reader sleeps (the ring's wake-up
        // protocol, see `Ring::wait_readable_or`).
        let seq = self.seq.load(Relaxed) + 1;
        self.seq.store(seq, SeqCst);
        seq
    }

    /// Writer: bytes of the current descriptor pulled so far.
    pub fn pulled(&self) -> u64 {
        self.pulled.load(SeqCst)
    }

    /// Reader: the newest descriptor, if one after `done` was posted: (seq, at, addr, len).
    pub fn pending(&self, done: u64) -> Option<(u64, u64, u64, u64)> {
        let seq = self.seq.load(SeqCst);
        (seq > done).then(|| {
            (
                seq,
                self.at.load(Relaxed),
                self.addr.load(Relaxed),
                self.len.load(Relaxed),
            )
        })
    }

    /// Reader: whether a descriptor after `done` was posted (for sleep conditions).
    pub fn has_pending(&self, done: u64) -> bool {
        self.seq.load(SeqCst) > done
    }

    /// Reader: records that `n` bytes of the current descriptor have been pulled in total.
    pub fn set_pulled(&self, n: u64) {
        self.pulled.store(n, SeqCst);
    }

    /// Reader: says which point-to-point message it is blocked receiving (0: none).
    pub fn set_awaited(&self, seq: u64) {
        // Relaxed: a writer that misses the newest value only sends through the ring, and a
        // stale value names a message already received, which no writer sends again.
        self.awaited.store(seq, Relaxed);
    }

    /// Writer: the point-to-point message the reader is blocked receiving (0: none).
    pub fn awaited(&self) -> u64 {
        self.awaited.load(Relaxed)
    }
}

/// Copies `dst.len()` bytes from address `addr` of process `pid` into `dst` (one
/// `process_vm_readv`); returns how many it copied (fewer on a partial read).
pub fn pull(pid: i32, addr: u64, dst: &mut [u8]) -> io::Result<usize> {
    if dst.is_empty() {
        return Ok(0);
    }
    let local = libc::iovec {
        iov_base: dst.as_mut_ptr().cast(),
        iov_len: dst.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: dst.len(),
    };
    // SAFETY: `local` describes `dst`, a live exclusive borrow of `dst.len()` writable bytes, for
    // the whole call; the kernel writes at most that many bytes there. `remote` is only an address
    // in the other process, which the kernel checks against that process's mappings (a bad one
    // gives EFAULT, never an access in ours). One iovec each, flags 0.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Checks that this process may read the memory of process `pid`, by reading [`PROBE_WORD`] at
/// `addr` there. Errors say why not (for instance `EPERM` under Yama's `ptrace_scope` or a
/// container's seccomp profile).
pub fn probe(pid: i32, addr: u64) -> io::Result<()> {
    let mut word = [0u8; 8];
    let n = pull(pid, addr, &mut word)?;
    if n != 8 || u64::from_ne_bytes(word) != PROBE_WORD {
        return Err(io::Error::other(format!(
            "read {n} bytes that are not the probe word from process {pid}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_reads_this_process_and_reports_bad_addresses() {
        let src: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        let pid = std::process::id() as i32;
        let n = pull(pid, src.as_ptr() as u64, &mut dst).expect("process_vm_readv on self");
        assert_eq!(n, src.len());
        assert_eq!(dst, src);
        assert!(
            pull(pid, 8, &mut dst[..8]).is_err(),
            "address 8 is never mapped"
        );
        let word = PROBE_WORD;
        probe(pid, &word as *const u64 as u64).expect("probe of self");
        let other = 7u64;
        assert!(probe(pid, &other as *const u64 as u64).is_err());
    }

    #[test]
    fn the_pull_policy_comes_from_the_environment_and_the_traffic_picks_the_window() {
        use PullPolicy::{ByTraffic, Every, Off};
        assert_eq!(PullPolicy::parse(None, None), ByTraffic);
        assert_eq!(PullPolicy::parse(Some(" off "), Some("4096")), Off);
        assert_eq!(
            PullPolicy::parse(Some("1"), None),
            Every {
                min: DEFAULT_MIN_PULL
            }
        );
        assert_eq!(PullPolicy::parse(None, Some("0")), Every { min: 1 });
        assert_eq!(PullPolicy::parse(None, Some("lots")), ByTraffic);
        for t in [
            Traffic::Exchange,
            Traffic::ReducingExchange,
            Traffic::OneWay,
            Traffic::ReducingOneWay,
        ] {
            for crowded in [false, true] {
                assert_eq!(pull_window(Off, t, crowded), None);
                assert_eq!(
                    pull_window(Every { min: 9 }, t, crowded),
                    Some((9, usize::MAX))
                );
            }
        }
        // A point-to-point send completes without its receiver: not pulled by the window, only
        // by rendezvous with a receiver already waiting for it.
        for policy in [Off, Every { min: 1 }, ByTraffic] {
            assert_eq!(pull_window(policy, Traffic::Eager { seq: 1 }, false), None);
        }
        for crowded in [false, true] {
            assert_eq!(rendezvous_window(Off, crowded), None);
            assert_eq!(
                rendezvous_window(Every { min: 9 }, crowded),
                Some((9, usize::MAX))
            );
        }
        assert_eq!(
            rendezvous_window(ByTraffic, false),
            Some((16 << 10, 1 << 20))
        );
        assert_eq!(
            rendezvous_window(ByTraffic, true),
            Some((64 << 10, 1 << 20))
        );
        let by = |t| pull_window(ByTraffic, t, false);
        assert_eq!(by(Traffic::Exchange), Some((8 << 10, usize::MAX)));
        let crowded = pull_window(ByTraffic, Traffic::Exchange, true);
        assert_eq!(crowded, Some((64 << 10, usize::MAX)));
        assert_eq!(by(Traffic::ReducingExchange), Some((1 << 20, usize::MAX)));
        assert_eq!(by(Traffic::OneWay), Some((64 << 10, 1 << 20)));
        assert_eq!(by(Traffic::ReducingOneWay), Some((64 << 10, 512 << 10)));
    }

    #[test]
    fn a_slot_publishes_descriptors_in_order() {
        let slot = PullSlot {
            seq: AtomicU64::new(0),
            at: AtomicU64::new(0),
            addr: AtomicU64::new(0),
            len: AtomicU64::new(0),
            _pad: [0; 4],
            pulled: AtomicU64::new(0),
            awaited: AtomicU64::new(0),
        };
        assert!(slot.pending(0).is_none());
        let s = slot.post(40, 0x1000, 300);
        assert_eq!(slot.pending(0), Some((s, 40, 0x1000, 300)));
        assert!(slot.has_pending(0));
        slot.set_pulled(300);
        assert_eq!(slot.pulled(), 300);
        assert!(slot.pending(s).is_none());
        let s2 = slot.post(80, 0x2000, 10);
        assert_eq!(s2, s + 1);
        assert_eq!(slot.pulled(), 0);
    }
}
