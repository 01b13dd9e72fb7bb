//! The file-level import graph of a crate: file A -> file B when a `crate::`, `super::` or
//! `self::` path in A's code outside `#[cfg(test)]` items (in `use` lines or inline) names an item
//! of B. A path resolves to the deepest module file it names; at the crate root, a name the root
//! re-exports (`pub use a::b::X;`) resolves to the file it comes from. `mod child;` declarations
//! are not edges, nor are a file's paths to itself.

use super::scan;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A crate's files by module path, and the edges between them.
pub struct Graph {
    /// Module path (`["transport", "tcp", "link"]`; the root is empty) -> file, relative to the
    /// crate's source folder.
    pub modules: BTreeMap<Vec<String>, String>,
    /// File -> the files it names, each with one path that names it (for messages).
    pub edges: BTreeMap<String, BTreeMap<String, String>>,
}

/// Every `.rs` file under `dir`, sorted.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The module path of `file` (relative to the crate's source folder, whose root is `root`).
fn module_of(file: &str, root: &str) -> Vec<String> {
    if file == root {
        return vec![];
    }
    let stem = file.strip_suffix(".rs").expect("a .rs file");
    let mut parts: Vec<String> = stem.split('/').map(String::from).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The graph of the crate whose sources are under `dir` with root file `root` (`lib.rs`);
/// files under `skip` (relative folders, such as `bin/`) are left out.
pub fn build(dir: &Path, root: &str, skip: &[&str]) -> Graph {
    let mut modules = BTreeMap::new();
    let mut code = BTreeMap::new();
    for path in rust_files(dir) {
        let rel = path
            .strip_prefix(dir)
            .expect("under dir")
            .to_string_lossy()
            .replace('\\', "/");
        if skip.iter().any(|s| rel.starts_with(s)) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a readable source file");
        code.insert(rel.clone(), scan::without_tests(&scan::code_only(&text)));
        modules.insert(module_of(&rel, root), rel);
    }
    let reexports = root_reexports(&code[root], &modules);
    let mut graph = Graph {
        modules,
        edges: BTreeMap::new(),
    };
    for (file, text) in &code {
        let here = module_of(file, root);
        let mut to = BTreeMap::new();
        let inline = scan::inline_modules(text);
        for (at, path) in scan::paths(text) {
            let mut here = here.clone();
            here.extend(
                inline
                    .iter()
                    .filter(|(_, r)| r.contains(&at))
                    .map(|(n, _)| n.clone()),
            );
            if let Some(target) = graph.resolve(&here, &path, &reexports) {
                if &target != file {
                    to.entry(target).or_insert_with(|| path.join("::"));
                }
            }
        }
        graph.edges.insert(file.clone(), to);
    }
    graph
}

/// The names the root file re-exports from its modules (`pub use a::b::{X, Y};`), each with the
/// module path it comes from.
fn root_reexports(
    code: &str,
    modules: &BTreeMap<Vec<String>, String>,
) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for line in code
        .lines()
        .filter(|l| l.trim_start().starts_with("pub use "))
    {
        let tree = line
            .trim_start()
            .trim_start_matches("pub use ")
            .replace(';', "");
        for (_, mut path) in scan::paths(&format!("crate::{tree}")) {
            path.remove(0);
            let name = path.last().cloned().unwrap_or_default();
            let module = deepest(&path, modules);
            out.insert(name, module);
        }
    }
    out
}

/// The longest prefix of `path` that is a module with a file.
fn deepest(path: &[String], modules: &BTreeMap<Vec<String>, String>) -> Vec<String> {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains_key(p))
        .unwrap_or_default()
}

impl Graph {
    /// The file a path in the file of module `here` names, if it is one of this crate's.
    fn resolve(
        &self,
        here: &[String],
        path: &[String],
        reexports: &BTreeMap<String, Vec<String>>,
    ) -> Option<String> {
        let mut at: Vec<String> = match path.first()?.as_str() {
            "crate" => vec![],
            "self" | "super" => here.to_vec(),
            _ => return None,
        };
        let mut rest = &path[1..];
        if path[0] == "super" {
            at.pop()?;
        }
        while rest.first().is_some_and(|s| s == "super") {
            at.pop()?;
            rest = &rest[1..];
        }
        let full: Vec<String> = at
            .iter()
            .chain(rest)
            .filter(|s| *s != "self")
            .cloned()
            .collect();
        let mut module = deepest(&full, &self.modules);
        if module.is_empty() {
            if let Some(from) = full.first().and_then(|name| reexports.get(name)) {
                module = from.clone();
            }
        }
        self.modules.get(&module).cloned()
    }

    /// The strongly connected components of more than one file (Tarjan's algorithm).
    pub fn cycles(&self) -> Vec<BTreeSet<String>> {
        let mut t = Tarjan {
            graph: self,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: vec![],
            on: BTreeSet::new(),
            next: 0,
            found: vec![],
        };
        for file in self.edges.keys() {
            if !t.index.contains_key(file) {
                t.visit(file);
            }
        }
        t.found
    }
}

struct Tarjan<'a> {
    graph: &'a Graph,
    index: BTreeMap<String, usize>,
    low: BTreeMap<String, usize>,
    stack: Vec<String>,
    on: BTreeSet<String>,
    next: usize,
    found: Vec<BTreeSet<String>>,
}

impl Tarjan<'_> {
    fn visit(&mut self, v: &str) {
        self.index.insert(v.into(), self.next);
        self.low.insert(v.into(), self.next);
        self.next += 1;
        self.stack.push(v.into());
        self.on.insert(v.into());
        let graph = self.graph;
        for w in graph.edges.get(v).into_iter().flat_map(|m| m.keys()) {
            if !self.index.contains_key(w) {
                self.visit(w);
                let low = self.low[v].min(self.low[w]);
                self.low.insert(v.into(), low);
            } else if self.on.contains(w) {
                let low = self.low[v].min(self.index[w]);
                self.low.insert(v.into(), low);
            }
        }
        if self.low[v] == self.index[v] {
            let mut scc = BTreeSet::new();
            while let Some(w) = self.stack.pop() {
                self.on.remove(&w);
                let done = w == v;
                scc.insert(w);
                if done {
                    break;
                }
            }
            if scc.len() > 1 {
                self.found.push(scc);
            }
        }
    }
}
