//! CSV and JSON: round trips, whole-file rewrites, reading either format.

use crate::common;

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

/// A FIFO at `path` (mkfifo(3)).
fn make_fifo(path: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

fn is_fifo(path: &std::path::Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path)
        .unwrap()
        .file_type()
        .is_fifo()
}

#[test]
fn a_fifo_gets_the_final_report_written_through_and_stays_a_fifo() {
    let dir = common::temp_dir("fifo");
    let fifo = dir.join("out.json");
    make_fifo(&fifo);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    let rep = common::allreduce_report();
    // Progress rewrites leave a stream alone; the final write goes through it once.
    export::rewrite(None, Some(&fifo), &rep).unwrap();
    export::finish(None, Some(&fifo), &rep).unwrap();
    let text = reader.join().unwrap();
    let back: Report = serde_json::from_str(&text).expect("the reader got the whole JSON once");
    assert_eq!(back, rep);
    assert!(is_fifo(&fifo), "the FIFO was replaced");
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        1,
        "no temporary file left"
    );
}

#[test]
fn a_symlink_keeps_pointing_at_its_file_which_gets_the_report() {
    let dir = common::temp_dir("symlink");
    let real = dir.join("real.csv");
    std::fs::write(&real, "old").unwrap();
    let link = dir.join("link.csv");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let rep = common::allreduce_report();
    export::rewrite(Some(&link), None, &rep).unwrap();
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link was replaced by a file"
    );
    assert_eq!(export::read_csv(&real).unwrap(), rep.records);
    // A symlink to a FIFO is a stream: written through, and both stay what they were.
    let fifo = dir.join("fifo");
    make_fifo(&fifo);
    let to_fifo = dir.join("to-fifo.json");
    std::os::unix::fs::symlink(&fifo, &to_fifo).unwrap();
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    export::finish(None, Some(&to_fifo), &rep).unwrap();
    let back: Report = serde_json::from_str(&reader.join().unwrap()).unwrap();
    assert_eq!(back, rep);
    assert!(is_fifo(&fifo));
    assert!(std::fs::symlink_metadata(&to_fifo)
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn destinations_say_what_a_path_names() {
    use psybench::destination::Destination;
    let dir = common::temp_dir("dest");
    let new = dir.join("new.json");
    assert_eq!(
        Destination::of(&new).unwrap(),
        Destination::Replace(new.clone())
    );
    assert_eq!(
        Destination::of(std::path::Path::new("-")).unwrap(),
        Destination::Stdout
    );
    let null = std::path::Path::new("/dev/null");
    assert_eq!(
        Destination::of(null).unwrap(),
        Destination::Stream(null.to_path_buf())
    );
    assert!(!Destination::of(null).unwrap().takes_progress());
}
