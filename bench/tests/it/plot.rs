//! The PNG: drawn without system fonts, valid, of a sane size.

use crate::common;

use psybench::model::BenchColl;
use psybench::plot;

fn png_dims(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG magic");
    assert_eq!(&bytes[12..16], b"IHDR", "IHDR first");
    let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    (w, h)
}

#[test]
fn draws_a_valid_png() {
    let dir = common::temp_dir("plot");
    let path = dir.join("allreduce.png");
    plot::draw(&[common::allreduce_report()], &path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let (w, h) = png_dims(&bytes);
    assert!(w >= 800 && h >= 400, "{w}x{h}");
    assert!(
        bytes.len() > 20_000 && bytes.len() < 5_000_000,
        "{} bytes",
        bytes.len()
    );
    // No temporary file left behind.
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(left.len(), 1);
    if let Ok(keep) = std::env::var("PSYBENCH_KEEP_PLOT") {
        std::fs::copy(&path, keep).unwrap();
    }
}

#[test]
fn several_reports_and_collectives() {
    let dir = common::temp_dir("plot-many");
    let path = dir.join("many.png");
    let a = common::allreduce_report();
    let mut b = common::allreduce_report();
    b.records
        .retain(|r| r.backend == "native" && r.algo == "ring");
    let mut b2 = b.clone();
    for r in &mut b2.records {
        r.collective = BenchColl::AllGather.name().into();
    }
    b.records.extend(b2.records);
    plot::draw(&[a, b], &path).unwrap();
    let (w, h) = png_dims(&std::fs::read(&path).unwrap());
    assert!(w >= 800 && h >= 400);
    let labels: Vec<String> =
        plot::series(&[common::allreduce_report(), common::allreduce_report()])
            .into_iter()
            .map(|s| s.label)
            .collect();
    assert!(labels.iter().any(|l| l.contains("run 2")), "{labels:?}");
    if let Ok(keep) = std::env::var("PSYBENCH_KEEP_PLOT_MANY") {
        std::fs::copy(&path, keep).unwrap();
    }
}

#[test]
fn nothing_to_plot_is_an_error() {
    let dir = common::temp_dir("plot-empty");
    let mut r = common::allreduce_report();
    r.records.clear();
    let err = plot::draw(&[r], &dir.join("x.png")).unwrap_err();
    assert!(err.to_string().contains("nothing to plot"), "{err}");
}

#[test]
fn one_point_and_a_barrier() {
    let dir = common::temp_dir("plot-one");
    let path = dir.join("one.png");
    let mut rep = common::allreduce_report();
    rep.records = vec![
        common::record(BenchColl::SendRecv, "native", "-", 2, 4096, 30.0, 1.0),
        common::record(
            BenchColl::Barrier,
            "native",
            "dissemination",
            2,
            0,
            45.0,
            1.0,
        ),
    ];
    assert_eq!(
        plot::size_zero_note(std::slice::from_ref(&rep)).as_deref(),
        Some("size 0 (not on the axis): barrier · native 45.0 µs")
    );
    plot::draw(&[rep.clone()], &path).unwrap();
    let (w, h) = png_dims(&std::fs::read(&path).unwrap());
    assert!(w >= 800 && h >= 400);
    // A barrier alone has nothing to draw on a size axis.
    rep.records.remove(0);
    let err = plot::draw(&[rep], &dir.join("b.png")).unwrap_err();
    assert!(err.to_string().contains("barrier"), "{err}");
}

/// A report of every collective (a barrier among them): sweeps 1K..16M on 2 ranks, native and
/// MPI, with `peak_gbps` set.
fn all_collectives_report() -> psybench::model::Report {
    let mut rep = common::allreduce_report();
    rep.records.clear();
    for (k, coll) in BenchColl::ALL.into_iter().enumerate() {
        let alpha = 5.0 + k as f64;
        if coll == BenchColl::Barrier {
            rep.records.push(common::record(
                coll,
                "native",
                "dissemination",
                2,
                0,
                alpha,
                1.0,
            ));
            rep.records
                .push(common::record(coll, "mpi", "-", 2, 0, alpha * 0.8, 1.0));
            continue;
        }
        let mut b = 1u64 << 10;
        while b <= 16 << 20 {
            let algo = if b < 64 << 10 { "binomial" } else { "ring" };
            rep.records
                .push(common::record(coll, "native", algo, 2, b, alpha, 2.0));
            rep.records
                .push(common::record(coll, "mpi", "-", 2, b, alpha * 0.7, 3.0));
            b *= 2;
        }
    }
    rep
}

#[test]
fn several_collectives_draw_one_row_each() {
    let dir = common::temp_dir("plot-rows");
    let one = dir.join("one.png");
    let all = dir.join("all.png");
    plot::draw(&[common::allreduce_report()], &one).unwrap();
    plot::draw(&[all_collectives_report()], &all).unwrap();
    let one_bytes = std::fs::read(&one).unwrap();
    let all_bytes = std::fs::read(&all).unwrap();
    let (w1, h1) = png_dims(&one_bytes);
    let (w, h) = png_dims(&all_bytes);
    assert_eq!(w, w1, "same width");
    assert_eq!(
        (w1, h1),
        (plot::WIDTH, plot::HEIGHT),
        "one collective keeps its size"
    );
    // Nine collectives with a size axis: nine rows of about 330 px, plus a line for barrier.
    assert!(h > h1, "{w}x{h} is not taller than {w1}x{h1}");
    assert!((9 * 300..=9 * 400 + 400).contains(&h), "{w}x{h}");
    assert!(all_bytes.len() > 100_000, "{} bytes", all_bytes.len());
    // Only the two pictures: no temporary file left behind.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
    // The title counts the operations instead of listing them.
    let (line1, _) = plot::title(&[all_collectives_report()]);
    assert!(line1.contains("10 collectives"), "{line1}");
    assert!(!line1.contains("reducescatter"), "{line1}");
    if let Ok(keep) = std::env::var("PSYBENCH_KEEP_PLOT_ROWS") {
        std::fs::copy(&all, keep).unwrap();
    }
}
