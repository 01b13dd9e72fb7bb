//! CSV and JSON: round trips, whole-file rewrites, reading either format.

mod common;

use psybench::export;
use psybench::model::Report;

#[test]
fn json_round_trip() {
    let dir = common::temp_dir("json");
    let path = dir.join("r.json");
    let rep = common::allreduce_report();
    export::write_json(&path, &rep).unwrap();
    let back = export::read_json(&path).unwrap();
    assert_eq!(back, rep);
    assert_eq!(export::read_report(&path).unwrap(), rep);
}

#[test]
fn csv_round_trip() {
    let dir = common::temp_dir("csv");
    let path = dir.join("r.csv");
    let mut rep = common::allreduce_report();
    rep.records[0].wrong = None;
    rep.records[1].root = Some(3);
    rep.records[2].in_place = true;
    export::write_csv(&path, &rep.records).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("collective,backend,algo,transport,dtype,op,root,ranks,bytes,"));
    assert_eq!(text.lines().count(), rep.records.len() + 1);
    assert_eq!(export::read_csv(&path).unwrap(), rep.records);
    // Read as a report: records kept, metadata rebuilt, fits recomputed.
    let r = export::read_report(&path).unwrap();
    assert_eq!(r.records, rep.records);
    assert_eq!(r.meta.world_size, 2);
    assert_eq!(r.meta.backends, vec!["native", "mpi"]);
    assert_eq!(r.fits.len(), 3);
}

#[test]
fn empty_csv_has_a_header() {
    let text = export::csv_string(&[]).unwrap();
    assert_eq!(text.trim(), export::RECORD_COLUMNS.join(","));
    assert!(export::parse_csv(&text).unwrap().is_empty());
}

#[test]
fn rewrites_whole_file_each_time() {
    let dir = common::temp_dir("rewrite");
    let (csv, json) = (dir.join("r.csv"), dir.join("r.json"));
    let full = common::allreduce_report();
    let mut rep = Report {
        records: Vec::new(),
        ..full.clone()
    };
    for (i, r) in full.records.iter().take(6).enumerate() {
        rep.records.push(r.clone());
        export::rewrite(Some(&csv), Some(&json), &rep).unwrap();
        assert_eq!(export::read_csv(&csv).unwrap().len(), i + 1);
        assert_eq!(export::read_json(&json).unwrap().records.len(), i + 1);
    }
    // Only the two outputs: no temporary files left.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
}

#[test]
fn errors_name_the_file() {
    let dir = common::temp_dir("errors");
    let missing = dir.join("nope").join("r.json");
    let e = export::write_json(&missing, &common::allreduce_report()).unwrap_err();
    assert!(e.to_string().contains("nope/r.json"), "{e}");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"meta\": 1}").unwrap();
    let e = export::read_report(&bad).unwrap_err().to_string();
    assert!(
        e.contains("bad.json") && e.contains("not a psybench JSON report"),
        "{e}"
    );
    let bad = dir.join("bad.csv");
    std::fs::write(&bad, "a,b\n1,2\n").unwrap();
    let e = export::read_report(&bad).unwrap_err().to_string();
    assert!(
        e.contains("bad.csv") && e.contains("not a psybench CSV"),
        "{e}"
    );
    assert!(export::read_report(&dir.join("absent.json")).is_err());
}
