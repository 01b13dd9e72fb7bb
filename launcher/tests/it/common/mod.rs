//! Helpers for psyrun's integration tests: temporary directories and processes that are cleaned
//! up even when a test fails, and waits that always have a deadline.

#![allow(dead_code)]

pub mod mpi;
pub mod slurm;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest any single test step may take before the test fails (generous: the machine is
/// shared and noisy).
pub const DEADLINE: Duration = Duration::from_secs(30);

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "psyrun-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("creating a temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes an executable (or not) file.
    pub fn script(&self, name: &str, text: &str, mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = self.0.join(name);
        std::fs::write(&p, text).expect("writing a script");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The psyrun binary under test.
pub fn psyrun_path() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_psyrun"))
}

/// What MPI ranks started in this (the host's) network namespace are told about networks: use
/// loopback only. The root tests' clusters add and remove veths and bridges on this namespace at
/// any time, and an MPI's network layer that lists the interfaces at `MPI_Init` and opens them
/// fails or hangs when one goes in between:
///
/// - UCX (Debian's MPICH) opens every interface it finds: "init_worker No such device" failed
///   MPICH's init in 4 runs of 30 under such churn, none in 40 with `UCX_NET_DEVICES=lo`.
/// - Intel MPI's libfabric `tcp` provider picks eth0 (so two simulated hosts of one machine talk
///   over its address): under a veth added and removed in a loop, 1 of 25 runs of
///   `pmi_simple::two_hosts_share_one_key_value_space` hung in `MPI_Init` (as once in CI),
///   none of 60 with `FI_TCP_IFACE=lo`.
/// - Open MPI's TCP BTL (between two simulated hosts, `root::pmix`) and its runtime's out-of-band
///   channel (`mpirun`'s daemons) leave out loopback by default and publish every other address,
///   a cluster's bridge (`psybr0`) among them: once, in a fresh machine's suite,
///   `pmix::two_hosts_form_one_world_through_the_exchange` hung 90 s in `MPI_Init` with the
///   clusters up beside it. A bridge address gone between publishing and connecting routes by
///   the default route, off this machine.
///
/// Ranks in a cluster's namespaces do not get these: they talk across their veths.
pub const LOCAL_NET: [(&str, &str); 4] = [
    ("UCX_NET_DEVICES", "lo"),
    ("FI_TCP_IFACE", "lo"),
    ("OMPI_MCA_btl_tcp_if_include", "lo"),
    ("OMPI_MCA_oob_tcp_if_include", "lo"),
];

/// A command running psyrun with `dir` in `$D` for the rank scripts.
pub fn psyrun(dir: &TempDir) -> Command {
    let mut cmd = Command::new(psyrun_path());
    cmd.env("D", dir.path())
        .envs(LOCAL_NET)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// The job exited 0 and each of its `n` ranks reported that every collective matched the oracle
/// (psyne-check's last line).
pub fn assert_every_rank_matched(done: &Done, n: usize) {
    assert_eq!(
        done.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        done.stdout,
        done.stderr
    );
    assert_eq!(
        done.stdout.matches("matches the oracle").count(),
        n,
        "{}",
        done.stdout
    );
}

/// `cmd` run in a mount namespace of its own after `setup` (a shell command, for example a
/// `mount` over a directory), with the same arguments, environment and streams; whatever
/// `setup` mounts goes with the namespace.
pub fn in_mount_namespace(cmd: &Command, setup: &str) -> Command {
    let mut wrapped = Command::new("unshare");
    wrapped
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!("{setup} && exec \"$@\""))
        .arg("sh")
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in cmd.get_envs() {
        match value {
            Some(v) => wrapped.env(key, v),
            None => wrapped.env_remove(key),
        };
    }
    wrapped
}

/// Text a stream produced so far, read by a background thread.
#[derive(Clone, Default)]
pub struct Capture {
    buf: Arc<Mutex<Vec<u8>>>,
    eof: Arc<AtomicBool>,
}

impl Capture {
    /// Reads `r` in the background; `None` captures nothing.
    pub fn start(r: Option<impl Read + Send + 'static>) -> Capture {
        let c = Capture::default();
        let Some(mut r) = r else {
            c.eof.store(true, Ordering::SeqCst);
            return c;
        };
        let c2 = c.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            while let Ok(n) = r.read(&mut buf) {
                if n == 0 {
                    break;
                }
                c2.buf.lock().unwrap().extend_from_slice(&buf[..n]);
            }
            c2.eof.store(true, Ordering::SeqCst);
        });
        c
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buf.lock().unwrap()).into_owned()
    }

    /// Waits (at most 10 s) for end of file, then returns everything.
    pub fn finish(&self) -> String {
        eventually(
            Duration::from_secs(10),
            "the end of psyrun's output",
            || self.eof.load(Ordering::SeqCst),
        );
        self.text()
    }
}

/// A running psyrun: SIGKILLed on drop unless it was waited for (its ranks then die by their
/// parent-death signal), and the rank pids recorded in its directory are killed too.
pub struct Job {
    pub child: Child,
    pub stdout: Capture,
    pub stderr: Capture,
    pid_dir: Option<PathBuf>,
    reaped: bool,
}

/// psyrun's result.
pub struct Done {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Done {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

impl Job {
    /// Starts `cmd` (made by [`psyrun`]); ranks that write `$D/pid.RANK` are cleaned up on drop.
    pub fn start(mut cmd: Command, dir: &TempDir) -> Job {
        let mut child = cmd.spawn().expect("starting psyrun");
        let stdout = Capture::start(child.stdout.take());
        let stderr = Capture::start(child.stderr.take());
        Job {
            child,
            stdout,
            stderr,
            pid_dir: Some(dir.path().to_path_buf()),
            reaped: false,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill takes plain integers; the pid is our own unreaped child, so it cannot
        // have been reused.
        let sent = unsafe { libc::kill(self.pid(), sig) };
        assert_eq!(sent, 0, "signalling psyrun");
    }

    /// Waits until `n` ranks recorded their pids (at most `limit`) and returns them; if psyrun
    /// exits first, or the limit passes, panics with what psyrun printed.
    pub fn wait_for_pids_within(&mut self, n: usize, limit: Duration) -> Vec<i32> {
        let dir = self
            .pid_dir
            .clone()
            .expect("a job started with a directory");
        let until = Instant::now() + limit;
        loop {
            let pids = rank_pids(&dir);
            if pids.len() >= n {
                return pids;
            }
            if let Some(status) = self.child.try_wait().expect("waiting for psyrun") {
                self.reaped = true;
                panic!(
                    "psyrun exited ({status}) before {n} ranks recorded their pids ({} did); \
                     stderr:\n{}",
                    pids.len(),
                    self.stderr.finish()
                );
            }
            assert!(
                Instant::now() < until,
                "timed out after {limit:?} waiting for {n} rank pid files ({} there); \
                 psyrun's stderr so far:\n{}",
                pids.len(),
                self.stderr.text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// [`Job::wait_for_pids_within`] the usual [`DEADLINE`].
    pub fn wait_for_pids(&mut self, n: usize) -> Vec<i32> {
        self.wait_for_pids_within(n, DEADLINE)
    }

    /// Waits for psyrun to exit, at most `limit`; panics (and the drop kills everything) past it.
    pub fn wait(self, limit: Duration) -> Done {
        self.wait_or_not(limit).unwrap_or_else(|job| {
            panic!(
                "psyrun did not exit within {limit:?}; stderr so far:\n{}",
                job.stderr.text()
            )
        })
    }

    /// Waits for the process to exit, at most `limit`: what it did, or the job still running.
    pub fn wait_or_not(mut self, limit: Duration) -> Result<Done, Job> {
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("waiting for psyrun") {
                break s;
            }
            if start.elapsed() > limit {
                return Err(self);
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        self.reaped = true;
        let elapsed = start.elapsed();
        // psyrun alone holds these pipes (its copies of them are close-on-exec), so they end now.
        Ok(Done {
            status,
            stdout: self.stdout.finish(),
            stderr: self.stderr.finish(),
            elapsed,
        })
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Some(dir) = &self.pid_dir {
            for pid in rank_pids(dir) {
                kill_if_sleep(pid);
            }
        }
    }
}

/// Runs psyrun to completion (at most [`DEADLINE`]).
pub fn run(cmd: Command, dir: &TempDir) -> Done {
    Job::start(cmd, dir).wait(DEADLINE)
}

/// The pids ranks recorded as `$D/pid.RANK`.
pub fn rank_pids(dir: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("pid.") && name[4..].parse::<u32>().is_ok()
        })
        .filter_map(|e| std::fs::read_to_string(e.path()).ok()?.trim().parse().ok())
        .collect()
}

/// The shell lines that record this rank's pid atomically (write, then rename).
pub const RECORD_PID: &str =
    r#"echo $$ > "$D/tmp.$PSY_RANK" && mv "$D/tmp.$PSY_RANK" "$D/pid.$PSY_RANK""#;

/// Shell lines that wait (polling, at most about 20 s) until `n` ranks recorded their pids.
pub fn wait_for_pids_sh(n: usize) -> String {
    format!(
        r#"i=0; while [ "$(ls "$D" | grep -c '^pid\.[0-9]*$')" -lt {n} ]; do i=$((i+1)); [ $i -gt 1000 ] && exit 99; sleep 0.02; done"#
    )
}

/// Polls `what` until it holds, at most `limit`.
pub fn eventually(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !cond() {
        assert!(
            Instant::now() < until,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The process state letter from /proc/PID/stat, or None if there is no such process.
pub fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The process's command name from /proc/PID/comm (`sleep`, `salloc`, ...), empty if there is no
/// such process.
pub fn command_name(pid: i32) -> String {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    comm.trim().to_string()
}

/// No such process, or only a zombie waiting for whoever reaps it.
pub fn gone(pid: i32) -> bool {
    matches!(state(pid), None | Some('Z') | Some('X'))
}

fn kill_if_sleep(pid: i32) {
    if command_name(pid) == "sleep" && !gone(pid) {
        // SAFETY: kill takes plain integers; the pid was checked to be a live `sleep` a moment
        // ago, which is what the test's ranks exec.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// The pids of `pid`'s descendants: its children, theirs, and so on.
pub fn descendants(pid: i32) -> Vec<i32> {
    let mut found = children(pid);
    let mut next = 0;
    while next < found.len() {
        let below = children(found[next]);
        found.extend(below);
        next += 1;
    }
    found
}

/// The pids of `pid`'s children (a launcher's ranks).
pub fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

/// The command that builds, before the tests, every program they run (scripts/ci/test.sh runs it):
/// the same profile and features as the tests, so nothing is compiled twice.
pub const BUILD_COMMAND: &str = "cargo build --workspace --bins --examples --all-features";

/// The example binary `name` of psyne's `examples/`, built beside the psyrun under test by the
/// test command ([`built`]).
pub fn example(name: &str) -> PathBuf {
    built(&format!("examples/{name}"))
}

/// A program of this workspace that the test command builds before the tests (psyne's examples,
/// `train`): `rel` beside the psyrun under test (`train`, `examples/allreduce`). Tests never
/// build it themselves; when it is missing, the test fails naming the command that builds it.
pub fn built(rel: &str) -> PathBuf {
    let psyrun = psyrun_path();
    let path = psyrun.parent().unwrap_or(Path::new(".")).join(rel);
    assert!(
        path.is_file(),
        "{} is not built: run `{BUILD_COMMAND}` first (scripts/ci/test.sh does)",
        path.display()
    );
    path
}

/// An exclusive lock on the SSH test cluster's fixed names (bridge, subnet, namespaces), held
/// until dropped, across every test process on this machine (flock on a file in /tmp).
pub struct ClusterLock(std::fs::File);

impl ClusterLock {
    /// Waits (at most twenty minutes: the root tier's tests queue for it, about five minutes of
    /// cluster tests in all) for the lock.
    pub fn take() -> ClusterLock {
        use std::os::fd::AsRawFd;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open("/tmp/psyne-cluster.lock")
            .expect("opening the cluster lock file");
        eventually(
            Duration::from_secs(1200),
            "the SSH test cluster lock",
            || {
                // SAFETY: flock takes a descriptor we own (alive for the call) and plain flags.
                unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
            },
        );
        ClusterLock(file)
    }
}

/// An exclusive lock on running MPI programs, held until dropped, across every test (and test
/// process) on this machine (flock on a file in /tmp): MPI libraries leave files in /dev/shm that
/// the MPI tests count and clean up by name, so no two MPI jobs run at once. Taken after the
/// cluster's lock by a test that needs both.
pub struct MpiLock(std::fs::File);

impl MpiLock {
    /// Waits for the lock (as long as the job holding it takes: each has its own deadline).
    pub fn take() -> MpiLock {
        use std::os::fd::AsRawFd;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open("/tmp/psyne-mpi.lock")
            .expect("opening the MPI lock file");
        // SAFETY: flock takes a descriptor we own (alive for the call) and plain flags.
        while unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            let e = std::io::Error::last_os_error();
            assert_eq!(
                e.kind(),
                std::io::ErrorKind::Interrupted,
                "locking MPI: {e}"
            );
        }
        MpiLock(file)
    }
}

/// Runs one of the repository's scripts (`scripts/PATH`, e.g. `cluster/cluster.sh`) with `args`
/// under `timeout 120`, and fails the test with its output if it does not succeed.
pub fn run_script<S: AsRef<std::ffi::OsStr>>(name: &str, args: impl IntoIterator<Item = S>) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts")
        .join(name);
    let out = Command::new("timeout")
        .arg("120")
        .arg(&script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{name} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs a launcher other than psyrun (`mpirun`, `srun`) with `cmd` to completion, at most
/// `limit`. Past it: SIGTERM to the launcher (which then ends its ranks), up to 10 s, then SIGKILL
/// to it and to the children it had; and the test fails.
pub fn run_launcher(cmd: Command, dir: &TempDir, limit: Duration) -> Done {
    let mut job = Job::start(cmd, dir);
    let start = Instant::now();
    while job
        .child
        .try_wait()
        .expect("waiting for the launcher")
        .is_none()
    {
        if start.elapsed() > limit {
            let ranks = children(job.pid());
            job.signal(libc::SIGTERM);
            eventually_or_not(Duration::from_secs(10), || {
                job.child.try_wait().ok().flatten().is_some()
            });
            let _ = job.child.kill();
            let _ = job.child.wait();
            for pid in ranks {
                // SAFETY: kill takes plain integers; these were the launcher's children a moment
                // ago (a rank that already exited was reaped by the launcher, or by init).
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            panic!(
                "{:?} did not finish within {limit:?}; killed.\nstdout:\n{}\nstderr:\n{}",
                job.child.id(),
                job.stdout.text(),
                job.stderr.text()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    job.wait(Duration::from_secs(1))
}

/// Polls `cond` until it holds or `limit` passes; says which.
pub fn eventually_or_not(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while !cond() {
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Whether `program` is on `PATH`.
/// `mpirun -n N` as this machine needs it (`--allow-run-as-root`: tests run as root in CI;
/// `--oversubscribe`: more ranks than its 2 cores), with `PSY_TIMEOUT=60` and `env` for every
/// rank; the program and its arguments are the caller's to add.
pub fn mpirun(n: usize, env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new("mpirun");
    cmd.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-n",
        &n.to_string(),
    ])
    .env("PSY_TIMEOUT", "60")
    .envs(LOCAL_NET)
    .envs(env.iter().copied());
    cmd
}

pub fn on_path(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A rank body that starts a background `sleep 300` (a grandchild of the launcher, in the rank's
/// process group), records its pid as `$D/gc.RANK` (atomically) and waits for it.
pub const GRANDCHILD: &str = r#"sleep 300 & echo $! > "$D/gctmp.$PSY_RANK" && mv "$D/gctmp.$PSY_RANK" "$D/gc.$PSY_RANK"; wait"#;

/// The start time (field 22 of /proc/PID/stat, in clock ticks since boot) of a live process.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// Processes known by pid and start time (so a reused pid is never mistaken for them), killed on
/// drop if still alive: a test that fails leaves none of them behind.
pub struct Known(pub Vec<(i32, u64)>);

impl Known {
    /// Waits until `n` ranks wrote `$D/gc.RANK` (see [`GRANDCHILD`]) and notes those processes.
    pub fn grandchildren(dir: &TempDir, n: usize) -> Known {
        let mut known = Known(Vec::new());
        eventually(DEADLINE, &format!("{n} grandchild pid files"), || {
            known.0 = (0..n)
                .filter_map(|r| {
                    let text = std::fs::read_to_string(dir.path().join(format!("gc.{r}"))).ok()?;
                    let pid: i32 = text.trim().parse().ok()?;
                    Some((pid, start_time(pid)?))
                })
                .collect();
            known.0.len() == n
        });
        known
    }

    /// Whether process `pid` that started at `start` is gone (or a zombie, or its pid reused).
    fn is_gone(pid: i32, start: u64) -> bool {
        gone(pid) || start_time(pid) != Some(start)
    }

    /// Waits (at most `limit`) until every one of them is gone; fails the test naming survivors.
    pub fn assert_gone(&self, limit: Duration) {
        let all_gone =
            eventually_or_not(limit, || self.0.iter().all(|&(p, s)| Known::is_gone(p, s)));
        let left: Vec<i32> = self
            .0
            .iter()
            .filter(|&&(p, s)| !Known::is_gone(p, s))
            .map(|&(p, _)| p)
            .collect();
        assert!(all_gone, "still running {limit:?} later: pids {left:?}");
    }
}

impl Drop for Known {
    fn drop(&mut self) {
        for &(pid, start) in &self.0 {
            if !Known::is_gone(pid, start) {
                // SAFETY: kill takes plain integers; the pid names the process we noted (same
                // start time) a moment ago.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// Ten MiB: the length of the long lines of [`long_lines_sh`].
pub const LONG: usize = 10 << 20;

/// A rank body: a short line, a `len`-byte line of the rank's letter (`a` for rank 0), a short
/// line; then, once `$D/go` exists, a last line without a newline.
pub fn long_lines_sh(len: usize) -> String {
    format!(
        r#"c=$(printf "\\$(printf %o $((97 + PSY_RANK)))"); echo "R$PSY_RANK start"
head -c {len} /dev/zero | tr '\0' "$c"; echo; echo "R$PSY_RANK end"
i=0; while [ ! -e "$D/go" ]; do i=$((i+1)); [ $i -gt 1000 ] && exit 99; sleep 0.02; done
printf "R$PSY_RANK tail""#
    )
}

/// Checks `--tag-output` output of ranks running [`long_lines_sh`] on `hosts` (one per rank):
/// each rank's four lines, whole, tagged once, in order, and nothing else.
pub fn check_long_lines(stdout: &str, len: usize, hosts: &[&str]) {
    let mut lines: Vec<Vec<&str>> = vec![Vec::new(); hosts.len()];
    for line in stdout.split_inclusive('\n') {
        let tag = line.strip_prefix('[').and_then(|l| l.split_once("] "));
        let (tag, rest) = tag.unwrap_or_else(|| {
            panic!(
                "an untagged line of {} bytes: {:?}",
                line.len(),
                &line[..line.len().min(60)]
            )
        });
        let (host, rank) = tag.split_once("][").expect("a [host][rank] tag");
        let rank: usize = rank.parse().expect("a rank number");
        assert_eq!(host, hosts[rank]);
        lines[rank].push(rest);
    }
    for (rank, got) in lines.iter().enumerate() {
        let c = char::from(b'a' + rank as u8).to_string();
        let want = [
            format!("R{rank} start\n"),
            format!("{}\n", c.repeat(len)),
            format!("R{rank} end\n"),
            format!("R{rank} tail\n"),
        ];
        let lens: Vec<usize> = got.iter().map(|l| l.len()).collect();
        assert_eq!(got.len(), want.len(), "rank {rank}: line lengths {lens:?}");
        for (g, w) in got.iter().zip(&want) {
            assert!(
                *g == w,
                "rank {rank}: a line of {} bytes, not {}",
                g.len(),
                w.len()
            );
        }
    }
}

/// Caps `cmd`'s address space at `bytes` (RLIMIT_AS), so that a test of a bug that reads until
/// memory runs out fails quickly on this shared machine instead of exhausting it.
pub fn limit_memory(cmd: &mut Command, bytes: u64) {
    use std::os::unix::process::CommandExt;
    let lim = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // SAFETY: the hook makes one async-signal-safe system call (setrlimit) with a limit built
    // before the fork, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_AS, &lim) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Files in /dev/shm whose names carry job `job`'s prefix (what a job must not leave behind).
pub fn segments_of(job: &str) -> Vec<String> {
    let prefix = psyne::internal::job_prefix(job);
    let prefix = prefix.trim_start_matches('/').to_string();
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// The job ids ranks printed as `rank R: job JOB` (psyne-check's fault and trial modes), each
/// once, in the order first seen: one per attempt of a restarted job.
pub fn job_ids(stdout: &str) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for id in stdout.lines().filter_map(|l| l.split(": job ").nth(1)) {
        let id = id.trim().to_string();
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids
}

/// A TCP port on loopback reserved for one test (`MASTER_PORT`, which a program binds itself), until
/// dropped. A port the kernel hands out for `:0` or for an outgoing connection could be taken by
/// anyone between the test's check and the program's bind; this one is below the kernel's
/// ephemeral range (so the kernel never hands it out), free when checked, and held by a lock
/// file in /tmp that every test process on this machine takes before using it.
pub struct ReservedPort {
    port: u16,
    _lock: std::fs::File,
}

impl ReservedPort {
    /// The port number.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// The ports [`free_port`] draws from: the 8192 below the kernel's ephemeral range.
fn reservable_ports() -> std::ops::Range<u16> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    low.saturating_sub(8192).max(1024)..low
}

/// Reserves a free TCP port on loopback (see [`ReservedPort`]).
pub fn free_port() -> ReservedPort {
    use std::os::fd::AsRawFd;
    static TRIES: AtomicUsize = AtomicUsize::new(0);
    let ports = reservable_ports();
    let span = usize::from(ports.end - ports.start);
    let dir = std::env::temp_dir().join("psyne-test-ports");
    std::fs::create_dir_all(&dir).expect("creating the port lock directory");
    let start = std::process::id() as usize * 7919;
    for _ in 0..span {
        let n = TRIES.fetch_add(1, Ordering::SeqCst);
        let port = ports.start + ((start + n) % span) as u16;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(port.to_string()))
            .expect("opening a port lock file");
        // SAFETY: flock takes a descriptor we own (alive for the call) and plain flags.
        let locked = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 };
        if locked && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return ReservedPort { port, _lock: lock };
        }
    }
    panic!("no free port in {ports:?}");
}

/// Asserts that the job whose ranks printed their job id in `stdout` left no shared-memory
/// segment in /dev/shm; `ctx` says what ran.
pub fn assert_no_segments_left(stdout: &str, ctx: &str) {
    let job = job_ids(stdout).pop().expect("ranks print their job id");
    assert!(!job.is_empty());
    let left = segments_of(&job);
    assert!(
        left.is_empty(),
        "segments left in /dev/shm: {left:?}\n{ctx}"
    );
}

/// The processes whose environment holds `PSYRUN_TEST_TAG=tag` (ranks given it with `-x`, and
/// what they start).
pub fn tagged(tag: &str) -> Vec<i32> {
    let needle = format!("PSYRUN_TEST_TAG={tag}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| !gone(*pid))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == needle.as_bytes()))
        })
        .collect()
}
