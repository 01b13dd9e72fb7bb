//! What the examples share: reading their positional arguments, the deterministic inputs every
//! rank can regenerate from a seed, the even split of a range over the ranks, and the end of a
//! run (every rank agreeing on the verdict, rank 0's `OK`/`WRONG`, the exit status).
//!
//! Each example includes this file with `mod common;` (cargo does not take a folder without a
//! `main.rs` for an example of its own).

// Each example compiles this module separately and uses only some of it, so an item one example
// leaves unused is not dead code for the others.
#![allow(dead_code)]

use psyne::Communicator;
use psyne::{Group, ReduceOp};
use std::error::Error;
use std::ops::Range;
use std::process::ExitCode;
use std::str::FromStr;

/// The exit status for what `run` returned: 0 when every rank agreed the result was right, 1 when
/// it was wrong, 2 on an error (printed to stderr as `program: error`).
pub fn exit_code(program: &str, outcome: Result<bool, Box<dyn Error>>) -> ExitCode {
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            // One write of the whole line: ranks sharing a pipe (under mpirun) do not interleave.
            let line = format!("{program}: {e}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            ExitCode::from(2)
        }
    }
}

/// Positional argument `pos` (1 is the first) as a number, or `default` when absent.
pub fn arg<T: FromStr>(pos: usize, name: &str, default: T) -> Result<T, String> {
    Ok(checked_arg(pos, name, "a non-negative integer", |_| true)?.unwrap_or(default))
}

/// Positional argument `pos` (1 is the first) as a `T` that `valid` accepts, or `None` when
/// absent; otherwise the error "`name` must be `what`, not `<the argument>`".
pub fn checked_arg<T: FromStr>(
    pos: usize,
    name: &str,
    what: &str,
    valid: impl Fn(&T) -> bool,
) -> Result<Option<T>, String> {
    match std::env::args().nth(pos) {
        None => Ok(None),
        Some(a) => match a.parse() {
            Ok(v) if valid(&v) => Ok(Some(v)),
            _ => Err(format!("{name} must be {what}, not `{a}`")),
        },
    }
}

/// 64 pseudo-random bits for index `i` of the input made from `seed`: a function of the two only,
/// so any rank can compute any element.
pub fn random_bits(seed: u64, i: u64) -> u64 {
    splitmix64(seed ^ splitmix64(i))
}

/// Element `i` of the input made from `seed`, uniform in `[0, 1)` (53 random bits).
pub fn uniform(seed: u64, i: usize) -> f64 {
    (random_bits(seed, i as u64) >> 11) as f64 / (1u64 << 53) as f64
}

/// Element `i` of stream `stream` (a rank, a batch) of the input made from `seed`, a whole number
/// in `[-1000, 1000]`.
pub fn small_int(seed: u64, stream: usize, i: usize) -> i64 {
    let bits = random_bits(seed, (stream as u64) << 40 ^ i as u64);
    (bits % 2001) as i64 - 1000
}

/// The SplitMix64 mixing function.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Part `part` of `0..count` split into `parts` contiguous parts: the even split, the first
/// `count % parts` parts one element longer.
pub fn even_split(count: usize, part: usize, parts: usize) -> Range<usize> {
    let (base, extra) = (count / parts, count % parts);
    let start = part * base + part.min(extra);
    start..start + base + usize::from(part < extra)
}

/// True when every rank's check passed.
pub fn agree(group: &Group, ok: bool) -> psyne::Result<bool> {
    let mut wrong = [u64::from(!ok)];
    group.all_reduce(&mut wrong, ReduceOp::Sum)?;
    Ok(wrong[0] == 0)
}

/// The last word of rank 0's summary: `OK` or `WRONG`.
pub fn verdict(ok: bool) -> &'static str {
    if ok {
        "OK"
    } else {
        "WRONG"
    }
}

/// "1 rank", "4 ranks".
pub fn ranks(size: usize) -> String {
    format!("{size} rank{}", if size == 1 { "" } else { "s" })
}

/// `run`'s result once rank 0 has printed its summary: `all_ok`, after waiting at a barrier when
/// it is false, since psyrun stops the job as soon as the first rank exits non-zero and so could
/// cut rank 0 off before it printed.
pub fn finish(group: &Group, all_ok: bool) -> Result<bool, Box<dyn Error>> {
    if !all_ok {
        group.barrier()?;
    }
    Ok(all_ok)
}
