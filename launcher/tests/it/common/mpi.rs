//! The MPI libraries installed here (scripts/setup.sh installs every one of them), as a table:
//! how to compile a C program against each, how its own launcher starts N ranks, what its ranks
//! need in their environment, which process-management interfaces it speaks, and where its
//! mpi4py is. And [`build`], which compiles a test program once per test binary run.
//!
//! An absent MPI fails the test that asks for it, with a message to run scripts/setup.sh: CI
//! installs them all, so a missing one is a broken setup, never a reason to skip.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// One MPI library installed on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavour {
    /// Debian's Open MPI 4.1.4 (`openmpi-bin`, `libopenmpi-dev`): PMIx.
    OpenMpi,
    /// Debian's MPICH 4.0.2 (`mpich`, `libmpich-dev`): PMI-1 and PMI-2.
    Mpich4,
    /// MPICH 5.0.2 from PyPI (`mpich` wheel) in /opt/psyne-mpich: PMI-1 (see `interfaces`).
    Mpich5,
    /// Intel MPI 2021.18.1 from PyPI (`impi-rt`, `impi-devel`) in /opt/psyne-impi: PMI-1 and
    /// PMI-2.
    IntelMpi,
}

/// Every flavour, in the order tests run them.
pub const FLAVOURS: [Flavour; 4] = [
    Flavour::OpenMpi,
    Flavour::Mpich4,
    Flavour::Mpich5,
    Flavour::IntelMpi,
];

/// The venv of MPICH 5 (scripts/setup.sh).
pub const MPICH5_VENV: &str = "/opt/psyne-mpich";
/// The venv of Intel MPI (scripts/setup.sh).
pub const IMPI_VENV: &str = "/opt/psyne-impi";
/// The venv with mpi4py for Debian's Open MPI and MPICH, and mpi4py's source (scripts/setup.sh).
pub const MPI4PY_VENV: &str = "/opt/psyne-mpi4py";

/// A process-management interface, as `psyrun --mpi` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interface {
    Pmix,
    Pmi1,
    Pmi2,
}

impl Interface {
    /// The value of `psyrun --mpi`.
    pub fn flag(self) -> &'static str {
        match self {
            Interface::Pmix => "pmix",
            Interface::Pmi1 => "pmi1",
            Interface::Pmi2 => "pmi2",
        }
    }
}

impl Flavour {
    /// A short name, for test names, messages and scripts/ci/mpi4py-suite.sh.
    pub fn name(self) -> &'static str {
        match self {
            Flavour::OpenMpi => "openmpi",
            Flavour::Mpich4 => "mpich4",
            Flavour::Mpich5 => "mpich5",
            Flavour::IntelMpi => "impi",
        }
    }

    /// Files whose absence means the flavour is not installed.
    fn needs(self) -> Vec<PathBuf> {
        let v = |venv: &str, rel: &str| Path::new(venv).join(rel);
        match self {
            Flavour::OpenMpi => vec![
                "/usr/bin/mpicc.openmpi".into(),
                "/usr/bin/mpirun.openmpi".into(),
            ],
            Flavour::Mpich4 => vec![
                "/usr/bin/mpicc.mpich".into(),
                "/usr/bin/mpiexec.mpich".into(),
            ],
            Flavour::Mpich5 => vec![v(MPICH5_VENV, "bin/mpicc"), v(MPICH5_VENV, "bin/mpiexec")],
            Flavour::IntelMpi => vec![
                v(IMPI_VENV, "include/mpi.h"),
                v(IMPI_VENV, "lib/libmpi.so.12"),
                v(IMPI_VENV, "bin/mpiexec"),
            ],
        }
    }

    /// Fails the test unless the flavour is installed, saying how to install it.
    pub fn require(self) {
        let missing: Vec<String> = self
            .needs()
            .into_iter()
            .filter(|p| !p.exists())
            .map(|p| p.display().to_string())
            .collect();
        assert!(
            missing.is_empty(),
            "MPI flavour {} is not installed here (missing {}): run scripts/setup.sh as root",
            self.name(),
            missing.join(", ")
        );
    }

    /// The command compiling the C file `source` into `out`.
    pub fn compile(self, source: &Path, out: &Path) -> Command {
        let mut cmd = match self {
            Flavour::OpenMpi => Command::new("mpicc.openmpi"),
            Flavour::Mpich4 => Command::new("mpicc.mpich"),
            Flavour::Mpich5 => Command::new(format!("{MPICH5_VENV}/bin/mpicc")),
            // The wheel's mpicc wrapper has unsubstituted paths: call gcc directly.
            Flavour::IntelMpi => {
                let mut c = Command::new("gcc");
                c.arg(format!("-I{IMPI_VENV}/include"))
                    .arg(format!("-L{IMPI_VENV}/lib"))
                    .arg(format!("-Wl,-rpath,{IMPI_VENV}/lib"));
                c
            }
        };
        cmd.args(["-O2", "-Wall", "-o"]).arg(out).arg(source);
        if self == Flavour::IntelMpi {
            cmd.arg("-lmpi");
        }
        cmd
    }

    /// Variables every rank (and the launcher) of this flavour needs: Intel MPI's programs find
    /// libfabric and its providers through `LD_LIBRARY_PATH`.
    pub fn rank_env(self) -> Vec<(String, String)> {
        match self {
            Flavour::IntelMpi => vec![("LD_LIBRARY_PATH".into(), format!("{IMPI_VENV}/lib"))],
            _ => Vec::new(),
        }
    }

    /// The flavour's own launcher starting `n` ranks, with [`Flavour::rank_env`] set; the
    /// program and its arguments are the caller's to add.
    pub fn launcher(self, n: usize) -> Command {
        let n = n.to_string();
        let mut cmd = match self {
            // --allow-run-as-root: tests run as root in CI; --oversubscribe: more ranks than the
            // 2 cores.
            Flavour::OpenMpi => {
                let mut c = Command::new("mpirun.openmpi");
                c.args(["--allow-run-as-root", "--oversubscribe"]);
                c
            }
            Flavour::Mpich4 => Command::new("mpiexec.mpich"),
            Flavour::Mpich5 => Command::new(format!("{MPICH5_VENV}/bin/mpiexec")),
            Flavour::IntelMpi => Command::new(format!("{IMPI_VENV}/bin/mpiexec")),
        };
        cmd.args(["-n", &n])
            .envs(self.rank_env())
            .envs(super::LOCAL_NET);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// The interfaces its library speaks to a launcher (`psyrun --mpi` values), the one
    /// `--mpi auto` must pick first.
    pub fn interfaces(self) -> &'static [Interface] {
        match self {
            Flavour::OpenMpi => &[Interface::Pmix],
            // The mpich 5.0.2 wheel's library fails MPI_Init with MPIR_CVAR_PMI_VERSION=2 before
            // it reads or writes its PMI socket, under its own Hydra too: no PMI-2 client in it.
            Flavour::Mpich5 => &[Interface::Pmi1],
            Flavour::Mpich4 | Flavour::IntelMpi => &[Interface::Pmi1, Interface::Pmi2],
        }
    }

    /// What its ranks must be told to speak `iface` (the library picks the version, not the
    /// launcher): PMI-2 is asked for by a variable; PMI-1 and PMIx need nothing.
    pub fn interface_env(self, iface: Interface) -> Vec<(String, String)> {
        match (self, iface) {
            (Flavour::Mpich4 | Flavour::Mpich5, Interface::Pmi2) => {
                vec![("MPIR_CVAR_PMI_VERSION".into(), "2".into())]
            }
            // Its built-in client speaks PMI-1 only; PMI-2 goes through a PMI-2 client library
            // (Slurm's, Debian's libpmi2-0, which scripts/setup.sh installs).
            (Flavour::IntelMpi, Interface::Pmi2) => vec![
                ("I_MPI_PMI".into(), "pmi2".into()),
                (
                    "I_MPI_PMI_LIBRARY".into(),
                    "/usr/lib/x86_64-linux-gnu/libpmi2.so.0".into(),
                ),
            ],
            _ => Vec::new(),
        }
    }

    /// The Python with mpi4py for this flavour, and the variables that make mpi4py load this
    /// flavour's library (mpi4py's wheel dlopens libmpi at import).
    pub fn python(self) -> (PathBuf, Vec<(String, String)>) {
        let mut env = self.rank_env();
        env.extend(super::LOCAL_NET.map(|(k, v)| (k.into(), v.into())));
        let python = match self {
            Flavour::OpenMpi => {
                env.push(("MPI4PY_LIBMPI".into(), "libmpi.so.40".into()));
                format!("{MPI4PY_VENV}/bin/python")
            }
            Flavour::Mpich4 => {
                // Debian's MPICH has libmpich.so.12 only; mpi4py's MPICH extension needs
                // libmpi.so.12: setup.sh links one into lib/mpich.
                env.push(("MPI4PY_LIBMPI".into(), "libmpich.so.12".into()));
                env.push(("LD_LIBRARY_PATH".into(), format!("{MPI4PY_VENV}/lib/mpich")));
                format!("{MPI4PY_VENV}/bin/python")
            }
            Flavour::Mpich5 => format!("{MPICH5_VENV}/bin/python"),
            Flavour::IntelMpi => format!("{IMPI_VENV}/bin/python"),
        };
        let python = PathBuf::from(python);
        assert!(
            python.exists(),
            "{} (mpi4py for {}) is missing: run scripts/setup.sh as root",
            python.display(),
            self.name()
        );
        (python, env)
    }
}

/// Intel MPI's benchmark program (in the `impi-rt` wheel).
pub fn imb_mpi1() -> PathBuf {
    Flavour::IntelMpi.require();
    let p = PathBuf::from(format!("{IMPI_VENV}/bin/IMB-MPI1"));
    assert!(
        p.exists(),
        "{} is missing: run scripts/setup.sh as root",
        p.display()
    );
    p
}

/// The C test programs of launcher/tests/mpi_programs/.
pub fn program_source(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mpi_programs")
        .join(name)
}

/// FNV-1a, 64 bits: a hash that stays the same across Rust releases (the cache key on disk).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // A separator, so ("ab", "c") and ("a", "bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// `source` (a C file) compiled for `flavour`: built at most once per test binary run, into
/// `<target>/<profile>/mpi-programs/`, named by a hash of the source and the compile command, so
/// an unchanged program built by an earlier run is used as is. Safe when tests (and test
/// binaries) build at the same time: each compiles to a file of its own and renames it into
/// place. Fails the test if the flavour is absent or the compiler fails.
pub fn build(flavour: Flavour, source: &Path) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<(Flavour, PathBuf), PathBuf>>> = OnceLock::new();
    flavour.require();
    let built = BUILT.get_or_init(Default::default);
    // Held while compiling: the same program is compiled once, not by every test that wants it.
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    let key = (flavour, source.to_path_buf());
    if let Some(path) = built.get(&key) {
        return path.clone();
    }
    let text = std::fs::read(source)
        .unwrap_or_else(|e| panic!("reading the MPI test program {}: {e}", source.display()));
    let dir = super::psyrun_path()
        .parent()
        .expect("psyrun's directory")
        .join("mpi-programs");
    std::fs::create_dir_all(&dir).expect("creating <target>/mpi-programs");
    let stem = source
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("program");
    let recipe = format!("{:?}", flavour.compile(Path::new("SRC"), Path::new("OUT")));
    let hash = fnv1a(&[&text, recipe.as_bytes()]);
    let out = dir.join(format!("{stem}-{}-{hash:016x}", flavour.name()));
    if !out.exists() {
        let tmp = dir.join(format!(
            ".{stem}-{}-{hash:016x}.{}.tmp",
            flavour.name(),
            std::process::id()
        ));
        let mut cmd = flavour.compile(source, &tmp);
        let result = cmd
            .output()
            .unwrap_or_else(|e| panic!("running {cmd:?}: {e}; run scripts/setup.sh as root"));
        if !result.status.success() {
            let _ = std::fs::remove_file(&tmp);
            panic!(
                "{cmd:?} failed ({}):\n{}{}",
                result.status,
                String::from_utf8_lossy(&result.stdout),
                String::from_utf8_lossy(&result.stderr)
            );
        }
        std::fs::rename(&tmp, &out).expect("moving the compiled MPI program into place");
    }
    built.insert(key, out.clone());
    out
}

/// One row of an Intel MPI Benchmarks table: which benchmark, on how many processes, the message
/// size and how many repetitions were timed. The times are left out: they differ run to run;
/// these are what two runs of the same command must agree on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ImbRow {
    pub benchmark: String,
    pub processes: usize,
    pub bytes: u64,
    pub repetitions: u64,
}

/// The rows of IMB-MPI1's output: every line of numbers under a `# Benchmarking NAME` heading
/// (with its `# #processes = N`), from the line after the `#bytes #repetitions ...` header to the
/// next blank or `#` line. Panics on a table line that does not parse, so a change of format is
/// noticed, not read as "no rows".
pub fn parse_imb(output: &str) -> Vec<ImbRow> {
    let mut rows = Vec::new();
    let mut benchmark: Option<String> = None;
    let mut processes: Option<usize> = None;
    let mut in_table = false;
    for line in output.lines() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix("# Benchmarking ") {
            benchmark = Some(name.trim().to_string());
            processes = None;
            in_table = false;
        } else if let Some(p) = t.strip_prefix("# #processes = ") {
            processes = Some(p.trim().parse().unwrap_or_else(|_| {
                panic!("IMB: a #processes line that does not parse: {line:?}")
            }));
        } else if t.starts_with("#bytes") && benchmark.is_some() {
            in_table = true;
        } else if t.is_empty() || t.starts_with('#') {
            in_table = false;
        } else if in_table {
            let mut f = t.split_whitespace();
            let mut num = |what: &str| -> u64 {
                f.next()
                    .and_then(|x| x.parse().ok())
                    .unwrap_or_else(|| panic!("IMB: no {what} in the table line {line:?}"))
            };
            let bytes = num("#bytes");
            let repetitions = num("#repetitions");
            rows.push(ImbRow {
                benchmark: benchmark.clone().unwrap_or_default(),
                processes: processes
                    .unwrap_or_else(|| panic!("IMB: a table with no #processes line: {line:?}")),
                bytes,
                repetitions,
            });
        }
    }
    rows
}
