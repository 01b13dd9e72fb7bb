//! Small collectives of a group that lives on one host, on the node board: each rank publishes
//! its part of the call in its slot of the node board ([`Board`]) and then takes what it needs
//! from every rank's slot. One write of a cache line or a few and `size - 1` reads per rank
//! instead of messages through the pairwise rings; every rank folds reductions in rank order, so
//! results agree bit for bit.
//!
//! Every rank waits for *every* slot of the operation, also where it needs no data from a slot
//! (a broadcast root, a gather leaf): each slot carries its owner's description of the call, so
//! every rank learns of a disagreement with any other, whatever its role, and the wait doubles
//! as the proof that lets slots be reused:
//!
//! Slots are double buffered by the parity of a counter of flat operations, which every rank
//! advances identically. Rank `r` writes parity `k % 2` at operation `k` only after finishing
//! operation `k - 1`, which needed every peer's slot of `k - 1`; a peer writes that only after it
//! finished operation `k - 2`, i.e. after its last read of `r`'s parity `k % 2`. So no rank ever
//! overwrites data another still reads.
//!
//! One call, one outcome: a rank gives up a board call (its deadline passed, a peer died or is
//! in another call) only after withdrawing the part of the peer it waited for
//! ([`Board::publish`] and [`crate::transport::shm::board::Slot::withdraw`] are compare-and-swaps
//! of the same word), and finds the part published instead if the peer won that race; so a late
//! rank cannot complete a call its peers failed, and a rank cannot fail a call that completes
//! elsewhere ([`crate::transport::shm::withdraw`]).
//!
//! On a board with more ranks than cores, a rank first sleeps on the board's arrival counter until
//! every rank has published ([`Board::publish`]), so it wakes once however many peers are late,
//! and then reads each peer's summary line ([`Board::summary`]: the description and a part of up
//! to 16 bytes, packed beside every other rank's) rather than its slot, so that a rank of
//! hundreds touches a few pages, not one per peer. The reading code is generic over the two
//! sources ([`parts::Parts`]), so boards where every rank has a core read their slots as before.
//!
//! What each rank publishes and takes, per collective ([`Part`]), in elements of the work buffer
//! laid out as [`Collective::layout`] says: all-reduce, reduce, reduce-scatter and all-to-all
//! publish the whole input; broadcast and scatter only the root's; all-gather and gather each
//! rank's chunk; barrier nothing.

use super::fail::Site;
use super::header::{self, Header, OpKind, HEADER_LEN};
use super::step::traffic_of;
use super::{Call, Engine, Links};
use crate::copy::copy_slice;
use crate::error::Result;
use crate::reduce::Reducer;
use crate::schedule::{chunk_span, Collective, Span};
use crate::transport::shm::board::{Board, Part as Published, DESC};
use crate::transport::shm::crossing::{Choice, Chooser, Crossing, CrossingPolicy};
use crate::transport::shm::withdraw::{Withdraw, Withdrawal};
use crate::transport::Traffic;
use crate::wait::{process_alive, Next, Spinner};
use parts::{Parts, Slots, Summaries};
use std::time::{Duration, Instant};

/// An engine: one small collective on the node board.
pub(crate) struct BoardCollective<'a> {
    /// The group's board.
    pub(crate) board: &'a Board,
    /// The number of this flat operation (1, 2, ...), the same on every rank.
    pub(crate) k: u64,
    /// This rank's work buffer, laid out as [`Collective::layout`] says for the call.
    pub(crate) buf: &'a mut [u8],
    /// Bytes of the work buffer from `mirror_at` on that are not in `buf` yet (the caller's
    /// input to an all-gather, [`crate::executor::view::WorkView::as_whole_and_mirror`]): where
    /// they are this rank's part, it is published from them and they are copied into `buf`
    /// after, while the peers copy theirs (a 2-rank all-gather of 16-128 KiB in 0.88-0.96 of
    /// the time, `results/board-publish-first/`); else they are copied in first. Empty where
    /// there are none.
    pub(crate) mirror: &'a [u8],
    /// Where `mirror`'s bytes go in `buf`.
    pub(crate) mirror_at: usize,
    /// How this rank's parts cross to its peers ([`BoardCrossing`]).
    pub(crate) crossing: &'a mut BoardCrossing,
}

/// How a rank's parts of board calls cross to its peers: through the caches, or written past
/// them to memory, which on the 2-core AMD VM takes about half the caches' time in the machine's
/// slow state and about twice it otherwise (exchanges: `results/job-swings/flat-states/`; a
/// broadcast of 64 KiB took 22-30 µs through the caches in the slow state against 2.3-2.7 in
/// the normal one, `results/board-one-way/`). Chosen by timing the calls, as the rings' way is
/// ([`crate::transport::shm::crossing`]), but weighed by the slowest rank's time of each call,
/// not this rank's: a part written past the cache spares its writer the reads for ownership of
/// lines its peers read last, and costs the peers who read it, so on its own time a writer finds
/// streaming faster where the group is slower. Each rank publishes its time of a call with its
/// part of the next ([`Board::publish`]), so a call's time is reported a call late. Since every
/// rank weighs the same times, one-way calls (broadcast, scatter, gather) are chosen the same
/// way as exchanges ([`Chooser::together`]): their writers' ways follow their readers' times
/// with no wishes sent. Reduces, calls below the chooser's `TOGETHER_MIN_BYTES` (8 KiB) and
/// calls on a board with more ranks than cores always go through the caches.
pub(crate) struct BoardCrossing {
    chooser: Chooser,
    /// The last board call's choice and its time on this rank in [`ticks`], if it was timed:
    /// reported with the peers' times of it, which come with their parts of the next board call.
    pending: Option<(Choice, u64)>,
}

impl BoardCrossing {
    /// A rank's choices under `policy`, with no calls seen. Every rank weighs the same times
    /// (the slowest rank's), so every rank makes the same choices: the ranks try the other way
    /// together, as rank 0's chooser would (no stagger), and a way that helps only when every
    /// rank takes it, as streaming does in the slow state, can be found.
    pub(crate) fn new(policy: CrossingPolicy) -> BoardCrossing {
        BoardCrossing {
            chooser: Chooser::together(policy),
            pending: None,
        }
    }

    /// The choice for this rank's part of a board call of `traffic` on a work buffer of `bytes`
    /// (the same on every rank), on a board that counts arrivals or not; `None`: through the
    /// caches, untimed. Calls below the chooser's threshold (`TOGETHER_MIN_BYTES`) are never
    /// timed: not even asked, which costs a small call 0.03 µs. A reduce is not either: through
    /// the caches it took 1.3 times its normal time in the slow state, and trying the other way
    /// cost it 13-24 % in the normal one.
    fn choose(&mut self, traffic: Traffic, bytes: usize, counted: bool) -> Option<Choice> {
        let chosen = traffic != Traffic::ReducingOneWay && self.chooser.times(bytes) && !counted;
        chosen.then(|| self.chooser.choose(traffic, bytes, true, true))
    }

    /// Tells the chooser how long the last timed call, `last` (its choice and this rank's time
    /// of it in [`ticks`]), took on the slowest rank: the peers' times of it are in their slots
    /// of parity `parity`, published with their parts of this call (rank `j`'s of
    /// `part_len(j)` bytes).
    fn report(
        &mut self,
        last: Option<(Choice, u64)>,
        board: &Board,
        parity: usize,
        part_len: impl Fn(usize) -> usize,
    ) {
        if let Some((choice, own)) = last {
            let peers = (0..board.size()).filter(|&j| j != board.rank());
            let took = |j| board.slot(j, parity).took(part_len(j));
            let slowest = peers.fold(own, |t, j| t.max(took(j)));
            // Ticks stand in for nanoseconds: the chooser only compares times.
            self.chooser.finish(choice, Duration::from_nanos(slowest));
        }
    }
}

impl Engine for BoardCollective<'_> {
    fn run(self, call: &Call, links: &mut Links) -> Result<()> {
        let BoardCollective {
            board,
            k,
            buf,
            mirror,
            mirror_at,
            crossing,
        } = self;
        let desc = &call.desc;
        let site = || call.site(links.rank, &links.peers);
        let OpKind::Collective(coll) = desc.kind else {
            return Err(site().internal("a point-to-point call on the node board"));
        };
        let es = desc.dtype.size();
        let reducer = if coll.reduces() {
            let reducer = call.reducer;
            Some(reducer.ok_or_else(|| site().internal("a reduction without an op"))?)
        } else {
            None
        };
        let part = Part::new(coll, board.size(), desc.count as usize, reducer);
        let me = board.rank();
        let too_large = part.largest() * es > board.largest_part();
        if too_large || buf.len() < coll.layout(me, part.size, part.count).buf_len * es {
            return Err(site().internal("a call too large for the node board"));
        }
        let parity = (k % 2) as usize;
        let mut mine: [u8; DESC] = header::encode_data(desc, (part.count * es) as u64);
        header::set_pair(&mut mine, header::total(&links.p2p));
        let last = crossing.pending.take();
        let choice = crossing.choose(traffic_of(desc), buf.len(), board.counted());
        let way = choice.map_or(Crossing::Cached, |c| c.crossing);
        // Only a timed call reads the clock (a small call's budget is a few hundred ns).
        let started = choice.filter(Choice::timed).map(|_| ticks());
        let own = bytes(part.published(me), es);
        let own_in_mirror = !mirror.is_empty() && own == (mirror_at..mirror_at + mirror.len());
        if !own_in_mirror && !mirror.is_empty() {
            copy_slice(&mut buf[mirror_at..mirror_at + mirror.len()], mirror);
        }
        // A peer that gave up waiting for this rank has withdrawn its part: too late to join.
        let published = Published {
            desc: &mine,
            data: if own_in_mirror { mirror } else { &buf[own] },
            way,
            took: last.map_or(0, |(_, ticks)| ticks),
        };
        board
            .publish(k, &published)
            .map_err(|w| site().withdrawn(me, w, board.first_gone()))?;
        if own_in_mirror {
            copy_slice(&mut buf[mirror_at..mirror_at + mirror.len()], mirror);
        }
        let ours = Ours {
            k,
            mine: &mine,
            part: &part,
            es,
            reducer,
        };
        // One copy of the reading code per source, so that the slots' stays as lean as it was.
        if board.counted() {
            ours.complete(Summaries { board, parity }, call, links, buf)?;
        } else {
            ours.complete(Slots { board, parity }, call, links, buf)?;
        }
        crossing.report(last, board, parity, |j| bytes(part.published(j), es).len());
        if let (Some(choice), Some(started)) = (choice, started) {
            crossing.pending = Some((choice, ticks().wrapping_sub(started).max(1)));
        }
        Ok(())
    }
}

/// This rank's view of one board call, once published.
struct Ours<'a> {
    k: u64,
    mine: &'a [u8; DESC],
    part: &'a Part,
    es: usize,
    reducer: Option<Reducer>,
}

impl Ours<'_> {
    /// Waits for every peer's part, checks it, and computes this rank's result into `buf`.
    fn complete<'b, P: Parts<'b>>(
        &self,
        parts: P,
        call: &Call,
        links: &mut Links,
        buf: &mut [u8],
    ) -> Result<()> {
        let board = parts.board();
        wait_for_all(&parts, self.k, self.mine, call, links)?;
        let take = Take {
            parts,
            part: self.part,
            es: self.es,
        };
        take.finish(board.rank(), buf, self.reducer);
        Ok(())
    }
}

/// Waits for every peer's part of operation `k` and checks that each describes the same call as
/// `mine`, and that the point-to-point messages sent before it were all received.
fn wait_for_all<'b, P: Parts<'b>>(
    parts: &P,
    k: u64,
    mine: &[u8; DESC],
    call: &Call,
    links: &mut Links,
) -> Result<()> {
    let (board, parity) = (parts.board(), parts.parity());
    let me = board.rank();
    let mut counts = header::PairSums::default();
    counts.add(mine);
    let mut watch = Watch {
        board,
        links,
        parity,
        k,
        call,
        deadline: None,
        next_checked: me,
    };
    if board.counted() {
        watch.wait_for_arrivals()?;
    }
    for j in (0..board.size()).filter(|&j| j != me) {
        if !parts.arrived(j, k) {
            watch.wait_for(j)?;
        }
        let theirs = parts.desc(j);
        if !header::same_call(&theirs, mine) {
            return Err(watch.site().mismatch(j, described(&theirs)));
        }
        counts.add(&theirs);
    }
    match counts.unbalanced() {
        Some((sent, received)) => Err(watch.site().unmatched_sends(sent, received)),
        None => Ok(()),
    }
}

/// How long a board wait sleeps before it checks on its peers again.
const SLEEP_SLICE: Duration = Duration::from_millis(5);
/// The first sleep of a wait for every rank's arrival (a crowded board): its sleeps double from
/// this up to [`LONGEST_SLEEP_SLICE`], so that ranks that wait long for a slow start (hundreds
/// of ranks on a few cores) do not keep waking to check on peers. Longer than [`SLEEP_SLICE`]:
/// on a crowded board every rank but the last waits, and each wake-up of hundreds costs a
/// core's time that the late ranks need.
const FIRST_ARRIVAL_SLICE: Duration = Duration::from_millis(20);
/// The longest sleep of a wait for every rank's arrival; a peer that died is still noticed
/// within this time.
const LONGEST_SLEEP_SLICE: Duration = Duration::from_millis(80);

/// What each rank of a board collective publishes and where results go, in elements.
struct Part {
    coll: Collective,
    size: usize,
    count: usize,
    /// A reduce-scatter of 2 ranks whose op folds the peer's part onto this rank's own
    /// ([`Reducer::applies_onto`]): each rank publishes only the chunk its peer reduces, half
    /// the copy in (2-rank reduce-scatter of 8 KiB in 0.66 of the time,
    /// `results/board-pair-parts/`). Other ops fold from their own published copy.
    peer_chunk_only: bool,
}

impl Part {
    /// The parts of a call of `coll` over `count` elements on a board of `size` ranks, reduced
    /// with `reducer` if it reduces.
    fn new(coll: Collective, size: usize, count: usize, reducer: Option<Reducer>) -> Part {
        Part {
            coll,
            size,
            count,
            peer_chunk_only: coll == Collective::ReduceScatter
                && size == 2
                && reducer.is_some_and(|r| r.applies_onto()),
        }
    }

    /// The most elements any rank publishes (the bytes the automatic choice compares with the
    /// slots' size: the whole buffer, or for all-gather and gather the first, largest chunk).
    fn largest(&self) -> usize {
        match self.coll {
            Collective::AllGather | Collective::Gather { .. } => self.chunk(0).len(),
            Collective::Barrier => 0,
            _ => self.count,
        }
    }

    /// Rank `r`'s chunk of the call's `count` elements.
    fn chunk(&self, r: usize) -> Span {
        chunk_span(self.count, self.size, r)
    }

    /// The span of rank `r`'s work buffer it publishes (its slot holds these elements, from the
    /// slot's start).
    fn published(&self, r: usize) -> Span {
        let all = 0..self.count;
        match self.coll {
            Collective::ReduceScatter if self.peer_chunk_only => self.chunk(1 - r),
            Collective::AllReduce
            | Collective::Reduce { .. }
            | Collective::ReduceScatter
            | Collective::AllToAll => all,
            Collective::Broadcast { root } | Collective::Scatter { root } if r == root => all,
            Collective::Broadcast { .. } | Collective::Scatter { .. } | Collective::Barrier => 0..0,
            Collective::AllGather | Collective::Gather { .. } => self.chunk(r),
        }
    }
}

/// Reading the published parts of one operation.
struct Take<'b, P> {
    parts: P,
    part: &'b Part,
    es: usize,
}

impl<'a, P: Parts<'a>> Take<'_, P> {
    /// Elements `span` (in rank `r`'s work-buffer coordinates, inside what it published) of
    /// rank `r`'s slot.
    fn from(&self, r: usize, span: Span) -> &'a [u8] {
        let published = self.part.published(r);
        debug_assert!(published.start <= span.start && span.end <= published.end);
        let data = self.parts.data(r, published.len() * self.es);
        &data[bytes(
            span.start - published.start..span.end - published.start,
            self.es,
        )]
    }

    /// Copies elements `span` of rank `r`'s slot to the same place of `buf`.
    fn copy(&self, r: usize, span: Span, buf: &mut [u8]) {
        copy_slice(&mut buf[bytes(span.clone(), self.es)], self.from(r, span));
    }

    /// Writes to elements `span` of `buf` the reduction, in rank order, of every rank's `span`.
    /// A rank's `buf` holds its own part already (it published it from there), so rank 0 starts
    /// from it instead of copying its slot back, and rank 1 folds rank 0's part onto it with rank
    /// 0's as the first operand ([`Reducer::apply_onto`]) instead of copying rank 0's part over
    /// it and applying its own slot: the same bits, one pass over the peer's part fewer.
    fn fold(&self, me: usize, span: Span, buf: &mut [u8], reducer: Reducer) {
        let range = bytes(span.clone(), self.es);
        let next = match me {
            0 => 1,
            1 if reducer.apply_onto(&mut buf[range.clone()], self.from(0, span.clone())) => 2,
            _ => {
                self.copy(0, span.clone(), buf);
                1
            }
        };
        let dst = &mut buf[range];
        for r in next..self.part.size {
            reducer.apply(dst, self.from(r, span.clone()));
        }
    }

    /// Rank `me`'s result, in `buf`, from every rank's published slot. `reducer` is present for
    /// the reducing collectives.
    fn finish(&self, me: usize, buf: &mut [u8], reducer: Option<Reducer>) {
        let p = self.part;
        let all = 0..p.count;
        let others = (0..p.size).filter(move |&r| r != me);
        match (p.coll, reducer) {
            (Collective::AllReduce, Some(op)) => self.fold(me, all, buf, op),
            (Collective::Reduce { root }, Some(op)) if root == me => self.fold(me, all, buf, op),
            (Collective::ReduceScatter, Some(op)) => self.fold(me, p.chunk(me), buf, op),
            (Collective::Broadcast { root }, _) if root != me => self.copy(root, all, buf),
            (Collective::Scatter { root }, _) if root != me => self.copy(root, p.chunk(me), buf),
            (Collective::AllGather, _) => others.for_each(|r| self.copy(r, p.chunk(r), buf)),
            (Collective::Gather { root }, _) if root == me => {
                others.for_each(|r| self.copy(r, p.chunk(r), buf))
            }
            (Collective::AllToAll, _) => {
                // Block `r` of the output (after the input) is chunk `me` of rank `r`'s input.
                let block = p.chunk(me);
                for r in 0..p.size {
                    let at = p.count + r * block.len();
                    let dst = &mut buf[bytes(at..at + block.len(), self.es)];
                    copy_slice(&mut dst[..], self.from(r, block.clone()));
                }
            }
            _ => {}
        }
    }
}

/// A clock for timing board calls against each other on every rank of a host: the time-stamp
/// counter on x86-64 (one count for all cores of a host with an invariant counter, 13 ns a read
/// here against 36 for `Instant::now`, which on a 2 µs call was 4 % of it), elsewhere
/// nanoseconds since the first call.
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: every x86-64 CPU has RDTSC; it reads a counter and touches no memory.
    unsafe {
        std::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let since = EPOCH.get_or_init(Instant::now).elapsed().as_nanos();
        u64::try_from(since).unwrap_or(u64::MAX)
    }
}

/// Element span `span` as a byte range, for elements of `es` bytes.
fn bytes(span: Span, es: usize) -> std::ops::Range<usize> {
    span.start * es..span.end * es
}

/// What a peer's header says it called.
fn described(theirs: &[u8; HEADER_LEN]) -> String {
    match header::decode(theirs) {
        Header::Data { desc, .. } => desc.describe(),
        _ => "something unreadable".into(),
    }
}

/// Waiting for the peers' slots of one operation.
struct Watch<'a> {
    board: &'a Board,
    links: &'a mut Links,
    parity: usize,
    k: u64,
    call: &'a Call,
    /// Set when a wait first blocks, so the fast path reads no clock.
    deadline: Option<Instant>,
    /// Where the next round of [`Watch::check_peers`] goes on among the other peers.
    next_checked: usize,
}

/// How many peers besides the one waited for [`Watch::check_peers`] looks at each time a wait
/// blocks. Looking at a peer costs system calls (is its process alive, has its link a message),
/// so looking at all of them every time made a 256-rank board wait cost O(N) calls per wake-up
/// on every rank; in turns, every peer is still seen within `size / PEERS_PER_CHECK` sleeps.
const PEERS_PER_CHECK: usize = 8;

impl Watch<'_> {
    fn site(&self) -> Site<'_> {
        self.call.site(self.links.rank, &self.links.peers)
    }

    /// Waits until every rank has published operation `k`, sleeping on the board's arrival
    /// counter: one wake-up however many peers are late. Between sleeps it checks on the first
    /// peer whose slot still lacks `k` as [`Watch::wait_for`] does. Returns early if every slot
    /// holds `k` although the counter does not say so (a peer that published and died before
    /// counting); the per-slot waits then decide.
    fn wait_for_arrivals(&mut self) -> Result<()> {
        let (board, k) = (self.board, self.k);
        let (me, size) = (board.rank(), board.size());
        let mut spinner = Spinner::pausing(self.call.wait);
        let mut late = 0;
        let mut slice = None;
        loop {
            if board.all_arrived(k) {
                return Ok(());
            }
            // Once asleep, a wake-up without the operation complete is a timeout or a publish
            // that raced the sleep: back to sleep without spinning again.
            if slice.is_none() && spinner.idle() != Next::Block {
                continue;
            }
            // The first late peer by the summary lines, which lie on a few pages: the slots lie
            // on a page each, and looking through them made every waiting rank of hundreds
            // fault in and read the whole board.
            let parity = self.parity;
            late = (late..size)
                .find(|&j| j != me && !board.summary(j, parity).ready(k))
                .unwrap_or(size);
            let peer = if late < size {
                late
            } else if let Some(j) = self.first_unpublished_slot() {
                j
            } else {
                return Ok(());
            };
            let left = self.check_before_sleep(peer)?;
            let this = slice.map_or(FIRST_ARRIVAL_SLICE, |s: Duration| {
                (s * 2).min(LONGEST_SLEEP_SLICE)
            });
            slice = Some(this);
            board.sleep_until_arrived(k, left.min(this));
        }
    }

    /// The first peer whose slot lacks operation `k`, once every summary line has it but the
    /// count does not say so: a publish under way (a line is written before its slot), or a
    /// peer that published and died before it counted. Rare, so the slots are read only then.
    fn first_unpublished_slot(&self) -> Option<usize> {
        let (board, me) = (self.board, self.board.rank());
        (0..board.size()).find(|&j| j != me && !board.slot(j, self.parity).ready(self.k))
    }

    /// Waits until `peer`'s slot holds operation `k`: polls, then yields, then sleeps on the
    /// slot, checking between sleeps that every peer is alive and none is sending messages over
    /// the links (a different collective), and that the deadline has not passed.
    fn wait_for(&mut self, peer: usize) -> Result<()> {
        let slot = self.board.slot(peer, self.parity);
        let mut spinner = Spinner::pausing(self.call.wait);
        loop {
            if slot.ready(self.k) {
                return Ok(());
            }
            if spinner.idle() != Next::Block {
                continue;
            }
            let left = self.check_before_sleep(peer)?;
            slot.sleep(self.k, left.min(SLEEP_SLICE));
        }
    }

    /// Before a sleep waiting for `peer`: checks on the peers ([`Watch::check_peers`]) and the
    /// deadline (set now if this is the call's first sleep), and returns the time left.
    ///
    /// If either fails, this rank gives up the call: it first withdraws `peer`'s part
    /// ([`Slot::withdraw`](crate::transport::shm::board::Slot::withdraw)), so that no rank can
    /// complete the call (one call, one outcome: [`crate::transport::shm::withdraw`]). If `peer`
    /// joined first, the error is dropped and the wait goes on (`Ok`, a short sleep): `peer`
    /// made it, its part follows at once, and the call may still complete. Only if it then dies
    /// before writing its part (nobody can complete the call), or writes nothing for another
    /// `PSY_TIMEOUT` (a rank stopped inside those few instructions), does this rank fail.
    fn check_before_sleep(&mut self, peer: usize) -> Result<Duration> {
        let err = match self.checked_time_left(peer) {
            Ok(left) => return Ok(left),
            Err(e) => e,
        };
        let me = Withdrawal {
            by: self.board.rank(),
            code: super::kind_code(err.kind()),
        };
        let slot = self.board.slot(peer, self.parity);
        match slot.withdraw(self.k, me) {
            Withdraw::Joined => {
                let pid = self.board.pid(peer);
                let gone = !process_alive(pid) && !slot.ready(self.k);
                let overdue = self
                    .deadline
                    .is_some_and(|d| Instant::now() > d + self.call.timeout);
                if gone || overdue {
                    return Err(self.site().lost(
                        peer,
                        format!("(pid {pid}) joined the call on the node board but never wrote its part; it died or stopped"),
                    ));
                }
                Ok(Duration::from_millis(1))
            }
            Withdraw::Withdrew | Withdraw::Already(_) => Err(err),
        }
    }

    /// [`Watch::check_before_sleep`] without the withdrawal.
    fn checked_time_left(&mut self, peer: usize) -> Result<Duration> {
        if let Some(w) = self.board.slot(peer, self.parity).withdrawal(self.k) {
            return Err(self.site().withdrawn(peer, w, self.board.first_gone()));
        }
        self.check_peers(peer)?;
        let timeout = self.call.timeout;
        let deadline = *self
            .deadline
            .get_or_insert_with(|| Instant::now() + timeout);
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(self.site().timeout(peer, "join it on the node board"));
        }
        if let Some(reason) = self.call.interrupt.poll() {
            return Err(self
                .site()
                .interrupted(peer, "join it on the node board", &reason));
        }
        Ok(self.call.interrupt.slice(left))
    }

    /// Fails if a peer gave up the group (any peer: the board says so), or died, or sent a
    /// message over the links while its slot still lacks operation `k` (it is in another
    /// collective, or aborted). The last two for the peer waited for and the next
    /// [`PEERS_PER_CHECK`] others in turn, since the one in another call may be a third rank.
    fn check_peers(&mut self, peer: usize) -> Result<()> {
        let (me, size) = (self.board.rank(), self.board.size());
        // A peer that gave up the group says so on the board (one flag while nobody has).
        if let Some((j, mark)) = self.board.first_aborted() {
            return Err(self.site().aborted_on_board(j, mark));
        }
        // A peer in a call over the links may have connected to this rank just now.
        self.links.adopt_arrived()?;
        let mut turn = [peer; PEERS_PER_CHECK + 1];
        let looked_at = 1 + PEERS_PER_CHECK.min(size - 1);
        for j in &mut turn[1..looked_at] {
            self.next_checked = (self.next_checked + 1) % size;
            if self.next_checked == me {
                self.next_checked = (me + 1) % size;
            }
            *j = self.next_checked;
        }
        for &j in &turn[..looked_at] {
            let slot = self.board.slot(j, self.parity);
            let pid = self.board.pid(j);
            // A peer may publish its slot and exit (its last collective): look at the slot again.
            if !process_alive(pid) && !slot.ready(self.k) {
                return Err(self.site().lost(
                    j,
                    format!("(pid {pid}) is gone; it probably crashed, check its output"),
                ));
            }
            // A peer publishes its slot before it can send anything for a later collective: if
            // its slot is ready now, its message belongs to the next collective and stays unread.
            if super::stray::pending(self.links, j) && !slot.ready(self.k) {
                return Err(super::stray::stray_error(self.links, j, self.call));
            }
        }
        Ok(())
    }
}

/// Where a board call reads its peers' descriptions and parts: their slots, or on a crowded
/// board their summary lines ([`Board::summary`]), a few contiguous pages for every peer.
mod parts {
    use crate::transport::shm::board::{Board, DESC};

    /// The descriptions and parts of one parity of the board.
    pub(super) trait Parts<'a> {
        /// The board.
        fn board(&self) -> &'a Board;
        /// The parity read.
        fn parity(&self) -> usize;
        /// True if rank `r`'s part of operation `k` is known to be there without waiting on its
        /// slot (false: wait on the slot, which is there once it is).
        fn arrived(&self, r: usize, k: u64) -> bool;
        /// Rank `r`'s description of the call (once there).
        fn desc(&self, r: usize) -> [u8; DESC];
        /// Rank `r`'s part, `len` bytes (once there).
        fn data(&self, r: usize, len: usize) -> &'a [u8];
    }

    /// Every rank's slot.
    pub(super) struct Slots<'a> {
        pub(super) board: &'a Board,
        pub(super) parity: usize,
    }

    impl<'a> Parts<'a> for Slots<'a> {
        fn board(&self) -> &'a Board {
            self.board
        }
        fn parity(&self) -> usize {
            self.parity
        }
        fn arrived(&self, _: usize, _: u64) -> bool {
            false
        }
        fn desc(&self, r: usize) -> [u8; DESC] {
            self.board.slot(r, self.parity).desc()
        }
        fn data(&self, r: usize, len: usize) -> &'a [u8] {
            self.board.slot(r, self.parity).data(len)
        }
    }

    /// Every rank's summary line: a publish writes it before the slot, so a rank whose slot is
    /// there has its summary there too.
    pub(super) struct Summaries<'a> {
        pub(super) board: &'a Board,
        pub(super) parity: usize,
    }

    impl<'a> Parts<'a> for Summaries<'a> {
        fn board(&self) -> &'a Board {
            self.board
        }
        fn parity(&self) -> usize {
            self.parity
        }
        fn arrived(&self, r: usize, k: u64) -> bool {
            self.board.summary(r, self.parity).ready(k)
        }
        fn desc(&self, r: usize) -> [u8; DESC] {
            self.board.summary(r, self.parity).desc()
        }
        fn data(&self, r: usize, len: usize) -> &'a [u8] {
            self.board.summary(r, self.parity).data(len)
        }
    }
}
