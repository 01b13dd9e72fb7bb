//! A node board: one segment shared by every rank of a group that lives on one host, with a pair
//! of slots per rank, so that a small collective is one write of a cache line or two by each rank
//! and a read of everyone else's, instead of messages through the pairwise rings.
//!
//! Layout: a header page (magic, nonce, the arrival counter, its sleeper count, the any-abort
//! flag and whether the board counts arrivals, then each rank's pid at `64 + 4 × rank`), then for
//! every rank two slots (double buffering by the parity of the operation's number). A slot is a
//! 128-byte header (`seq: u64` the number of the operation its data belongs to and 40 bytes
//! describing the operation; then `seq32: u32`, the futex word mirroring `seq`, `sleepers`, in
//! parity 0 `aborted`, set when the rank gives up the group, and `state: u64` at 80, below)
//! followed by [`slot_data_for`] bytes (4–16 KiB, more on smaller groups). The polled word (`seq`) and the description share the first cache line; the futex word and the
//! sleeper count have a line of their own, so a publisher's look at `sleepers` does not fight the
//! readers polling `seq`.
//!
//! After the slots, page aligned, every rank's two summary lines (one per parity, packed): on a
//! crowded board (below) a publish also writes there its `seq`, its description and a part of up
//! to [`INLINE`] bytes, and a rank reading every peer's part of a small call reads these `size`
//! contiguous lines ([`Board::summary`]) instead of a page of every peer: with hundreds of ranks
//! on a host, each rank faulting in, reading and unmapping the whole board made the board's cost
//! grow with the square of the ranks. Where every rank has a core, the summaries are not written
//! and the slots alone serve, as before.
//!
//! Whether a rank joined an operation is decided by a compare-and-swap of its slot's `state`
//! word (beside the futex word, a line readers do not poll): the owner swaps in the operation's
//! number when it publishes, and a rank that gives up waiting for a peer's part of an operation
//! swaps in a withdrawal ([`Slot::withdraw`]); whichever comes first decides for every rank
//! whether the operation can complete anywhere ([`super::withdraw`] says why that is
//! race-free). `seq` says `k` only after the owner's swap succeeded.
//!
//! On a board of more ranks than the host has cores (rank 0 decides when it creates the board and
//! says so in the header), an arrival counter counts publishes ([`Board::publish`]): operation
//! `k` is complete when it reaches `k × size`, and the rank whose publish completes it wakes every
//! rank asleep on it. A rank waiting for all the others sleeps on that one word
//! ([`Board::sleep_until_arrived`]) and wakes once, not once per late peer: with hundreds of ranks
//! on a few cores, per-slot sleeps made every rank wake for nearly every other. Where every rank
//! has a core, ranks poll the slots and rarely sleep, and the counter's shared line would only
//! slow the call (0.26 → 0.40 µs for 2 ranks' 8-byte all-reduce): it is not used there.

use super::crossing::Crossing;
use super::futex;
use super::segment::{self, Segment};
use super::withdraw::{Withdraw, Withdrawal};
use crate::bootstrap::Store;
use crate::error::{Error, ErrorKind, Result};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The most ranks a board serves (their pids must fit in the header page); larger groups on one
/// host use the rings only.
pub const MAX_RANKS: usize = (PAGE - 64) / 4;
/// Bytes of data a slot holds on any board; on small groups slots hold more
/// ([`slot_data_for`]).
pub const SLOT_DATA: usize = 4096;
/// Bytes of data a slot holds on the smallest groups ([`slot_data_for`]).
pub const SLOT_DATA_MAX: usize = 16 * 1024;
/// How many bytes of its peers' parts a rank of a board call may have to read (with slots of
/// [`slot_data_for`] bytes): a flat call's reads grow with the group, a ring schedule's do not.
const READ_BUDGET: usize = 32 * 1024;
/// Bytes describing the operation in a slot.
pub const DESC: usize = 40;
/// Bytes of a part a summary line holds (a larger part is read from the slot).
pub const INLINE: usize = 16;
/// Bytes of a summary line: `seq`, the description, and a part of up to [`INLINE`] bytes.
const SUMMARY: usize = 64;
const INLINE_AT: usize = 48;
/// In a slot's first line, beside `seq` (a slot keeps no part there): how long its owner's
/// previous board call took it, in its owner's clock's ticks, or 0 ([`Board::publish`]).
const TOOK_AT: usize = 48;
const SLOT_HEADER: usize = 128;
const DESC_AT: usize = 8;
const SEQ32_AT: usize = 64;
const SLEEPERS_AT: usize = 68;
/// In a rank's slot of parity 0: 0, or the mark with which it gave up the group
/// ([`Board::mark_aborted`]): 1 + the code of the error kind in the low byte, 1 + the rank the
/// error was about (0 for none) above it.
const ABORTED_AT: usize = 72;
/// In every slot: the word that decides whether its owner joined an operation: the number of the
/// last one it joined, or the withdrawal of the one it had not joined yet
/// ([`super::withdraw`]). On the line of the futex word, which readers do not poll: the owner's
/// compare-and-swap there costs what the locked store of the futex word it replaces cost.
const STATE_AT: usize = 80;
/// In the header page: the arrival counter (a futex word), the ranks asleep on it, and a flag set
/// once any rank has marked itself aborted.
const ARRIVED_AT: usize = 32;
const ARRIVAL_SLEEPERS_AT: usize = 36;
const ANY_ABORTED_AT: usize = 40;
/// In the header page: 1 if the board counts arrivals.
const COUNTED_AT: usize = 44;
const PAGE: usize = 4096;
const MAGIC: &[u8; 8] = b"PSYBRD01";

/// What a rank publishes as its part of a board operation ([`Board::publish`]).
#[derive(Clone, Copy)]
pub struct Part<'a> {
    /// The description of the call, which every peer checks against its own.
    pub desc: &'a [u8; DESC],
    /// The data the peers take.
    pub data: &'a [u8],
    /// How the data is stored in the slot: through this core's cache (the readers' copies then
    /// come from it) or past it, to memory ([`Crossing`]).
    pub way: Crossing,
    /// How long this rank's previous board call took it, if it timed it (else 0), in ticks of a
    /// clock every rank of the host shares, for peers that weigh ways by the slowest rank's time
    /// ([`Slot::took`]).
    pub took: u64,
}

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
    /// Whether publishes are counted (the header says, as rank 0 decided).
    counted: bool,
    /// Bytes of each slot, header and data ([`slot_len`] of `size`), computed once: every look
    /// at a slot while a call waits uses it.
    slot_len: usize,
}

// SAFETY: the board only hands out views whose shared fields are atomics, or data regions whose
// writer is a single rank and whose readers wait for that rank's release store of `seq`.
unsafe impl Send for Board {}
// SAFETY: as above; `&Board` gives no unsynchronised mutable access.
unsafe impl Sync for Board {}

/// The word at `at` of a board segment's header page (after the magic and nonce, before the
/// pids, 4-byte aligned).
fn header_word(segment: &Segment, at: usize) -> &AtomicU32 {
    assert!(at >= 24 && at + 4 <= 64 && at % 4 == 0, "not a header word");
    // SAFETY: `at` lies in the header page's first line (every board segment is longer than a
    // page), 4-byte aligned; these words are only ever accessed atomically; the reference lives
    // no longer than the segment's mapping.
    unsafe { &*(segment.as_ptr().add(at) as *const AtomicU32) }
}

/// Bytes of data each slot of the board of a group of `size` holds: as much as keeps a rank's
/// reads of every peer's part within [`READ_BUDGET`], a power of two from [`SLOT_DATA`] to
/// [`SLOT_DATA_MAX`] (16 KiB for 2 ranks, 8 KiB for 3–4, 4 KiB beyond). A
/// function of the group's size alone, so every rank lays the board out alike before mapping it.
pub fn slot_data_for(size: usize) -> usize {
    let fits = READ_BUDGET / size.max(1);
    let power = if fits.is_power_of_two() {
        fits
    } else {
        fits.next_power_of_two() / 2
    };
    power.clamp(SLOT_DATA, SLOT_DATA_MAX)
}

/// Bytes of a slot (its header and data) on the board of a group of `size`: a multiple of 64,
/// and 128 bytes more than a multiple of a page, so that no two slots' data begin at the same
/// offset within a page.
fn slot_len(size: usize) -> usize {
    SLOT_HEADER + slot_data_for(size)
}

/// Where the summary lines begin: the page after the slots.
fn summaries_at(size: usize) -> usize {
    (PAGE + size * 2 * slot_len(size)).next_multiple_of(PAGE)
}

fn len_for(size: usize) -> usize {
    summaries_at(size) + size * 2 * SUMMARY
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
            // Before the store names the board: every rank reads it after mapping.
            let counted = crate::wait::oversubscribed(size);
            header_word(&seg, COUNTED_AT).store(u32::from(counted), Ordering::SeqCst);
            let hex: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
            store.set(
                &format!("{prefix}/board"),
                format!("{name} {hex}").as_bytes(),
            )?;
            let waited = store
                .get_range(&format!("{prefix}/board_ok/"), 1..size, deadline)
                .map(drop);
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
        let mut board = Board {
            segment,
            rank,
            size,
            counted: false,
            slot_len: slot_len(size),
        };
        board.counted = board.header_word(COUNTED_AT).load(Ordering::SeqCst) == 1;
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

    /// Bytes of data each slot holds: the most a rank publishes in one call.
    pub fn slot_data(&self) -> usize {
        self.slot_len - SLOT_HEADER
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

    /// The word at `at` of the header page.
    fn header_word(&self, at: usize) -> &AtomicU32 {
        header_word(&self.segment, at)
    }

    /// The counter's value once every rank has published operation `k` (wrapping).
    fn complete_at(&self, k: u64) -> u32 {
        (k as u32).wrapping_mul(self.size as u32)
    }

    /// Publishes this rank's `part` (data of at most [`Board::slot_data`] bytes) as its part of
    /// operation `k`, in its slot of parity `k % 2`, and counts the arrival; the rank whose
    /// arrival completes the operation wakes every rank asleep in
    /// [`Board::sleep_until_arrived`].
    ///
    /// On a board that counts arrivals, the summary line is written first: a reader that sees
    /// the slot's `seq` (or the count) sees the summary's too.
    ///
    /// Fails, publishing nothing, if a peer has withdrawn this rank's part of operation `k`
    /// ([`Slot::withdraw`]: it gave up waiting for this rank); the error says who and why.
    pub fn publish(&self, k: u64, part: &Part<'_>) -> Result<(), Withdrawal> {
        let parity = (k % 2) as usize;
        if self.counted {
            self.summary(self.rank, parity)
                .publish(k, part.desc, part.data);
        }
        self.slot(self.rank, parity).publish(k, part)?;
        if !self.counted {
            return Ok(());
        }
        let arrived = self.header_word(ARRIVED_AT);
        let now = arrived.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
        if now == self.complete_at(k)
            && self.header_word(ARRIVAL_SLEEPERS_AT).load(Ordering::SeqCst) > 0
        {
            futex::wake(arrived, i32::MAX);
        }
        Ok(())
    }

    /// Whether this board counts arrivals (else [`Board::all_arrived`] is never true).
    pub fn counted(&self) -> bool {
        self.counted
    }

    /// True once every rank has published operation `k` (or a later one: ranks are at most one
    /// operation apart, so the counter never runs more than `2 × size` ahead or behind), on a
    /// board that counts arrivals.
    pub fn all_arrived(&self, k: u64) -> bool {
        if !self.counted {
            return false;
        }
        let arrived = self.header_word(ARRIVED_AT).load(Ordering::Acquire);
        arrived.wrapping_sub(self.complete_at(k)) as i32 >= 0
    }

    /// Sleeps until every rank may have published operation `k`, or `timeout` passes (spurious
    /// returns are allowed: callers re-check with [`Board::all_arrived`]).
    pub fn sleep_until_arrived(&self, k: u64, timeout: Duration) {
        let (arrived, sleepers) = (
            self.header_word(ARRIVED_AT),
            self.header_word(ARRIVAL_SLEEPERS_AT),
        );
        sleepers.fetch_add(1, Ordering::SeqCst);
        // Announced before looking: the completing publish either came before this look (seen
        // here) or sees `sleepers > 0` and wakes us. An earlier publish that changes the word
        // after this look makes the wait return at once, and the caller looks again.
        let now = arrived.load(Ordering::SeqCst);
        if now.wrapping_sub(self.complete_at(k)) as i32 >= 0 {
            sleepers.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        futex::wait(arrived, now, timeout);
        sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// The process id `rank` recorded when it mapped the board (0 if it has not yet).
    pub fn pid(&self, rank: usize) -> u32 {
        self.pid_word(rank).load(Ordering::SeqCst)
    }

    /// The first rank whose process has ended, by the pids the ranks recorded.
    pub fn first_gone(&self) -> Option<usize> {
        crate::wait::first_ended((0..self.size()).map(|r| self.pid(r)))
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
        self.header_word(ANY_ABORTED_AT).store(1, Ordering::SeqCst);
    }

    /// The mark with which `rank` gave up the group, if it did.
    pub fn aborted(&self, rank: usize) -> Option<AbortMark> {
        AbortMark::decode(self.slot(rank, 0).aborted().load(Ordering::SeqCst))
    }

    /// The first rank other than this one that gave up the group, with its mark: one word to
    /// look at while nobody has.
    pub fn first_aborted(&self) -> Option<(usize, AbortMark)> {
        if self.header_word(ANY_ABORTED_AT).load(Ordering::SeqCst) == 0 {
            return None;
        }
        (0..self.size)
            .filter(|&j| j != self.rank)
            .find_map(|j| self.aborted(j).map(|mark| (j, mark)))
    }

    /// Slot `parity` (0 or 1) of `rank`.
    pub fn slot(&self, rank: usize, parity: usize) -> Slot<'_> {
        assert!(rank < self.size && parity < 2, "slot outside the board");
        let len = self.slot_len;
        // SAFETY: the slot lies inside the mapping (len_for counts size × 2 slots of `slot_len`
        // bytes after the header page) at a 64-byte aligned offset.
        let base = unsafe { self.segment.as_ptr().add(PAGE + (rank * 2 + parity) * len) };
        Slot {
            base,
            capacity: len - SLOT_HEADER,
            _board: std::marker::PhantomData,
        }
    }
}

impl Board {
    /// The summary line of `rank`'s slot `parity` (0 or 1), written only on a board that counts
    /// arrivals ([`Board::counted`]).
    pub fn summary(&self, rank: usize, parity: usize) -> Summary<'_> {
        assert!(rank < self.size && parity < 2, "summary outside the board");
        // SAFETY: the line lies inside the mapping (len_for counts size × 2 lines after the
        // slots) at a 64-byte aligned offset.
        let line = unsafe {
            self.segment
                .as_ptr()
                .add(summaries_at(self.size) + (rank * 2 + parity) * SUMMARY)
        };
        Summary {
            line,
            board: self,
            rank,
            parity,
        }
    }
}

/// A slot's summary line: its `seq`, its description and a part of up to [`INLINE`] bytes, packed
/// beside every other rank's.
pub struct Summary<'a> {
    line: *mut u8,
    board: &'a Board,
    rank: usize,
    parity: usize,
}

impl<'a> Summary<'a> {
    fn seq(&self) -> &AtomicU64 {
        // SAFETY: offset 0 of a 64-byte aligned line, accessed only atomically.
        unsafe { &*(self.line as *const AtomicU64) }
    }

    /// Writes the description and, if it fits, the part, then `seq`. Only the owner calls this,
    /// through [`Board::publish`], before it publishes the slot.
    fn publish(&self, k: u64, desc: &[u8; DESC], data: &[u8]) {
        // SAFETY: the owner is the only writer of its lines; readers look at them only after
        // seeing `seq == k` (acquire), which the release store below orders after these copies;
        // no reader still reads this parity's previous contents (as for the slot).
        unsafe {
            std::ptr::copy_nonoverlapping(desc.as_ptr(), self.line.add(DESC_AT), DESC);
            if data.len() <= INLINE {
                let to = self.line.add(INLINE_AT);
                crate::copy::copy_bytes(data.as_ptr(), to, data.len());
            }
        }
        self.seq().store(k, Ordering::Release);
    }

    /// True once the line holds operation `k`.
    pub fn ready(&self, k: u64) -> bool {
        self.seq().load(Ordering::Acquire) == k
    }

    /// The description of the operation (valid once [`Summary::ready`]).
    pub fn desc(&self) -> [u8; DESC] {
        let mut d = [0u8; DESC];
        // SAFETY: 40 bytes at offset 8 of the line; written by the owner before its release
        // store of `seq`, which the caller observed with acquire.
        unsafe { std::ptr::copy_nonoverlapping(self.line.add(DESC_AT), d.as_mut_ptr(), DESC) };
        d
    }

    /// The owner's part of `len` bytes, as it published it (valid once [`Summary::ready`]):
    /// from the line up to [`INLINE`] bytes, else from the slot.
    pub fn data(&self, len: usize) -> &'a [u8] {
        if len > INLINE {
            return self.board.slot(self.rank, self.parity).data(len);
        }
        // SAFETY: at most 16 bytes at offset 48 of the line; written by the owner before its
        // release store of `seq`, which the caller observed; not rewritten until every rank has
        // read it (as for the slot).
        unsafe { std::slice::from_raw_parts(self.line.add(INLINE_AT), len) }
    }
}

/// One slot of the board.
pub struct Slot<'a> {
    base: *mut u8,
    /// Bytes of data the slot holds.
    capacity: usize,
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
    fn state(&self) -> &AtomicU64 {
        // SAFETY: offset 80 of a 64-byte aligned slot (inside its 128-byte header, 8-byte
        // aligned), accessed only atomically.
        unsafe { &*(self.base.add(STATE_AT) as *const AtomicU64) }
    }
    fn aborted(&self) -> &AtomicU32 {
        // SAFETY: offset 72 of a 64-byte aligned slot (inside its 128-byte header), accessed
        // only atomically.
        unsafe { &*(self.base.add(ABORTED_AT) as *const AtomicU32) }
    }

    /// Writes `desc` and `data` (at most the slot's capacity) and then publishes them as the data
    /// of operation `k`, waking any rank asleep on this slot. Only the slot's owner calls this,
    /// through [`Board::publish`].
    ///
    /// First the owner joins the operation: a compare-and-swap of `state` from what it held to
    /// `k`, which fails if a peer withdrew operation `k` from the slot first ([`Slot::withdraw`];
    /// why that makes one outcome per call: [`super::withdraw`]). Only then are the part and
    /// `seq` written, so `seq` says `k` only for a part that joined. The swap comes first because
    /// there it waits for nothing: `state`'s line is this rank's alone on the fast path, and no
    /// store to a line that readers poll is pending yet; after the copies it would wait for
    /// them to reach the readers (0.02 to 0.08 µs per call on 2 ranks, measured).
    fn publish(&self, k: u64, part: &Part<'_>) -> Result<(), Withdrawal> {
        let Part {
            desc,
            data,
            way,
            took,
        } = *part;
        assert!(data.len() <= self.capacity, "slot data too large");
        // The state holds the owner's last publish of this parity (`k - 2`, or 0 before the
        // first), unless a peer withdrew `k` (peers withdraw only the operation they wait in).
        let mut held = k.saturating_sub(2);
        loop {
            if let Some(w) = Withdrawal::decode(held, k) {
                return Err(w);
            }
            match self
                .state()
                .compare_exchange_weak(held, k, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => held = now,
            }
        }
        // SAFETY: the owner is the only writer of the slot's description and data; readers look
        // at them only after seeing `seq == k` (acquire), which the release store below orders
        // after these copies. The caller guarantees (by the double-buffering argument in
        // `executor::flat`) that no reader still reads the previous contents of this parity.
        // Streamed, the copy ends with a store fence, so the release store of `seq` below is
        // ordered after the non-temporal stores too.
        unsafe {
            std::ptr::copy_nonoverlapping(desc.as_ptr(), self.base.add(DESC_AT), DESC);
            std::ptr::write(self.base.add(TOOK_AT) as *mut u64, took);
            let to = self.base.add(SLOT_HEADER);
            match way {
                Crossing::Cached => crate::copy::copy_bytes(data.as_ptr(), to, data.len()),
                Crossing::Streamed => super::stream_copy::copy(data.as_ptr(), to, data.len()),
            }
        }
        self.seq().store(k, Ordering::Release);
        self.seq32().store(k as u32, Ordering::Release);
        // No lost wake-up: a sleeper announces itself (`sleepers`) and then looks at `state`,
        // both SeqCst, as this rank swapped `state` and then loads `sleepers`: either the
        // sleeper sees `k` and does not sleep, or this load sees the sleeper and wakes it (after
        // the futex word changed, so a sleep that begins later returns at once).
        if self.sleepers().load(Ordering::SeqCst) > 0 {
            futex::wake(self.seq32(), i32::MAX);
        }
        Ok(())
    }

    /// Withdraws the owner's part of operation `k`, as `by` (this rank, giving up waiting for it
    /// with an error of kind `code`): unless the owner has published it already, it never can,
    /// and no rank completes the operation ([`super::withdraw`]). Wakes ranks asleep on the slot
    /// so that they see it.
    pub fn withdraw(&self, k: u64, by: Withdrawal) -> Withdraw {
        let mut held = self.state().load(Ordering::Acquire);
        loop {
            if held == k {
                return Withdraw::Joined;
            }
            if let Some(w) = Withdrawal::decode(held, k) {
                return Withdraw::Already(w);
            }
            match self.state().compare_exchange_weak(
                held,
                by.encode(k),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(now) => held = now,
            }
        }
        // A changed futex word wakes sleepers, who then find the withdrawal.
        self.seq32().fetch_add(1 << 31, Ordering::SeqCst);
        if self.sleepers().load(Ordering::SeqCst) > 0 {
            futex::wake(self.seq32(), i32::MAX);
        }
        Withdraw::Withdrew
    }

    /// The withdrawal of operation `k` from this slot, if a peer withdrew it.
    pub fn withdrawal(&self, k: u64) -> Option<Withdrawal> {
        Withdrawal::decode(self.state().load(Ordering::Acquire), k)
    }

    /// True once the slot holds the data of operation `k`.
    pub fn ready(&self, k: u64) -> bool {
        self.seq().load(Ordering::Acquire) == k
    }

    /// Sleeps until the slot may hold operation `k`, or `timeout` passes (spurious returns are
    /// allowed: callers re-check with [`Slot::ready`]).
    pub fn sleep(&self, k: u64, timeout: Duration) {
        self.sleepers().fetch_add(1, Ordering::SeqCst);
        // Announced before looking (see `publish`): a publisher that joined before this look
        // is seen here (this returns at once, and the caller finds `seq` soon after); one that
        // joins after it sees `sleepers > 0` and wakes us once the futex word changed.
        let now = self.seq32().load(Ordering::SeqCst);
        if self.state().load(Ordering::SeqCst) != k && now != k as u32 {
            futex::wait(self.seq32(), now, timeout);
        }
        self.sleepers().fetch_sub(1, Ordering::SeqCst);
    }

    /// How long the owner's board call before this operation took it ([`Part::took`]), or 0 if
    /// it did not time it (valid once [`Slot::ready`]).
    pub fn took(&self) -> u64 {
        // SAFETY: 8 bytes at offset 48 of the 64-byte aligned slot (8-byte aligned); written by
        // the owner before its release store of `seq`, which the caller observed with acquire.
        unsafe { std::ptr::read(self.base.add(TOOK_AT) as *const u64) }
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
        assert!(len <= self.capacity, "slot data too large");
        // SAFETY: inside the slot; written by the owner before its release store of `seq`, which
        // the caller observed; the owner does not write this parity again until every rank has
        // finished reading it (see `executor::flat`).
        unsafe { std::slice::from_raw_parts(self.base.add(SLOT_HEADER), len) }
    }
}

#[cfg(test)]
mod tests {
    use super::{
        slot_data_for, AbortMark, Board, Crossing, Part, DESC, INLINE, SLOT_DATA, SLOT_DATA_MAX,
    };
    use crate::bootstrap::MemoryStore;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// Rank `rank`'s part of operation `k` in the tests: a length by turns empty, as large as a
    /// summary line holds, just too large for it, and a whole slot of a board of `size`; bytes
    /// that name both.
    fn part(rank: usize, k: u64, size: usize) -> Vec<u8> {
        let len = [0, INLINE, INLINE + 1, slot_data_for(size)][k as usize % 4];
        (0..len)
            .map(|i| (rank * 31 + k as usize * 7 + i) as u8)
            .collect()
    }

    /// How rank parts of operation `k` are stored: each length of [`part`] both ways in turn.
    fn way(k: u64) -> Crossing {
        if k / 4 % 2 == 0 {
            Crossing::Cached
        } else {
            Crossing::Streamed
        }
    }

    #[test]
    fn a_crowded_board_counts_arrivals_and_hands_over_parts_of_every_size() {
        // More ranks than cores: the board counts arrivals.
        let size = std::thread::available_parallelism().map_or(2, |n| n.get()) + 2;
        let store = Arc::new(MemoryStore::new());
        let job = format!("boardtest{}", std::process::id());
        let ranks: Vec<_> = (0..size)
            .map(|rank| {
                let (store, job) = (store.clone(), job.clone());
                std::thread::spawn(move || {
                    let deadline = Instant::now() + Duration::from_secs(20);
                    let board = Board::setup(&*store, "g", &job, rank, size, deadline).unwrap();
                    assert!(
                        board.counted(),
                        "{size} ranks on fewer cores count arrivals"
                    );
                    for k in 1..=200u64 {
                        let data = part(rank, k, size);
                        let mine = Part {
                            desc: &[rank as u8; DESC],
                            data: &data,
                            way: way(k),
                            took: k,
                        };
                        board.publish(k, &mine).expect("nobody withdraws");
                        while !board.all_arrived(k) {
                            assert!(Instant::now() < deadline, "operation {k} never completed");
                            board.sleep_until_arrived(k, Duration::from_millis(5));
                        }
                        // Complete means every slot and summary holds this operation's part.
                        for j in 0..size {
                            let parity = (k % 2) as usize;
                            let (slot, summary) = (board.slot(j, parity), board.summary(j, parity));
                            assert!(slot.ready(k), "rank {j}'s slot lacks operation {k}");
                            assert!(summary.ready(k), "rank {j}'s summary lacks operation {k}");
                            assert_eq!(summary.desc(), [j as u8; DESC]);
                            let want = part(j, k, size);
                            assert_eq!(slot.data(want.len()), want, "rank {j}, operation {k}");
                            assert_eq!(summary.data(want.len()), want, "rank {j}, operation {k}");
                            assert_eq!(slot.took(), k, "rank {j}'s time, operation {k}");
                        }
                    }
                })
            })
            .collect();
        for r in ranks {
            r.join().unwrap();
        }
    }

    #[test]
    fn slots_hold_more_on_smaller_groups_and_a_rank_reads_at_most_the_budget() {
        let by_size: Vec<usize> = [1, 2, 3, 4, 5, 8, 9, 16, 17, 1000]
            .iter()
            .map(|&n| slot_data_for(n) / 1024)
            .collect();
        assert_eq!(by_size, [16, 16, 8, 8, 4, 4, 4, 4, 4, 4]);
        for size in 1..=64 {
            let data = slot_data_for(size);
            assert!(data.is_power_of_two() && (SLOT_DATA..=SLOT_DATA_MAX).contains(&data));
            assert!(
                size * data <= 32 * 1024 || data == SLOT_DATA,
                "{size} ranks"
            );
        }
    }

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
