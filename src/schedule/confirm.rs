//! Confirmations: how a rank whose part in a call is only to send learns that its peers made the
//! same call.
//!
//! Every message starts with a header describing the sender's call, and the receiver checks it
//! against its own, so a receiver always learns of a disagreement. A rank that only *sends* to a
//! peer learns nothing from that exchange: a broadcast root, a scatter root or a reduce leaf would
//! return `Ok` while its peer, in another call, fails. So each rank also tracks what it knows
//! without asking: a header it checked tells it the sender's call equals its own, and that the
//! sender had checked every rank the sender knew of when it sent (knowledge travels with data).
//! For every peer a rank sends to and does not come to know this way, that peer sends it an empty
//! *confirmation*: an ordinary message of zero elements, whose header the rank checks like any
//! other.
//!
//! The confirmation costs as little waiting as it can: the peer sends it in the step of its first
//! receive from the rank, at once (its header says what the peer called, which the peer knows
//! from the start), and the rank receives it in the step of its first send to the peer. So a
//! root's call ends when every peer it sent to has at least started the same call, not a round
//! trip after its data arrived. Data already flows every way in an all-reduce, all-gather,
//! reduce-scatter, all-to-all or barrier with the library's algorithms, so those gain nothing;
//! only rooted collectives (broadcast, reduce, scatter, gather) carry confirmations.

use super::{Recv, Schedule, Send};
use std::collections::HashMap;

/// `rank`'s schedule from every rank's (`all`, as built for the same call), with the
/// confirmations it sends and waits for added.
pub(super) fn confirmed(rank: usize, mut all: Vec<Schedule>) -> Schedule {
    let known = knowledge(&all);
    let partners: Vec<Ranks> = all.iter().map(|s| partners(s, all.len())).collect();
    let mut mine = all.swap_remove(rank);
    for peer in partners[rank].iter() {
        if !known[peer].contains(rank) {
            // `peer` never hears from this rank, so this rank only receives from it.
            if let Some(step) = first_step(&mine, |st| st.recvs.iter().any(|r| r.peer == peer)) {
                mine.steps[step].sends.push(Send::plain(peer, 0..0));
            }
        }
        if !known[rank].contains(peer) {
            // This rank never hears from `peer`, so it only sends to it.
            if let Some(step) = first_step(&mine, |st| st.sends.iter().any(|s| s.peer == peer)) {
                mine.steps[step].recvs.push(Recv::copy(peer, 0..0));
            }
        }
    }
    mine
}

/// The index of the first step of `schedule` for which `holds` is true.
fn first_step(schedule: &Schedule, holds: impl Fn(&super::Step) -> bool) -> Option<usize> {
    schedule.steps.iter().position(holds)
}

/// A set of ranks.
#[derive(Clone, PartialEq, Eq)]
struct Ranks(Vec<u64>);

impl Ranks {
    fn new(size: usize) -> Ranks {
        Ranks(vec![0; size.div_ceil(64)])
    }

    fn insert(&mut self, r: usize) {
        self.0[r / 64] |= 1 << (r % 64);
    }

    fn contains(&self, r: usize) -> bool {
        self.0[r / 64] & (1 << (r % 64)) != 0
    }

    /// Adds `other`'s ranks; true if that added any.
    fn absorb(&mut self, other: &Ranks) -> bool {
        let mut grew = false;
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            grew |= *b & !*a != 0;
            *a |= b;
        }
        grew
    }

    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.0.len() * 64).filter(|&r| self.contains(r))
    }
}

/// The peers `schedule` sends to or receives from.
fn partners(schedule: &Schedule, size: usize) -> Ranks {
    let mut set = Ranks::new(size);
    for step in &schedule.steps {
        step.sends.iter().for_each(|s| set.insert(s.peer));
        step.recvs.iter().for_each(|r| set.insert(r.peer));
    }
    set
}

/// The ranks each rank knows made its call by the end of its schedule: itself, every sender whose
/// header it checked, and what each of those knew at the start of the step that sent it.
fn knowledge(all: &[Schedule]) -> Vec<Ranks> {
    let size = all.len();
    // The step of each send from `a` to `b`, in order: the k-th is the k-th receive from `a` at `b`.
    let mut sent_in: HashMap<(usize, usize), Vec<usize>> = HashMap::new();
    for (a, schedule) in all.iter().enumerate() {
        for (i, step) in schedule.steps.iter().enumerate() {
            for s in &step.sends {
                sent_in.entry((a, s.peer)).or_default().push(i);
            }
        }
    }
    // at[r][j]: what rank r knows when it starts step j (j = steps.len(): at the end).
    let mut at: Vec<Vec<Ranks>> = all
        .iter()
        .enumerate()
        .map(|(r, s)| {
            let mut me = Ranks::new(size);
            me.insert(r);
            vec![me; s.steps.len() + 1]
        })
        .collect();
    // Knowledge only grows and flows forward along messages, so this settles after at most as
    // many passes as the longest chain of messages.
    let mut grew = true;
    while grew {
        grew = false;
        for b in 0..size {
            let mut nth: HashMap<usize, usize> = HashMap::new();
            for (j, step) in all[b].steps.iter().enumerate() {
                let mut next = at[b][j].clone();
                for r in &step.recvs {
                    let k = nth.entry(r.peer).or_default();
                    let sent = sent_in.get(&(r.peer, b)).and_then(|v| v.get(*k));
                    *k += 1;
                    if let Some(&i) = sent {
                        let theirs = at[r.peer][i].clone();
                        next.absorb(&theirs);
                    }
                }
                grew |= at[b][j + 1].absorb(&next);
            }
        }
    }
    at.into_iter()
        .map(|mut steps| steps.pop().unwrap_or_else(|| Ranks::new(size)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Step;

    fn one_way(size: usize, edges: &[(usize, usize)]) -> Vec<Schedule> {
        let mut all = vec![Schedule::default(); size];
        for &(a, b) in edges {
            let mut sa = Step::default();
            sa.sends.push(Send::plain(b, 0..0));
            all[a].steps.push(sa);
            let mut sb = Step::default();
            sb.recvs.push(Recv::copy(a, 0..0));
            all[b].steps.push(sb);
        }
        all
    }

    #[test]
    fn a_rank_that_only_sends_waits_for_confirmations_where_it_first_sends() {
        // 0 -> 1, then 1 -> 2: 1 knows 0, 2 knows 1 and (through 1) 0; 0 knows nobody.
        let all = one_way(3, &[(0, 1), (1, 2)]);
        let root = confirmed(0, all.clone());
        assert_eq!(root.steps.len(), 1);
        assert_eq!(root.steps[0].recvs, vec![Recv::copy(1, 0..0)]);
        // Rank 1 confirms to 0 as it receives from it, and waits for 2's as it sends to it.
        let middle = confirmed(1, all.clone());
        assert_eq!(middle.steps.len(), 2);
        assert_eq!(middle.steps[0].sends, vec![Send::plain(0, 0..0)]);
        assert_eq!(middle.steps[1].recvs, vec![Recv::copy(2, 0..0)]);
        let leaf = confirmed(2, all);
        assert_eq!(leaf.steps[0].sends, vec![Send::plain(1, 0..0)]);
    }

    #[test]
    fn knowledge_that_comes_round_needs_no_confirmation() {
        // A ring: 0 -> 1 -> 2 -> 0, one step after another; then 0 -> 1 again, carrying what 0
        // learnt from 2 (which knew 1): every rank ends up knowing its partners.
        let all = one_way(3, &[(0, 1), (1, 2), (2, 0), (0, 1), (1, 2)]);
        for rank in 0..3 {
            let s = confirmed(rank, all.clone());
            assert_eq!(s, all[rank], "rank {rank}");
        }
    }
}
