//! Statistics over ranks and repeats, and building a [`Record`] from per-rank times.
//!
//! Units: times in microseconds per operation; bandwidths in GB/s with 1 GB/s = 1e9 B/s (not GiB),
//! as nccl-tests prints them. algbw = bytes / slowest rank's time; busbw = algbw × the
//! operation's bus factor ([`crate::factors::bus_factor`]). Every number written is finite: a
//! zero time gives zero bandwidth, never infinity.

use psyne::{DType, ReduceOp};

use crate::factors::bus_factor;
use crate::model::{Backend, BenchColl, Cadence, Record};

/// Minimum, mean and maximum of some values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// Smallest value.
    pub min: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Largest value.
    pub max: f64,
}

/// Min, mean and max of `values`; `None` when empty or when any value is not finite.
pub fn spread(values: &[f64]) -> Option<Spread> {
    if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    Some(Spread { min, mean, max })
}

/// The median of `values` (mean of the two middle ones for an even count); `None` when empty or
/// when any value is NaN.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() || values.iter().any(|v| v.is_nan()) {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 0 {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    })
}

/// Algorithm bandwidth in GB/s (1e9 B/s) of `bytes` moved in `time_us` microseconds; 0 when the
/// time is not positive.
pub fn algbw_gbps(bytes: u64, time_us: f64) -> f64 {
    if time_us > 0.0 && time_us.is_finite() {
        bytes as f64 / (time_us * 1e3)
    } else {
        0.0
    }
}

/// Everything about a measured row except its times.
#[derive(Debug, Clone, PartialEq)]
pub struct RowKey {
    /// The operation.
    pub collective: BenchColl,
    /// Which implementation ran.
    pub backend: Backend,
    /// Algorithm that ran (`ring`, ...), or `-` where not applicable.
    pub algo: String,
    /// Transport (`tcp`, ...).
    pub transport: String,
    /// Element type.
    pub dtype: DType,
    /// Reduction op; recorded only for the reducing operations.
    pub op: ReduceOp,
    /// Root; recorded only for the rooted operations.
    pub root: usize,
    /// World size.
    pub ranks: usize,
    /// Size in bytes as nccl-tests defines it for this operation.
    pub bytes: u64,
    /// Elements.
    pub count: u64,
    /// Timed iterations.
    pub iters: u64,
    /// Warm-up iterations.
    pub warmup: u64,
    /// In place or not.
    pub in_place: bool,
    /// Back to back or barrier-separated.
    pub cadence: Cadence,
    /// Elements that differed from the oracle, summed over ranks (None: not checked).
    pub wrong: Option<u64>,
}

/// The name of a cadence as written in records (`stream`, `isolated`).
pub fn cadence_name(c: Cadence) -> &'static str {
    match c {
        Cadence::Stream => "stream",
        Cadence::Isolated => "isolated",
        Cadence::Osu => "osu",
    }
}

/// Which time over ranks a cadence's rows report: `avg` for [`Cadence::Osu`] (as the OSU
/// micro-benchmarks print it), `max` otherwise (as nccl-tests).
pub fn over_ranks(c: Cadence) -> &'static str {
    match c {
        Cadence::Osu => "avg",
        Cadence::Stream | Cadence::Isolated => "max",
    }
}

/// Parses a cadence name.
pub fn parse_cadence(name: &str) -> Option<Cadence> {
    match name {
        "stream" => Some(Cadence::Stream),
        "isolated" => Some(Cadence::Isolated),
        "osu" => Some(Cadence::Osu),
        _ => None,
    }
}

/// Builds a [`Record`] from each rank's time per operation in microseconds.
///
/// time min/avg/max are over ranks; algbw = bytes / the reported time (the max, or for the osu
/// cadence the mean: [`over_ranks`]); busbw = algbw × bus factor. With no times (or a non-finite
/// one) the times are 0 and so are the bandwidths.
pub fn record(key: &RowKey, per_rank_time_us: &[f64]) -> Record {
    let s = spread(per_rank_time_us).unwrap_or(Spread {
        min: 0.0,
        mean: 0.0,
        max: 0.0,
    });
    let over = over_ranks(key.cadence);
    let algbw = algbw_gbps(key.bytes, if over == "avg" { s.mean } else { s.max });
    let busbw = algbw * bus_factor(key.collective, key.ranks);
    let rooted = crate::factors::rooted(key.collective);
    Record {
        collective: key.collective.name().to_string(),
        backend: key.backend.name().to_string(),
        algo: key.algo.clone(),
        transport: key.transport.clone(),
        dtype: key.dtype.name().to_string(),
        op: if key.collective.reduces() {
            key.op.name().to_string()
        } else {
            "-".to_string()
        },
        root: rooted.then_some(key.root),
        ranks: key.ranks,
        bytes: key.bytes,
        count: key.count,
        iters: key.iters,
        warmup: key.warmup,
        in_place: key.in_place,
        cadence: cadence_name(key.cadence).to_string(),
        time_us_min: s.min,
        time_us_avg: s.mean,
        time_us_max: s.max,
        time_over_ranks: over.to_string(),
        algbw_gbps: algbw,
        busbw_gbps: busbw,
        wrong: key.wrong,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_even_and_odd() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn zero_time_gives_zero_bandwidth() {
        assert_eq!(algbw_gbps(1 << 20, 0.0), 0.0);
        assert_eq!(algbw_gbps(1_000_000, 1_000.0), 1.0);
    }
}
