//! How a call's shared-memory messages cross from one core to the other: through the caches
//! (the ring written with ordinary stores, the reader's copies served from the writer's cache) or
//! through memory (the ring written with non-temporal stores, [`super::ring::Ring::write_streaming`]),
//! chosen per kind of call and size by timing the calls themselves. The node board's exchanges
//! use the same chooser differently (`executor::flat::BoardCrossing`): every rank weighs each
//! call by the slowest rank's time and tries the other way at the same calls.
//!
//! On the 2-core AMD VM the time a cache line takes from one core to the other changes while a
//! job runs: a round trip of ~100 ns most of the time, ~500 ns for seconds at a time
//! (`scripts/probes/core-bounce.c`). Copies through the caches run at the speed of those
//! crossings, so psyne's 2-rank all-reduce of 64 KiB took 9-10 µs in one state and 31-32 µs in
//! the other; through memory it takes 18-20 µs in both (`results/crossing/`). Neither is right
//! all the time, and no setting made at start is: each rank times its calls of each kind and size
//! class, runs a couple now and then the other way ([`trial_calls`]), and keeps whichever was
//! faster. In calls in which every rank writes and reads alike (all-reduce, all-gather,
//! reduce-scatter, all-to-all) each rank times its own calls and decides for its own writes. In
//! one-way calls (broadcast, scatter, gather, reduce) the writer's time says nothing of its
//! readers' (streamed, a broadcast's root finished sooner and its receivers later: a chooser that
//! timed the root made broadcasts of 256 KiB-4 MiB 1.8-2x slower), so there the *reader* times
//! its calls and decides, and asks its writers: each side of a pair's segment has a line of
//! [`Wishes`], one bit per one-way class, for calls of even and of odd number (the group's calls
//! over its links, which every rank's chooser counts alike: they all run a call on the same
//! engine). A reader publishes the wishes for call `k + 1` at the start of call `k`, before it
//! sends anything in it;
//! a writer reads its reader's wish at the start of its call `k + 1`, which it can only reach
//! after the reader started call `k` (a one-way call's writer waits for its readers'
//! confirmations, `src/schedule/confirm.rs`; in the other calls it hears from them). So the reader
//! knows which way each call it timed was written, and records it under that way.
//!
//! Every rank decides for its own writes (exchanges) or for the writes it reads (one-way calls),
//! from its own times, and a disagreement only costs time (the way changes how bytes are stored,
//! never what is sent).
//!
//! In an exchange every rank's time is that of the pair's slower direction, so a rank that
//! streams alone gains nothing: in the slow state only both ranks streaming pays (a 2-rank
//! all-reduce of 16 MiB: 2.1 ms both past the caches, 9.2 through them, 6.1 with one rank
//! streaming, `results/crossing-together/`).
//! So the ranks of an exchange try together: their trials come at the same calls (the period
//! doubles after each trial whoever won, so the ranks' schedules never drift apart; where every
//! rank weighs the same times, [`Chooser::together`], a trial lost by [`LOST_FAR`] or more
//! quadruples it), every rank
//! in every other trial, and in the trials between only the ranks of even number, then only
//! those of odd number. Those turns alone bring together two ranks that decided apart, which
//! trying together only swaps (both through the caches takes 9 µs, one each way 14 and its
//! mirror image the same: the rank whose turn puts both through the caches wins). One-way readers
//! try in turn instead ([`stagger`]: rank 1 starts its trials [`TRIAL`] + 1 calls after rank 0,
//! counted the same on every rank): each asks only for its own writers' way. A kept way is tried
//! against again after a period that doubles each time (each time it wins, in a one-way class,
//! where a trial that wins starts over from its first period), from [`FIRST_PERIOD`] calls (fewer
//! for calls over 4 MiB, [`first_period`]: a job may make only a few dozen) up to about a
//! gigabyte of calls ([`longest_period`]), so a way that stays right costs at most
//! [`TRIAL`] slow calls per period, and a change of state is found within two periods. A trial
//! is weighed against the kept way's fastest of the [`RECENT`] calls before it and the
//! [`RECENT`] after it: a program's first calls (its warm-up, a benchmark's checked calls) can be
//! ten times slower than the next, and a trial right after them must not win against them.
//! A new class of 1 MiB or more starts with the way its kind's nearest smaller class of 1 MiB or
//! more keeps ([`FOLLOW_MIN`]): the state is the machine's, not the size's, and a sweep makes its
//! largest and fewest calls last.

use crate::transport::Traffic;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// Which way a group's calls cross (`PSY_SHM_STREAM_WRITES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrossingPolicy {
    /// Chosen by timing the calls.
    Auto,
    /// Always this way.
    Fixed(Crossing),
}

impl CrossingPolicy {
    /// The value of `PSY_SHM_STREAM_WRITES`; `Err` names the accepted values.
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

/// One side's requests to its peer, in the pair's segment ([`super::cma::offsets`]): how to write
/// the messages of one-way calls to this side. Written by its side only, read by the peer.
#[repr(C, align(64))]
pub struct Wishes {
    /// For calls of even and odd number: bit [`wish_bit`] set asks for calls of that
    /// class to be written past the caches.
    by_parity: [AtomicU64; 2],
}

impl Wishes {
    /// Reader: asks for the one-way messages of call `seq` to be written as `wishes` says.
    pub fn publish(&self, seq: u64, wishes: u64) {
        // Release: a writer that learns of this rank's later messages (acquiring the ring's
        // tail) then sees it.
        self.by_parity[(seq % 2) as usize].store(wishes, Ordering::Release);
    }

    /// Writer: the way asked for messages of class `bit` in call `seq`.
    pub fn asked(&self, seq: u64, bit: u32) -> Crossing {
        way_in(
            self.by_parity[(seq % 2) as usize].load(Ordering::Acquire),
            bit,
        )
    }
}

/// The way a set of wishes asks for class `bit`.
fn way_in(wishes: u64, bit: u32) -> Crossing {
    match wishes >> bit & 1 {
        1 => Crossing::Streamed,
        _ => Crossing::Cached,
    }
}

/// Calls of fewer bytes always cross through the caches: their copies are too short for the way
/// they are stored to matter, and too short to time against each other.
pub const MIN_BYTES: usize = 16 << 10;

/// [`MIN_BYTES`] for a chooser whose ranks weigh the same times ([`Chooser::together`], the
/// node board's): in the VM's slow state its 2-rank all-reduce of 8 and 12 KiB took 3.9 and
/// 6.1 µs through the caches, where the 16 KiB one, timed, took 2.3; timed from 8 KiB they took
/// 1.7 and 2.0, for 1.00-1.07 of the time in the normal state (`results/board-crossing-small/`).
pub const TOGETHER_MIN_BYTES: usize = 8 << 10;

/// Calls run the other way in each trial ([`trial_calls`]).
pub const TRIAL: u64 = 2;

/// Calls run the other way in each trial of calls of `bytes`: [`TRIAL`], or one from 32 MiB up,
/// which takes milliseconds (plenty to time) and costs most where the kept way was right (in
/// the VM's normal state a 2-rank reduce-scatter of 64 MiB takes 8.7 ms through the caches,
/// 10.2 past them).
pub fn trial_calls(bytes: usize) -> u64 {
    if bytes >= 32 << 20 {
        1
    } else {
        TRIAL
    }
}

/// Calls of a class timed before its first trial, for calls of up to [`FIRST_BYTES`] ÷ 16.
pub const FIRST_PERIOD: u64 = 16;

/// About how many bytes of a class's calls come before its first trial: calls of 4 MiB wait
/// [`FIRST_PERIOD`] calls, larger ones fewer ([`first_period`]). A program makes few calls of
/// 64 MiB (psybench about 20 a job, a training step a handful), and a class that tries only after
/// 16 of them never leaves the way it started with.
pub const FIRST_BYTES: u64 = 64 << 20;

/// Calls of `bytes` timed before their class's first trial, and its first period after a trial
/// that won (one-way): [`FIRST_PERIOD`], or about [`FIRST_BYTES`] of calls where that is fewer,
/// but never fewer than [`RECENT`] (a trial is weighed against the calls before it).
pub fn first_period(bytes: usize) -> u64 {
    (FIRST_BYTES / bytes.max(1) as u64).clamp(RECENT as u64, FIRST_PERIOD)
}

/// A new class of calls of more bytes than a class of the same kind of at least this many bytes
/// starts with the way the nearest such class keeps ([`Chooser::choose`]): the machine's state,
/// which decides the way of large calls, is the same for every size, and a benchmark's sweep
/// (or a program whose buckets grow) reaches its largest calls, of which it makes the fewest,
/// last. Smaller classes decide on the crossing of single lines, not of bandwidth, and are not
/// followed.
pub const FOLLOW_MIN: usize = 1 << 20;

/// A trial wins when its fastest call is faster than this fraction of the kept way's fastest call
/// around it. The fastest, not a median: a call is slowed by whatever else the machine does, never
/// sped up, and the two ways differ by 1.5-3x where it matters.
const WIN: f64 = 0.85;

/// The kept way's calls before a trial, and after it, that the trial is weighed against.
const RECENT: usize = 4;

/// A trial whose fastest call took at least this many times the kept way's, in a class whose
/// ranks all weigh the same times ([`Chooser::together`], so that every rank sees the same
/// ratio and their trials stay at the same calls), puts the next trial four times as far off
/// instead of twice: in the VM's normal state the node board's 2-rank all-reduce of 64 KiB and
/// 1 MiB took 2-3 times as long written past the caches, and the trials doubling from 16 calls
/// cost about 2 % of a thousand calls (`results/board-trial-spacing/`). A change of the machine's
/// state is still found within two periods, which reach their longest sooner.
const LOST_FAR: f64 = 2.0;

/// The longest period between trials for calls of `bytes`: about a gigabyte of calls, from 64
/// up to 1024 calls.
pub fn longest_period(bytes: usize) -> u64 {
    ((1u64 << 30) / bytes.max(1) as u64).clamp(64, 1024)
}

/// A call's chosen ways and what to report back when it ends ([`Chooser::finish`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    /// How this call's ring writes store, where [`Choice::ask`] is `None`.
    pub crossing: Crossing,
    /// In a one-way call: the call's number and class bit, for each send to ask its reader the
    /// way ([`Wishes::asked`]).
    pub ask: Option<(u64, u32)>,
    /// What to publish to every peer before sending anything ([`Wishes::publish`]): the number
    /// of the next call and this rank's wishes for it, when they changed.
    pub publish: Option<(u64, u64)>,
    /// Which class the call counts in, if it is timed.
    ticket: Option<usize>,
    /// The call's number in its class (from 0), if it is timed.
    call: u64,
    /// The way the call's timed messages were written.
    way: Crossing,
}

impl Choice {
    /// Whether the call is timed: only then does [`Chooser::finish`] need its time.
    pub fn timed(&self) -> bool {
        self.ticket.is_some()
    }

    /// The way a send to a peer whose wishes are `asked` (its [`Wishes::asked`]) stores.
    pub fn send_crossing(&self, asked: impl FnOnce(u64, u32) -> Crossing) -> Crossing {
        match self.ask {
            Some((seq, bit)) => asked(seq, bit),
            None => self.crossing,
        }
    }
}

/// Class codes: a call's traffic as [`Chooser`] tells classes apart.
const EXCHANGE: u8 = 0;
const REDUCING_EXCHANGE: u8 = 1;
const ONE_WAY: u8 = 2;
const REDUCING_ONE_WAY: u8 = 3;
/// One-way calls of a chooser whose ranks all weigh the same times ([`Chooser::together`]): they
/// try and decide as exchanges do.
const ONE_WAY_TOGETHER: u8 = 4;
const REDUCING_ONE_WAY_TOGETHER: u8 = 5;

/// Whether class code `code` is a one-way call's (a reader asks its writers for their way),
/// not an exchange's (every rank decides its own writes, and the ranks try together).
fn one_way(code: u8) -> bool {
    matches!(code, ONE_WAY | REDUCING_ONE_WAY)
}

/// The bit of a one-way class in [`Wishes`]: 32 size classes from [`MIN_BYTES`] up per kind (the
/// largest takes every larger size).
pub fn wish_bit(code: u8, log2: u8) -> u32 {
    let size = (u32::from(log2).saturating_sub(MIN_BYTES.ilog2())).min(31);
    u32::from(code == REDUCING_ONE_WAY) * 32 + size
}

/// One kind and size class of call.
#[derive(Debug, Clone)]
struct Class {
    code: u8,
    log2: u8,
    /// This rank's number in its group (whose turn a solo trial is).
    rank: usize,
    /// Whether every rank of the group records the same times ([`Chooser::together`]).
    shared: bool,
    kept: Crossing,
    /// Calls chosen for; each is recorded under its number ([`Choice::call`]) when its time is
    /// in, which the node board reports a call late, with its peers' times of it.
    calls: u64,
    next_trial: u64,
    /// Trials decided so far.
    trials: u64,
    period: u64,
    /// The first period ([`first_period`]).
    first: u64,
    /// Calls in each trial ([`trial_calls`]).
    trial_len: u64,
    longest: u64,
    recent: Vec<f64>,
    /// The kept way's fastest call of the [`RECENT`] before the current trial.
    before: f64,
    trial: Vec<f64>,
}

impl Class {
    fn new(code: u8, log2: u8, bytes: usize, rank: usize, shared: bool) -> Class {
        let first = first_period(bytes);
        Class {
            code,
            log2,
            rank,
            shared,
            kept: Crossing::Cached,
            calls: 0,
            next_trial: first + if one_way(code) { stagger(rank) } else { 0 },
            trials: 0,
            period: first,
            first,
            trial_len: trial_calls(bytes),
            longest: longest_period(bytes),
            recent: Vec::with_capacity(RECENT),
            before: f64::INFINITY,
            trial: Vec::with_capacity(TRIAL as usize),
        }
    }

    /// Whether this is an exchange class, whose trials come at the same calls on every rank.
    fn together(&self) -> bool {
        !one_way(self.code)
    }

    /// Whether this rank runs the current trial the other way: always in a one-way class; in an
    /// exchange class, every rank in every other trial, and in the trials between, the ranks of
    /// even and of odd number in turn (see the module docs).
    fn tries(&self) -> bool {
        !self.together() || self.trials % 2 == 0 || (self.trials / 2) % 2 == self.rank as u64 % 2
    }

    fn in_trial(&self, call: u64) -> bool {
        (self.next_trial..self.next_trial + self.trial_len).contains(&call) && self.tries()
    }

    /// The way asked for the class's call `call` (from 0).
    fn way_of(&self, call: u64) -> Crossing {
        if self.in_trial(call) {
            self.kept.other()
        } else {
            self.kept
        }
    }

    /// Counts that the call `call` (from 0), written `way`, took `secs`. A call written the other
    /// way outside a trial (a one-way writer that read its reader's wishes late) is left out.
    ///
    /// A trial is weighed against the kept way's fastest call among the [`RECENT`] before it
    /// and the [`RECENT`] after it: a program's first calls (its warm-up, or a benchmark's
    /// checked calls) can be many times slower than the ones that follow, and a trial right
    /// after them would otherwise win against them.
    fn record(&mut self, call: u64, way: Crossing, secs: f64) {
        if way == self.kept {
            if self.recent.len() == RECENT {
                self.recent.remove(0);
            }
            self.recent.push(secs);
        } else if self.in_trial(call) {
            self.trial.push(secs);
        }
        let trial_end = self.next_trial + self.trial_len;
        if call + 1 == trial_end {
            self.before = fastest(&self.recent);
            self.recent.clear();
        }
        if call + 1 < trial_end + RECENT as u64 {
            return;
        }
        let kept = self.before.min(fastest(&self.recent));
        let tried = fastest(&self.trial);
        let won = kept.is_finite() && tried < WIN * kept;
        if won {
            self.kept = self.kept.other();
            self.recent = std::mem::take(&mut self.trial);
        }
        // An exchange class's trials stay at the same calls on every rank, whoever won; ranks
        // that weigh the same times also see the same `tried / kept`.
        let growth = if self.shared && tried.is_finite() && tried >= LOST_FAR * kept {
            4
        } else {
            2
        };
        self.period = if won && !self.together() {
            self.first
        } else {
            (self.period * growth).min(self.longest)
        };
        self.trials += 1;
        self.trial.clear();
        self.before = f64::INFINITY;
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
    /// The wishes this rank last published for calls of even and odd number (what its peers'
    /// [`Wishes`] line holds; zero, all through the caches, until it publishes).
    published: [u64; 2],
    /// Collective calls chosen for so far: the number of the next ([`Chooser::choose`]).
    collectives: u64,
    /// Whether every rank is told the same times (the slowest rank's of each call), so that
    /// one-way calls too are tried and decided together, for the writers' own writes
    /// ([`Chooser::together`]).
    together: bool,
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
            published: [0; 2],
            collectives: 0,
            together: false,
        }
    }

    /// A chooser for a group whose every rank [`Chooser::finish`]es each call with the same
    /// time, the slowest rank's (the node board's, `executor::flat::BoardCrossing`): every rank
    /// then makes the same choices, so one-way calls need no wishes either. They are tried and
    /// decided as exchanges are, each writer for its own writes: a one-way writer's own time says
    /// nothing of its readers', the slowest rank's does.
    pub fn together(policy: CrossingPolicy) -> Chooser {
        Chooser {
            together: true,
            ..Chooser::new(policy, 0)
        }
    }

    /// Whether calls whose work buffer holds `bytes` are timed (and may cross past the caches):
    /// from [`MIN_BYTES`] up, or [`TOGETHER_MIN_BYTES`] for a chooser that decides together.
    pub fn times(&self, bytes: usize) -> bool {
        bytes
            >= if self.together {
                TOGETHER_MIN_BYTES
            } else {
                MIN_BYTES
            }
    }

    /// The ways of the next call: of `traffic`, whose work buffer holds `bytes`, a collective
    /// or not (point to point), in which this rank receives data or not (`reads`). Calls
    /// [`Chooser::times`] (from [`MIN_BYTES`], or [`TOGETHER_MIN_BYTES`]) are timed: an
    /// exchange ([`Traffic::Exchange`], [`Traffic::ReducingExchange`]) on every rank, for its
    /// own writes; a one-way call on the ranks that read in it, for the writes they ask for. The
    /// rest go through the caches.
    ///
    /// Collectives are numbered by this chooser, in the order it is asked (so every rank of the
    /// group numbers the same call alike: they all run it on the same engine): the numbers
    /// [`Wishes`] are published for, which count only the group's calls over its links.
    pub fn choose(
        &mut self,
        traffic: Traffic,
        bytes: usize,
        collective: bool,
        reads: bool,
    ) -> Choice {
        let mut choice = Choice {
            crossing: Crossing::Cached,
            ask: None,
            publish: None,
            ticket: None,
            call: 0,
            way: Crossing::Cached,
        };
        if let CrossingPolicy::Fixed(c) = self.policy {
            choice.crossing = c;
            return choice;
        }
        let code = match traffic {
            _ if !collective => return choice,
            Traffic::Exchange => EXCHANGE,
            Traffic::ReducingExchange => REDUCING_EXCHANGE,
            Traffic::OneWay if self.together => ONE_WAY_TOGETHER,
            Traffic::ReducingOneWay if self.together => REDUCING_ONE_WAY_TOGETHER,
            Traffic::OneWay => ONE_WAY,
            Traffic::ReducingOneWay => REDUCING_ONE_WAY,
            // Only point-to-point calls are eager.
            Traffic::Eager { .. } => return choice,
        };
        let seq = self.collectives;
        self.collectives += 1;
        if self.times(bytes) {
            self.choose_timed(&mut choice, code, bytes, seq, reads);
        }
        choice.publish = self.wishes_after(seq);
        choice
    }

    fn choose_timed(&mut self, choice: &mut Choice, code: u8, bytes: usize, seq: u64, reads: bool) {
        let log2 = bytes.ilog2() as u8;
        let one_way = one_way(code);
        if one_way {
            let bit = wish_bit(code, log2);
            choice.ask = Some((seq, bit));
            if !reads {
                return;
            }
            choice.way = way_in(self.published[(seq % 2) as usize], bit);
        }
        let i = self.class(code, log2, bytes);
        let class = &mut self.classes[i];
        if !one_way {
            choice.crossing = class.way_of(class.calls);
            choice.way = choice.crossing;
        }
        choice.ticket = Some(i);
        choice.call = class.calls;
        class.calls += 1;
    }

    /// The index of the class of `code` and `log2`, made if new.
    fn class(&mut self, code: u8, log2: u8, bytes: usize) -> usize {
        match self
            .classes
            .iter()
            .position(|c| (c.code, c.log2) == (code, log2))
        {
            Some(i) => i,
            None => {
                let mut class = Class::new(code, log2, bytes, self.rank, self.together);
                class.kept = self.followed(code, log2);
                self.classes.push(class);
                self.classes.len() - 1
            }
        }
    }

    /// The way a new class of `code` and `log2` starts with: the way kept by the largest smaller
    /// class of its kind of at least [`FOLLOW_MIN`] bytes, or through the caches.
    fn followed(&self, code: u8, log2: u8) -> Crossing {
        self.classes
            .iter()
            .filter(|c| c.code == code && c.log2 < log2 && 1usize << c.log2 >= FOLLOW_MIN)
            .max_by_key(|c| c.log2)
            .map_or(Crossing::Cached, |c| c.kept)
    }

    /// This rank's wishes for call `seq + 1`, if they differ from what its peers hold for it: for
    /// each one-way class, the way its next call is asked to go (its `calls` already count this
    /// one, if this one is of the class).
    fn wishes_after(&mut self, seq: u64) -> Option<(u64, u64)> {
        let wishes = self
            .classes
            .iter()
            .filter(|c| one_way(c.code) && c.way_of(c.calls) == Crossing::Streamed)
            .fold(0u64, |w, c| w | 1 << wish_bit(c.code, c.log2));
        let next = seq.wrapping_add(1);
        let slot = &mut self.published[(next % 2) as usize];
        (*slot != wishes).then(|| {
            *slot = wishes;
            (next, wishes)
        })
    }

    /// Reports that the call `choice` was made for took `elapsed` (a call that failed is not
    /// reported). Calls are reported in the order they were chosen, at most a call late.
    pub fn finish(&mut self, choice: Choice, elapsed: Duration) {
        if let Some(class) = choice.ticket.and_then(|i| self.classes.get_mut(i)) {
            class.record(choice.call, choice.way, elapsed.as_secs_f64());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    /// Runs `calls` calls of 64 KiB all-reduce, each taking `time(crossing)`; returns the ways.
    fn run(
        ch: &mut Chooser,
        calls: usize,
        mut time: impl FnMut(Crossing) -> Duration,
    ) -> Vec<Crossing> {
        (0..calls)
            .map(|_| {
                let c = ch.choose(Traffic::ReducingExchange, 64 << 10, true, true);
                ch.finish(c, time(c.crossing));
                c.crossing
            })
            .collect()
    }

    /// Two ranks choosing as the node board's do (`executor::flat::BoardCrossing`): each call's
    /// time is `time(rank 0's way, rank 1's way)`, the slowest rank's, reported to both one call
    /// late (after the next call was chosen), each rank's chooser made as `rank`'s. Returns the
    /// ways of the last 100 of `calls` calls, rank 0's and rank 1's.
    fn run_board_pair(
        ranks: [usize; 2],
        calls: usize,
        time: impl Fn(Crossing, Crossing) -> Duration,
    ) -> Vec<(Crossing, Crossing)> {
        let mut ch = ranks.map(|r| Chooser::new(CrossingPolicy::Auto, r));
        let mut pending: Option<([Choice; 2], Duration)> = None;
        let mut ways = Vec::new();
        for _ in 0..calls {
            let now = [0, 1].map(|r| ch[r].choose(Traffic::ReducingExchange, 16 << 10, true, true));
            if let Some((before, took)) = pending.take() {
                (0..2).for_each(|r| ch[r].finish(before[r], took));
            }
            let (a, b) = (now[0].crossing, now[1].crossing);
            pending = Some((now, time(a, b)));
            ways.push((a, b));
        }
        ways.split_off(calls - 100)
    }

    #[test]
    fn trials_that_lose_far_come_further_apart_where_every_rank_weighs_the_same_times() {
        use Crossing::{Cached, Streamed};
        let streamed = |mut ch: Chooser, streamed_us: u32| {
            run(&mut ch, 1100, |c| {
                US * if c == Streamed { streamed_us } else { 3 }
            })
            .iter()
            .filter(|c| **c == Streamed)
            .count()
        };
        let policy = CrossingPolicy::Auto;
        // Trials at 16, 54, 124, 258 (the odd ranks' turn: rank 0 keeps its way), 520 and 1038
        // calls where they lose by less than twice (or where each rank weighs its own times); at
        // 16, 86 and 348 where they lose by more.
        let near = streamed(Chooser::together(policy), 5);
        let far = streamed(Chooser::together(policy), 9);
        let own_times = streamed(Chooser::new(policy, 0), 9);
        assert_eq!(near, 5 * TRIAL as usize);
        assert_eq!(own_times, near);
        assert_eq!(far, 3 * TRIAL as usize);
        // Still found when the state changes: the far trials do not stop.
        let mut ch = Chooser::together(policy);
        run(&mut ch, 1100, |c| US * if c == Streamed { 9 } else { 3 });
        let after = run(&mut ch, 3000, |c| US * if c == Cached { 9 } else { 3 });
        let late = after[1500..].iter().filter(|c| **c == Streamed).count();
        assert!(late >= 1500 - 2 * TRIAL as usize, "{late} of 1500 streamed");
    }

    #[test]
    fn board_ranks_weighing_the_slowest_time_choose_together() {
        use Crossing::{Cached, Streamed};
        // The slow state: streaming pays only when both ranks stream (each reads what the other
        // wrote); one rank alone gains nothing on the slowest rank's time.
        let slow = |a, b| {
            US * if (a, b) == (Streamed, Streamed) {
                5
            } else {
                10
            }
        };
        let ways = run_board_pair([0, 0], 400, slow);
        assert!(ways.iter().all(|(a, b)| a == b), "the ranks always agree");
        let streamed = ways.iter().filter(|w| w.0 == Streamed).count();
        assert!(
            streamed >= 95,
            "both stream in the slow state: {streamed} of 100"
        );
        // Choosers of ranks numbered apart (as the rings' are) try exchanges together too.
        let apart = run_board_pair([0, 1], 400, slow);
        let both = apart.iter().filter(|w| *w == &(Streamed, Streamed)).count();
        assert!(both >= 95, "both stream, numbered apart: {both} of 100");
        // The normal state: either rank streaming costs; they keep the caches.
        let normal = |a, b| US * if (a, b) == (Cached, Cached) { 3 } else { 6 };
        let ways = run_board_pair([0, 0], 400, normal);
        let cached = ways.iter().filter(|w| **w == (Cached, Cached)).count();
        assert!(
            cached >= 95,
            "both keep the caches in the normal state: {cached} of 100"
        );
    }

    /// Two ranks' [`Chooser::together`] choosers of a board broadcast of 64 KiB from rank 0, both
    /// told each call's slowest time a call late, which is `time(the root's way)`; the ways of
    /// both (the root's writes the part, the other's writes nothing) for the last 100 of `calls`.
    fn run_board_broadcast(
        calls: usize,
        time: impl Fn(Crossing) -> Duration,
    ) -> Vec<(Crossing, Crossing)> {
        let mut ch = [0, 1].map(|_| Chooser::together(CrossingPolicy::Auto));
        let mut pending: Option<([Choice; 2], Duration)> = None;
        let mut ways = Vec::new();
        for _ in 0..calls {
            let now = [0, 1].map(|r| ch[r].choose(Traffic::OneWay, 64 << 10, true, r == 1));
            assert!(
                now.iter().all(|c| c.ask.is_none() && c.publish.is_none()),
                "no wishes"
            );
            if let Some((before, took)) = pending.take() {
                (0..2).for_each(|r| ch[r].finish(before[r], took));
            }
            pending = Some((now, time(now[0].crossing)));
            ways.push((now[0].crossing, now[1].crossing));
        }
        ways.split_off(calls - 100)
    }

    #[test]
    fn board_one_way_calls_weighing_the_slowest_time_choose_together_for_the_writer() {
        use Crossing::{Cached, Streamed};
        // The slow state: the receiver reads the root's part from memory faster than from the
        // root's cache, though the root's own write is slower (its time is not what is told).
        let ways = run_board_broadcast(400, slow_caches);
        assert!(ways.iter().all(|(a, b)| a == b), "the ranks always agree");
        let streamed = ways.iter().filter(|w| w.0 == Streamed).count();
        assert!(streamed >= 95, "the root streams: {streamed} of 100");
        // The normal state: the caches.
        let ways = run_board_broadcast(400, fast_caches);
        let cached = ways.iter().filter(|w| w.0 == Cached).count();
        assert!(cached >= 95, "the root keeps the caches: {cached} of 100");
    }

    /// Runs `calls` one-way calls of 1 MiB from `writer` (which does not read) to `reader`
    /// through a shared [`Wishes`] line, each taking `time(way written)` on the reader; returns
    /// the ways written.
    fn run_one_way(
        (writer, reader): (&mut Chooser, &mut Chooser),
        wishes: &Wishes,
        calls: u64,
        time: impl Fn(Crossing) -> Duration,
    ) -> Vec<Crossing> {
        (0..calls)
            .map(|_| {
                let r = reader.choose(Traffic::OneWay, 1 << 20, true, true);
                if let Some((next, w)) = r.publish {
                    wishes.publish(next, w);
                }
                let w = writer.choose(Traffic::OneWay, 1 << 20, true, false);
                let way = w.send_crossing(|seq, bit| wishes.asked(seq, bit));
                writer.finish(w, time(way));
                reader.finish(r, time(way));
                way
            })
            .collect()
    }

    fn no_wishes() -> Wishes {
        Wishes {
            by_parity: [AtomicU64::new(0), AtomicU64::new(0)],
        }
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
        assert_eq!(&trials[..6], &[16, 17, 54, 55, 124, 125], "first trials");
        // Periods double up to the longest (1024 calls of 64 KiB): few trials in 5000 calls.
        assert!(trials.len() <= 2 * 9, "{} trial calls", trials.len());
        assert_eq!(ways[4999], Crossing::Cached);
    }

    #[test]
    fn moves_to_memory_when_the_caches_get_slow_and_back_when_they_recover() {
        let mut ch = Chooser::default();
        run(&mut ch, 3000, fast_caches);
        // The state changes: within two of the longest periods (one of every four exchange
        // trials is another rank's turn alone) plus a trial, the chooser follows it.
        let ways = run(&mut ch, 2100, slow_caches);
        assert_eq!(ways[2099], Crossing::Streamed);
        let ways = run(&mut ch, 2100, fast_caches);
        assert_eq!(ways[2099], Crossing::Cached);
    }

    /// Two ranks of a ring exchange, each timing its own calls, which take `time(rank 0's way,
    /// rank 1's way)` on both, rank 1 starting with `rank1_kept`; the ways of the last 100 of
    /// `calls` calls.
    fn run_ring_pair(
        rank1_kept: Crossing,
        calls: usize,
        time: impl Fn(Crossing, Crossing) -> Duration,
    ) -> Vec<(Crossing, Crossing)> {
        let mut ch = [0, 1].map(|r| Chooser::new(CrossingPolicy::Auto, r));
        let mut ways = Vec::new();
        for i in 0..calls {
            let c = [0, 1].map(|r| ch[r].choose(Traffic::Exchange, 1 << 20, true, true));
            if i == 0 {
                // As if rank 1 had decided so before.
                ch[1].classes[0].kept = rank1_kept;
            }
            let t = time(c[0].crossing, c[1].crossing);
            (0..2).for_each(|r| ch[r].finish(c[r], t));
            ways.push((c[0].crossing, c[1].crossing));
        }
        ways.split_off(calls - 100)
    }

    #[test]
    fn exchange_ranks_try_together_and_two_that_decided_apart_come_together() {
        use Crossing::{Cached, Streamed};
        // One-way readers try in turn.
        assert_eq!(
            [stagger(0), stagger(1), stagger(2), stagger(4)],
            [0, 3, 6, 0]
        );
        let count = |ways: &[(Crossing, Crossing)], w| ways.iter().filter(|x| **x == w).count();
        // The slow state: streaming pays only when both ranks stream; they find it together.
        let slow = |a, b| {
            US * if (a, b) == (Streamed, Streamed) {
                5
            } else {
                10
            }
        };
        let ways = run_ring_pair(Cached, 400, slow);
        assert!(count(&ways, (Streamed, Streamed)) >= 95, "{ways:?}");
        // The normal state: they keep the caches.
        let normal = |a, b| US * if (a, b) == (Cached, Cached) { 3 } else { 6 };
        let ways = run_ring_pair(Cached, 400, normal);
        assert!(count(&ways, (Cached, Cached)) >= 95, "{ways:?}");
        // 9 µs with both through the caches, 19 with both past them, 14 with one each way:
        // rank 1 streams, rank 0 not. Trying together flips both (14 again); rank 0's turn
        // alone gives 19; rank 1's turn alone gives 9, and it wins.
        let apart = |a, b| match (a, b) {
            (Cached, Cached) => 9 * US,
            (Streamed, Streamed) => 19 * US,
            _ => 14 * US,
        };
        let ways = run_ring_pair(Streamed, 400, apart);
        assert_eq!(ways[99], (Cached, Cached));
        assert!(count(&ways, (Cached, Cached)) >= 95, "{ways:?}");
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
    fn small_calls_point_to_point_and_one_way_writers_go_through_the_caches_untimed() {
        let mut ch = Chooser::default();
        for _ in 0..100 {
            for (traffic, bytes, reads) in [
                (Traffic::Exchange, MIN_BYTES - 1, true),
                (Traffic::OneWay, MIN_BYTES - 1, true),
                (Traffic::Eager { seq: 1 }, 1 << 20, true),
                (Traffic::OneWay, 1 << 20, false),
                (Traffic::ReducingOneWay, 1 << 20, false),
            ] {
                let p2p = matches!(traffic, Traffic::Eager { .. });
                let c = ch.choose(traffic, bytes, !p2p, reads);
                assert_eq!(c.send_crossing(|_, _| Crossing::Streamed), {
                    if c.ask.is_some() {
                        Crossing::Streamed
                    } else {
                        Crossing::Cached
                    }
                });
                assert_eq!(c.ask.is_some(), bytes >= MIN_BYTES && !p2p, "{traffic:?}");
                assert!(!c.timed(), "{traffic:?}");
                assert_eq!(c.publish, None, "nothing to ask: {traffic:?}");
                ch.finish(c, 50 * US);
            }
        }
        assert!(ch.classes.is_empty());
    }

    #[test]
    fn a_chooser_that_decides_together_times_calls_from_8_kib_the_rings_from_16() {
        let (mut board, mut rings) = (Chooser::together(CrossingPolicy::Auto), Chooser::default());
        for bytes in [
            TOGETHER_MIN_BYTES - 1,
            TOGETHER_MIN_BYTES,
            12 << 10,
            MIN_BYTES,
        ] {
            assert_eq!(board.times(bytes), bytes >= TOGETHER_MIN_BYTES, "{bytes}");
            assert_eq!(rings.times(bytes), bytes >= MIN_BYTES, "{bytes}");
            let c = board.choose(Traffic::ReducingExchange, bytes, true, true);
            assert_eq!(c.timed(), bytes >= TOGETHER_MIN_BYTES, "{bytes}");
            let c = rings.choose(Traffic::ReducingExchange, bytes, true, true);
            assert_eq!(c.timed(), bytes >= MIN_BYTES, "{bytes}");
        }
    }

    #[test]
    fn a_reader_asks_its_writer_for_the_faster_way_and_keeps_it() {
        let (mut writer, mut reader) = (Chooser::new(CrossingPolicy::Auto, 0), Chooser::default());
        let wishes = no_wishes();
        let ways = run_one_way((&mut writer, &mut reader), &wishes, 3000, fast_caches);
        let trials: Vec<usize> = (ways.iter().enumerate())
            .filter(|(_, c)| **c == Crossing::Streamed)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(
            &trials[..4],
            &[16, 17, 54, 55],
            "the reader's trials, written so"
        );
        assert!(
            writer.classes.is_empty(),
            "a writer that never reads times nothing"
        );
        // The caches slow down: the reader asks for streamed writes, and back when they recover.
        let ways = run_one_way((&mut writer, &mut reader), &wishes, 1100, slow_caches);
        assert_eq!(ways[1099], Crossing::Streamed);
        let ways = run_one_way((&mut writer, &mut reader), &wishes, 1100, fast_caches);
        assert_eq!(ways[1099], Crossing::Cached);
        let streamed = ways[600..]
            .iter()
            .filter(|c| **c == Crossing::Streamed)
            .count();
        assert!(
            streamed <= 2 * TRIAL as usize,
            "{streamed} of the last 500 calls streamed"
        );
    }

    #[test]
    fn a_call_written_the_other_way_outside_a_trial_is_not_counted() {
        // A writer that read a wish meant for a trial late: its call is neither kept nor trial.
        let mut class = Class::new(ONE_WAY, 20, 1 << 20, 0, false);
        for call in 0..FIRST_PERIOD {
            let way = if call == 3 {
                Crossing::Streamed
            } else {
                Crossing::Cached
            };
            class.record(call, way, if call == 3 { 1e-6 } else { 1e-4 });
        }
        assert_eq!(class.recent.len(), RECENT);
        assert!(class.trial.is_empty());
        // A trial written the kept way (late again) does not switch either.
        let weighed = FIRST_PERIOD + TRIAL + RECENT as u64;
        for call in FIRST_PERIOD..weighed {
            class.record(call, Crossing::Cached, 1e-4);
        }
        assert_eq!(class.kept, Crossing::Cached);
        assert_eq!(class.next_trial, weighed + 2 * FIRST_PERIOD);
    }

    #[test]
    fn a_trial_right_after_slow_first_calls_is_weighed_against_the_calls_after_it_too() {
        // A benchmark's first calls (checked, caches cold) take 100 µs; then the caches win.
        let mut ch = Chooser::default();
        let mut calls = 0;
        let ways = run(&mut ch, 3000, |c| {
            calls += 1;
            match (calls <= FIRST_PERIOD, c) {
                (true, _) => 100 * US,
                (false, c) => fast_caches(c),
            }
        });
        assert_eq!(ch.classes[0].kept, Crossing::Cached);
        let streamed = ways.iter().filter(|c| **c == Crossing::Streamed).count();
        assert!(
            streamed <= 2 * 9,
            "{streamed} calls streamed: only the trials"
        );
    }

    #[test]
    fn calls_of_64_mib_try_the_other_way_within_a_benchmark_s_twenty_calls() {
        // psybench's 64 MiB job: 2 warm-up calls, 1 checked, 16 timed, in the slow state.
        let mut ch = Chooser::default();
        let ways: Vec<Crossing> = (0..19)
            .map(|_| {
                let c = ch.choose(Traffic::ReducingExchange, 64 << 20, true, true);
                ch.finish(c, slow_caches(c.crossing) * 1000);
                c.crossing
            })
            .collect();
        let streamed = ways.iter().filter(|c| **c == Crossing::Streamed).count();
        assert!(streamed >= 10, "{streamed} of 19 calls streamed: {ways:?}");
        // Tried at call 4 alone, weighed after call 8, kept from call 9 to the next trial (17).
        assert!(
            ways[9..17].iter().all(|c| *c == Crossing::Streamed),
            "{ways:?}"
        );
    }

    #[test]
    fn a_new_larger_class_starts_the_way_the_nearest_smaller_one_of_a_mib_or_more_keeps() {
        fn call(ch: &mut Chooser, bytes: usize) -> Crossing {
            let c = ch.choose(Traffic::ReducingExchange, bytes, true, true);
            ch.finish(c, slow_caches(c.crossing) * (bytes >> 14) as u32);
            c.crossing
        }
        let mut ch = Chooser::default();
        // 64 KiB calls learn the caches are slow; 1 MiB calls still start through them.
        for _ in 0..40 {
            call(&mut ch, 64 << 10);
        }
        assert_eq!(ch.classes[0].kept, Crossing::Streamed);
        assert_eq!(call(&mut ch, 1 << 20), Crossing::Cached);
        // 16 MiB calls learn it too; the first call of 64 MiB streams at once.
        for _ in 0..40 {
            call(&mut ch, 16 << 20);
        }
        assert_eq!(call(&mut ch, 64 << 20), Crossing::Streamed);
        // A smaller class is not led by a larger one, nor another kind by this one.
        assert_eq!(call(&mut ch, 4 << 20), Crossing::Cached);
        let other = ch.choose(Traffic::Exchange, 64 << 20, true, true);
        assert_eq!(other.crossing, Crossing::Cached);
    }

    #[test]
    fn wishes_are_one_bit_per_kind_and_size_class_by_call_parity() {
        assert_eq!(wish_bit(ONE_WAY, 14), 0);
        assert_eq!(wish_bit(ONE_WAY, 20), 6);
        assert_eq!(wish_bit(REDUCING_ONE_WAY, 14), 32);
        assert_eq!(wish_bit(REDUCING_ONE_WAY, 63), 63);
        let w = no_wishes();
        w.publish(7, 1 << 6);
        assert_eq!(w.asked(7, 6), Crossing::Streamed);
        assert_eq!(w.asked(8, 6), Crossing::Cached, "the other parity's call");
        assert_eq!(w.asked(9, 5), Crossing::Cached, "another class");
        assert_eq!(w.asked(9, 6), Crossing::Streamed);
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
                let c = ch.choose(traffic, bytes, true, true);
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
        assert_eq!(first_period(1 << 20), FIRST_PERIOD);
        assert_eq!(first_period(4 << 20), FIRST_PERIOD);
        assert_eq!(first_period(8 << 20), 8);
        assert_eq!(first_period(16 << 20), 4);
        assert_eq!(first_period(64 << 20), 4);
        assert_eq!(first_period(1 << 30), RECENT as u64);
        assert_eq!(trial_calls(16 << 20), TRIAL);
        assert_eq!(trial_calls(64 << 20), 1);
    }
}
