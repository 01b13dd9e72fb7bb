//! Finding the program to run, before anything is started.
//!
//! A name containing `/` is a path (relative to the current directory). A bare name is looked up
//! in each directory of `PATH` (empty entries are skipped, unlike some shells), then beside the
//! psyrun executable, so `target/release/psyrun -n 4 train` finds `target/release/train`.

use crate::exit;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Why the program cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// Nothing by that name exists where psyrun looked.
    #[error("{}", not_found_message(.name, .searched))]
    NotFound {
        /// The name as typed.
        name: OsString,
        /// The directories searched, in order (empty for a path).
        searched: Vec<PathBuf>,
    },
    /// A file by that name exists but psyrun cannot execute it.
    #[error("{}", not_executable_message(.path, *.directory))]
    NotExecutable {
        /// The file found.
        path: PathBuf,
        /// It is a directory rather than a file.
        directory: bool,
    },
}

impl LookupError {
    /// [`exit::NOT_FOUND`] or [`exit::NOT_EXECUTABLE`].
    pub fn exit_code(&self) -> u8 {
        match self {
            LookupError::NotFound { .. } => exit::NOT_FOUND,
            LookupError::NotExecutable { .. } => exit::NOT_EXECUTABLE,
        }
    }
}

fn not_found_message(name: &OsStr, searched: &[PathBuf]) -> String {
    let shown = Path::new(name).display();
    if is_path(name) {
        return format!("program {shown} does not exist; check the path");
    }
    let dirs: Vec<String> = searched.iter().map(|d| d.display().to_string()).collect();
    let dirs = if dirs.is_empty() {
        "(PATH is empty)".to_string()
    } else {
        dirs.join(":")
    };
    format!(
        "program {shown:?} not found in PATH or beside psyrun (searched {dirs}); \
         give its path (e.g. ./{shown}) or check the name"
    )
}

fn not_executable_message(path: &Path, directory: bool) -> String {
    if directory {
        format!("{} is a directory, not a program", path.display())
    } else {
        format!(
            "{} is not executable; make it so with `chmod +x {}`",
            path.display(),
            path.display()
        )
    }
}

/// Whether `name` is a path (contains `/`) rather than a bare name to look up.
pub fn is_path(name: &OsStr) -> bool {
    name.as_bytes().contains(&b'/')
}

/// What is at `path`: an executable file, something else that exists, or nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    Executable,
    NotExecutable { directory: bool },
    Nothing,
}

fn probe(path: &Path) -> Found {
    match std::fs::metadata(path) {
        Err(_) => Found::Nothing,
        Ok(m) if m.is_dir() => Found::NotExecutable { directory: true },
        Ok(m) if m.permissions().mode() & 0o111 != 0 => Found::Executable,
        Ok(_) => Found::NotExecutable { directory: false },
    }
}

/// Finds `program`: a path is checked as is; a bare name is searched in the directories of
/// `path_var` (a `PATH`-style list), then in `beside` (the psyrun executable's directory).
/// Returns the path to execute.
pub fn resolve(
    program: &OsStr,
    path_var: Option<&OsStr>,
    beside: Option<&Path>,
) -> Result<PathBuf, LookupError> {
    if program.is_empty() {
        return Err(LookupError::NotFound {
            name: program.to_owned(),
            searched: Vec::new(),
        });
    }
    if is_path(program) {
        let path = PathBuf::from(program);
        return match probe(&path) {
            Found::Executable => Ok(path),
            Found::NotExecutable { directory } => {
                Err(LookupError::NotExecutable { path, directory })
            }
            Found::Nothing => Err(LookupError::NotFound {
                name: program.to_owned(),
                searched: Vec::new(),
            }),
        };
    }
    let mut searched: Vec<PathBuf> = path_var
        .map(|p| {
            std::env::split_paths(p)
                .filter(|d| !d.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    searched.extend(beside.map(Path::to_path_buf));
    let mut first_unusable = None;
    for dir in &searched {
        let candidate = dir.join(program);
        match probe(&candidate) {
            Found::Executable => return Ok(candidate),
            Found::NotExecutable { directory: false } if first_unusable.is_none() => {
                first_unusable = Some(candidate)
            }
            _ => {}
        }
    }
    match first_unusable {
        Some(path) => Err(LookupError::NotExecutable {
            path,
            directory: false,
        }),
        None => Err(LookupError::NotFound {
            name: program.to_owned(),
            searched,
        }),
    }
}

/// [`resolve`] with this process's `PATH` and the directory of the running executable.
pub fn resolve_here(program: &OsStr) -> Result<PathBuf, LookupError> {
    let path_var = std::env::var_os("PATH");
    let exe = std::env::current_exe().ok();
    let beside = exe.as_deref().and_then(Path::parent);
    resolve(program, path_var.as_deref(), beside)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    struct Dir(PathBuf);
    impl Dir {
        fn new(tag: &str) -> Dir {
            let p = std::env::temp_dir().join(format!(
                "psyrun-lookup-{tag}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
        fn file(&self, name: &str, mode: u32) -> PathBuf {
            let p = self.0.join(name);
            fs::write(&p, "#!/bin/sh\n").unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
            p
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn os(s: &str) -> &OsStr {
        OsStr::new(s)
    }

    #[test]
    fn bare_names_search_path_in_order_then_beside_psyrun() {
        let (a, b, exe) = (Dir::new("a"), Dir::new("b"), Dir::new("exe"));
        let pb = b.file("prog", 0o755);
        let path = std::env::join_paths([&a.0, &b.0]).unwrap();
        assert_eq!(resolve(os("prog"), Some(&path), Some(&exe.0)).unwrap(), pb);
        let pa = a.file("prog", 0o700);
        assert_eq!(resolve(os("prog"), Some(&path), Some(&exe.0)).unwrap(), pa);
        let beside = exe.file("train", 0o755);
        assert_eq!(
            resolve(os("train"), Some(&path), Some(&exe.0)).unwrap(),
            beside
        );
        assert_eq!(resolve(os("train"), None, Some(&exe.0)).unwrap(), beside);
    }

    #[test]
    fn an_executable_later_in_path_beats_an_unexecutable_earlier() {
        let (a, b) = (Dir::new("c"), Dir::new("d"));
        a.file("tool", 0o644);
        let good = b.file("tool", 0o755);
        let path = std::env::join_paths([&a.0, &b.0]).unwrap();
        assert_eq!(resolve(os("tool"), Some(&path), None).unwrap(), good);
        let only_bad = std::env::join_paths([&a.0]).unwrap();
        let e = resolve(os("tool"), Some(&only_bad), None).unwrap_err();
        assert_eq!(e.exit_code(), exit::NOT_EXECUTABLE);
        assert!(e.to_string().contains("chmod +x"), "{e}");
    }

    #[test]
    fn missing_names_say_where_psyrun_looked() {
        let a = Dir::new("e");
        let e = resolve(os("nope"), Some(a.0.as_os_str()), None).unwrap_err();
        assert_eq!(e.exit_code(), exit::NOT_FOUND);
        let msg = e.to_string();
        assert!(
            msg.contains("\"nope\" not found") && msg.contains(&*a.0.to_string_lossy()),
            "{msg}"
        );
        assert_eq!(
            resolve(os(""), None, None).unwrap_err().exit_code(),
            exit::NOT_FOUND
        );
        assert!(resolve(os("x"), Some(os("")), None)
            .unwrap_err()
            .to_string()
            .contains("PATH is empty"));
    }

    #[test]
    fn paths_are_checked_as_given() {
        let a = Dir::new("f");
        let good = a.file("run.sh", 0o755);
        let bad = a.file("data.sh", 0o644);
        assert_eq!(resolve(good.as_os_str(), None, None).unwrap(), good);
        let e = resolve(bad.as_os_str(), None, None).unwrap_err();
        assert_eq!(e.exit_code(), exit::NOT_EXECUTABLE);
        assert!(
            e.to_string()
                .contains(&format!("chmod +x {}", bad.display())),
            "{e}"
        );
        let e = resolve(a.0.as_os_str(), None, None).unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        assert_eq!(e.exit_code(), exit::NOT_EXECUTABLE);
        let missing = a.0.join("missing");
        let e = resolve(missing.as_os_str(), Some(a.0.as_os_str()), None).unwrap_err();
        assert_eq!(e.exit_code(), exit::NOT_FOUND);
        assert!(e.to_string().contains("does not exist"), "{e}");
        // A path is never searched for in PATH.
        assert!(resolve(os("sub/run.sh"), Some(a.0.as_os_str()), None).is_err());
    }
}
