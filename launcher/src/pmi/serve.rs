//! Choosing what each program of a job is served ([`choose`]) and running one host's services
//! for a job ([`HostServing`]): started before the first rank, asked for each rank's access just
//! before it starts, stopped when the job ends.

use super::detect::{self, Family, Found};
use super::{Exchange, HostService, Interface, JobMap, MpiChoice, RankAccess, Report, Reporter};
use std::ffi::OsString;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What psyrun serves one program of a job, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// The interfaces its ranks get (none: `--mpi none`).
    pub interfaces: Vec<Interface>,
    /// The MPI it was found to use, if any.
    pub mpi: Option<Found>,
}

impl Served {
    /// How `--dry-run` says it: `PMIx (Open MPI: libmpi.so.40)`.
    pub fn describe(&self) -> String {
        let what: Vec<&str> = self
            .interfaces
            .iter()
            .map(|i| match i {
                Interface::Simple => "PMI-1/PMI-2 on PMI_FD",
                Interface::Pmix => "PMIx",
            })
            .collect();
        let what = if what.is_empty() {
            "no MPI interface (--mpi none)".to_string()
        } else {
            what.join(" and ")
        };
        match &self.mpi {
            Some(f) => format!("{what} ({}: {})", f.family.name(), f.via),
            None => format!("{what} (no MPI library found in the program)"),
        }
    }

    /// Whether its ranks are MPI processes psyrun knows to expect on the interface.
    pub fn expects_mpi(&self) -> bool {
        self.mpi.is_some() && !self.interfaces.is_empty()
    }
}

/// What `--mpi choice` serves `program` (run with `args`); an error (a usage error: nothing has
/// started) when the choice cannot serve the MPI the program was built with.
pub fn choose(choice: MpiChoice, program: &Path, args: &[OsString]) -> Result<Served, String> {
    if choice == MpiChoice::None {
        return Ok(Served {
            interfaces: Vec::new(),
            mpi: None,
        });
    }
    let mpi = detect::mpi_of(program, args);
    let family = mpi.as_ref().map(|f| f.family);
    let interfaces =
        match (choice, family) {
            (MpiChoice::Pmix, _) | (MpiChoice::Auto, Some(Family::OpenMpi)) => {
                vec![Interface::Pmix]
            }
            (MpiChoice::Pmi1 | MpiChoice::Pmi2, Some(Family::OpenMpi)) => {
                let via = mpi.as_ref().map_or("", |f| f.via.as_str());
                return Err(format!(
                "--mpi {}: {} is an Open MPI program ({via}), and Open MPI speaks only PMIx to \
                 a launcher; use --mpi pmix (or auto)",
                if choice == MpiChoice::Pmi1 { "pmi1" } else { "pmi2" },
                program.display()
            ));
            }
            _ => vec![Interface::Simple],
        };
    Ok(Served { interfaces, mpi })
}

/// Which ranks of a host have spoken to one of its services.
#[derive(Debug, Default)]
pub struct Spoken(Mutex<Vec<usize>>);

impl Spoken {
    /// Whether `rank` has.
    pub fn has(&self, rank: usize) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&rank)
    }

    fn add(&self, rank: usize) {
        let mut ranks = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !ranks.contains(&rank) {
            ranks.push(rank);
        }
    }
}

/// Whether an MPI rank that ended ever spoke to its service ([`HostServing::silence_check`]).
pub struct SilenceCheck {
    spoken: Arc<Spoken>,
    rank: usize,
    program: std::path::PathBuf,
    served: String,
}

impl SilenceCheck {
    /// What to say, once the rank has ended, if it never spoke to its service.
    pub fn complaint(&self) -> Option<String> {
        if self.spoken.has(self.rank) {
            return None;
        }
        let program = self.program.display();
        Some({
            format!(
                "rank {} ({}) ended without ever contacting the MPI service psyrun gave it \
                 ({}), so it never joined the job's MPI world (if its MPI_Init succeeded, it \
                 ran as a world of one). Likely causes: it ended before MPI_Init, a wrapper \
                 cleared its environment, or its MPI library wants another interface (try \
                 --mpi pmix, pmi1 or pmi2)",
                self.rank, program, self.served
            )
        })
    }
}

/// Whether the program at `path` contains psyne's launch contract (the name of its
/// `PSY_JOB_SECRET` variable): a psyne program. Read once per program file (a debug build is a
/// hundred megabytes), in pieces, and only for programs that link an MPI library.
fn uses_psyne_contract(path: &Path) -> bool {
    static SEEN: Mutex<Vec<(std::path::PathBuf, bool)>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, known)) = seen.iter().find(|(p, _)| p == path) {
        return *known;
    }
    let found = file_contains(path, psyne::contract::JOB_SECRET.as_bytes()).unwrap_or(false);
    seen.push((path.to_path_buf(), found));
    found
}

/// Whether the file at `path` holds `needle` (read in 1 MiB pieces that overlap by the
/// needle's length).
fn file_contains(path: &Path, needle: &[u8]) -> std::io::Result<bool> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut buf = vec![0u8; (1 << 20) + needle.len()];
    let mut kept = 0;
    loop {
        let n = file.read(&mut buf[kept..])?;
        if n == 0 {
            return Ok(false);
        }
        let end = kept + n;
        if buf[..end].windows(needle.len()).any(|w| w == needle) {
            return Ok(true);
        }
        kept = needle.len().min(end);
        buf.copy_within(end - kept..end, 0);
    }
}

/// The services of one host for one job (one attempt of it).
pub struct HostServing {
    services: Vec<(Interface, Box<dyn HostService>)>,
    spoken: Arc<Spoken>,
}

impl HostServing {
    /// Starts a service for each interface in `needed` (each once), for host `node` of `map`,
    /// each with its own `exchange(interface)`; `report` gets every service's reports. Nothing is started if `needed` is empty.
    pub fn start(
        map: &Arc<JobMap>,
        node: usize,
        needed: &[Interface],
        exchange: &dyn Fn(Interface) -> Arc<dyn Exchange>,
        report: Reporter,
        timeout: Duration,
    ) -> Result<HostServing, String> {
        let spoken = Arc::new(Spoken::default());
        let seen = spoken.clone();
        let report: Reporter = Arc::new(move |r: Report| {
            if let Report::Spoke { rank } = r {
                seen.add(rank);
            }
            report(r);
        });
        let mut services: Vec<(Interface, Box<dyn HostService>)> = Vec::new();
        for &interface in needed {
            if services.iter().any(|(i, _)| *i == interface) {
                continue;
            }
            let service = super::start_service(
                interface,
                map.clone(),
                node,
                exchange(interface),
                report.clone(),
                timeout,
            )?;
            services.push((interface, service));
        }
        Ok(HostServing { services, spoken })
    }

    /// For rank `rank` of a job of `world` ranks, running `program` served `served`: a check to
    /// run when it ends, which says whether it never spoke to its service. Only for a program
    /// found to be an MPI program in a job of several ranks, and not a psyne program (one built
    /// with psyne's `mpi` feature links an MPI library but forms its groups through psyrun's
    /// `PSY_*` contract, and calls `MPI_Init` only when asked to).
    pub fn silence_check(
        &self,
        rank: usize,
        served: &Served,
        program: &Path,
        world: usize,
    ) -> Option<SilenceCheck> {
        // Decided here, before the rank runs: reading a large program file must not delay the
        // report of the rank's end.
        let wanted = served.expects_mpi() && world > 1 && !uses_psyne_contract(program);
        wanted.then(|| SilenceCheck {
            spoken: self.spoken.clone(),
            rank,
            program: program.to_path_buf(),
            served: served.describe(),
        })
    }

    /// Removes what the job's MPI libraries left on this host (see [`HostService::leftovers`]);
    /// returns how many files. Only once every rank of the host has ended.
    pub fn remove_leftovers(&self) -> usize {
        self.services
            .iter()
            .flat_map(|(_, s)| s.leftovers())
            .filter(|f| std::fs::remove_file(f).is_ok())
            .count()
    }

    /// Prepares `rank`, served `served`, to start: the variables and descriptor of every
    /// interface it gets.
    pub fn access(&mut self, rank: usize, served: &Served) -> Result<RankAccess, String> {
        let mut access = RankAccess::default();
        for (interface, service) in &mut self.services {
            if !served.interfaces.contains(interface) {
                continue;
            }
            let part = service.rank_access(rank)?;
            access.env.extend(part.env);
            if part.inherit.is_some() {
                access.inherit = part.inherit;
            }
        }
        Ok(access)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_needle_across_a_piece_boundary_is_found() {
        let dir = std::env::temp_dir().join(format!("psyrun-contains-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("f");
        let mut bytes = vec![b'x'; (1 << 20) - 3];
        bytes.extend_from_slice(b"PSY_JOB_SECRET");
        std::fs::write(&file, &bytes).unwrap();
        assert!(file_contains(&file, b"PSY_JOB_SECRET").unwrap());
        assert!(!file_contains(&file, b"PSY_JOB_SECRETS").unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(!uses_psyne_contract(Path::new("/bin/sh")));
    }

    #[test]
    fn none_serves_nothing_and_a_plain_program_gets_pmi() {
        let sh = Path::new("/bin/sh");
        let none = choose(MpiChoice::None, sh, &[]).unwrap();
        assert!(none.interfaces.is_empty() && !none.expects_mpi());
        let auto = choose(MpiChoice::Auto, sh, &[]).unwrap();
        assert_eq!(auto.interfaces, vec![Interface::Simple]);
        assert!(!auto.expects_mpi());
        assert_eq!(
            choose(MpiChoice::Pmix, sh, &[]).unwrap().interfaces,
            vec![Interface::Pmix]
        );
    }
}
