//! `train --checkpoint DIR`: the training state after an epoch, written by rank 0 to
//! `DIR/train.ckpt` atomically (a temporary file, flushed to disk, then renamed over the old
//! one), and read back when a run starts, so a job that `psyrun --max-restarts` starts again goes
//! on from the last checkpoint instead of from the beginning.
//!
//! The state is what makes the rest of the run the same as an uninterrupted one: the parameters
//! (identical on every rank in synchronous training), how many epochs are done (the shuffle and
//! the learning rate of every later step follow from the seed and the step number), and the
//! epochs' reports so far (for the summary and `--check`). A checkpoint carries the fingerprint
//! of the arguments that shape training ([`crate::Config::fingerprint`]); one written with other
//! arguments is refused, naming the fix.
//!
//! Format, little-endian: the magic `PSYTRCK1`; the fingerprint, the epochs done and the number
//! of parameters (u64 each); the parameters (f32); the number of reports (u64) and each report's
//! [`REPORT_FIELDS`] numbers (f64); then an FNV-1a hash (u64) of everything before it.

use crate::args::fnv1a;
use crate::trainer::EpochReport;
use crate::Error;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The first bytes of a checkpoint file.
const MAGIC: &[u8; 8] = b"PSYTRCK1";

/// Numbers stored per epoch report.
pub const REPORT_FIELDS: usize = 12;

/// Training state after a whole epoch.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// [`crate::Config::fingerprint`] of the run that wrote it.
    pub fingerprint: u64,
    /// Epochs completed.
    pub epochs_done: usize,
    /// The parameters after them.
    pub params: Vec<f32>,
    /// Their reports, in order.
    pub reports: Vec<EpochReport>,
}

/// The checkpoint file in `dir`.
pub fn file(dir: &Path) -> PathBuf {
    dir.join("train.ckpt")
}

fn report_numbers(r: &EpochReport) -> [f64; REPORT_FIELDS] {
    [
        r.epoch as f64,
        r.epochs as f64,
        r.train_loss,
        r.train_acc,
        r.test_acc,
        r.test_correct as f64,
        r.test_samples as f64,
        r.steps as f64,
        r.compute_ms,
        r.comm_ms,
        r.slowest_ms,
        r.seconds,
    ]
}

fn report_from(n: &[f64]) -> EpochReport {
    EpochReport {
        epoch: n[0] as usize,
        epochs: n[1] as usize,
        train_loss: n[2],
        train_acc: n[3],
        test_acc: n[4],
        test_correct: n[5] as usize,
        test_samples: n[6] as usize,
        steps: n[7] as usize,
        compute_ms: n[8],
        comm_ms: n[9],
        slowest_ms: n[10],
        seconds: n[11],
    }
}

/// The bytes of `c` in the format of the module docs.
pub fn encode(c: &Checkpoint) -> Vec<u8> {
    let mut out = Vec::with_capacity(48 + 4 * c.params.len() + 96 * c.reports.len());
    out.extend_from_slice(MAGIC);
    for n in [c.fingerprint, c.epochs_done as u64, c.params.len() as u64] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    for p in &c.params {
        out.extend_from_slice(&p.to_le_bytes());
    }
    out.extend_from_slice(&(c.reports.len() as u64).to_le_bytes());
    for r in &c.reports {
        for n in report_numbers(r) {
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
    let hash = fnv1a(&out);
    out.extend_from_slice(&hash.to_le_bytes());
    out
}

/// Reads fixed-size fields from the front of a byte slice.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take::<8>().map(u64::from_le_bytes)
    }
    fn len(&mut self, each: usize) -> Option<usize> {
        let n = usize::try_from(self.u64()?).ok()?;
        (n.checked_mul(each)? <= self.0.len()).then_some(n)
    }
}

/// Decodes a checkpoint; `None` if the bytes are not a whole, intact one.
pub fn decode(bytes: &[u8]) -> Option<Checkpoint> {
    let (body, hash) = bytes.split_last_chunk::<8>()?;
    if fnv1a(body) != u64::from_le_bytes(*hash) || !body.starts_with(MAGIC) {
        return None;
    }
    let mut r = Reader(&body[MAGIC.len()..]);
    let fingerprint = r.u64()?;
    let epochs_done = usize::try_from(r.u64()?).ok()?;
    let n = r.len(4)?;
    let params = (0..n)
        .map(|_| r.take::<4>().map(f32::from_le_bytes))
        .collect::<Option<Vec<f32>>>()?;
    let m = r.len(8 * REPORT_FIELDS)?;
    let mut reports = Vec::with_capacity(m);
    for _ in 0..m {
        let numbers = (0..REPORT_FIELDS)
            .map(|_| r.take::<8>().map(f64::from_le_bytes))
            .collect::<Option<Vec<f64>>>()?;
        reports.push(report_from(&numbers));
    }
    r.0.is_empty().then_some(Checkpoint {
        fingerprint,
        epochs_done,
        params,
        reports,
    })
}

/// Writes `c` to [`file()`]`(dir)` atomically: a reader sees the old checkpoint or the new one,
/// whole, even if this process dies while writing.
pub fn save(dir: &Path, c: &Checkpoint) -> Result<(), Error> {
    let target = file(dir);
    let tmp = dir.join(format!("train.ckpt.tmp.{}", std::process::id()));
    let fail = |what: &str, e: std::io::Error| {
        Error::Data(format!(
            "--checkpoint: {what} {}: {e}; check that the directory exists and is writable",
            tmp.display()
        ))
    };
    let mut f = std::fs::File::create(&tmp).map_err(|e| fail("creating", e))?;
    f.write_all(&encode(c)).map_err(|e| fail("writing", e))?;
    f.sync_all().map_err(|e| fail("flushing", e))?;
    drop(f);
    std::fs::rename(&tmp, &target).map_err(|e| fail("renaming", e))?;
    // The rename itself reaches the disk with the directory.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

impl Checkpoint {
    /// Why the counts of this checkpoint cannot be those of a run of `epochs` epochs, if they
    /// cannot: more epochs done than the run has, or not exactly one report per epoch done, in
    /// order, each of a run of `epochs`. A file whose checksum holds but whose counts do not was
    /// not written by `train` (or by this version of it), and is refused as a damaged one is.
    pub fn inconsistency(&self, epochs: usize) -> Option<String> {
        let done = self.epochs_done;
        if done > epochs {
            return Some(format!("claims {done} of {epochs} epochs done"));
        }
        if self.reports.len() != done {
            let n = self.reports.len();
            return Some(format!(
                "holds {n} epoch report{} for {done} epochs done (one per epoch)",
                if n == 1 { "" } else { "s" }
            ));
        }
        self.reports
            .iter()
            .enumerate()
            .find(|(i, r)| r.epoch != i + 1 || r.epochs != epochs)
            .map(|(i, r)| {
                format!(
                    "holds, as the report of epoch {} of {epochs}, one of epoch {} of {}",
                    i + 1,
                    r.epoch,
                    r.epochs
                )
            })
    }
}

/// The size in bytes of a checkpoint of `params` parameters after `epochs` epochs: the most a
/// run of `epochs` epochs reads.
pub fn size_of(params: usize, epochs: usize) -> u64 {
    let words = 8 * (1 + 3 + 1 + 1) as u64; // magic, header, report count, checksum
    words + 4 * params as u64 + 8 * (REPORT_FIELDS * epochs) as u64
}

/// The checkpoint in `dir`, if there is one, for a run of `epochs` epochs of a model of `params`
/// parameters. Only a regular file of at most [`size_of`] bytes is read (a FIFO or a device put
/// there is refused at once, not waited on or read without end). One that is damaged, whose
/// counts do not add up ([`Checkpoint::inconsistency`]), or that was written by a run with
/// other training arguments (`fingerprint` differs), is an error naming the fix.
pub fn load(
    dir: &Path,
    fingerprint: u64,
    epochs: usize,
    params: usize,
) -> Result<Option<Checkpoint>, Error> {
    let path = file(dir);
    let limit = size_of(params, epochs);
    let bytes = match psyne::textfile::read_regular_bytes(&path, limit) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // Too large: the one refusal of a regular file (bytes are not checked as text).
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            return Err(Error::Data(format!(
                "--checkpoint: {} is larger than a checkpoint of this run can be ({limit} \
                 bytes): it was written by a run with other training arguments (epochs, \
                 hidden), or is not a train checkpoint; remove it (or use another directory) \
                 to start over",
                path.display()
            )))
        }
        Err(e) => {
            return Err(Error::Data(format!(
                "--checkpoint: reading {}: {e}; remove it (or use another directory) to start over",
                path.display()
            )))
        }
    };
    let c = decode(&bytes).ok_or_else(|| {
        Error::Data(format!(
            "--checkpoint: {} is damaged or not a train checkpoint; remove it to start over",
            path.display()
        ))
    })?;
    if c.fingerprint != fingerprint {
        return Err(Error::Usage(format!(
            "--checkpoint: {} was written by a run with other training arguments (epochs, lr, \
             batch, hidden, seed, buckets, sync); run with the same ones, or remove it (or use \
             another directory) to start over",
            path.display()
        )));
    }
    if let Some(why) = c.inconsistency(epochs) {
        return Err(Error::Data(format!(
            "--checkpoint: {} {why}: it is damaged or not a train checkpoint; remove it to start \
             over",
            path.display()
        )));
    }
    Ok(Some(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Checkpoint {
        let report = EpochReport {
            epoch: 2,
            epochs: 5,
            train_loss: 0.25,
            train_acc: 0.9,
            test_acc: 0.875,
            test_correct: 260,
            test_samples: 297,
            steps: 47,
            compute_ms: 0.1,
            comm_ms: 0.02,
            slowest_ms: 0.15,
            seconds: 0.01,
        };
        Checkpoint {
            fingerprint: 42,
            epochs_done: 2,
            params: vec![1.5, -0.0, f32::MIN_POSITIVE, 3.25],
            reports: vec![
                EpochReport {
                    epoch: 1,
                    ..report.clone()
                },
                report,
            ],
        }
    }

    #[test]
    fn a_checkpoint_round_trips_bit_for_bit() {
        let c = sample();
        let back = decode(&encode(&c)).unwrap();
        assert_eq!(back, c);
        let bits = |v: &[f32]| v.iter().map(|p| p.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back.params), bits(&c.params));
    }

    #[test]
    fn damaged_or_cut_files_are_refused() {
        let bytes = encode(&sample());
        for cut in [0, 7, 8, 30, bytes.len() - 1] {
            assert!(decode(&bytes[..cut]).is_none(), "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert!(decode(&flipped).is_none());
    }

    #[test]
    fn save_then_load_and_a_foreign_fingerprint_is_refused() {
        let dir = std::env::temp_dir().join(format!("train-ckpt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(load(&dir, 42, 5, 4).unwrap().is_none(), "nothing there yet");
        save(&dir, &sample()).unwrap();
        assert_eq!(load(&dir, 42, 5, 4).unwrap(), Some(sample()));
        let e = load(&dir, 43, 5, 4).unwrap_err().to_string();
        assert!(e.contains("other training arguments"), "{e}");
        std::fs::write(file(&dir), b"junk").unwrap();
        let e = load(&dir, 42, 5, 4).unwrap_err().to_string();
        assert!(e.contains("damaged"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_size_bound_is_the_size_of_a_full_run_s_checkpoint() {
        let full = Checkpoint {
            epochs_done: 5,
            reports: vec![sample().reports[0].clone(); 5],
            ..sample()
        };
        assert_eq!(encode(&full).len() as u64, size_of(4, 5));
        let dir = std::env::temp_dir().join(format!("train-ckpt-size-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        save(&dir, &sample()).unwrap();
        // A run of 1 epoch reads no more than its own checkpoint's size: this one is larger.
        let e = load(&dir, 42, 1, 4).unwrap_err().to_string();
        assert!(
            e.contains("is larger than a checkpoint of this run can be (160 bytes)"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn counts_that_do_not_add_up_are_named() {
        let ok = sample();
        assert_eq!(ok.inconsistency(5), None);
        assert_eq!(ok.inconsistency(1).unwrap(), "claims 2 of 1 epochs done");
        let short = Checkpoint {
            reports: ok.reports[1..].to_vec(),
            ..ok.clone()
        };
        assert!(short
            .inconsistency(5)
            .unwrap()
            .starts_with("holds 1 epoch report for 2 epochs done (one per epoch)"));
        let mut swapped = ok.clone();
        swapped.reports.reverse();
        assert!(swapped
            .inconsistency(5)
            .unwrap()
            .contains("as the report of epoch 1 of 5, one of epoch 2 of 5"));
        assert!(ok.inconsistency(6).unwrap().contains("one of epoch 1 of 5"));
    }
}
