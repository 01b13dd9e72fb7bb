//! Which MPI a program was built with, read from its ELF dependencies (and, for a script, its
//! interpreter's), so `--mpi auto` serves each program the interface its MPI speaks.
//!
//! | the program needs | its MPI | served |
//! |---|---|---|
//! | `libmpi.so.40` | Open MPI 3, 4, 5 | PMIx |
//! | `libmpi.so.12`, `libmpich.so.12` | MPICH, Intel MPI, MVAPICH (MPICH's ABI) | PMI-1/PMI-2 |
//! | neither (a psyne, torch or shell program; an MPI loaded with `dlopen`) | unknown | PMI-1/PMI-2 |
//!
//! Dependencies are followed through the libraries a program needs (a program that links
//! `libpetsc.so`, which links `libmpi.so.40`, is an Open MPI program), found where the loader
//! would look: `DT_RUNPATH`/`DT_RPATH` (with `$ORIGIN`), `LD_LIBRARY_PATH`, `/etc/ld.so.conf.d`
//! and the system directories. A Python program whose arguments or script mention `mpi4py`
//! is asked where `mpi4py.MPI` lives (without importing it), and that module's dependencies
//! decide.

use super::elf;
use std::collections::{HashSet, VecDeque};
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// An MPI implementation family, by the interface its library speaks to a launcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Open MPI (`libmpi.so.40`): PMIx.
    OpenMpi,
    /// MPICH's ABI (`libmpi.so.12`): MPICH, Intel MPI, MVAPICH: PMI-1 or PMI-2.
    Mpich,
    /// An MPI library loaded at run time, which one not known before it runs (mpi4py's wheels
    /// `dlopen` whichever they find): served every interface.
    Unknown,
}

impl Family {
    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Family::OpenMpi => "Open MPI",
            Family::Mpich => "MPICH or Intel MPI",
            Family::Unknown => "an MPI chosen when it runs",
        }
    }
}

/// What was found about one program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The MPI family.
    pub family: Family,
    /// The library that said so, and through what (`libmpi.so.40`, `libmpi.so.12 (mpi4py)`).
    pub via: String,
}

/// The MPI `program` (run with `args`) was built with, if it can be told.
pub fn mpi_of(program: &Path, args: &[OsString]) -> Option<Found> {
    let (binary, script) = match interpreter(program) {
        Some(interp) => (interp, Some(program.to_path_buf())),
        None => (program.to_path_buf(), None),
    };
    if let Some(found) = family_of_binary(&binary) {
        return Some(found);
    }
    let python = binary
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("python"));
    if python && mentions_mpi4py(script.as_deref(), args) {
        return Some(mpi4py_family(&binary));
    }
    None
}

/// The MPI an mpi4py program loads: the library `MPI4PY_LIBMPI` names, else the one its
/// `mpi4py.MPI` module needs, else unknown (its wheels load whichever they find at import).
fn mpi4py_family(python: &Path) -> Found {
    if let Some(lib) = std::env::var_os("MPI4PY_LIBMPI") {
        let lib = lib.to_string_lossy().into_owned();
        if let Some(family) = family_of_library(&lib) {
            return Found {
                family,
                via: format!("{lib} (mpi4py, MPI4PY_LIBMPI)"),
            };
        }
    }
    match mpi4py_module(python).and_then(|m| family_of_binary(&m)) {
        Some(found) => Found {
            family: found.family,
            via: format!("{} (mpi4py)", found.via),
        },
        None => Found {
            family: Family::Unknown,
            via: "mpi4py, which loads its MPI library when it runs".into(),
        },
    }
}

/// The family of the first MPI library among `path`'s dependencies, breadth first.
fn family_of_binary(path: &Path) -> Option<Found> {
    const MOST_FILES: usize = 256;
    let mut queue = VecDeque::from([path.to_path_buf()]);
    let mut seen = HashSet::new();
    while let Some(file) = queue.pop_front() {
        if seen.len() >= MOST_FILES || !seen.insert(file.clone()) {
            continue;
        }
        let Some(dynamic) = elf::dynamic(&file) else {
            continue;
        };
        for name in &dynamic.needed {
            if let Some(family) = family_of_library(name) {
                return Some(Found {
                    family,
                    via: name.clone(),
                });
            }
        }
        let dirs = search_dirs(&file, &dynamic.search);
        for name in &dynamic.needed {
            if let Some(lib) = dirs.iter().map(|d| d.join(name)).find(|p| p.is_file()) {
                queue.push_back(lib);
            }
        }
    }
    None
}

/// The family a library's name belongs to, if it is an MPI library.
fn family_of_library(name: &str) -> Option<Family> {
    let base = name.rsplit('/').next().unwrap_or(name);
    if base.starts_with("libmpi.so.40") {
        Some(Family::OpenMpi)
    } else if base.starts_with("libmpi.so.12") || base.starts_with("libmpich.so.12") {
        Some(Family::Mpich)
    } else {
        None
    }
}

/// Where the loader looks for `file`'s libraries, in its order.
fn search_dirs(file: &Path, runpath: &[String]) -> Vec<PathBuf> {
    let origin = file.parent().unwrap_or(Path::new("/"));
    let origin = origin.to_string_lossy();
    let mut dirs: Vec<PathBuf> = runpath
        .iter()
        .map(|d| PathBuf::from(d.replace("${ORIGIN}", &origin).replace("$ORIGIN", &origin)))
        .collect();
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&paths).filter(|p| p.is_absolute()));
    }
    dirs.extend(configured_dirs());
    for d in [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
        "/usr/local/lib",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

/// The directories `/etc/ld.so.conf.d/*.conf` add (one absolute path per line).
fn configured_dirs() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/etc/ld.so.conf.d") else {
        return Vec::new();
    };
    let mut dirs = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "conf") {
            let text = crate::textfile::read_regular(&path, 64 << 10).unwrap_or_default();
            dirs.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| l.starts_with('/'))
                    .map(PathBuf::from),
            );
        }
    }
    dirs
}

/// A script's interpreter (`#!/usr/bin/python3`, or `#!/usr/bin/env python3` found in `PATH`).
fn interpreter(program: &Path) -> Option<PathBuf> {
    let mut head = [0u8; 256];
    let n = std::fs::File::open(program).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let first = PathBuf::from(words.next()?);
    if first.file_name().is_some_and(|n| n == "env") {
        let name = words.find(|w| !w.starts_with('-') && !w.contains('='))?;
        return crate::program::resolve_here(std::ffi::OsStr::new(name)).ok();
    }
    Some(first)
}

/// Whether a Python run uses mpi4py, by its arguments or its script's text.
fn mentions_mpi4py(script: Option<&Path>, args: &[OsString]) -> bool {
    if args.iter().any(|a| a.to_string_lossy().contains("mpi4py")) {
        return true;
    }
    let file = script.map(Path::to_path_buf).or_else(|| {
        args.iter()
            .map(PathBuf::from)
            .find(|a| a.extension().is_some_and(|e| e == "py"))
    });
    file.and_then(|f| crate::textfile::read_regular(&f, 1 << 20).ok())
        .is_some_and(|text| text.contains("mpi4py"))
}

/// Where `python` finds `mpi4py.MPI`, asked without importing it (which would start MPI).
fn mpi4py_module(python: &Path) -> Option<PathBuf> {
    const ASK: &str = "import importlib.util as u\ns = u.find_spec('mpi4py.MPI')\nprint(s.origin if s and s.origin else '')";
    let mut child = Command::new(python)
        .args(["-c", ASK])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    };
    let mut out = String::new();
    child.stdout.take()?.read_to_string(&mut out).ok()?;
    let path = PathBuf::from(out.trim());
    (status.success() && path.is_file()).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_names() {
        assert_eq!(family_of_library("libmpi.so.40"), Some(Family::OpenMpi));
        assert_eq!(family_of_library("libmpi.so.12"), Some(Family::Mpich));
        assert_eq!(family_of_library("libmpich.so.12"), Some(Family::Mpich));
        assert_eq!(family_of_library("libmpi_cxx.so.40"), None);
        assert_eq!(family_of_library("libc.so.6"), None);
    }

    #[test]
    fn a_shell_script_and_a_plain_program_use_no_mpi() {
        assert_eq!(mpi_of(Path::new("/bin/sh"), &[]), None);
        let dir = std::env::temp_dir().join(format!("psyrun-detect-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("s.sh");
        std::fs::write(&script, "#!/usr/bin/env sh\necho hi\n").unwrap();
        assert_eq!(
            interpreter(&script),
            crate::program::resolve_here(std::ffi::OsStr::new("sh")).ok()
        );
        assert_eq!(mpi_of(&script, &[]), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
