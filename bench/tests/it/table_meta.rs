//! The live table, summary tables, and run metadata.

use crate::common;

use psybench::meta;
use psybench::model::{BenchColl, Cadence};
use psybench::table;

#[test]
fn header_and_rows_line_up() {
    let head = table::header(Cadence::Stream);
    let lines: Vec<&str> = head.lines().collect();
    assert!(lines[0].contains("stream") && lines[0].contains("back to back"));
    assert!(head.contains("GB/s = 1e9 B/s"));
    let titles = lines.last().unwrap();
    for col in [
        "size(B)",
        "count",
        "type",
        "op",
        "root",
        "algo",
        "backend",
        "min(µs)",
        "avg(µs)",
        "max(µs)",
        "algbw(GB/s)",
        "busbw(GB/s)",
        "#wrong",
    ] {
        assert!(titles.contains(col), "{col} in {titles}");
    }
    assert!(table::header(Cadence::Isolated).contains("barrier before each"));
    let mut r = common::record(
        BenchColl::AllReduce,
        "native",
        "recursive_doubling",
        2,
        1 << 20,
        20.0,
        3.0,
    );
    r.wrong = None;
    let row = table::row(&r);
    assert!(
        row.contains("1048576") && row.contains("recursive_doubling") && row.ends_with("N/A"),
        "{row}"
    );
    // The right edge of every numeric column is the same in the titles and the row.
    let ends = |s: &str| -> Vec<usize> {
        let chars: Vec<char> = s.chars().collect();
        (0..chars.len())
            .filter(|&i| chars[i] != ' ' && (i + 1 == chars.len() || chars[i + 1] == ' '))
            .collect()
    };
    let (mut te, re) = (ends(titles), ends(&row));
    te.remove(0); // the leading `#`
    assert_eq!(te.len(), re.len(), "\n{titles}\n{row}");
    for i in [0, 1, 7, 8, 9, 10, 11, 12] {
        assert_eq!(te[i], re[i], "column {i}\n{titles}\n{row}");
    }
}

#[test]
fn summary_tables() {
    let rep = common::allreduce_report();
    let t = table::fits_table(&rep.fits);
    assert!(
        t.contains("α latency (µs)") && t.contains("40.00") && t.contains("4.00"),
        "{t}"
    );
    let t = table::records_table(&rep.records[..3]);
    assert!(t.contains("busbw (GB/s)") && t.contains("mpi"), "{t}");
}

#[test]
fn hidden_progress_is_harmless() {
    let p = table::Progress::hidden();
    assert!(!p.is_visible());
    p.set_message("allreduce 8");
    p.inc(1);
    p.finish();
    // Under `cargo test` stderr is not a terminal on CI; rank 1 never shows.
    assert!(!table::Progress::new(10, 1).is_visible());
}

#[test]
fn metadata_of_this_host() {
    let (_, sweep) = match psybench::cli::parse_from([
        "psybench",
        "allreduce",
        "--algo",
        "ring,auto",
        "--peak",
        "9",
    ])
    .unwrap()
    {
        psybench::cli::Command::Sweep { ranks, sweep } => (ranks, sweep),
        _ => unreachable!(),
    };
    let m = meta::collect(&sweep, 2, &["a".into(), "b".into(), "a".into()], 0);
    assert_eq!(m.hosts, vec!["a", "b"]);
    assert_eq!(m.world_size, 2);
    assert_eq!(m.algos, vec!["ring", "auto"]);
    assert_eq!(m.backends, vec!["native"]);
    assert_eq!(m.peak_gbps, Some(9.0));
    assert!(m.cores >= 1);
    assert!(!m.cpu_model.is_empty());
    assert_eq!(m.psyne_version, env!("CARGO_PKG_VERSION"));
    // RFC 3339 UTC: 2025-11-21T06:50:08Z
    let d = m.date.as_bytes();
    assert_eq!(
        (d.len(), d[4], d[10], d[19]),
        (20, b'-', b'T', b'Z'),
        "{}",
        m.date
    );
    if let Some(rev) = &m.git_revision {
        assert!(!rev.is_empty());
    }
    // Only rank 0's metadata is written: the other ranks start no git.
    let other = meta::collect(&sweep, 2, &["a".into(), "b".into()], 1);
    assert_eq!(other.git_revision, None);
    assert!(m.command.contains("table_meta") || !m.command.is_empty());
    // No hosts given: this host.
    assert_eq!(
        meta::collect(&sweep, 1, &[], 0).hosts,
        vec![psyne::hostname()]
    );
}
