//! The training loop, once for both uses: data-parallel over a [`Group`], and the single-process
//! reference `--check` compares it with (no group: the whole global batch on one rank, no
//! communication at all).

use crate::args::Config;
use crate::buckets::{self, Bucket};
use crate::data::{Dataset, CLASSES, FEATURES};
use crate::model::{self, Scratch, Shape, BACKWARD_ORDER};
use crate::rng::Rng;
use crate::{Context, Error};
use psyne::schedule::chunk_span;
use psyne::Communicator;
use psyne::{Group, ReduceOp, Work};
use std::fmt;
use std::time::{Duration, Instant};

/// What one epoch did, over all ranks (as rank 0 reports it).
#[derive(Debug, Clone, PartialEq)]
pub struct EpochReport {
    /// 1-based.
    pub epoch: usize,
    /// Of `epochs`.
    pub epochs: usize,
    /// Mean cross-entropy over the epoch's training samples, each taken at the forward pass of
    /// its step (before that step's update).
    pub train_loss: f64,
    /// Fraction of training samples classified right at their forward pass.
    pub train_acc: f64,
    /// Fraction of the test set classified right after the epoch.
    pub test_acc: f64,
    /// Test samples classified right.
    pub test_correct: usize,
    /// Test samples.
    pub test_samples: usize,
    /// Steps in the epoch.
    pub steps: usize,
    /// Milliseconds per step spent computing (forward, backward, update), mean over ranks.
    pub compute_ms: f64,
    /// Milliseconds per step spent blocked on communication (starting and waiting for
    /// all-reduces; overlapped time is not counted), mean over ranks.
    pub comm_ms: f64,
    /// Milliseconds per step of the slowest rank (compute plus communication).
    pub slowest_ms: f64,
    /// Wall time of the epoch on rank 0, seconds (steps, test evaluation and the gather of
    /// metrics).
    pub seconds: f64,
}

impl fmt::Display for EpochReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self.epochs.to_string().len();
        write!(
            f,
            "epoch {:>width$}/{}  train loss {:.4}  train acc {:6.2}%  test acc {:6.2}%  \
             step {:.3} ms = compute {:.3} + comm {:.3} ms (slowest rank {:.3} ms)  epoch {:.3} s",
            self.epoch,
            self.epochs,
            self.train_loss,
            100.0 * self.train_acc,
            100.0 * self.test_acc,
            self.compute_ms + self.comm_ms,
            self.compute_ms,
            self.comm_ms,
            self.slowest_ms,
            self.seconds,
        )
    }
}

/// The result of training on one rank.
#[derive(Clone)]
pub struct Outcome {
    /// This rank's final parameters.
    pub params: Vec<f32>,
    /// One report per epoch (every rank has them; `on_epoch` sees them on rank 0).
    pub epochs: Vec<EpochReport>,
    /// How many times `--elastic` shrank the group after losing ranks.
    pub shrinks: usize,
    /// The group training ended in: the one it started with, or the survivors' after a shrink.
    pub group: Option<Group>,
}

/// The model's shape for `cfg`.
pub fn shape(cfg: &Config) -> Shape {
    Shape {
        inputs: FEATURES,
        hidden: cfg.hidden,
        classes: CLASSES,
    }
}

/// The gradient buckets for `cfg`, in the order they complete.
pub fn bucket_plan(cfg: &Config) -> Vec<Bucket> {
    let t = shape(cfg).tensors();
    let order: Vec<_> = BACKWARD_ORDER
        .iter()
        .map(|&i| (i, t[i].range.clone()))
        .collect();
    buckets::plan(&order, cfg.bucket_bytes)
}

/// Per-rank counters of one epoch, gathered to rank 0 as `f64`s in this order.
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    loss: f64,
    correct: f64,
    samples: f64,
    test_correct: f64,
    test_samples: f64,
    compute: f64,
    comm: f64,
    steps: f64,
}

const COUNTERS: usize = 8;

impl Counters {
    fn to_array(self) -> [f64; COUNTERS] {
        [
            self.loss,
            self.correct,
            self.samples,
            self.test_correct,
            self.test_samples,
            self.compute,
            self.comm,
            self.steps,
        ]
    }

    fn from_slice(a: &[f64]) -> Counters {
        Counters {
            loss: a[0],
            correct: a[1],
            samples: a[2],
            test_correct: a[3],
            test_samples: a[4],
            compute: a[5],
            comm: a[6],
            steps: a[7],
        }
    }
}

/// Summarises every rank's counters (one [`Counters`] per rank) as rank 0 reports them.
fn report(epoch: usize, epochs: usize, ranks: &[Counters], seconds: f64) -> EpochReport {
    let sum = |f: fn(&Counters) -> f64| ranks.iter().map(f).sum::<f64>();
    let per_step = |c: &Counters, v: f64| if c.steps > 0.0 { v / c.steps } else { 0.0 };
    let n = ranks.len().max(1) as f64;
    let samples = sum(|c| c.samples).max(1.0);
    let test_samples = sum(|c| c.test_samples);
    EpochReport {
        epoch,
        epochs,
        train_loss: sum(|c| c.loss) / samples,
        train_acc: sum(|c| c.correct) / samples,
        test_acc: sum(|c| c.test_correct) / test_samples.max(1.0),
        test_correct: sum(|c| c.test_correct) as usize,
        test_samples: test_samples as usize,
        steps: ranks.first().map_or(0, |c| c.steps as usize),
        compute_ms: 1e3 * ranks.iter().map(|c| per_step(c, c.compute)).sum::<f64>() / n,
        comm_ms: 1e3 * ranks.iter().map(|c| per_step(c, c.comm)).sum::<f64>() / n,
        slowest_ms: 1e3
            * ranks
                .iter()
                .map(|c| per_step(c, c.compute + c.comm))
                .fold(0.0, f64::max),
        seconds,
    }
}

/// The gradient all-reduces of one step: which bucket is complete, which all-reduces are in
/// flight, and the buffers they travel in (reused from step to step).
struct Exchange<'a> {
    group: &'a Group,
    plan: &'a [Bucket],
    /// The bucket of each tensor.
    bucket_of: [usize; 4],
    /// Tensors still to come, per bucket.
    left: Vec<usize>,
    overlap: bool,
    /// One buffer per bucket (empty while lent to an all-reduce in flight).
    bufs: Vec<Vec<f32>>,
    in_flight: Vec<(usize, Work<Vec<f32>>)>,
    /// Time blocked in communication this step.
    blocked: Duration,
    /// For error messages.
    epoch: usize,
    step: usize,
}

impl<'a> Exchange<'a> {
    fn new(group: &'a Group, plan: &'a [Bucket], overlap: bool) -> Exchange<'a> {
        let mut bucket_of = [0; 4];
        for (b, bucket) in plan.iter().enumerate() {
            for &t in &bucket.tensors {
                bucket_of[t] = b;
            }
        }
        Exchange {
            group,
            plan,
            bucket_of,
            left: vec![0; plan.len()],
            overlap,
            bufs: plan
                .iter()
                .map(|b| Vec::with_capacity(b.range.len()))
                .collect(),
            in_flight: Vec::new(),
            blocked: Duration::ZERO,
            epoch: 0,
            step: 0,
        }
    }

    fn start_step(&mut self, epoch: usize, step: usize) {
        for (left, bucket) in self.left.iter_mut().zip(self.plan) {
            *left = bucket.tensors.len();
        }
        self.blocked = Duration::ZERO;
        (self.epoch, self.step) = (epoch, step);
    }

    fn what(&self, b: usize) -> String {
        format!(
            "all-reducing gradient bucket {} of {} ({} B) in epoch {}, step {}",
            b + 1,
            self.plan.len(),
            self.plan[b].bytes(),
            self.epoch,
            self.step + 1
        )
    }

    /// Backpropagation finished tensor `t` (`grads` holds it): once its bucket is complete, start
    /// the bucket's all-reduce, and with overlap off wait for it right away.
    fn tensor_ready(&mut self, t: usize, grads: &[f32]) -> Result<(), Error> {
        let b = self.bucket_of[t];
        self.left[b] -= 1;
        if self.left[b] > 0 {
            return Ok(());
        }
        let start = Instant::now();
        let mut buf = std::mem::take(&mut self.bufs[b]);
        buf.clear();
        buf.extend_from_slice(&grads[self.plan[b].range.clone()]);
        let work = self.group.all_reduce_async(buf, ReduceOp::Sum);
        if self.overlap {
            self.in_flight.push((b, work));
        } else {
            // The same call, waited for at once, so that the comparison with overlap measures
            // the overlap alone (psyne's blocking all_reduce takes another path).
            self.bufs[b] = work.wait().ctx(|| self.what(b))?;
        }
        self.blocked += start.elapsed();
        Ok(())
    }

    /// Waits for every all-reduce in flight and writes the summed gradients into `grads`.
    fn finish(&mut self, grads: &mut [f32]) -> Result<(), Error> {
        let start = Instant::now();
        for (b, work) in std::mem::take(&mut self.in_flight) {
            let buf = work.wait().ctx(|| self.what(b))?;
            self.bufs[b] = buf;
        }
        for (bucket, buf) in self.plan.iter().zip(&self.bufs) {
            grads[bucket.range.clone()].copy_from_slice(buf);
        }
        self.blocked += start.elapsed();
        Ok(())
    }
}

/// Trains as `cfg` says on `train`, scoring `test` after every epoch: data-parallel over `group`,
/// or, without one, in this process alone with no communication (the `--check` reference).
/// `on_epoch` sees each epoch's report on rank 0 as soon as it is known.
pub fn train(
    cfg: &Config,
    train: &Dataset,
    test: &Dataset,
    group: Option<&Group>,
    mut on_epoch: impl FnMut(&EpochReport),
) -> Result<Outcome, Error> {
    train_from(
        cfg,
        (train, test),
        group,
        Resume::default(),
        |reports, _| {
            if let Some(r) = reports.last() {
                on_epoch(r);
            }
            Ok(())
        },
    )
}

/// Where a run starts: from the beginning, or after the epochs of a checkpoint.
#[derive(Debug, Clone, Default)]
pub struct Resume {
    /// Epochs already done (every rank knows this).
    pub epochs_done: usize,
    /// The parameters after them (rank 0; the others get them from its broadcast).
    pub params: Option<Vec<f32>>,
    /// Their reports (rank 0).
    pub reports: Vec<EpochReport>,
}

/// [`train`] from `resume`'s state, on `(train, test)`. After each epoch, `on_epoch` gets (on rank 0)
/// every report so far, the new one last, and the parameters: what a checkpoint keeps.
///
/// With `cfg.elastic`, a collective that fails because a rank is gone does not end the run: the
/// survivors revoke the group, shrink it ([`Group::shrink`]), take the new rank 0's parameters
/// and place in the run (a survivor may be a step ahead of another), and go on with the same
/// global batch split over the ranks left. [`Outcome::group`] is then the group they finished in.
pub fn train_from(
    cfg: &Config,
    data: (&Dataset, &Dataset),
    group: Option<&Group>,
    resume: Resume,
    mut on_epoch: impl FnMut(&[EpochReport], &[f32]) -> Result<(), Error>,
) -> Result<Outcome, Error> {
    let mut group = group.cloned();
    let rank = group.as_ref().map_or(0, Group::rank);
    let shape = shape(cfg);
    let mut params = match (rank, resume.params) {
        (0, Some(saved)) if saved.len() == shape.len() => saved,
        (0, Some(saved)) => {
            return Err(Error::Data(format!(
                "the checkpoint holds {} parameters where this model has {}",
                saved.len(),
                shape.len()
            )))
        }
        (0, None) => shape.init(&mut Rng::stream(cfg.seed, u64::MAX)),
        _ => vec![0.0; shape.len()],
    };
    if let Some(g) = &group {
        g.broadcast(&mut params, 0)
            .ctx(|| "broadcasting the initial weights from rank 0".to_string())?;
    }
    let mut at = Position {
        epoch: resume.epochs_done + 1,
        step: 0,
        since_sync: 0,
        mine: Counters::default(),
        epoch_start: Instant::now(),
    };
    let mut reports = resume.reports;
    let mut work = Scratchpad::new(shape.len(), data.0.len());
    let mut shrinks = 0;
    while at.epoch <= cfg.epochs {
        let done = run_epoch(cfg, data, group.as_ref(), &mut params, &mut at, &mut work);
        let failure = match done {
            Ok(ranks) => {
                let r = report(
                    at.epoch,
                    cfg.epochs,
                    &ranks,
                    at.epoch_start.elapsed().as_secs_f64(),
                );
                reports.push(r);
                if group.as_ref().map_or(0, Group::rank) == 0 {
                    on_epoch(&reports, &params)?;
                }
                at.next_epoch();
                continue;
            }
            Err(e) => e,
        };
        match (&group, cfg.elastic && lost_a_rank(&failure)) {
            (Some(g), true) => {
                group = Some(recover(g, &failure, &mut params, &mut at)?);
                shrinks += 1;
            }
            _ => return Err(failure),
        }
    }
    Ok(Outcome {
        params,
        epochs: reports,
        shrinks,
        group,
    })
}

/// Where a run is, and what this rank has counted of the current epoch.
struct Position {
    /// 1-based.
    epoch: usize,
    /// The next step of the epoch, 0-based.
    step: usize,
    /// Steps since the parameters were last averaged (local SGD).
    since_sync: usize,
    mine: Counters,
    epoch_start: Instant,
}

impl Position {
    fn next_epoch(&mut self) {
        self.epoch += 1;
        self.step = 0;
        self.mine = Counters::default();
        self.epoch_start = Instant::now();
    }
}

/// Memory the steps reuse.
struct Scratchpad {
    grads: Vec<f32>,
    scratch: Scratch,
    x: Vec<f32>,
    y: Vec<u8>,
    order: Vec<usize>,
}

impl Scratchpad {
    fn new(params: usize, samples: usize) -> Scratchpad {
        Scratchpad {
            grads: vec![0.0; params],
            scratch: Scratch::default(),
            x: Vec::new(),
            y: Vec::new(),
            order: (0..samples).collect(),
        }
    }
}

/// Whether `e` is a collective that failed because a rank is gone (or aborted the group for
/// that reason): what `--elastic` recovers from.
fn lost_a_rank(e: &Error) -> bool {
    use psyne::ErrorKind as K;
    matches!(e, Error::Psyne { source, .. }
        if matches!(source.kind(), K::PeerLost | K::Aborted | K::Revoked | K::Timeout))
}

/// `--elastic` after `failure`: revokes `old`, shrinks it, and makes every survivor take the new
/// rank 0's parameters and place in the run. Returns the new group.
fn recover(
    old: &Group,
    failure: &Error,
    params: &mut [f32],
    at: &mut Position,
) -> Result<Group, Error> {
    let began = Instant::now();
    let _ = old.revoke();
    let g = old
        .shrink()
        .ctx(|| format!("recovering from a lost rank ({failure})"))?;
    let mut place = [at.epoch as u64, at.step as u64, at.since_sync as u64];
    g.broadcast(&mut place, 0)
        .ctx(|| "recovering: sharing the new rank 0's place in the run".to_string())?;
    g.broadcast(params, 0)
        .ctx(|| "recovering: sharing the new rank 0's parameters".to_string())?;
    if place[0] as usize != at.epoch {
        at.mine = Counters::default();
        at.epoch_start = Instant::now();
    }
    (at.epoch, at.step, at.since_sync) = (place[0] as usize, place[1] as usize, place[2] as usize);
    if g.rank() == 0 {
        println!(
            "train: lost {} rank{} ({failure}); {} go on from epoch {}, step {} (revoke and shrink took {:.1} ms)",
            old.size() - g.size(),
            if old.size() - g.size() == 1 { "" } else { "s" },
            g.size(),
            at.epoch,
            at.step + 1,
            began.elapsed().as_secs_f64() * 1e3
        );
    }
    Ok(g)
}

/// Runs the rest of epoch `at.epoch` from step `at.step` over `group` (or alone), then scores the
/// test set and returns every rank's counters (all-gathered: every rank keeps the reports, so a
/// survivor that becomes rank 0 after a shrink has them).
fn run_epoch(
    cfg: &Config,
    (train, test): (&Dataset, &Dataset),
    group: Option<&Group>,
    params: &mut [f32],
    at: &mut Position,
    w: &mut Scratchpad,
) -> Result<Vec<Counters>, Error> {
    let (rank, size) = group.map_or((0, 1), |g| (g.rank(), g.size()));
    let shape = shape(cfg);
    let plan = bucket_plan(cfg);
    let local_sgd = cfg.sync_every > 1;
    let mut exchange = group.map(|g| Exchange::new(g, &plan, cfg.overlap));
    let steps = train.len().div_ceil(cfg.batch);
    let epoch = at.epoch;
    w.order.iter_mut().enumerate().for_each(|(i, o)| *o = i);
    Rng::stream(cfg.seed, epoch as u64).shuffle(&mut w.order);
    while at.step < steps {
        let step = at.step;
        let batch = &w.order[step * cfg.batch..((step + 1) * cfg.batch).min(train.len())];
        let lr = learning_rate(cfg.lr, (epoch - 1) * steps + step, cfg.epochs * steps);
        let shard = &batch[chunk_span(batch.len(), size, rank)];
        train.gather_into(shard, &mut w.x, &mut w.y);
        let start = Instant::now();
        let mut blocked = Duration::ZERO;
        let (x, y, grads, scratch) = (&w.x, &w.y, &mut w.grads, &mut w.scratch);
        let score = model::forward(&shape, params, x, y, scratch);
        match (&mut exchange, local_sgd) {
            (Some(ex), false) => {
                ex.start_step(epoch, step);
                model::backward(&shape, params, x, y, scratch, grads, &mut |t, g| {
                    ex.tensor_ready(t, g)
                })?;
                ex.finish(grads)?;
                blocked = ex.blocked;
                model::sgd(params, grads, lr / batch.len() as f32);
            }
            _ => {
                // One process on the whole batch, or local SGD on this rank's shard.
                model::backward(&shape, params, x, y, scratch, grads, &mut |_, _| {
                    Ok::<(), Error>(())
                })?;
                if !y.is_empty() {
                    model::sgd(params, grads, lr / y.len() as f32);
                }
            }
        }
        if let (Some(g), true) = (group, local_sgd) {
            blocked += average_if_due(cfg, g, params, at, steps)?;
        }
        let took = start.elapsed();
        let mine = &mut at.mine;
        mine.loss += score.loss;
        mine.correct += score.correct as f64;
        mine.samples += y.len() as f64;
        mine.compute += took.saturating_sub(blocked).as_secs_f64();
        mine.comm += blocked.as_secs_f64();
        mine.steps += 1.0;
        at.step += 1;
    }
    let span = chunk_span(test.len(), size, rank);
    let mut mine = at.mine;
    mine.test_samples = span.len() as f64;
    mine.test_correct = model::evaluate(&shape, params, test, span, &mut w.scratch).correct as f64;
    gather_counters(group, mine, epoch)
}

/// Local SGD: counts the step just taken and, every `sync_every` steps and after the last one,
/// averages the parameters over the group; returns the time that took.
fn average_if_due(
    cfg: &Config,
    g: &Group,
    params: &mut [f32],
    at: &mut Position,
    steps: usize,
) -> Result<Duration, Error> {
    let (epoch, step) = (at.epoch, at.step);
    at.since_sync += 1;
    let last = epoch == cfg.epochs && step + 1 == steps;
    if at.since_sync != cfg.sync_every && !last {
        return Ok(Duration::ZERO);
    }
    let t = Instant::now();
    g.all_reduce(params, ReduceOp::Avg).ctx(|| {
        format!(
            "averaging the parameters (local SGD) in epoch {epoch}, step {}",
            step + 1
        )
    })?;
    at.since_sync = 0;
    Ok(t.elapsed())
}

/// Every rank's counters of an epoch, in rank order.
fn gather_counters(
    group: Option<&Group>,
    mine: Counters,
    epoch: usize,
) -> Result<Vec<Counters>, Error> {
    let all = match group {
        Some(g) => g
            .all_gather(&mine.to_array())
            .ctx(|| format!("all-gathering the metrics of epoch {epoch}"))?,
        None => mine.to_array().to_vec(),
    };
    Ok(all
        .chunks_exact(COUNTERS)
        .map(Counters::from_slice)
        .collect())
}

/// The learning rate of step `t` (0-based) of `total`: `peak` decayed to 0 along a half cosine,
/// which lets plain SGD settle instead of hopping around the minimum at the end.
pub fn learning_rate(peak: f32, t: usize, total: usize) -> f32 {
    let progress = t as f64 / total.max(1) as f64;
    (f64::from(peak) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())) as f32
}

/// How many parameters differ in their bits between ranks: every rank all-reduces the bit
/// patterns (as `u32`) with Min and with Max; where the two differ, some ranks disagree. Every
/// rank gets the same answer.
pub fn differing_parameters(group: &Group, params: &[f32]) -> Result<usize, Error> {
    let bits: Vec<u32> = params.iter().map(|p| p.to_bits()).collect();
    let mut lo = bits.clone();
    let mut hi = bits;
    group
        .all_reduce(&mut lo, ReduceOp::Min)
        .ctx(|| "check: all-reducing the parameter bits (Min)".to_string())?;
    group
        .all_reduce(&mut hi, ReduceOp::Max)
        .ctx(|| "check: all-reducing the parameter bits (Max)".to_string())?;
    Ok(lo.iter().zip(&hi).filter(|(a, b)| a != b).count())
}

/// The largest relative difference between two loss curves and the 1-based epoch where it is;
/// infinite when a value is not finite or the lengths differ.
pub fn curve_difference(got: &[f64], want: &[f64]) -> (f64, usize) {
    if got.len() != want.len() {
        return (f64::INFINITY, 0);
    }
    let mut worst = (0.0f64, 0);
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        let rel = if a.is_finite() && b.is_finite() {
            (a - b).abs() / b.abs().max(1e-12)
        } else {
            f64::INFINITY
        };
        if rel > worst.0 || worst.1 == 0 {
            worst = (rel, i + 1);
        }
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::Args;
    use clap::Parser;
    use psyne::GroupOptions;
    use psyne::MemoryStore;
    use psyne::TransportPolicy;
    use std::sync::Arc;

    fn config(args: &[&str]) -> Config {
        let mut all = vec!["train"];
        all.extend_from_slice(args);
        Args::try_parse_from(all).unwrap().validate().unwrap()
    }

    fn data() -> (Dataset, Dataset) {
        crate::data::digits().unwrap()
    }

    /// Runs `f` on `size` threads, one rank each, over TCP on loopback.
    fn ranks<R: Send + 'static>(
        size: usize,
        f: impl Fn(Group) -> R + Send + Sync + 'static,
    ) -> Vec<R> {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let prefix = format!(
            "train-test{}",
            N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        );
        let store = Arc::new(MemoryStore::new());
        let f = Arc::new(f);
        let threads: Vec<_> = (0..size)
            .map(|rank| {
                let (store, f, prefix) = (store.clone(), f.clone(), prefix.clone());
                std::thread::spawn(move || {
                    let mut opts = GroupOptions::local(rank, size, prefix);
                    opts.tunables.transport.policy = TransportPolicy::Tcp;
                    f(Group::builder(opts).store(&*store).build().unwrap())
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    fn losses(o: &Outcome) -> Vec<f64> {
        o.epochs.iter().map(|r| r.train_loss).collect()
    }

    #[test]
    fn the_reference_learns_the_digits() {
        let (tr, te) = data();
        let cfg = config(&["--epochs", "5"]);
        let mut seen = 0;
        let o = train(&cfg, &tr, &te, None, |_| seen += 1).unwrap();
        assert_eq!(seen, 5);
        let last = o.epochs.last().unwrap();
        assert!(last.test_acc > 0.85, "{last}");
        assert!(last.train_loss < o.epochs[0].train_loss);
        assert_eq!((last.steps, last.test_samples), (24, 297));
    }

    #[test]
    fn one_rank_through_the_library_equals_the_reference_bit_for_bit() {
        let (tr, te) = data();
        let cfg = config(&["--epochs", "2", "--bucket-mb", "0"]);
        let reference = train(&cfg, &tr, &te, None, |_| {}).unwrap();
        let alone = train(&cfg, &tr, &te, Some(&Group::alone()), |_| {}).unwrap();
        assert_eq!(alone.params, reference.params);
        assert_eq!(losses(&alone), losses(&reference));
    }

    #[test]
    fn three_ranks_agree_bitwise_and_match_the_reference() {
        for flags in [
            &["--epochs", "2", "--hidden", "32"][..],
            &["--epochs", "2", "--hidden", "32", "--bucket-mb", "0"],
            &[
                "--epochs",
                "2",
                "--hidden",
                "32",
                "--bucket-mb",
                "0.004",
                "--no-overlap",
            ],
            &["--epochs", "1", "--hidden", "32", "--batch", "2"],
        ] {
            let cfg = config(flags);
            let (tr, te) = data();
            let reference = train(&cfg, &tr, &te, None, |_| {}).unwrap();
            let c = cfg.clone();
            let results = ranks(3, move |g| {
                let (tr, te) = data();
                let o = train(&c, &tr, &te, Some(&g), |_| {}).unwrap();
                let differing = differing_parameters(&g, &o.params).unwrap();
                (o, differing)
            });
            for (o, differing) in &results {
                assert_eq!(*differing, 0, "{flags:?}");
                assert_eq!(o.params, results[0].0.params, "{flags:?}");
            }
            let (worst, _) = curve_difference(&losses(&results[0].0), &losses(&reference));
            assert!(worst < crate::args::LOSS_RTOL, "{flags:?}: {worst}");
            // Every rank keeps the reports (a survivor of a shrink may become rank 0).
            assert_eq!(losses(&results[1].0), losses(&results[0].0), "{flags:?}");
        }
    }

    #[test]
    fn local_sgd_ends_with_identical_parameters_and_still_learns() {
        let cfg = config(&["--epochs", "3", "--sync-every", "4"]);
        let results = ranks(2, move |g| {
            let (tr, te) = data();
            let o = train(&cfg, &tr, &te, Some(&g), |_| {}).unwrap();
            (o.clone(), differing_parameters(&g, &o.params).unwrap())
        });
        assert_eq!(results[0].1, 0);
        assert_eq!(results[0].0.params, results[1].0.params);
        assert!(results[0].0.epochs[2].test_acc > 0.85);
    }

    #[test]
    fn the_learning_rate_decays_from_the_peak_to_zero() {
        assert_eq!(learning_rate(0.5, 0, 100), 0.5);
        assert!((learning_rate(0.5, 50, 100) - 0.25).abs() < 1e-6);
        assert!(learning_rate(0.5, 99, 100) < 1e-3);
        assert!((1..100).all(|t| learning_rate(0.5, t, 100) < learning_rate(0.5, t - 1, 100)));
    }

    #[test]
    fn curves_compare_relatively() {
        assert_eq!(curve_difference(&[1.0, 2.0], &[1.0, 2.0]), (0.0, 1));
        let (d, at) = curve_difference(&[1.0, 2.0002], &[1.0, 2.0]);
        assert!((d - 1e-4).abs() < 1e-9 && at == 2);
        assert!(curve_difference(&[f64::NAN], &[1.0]).0.is_infinite());
        assert!(curve_difference(&[1.0], &[1.0, 2.0]).0.is_infinite());
    }

    #[test]
    fn reports_average_time_and_sum_counts() {
        let a = Counters {
            loss: 3.0,
            correct: 2.0,
            samples: 4.0,
            test_correct: 1.0,
            test_samples: 2.0,
            compute: 0.2,
            comm: 0.1,
            steps: 2.0,
        };
        let b = Counters {
            compute: 0.4,
            comm: 0.0,
            ..a
        };
        let r = report(1, 3, &[a, b], 0.5);
        assert_eq!((r.train_loss, r.train_acc, r.test_acc), (0.75, 0.5, 0.5));
        assert!((r.compute_ms - 150.0).abs() < 1e-9 && (r.comm_ms - 25.0).abs() < 1e-9);
        assert!((r.slowest_ms - 200.0).abs() < 1e-9);
        let line = r.to_string();
        assert!(
            line.starts_with("epoch 1/3  train loss 0.7500  train acc  50.00%  test acc  50.00%"),
            "{line}"
        );
    }
}
