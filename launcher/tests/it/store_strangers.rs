//! psyrun's store under a local stranger's flood: a job of 256 and of 1,024 ranks forms and
//! completes while a process without the job's secret holds 600 connections to the store and
//! says nothing on them (opening another for each the store closes), or connects, writes garbage
//! and closes, again and again, for the whole start. (Before, at most 128 handshakes waited and each new connection pushed out the oldest,
//! so the ranks' own handshakes were pushed out and every rank failed.)
//!
//! The ranks wait at a gate (a FIFO each reads a line from) that the stranger opens once its
//! attack is under way, so the attack always overlaps the ranks' start however fast the job is.

use crate::common;

use common::*;
use std::io::Write;
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One job at a time: each is hundreds of ranks on a machine of few cores.
static ONE_JOB: Mutex<()> = Mutex::new(());

/// Connections the stranger makes before it lets the ranks start.
const GATE_AFTER: usize = 50;
/// psyrun's own limit on the job (`--timeout`); the test waits a little longer.
const JOB_TIMEOUT: Duration = Duration::from_secs(240);

/// `examples/allreduce`, built beside the psyrun under test by the test command.
fn allreduce() -> PathBuf {
    built("examples/allreduce")
}

/// The TCP ports process `pid` listens on (IPv4), found as a stranger on this machine would:
/// its sockets in /proc/PID/fd, their rows in /proc/net/tcp.
fn listening_ports(pid: i32) -> Vec<u16> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let inodes: Vec<String> = fds
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|row| {
            let f: Vec<&str> = row.split_whitespace().collect();
            let listening = f.get(3) == Some(&"0A");
            let ours = f.get(9).is_some_and(|i| inodes.iter().any(|n| n == i));
            let port = f.get(1)?.rsplit(':').next()?;
            (listening && ours)
                .then(|| u16::from_str_radix(port, 16).ok())
                .flatten()
        })
        .collect()
}

/// Whether the other end has not closed `s` (non-blocking): reads what waits, and looks for the
/// end.
fn still_open(s: &TcpStream) -> bool {
    use std::io::Read;
    let mut buf = [0u8; 64];
    loop {
        match (&*s).read(&mut buf) {
            Ok(0) => return false,
            Ok(_) => continue,
            Err(e) => return e.kind() == std::io::ErrorKind::WouldBlock,
        }
    }
}

/// How the stranger attacks.
#[derive(Clone, Copy, Debug)]
enum Attack {
    /// Holds this many connections and says nothing on them until the job ends (opening a new
    /// one for each the store closes).
    Silent(usize),
    /// Connects, writes garbage and closes, over and over until the job ends.
    Garbage,
}

/// Runs `psyrun -n ranks examples/allreduce 1` while a stranger attacks its store; asserts the
/// job succeeded on every rank and that the stranger really attacked during the start.
fn job_survives(ranks: usize, attack: Attack) {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new(&format!("strangers-{ranks}"));
    let gate = dir.path().join("gate");
    let path = std::ffi::CString::new(gate.to_string_lossy().as_bytes()).unwrap();
    // SAFETY: `path` is a valid NUL-terminated string for the duration of the call.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0, "mkfifo");
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", &ranks.to_string(), "--timeout"])
        .arg(JOB_TIMEOUT.as_secs().to_string())
        .args(["sh", "-c", r#"read go < "$D/gate" && exec "$0" "$@""#])
        .arg(allreduce())
        .arg("1");
    let job = Job::start(cmd, &dir);
    let pid = job.pid();
    let over = Arc::new(AtomicBool::new(false));
    let done_attacking = Arc::new(AtomicUsize::new(0));
    let stranger = {
        let (over, count, gate_path) = (over.clone(), done_attacking.clone(), gate.clone());
        std::thread::spawn(move || {
            let mut port = None;
            eventually(DEADLINE, "psyrun listens for its store", || {
                port = listening_ports(pid).first().copied();
                port.is_some() || over.load(Ordering::SeqCst)
            });
            let port = port?;
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            // Opened (the ranks go) once the attack has begun.
            let mut gate = None;
            let mut open_gate_at = |made: usize| {
                if made == GATE_AFTER {
                    let mut g = std::fs::OpenOptions::new()
                        .write(true)
                        .open(&gate_path)
                        .ok()?;
                    g.write_all(&b"go\n".repeat(ranks)).ok()?;
                    gate = Some(g);
                }
                Some(())
            };
            match attack {
                Attack::Silent(n) => {
                    let mut held: Vec<TcpStream> = Vec::with_capacity(n);
                    let mut made = 0;
                    while !over.load(Ordering::SeqCst) {
                        // Drop what the store closed, then open connections until n are held.
                        held.retain(still_open);
                        while held.len() < n && !over.load(Ordering::SeqCst) {
                            let Ok(s) = TcpStream::connect(addr) else {
                                break;
                            };
                            let _ = s.set_nonblocking(true);
                            held.push(s);
                            made += 1;
                            count.store(made, Ordering::SeqCst);
                            open_gate_at(made);
                        }
                        std::thread::park_timeout(Duration::from_millis(5));
                    }
                }
                Attack::Garbage => {
                    let mut made = 0;
                    while !over.load(Ordering::SeqCst) {
                        if let Ok(mut s) = TcpStream::connect(addr) {
                            let _ = s.write_all(&[0x55; 64]);
                            made += 1;
                            count.store(made, Ordering::SeqCst);
                            open_gate_at(made);
                        }
                    }
                }
            }
            gate
        })
    };
    let done = job.wait(JOB_TIMEOUT + DEADLINE);
    let attacked = done_attacking.load(Ordering::SeqCst);
    over.store(true, Ordering::SeqCst);
    let gate = stranger.join().expect("the stranger");
    assert!(gate.is_some(), "the stranger never opened the gate");
    let ok = done.stdout.lines().filter(|l| l.ends_with(": OK")).count();
    assert!(
        done.code() == Some(0) && ok == ranks,
        "{ranks} ranks under {attack:?}: exit {:?}, {ok} ranks OK\nstderr:\n{}",
        done.code(),
        done.stderr.lines().take(20).collect::<Vec<_>>().join("\n")
    );
    assert!(
        attacked >= GATE_AFTER,
        "the stranger made only {attacked} connections during the start of {ranks} ranks"
    );
}

#[test]
fn a_job_of_256_ranks_starts_while_a_stranger_holds_600_silent_connections_to_its_store() {
    job_survives(256, Attack::Silent(600));
}

#[test]
fn a_job_of_256_ranks_starts_while_a_stranger_floods_its_store_with_garbage() {
    job_survives(256, Attack::Garbage);
}

#[test]
fn a_job_of_1024_ranks_starts_while_a_stranger_holds_600_silent_connections_to_its_store() {
    job_survives(1024, Attack::Silent(600));
}

#[test]
fn a_job_of_1024_ranks_starts_while_a_stranger_floods_its_store_with_garbage() {
    job_survives(1024, Attack::Garbage);
}
