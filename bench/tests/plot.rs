//! The PNG: drawn without system fonts, valid, of a sane size.

mod common;

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
