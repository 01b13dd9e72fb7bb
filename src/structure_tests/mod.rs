//! The structure tests: the layers the crate docs declare hold in the `use` lines, the import
//! graphs of the library and of psyrun have no cycle (but the transport table's), and no
//! function outside tests is over 80 lines. They read the source from `CARGO_MANIFEST_DIR`.

mod graph;
mod scan;

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
#[ignore]
fn dump() {
    let g = graph::build(&workspace().join("src"), "lib.rs", &[]);
    for (f, to) in &g.edges {
        for (t, p) in to {
            println!("{f} -> {t}   ({p})");
        }
    }
    for c in g.cycles() {
        println!("CYCLE {c:?}");
    }
    let _ = Path::new("");
}
