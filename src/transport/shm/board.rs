//! A node board: one segment shared by every rank of a group that lives on one host, with a pair
//! of slots per rank, so that a small collective is one write of a cache line or two by each rank
//! and a read of everyone else's, instead of messages through the pairwise rings.
//!
//! Layout: a header page (magic, nonce, size, then each rank's pid at `64 + 4 × rank`), then for
//! every rank two slots (double buffering by the parity of the operation's number). A slot is a
//! 128-byte header (`seq: u64` the number of the operation its data belongs to and 40 bytes
//! describing the operation; then `seq32: u32`, the futex word mirroring `seq`, `sleepers`, and
//! in parity 0 `aborted`, set when the rank gives up the group) followed by
//! [`SLOT_DATA`] bytes. The polled word (`seq`) and the description share the first cache line;
//! the futex word and the sleeper count have a line of their own, so a publisher's look at
//! `sleepers` does not fight the readers polling `seq`.

use super::futex;
use super::segment::{self, Segment};
use crate::bootstrap::Store;
use crate::error::{Error, ErrorKind, Result};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The most ranks a board serves (their pids must fit in the header page); larger groups on one
/// host use the rings only.
pub const MAX_RANKS: usize = (PAGE - 64) / 4;
/// Bytes of data a slot holds: collectives up to this size per rank go through the board.
pub const SLOT_DATA: usize = 4096;
/// Bytes describing the operation in a slot.
pub const DESC: usize = 40;
const SLOT_HEADER: usize = 128;
const DESC_AT: usize = 8;
const SEQ32_AT: usize = 64;
const SLEEPERS_AT: usize = 68;
/// In a rank's slot of parity 0: 0, or the mark with which it gave up the group
/// ([`Board::mark_aborted`]): 1 + the code of the error kind in the low byte, 1 + the rank the
/// error was about (0 for none) above it.
const ABORTED_AT: usize = 72;
const SLOT: usize = SLOT_HEADER + SLOT_DATA;
const PAGE: usize = 4096;
const MAGIC: &[u8; 8] = b"PSYBRD01";

/// How a rank gave up the group, as its board slot says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbortMark {
    /// The executor's code of the error kind.
    pub code: u8,
    /// The rank the error was about (the peer it lost or timed out waiting for), if any.
    pub about: Option<usize>,
}

impl AbortMark {
    /// The word stored at `ABORTED_AT`: never 0. A code of 255 is stored as 254 and a rank
    /// beyond 2^24 − 2 as none.
    fn encode(self) -> u32 {
        let about = self
            .about
            .and_then(|r| u32::try_from(r + 1).ok())
            .filter(|&r| r < 1 << 24)
            .unwrap_or(0);
        about << 8 | (u32::from(self.code.min(254)) + 1)
    }

    /// The mark of a stored word, `None` for 0 (the rank did not give up).
    fn decode(word: u32) -> Option<AbortMark> {
        (word != 0).then(|| AbortMark {
            code: ((word & 0xff).max(1) - 1) as u8,
            about: (word >> 8).checked_sub(1).map(|r| r as usize),
        })
    }
}

/// The board of one group on one host.
pub struct Board {
    segment: Segment,
    rank: usize,
    size: usize,
}

// SAFETY: the board only hands out views whose shared fields are atomics, or data regions whose
// writer is a single rank and whose readers wait for that rank's release store of `seq`.
unsafe impl Send for Board {}
// SAFETY: as above; `&Board` gives no unsynchronised mutable access.
unsafe impl Sync for Board {}

fn len_for(size: usize) -> usize {
    PAGE + size * 2 * SLOT
}

impl Board {
    /// Forms the board of a group whose `size` ranks are all on this host: rank 0 creates it
    /// (mode 0600, a name carrying the job id), publishes its name and a nonce in the group's
    /// store, every other rank maps it, checks the nonce and says so in the store, and rank 0
    /// unlinks the name once everyone has mapped it.
    pub fn setup(
        store: &dyn Store,
        prefix: &str,
        job_id: &str,
        rank: usize,
        size: usize,
        deadline: Instant,
    ) -> Result<Board> {
        let len = len_for(size);
        let bootstrap = |what: String| Error::new(ErrorKind::Bootstrap, what);
        let segment = if rank == 0 {
            let name = segment::name_for(job_id, &format!("{prefix}#board"), 0, 0);
            let seg = Segment::create(&name, len)
                .map_err(|e| bootstrap(format!("creating the node board {name}: {e}")))?;
            let mut nonce = [0u8; 16];
            getrandom::fill(&mut nonce)
                .map_err(|e| bootstrap(format!("reading random bytes: {e}")))?;
            // SAFETY: the mapping is `len` bytes (more than a page), writable, and nobody else
            // knows its name yet.
            unsafe {
                std::ptr::copy_nonoverlapping(MAGIC.as_ptr(), seg.as_ptr(), 8);
                std::ptr::copy_nonoverlapping(nonce.as_ptr(), seg.as_ptr().add(8), 16);
            }
            let hex: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
            store.set(
                &format!("{prefix}/board"),
                format!("{name} {hex}").as_bytes(),
            )?;
            let waited = (1..size).try_for_each(|r| {
                store
                    .get(&format!("{prefix}/board_ok/{r}"), deadline)
                    .map(|_| ())
            });
            let _ = segment::unlink(&name);
            waited.map_err(|e| e.context("waiting for every rank to map the node board"))?;
            seg
        } else {
            let raw = store.get(&format!("{prefix}/board"), deadline)?;
            let text = String::from_utf8_lossy(&raw).into_owned();
            let (name, hex) = text
                .split_once(' ')
                .ok_or_else(|| bootstrap(format!("malformed node board entry {text:?}")))?;
            let seg = Segment::open(name, len)
                .map_err(|e| bootstrap(format!("opening the node board {name}: {e}")))?;
            let mut head = [0u8; 24];
            // SAFETY: the mapping is at least a page long; 24 bytes are read from its start.
            unsafe { std::ptr::copy_nonoverlapping(seg.as_ptr(), head.as_mut_ptr(), 24) };
            let want: String = head[8..24].iter().map(|b| format!("{b:02x}")).collect();
            if &head[..8] != MAGIC || want != hex {
                return Err(bootstrap(format!(
                    "{name} is not the node board rank 0 created (nonce differs): refusing it"
                )));
            }
            store.set(&format!("{prefix}/board_ok/{rank}"), b"1")?;
            seg
        };
        let board = Board {
            segment,
            rank,
            size,
        };
        board
            .pid_word(rank)
            .store(std::process::id(), Ordering::SeqCst);
        Ok(board)
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Ranks on the board.
    pub fn size(&self) -> usize {
        self.size
    }

    fn pid_word(&self, rank: usize) -> &AtomicU32 {
        assert!(
            rank < self.size && 64 + 4 * self.size <= PAGE,
            "rank outside the board"
        );
        // SAFETY: the word lies inside the header page of the mapping, is 4-byte aligned, and is
        // only ever accessed atomically; the mapping lives as long as `self`.
        unsafe { &*(self.segment.as_ptr().add(64 + 4 * rank) as *const AtomicU32) }
    }

    /// The process id `rank` recorded when it mapped the board (0 if it has not yet).
    pub fn pid(&self, rank: usize) -> u32 {
        self.pid_word(rank).load(Ordering::SeqCst)
    }

    /// Marks this rank as having given up the group after an error of kind `code` (the
    /// executor's number for it, below 255) about rank `about`, if it was about one. Ranks
    /// waiting on the board for some other rank see it ([`Board::aborted`]) even when this
    /// rank's slot already holds the operation they are in: its abort message over the links
    /// (which carries the whole reason) would then look like the next call's and stay unread.
    pub fn mark_aborted(&self, code: u8, about: Option<usize>) {
        self.slot(self.rank, 0)
            .aborted()
            .store(AbortMark { code, about }.encode(), Ordering::SeqCst);
    }

    /// The mark with which `rank` gave up the group, if it did.
    pub fn aborted(&self, rank: usize) -> Option<AbortMark> {
        AbortMark::decode(self.slot(rank, 0).aborted().load(Ordering::SeqCst))
    }

    /// Slot `parity` (0 or 1) of `rank`.
    pub fn slot(&self, rank: usize, parity: usize) -> Slot<'_> {
        assert!(rank < self.size && parity < 2, "slot outside the board");
        // SAFETY: the slot lies inside the mapping (len_for counts size × 2 slots after the
        // header page) at a 64-byte aligned offset.
        let base = unsafe { self.segment.as_ptr().add(PAGE + (rank * 2 + parity) * SLOT) };
        Slot {
            base,
            _board: std::marker::PhantomData,
        }
    }
}

/// One slot of the board.
pub struct Slot<'a> {
    base: *mut u8,
    _board: std::marker::PhantomData<&'a Board>,
}

impl<'a> Slot<'a> {
    fn seq(&self) -> &AtomicU64 {
        // SAFETY: offset 0 of a 64-byte aligned slot, accessed only atomically.
        unsafe { &*(self.base as *const AtomicU64) }
    }
    fn seq32(&self) -> &AtomicU32 {
        // SAFETY: offset 64 of a 64-byte aligned slot, accessed only atomically.
        unsafe { &*(self.base.add(SEQ32_AT) as *const AtomicU32) }
    }
    fn sleepers(&self) -> &AtomicU32 {
        // SAFETY: offset 68 of a 64-byte aligned slot, accessed only atomically.
        unsafe { &*(self.base.add(SLEEPERS_AT) as *const AtomicU32) }
    }
    fn aborted(&self) -> &AtomicU32 {
        // SAFETY: offset 72 of a 64-byte aligned slot (inside its 128-byte header), accessed
        // only atomically.
        unsafe { &*(self.base.add(ABORTED_AT) as *const AtomicU32) }
    }

    /// Writes `desc` and `data` (at most [`SLOT_DATA`] bytes) and then publishes them as the data
    /// of operation `k`, waking any rank asleep on this slot. Only the slot's owner calls this.
    pub fn publish(&self, k: u64, desc: &[u8; DESC], data: &[u8]) {
        assert!(data.len() <= SLOT_DATA, "slot data too large");
        // SAFETY: the owner is the only writer of the slot's description and data; readers look
        // at them only after seeing `seq == k` (acquire), which the release store below orders
        // after these copies. The caller guarantees (by the double-buffering argument in
        // `executor::flat`) that no reader still reads the previous contents of this parity.
        unsafe {
            std::ptr::copy_nonoverlapping(desc.as_ptr(), self.base.add(DESC_AT), DESC);
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.add(SLOT_HEADER), data.len());
        }
        self.seq().store(k, Ordering::Release);
        self.seq32().store(k as u32, Ordering::SeqCst);
        if self.sleepers().load(Ordering::SeqCst) > 0 {
            futex::wake(self.seq32(), i32::MAX);
        }
    }

    /// True once the slot holds the data of operation `k`.
    pub fn ready(&self, k: u64) -> bool {
        self.seq().load(Ordering::Acquire) == k
    }

    /// Sleeps until the slot may hold operation `k`, or `timeout` passes (spurious returns are
    /// allowed: callers re-check with [`Slot::ready`]).
    pub fn sleep(&self, k: u64, timeout: Duration) {
        self.sleepers().fetch_add(1, Ordering::SeqCst);
        // Announced before looking: a publisher that stored seq32 before our look is seen here;
        // one that stores it after our look sees `sleepers > 0` and wakes us.
        let now = self.seq32().load(Ordering::SeqCst);
        if now != k as u32 {
            futex::wait(self.seq32(), now, timeout);
        }
        self.sleepers().fetch_sub(1, Ordering::SeqCst);
    }

    /// The description of the operation whose data the slot holds (valid once [`Slot::ready`]).
    pub fn desc(&self) -> [u8; DESC] {
        let mut d = [0u8; DESC];
        // SAFETY: 40 bytes at offset 8 of the slot; written by the owner before its release
        // store of `seq`, which the caller observed with acquire.
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(DESC_AT), d.as_mut_ptr(), DESC) };
        d
    }

    /// The first `len` bytes of the slot's data (valid once [`Slot::ready`]); 128-byte aligned.
    pub fn data(&self, len: usize) -> &'a [u8] {
        assert!(len <= SLOT_DATA, "slot data too large");
        // SAFETY: inside the slot; written by the owner before its release store of `seq`, which
        // the caller observed; the owner does not write this parity again until every rank has
        // finished reading it (see `executor::flat`).
        unsafe { std::slice::from_raw_parts(self.base.add(SLOT_HEADER), len) }
    }
}

#[cfg(test)]
mod tests {
    use super::AbortMark;

    #[test]
    fn an_abort_mark_keeps_its_kind_and_the_rank_it_was_about() {
        for about in [None, Some(0), Some(1), Some(1007), Some((1 << 24) - 2)] {
            for code in [0, 3, 254] {
                let mark = AbortMark { code, about };
                assert_ne!(mark.encode(), 0, "{mark:?}");
                assert_eq!(AbortMark::decode(mark.encode()), Some(mark));
            }
        }
        assert_eq!(AbortMark::decode(0), None);
        let far = AbortMark {
            code: 2,
            about: Some(1 << 24),
        };
        assert_eq!(AbortMark::decode(far.encode()).unwrap().about, None);
    }
}
