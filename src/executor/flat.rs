//! The flat all-reduce of a group that lives on one host, for small buffers: each rank publishes
//! its buffer in its slot of the node board ([`Board`]) and then folds every rank's slot, in rank
//! order, into its own buffer. One cache-line write and `size - 1` reads per rank instead of
//! log2(size) message exchanges; every rank folds in the same order, so results agree bit for bit.
//!
//! Slots are double buffered by the parity of a counter of flat operations, which every rank
//! advances identically. Rank `r` writes parity `k % 2` at operation `k` only after finishing
//! operation `k - 1`, which needed every peer's slot of `k - 1`; a peer writes that only after it
//! finished operation `k - 2`, i.e. after its last read of `r`'s parity `k % 2`. So no rank ever
//! overwrites data another still reads.

use super::fail::Site;
use super::header::{self, Header, HEADER_LEN};
use super::{Call, Engine, Links};
use crate::error::Result;
use crate::transport::shm::board::{Board, Slot, DESC};
use crate::wait::{process_alive, Next, Spinner};
use std::time::{Duration, Instant};

/// An engine: one flat all-reduce on the node board.
pub(crate) struct BoardAllReduce<'a> {
    /// The group's board.
    pub(crate) board: &'a Board,
    /// The number of this flat operation (1, 2, ...), the same on every rank.
    pub(crate) k: u64,
    /// This rank's buffer, at most `board::SLOT_DATA` bytes: input, then the result.
    pub(crate) buf: &'a mut [u8],
}

impl Engine for BoardAllReduce<'_> {
    fn run(self, call: &Call, links: &mut Links) -> Result<()> {
        let BoardAllReduce { board, k, buf } = self;
        let desc = &call.desc;
        let reducer = call.reducer.ok_or_else(|| {
            call.site(links.rank, &links.peers)
                .internal("a flat all-reduce without a reduction")
        })?;
        let me = board.rank();
        let parity = (k % 2) as usize;
        let mut mine: [u8; DESC] = header::encode_data(desc, buf.len() as u64);
        header::set_pair(&mut mine, header::total(&links.p2p));
        board.slot(me, parity).publish(k, &mine, buf);
        let mut counts = header::PairSums::default();
        counts.add(&mine);
        // The deadline is set when a wait first blocks, so the fast path reads no clock.
        let mut deadline = None;
        for j in (0..board.size()).filter(|&j| j != me) {
            let slot = board.slot(j, parity);
            let mut watch = Watch {
                board,
                links: &mut *links,
                slot: &slot,
                peer: j,
                k,
                call,
            };
            watch.wait(&mut deadline)?;
            let theirs = slot.desc();
            if !header::same_call(&theirs, &mine) {
                let site = call.site(links.rank, &links.peers);
                return Err(site.mismatch(j, described(&theirs)));
            }
            counts.add(&theirs);
        }
        if let Some((sent, received)) = counts.unbalanced() {
            return Err(call
                .site(links.rank, &links.peers)
                .unmatched_sends(sent, received));
        }
        buf.copy_from_slice(board.slot(0, parity).data(buf.len()));
        for r in 1..board.size() {
            reducer.apply(buf, board.slot(r, parity).data(buf.len()));
        }
        Ok(())
    }
}

/// What a peer's header says it called.
fn described(theirs: &[u8; HEADER_LEN]) -> String {
    match header::decode(theirs) {
        Header::Data { desc, .. } => desc.describe(),
        _ => "something unreadable".into(),
    }
}

/// Waiting for one peer's slot of one operation.
struct Watch<'a, 'b> {
    board: &'a Board,
    links: &'a mut Links,
    slot: &'a Slot<'b>,
    peer: usize,
    k: u64,
    call: &'a Call,
}

impl Watch<'_, '_> {
    fn site(&self) -> Site<'_> {
        self.call.site(self.links.rank, &self.links.peers)
    }

    /// Waits until the peer's slot holds operation `k`: polls, then yields, then sleeps on the
    /// slot, checking between sleeps that the peer is alive, not sending ring messages (a
    /// different collective), and that the deadline has not passed.
    fn wait(&mut self, deadline: &mut Option<Instant>) -> Result<()> {
        let mut spinner = Spinner::pausing(self.call.wait);
        loop {
            if self.slot.ready(self.k) {
                return Ok(());
            }
            if spinner.idle() != Next::Block {
                continue;
            }
            self.check_peer()?;
            let deadline = *deadline.get_or_insert_with(|| Instant::now() + self.call.timeout);
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.site().timeout(self.peer, "join it on the node board"));
            }
            self.slot.sleep(self.k, left.min(Duration::from_millis(5)));
        }
    }

    /// Fails if the peer died, or sent a ring message while its slot still lacks operation `k`
    /// (it is in another collective, or aborted).
    fn check_peer(&mut self) -> Result<()> {
        let pid = self.board.pid(self.peer);
        // A peer may publish its slot and exit (its last collective): look at the slot again.
        if !process_alive(pid) && !self.slot.ready(self.k) {
            return Err(self.site().lost(
                self.peer,
                format!("(pid {pid}) is gone; it probably crashed, check its output"),
            ));
        }
        let pending = super::stray::pending(self.links, self.peer);
        // A peer publishes its slot before it can send anything for a later collective: if the
        // slot is ready now, the ring data belongs to the next collective and stays unread.
        if !pending || self.slot.ready(self.k) {
            return Ok(());
        }
        Err(super::stray::stray_error(self.links, self.peer, self.call))
    }
}
