//! `psybench compare`: ratios per size, one report with two backends or two reports.

use crate::common;

use psybench::compare::{compare, faster, render, CompareError};
use psybench::model::BenchColl;

#[test]
fn two_backends_in_one_report() {
    let rep = common::allreduce_report();
    let c = compare(("run.json", &rep), None).unwrap();
    assert_eq!((c.a.as_str(), c.b.as_str()), ("native", "mpi"));
    // Both native algorithms match the mpi row (algo `-` matches any).
    assert_eq!(c.rows.len(), 2 * 26);
    assert_eq!((c.unmatched_a, c.unmatched_b), (0, 0));
    let big = c
        .rows
        .iter()
        .find(|r| r.bytes == 256 << 20 && r.algo_a == "ring")
        .unwrap();
    // mpi (β 6) against ring (β 4): faster, about 1.5× the busbw.
    assert!(big.time_ratio() < 1.0);
    assert!(
        (big.busbw_ratio() - 1.5).abs() < 0.01,
        "{}",
        big.busbw_ratio()
    );
    assert!(faster(big, "A", "B").starts_with("B 1.50"));
    let text = render(&c);
    assert!(
        text.contains("A = native") && text.contains("B = mpi"),
        "{text}"
    );
    assert!(text.contains("256M") && text.contains("time B÷A"), "{text}");
}

#[test]
fn rows_of_different_cadences_never_match() {
    let a = common::allreduce_report();
    let mut b = a.clone();
    for r in &mut b.records {
        r.cadence = "osu".into();
        r.time_over_ranks = "avg".into();
    }
    let e = compare(("a.json", &a), Some(("b.json", &b))).unwrap_err();
    assert!(matches!(e, CompareError::NothingMatched(..)), "{e}");
    assert!(e.to_string().contains("--cadence"), "{e}");
    // The osu rows compare with each other on their mean time.
    let mut c = b.clone();
    for r in &mut c.records {
        r.time_us_avg *= 2.0;
    }
    let cmp = compare(("b.json", &b), Some(("c.json", &c))).unwrap();
    assert!(cmp.rows.iter().all(|r| (r.time_ratio() - 2.0).abs() < 1e-9));
}

#[test]
fn two_files_and_medians() {
    let a = common::allreduce_report();
    let mut b = a.clone();
    for r in &mut b.records {
        r.time_us_max *= 2.0;
        r.busbw_gbps /= 2.0;
    }
    // A repeated row in B: the median of 2× and 4× and 2× is 2×.
    let same = b.records[0].clone();
    let mut slow = same.clone();
    slow.time_us_max *= 2.0;
    b.records.push(slow);
    b.records.push(same);
    let c = compare(("a.json", &a), Some(("b.json", &b))).unwrap();
    assert_eq!(c.rows.len(), 3 * 26);
    for r in &c.rows {
        assert!((r.time_ratio() - 2.0).abs() < 1e-9, "{r:?}");
        assert!((r.busbw_ratio() - 0.5).abs() < 1e-9, "{r:?}");
        assert!(faster(r, "A", "B").starts_with("A 2.00"));
    }
}

#[test]
fn algorithms_must_agree_when_both_name_one() {
    let mk = |algo: &str| common::record(BenchColl::AllReduce, "native", algo, 2, 1024, 5.0, 1.0);
    let a = psybench::model::Report {
        records: vec![mk("ring")],
        ..common::allreduce_report()
    };
    let b = psybench::model::Report {
        records: vec![mk("recursive_doubling")],
        ..common::allreduce_report()
    };
    let e = compare(("a", &a), Some(("b", &b))).unwrap_err();
    assert!(matches!(e, CompareError::NothingMatched(..)), "{e}");
}

#[test]
fn one_backend_alone_is_an_error() {
    let mut rep = common::allreduce_report();
    rep.records.retain(|r| r.backend == "native");
    let e = compare(("run.json", &rep), None).unwrap_err().to_string();
    assert!(
        e.contains("one backend only") && e.contains("native,mpi"),
        "{e}"
    );
}
