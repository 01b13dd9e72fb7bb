//! # train
//!
//! Data-parallel training with psyne, the way `psyrun -n 32 train` runs it: a multi-layer
//! perceptron (`64 -> hidden -> 10`, ReLU, softmax cross-entropy, plain `f32` SGD) learns the
//! handwritten digits that scikit-learn ships (embedded from `data/digits.csv`; see
//! `data/README.md` for its source and licence).
//!
//! - Rank 0 initialises the weights (seeded) and broadcasts them.
//! - Every step, each rank takes its even share of the global batch and backpropagates it layer by
//!   layer from the output. Gradients (sums over samples) are packed into buckets of `--bucket-mb`;
//!   each bucket's all-reduce (Sum) starts, non-blocking, as soon as its last tensor is done, while
//!   the rest of the backward pass runs. All are waited for before the update, which divides by the
//!   global batch size: the step is the one a single process would take on the whole batch.
//! - `--sync-every K > 1` is local SGD instead: each rank steps on its own shard and parameters are
//!   averaged every K steps and at the end.
//! - Per-epoch metrics are gathered to rank 0, which prints one line per epoch.
//! - `--checkpoint DIR` saves the state after every `--checkpoint-every` epochs (rank 0, atomically)
//!   and goes on from it when the run starts again, as `psyrun --max-restarts` does after a
//!   failure ([`checkpoint`]); the rest of the run is then the one an uninterrupted run makes.
//! - `--check` verifies afterwards that the parameters are bitwise identical on every rank (with a
//!   collective) and that the loss curve matches a single-process run ([`trainer::train`] without a
//!   group) within [`args::LOSS_RTOL`].
//!
//! Layers: [`data`] and [`rng`] (inputs), [`model`] (the maths, no communication), [`buckets`]
//! (pure planning), [`trainer`] (the loop and the collectives), [`args`] (the command line).

pub mod args;
pub mod buckets;
pub mod checkpoint;
pub mod data;
pub mod model;
pub mod rng;
pub mod trainer;

pub use args::{Args, Config};

use psyne::Communicator;
use std::time::Instant;

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad arguments (exit status 2).
    #[error("{0}")]
    Usage(String),
    /// A collective failed; `what` says which and where.
    #[error("{what}: {source}")]
    Psyne {
        /// What the program was doing.
        what: String,
        /// The library's error.
        #[source]
        source: psyne::Error,
    },
    /// The embedded data set is unreadable.
    #[error("{0}")]
    Data(String),
}

impl Error {
    /// The process exit status for this error: 2 for usage errors, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => 2,
            _ => 1,
        }
    }
}

/// Adds what the program was doing to a psyne error (the message is built only on failure).
pub(crate) trait Context<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T, Error>;
}

impl<T> Context<T> for psyne::Result<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T, Error> {
        self.map_err(|source| Error::Psyne {
            what: what(),
            source,
        })
    }
}

/// Joins the job (`psyne::init`), trains, prints (on rank 0), and with `--check` verifies.
/// `Ok(false)` means a check failed (exit status 1).
pub fn run(cfg: Config) -> Result<bool, Error> {
    let (train_set, test_set) = data::digits().map_err(Error::Data)?;
    let group = psyne::init().ctx(|| "joining the job (psyne::init)".into())?;
    let (rank, size) = (group.rank(), group.size());

    // Every rank must train the same model the same way.
    let fp = cfg.run_fingerprint();
    let mut fps = [fp, u64::MAX - fp];
    group
        .all_reduce(&mut fps, psyne::ReduceOp::Min)
        .ctx(|| "comparing the ranks' arguments".into())?;
    if fps[0] != u64::MAX - fps[1] {
        return Err(Error::Usage(format!(
            "rank {rank}: the ranks were started with different training arguments; start every rank with the same ones"
        )));
    }

    if rank == 0 {
        println!("{}", header(&cfg, &group, train_set.len(), test_set.len()));
    }
    let resume = resume_point(&cfg, &group)?;
    let resumed_epochs = resume.epochs_done;
    let start = Instant::now();
    let data = (&train_set, &test_set);
    let outcome = trainer::train_from(&cfg, data, Some(&group), resume, |reports, params| {
        let Some(r) = reports.last() else {
            return Ok(());
        };
        // Saved before it is printed: an epoch line on the screen means it is in the checkpoint.
        match &cfg.checkpoint {
            Some(dir) if r.epoch % cfg.checkpoint_every == 0 || r.epoch == cfg.epochs => {
                checkpoint::save(
                    dir,
                    &checkpoint::Checkpoint {
                        fingerprint: cfg.fingerprint(),
                        epochs_done: r.epoch,
                        params: params.to_vec(),
                        reports: reports.to_vec(),
                    },
                )?
            }
            _ => {}
        }
        if !cfg.quiet {
            println!("{r}");
        }
        Ok(())
    })?;
    let seconds = start.elapsed().as_secs_f64();
    // After --elastic lost ranks, the survivors' group is the job now.
    let group = outcome.group.clone().unwrap_or(group);
    if group.rank() == 0 {
        print_summary(&cfg, &outcome, resumed_epochs, seconds, size, group.size());
    }
    if !cfg.check {
        return Ok(true);
    }
    finish_checks(&cfg, &group, &outcome, data)
}

/// Rank 0's last line: epochs, ranks, time, final loss and accuracy.
fn print_summary(
    cfg: &Config,
    outcome: &trainer::Outcome,
    resumed_epochs: usize,
    seconds: f64,
    started_with: usize,
    size: usize,
) {
    if resumed_epochs == cfg.epochs {
        println!("train: every epoch was done already (the checkpoint holds all {}); nothing left to train", cfg.epochs);
    }
    let Some(last) = outcome.epochs.last() else {
        return;
    };
    let steps: usize = outcome
        .epochs
        .iter()
        .skip(resumed_epochs)
        .map(|r| r.steps)
        .sum();
    let lost = if size < started_with {
        format!(
            " (started on {started_with}; {} lost, {} shrink{})",
            started_with - size,
            outcome.shrinks,
            if outcome.shrinks == 1 { "" } else { "s" }
        )
    } else {
        String::new()
    };
    println!(
        "train: {} epochs on {size} rank{}{lost} in {seconds:.3} s ({:.3} ms per step); final train loss {:.4}, test accuracy {:.2}% ({}/{})",
        cfg.epochs,
        if size == 1 { "" } else { "s" },
        1e3 * seconds / steps.max(1) as f64,
        last.train_loss,
        100.0 * last.test_acc,
        last.test_correct,
        last.test_samples
    );
}

/// `--check`: the parameters bitwise identical on every rank of `group`, and (on rank 0) the loss
/// curve against a 1-rank run; every rank returns rank 0's verdict.
fn finish_checks(
    cfg: &Config,
    group: &psyne::Group,
    outcome: &trainer::Outcome,
    (train_set, test_set): (&data::Dataset, &data::Dataset),
) -> Result<bool, Error> {
    let (rank, size) = (group.rank(), group.size());
    let shape = trainer::shape(cfg);
    let differing = trainer::differing_parameters(group, &outcome.params)?;
    let identical = differing == 0;
    let mut ok = identical;
    if rank == 0 {
        if identical {
            println!(
                "check: parameters bitwise identical on all {size} ranks ({} parameters; all-reduce Min and Max of their bits agree): OK",
                shape.len()
            );
        } else {
            println!(
                "check: parameters differ between ranks: {differing} of {} parameters have different bits on some rank: FAILED",
                shape.len()
            );
        }
        if cfg.sync_every > 1 {
            println!(
                "check: loss curve not compared: with --sync-every {} (local SGD) the ranks step on their own shards, which a 1-rank run does not reproduce; only the parameters were checked",
                cfg.sync_every
            );
        } else if outcome.shrinks > 0 {
            println!(
                "check: loss curve not compared: the run lost ranks and repeated or skipped the step they were lost in, which a 1-rank run does not do; only the parameters were checked"
            );
        } else {
            let reference = trainer::train(cfg, train_set, test_set, None, |_| {})?;
            let curve = |o: &trainer::Outcome| -> Vec<f64> {
                o.epochs.iter().map(|r| r.train_loss).collect()
            };
            let (worst, at) = trainer::curve_difference(&curve(outcome), &curve(&reference));
            let matches = worst <= args::LOSS_RTOL;
            println!(
                "check: loss curve vs a 1-rank run of global batch {} in this process: largest relative difference {worst:.2e} (epoch {at}; tolerance {:.0e}): {}",
                cfg.batch,
                args::LOSS_RTOL,
                if matches { "OK" } else { "FAILED" }
            );
            if !matches {
                for (i, (a, b)) in curve(outcome).iter().zip(curve(&reference)).enumerate() {
                    println!(
                        "check:   epoch {}: {size} ranks {a:.8}, 1 rank {b:.8}",
                        i + 1
                    );
                }
            }
            ok &= matches;
        }
    }
    // Every rank exits with rank 0's verdict.
    let mut verdict = [u8::from(ok)];
    group
        .broadcast(&mut verdict, 0)
        .ctx(|| "check: sharing the verdict from rank 0".into())?;
    let ok = verdict[0] == 1;
    if rank == 0 {
        println!("check: {}", if ok { "OK" } else { "FAILED" });
    }
    Ok(ok)
}

/// Where training starts: rank 0 reads `--checkpoint`'s file, if there is one, and tells every
/// rank how many epochs it holds (or that it could not be used: every rank then stops with the
/// error rank 0 prints); the parameters follow with the initial broadcast.
fn resume_point(cfg: &Config, group: &psyne::Group) -> Result<trainer::Resume, Error> {
    let Some(dir) = &cfg.checkpoint else {
        return Ok(trainer::Resume::default());
    };
    let rank = group.rank();
    let loaded = if rank == 0 {
        checkpoint::load(
            dir,
            cfg.fingerprint(),
            cfg.epochs,
            trainer::shape(cfg).len(),
        )
    } else {
        Ok(None)
    };
    // Past any epoch count: rank 0 could not use the checkpoint, for bad arguments or not.
    const REFUSED_USAGE: u64 = u64::MAX;
    const REFUSED_DATA: u64 = u64::MAX - 1;
    let mut done = [match &loaded {
        Ok(Some(c)) => c.epochs_done as u64,
        Ok(None) => 0,
        Err(Error::Usage(_)) => REFUSED_USAGE,
        Err(_) => REFUSED_DATA,
    }];
    group
        .broadcast(&mut done, 0)
        .ctx(|| "telling every rank where the checkpoint starts".into())?;
    let loaded = loaded?;
    if done[0] >= REFUSED_DATA {
        let why = format!(
            "rank {rank}: rank 0 could not use the checkpoint in {} (its error says why)",
            dir.display()
        );
        return Err(if done[0] == REFUSED_USAGE {
            Error::Usage(why)
        } else {
            Error::Data(why)
        });
    }
    let epochs_done = done[0] as usize;
    if rank == 0 && epochs_done > 0 {
        println!(
            "train: resuming from {} after epoch {epochs_done} of {} (attempt {} of the job)",
            checkpoint::file(dir).display(),
            cfg.epochs,
            psyne::contract::restart_count().unwrap_or(0) + 1
        );
    }
    Ok(match loaded {
        Some(c) => trainer::Resume {
            epochs_done,
            params: Some(c.params),
            reports: c.reports,
        },
        None => trainer::Resume {
            epochs_done,
            ..trainer::Resume::default()
        },
    })
}

/// The first line rank 0 prints: data, model, job and how gradients travel.
fn header(cfg: &Config, group: &psyne::Group, train: usize, test: usize) -> String {
    let shape = trainer::shape(cfg);
    let size = group.size();
    let per_rank = {
        let (lo, hi) = (cfg.batch / size, cfg.batch.div_ceil(size));
        if lo == hi {
            format!("{lo}")
        } else {
            format!("{lo}-{hi}")
        }
    };
    let sync = if cfg.sync_every > 1 {
        format!(
            "local SGD: parameters averaged every {} steps and at the end",
            cfg.sync_every
        )
    } else {
        let plan = trainer::bucket_plan(cfg);
        let t = shape.tensors();
        let buckets: Vec<String> = plan
            .iter()
            .map(|b| {
                let names: Vec<&str> = b.tensors.iter().map(|&i| t[i].name).collect();
                format!("{} {} B", names.join("+"), b.bytes())
            })
            .collect();
        format!(
            "gradients all-reduced in {} bucket{} of at most {} MiB [{}], overlap {}",
            plan.len(),
            if plan.len() == 1 { "" } else { "s" },
            cfg.bucket_mb,
            buckets.join(", "),
            if cfg.overlap { "on" } else { "off" }
        )
    };
    format!(
        "train: digits ({train} train, {test} test); MLP {}-{}-{} ({} parameters); {size} rank{} ({}); global batch {} ({per_rank} per rank), {} steps per epoch; lr {}, seed {}; {sync}",
        shape.inputs,
        shape.hidden,
        shape.classes,
        shape.len(),
        if size == 1 { "" } else { "s" },
        group.transports(),
        cfg.batch,
        train.div_ceil(cfg.batch),
        cfg.lr,
        cfg.seed,
    )
}
