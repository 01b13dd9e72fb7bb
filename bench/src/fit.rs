//! The latency-bandwidth (α-β) model of a curve: time ≈ α + bytes / β.
//!
//! The fit is least squares on the **relative** error (each point weighted by 1/time²), so the
//! microsecond-scale small sizes weigh as much as the large ones; plain least squares on time
//! lets the largest size decide everything and often gives a negative α. A negative α is refitted
//! with α = 0. When the curve has fewer than two distinct sizes, or time does not grow with size
//! (a noise-dominated curve of small messages), β is undefined and α is the mean time.

use crate::model::{Fit, Record};

/// The result of fitting one curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AlphaBeta {
    /// Latency in microseconds (≥ 0).
    pub alpha_us: f64,
    /// Bandwidth in GB/s (1e9 B/s) of the bytes as given; `None` when undefined (see module doc).
    pub beta_gbps: Option<f64>,
    /// Points used (those with a positive, finite time).
    pub points: usize,
}

/// Fits time_us ≈ α + bytes / β over `(bytes, time_us)` points; `None` when no point has a
/// positive, finite time.
pub fn fit_curve(points: &[(u64, f64)]) -> Option<AlphaBeta> {
    let pts: Vec<(f64, f64)> = points
        .iter()
        .filter(|(_, t)| t.is_finite() && *t > 0.0)
        .map(|(b, t)| (*b as f64, *t))
        .collect();
    if pts.is_empty() {
        return None;
    }
    let (mut s, mut sb, mut sbb, mut st, mut sbt) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for (b, t) in &pts {
        let w = 1.0 / (t * t);
        s += w;
        sb += w * b;
        sbb += w * b * b;
        st += w * t;
        sbt += w * b * t;
    }
    let mean_time = st / s;
    let undefined = AlphaBeta {
        alpha_us: mean_time,
        beta_gbps: None,
        points: pts.len(),
    };
    let det = s * sbb - sb * sb;
    if det.is_nan() || det <= 1e-12 * s * sbb {
        return Some(undefined);
    }
    // slope in µs per byte
    let mut slope = (s * sbt - sb * st) / det;
    let mut alpha = (st - slope * sb) / s;
    if alpha < 0.0 {
        alpha = 0.0;
        slope = sbt / sbb;
    }
    if !slope.is_finite() || slope <= 0.0 {
        return Some(undefined);
    }
    Some(AlphaBeta {
        alpha_us: alpha,
        // 1 byte per `slope` µs = 1e6 / slope B/s = 1e-3 / slope GB/s.
        beta_gbps: Some(1e-3 / slope),
        points: pts.len(),
    })
}

/// One [`Fit`] per (collective, backend, algo) curve of `records`, in order of first appearance,
/// fitting the slowest rank's time against the bytes as nccl-tests counts them. Curves whose β
/// is undefined (one size, barrier, flat noise) have no fit. With a positive `peak` (GB/s) each
/// fit also gives the curve's best busbw as a percentage of it.
pub fn fit_report(records: &[Record], peak: Option<f64>) -> Vec<Fit> {
    let mut keys: Vec<(&str, &str, &str)> = Vec::new();
    for r in records {
        let k = (r.collective.as_str(), r.backend.as_str(), r.algo.as_str());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut fits = Vec::new();
    for (coll, backend, algo) in keys {
        let curve: Vec<&Record> = records
            .iter()
            .filter(|r| r.collective == coll && r.backend == backend && r.algo == algo)
            .collect();
        let points: Vec<(u64, f64)> = curve.iter().map(|r| (r.bytes, r.time_us())).collect();
        let Some(AlphaBeta {
            alpha_us,
            beta_gbps: Some(beta_gbps),
            ..
        }) = fit_curve(&points)
        else {
            continue;
        };
        let best = curve
            .iter()
            .map(|r| r.busbw_gbps)
            .filter(|b| b.is_finite())
            .fold(0.0, f64::max);
        let busbw_pct_of_peak = peak.filter(|p| *p > 0.0).map(|p| 100.0 * best / p);
        fits.push(Fit {
            collective: coll.to_string(),
            backend: backend.to_string(),
            algo: algo.to_string(),
            alpha_us,
            beta_gbps,
            busbw_pct_of_peak,
        });
    }
    fits
}
