//! The structure tests: the layers the crate docs declare hold in the `use` lines, the import
//! graphs of the library and of psyrun have no cycle (but the transport table's with its
//! entries), and no function outside tests is over 80 lines. They read the source from
//! `CARGO_MANIFEST_DIR`; [`graph`] says what an edge is.

mod graph;
mod scan;

use std::path::{Path, PathBuf};

/// The layers of `src/`, bottom first, as the crate docs declare them: a file may name files of
/// its own layer and those below. Every top-level module must be listed.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "base",
        &[
            "error",
            "names",
            "units",
            "dtype",
            "reduce",
            "auth",
            "handshakes",
            "dl",
            "textfile",
            "report",
            "wait",
            "copy",
        ],
    ),
    ("launch", &["launch"]),
    ("bootstrap", &["bootstrap"]),
    ("transport", &["transport"]),
    ("schedule", &["schedule", "oracle"]),
    ("tuning", &["tuning"]),
    ("options", &["options"]),
    ("executor", &["executor"]),
    ("group", &["group", "comm"]),
    ("entry", &["init", "mpi", "conformance"]),
    ("api", &["lib", "contract", "internal"]),
];

/// The most lines a function outside tests may span.
const MAX_FN_LINES: usize = 80;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The layer of a file of `src/` (by its top-level module), if it is declared.
fn layer_of(file: &str) -> Option<(usize, &'static str)> {
    let top = file.split(['/', '.']).next()?;
    LAYERS
        .iter()
        .enumerate()
        .find(|(_, (_, mods))| mods.contains(&top))
        .map(|(i, (name, _))| (i, *name))
}

/// The edges of `g` that go up the layers, or leave them.
fn layer_violations(g: &graph::Graph) -> Vec<String> {
    let mut bad = Vec::new();
    for (from, to) in &g.edges {
        let Some((lf, nf)) = layer_of(from) else {
            bad.push(format!("{from} is in no layer: add its module to LAYERS"));
            continue;
        };
        for (target, path) in to {
            match layer_of(target) {
                Some((lt, nt)) if lt > lf => bad.push(format!(
                    "{from} ({nf}) names {target} ({nt}) above it: {path}"
                )),
                Some(_) => {}
                None => bad.push(format!("{target} is in no layer: add its module to LAYERS")),
            }
        }
    }
    bad
}

/// The library's graph, without these tests themselves.
fn library() -> graph::Graph {
    graph::build(&workspace().join("src"), "lib.rs", &["structure_tests/"])
}

#[test]
fn the_use_lines_of_src_respect_the_layers() {
    let bad = layer_violations(&library());
    assert!(bad.is_empty(), "layer violations:\n{}", bad.join("\n"));
}

/// Whether a cycle is the transport table with entries of it: the table names its entries
/// (`TABLE`), and they implement its `Transport`.
fn table_and_entries(cycle: &std::collections::BTreeSet<String>) -> bool {
    let entries = ["transport/shm/", "transport/rdma/", "transport/tcp/"];
    cycle.contains("transport/table.rs")
        && cycle
            .iter()
            .all(|f| f == "transport/table.rs" || entries.iter().any(|e| f.starts_with(e)))
}

/// The cycles of `g` other than the transport table's, for a message.
fn cycles_but_the_table(g: &graph::Graph) -> Vec<String> {
    let cycles = g.cycles().into_iter().filter(|c| !table_and_entries(c));
    cycles.map(|c| format!("{c:?}")).collect()
}

#[test]
fn the_import_graph_of_src_has_no_cycle_but_the_transport_table() {
    let bad = cycles_but_the_table(&library());
    assert!(bad.is_empty(), "import cycles in src/:\n{}", bad.join("\n"));
}

#[test]
fn the_import_graph_of_the_launcher_has_no_cycle() {
    let g = graph::build(&workspace().join("launcher/src"), "lib.rs", &["bin/"]);
    let bad: Vec<String> = g.cycles().iter().map(|c| format!("{c:?}")).collect();
    assert!(
        bad.is_empty(),
        "import cycles in launcher/src/:\n{}",
        bad.join("\n")
    );
}

/// The functions over [`MAX_FN_LINES`] in the Rust files under `dir`, outside `#[cfg(test)]`
/// items and `tests.rs` files.
fn long_functions(dir: &Path) -> Vec<String> {
    let mut long = Vec::new();
    for path in graph::rust_files(dir) {
        if path.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a readable source file");
        for f in scan::functions(&scan::code_only(&text)) {
            if f.lines > MAX_FN_LINES {
                let at = path.strip_prefix(workspace()).unwrap_or(&path).display();
                long.push(format!("{at}:{} fn {} ({} lines)", f.line, f.name, f.lines));
            }
        }
    }
    long
}

#[test]
fn no_function_outside_tests_is_over_80_lines() {
    let dirs = [
        "src",
        "launcher/src",
        "bench/src",
        "python/src",
        "train/src",
    ];
    let long: Vec<String> = dirs
        .iter()
        .flat_map(|d| long_functions(&workspace().join(d)))
        .collect();
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines:\n{}",
        long.join("\n")
    );
}
