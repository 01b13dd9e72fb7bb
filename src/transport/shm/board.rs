//! A node board: one segment shared by every rank of a group that lives on one host, with a pair
//! of slots per rank, so that a small collective is one write of a cache line or two by each rank
//! and a read of everyone else's, instead of messages through the pairwise rings.
//!
//! Layout: a header page (magic, nonce, the arrival counter, its sleeper count, the any-abort
//! flag and whether the board counts arrivals, then each rank's pid at `64 + 4 × rank`), then for
//! every rank two slots (double buffering by the parity of the operation's number). A slot is a
//! 128-byte header (`seq: u64` the number of the operation its data belongs to, 40 bytes
//! describing the operation, then a part of up to [`INLINE`] bytes, or the owner's last call
//! time and where a rotating part lies; then `seq32: u32`, the futex word mirroring `seq`,
//! `sleepers`, in parity 0 `aborted`, set when the rank gives up the group, `state: u64` at 80,
//! below, and the owner's last call time when the part lies in the first line) followed by
//! [`slot_data_for`] bytes (4–16 KiB, more on smaller groups). The polled word (`seq`), the
//! description and the smallest parts share the first cache line, so a reader of an 8-byte call
//! takes one line from the publisher's core, not two; the futex word and the sleeper count have a
//! line of their own, so a publisher's look at `sleepers` does not fight the readers polling
//! `seq`.
//!
//! After the summary lines (below), on boards of up to 256 ranks, each slot has a data area of
//! its own ([`area_for`]): a part of more than
//! [`ROTATE_MIN`] bytes goes to its next place there, the next page at least [`PLACE_GAP`] past
//! the end of the last one, and back to the
//! start at its end, so that a rank seldom writes lines its peers read a call or two ago. On the
//! 2-core AMD VM, writing over lines that sat in the other core's cache took as long again as
//! the whole rest of a 16 KiB all-reduce on the board (3.3 µs a call in the slot, 1.8 rotating
//! through 2 MiB; `results/board-rotation/`). Smaller parts stay in the slot, where the lines are
//! warm and next to `seq`. Any place of a parity's slot or area is safe to write: the double
//! buffering below already guarantees that nobody still reads its previous operation. Parts
//! larger than a slot go there too, up to a [`MIN_PLACES`]th of the area (half of it on 2 ranks:
//! [`largest_part_for`], 1 MiB on 2 ranks), so a board with areas takes larger calls than its
//! slots hold (`results/board-large-parts/`, `results/board-pair-parts/`).
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
/// Parts of more than this many bytes rotate through their slot's data area (module docs);
/// smaller ones stay at its start. At 4 KiB a 2-rank broadcast was slower rotating (0.62 µs
/// against 0.44–0.51) and all-reduce about even; from 6 KiB both were faster.
pub const ROTATE_MIN: usize = 4096;
/// The bytes of the data areas of all slots of a board together, at most ([`area_for`]): 8 MiB,
/// 2 MiB a slot on 2 ranks (128 places of 16 KiB). With a quarter of that, the 16 KiB all-reduce
/// gained less than half as much (2.0–2.3 µs against 1.8).
const ROTATION_BYTES: usize = 8 << 20;
/// A part larger than a slot comes back to the same place of its area at most every this many
/// calls ([`largest_part_for`]): places reused every other call cost as much as the slot did
/// (`results/board-rotation/`), and on 2 ranks parts of up to 128 KiB (a sixteenth of the area)
/// made all-reduce, all-gather and broadcast of 32-128 KiB 0.50-0.91 of the time of the
/// schedules over the rings (`results/board-large-parts/`). Pairs go further
/// ([`PAIR_MIN_PLACES`]).
const MIN_PLACES: usize = 16;
/// [`MIN_PLACES`] on a board of 2 ranks: a part may fill half its area (1 MiB), as a part that
/// large costs far more to copy than its reused lines do: on 2 ranks all-reduce of 256 KiB-1 MiB
/// took 0.76-0.89 of the time of the schedules over the rings, broadcast of 256 KiB 0.72 and
/// all-gather of 128 KiB a rank 0.89 (`results/board-pair-parts/`).
const PAIR_MIN_PLACES: usize = 2;
/// Bytes describing the operation in a slot.
pub const DESC: usize = 40;
/// Bytes of a part a summary line holds (a larger part is read from the slot).
pub const INLINE: usize = 16;
/// Bytes of a summary line: `seq`, the description, and a part of up to [`INLINE`] bytes.
const SUMMARY: usize = 64;
/// Where a part of up to [`INLINE`] bytes lies in a summary line, and in a slot's first line:
/// there a reader finds it with `seq`, one line from the other core instead of two. 2-rank
/// all-reduce and broadcast of 8 and 16 bytes took 0.84–0.90 of the time in the VM's slow state
/// (cross-core round trip 330 ns; all-reduce of 8 bytes 0.40 → 0.35 µs), even in its normal
/// state (0.14–0.16 µs; `results/board-inline/`).
const INLINE_AT: usize = 48;
/// In a slot's first line, beside `seq`, unless the part lies there: how long its owner's
/// previous board call took it, in its owner's clock's ticks, or 0 ([`Board::publish`]).
const TOOK_AT: usize = 48;
/// Where the time is instead when the part lies in the first line ([`took_at`]): on the owner's
/// own line, as a peer reads it only after the owner's timed calls.
const TOOK_BESIDE_INLINE_AT: usize = 88;
/// In a slot's first line: where in the slot's data area its last rotating part begins, in
/// bytes (written only with such a part, never one that lies in the first line).
const PLACE_AT: usize = 56;
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
    /// Bytes of each slot's data area ([`area_for`] of `size`; 0: none, or the board counts
    /// arrivals and does not use them).
    area: usize,
    /// Where the data areas begin in the segment ([`areas_at`] of `size`).
    areas_at: usize,
    /// The most bytes a rank publishes in one call ([`largest_part_for`]), computed once.
    largest_part: usize,
    /// Where in its data area of each parity this rank's next rotating part goes.
    next_place: [std::sync::atomic::AtomicUsize; 2],
}

/// Whether a part of `len` bytes goes to its slot's data area of `area` bytes (module docs): the
/// publisher and every reader decide alike from the part's length.
fn rotates(len: usize, area: usize) -> bool {
    len > ROTATE_MIN && len <= area
}

/// Whether a part of `len` bytes lies in its slot's first line, beside `seq`: the publisher and
/// every reader decide alike from the part's length.
fn inline(len: usize) -> bool {
    len <= INLINE
}

/// Where in a slot the owner's time lies beside a part of `len` bytes.
fn took_at(len: usize) -> usize {
    if inline(len) {
        TOOK_BESIDE_INLINE_AT
    } else {
        TOOK_AT
    }
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

/// Bytes of each slot's data area on the board of a group of `size` (module docs): its share of
/// [`ROTATION_BYTES`] (two slots a rank), a whole number of parts of [`slot_data_for`] bytes; 0
/// (no areas: every part stays in its slot) where that would hold fewer than 4.
pub fn area_for(size: usize) -> usize {
    let part = slot_data_for(size);
    let places = ROTATION_BYTES / (2 * size.max(1)) / part;
    if places < 4 {
        0
    } else {
        places * part
    }
}

/// The largest part a rank of a board of `size` ranks publishes in one call: a slot's data
/// (`slot_data_for`), or, on a board with data areas (`areas`), up to a [`min_places`]th of an
/// area if that is more (1 MiB on 2 ranks, 64 KiB on 3-4, 32 KiB on 5-8). Such a part always
/// rotates: it is larger than `ROTATE_MIN` and than the slot.
pub fn largest_part_for(size: usize, areas: bool) -> usize {
    let slot = slot_data_for(size);
    match areas {
        true => slot.max(area_for(size) / min_places(size)),
        false => slot,
    }
}

/// How many calls at least a board of `size` ranks lets pass before a part comes back to the
/// same place of its area: [`PAIR_MIN_PLACES`] on 2 ranks, else [`MIN_PLACES`].
fn min_places(size: usize) -> usize {
    if size == 2 {
        PAIR_MIN_PLACES
    } else {
        MIN_PLACES
    }
}

/// Bytes a rotating part's place leaves unused after it at least, before the next place. A
/// reader's prefetcher runs on past the end of the part it reads, into the next place, which
/// the part's owner writes next in that parity and then has to take back from the reader's
/// cache. On the 2-core AMD VM, with a page after parts that filled their pages, the C program
/// of the board's 2-rank all-reduce (`scripts/probes/board-halves.c`) took 0.45-0.92 of the time
/// at 8-64 KiB (16 KiB 1.09 → 0.84 µs), as it did visiting adjacent places out of order, and
/// psyne's 2-rank all-reduce of 8-16 KiB 0.64-0.73 (16 KiB 1.40 → 1.03 µs); parts that end
/// 2 KiB or more before their last page does gained nothing, and a 2-rank reduce-scatter's
/// 6 KiB parts took 1.11 times as long with a page more (`results/board-place-gap/`).
const PLACE_GAP: usize = 2048;

/// Bytes from the start of one place of a rotating part of `len` bytes to the next, in a data
/// area of `area` bytes on a board of `size` ranks: the whole pages that hold the part and
/// [`PLACE_GAP`] after it, or the part's own pages where the area would then hold fewer than
/// [`min_places`] places.
fn place_stride(len: usize, area: usize, size: usize) -> usize {
    let gapped = (len + PLACE_GAP).next_multiple_of(PAGE);
    match area / gapped >= min_places(size) {
        true => gapped,
        false => len.next_multiple_of(PAGE),
    }
}

/// Bytes from one slot's data area to the next: a multiple of 64, and 128 bytes more than a
/// multiple of a page, as slots are.
fn area_stride(size: usize) -> usize {
    SLOT_HEADER + area_for(size)
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

/// Where the data areas begin: the page after the summary lines.
fn areas_at(size: usize) -> usize {
    (summaries_at(size) + size * 2 * SUMMARY).next_multiple_of(PAGE)
}

/// Bytes of the board segment of a group of `size`, with the data areas if `areas` (and the
/// group has any, [`area_for`]).
fn len_for(size: usize, areas: bool) -> usize {
    match area_for(size) {
        bytes if areas && bytes > 0 => areas_at(size) + size * 2 * area_stride(size),
        _ => summaries_at(size) + size * 2 * SUMMARY,
    }
}

/// Creates the board segment `name` for a group of `size`, with data areas where it has any and
/// `/dev/shm` has room for them, else without (saying so); true if with.
fn create_segment(name: &str, size: usize) -> std::io::Result<(Segment, bool)> {
    if area_for(size) == 0 {
        return Segment::create(name, len_for(size, false)).map(|seg| (seg, false));
    }
    match Segment::create(name, len_for(size, true)) {
        Ok(seg) => Ok((seg, true)),
        Err(e) => {
            crate::report::warn(format_args!(
                "the node board runs without its data areas ({} MiB): {e}",
                (len_for(size, true) - len_for(size, false)) >> 20
            ));
            Segment::create(name, len_for(size, false)).map(|seg| (seg, false))
        }
    }
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
        let bootstrap = |what: String| Error::new(ErrorKind::Bootstrap, what);
        let (segment, areas) = if rank == 0 {
            let name = segment::name_for(job_id, &format!("{prefix}#board"), 0, 0);
            let (seg, areas) = create_segment(&name, size)
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
                format!("{name} {hex} {}", u8::from(areas)).as_bytes(),
            )?;
            let waited = store
                .get_range(&format!("{prefix}/board_ok/"), 1..size, deadline)
                .map(drop);
            let _ = segment::unlink(&name);
            waited.map_err(|e| e.context("waiting for every rank to map the node board"))?;
            (seg, areas)
        } else {
            let raw = store.get(&format!("{prefix}/board"), deadline)?;
            let text = String::from_utf8_lossy(&raw).into_owned();
            let malformed = || bootstrap(format!("malformed node board entry {text:?}"));
            let (name, hex, areas) = match text.split(' ').collect::<Vec<_>>()[..] {
                [name, hex, "0"] => (name, hex, false),
                [name, hex, "1"] => (name, hex, true),
                _ => return Err(malformed()),
            };
            let seg = Segment::open(name, len_for(size, areas))
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
            (seg, areas)
        };
        let board = Board::mapped(segment, rank, size, areas);
        board
            .pid_word(rank)
            .store(std::process::id(), Ordering::SeqCst);
        Ok(board)
    }

    /// This rank's view of the mapped board `segment` of `size` ranks, laid out with data areas
    /// or not (`areas`), which it uses unless the board counts arrivals.
    fn mapped(segment: Segment, rank: usize, size: usize, areas: bool) -> Board {
        let counted = header_word(&segment, COUNTED_AT).load(Ordering::SeqCst) == 1;
        // Ranks that share cores wait asleep between calls, and their parts' lines are long
        // gone from the caches by then: a crowded board keeps every part in its slot.
        let areas = areas && !counted;
        Board {
            segment,
            rank,
            size,
            counted,
            slot_len: slot_len(size),
            area: if areas { area_for(size) } else { 0 },
            areas_at: areas_at(size),
            largest_part: largest_part_for(size, areas),
            next_place: Default::default(),
        }
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Ranks on the board.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The most bytes a rank publishes in one call: a slot's data, or on a board with data
    /// areas what [`largest_part_for`] allows.
    pub fn largest_part(&self) -> usize {
        self.largest_part
    }

    /// Where in this rank's data area of `parity` a part of `len` bytes goes: nowhere (it stays
    /// in the slot) for parts of at most [`ROTATE_MIN`] bytes or on boards without areas, else
    /// the next page-aligned place that holds it at least [`PLACE_GAP`] past the last one's
    /// end ([`place_stride`]), from the start again once the area's end is reached (module
    /// docs).
    fn place(&self, parity: usize, len: usize) -> Option<usize> {
        if !rotates(len, self.area) {
            return None;
        }
        let next = &self.next_place[parity];
        let at = match next.load(Ordering::Relaxed) {
            at if at + len <= self.area => at,
            _ => 0,
        };
        next.store(
            at + place_stride(len, self.area, self.size),
            Ordering::Relaxed,
        );
        Some(at)
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

    /// Publishes this rank's `part` (data of at most [`Board::largest_part`] bytes) as its part of
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
        let place = self.place(parity, part.data.len());
        self.slot(self.rank, parity).publish(k, part, place)?;
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
        let area = match self.area {
            0 => std::ptr::null_mut(),
            // SAFETY: the data area lies inside the mapping (len_for counts size × 2 strides of
            // `area_stride` bytes after `areas_at`), 128 bytes into its stride.
            bytes => unsafe {
                let stride = SLOT_HEADER + bytes;
                let at = self.areas_at + (rank * 2 + parity) * stride + SLOT_HEADER;
                self.segment.as_ptr().add(at)
            },
        };
        Slot {
            base,
            capacity: len - SLOT_HEADER,
            area,
            area_len: self.area,
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
    /// The slot's data area (null where the board has none) and its bytes.
    area: *mut u8,
    area_len: usize,
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

    /// Writes `desc` and `data` (at `place` in the data area, within it) and then publishes them
    /// as the data of operation `k`, waking any rank asleep on this slot. Only the slot's owner
    /// calls this, through [`Board::publish`].
    ///
    /// First the owner joins the operation: a compare-and-swap of `state` from what it held to
    /// `k`, which fails if a peer withdrew operation `k` from the slot first ([`Slot::withdraw`];
    /// why that makes one outcome per call: [`super::withdraw`]). Only then are the part and
    /// `seq` written, so `seq` says `k` only for a part that joined. The swap comes first because
    /// there it waits for nothing: `state`'s line is this rank's alone on the fast path, and no
    /// store to a line that readers poll is pending yet; after the copies it would wait for
    /// them to reach the readers (0.02 to 0.08 µs per call on 2 ranks, measured).
    fn publish(&self, k: u64, part: &Part<'_>, place: Option<usize>) -> Result<(), Withdrawal> {
        let Part {
            desc,
            data,
            way,
            took,
        } = *part;
        assert!(
            place.is_some() || data.len() <= self.capacity,
            "slot data too large"
        );
        let to = match place {
            Some(at) => {
                assert!(
                    !self.area.is_null() && at + data.len() <= self.area_len,
                    "a part placed outside the data area"
                );
                // SAFETY: inside the data area (asserted just above).
                unsafe { self.area.add(at) }
            }
            // SAFETY: the first line's last INLINE bytes (`inline` says the part fits).
            None if inline(data.len()) => unsafe { self.base.add(INLINE_AT) },
            // SAFETY: the slot's data begins SLOT_HEADER bytes into it.
            None => unsafe { self.base.add(SLOT_HEADER) },
        };
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
            std::ptr::write(self.base.add(took_at(data.len())) as *mut u64, took);
            if let Some(at) = place {
                std::ptr::write(self.base.add(PLACE_AT) as *mut u64, at as u64);
            }
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
    /// it did not time it (valid once [`Slot::ready`]); `len` is the length of the owner's part.
    pub fn took(&self, len: usize) -> u64 {
        // SAFETY: 8 bytes at offset 48 or 88 of the 64-byte aligned slot (8-byte aligned, inside
        // its 128-byte header); written by the owner before its release store of `seq`, which
        // the caller observed with acquire.
        unsafe { std::ptr::read(self.base.add(took_at(len)) as *const u64) }
    }

    /// The description of the operation whose data the slot holds (valid once [`Slot::ready`]).
    pub fn desc(&self) -> [u8; DESC] {
        let mut d = [0u8; DESC];
        // SAFETY: 40 bytes at offset 8 of the slot; written by the owner before its release
        // store of `seq`, which the caller observed with acquire.
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(DESC_AT), d.as_mut_ptr(), DESC) };
        d
    }

    /// The slot's part of `len` bytes (valid once [`Slot::ready`]): in the slot, or where its
    /// owner placed it in the data area if a part of that length rotates (module docs); 128
    /// bytes past a page boundary.
    pub fn data(&self, len: usize) -> &'a [u8] {
        if inline(len) {
            // SAFETY: the first line's last INLINE bytes; written and kept as below.
            return unsafe { std::slice::from_raw_parts(self.base.add(INLINE_AT), len) };
        }
        if !rotates(len, self.area_len) {
            assert!(len <= self.capacity, "slot data too large");
            // SAFETY: inside the slot; written by the owner before its release store of `seq`,
            // which the caller observed; the owner does not write this parity again until every
            // rank has finished reading it (see `executor::flat`).
            return unsafe { std::slice::from_raw_parts(self.base.add(SLOT_HEADER), len) };
        }
        // SAFETY: 8 bytes at offset 56 of the 64-byte aligned slot (8-byte aligned); written by
        // the owner with this part, before its release store of `seq`, which the caller
        // observed with acquire.
        let place = unsafe { std::ptr::read(self.base.add(PLACE_AT) as *const u64) };
        // Only a corrupt peer places a part past the area; reading its start then stays inside.
        let place = usize::try_from(place)
            .ok()
            .filter(|&at| at <= self.area_len - len)
            .unwrap_or(0);
        // SAFETY: `rotates` says the board has an area of `area_len >= len` bytes, and `place +
        // len` lies inside it (checked above); written and kept as the slot's data is (above).
        unsafe { std::slice::from_raw_parts(self.area.add(place), len) }
    }
}

#[cfg(test)]
mod tests {
    use super::{
        area_for, largest_part_for, min_places, place_stride, slot_data_for, AbortMark, Board,
        Crossing, Part, Slot, DESC, INLINE, MIN_PLACES, PAGE, PAIR_MIN_PLACES, PLACE_GAP,
        ROTATE_MIN, SLOT_DATA, SLOT_DATA_MAX,
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

    /// Runs `f` on every rank of a board of `size` ranks (threads of this process, job id
    /// `job` and the pid), each with its board, its rank and a deadline 20 s away.
    fn on_board(size: usize, job: &str, f: impl Fn(Board, usize, Instant) + Send + Sync + 'static) {
        let store = Arc::new(MemoryStore::new());
        let job = format!("{job}{}", std::process::id());
        let f = Arc::new(f);
        let ranks: Vec<_> = (0..size)
            .map(|rank| {
                let (store, job, f) = (store.clone(), job.clone(), f.clone());
                std::thread::spawn(move || {
                    let deadline = Instant::now() + Duration::from_secs(20);
                    let board = Board::setup(&*store, "g", &job, rank, size, deadline).unwrap();
                    f(board, rank, deadline)
                })
            })
            .collect();
        for r in ranks {
            r.join().unwrap();
        }
    }

    /// Publishes `data` as `rank`'s part of operation `k`, described by the rank's number and
    /// stored as [`way`] says, with `k` as its time.
    fn publish_as(board: &Board, rank: usize, k: u64, data: &[u8]) {
        let mine = Part {
            desc: &[rank as u8; DESC],
            data,
            way: way(k),
            took: k,
        };
        board.publish(k, &mine).expect("nobody withdraws");
    }

    /// On a 2-rank board: publishes `data` as `rank`'s part of operation `k` and returns the
    /// peer's slot of that operation once its part is there.
    fn swap_with_peer<'b>(
        board: &'b Board,
        rank: usize,
        k: u64,
        data: &[u8],
        deadline: Instant,
    ) -> Slot<'b> {
        publish_as(board, rank, k, data);
        let slot = board.slot(1 - rank, (k % 2) as usize);
        while !slot.ready(k) {
            assert!(Instant::now() < deadline, "operation {k} never arrived");
            std::hint::spin_loop();
        }
        slot
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
        on_board(size, "boardtest", move |board, rank, deadline| {
            assert!(
                board.counted(),
                "{size} ranks on fewer cores count arrivals"
            );
            for k in 1..=200u64 {
                let data = part(rank, k, size);
                publish_as(&board, rank, k, &data);
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
                    assert_eq!(slot.took(want.len()), k, "rank {j}'s time, operation {k}");
                }
            }
        });
    }

    #[test]
    fn large_parts_rotate_through_a_data_area_and_small_ones_stay_in_the_slot() {
        let size = 2;
        let (area, whole) = (area_for(size), slot_data_for(size));
        let stride = place_stride(whole, area, size);
        assert_eq!(stride, whole + PAGE, "16 KiB parts lie a page apart");
        let places = area / stride;
        assert!(places > 2, "2-rank slots hold many parts: {area} bytes");
        // Enough operations for every parity to wrap around its area several times.
        let ops = 8 * places as u64;
        let lens = move |k: u64| [100, ROTATE_MIN, whole][k as usize / 2 % 3];
        on_board(size, "boardrot", move |board, rank, deadline| {
            if board.counted() {
                // One core: a crowded board keeps every part in its slot.
                eprintln!("2 ranks share a core here: nothing rotates, nothing to test");
                return;
            }
            let peer = 1 - rank;
            // Where the peer's parts were found, by parity and whether they rotate.
            let mut seen = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
            for k in 1..=ops {
                let data = vec![(rank as u64 * 101 + k) as u8; lens(k)];
                let parity = (k % 2) as usize;
                let got = swap_with_peer(&board, rank, k, &data, deadline).data(lens(k));
                let want = vec![(peer as u64 * 101 + k) as u8; lens(k)];
                assert_eq!(got, &want[..], "rank {peer}'s part of operation {k}");
                let rotates = usize::from(lens(k) > ROTATE_MIN);
                seen[parity][rotates].push(got.as_ptr() as usize);
            }
            for (parity, [fixed, rotating]) in seen.iter_mut().enumerate() {
                fixed.dedup();
                assert_eq!(fixed.len(), 1, "parity {parity}: small parts stay put");
                let start = *rotating.iter().min().expect("parts rotated");
                assert!(
                    !(start..start + area).contains(&fixed[0]),
                    "not in the area"
                );
                assert!(rotating.iter().all(|&at| at + whole <= start + area));
                // One part after another a gap apart, back to the start at the end.
                let steps: Vec<usize> = rotating
                    .windows(2)
                    .map(|w| w[1].wrapping_sub(w[0]))
                    .collect();
                let last = (places - 1) * stride;
                assert!(steps.iter().all(|&d| d == stride || wraps_back(d, last)));
                rotating.sort_unstable();
                rotating.dedup();
                assert_eq!(rotating.len(), places, "parity {parity}: every place used");
            }
        });
    }

    #[test]
    fn parts_larger_than_a_slot_go_whole_through_the_area_many_calls_apart() {
        let size = 2;
        let largest = largest_part_for(size, true);
        assert!(largest > slot_data_for(size) && area_for(size) / largest >= PAIR_MIN_PLACES);
        assert_eq!(largest, 1 << 20);
        assert_eq!(area_for(3) / largest_part_for(3, true), MIN_PLACES);
        assert_eq!(largest_part_for(size, false), slot_data_for(size));
        on_board(size, "boardbig", move |board, rank, deadline| {
            if board.counted() {
                eprintln!("2 ranks share a core here: parts stay in their slots");
                assert_eq!(board.largest_part(), slot_data_for(size));
                return;
            }
            assert_eq!(board.largest_part(), largest);
            let peer = 1 - rank;
            let mut places = Vec::new();
            for k in 1..=4 * MIN_PLACES as u64 {
                // Every byte says whose part, which operation and where in it it lies.
                let byte = |r: usize, i: usize| (r * 7 + k as usize * 3 + i / 4096) as u8;
                let len = [largest, largest - 4, slot_data_for(size) + 1][k as usize / 2 % 3];
                let data: Vec<u8> = (0..len).map(|i| byte(rank, i)).collect();
                let got = swap_with_peer(&board, rank, k, &data, deadline).data(len);
                let bad = (0..len).find(|&i| got[i] != byte(peer, i));
                assert_eq!(bad, None, "rank {peer}'s part of operation {k}");
                if k % 2 == 0 {
                    places.push(got.as_ptr() as usize);
                }
            }
            // Each part a place of its own: the same parity's place moves on every call.
            assert!(places.windows(2).all(|w| w[0] != w[1]), "{places:?}");
        });
    }

    #[test]
    fn places_leave_room_after_each_part_while_the_area_holds_enough_of_them() {
        for size in [2, 3, 8, 256] {
            let area = area_for(size);
            for len in [
                ROTATE_MIN + 1,
                6 << 10,
                13 << 10,
                16 << 10,
                64 << 10,
                largest_part_for(size, true),
            ] {
                let (stride, pages) = (place_stride(len, area, size), len.next_multiple_of(PAGE));
                assert_eq!(
                    stride % PAGE,
                    0,
                    "{size} ranks, {len} bytes: places page-aligned"
                );
                assert!(stride >= pages, "{size} ranks, {len} bytes: places overlap");
                // The gap never takes the places below `min_places` (nor below what whole
                // pages alone leave, where the largest part's pages hold fewer already).
                assert!(
                    area / stride >= min_places(size).min(area / pages),
                    "{size} ranks, {len} bytes: too few places"
                );
                let gapped = (len + PLACE_GAP).next_multiple_of(PAGE);
                let room = area / gapped >= min_places(size);
                assert_eq!(
                    stride,
                    if room { gapped } else { pages },
                    "{size} ranks, {len} B"
                );
            }
        }
        // A part that leaves room in its last page takes no more; one that fills it, a page
        // more; the largest part of a pair (half its area) keeps two places, without a gap.
        assert_eq!(place_stride(6 << 10, 2 << 20, 2), 8 << 10);
        assert_eq!(place_stride(16 << 10, 2 << 20, 2), 20 << 10);
        assert_eq!(place_stride(1 << 20, 2 << 20, 2), 1 << 20);
    }

    /// True if `d` is the step from the area's last place back to its first (`last` bytes on).
    fn wraps_back(d: usize, last: usize) -> bool {
        d == last.wrapping_neg()
    }

    #[test]
    fn slots_hold_more_on_smaller_groups_and_a_rank_reads_at_most_the_budget() {
        let by_size: Vec<usize> = [1, 2, 3, 4, 5, 8, 9, 16, 17, 1000]
            .iter()
            .map(|&n| slot_data_for(n) / 1024)
            .collect();
        assert_eq!(by_size, [16, 16, 8, 8, 4, 4, 4, 4, 4, 4]);
        // Data areas: 8 MiB over every slot, none where a slot's share holds fewer than 4 parts.
        let areas: Vec<usize> = [2, 4, 8, 256, 257].iter().map(|&n| area_for(n)).collect();
        assert_eq!(areas, [2 << 20, 1 << 20, 512 << 10, 16 << 10, 0]);
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
