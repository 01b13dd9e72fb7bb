//! The command line, parsed and then validated into a plain [`Config`] before any rank connects.

use crate::data;
use crate::Error;
use clap::Parser;

/// The relative tolerance of `--check`'s loss-curve comparison: the distributed run sums each
/// batch's gradient in a different order than one process does, so the curves agree to rounding,
/// not bit for bit.
pub const LOSS_RTOL: f64 = 1e-4;

/// The default `--bucket-mb`: at the default `--hidden 64` (4810 parameters, 19 KiB of gradient)
/// this is one bucket, which is what a latency-bound model wants; at `--hidden 1024` (307 KiB) it
/// is two, `b2+W2+b1` (44 KiB) overlapping the backward pass of `W1` (256 KiB).
pub const DEFAULT_BUCKET_MB: f64 = 0.1;

/// Data-parallel training of a multi-layer perceptron on the handwritten digits (8x8 images, 10
/// classes; 1500 samples to train on, 297 to test) with psyne's collectives. Run it under psyrun
/// (`psyrun -n 4 train`); alone it is a world of one.
///
/// Rank 0 initialises the weights and broadcasts them; every step each rank computes the gradient
/// of its share of the global batch; gradients are summed with all-reduce in buckets, each started
/// as soon as backpropagation has produced it, and divided by the global batch size; rank 0
/// prints one line per epoch.
///
/// Exit status: 0 on success, 1 when a run fails or --check finds a difference, 2 for bad
/// arguments.
#[derive(Debug, Parser)]
#[command(name = "train", version, verbatim_doc_comment)]
pub struct Args {
    /// Passes over the training set.
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub epochs: usize,

    /// Peak learning rate of plain SGD, decayed to 0 along a half cosine over the run.
    #[arg(
        long,
        default_value_t = 0.5,
        value_name = "RATE",
        allow_negative_numbers = true
    )]
    pub lr: f32,

    /// Global batch size, split evenly over the ranks (the first ranks take one more when it does
    /// not divide).
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub batch: usize,

    /// Hidden units (a larger model makes communication matter: try 1024).
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub hidden: usize,

    /// Seed of the initial weights and of the shuffle of every epoch.
    #[arg(long, default_value_t = 42, value_name = "N")]
    pub seed: u64,

    /// Gradient bucket cap in MiB (fractions allowed, e.g. 0.004); 0 means one all-reduce per
    /// parameter tensor.
    #[arg(long, default_value_t = DEFAULT_BUCKET_MB, value_name = "MiB", allow_negative_numbers = true)]
    pub bucket_mb: f64,

    /// Wait for each bucket's all-reduce as soon as it starts, instead of overlapping it with the
    /// rest of the backward pass.
    #[arg(long)]
    pub no_overlap: bool,

    /// Local SGD when above 1: no gradient all-reduce; every rank steps on its own shard and the
    /// parameters are averaged every K steps and at the end.
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub sync_every: usize,

    /// After training, verify that the parameters are bitwise identical on every rank and that
    /// the loss curve matches a 1-rank run of the same global batch (relative tolerance 1e-4);
    /// exit 1 if not.
    #[arg(long)]
    pub check: bool,

    /// Print only the summary (and --check's verdict), not the per-epoch lines.
    #[arg(long)]
    pub quiet: bool,

    /// Save the training state to DIR/train.ckpt after every --checkpoint-every epochs (rank 0
    /// writes it atomically), and go on from it when a run starts and finds it: under `psyrun
    /// --max-restarts N` a job that loses a rank restarts from its last checkpoint. DIR must
    /// exist. Synchronous training only (not with --sync-every above 1).
    #[arg(long, value_name = "DIR")]
    pub checkpoint: Option<std::path::PathBuf>,

    /// Epochs between checkpoints (the last epoch is always saved).
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub checkpoint_every: usize,

    /// Go on when a rank dies: the survivors revoke the group, shrink it, take the new rank 0's
    /// parameters and place, and finish with the same global batch split over the ranks left.
    /// Run under `psyrun --on-failure continue`, so that psyrun lets them.
    #[arg(long)]
    pub elastic: bool,
}

/// A validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Passes over the training set, at least 1.
    pub epochs: usize,
    /// Positive and finite.
    pub lr: f32,
    /// Global batch size, `1..=` the training set.
    pub batch: usize,
    /// Hidden units, at least 1.
    pub hidden: usize,
    /// The seed.
    pub seed: u64,
    /// The bucket cap in MiB, as given.
    pub bucket_mb: f64,
    /// The bucket cap in bytes.
    pub bucket_bytes: usize,
    /// Overlap all-reduces with backpropagation.
    pub overlap: bool,
    /// 1: gradient all-reduce every step; above 1: local SGD.
    pub sync_every: usize,
    /// Run the checks.
    pub check: bool,
    /// No per-epoch lines.
    pub quiet: bool,
    /// Where checkpoints go, if anywhere.
    pub checkpoint: Option<std::path::PathBuf>,
    /// Epochs between checkpoints, at least 1.
    pub checkpoint_every: usize,
    /// Shrink and go on when a rank is lost.
    pub elastic: bool,
}

/// The FNV-1a hash of `bytes`: the fingerprints', and the checkpoint file's check.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xCBF2_9CE4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3)
    })
}

/// The largest `--hidden` accepted (a 1 GiB model is not what this program is for).
pub const MAX_HIDDEN: usize = 1 << 20;

impl Args {
    /// Checks the values and makes the [`Config`].
    pub fn validate(self) -> Result<Config, Error> {
        let bad = |m: String| Err(Error::Usage(m));
        let train = data::SAMPLES - data::TEST;
        if self.epochs == 0 {
            return bad("--epochs must be at least 1".into());
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad(format!("--lr must be a positive number, not {}", self.lr));
        }
        if self.batch == 0 || self.batch > train {
            return bad(format!(
                "--batch must be between 1 and the {train} training samples, not {}",
                self.batch
            ));
        }
        if self.hidden == 0 || self.hidden > MAX_HIDDEN {
            return bad(format!(
                "--hidden must be between 1 and {MAX_HIDDEN}, not {}",
                self.hidden
            ));
        }
        if !(self.bucket_mb.is_finite() && self.bucket_mb >= 0.0) || self.bucket_mb > 1e6 {
            return bad(format!(
                "--bucket-mb must be a number of MiB from 0 (one bucket per tensor) up, not {}",
                self.bucket_mb
            ));
        }
        if self.sync_every == 0 {
            return bad("--sync-every must be at least 1 (1: average gradients every step; K > 1: local SGD averaging parameters every K steps)".into());
        }
        if self.checkpoint_every == 0 {
            return bad(
                "--checkpoint-every must be at least 1 (epochs between checkpoints)".into(),
            );
        }
        if let Some(dir) = &self.checkpoint {
            if self.sync_every > 1 {
                return bad(format!("--checkpoint works with synchronous training only: with --sync-every {} the ranks' parameters differ between averagings, and one rank's copy would not restart the same run; drop one of the two", self.sync_every));
            }
            if !dir.is_dir() {
                return bad(format!(
                    "--checkpoint {}: no such directory; create it first (mkdir -p)",
                    dir.display()
                ));
            }
        }
        Ok(Config {
            epochs: self.epochs,
            lr: self.lr,
            batch: self.batch,
            hidden: self.hidden,
            seed: self.seed,
            bucket_mb: self.bucket_mb,
            bucket_bytes: crate::buckets::cap_bytes(self.bucket_mb),
            overlap: !self.no_overlap,
            sync_every: self.sync_every,
            check: self.check,
            quiet: self.quiet,
            checkpoint: self.checkpoint,
            checkpoint_every: self.checkpoint_every,
            elastic: self.elastic,
        })
    }
}

impl Config {
    /// [`Config::fingerprint`] and the checkpoint settings: what the ranks compare when the job
    /// starts (every rank must take part in the same checkpoint collectives).
    pub fn run_fingerprint(&self) -> u64 {
        let text = format!(
            "{} {} {} {}",
            self.fingerprint(),
            self.checkpoint.is_some(),
            self.checkpoint_every,
            self.elastic
        );
        fnv1a(text.as_bytes())
    }

    /// A fingerprint of everything that must agree between ranks (FNV-1a of the settings), so a
    /// job whose ranks were started with different arguments stops with an error.
    pub fn fingerprint(&self) -> u64 {
        let text = format!(
            "{} {} {} {} {} {} {} {} {}",
            self.epochs,
            self.lr.to_bits(),
            self.batch,
            self.hidden,
            self.seed,
            self.bucket_bytes,
            self.overlap,
            self.sync_every,
            self.check
        );
        fnv1a(text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, Error> {
        let mut all = vec!["train"];
        all.extend_from_slice(args);
        Args::try_parse_from(all)
            .map_err(|e| Error::Usage(e.to_string()))?
            .validate()
    }

    #[test]
    fn defaults() {
        let c = parse(&[]).unwrap();
        assert_eq!((c.epochs, c.batch, c.hidden, c.seed), (20, 64, 64, 42));
        assert_eq!(c.lr, 0.5);
        assert_eq!(c.bucket_bytes, 104_857);
        assert!(c.overlap && !c.check && !c.quiet);
        assert_eq!(c.sync_every, 1);
    }

    #[test]
    fn flags() {
        let c = parse(&[
            "--epochs",
            "3",
            "--lr",
            "0.5",
            "--batch",
            "10",
            "--hidden",
            "1024",
            "--seed",
            "7",
            "--bucket-mb",
            "0.004",
            "--no-overlap",
            "--sync-every",
            "4",
            "--check",
            "--quiet",
        ])
        .unwrap();
        assert_eq!((c.epochs, c.batch, c.hidden, c.seed), (3, 10, 1024, 7));
        assert_eq!((c.lr, c.bucket_bytes, c.sync_every), (0.5, 4194, 4));
        assert!(!c.overlap && c.check && c.quiet);
    }

    #[test]
    fn bad_values_say_what_is_wrong() {
        for (args, want) in [
            (&["--epochs", "0"][..], "--epochs must be at least 1"),
            (&["--lr", "-1"], "--lr must be a positive number"),
            (&["--lr", "nan"], "--lr must be a positive number"),
            (&["--batch", "0"], "--batch must be between 1 and the 1500"),
            (
                &["--batch", "1501"],
                "--batch must be between 1 and the 1500",
            ),
            (&["--hidden", "0"], "--hidden must be between 1"),
            (
                &["--bucket-mb", "-0.5"],
                "--bucket-mb must be a number of MiB",
            ),
            (
                &["--bucket-mb", "inf"],
                "--bucket-mb must be a number of MiB",
            ),
            (&["--sync-every", "0"], "--sync-every must be at least 1"),
            (&["--batch", "lots"], "invalid value 'lots'"),
            (&["--frobnicate"], "unexpected argument '--frobnicate'"),
        ] {
            let e = parse(args).unwrap_err().to_string();
            assert!(e.contains(want), "{args:?}: {e}");
        }
    }

    #[test]
    fn fingerprints_differ_when_settings_do() {
        let a = parse(&[]).unwrap();
        let b = parse(&["--hidden", "65"]).unwrap();
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert_eq!(a.fingerprint(), parse(&["--quiet"]).unwrap().fingerprint());
    }
}
