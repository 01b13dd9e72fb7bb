//! A cost model of schedules on a many-core host, for designing what this 2-core machine cannot
//! run (`docs/many-cores.md`): how long every rank's [`Schedule`] of one call would take on a
//! host of sockets, cache domains (L3 slices) and cores, from a handful of bandwidths and
//! latencies ([`Machine`]).
//!
//! The schedules are the ones psyne runs ([`super::build`], [`super::build_hier`],
//! [`super::build_domains`]); the model only times them:
//!
//! - **Rounds.** Matched messages happen in the same round, and a rank's steps in increasing
//!   rounds: each step gets the smallest round that respects both (the longest path through the
//!   schedules), so phases some ranks sit out take no round of theirs.
//! - **A round's time** is the latency of its slowest hop (`step_us` by how far apart the two
//!   ranks are: same domain, same socket, other socket) plus the longest of: any one core's
//!   copies (a shared-memory message is copied in by its sender and out by its receiver; a
//!   reducing receive runs at `reduce_gbps`), any domain's traffic in or out across its
//!   boundary, any socket pair's link, and, when the call's buffers and rings do not fit the
//!   socket's L3, any socket's memory (the sender reads each byte from its buffer, the receiver
//!   writes it to its own, and reads it too when it reduces; the ring between stays in cache).
//!   In-cache or in-memory is one switch for the whole call: a coarse edge where the real
//!   machine has a slope.
//!
//! Ranks are placed as psyrun places them (`--bind-to core`): rank `r` on core `r`, cores
//! numbered domain by domain, socket by socket.

use super::Schedule;
use std::collections::{HashMap, VecDeque};

/// A host as the model sees it. Bandwidths in GB/s (1e9 B/s), latencies in µs.
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    /// What the parameters describe (and where they come from).
    pub name: &'static str,
    /// Sockets (NUMA nodes of memory).
    pub sockets: usize,
    /// Cache domains (L3 slices) per socket.
    pub domains_per_socket: usize,
    /// Cores per cache domain.
    pub cores_per_domain: usize,
    /// A step's fixed cost when its farthest peer is in the same domain, the same socket, or the
    /// other socket: software plus the cache-line round trips that hand a slice over.
    pub step_us: [f64; 3],
    /// One core copying in cache.
    pub core_gbps: f64,
    /// One core reducing (f32 sum: two streams in, one out).
    pub reduce_gbps: f64,
    /// In or out of one cache domain, each direction.
    pub domain_gbps: f64,
    /// Between two sockets, each direction.
    pub socket_link_gbps: f64,
    /// One socket's memory.
    pub memory_gbps: f64,
    /// L3 bytes per domain.
    pub l3_bytes: u64,
}

impl Machine {
    /// Cores in all.
    pub fn cores(&self) -> usize {
        self.sockets * self.domains_per_socket * self.cores_per_domain
    }

    /// The cache domain of the core rank `rank` is bound to (ranks fill cores in order).
    pub fn domain_of(&self, rank: usize) -> usize {
        rank / self.cores_per_domain
    }

    fn socket_of(&self, rank: usize) -> usize {
        self.domain_of(rank) / self.domains_per_socket
    }

    /// 0: same domain, 1: same socket, 2: other socket.
    fn distance(&self, a: usize, b: usize) -> usize {
        if self.domain_of(a) == self.domain_of(b) {
            0
        } else if self.socket_of(a) == self.socket_of(b) {
            1
        } else {
            2
        }
    }
}

/// What the model makes of one call.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// The call's time, µs.
    pub total_us: f64,
    /// Rounds (the longest chain of steps).
    pub rounds: usize,
    /// Of `total_us`, the rounds' fixed costs.
    pub latency_us: f64,
    /// Bytes that crossed a domain boundary, summed over messages.
    pub crossing_bytes: u64,
    /// What limited the most rounds' data time: `core`, `domain`, `socket link` or `memory`.
    pub bound: &'static str,
}

/// A message as the model times it.
struct Message {
    from: usize,
    to: usize,
    bytes: u64,
    reduce: bool,
}

/// Times `schedules` (every rank's, rank `r` at index `r`) on `machine`, elements of
/// `elem_bytes`. `None` when a send finds no matching receive (not a valid set of schedules) or
/// the ranks outnumber the cores.
pub fn estimate(schedules: &[Schedule], machine: &Machine, elem_bytes: u64) -> Option<Estimate> {
    if schedules.len() > machine.cores() {
        return None;
    }
    let messages = rounds_of(schedules, elem_bytes)?;
    let buffers: u64 = schedules
        .iter()
        .map(|s| s.buf_len as u64 * elem_bytes)
        .sum();
    // The call's buffers and the rings they stream through, per socket.
    let per_socket = 2 * buffers / machine.sockets as u64;
    let in_memory = per_socket > machine.l3_bytes * machine.domains_per_socket as u64;
    let mut est = Estimate {
        total_us: 0.0,
        rounds: messages.len(),
        latency_us: 0.0,
        crossing_bytes: 0,
        bound: "core",
    };
    let mut bounds: HashMap<&'static str, usize> = HashMap::new();
    for round in &messages {
        let hop = round
            .iter()
            .map(|m| machine.step_us[machine.distance(m.from, m.to)])
            .fold(0.0, f64::max);
        let (data_us, bound) = data_time(round, machine, in_memory);
        est.latency_us += hop;
        est.total_us += hop + data_us;
        est.crossing_bytes += round
            .iter()
            .filter(|m| machine.distance(m.from, m.to) > 0)
            .map(|m| m.bytes)
            .sum::<u64>();
        *bounds.entry(bound).or_default() += 1;
    }
    est.bound = bounds
        .into_iter()
        .max_by_key(|(b, n)| (*n, *b))
        .map_or("core", |(b, _)| b);
    Some(est)
}

/// The data part of one round's time, µs, and what limited it.
fn data_time(round: &[Message], machine: &Machine, in_memory: bool) -> (f64, &'static str) {
    let mut core: HashMap<usize, f64> = HashMap::new();
    let mut domain_out: HashMap<usize, u64> = HashMap::new();
    let mut domain_in: HashMap<usize, u64> = HashMap::new();
    let mut link: HashMap<(usize, usize), u64> = HashMap::new();
    let mut memory: HashMap<usize, u64> = HashMap::new();
    for m in round {
        let b = m.bytes as f64;
        *core.entry(m.from).or_default() += b / machine.core_gbps;
        let out = if m.reduce {
            machine.reduce_gbps
        } else {
            machine.core_gbps
        };
        *core.entry(m.to).or_default() += b / out;
        let (df, dt) = (machine.domain_of(m.from), machine.domain_of(m.to));
        if df != dt {
            *domain_out.entry(df).or_default() += m.bytes;
            *domain_in.entry(dt).or_default() += m.bytes;
        }
        let (sf, st) = (machine.socket_of(m.from), machine.socket_of(m.to));
        if sf != st {
            *link.entry((sf, st)).or_default() += m.bytes;
        }
        if in_memory {
            // The ring between them stays in cache; the sender reads its buffer from memory and
            // the receiver writes its own (reading it too when it reduces).
            *memory.entry(sf).or_default() += m.bytes;
            *memory.entry(st).or_default() += if m.reduce { 2 * m.bytes } else { m.bytes };
        }
    }
    let most = |v: &mut dyn Iterator<Item = u64>| v.max().unwrap_or(0) as f64;
    // Bytes ÷ (GB/s) is ns; the model counts µs.
    let candidates = [
        ("core", core.values().copied().fold(0.0, f64::max)),
        (
            "domain",
            most(&mut domain_out.values().chain(domain_in.values()).copied()) / machine.domain_gbps,
        ),
        (
            "socket link",
            most(&mut link.values().copied()) / machine.socket_link_gbps,
        ),
        (
            "memory",
            most(&mut memory.values().copied()) / machine.memory_gbps,
        ),
    ];
    let (bound, ns) = candidates
        .into_iter()
        .fold(("core", 0.0), |a, b| if b.1 > a.1 { b } else { a });
    (ns / 1000.0, bound)
}

/// Puts every step of every rank in a round (see the module docs) and returns each round's
/// messages (rounds without any left out).
fn rounds_of(schedules: &[Schedule], elem_bytes: u64) -> Option<Vec<Vec<Message>>> {
    let matches = match_messages(schedules)?;
    let mut round: Vec<Vec<usize>> = schedules
        .iter()
        .map(|s| (0..s.steps.len()).collect())
        .collect();
    // The longest chain of a set of schedules that can run has at most every step of every rank;
    // beyond that the rounds only grow because the schedules wait on each other in a circle.
    let most = schedules.iter().map(|s| s.steps.len()).sum::<usize>();
    loop {
        if round.iter().flatten().any(|&r| r > most) {
            return None;
        }
        let mut changed = false;
        for &((a, i), (b, j), _, _) in &matches {
            let r = round[a][i].max(round[b][j]);
            for (x, k) in [(a, i), (b, j)] {
                if round[x][k] < r {
                    round[x][k] = r;
                    changed = true;
                    for later in k + 1..round[x].len() {
                        let least = round[x][later - 1] + 1;
                        if round[x][later] < least {
                            round[x][later] = least;
                        }
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    let n = round.iter().flatten().map(|r| r + 1).max().unwrap_or(0);
    let mut messages: Vec<Vec<Message>> = (0..n).map(|_| Vec::new()).collect();
    for ((a, i), (b, _), len, reduce) in matches {
        messages[round[a][i]].push(Message {
            from: a,
            to: b,
            bytes: len as u64 * elem_bytes,
            reduce,
        });
    }
    messages.retain(|m| !m.is_empty());
    Some(messages)
}

/// A matched message: the sender's (rank, step), the receiver's, its elements, whether the
/// receive reduces.
type Matched = ((usize, usize), (usize, usize), usize, bool);

/// Pairs the k-th send from `a` to `b` with the k-th receive from `a` at `b`; `None` if a send
/// or a receive is left without its other half.
fn match_messages(schedules: &[Schedule]) -> Option<Vec<Matched>> {
    // By (sender, receiver): the receives in order, as (step, elements, reduces).
    type Waiting = VecDeque<(usize, usize, bool)>;
    let mut recvs: HashMap<(usize, usize), Waiting> = HashMap::new();
    for (b, s) in schedules.iter().enumerate() {
        for (j, step) in s.steps.iter().enumerate() {
            for r in &step.recvs {
                let reduce = r.mode == super::RecvMode::Reduce;
                recvs
                    .entry((r.peer, b))
                    .or_default()
                    .push_back((j, r.span.len(), reduce));
            }
        }
    }
    let mut out = Vec::new();
    for (a, s) in schedules.iter().enumerate() {
        for (i, step) in s.steps.iter().enumerate() {
            for m in &step.sends {
                let (j, len, reduce) = recvs.get_mut(&(a, m.peer))?.pop_front()?;
                out.push(((a, i), (m.peer, j), len.max(m.span.len()), reduce));
            }
        }
    }
    recvs.values().all(VecDeque::is_empty).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{build, build_domains, Algo, Collective, Hosts, Recv, Send, Step};

    fn machine() -> Machine {
        Machine {
            name: "test: 2 sockets x 2 domains x 4 cores",
            sockets: 2,
            domains_per_socket: 2,
            cores_per_domain: 4,
            step_us: [0.1, 0.2, 0.4],
            core_gbps: 40.0,
            reduce_gbps: 20.0,
            domain_gbps: 50.0,
            socket_link_gbps: 100.0,
            memory_gbps: 200.0,
            l3_bytes: 32 << 20,
        }
    }

    fn all(size: usize, one: impl Fn(usize) -> Schedule) -> Vec<Schedule> {
        (0..size).map(one).collect()
    }

    #[test]
    fn a_flat_ring_takes_its_two_p_minus_two_rounds_and_pays_the_farthest_hop() {
        let m = machine();
        let count = 1 << 20;
        let s = all(16, |r| {
            build(Collective::AllReduce, Algo::Ring, r, 16, count).expect("ring")
        });
        let e = estimate(&s, &m, 4).expect("estimate");
        assert_eq!(e.rounds, 30);
        // Every round has a hop to the other socket (rank 7 to 8, 15 to 0).
        assert!((e.latency_us - 30.0 * 0.4).abs() < 1e-9, "{e:?}");
        // Each round moves count/16 floats per rank; the reducing receives are the slowest.
        let chunk = (count / 16 * 4) as f64;
        let reduce_round = chunk / 40.0 + chunk / 20.0;
        assert!(
            e.total_us > e.latency_us + 15.0 * reduce_round / 1000.0,
            "{e:?}"
        );
    }

    #[test]
    fn the_two_level_ring_has_fewer_rounds_and_crosses_domains_with_every_core() {
        let m = machine();
        // 64 KiB: where rounds cost more than bytes (at 4 MiB both are bound by bandwidth and
        // the two-level ring's domain links are the tighter bound here).
        let count = 16 << 10;
        let domains = Hosts::blocks(&[4, 4, 4, 4]);
        let two = all(16, |r| {
            build_domains(&domains, r, count).expect("two-level")
        });
        let flat = all(16, |r| {
            build(Collective::AllReduce, Algo::Ring, r, 16, count).expect("ring")
        });
        let (e2, e1) = (
            estimate(&two, &m, 4).unwrap(),
            estimate(&flat, &m, 4).unwrap(),
        );
        assert_eq!(e2.rounds, 2 * 3 + 2 * 3);
        assert!(e2.total_us < e1.total_us, "{e2:?} vs {e1:?}");
        // Phase 2 sends 2 (d - 1) / d of each rank's chunk (count / m) across: 16 ranks x 2 x 3/4
        // x count/4 = 6 count elements; the flat ring sends count/16 over each of its 4 cuts in
        // each of 30 rounds: 7.5 count.
        assert_eq!(e2.crossing_bytes, count as u64 * 4 * 6);
        assert_eq!(e1.crossing_bytes, count as u64 * 4 * 15 / 2);
    }

    #[test]
    fn unmatched_or_circular_schedules_and_too_many_ranks_give_nothing() {
        let m = machine();
        let lone = Schedule::point_to_point(1, true, 8);
        assert!(estimate(&[lone, Schedule::default()], &m, 4).is_none());
        let deaf = Schedule::point_to_point(0, false, 8);
        assert!(estimate(&[Schedule::default(), deaf], &m, 4).is_none());
        // Each rank first receives what the other sends only in its second step.
        let first_recv = |peer| Schedule {
            buf_len: 8,
            steps: vec![
                Step {
                    sends: vec![],
                    recvs: vec![Recv::copy(peer, 0..8)],
                },
                Step {
                    sends: vec![Send::plain(peer, 0..8)],
                    recvs: vec![],
                },
            ],
        };
        assert!(estimate(&[first_recv(1), first_recv(0)], &m, 4).is_none());
        let s = all(17, |r| {
            build(Collective::AllReduce, Algo::Ring, r, 17, 8).unwrap()
        });
        assert!(estimate(&s, &m, 4).is_none());
    }
}
