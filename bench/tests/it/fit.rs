//! The α-β fit recovers known latency and bandwidth.

use crate::common;

use psybench::fit::{fit_curve, fit_report};
use psybench::model::BenchColl;

fn synthetic(alpha_us: f64, beta_gbps: f64) -> Vec<(u64, f64)> {
    (3..=28)
        .map(|k| {
            let b = 1u64 << k;
            (b, alpha_us + b as f64 / (beta_gbps * 1e3))
        })
        .collect()
}

#[test]
fn recovers_alpha_and_beta() {
    for (a, b) in [(20.0, 5.0), (2.5, 0.8), (100.0, 40.0)] {
        let f = fit_curve(&synthetic(a, b)).unwrap();
        assert!((f.alpha_us - a).abs() < 1e-6 * a, "{f:?}");
        let beta = f.beta_gbps.unwrap();
        assert!((beta - b).abs() < 1e-6 * b, "{f:?}");
        assert_eq!(f.points, 26);
    }
}

#[test]
fn noisy_curve_is_close() {
    let pts: Vec<(u64, f64)> = synthetic(30.0, 3.0)
        .into_iter()
        .enumerate()
        .map(|(i, (b, t))| (b, t * if i % 2 == 0 { 1.03 } else { 0.97 }))
        .collect();
    let f = fit_curve(&pts).unwrap();
    assert!((f.alpha_us - 30.0).abs() < 3.0, "{f:?}");
    assert!((f.beta_gbps.unwrap() - 3.0).abs() < 0.3, "{f:?}");
}

#[test]
fn degenerate_curves() {
    // One point: no bandwidth, α is the time.
    let f = fit_curve(&[(1024, 12.0)]).unwrap();
    assert_eq!((f.alpha_us, f.beta_gbps), (12.0, None));
    // The same size twice: still one distinct size.
    let f = fit_curve(&[(1024, 10.0), (1024, 14.0)]).unwrap();
    assert_eq!(f.beta_gbps, None);
    // Time falling with size (noise): no bandwidth.
    let f = fit_curve(&[(8, 20.0), (16, 15.0), (32, 10.0)]).unwrap();
    assert_eq!(f.beta_gbps, None);
    // Nothing usable.
    assert!(fit_curve(&[]).is_none());
    assert!(fit_curve(&[(8, 0.0), (16, f64::NAN)]).is_none());
    // Pure bandwidth: α would go negative with noise; clamped to 0.
    let f = fit_curve(&[(1000, 0.9), (2000, 2.1), (4000, 4.0)]).unwrap();
    assert!(f.alpha_us >= 0.0 && f.beta_gbps.unwrap() > 0.0, "{f:?}");
}

#[test]
fn report_groups_by_curve() {
    let rep = common::allreduce_report();
    let fits = fit_report(&rep.records, Some(12.0));
    assert_eq!(fits.len(), 3);
    let ring = fits.iter().find(|f| f.algo == "ring").unwrap();
    assert_eq!(
        (ring.collective.as_str(), ring.backend.as_str()),
        ("allreduce", "native")
    );
    assert!((ring.alpha_us - 40.0).abs() < 1e-6 && (ring.beta_gbps - 4.0).abs() < 1e-6);
    let pct = ring.busbw_pct_of_peak.unwrap();
    assert!(pct > 30.0 && pct < 34.0, "{pct}");
    let mpi = fits.iter().find(|f| f.backend == "mpi").unwrap();
    assert!((mpi.alpha_us - 8.0).abs() < 1e-6 && (mpi.beta_gbps - 6.0).abs() < 1e-6);
    // No peak: no percentage; a single-size curve has no fit.
    let one = vec![common::record(
        BenchColl::Broadcast,
        "native",
        "binomial",
        2,
        64,
        5.0,
        1.0,
    )];
    assert!(fit_report(&one, None).is_empty());
    assert!(fit_report(&rep.records, None)
        .iter()
        .all(|f| f.busbw_pct_of_peak.is_none()));
}
