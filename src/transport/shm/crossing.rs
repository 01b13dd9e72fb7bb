//! How a call's shared-memory messages cross from one core to the other: through the caches
//! (the ring written with ordinary stores, the reader's copies served from the writer's cache) or
//! through memory (the ring written with non-temporal stores, [`super::ring::Ring::write_streaming`]),
//! chosen per kind of call and size by timing the calls themselves.
//!
//! On the 2-core AMD VM the time a cache line takes from one core to the other changes while a
//! job runs: a round trip of ~100 ns most of the time, ~500 ns for seconds at a time
//! (`scripts/probes/core-bounce.c`). Copies through the caches run at the speed of those
//! crossings, so psyne's 2-rank all-reduce of 64 KiB took 9-10 µs in one state and 31-32 µs in
//! the other; through memory it takes 18-20 µs in both (`results/crossing/`). Neither is right
//! all the time, and no setting made at start is: each rank times its calls of each kind and size
//! class, runs a couple now and then the other way ([`TRIAL`] calls), and keeps whichever was
//! faster. Only calls in which every rank writes and reads alike are timed so (all-reduce,
//! all-gather, reduce-scatter, all-to-all): in a broadcast the root's time says nothing of its
//! receivers' (streamed, the root finished sooner and the receivers later, 1.8-2x the time at
//! 256 KiB-4 MiB), so one-way calls keep the caches.
//!
//! Every rank decides for its own writes, from its own times, and a disagreement only costs time
//! (the way changes how bytes are stored, never what is sent). The ranks of a group try in turn
//! ([`stagger`]: rank 1 starts its trials [`TRIAL`] + 1 calls after rank 0, counted the same on
//! every rank), so each trial measures one rank's way against the others' kept ones: were they
//! to try together, two ranks that had decided differently would flip together and never meet
//! (both through the caches takes 9 µs; one each way and its mirror image take the same). A kept
//! way is tried against again after a period that doubles each time it wins, from
//! [`FIRST_PERIOD`] calls up to about a gigabyte of calls ([`longest_period`]), so a way that
//! stays right costs at most [`TRIAL`] slow calls per period, and a change of state is found
//! within that period.

use crate::transport::Traffic;
use std::time::Duration;

/// How a call's ring writes store their bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crossing {
    /// Ordinary stores: the reader's copies come from this core's cache.
    Cached,
    /// Non-temporal stores: the bytes go to memory, and the reader's copies come from there.
    Streamed,
}

impl Crossing {
    fn other(self) -> Crossing {
        match self {
            Crossing::Cached => Crossing::Streamed,
            Crossing::Streamed => Crossing::Cached,
        }
    }
}

/// `PSY_SHM_STREAM_WRITES`: `auto` (the default: timed, as above), `1`/`on` (always through
/// memory) or `0`/`off` (always through the caches).
pub const STREAM_WRITES: &str = "PSY_SHM_STREAM_WRITES";

/// Which way a group's calls cross ([`STREAM_WRITES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrossingPolicy {
    /// Chosen by timing the calls.
    Auto,
    /// Always this way.
    Fixed(Crossing),
}

impl CrossingPolicy {
    /// The value of [`STREAM_WRITES`]; `Err` names the accepted values.
    pub fn parse(value: Option<&str>) -> Result<CrossingPolicy, String> {
        match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
            None | Some("" | "auto") => Ok(CrossingPolicy::Auto),
            Some("1" | "on" | "yes") => Ok(CrossingPolicy::Fixed(Crossing::Streamed)),
            Some("0" | "off" | "no") => Ok(CrossingPolicy::Fixed(Crossing::Cached)),
            Some(other) => Err(format!(
                "{STREAM_WRITES}={other:?} is not one of auto, on, off"
            )),
        }
    }
}

/// Calls of fewer bytes always cross through the caches: their copies are too short for the way
/// they are stored to matter, and too short to time against each other.
pub const MIN_BYTES: usize = 16 << 10;

/// Calls run the other way in each trial.
pub const TRIAL: u64 = 2;

/// Calls of a class timed before its first trial.
pub const FIRST_PERIOD: u64 = 16;

/// A trial wins when its fastest call is faster than this fraction of the kept mode's fastest
/// recent one. The fastest, not a median: a call is slowed by whatever else the machine does, never
/// sped up, and the two ways differ by 1.5-3x where it matters.
const WIN: f64 = 0.85;

/// The kept mode's latest times compared with a trial's.
const RECENT: usize = 4;

/// The longest period between trials for calls of `bytes`: about a gigabyte of calls, from 64
/// up to 1024 calls.
pub fn longest_period(bytes: usize) -> u64 {
    ((1u64 << 30) / bytes.max(1) as u64).clamp(64, 1024)
}

/// A call's chosen way and what to report back when it ends ([`Chooser::finish`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    /// How this call's ring writes store.
    pub crossing: Crossing,
    /// Which class the call counts in, if it is timed.
    ticket: Option<usize>,
}

impl Choice {
    /// Whether the call is timed: only then does [`Chooser::finish`] need its time.
    pub fn timed(&self) -> bool {
        self.ticket.is_some()
    }
}

/// One kind and size class of call.
#[derive(Debug, Clone)]
struct Class {
    traffic: u8,
    log2: u8,
    kept: Crossing,
    calls: u64,
    next_trial: u64,
    period: u64,
    longest: u64,
    recent: Vec<f64>,
    trial: Vec<f64>,
}

impl Class {
    fn new(traffic: u8, log2: u8, bytes: usize, rank: usize) -> Class {
        Class {
            traffic,
            log2,
            kept: Crossing::Cached,
            calls: 0,
            next_trial: FIRST_PERIOD + stagger(rank),
            period: FIRST_PERIOD,
            longest: longest_period(bytes),
            recent: Vec::with_capacity(RECENT),
            trial: Vec::with_capacity(TRIAL as usize),
        }
    }

    fn in_trial(&self, call: u64) -> bool {
        (self.next_trial..self.next_trial + TRIAL).contains(&call)
    }

    /// Counts the call `call` (from 0) took `secs`.
    fn record(&mut self, call: u64, secs: f64) {
        if !self.in_trial(call) {
            if self.recent.len() == RECENT {
                self.recent.remove(0);
            }
            self.recent.push(secs);
            return;
        }
        self.trial.push(secs);
        if call + 1 < self.next_trial + TRIAL {
            return;
        }
        // `recent` is never empty here: the first trial follows FIRST_PERIOD recorded calls, and
        // a switch fills it with the trial's times.
        let won = fastest(&self.trial) < WIN * fastest(&self.recent);
        if won {
            self.kept = self.kept.other();
            self.recent = std::mem::take(&mut self.trial);
            self.period = FIRST_PERIOD;
        } else {
            self.period = (self.period * 2).min(self.longest);
        }
        self.trial.clear();
        self.next_trial = call + 1 + self.period;
    }
}

/// How many calls after the group's first trial this rank's first trial comes: ranks try in
/// turn, [`TRIAL`] calls and one more apart, four turns round (see the module docs).
pub fn stagger(rank: usize) -> u64 {
    (rank % 4) as u64 * (TRIAL + 1)
}

fn fastest(times: &[f64]) -> f64 {
    times.iter().copied().fold(f64::INFINITY, f64::min)
}

/// One group's choices, kept between its calls.
#[derive(Debug, Clone)]
pub struct Chooser {
    policy: CrossingPolicy,
    rank: usize,
    classes: Vec<Class>,
}

impl Default for Chooser {
    fn default() -> Self {
        Chooser::new(CrossingPolicy::Auto, 0)
    }
}

impl Chooser {
    /// The chooser of rank `rank` of its group, with no calls seen.
    pub fn new(policy: CrossingPolicy, rank: usize) -> Chooser {
        Chooser {
            policy,
            rank,
            classes: Vec::new(),
        }
    }

    /// The way the next call of `traffic` whose work buffer holds `bytes` crosses. Only calls in
    /// which every rank both writes and reads ([`Traffic::Exchange`],
    /// [`Traffic::ReducingExchange`]) of at least [`MIN_BYTES`] are timed and may stream; the
    /// others go through the caches.
    pub fn choose(&mut self, traffic: Traffic, bytes: usize) -> Choice {
        let untimed = |crossing| Choice {
            crossing,
            ticket: None,
        };
        let code = match (self.policy, traffic) {
            (CrossingPolicy::Fixed(c), _) => return untimed(c),
            _ if bytes < MIN_BYTES => return untimed(Crossing::Cached),
            (_, Traffic::Exchange) => 0,
            (_, Traffic::ReducingExchange) => 1,
            // One side writes, the other reads: the writer's time says nothing of the reader's
            // (streamed, a broadcast's root finishes sooner and its receivers later).
            (_, Traffic::OneWay | Traffic::ReducingOneWay | Traffic::Eager { .. }) => {
                return untimed(Crossing::Cached)
            }
        };
        let log2 = bytes.ilog2() as u8;
        let i = match self
            .classes
            .iter()
            .position(|c| (c.traffic, c.log2) == (code, log2))
        {
            Some(i) => i,
            None => {
                self.classes.push(Class::new(code, log2, bytes, self.rank));
                self.classes.len() - 1
            }
        };
        let class = &self.classes[i];
        let crossing = if class.in_trial(class.calls) {
            class.kept.other()
        } else {
            class.kept
        };
        Choice {
            crossing,
            ticket: Some(i),
        }
    }

    /// Reports that the call `choice` was made for took `elapsed` (a call that failed is not
    /// reported, and counts as not made).
    pub fn finish(&mut self, choice: Choice, elapsed: Duration) {
        if let Some(class) = choice.ticket.and_then(|i| self.classes.get_mut(i)) {
            let call = class.calls;
            class.calls += 1;
            class.record(call, elapsed.as_secs_f64());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    /// Runs `calls` calls of 64 KiB all-reduce, each taking `time(crossing)`; returns the ways.
    fn run(ch: &mut Chooser, calls: usize, time: impl Fn(Crossing) -> Duration) -> Vec<Crossing> {
        (0..calls)
            .map(|_| {
                let c = ch.choose(Traffic::ReducingExchange, 64 << 10);
                ch.finish(c, time(c.crossing));
                c.crossing
            })
            .collect()
    }

    fn slow_caches(c: Crossing) -> Duration {
        match c {
            Crossing::Cached => 30 * US,
            Crossing::Streamed => 19 * US,
        }
    }

    fn fast_caches(c: Crossing) -> Duration {
        match c {
            Crossing::Cached => 10 * US,
            Crossing::Streamed => 19 * US,
        }
    }

    #[test]
    fn keeps_the_caches_while_they_are_faster_trying_the_other_way_ever_less_often() {
        let mut ch = Chooser::default();
        let ways = run(&mut ch, 5000, fast_caches);
        let trials: Vec<usize> = ways
            .iter()
            .enumerate()
            .filter(|(_, c)| **c == Crossing::Streamed)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(&trials[..6], &[16, 17, 50, 51, 116, 117], "first trials");
        // Periods double up to the longest (1024 calls of 64 KiB): few trials in 5000 calls.
        assert!(trials.len() <= 2 * 9, "{} trial calls", trials.len());
        assert_eq!(ways[4999], Crossing::Cached);
    }

    #[test]
    fn moves_to_memory_when_the_caches_get_slow_and_back_when_they_recover() {
        let mut ch = Chooser::default();
        run(&mut ch, 3000, fast_caches);
        // The state changes: within one longest period plus a trial, the chooser follows it.
        let ways = run(&mut ch, 1100, slow_caches);
        assert_eq!(ways[1099], Crossing::Streamed);
        let ways = run(&mut ch, 1100, fast_caches);
        assert_eq!(ways[1099], Crossing::Cached);
    }

    #[test]
    fn ranks_try_in_turn_and_two_that_decided_apart_come_together() {
        assert_eq!(
            [stagger(0), stagger(1), stagger(2), stagger(4)],
            [0, 3, 6, 0]
        );
        // Two ranks of an exchange: the call takes 9 µs with both through the caches, 19 with
        // both past them, 14 with one each way. Rank 0 kept the caches, rank 1 streams.
        let (mut a, mut b) = (
            Chooser::new(CrossingPolicy::Auto, 0),
            Chooser::new(CrossingPolicy::Auto, 1),
        );
        let time = |x: Crossing, y: Crossing| match (x, y) {
            (Crossing::Cached, Crossing::Cached) => 9 * US,
            (Crossing::Streamed, Crossing::Streamed) => 19 * US,
            _ => 14 * US,
        };
        let mut first = true;
        let mut last = (Crossing::Cached, Crossing::Cached);
        for _ in 0..200 {
            let (ca, cb) = (
                a.choose(Traffic::Exchange, 1 << 20),
                b.choose(Traffic::Exchange, 1 << 20),
            );
            if first {
                // Put rank 1 in the other way, as if it had decided so.
                b.classes[0].kept = Crossing::Streamed;
                first = false;
            }
            let t = time(ca.crossing, cb.crossing);
            a.finish(ca, t);
            b.finish(cb, t);
            last = (ca.crossing, cb.crossing);
        }
        assert_eq!(last, (Crossing::Cached, Crossing::Cached));
        assert_eq!(b.classes[0].kept, Crossing::Cached);
    }

    #[test]
    fn a_trial_must_win_clearly_to_switch() {
        let mut ch = Chooser::default();
        let ways = run(&mut ch, 2000, |c| match c {
            Crossing::Cached => 10 * US,
            Crossing::Streamed => 9 * US, // 0.9: inside the noise
        });
        assert_eq!(ways[1999], Crossing::Cached);
    }

    #[test]
    fn small_one_way_and_point_to_point_calls_go_through_the_caches_untimed() {
        let mut ch = Chooser::default();
        for _ in 0..100 {
            for (traffic, bytes) in [
                (Traffic::Exchange, MIN_BYTES - 1),
                (Traffic::Eager { seq: 1 }, 1 << 20),
                (Traffic::OneWay, 1 << 20),
                (Traffic::ReducingOneWay, 1 << 20),
            ] {
                let c = ch.choose(traffic, bytes);
                assert_eq!(c.crossing, Crossing::Cached, "{traffic:?}");
                assert!(!c.timed(), "{traffic:?}");
                ch.finish(c, 50 * US);
            }
        }
        assert!(ch.classes.is_empty());
    }

    #[test]
    fn fixed_policies_are_obeyed_and_the_setting_parses() {
        for (text, want) in [
            (None, CrossingPolicy::Auto),
            (Some("auto"), CrossingPolicy::Auto),
            (Some(" ON "), CrossingPolicy::Fixed(Crossing::Streamed)),
            (Some("1"), CrossingPolicy::Fixed(Crossing::Streamed)),
            (Some("off"), CrossingPolicy::Fixed(Crossing::Cached)),
            (Some("0"), CrossingPolicy::Fixed(Crossing::Cached)),
        ] {
            assert_eq!(CrossingPolicy::parse(text), Ok(want), "{text:?}");
        }
        let err = CrossingPolicy::parse(Some("sometimes")).unwrap_err();
        assert!(
            err.contains(STREAM_WRITES) && err.contains("auto, on, off"),
            "{err}"
        );
        let mut ch = Chooser::new(CrossingPolicy::Fixed(Crossing::Streamed), 0);
        let ways = run(&mut ch, 100, fast_caches);
        assert!(ways.iter().all(|c| *c == Crossing::Streamed));
    }

    #[test]
    fn classes_are_apart_by_kind_and_size() {
        let mut ch = Chooser::default();
        for bytes in [16 << 10, 20 << 10, 32 << 10, 1 << 20] {
            for traffic in [Traffic::Exchange, Traffic::ReducingExchange] {
                let c = ch.choose(traffic, bytes);
                assert!(c.timed());
                ch.finish(c, US);
            }
        }
        // 16 and 20 KiB share a class (log2 14); 32 KiB and 1 MiB have their own.
        assert_eq!(ch.classes.len(), 6);
        assert_eq!(longest_period(64 << 10), 1024);
        assert_eq!(longest_period(64 << 20), 64);
        assert_eq!(longest_period(1 << 20), 1024);
        assert_eq!(longest_period(4 << 20), 256);
    }
}
