//! psyrun's PMIx server with real Open MPI ranks: `tests/mpi_programs/ring.c` built with Open
//! MPI's `mpicc.openmpi` and started by a minimal spawner here (`Command` with the environment
//! [`PmixService`]'s `rank_access` gives; psyrun's real spawner is tested elsewhere), -n 1, 2
//! and 4 forming one world, abort reported with its rank and code, and the connect and finalize
//! reports arriving.
//!
//! Needs `mpicc.openmpi` (Debian: openmpi-bin, libopenmpi-dev) and libpmix2; without them each
//! test says so and passes. Run with `cargo test -p psyrun --test pmix`.
//!
//! Every wait has a deadline and waits for an event (a line, an exit, a report); every rank
//! started here is SIGKILLed and reaped when a test ends, passing or not.

mod common;

use common::TempDir;
use psyrun::pmi::pmix::PmixService;
use psyrun::pmi::{Alone, Exchange, HostRanks, HostService, JobMap, Report, Reporter};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long one job may take (a few seconds are normal; the machine is shared and noisy).
const DEADLINE: Duration = Duration::from_secs(90);

/// One PMIx service runs at a time in a process.
static ONE_SERVER: Mutex<()> = Mutex::new(());

fn one_server() -> std::sync::MutexGuard<'static, ()> {
    ONE_SERVER.lock().unwrap_or_else(|p| p.into_inner())
}

/// Builds ring.c with Open MPI into `dir`; `None` (the test then passes, saying why) where Open
/// MPI is not installed.
fn build_ring(dir: &Path) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mpi_programs/ring.c");
    let out = dir.join("ring");
    match Command::new("mpicc.openmpi")
        .arg("-O1")
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .output()
    {
        Ok(o) if o.status.success() => Some(out),
        Ok(o) => panic!(
            "mpicc.openmpi failed:\n{}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            eprintln!("skipped: no mpicc.openmpi ({e}); install openmpi-bin and libopenmpi-dev");
            None
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// A job of `hosts` (names and rank counts), ranks numbered host after host.
fn job_map(tag: &str, tmp: &Path, hosts: &[(&str, usize)]) -> Arc<JobMap> {
    let mut next = 0;
    let hosts: Vec<HostRanks> = hosts
        .iter()
        .map(|&(name, n)| {
            let ranks = (next..next + n).collect();
            next += n;
            HostRanks {
                name: name.to_string(),
                ranks,
            }
        })
        .collect();
    Arc::new(JobMap {
        job_id: format!("psyrun-test-{tag}-{}", std::process::id()),
        world_size: next,
        hosts,
        appnum: vec![0; next],
        tmpdir: tmp.join("job"),
    })
}

/// A reporter that sends into a channel.
fn reporter() -> (Reporter, Receiver<Report>) {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let report: Reporter = Arc::new(move |r| {
        let _ = tx.lock().unwrap_or_else(|p| p.into_inner()).send(r);
    });
    (report, rx)
}

/// What the ranks did, as it happens.
enum Event {
    Line { rank: usize, text: String },
    Exited { rank: usize },
}

/// Ranks started here: SIGKILLed and reaped on drop.
struct Ranks {
    children: Vec<(usize, Child)>,
    tx: Sender<Event>,
    rx: Receiver<Event>,
}

impl Ranks {
    fn new() -> Ranks {
        let (tx, rx) = mpsc::channel();
        Ranks {
            children: Vec::new(),
            tx,
            rx,
        }
    }

    /// Starts `program args` as `rank` with `service`'s environment for it.
    fn start(&mut self, service: &mut PmixService, rank: usize, program: &Path, args: &[&str]) {
        let access = service.rank_access(rank).expect("rank_access");
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy().into_owned();
            if k.starts_with("PMIX_") || k.starts_with("OMPI_") {
                cmd.env_remove(k);
            }
        }
        cmd.envs(access.env);
        for (k, v) in std::env::vars() {
            if let Some(k) = k.strip_prefix("DEBUG_RANK_") {
                cmd.env(k, &v);
            }
            if k == "DEBUG_UNSET" {
                for k in v.split(',') {
                    cmd.env_remove(k);
                }
            }
        }
        let mut child = cmd.spawn().expect("starting a rank");
        self.forward(rank, child.stdout.take());
        self.forward(rank, child.stderr.take());
        watch_exit(rank, child.id() as i32, self.tx.clone());
        self.children.push((rank, child));
    }

    fn forward(&self, rank: usize, r: Option<impl Read + Send + 'static>) {
        let Some(r) = r else { return };
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(r).lines().map_while(Result::ok) {
                let _ = tx.send(Event::Line { rank, text: line });
            }
        });
    }

    /// Waits for every rank's exit (and all lines until then); the lines, the exit codes by
    /// rank. Panics with everything seen at the deadline.
    fn wait_all(&mut self, limit: Duration) -> (Vec<(usize, String)>, Vec<Option<i32>>) {
        let until = Instant::now() + limit;
        let mut lines = Vec::new();
        let mut exited = 0;
        while exited < self.children.len() {
            let left = until.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(Event::Line { rank, text }) => lines.push((rank, text)),
                Ok(Event::Exited { .. }) => exited += 1,
                Err(_) => panic!("ranks still running after {limit:?}; output:\n{lines:#?}"),
            }
        }
        let codes = self.reap();
        if std::env::var_os("DEBUG_LINES").is_some() {
            for (r, l) in &lines {
                eprintln!("[{r}] {l}");
            }
        }
        // The last lines may trail the exit: drain what is left of the pipes.
        while let Ok(Event::Line { rank, text }) = self.rx.recv_timeout(Duration::from_millis(200))
        {
            lines.push((rank, text));
        }
        (lines, codes)
    }

    /// Waits for a line from any rank that satisfies `want`; the lines seen until then.
    fn wait_line(
        &mut self,
        limit: Duration,
        want: impl Fn(usize, &str) -> bool,
    ) -> Vec<(usize, String)> {
        let until = Instant::now() + limit;
        let mut lines = Vec::new();
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(Event::Line { rank, text }) => {
                    let hit = want(rank, &text);
                    lines.push((rank, text));
                    if hit {
                        return lines;
                    }
                }
                Ok(Event::Exited { .. }) => {}
                Err(_) => panic!("no such line after {limit:?}; output:\n{lines:#?}"),
            }
        }
    }

    /// Exit codes in start order (`None`: killed by a signal); reaps everyone.
    fn reap(&mut self) -> Vec<Option<i32>> {
        self.children
            .drain(..)
            .map(|(_, mut child)| {
                let _ = child.kill();
                child.wait().ok().and_then(|s| s.code())
            })
            .collect()
    }
}

impl Drop for Ranks {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            // Still our unreaped child (reaped only here or in `reap`): the pid is ours.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Tells `tx` when `pid` (our child) has exited, without reaping it (so it stays ours to kill).
fn watch_exit(rank: usize, pid: i32, tx: Sender<Event>) {
    std::thread::spawn(move || {
        // SAFETY: an all-zero siginfo_t is a valid value for waitid to fill.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child `pid`; WNOWAIT leaves it to be reaped by its Child.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 {
            let _ = tx.send(Event::Exited { rank });
        }
    });
}

/// Collects reports until `enough` holds of them, or panics at the deadline.
fn reports_until(
    rx: &Receiver<Report>,
    limit: Duration,
    enough: impl Fn(&[Report]) -> bool,
) -> Vec<Report> {
    let until = Instant::now() + limit;
    let mut seen = Vec::new();
    while !enough(&seen) {
        let left = until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(r) => seen.push(r),
            Err(_) => panic!("reports after {limit:?}: {seen:?}"),
        }
    }
    seen
}

fn every_rank(seen: &[Report], n: usize, f: impl Fn(&Report) -> Option<usize>) -> bool {
    (0..n).all(|r| seen.iter().any(|x| f(x) == Some(r)))
}

/// Runs ring with `n` ranks on one host and checks every rank's line, exit and reports.
fn ring_world(n: usize) {
    let _one = one_server();
    let tmp = TempDir::new(&format!("pmix-ring{n}"));
    let Some(ring) = build_ring(tmp.path()) else {
        return;
    };
    let host = hostname();
    let map = job_map(&format!("ring{n}"), tmp.path(), &[(&host, n)]);
    let (report, reports) = reporter();
    let mut service = PmixService::start(map, 0, Arc::new(Alone), report, DEADLINE).expect("start");
    let dir = service.directory().expect("a directory").to_path_buf();
    assert!(dir.is_dir());
    let mut ranks = Ranks::new();
    for r in 0..n {
        ranks.start(&mut service, r, &ring, &[]);
    }
    let (lines, codes) = ranks.wait_all(DEADLINE);
    for r in 0..n {
        let want = format!("ring ok rank {r} of {n} (node-local peers {n})");
        assert!(
            lines.iter().any(|(rank, l)| *rank == r && *l == want),
            "no {want:?} in\n{lines:#?}"
        );
    }
    assert!(
        codes.iter().all(|c| *c == Some(0)),
        "exit codes {codes:?}\n{lines:#?}"
    );
    let seen = reports_until(&reports, DEADLINE, |seen| {
        every_rank(seen, n, |x| match x {
            Report::Finalized { rank } => Some(*rank),
            _ => None,
        })
    });
    assert!(
        every_rank(&seen, n, |x| match x {
            Report::Spoke { rank } => Some(*rank),
            _ => None,
        }),
        "{seen:?}"
    );
    drop(service);
    assert!(!dir.exists(), "{} left behind", dir.display());
}

#[test]
fn one_rank_is_a_world_of_one() {
    ring_world(1);
}

#[test]
fn two_ranks_form_one_world() {
    ring_world(2);
}

#[test]
fn four_ranks_form_one_world() {
    ring_world(4);
}

#[test]
fn abort_is_reported_with_its_rank_and_code() {
    let _one = one_server();
    let tmp = TempDir::new("pmix-abort");
    let Some(ring) = build_ring(tmp.path()) else {
        return;
    };
    let host = hostname();
    let map = job_map("abort", tmp.path(), &[(&host, 2)]);
    let (report, reports) = reporter();
    let mut service = PmixService::start(map, 0, Arc::new(Alone), report, DEADLINE).expect("start");
    let mut ranks = Ranks::new();
    for r in 0..2 {
        ranks.start(&mut service, r, &ring, &["abort", "1", "7"]);
    }
    let seen = reports_until(&reports, DEADLINE, |seen| {
        seen.iter().any(|r| matches!(r, Report::Abort { .. }))
    });
    let abort = seen.iter().find(|r| matches!(r, Report::Abort { .. }));
    match abort {
        Some(Report::Abort { rank, code, .. }) => assert_eq!((*rank, *code), (1, 7), "{seen:?}"),
        other => panic!("{other:?}"),
    }
    // The launcher ends the job on abort; here the ranks are killed on drop.
    drop(ranks);
    drop(service);
}

/// An [`Exchange`] between the services of one process's test: every host's blob of a round,
/// once all are in.
#[derive(Default)]
struct InMemory {
    hosts: usize,
    rounds: Mutex<std::collections::HashMap<u64, Vec<Option<Vec<u8>>>>>,
    changed: std::sync::Condvar,
}

impl Exchange for InMemory {
    fn all_gather(&self, node: usize, round: u64, blob: Vec<u8>) -> Result<Vec<Vec<u8>>, String> {
        let until = Instant::now() + DEADLINE;
        let mut rounds = self.rounds.lock().unwrap_or_else(|p| p.into_inner());
        rounds
            .entry(round)
            .or_insert_with(|| vec![None; self.hosts])[node] = Some(blob);
        self.changed.notify_all();
        loop {
            let parts = &rounds[&round];
            if parts.iter().all(Option::is_some) {
                return Ok(parts.iter().flatten().cloned().collect());
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("round {round}: hosts missing after {DEADLINE:?}"));
            }
            rounds = self
                .changed
                .wait_timeout(rounds, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

#[allow(dead_code)]
fn in_memory(hosts: usize) -> Arc<InMemory> {
    Arc::new(InMemory {
        hosts,
        ..InMemory::default()
    })
}
