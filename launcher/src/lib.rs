//! # psyrun
//!
//! Starts N ranks of a program on this machine, gives each the environment of the psyne launch
//! contract ([`psyne::contract`]), serves the job's key-value store, forwards the ranks' output
//! line by line, and tears the whole job down when one rank fails, psyrun gets a signal, or the
//! job runs too long. `psyrun -n 4 train --epochs 3`.
//!
//! The binary is a thin shell over [`cli_main`]; the work is split by purpose:
//!
//! | module | purpose |
//! |---|---|
//! | [`args`] | the command line, parsed into a checked [`Options`] before anything is done |
//! | [`program`] | finding the program (PATH, then beside psyrun) |
//! | [`placement`] | which rank goes on which host (pure) |
//! | [`hosts`] | host lists from `-H`, hostfiles and Slurm, and placing ranks on them (pure) |
//! | [`job`] | the job id, secret, store and master addresses, each rank's environment |
//! | [`spawn`] | starting a rank in its own process group with a parent-death signal; signalling groups |
//! | [`output`] | forwarding each rank's stdout and stderr line by line, never interleaved |
//! | [`supervise`] | waiting for ranks, signals and deadlines; stopping the job (SIGTERM, grace, SIGKILL) |
//! | [`exit`] | the exit-code table |
//! | [`error`] | failures of psyrun itself |

pub mod args;
pub mod error;
pub mod exit;
pub mod hosts;
pub mod job;
pub mod output;
pub mod placement;
pub mod program;
pub mod spawn;
pub mod supervise;

pub use args::Options;
pub use error::Error;
pub use supervise::{Cause, Outcome, RankReport, Termination};

use output::{Console, Sink, Stream};
use placement::{HostSlots, Placement};
use psyne::auth::Secret;
use psyne::bootstrap::StoreServer;
use std::ffi::OsString;
use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};
use supervise::{Event, ProcessGroups, SignalWatch, Supervisor};

/// How long psyrun waits, once every rank has ended, for the ranks' output pipes to close (a
/// process that left its rank's process group may still hold them open).
pub const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// Stack size of psyrun's helper threads (they only copy bytes or wait for a process).
const HELPER_STACK: usize = 256 * 1024;

/// Parses `args` (as from `std::env::args_os()`), runs the job, reports problems on stderr
/// prefixed `psyrun: `, and returns the exit code (see [`exit`]).
pub fn cli_main<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let options = match Options::parse_from(args) {
        Ok(options) => options,
        Err(e) => {
            e.print();
            return e.exit_code();
        }
    };
    match run(&options) {
        Ok(outcome) => outcome.exit_code(),
        Err(e) => {
            eprintln!("psyrun: {e}");
            e.exit_code()
        }
    }
}

/// Runs a local job: finds the program, places `options.ranks` ranks on this machine, and
/// supervises them (see [`run_placed`]). Nothing is started if the program cannot be found.
pub fn run(options: &Options) -> Result<Outcome, Error> {
    let program = program::resolve_here(&options.program)?;
    let placements = placement::place(&[HostSlots::local(options.ranks)], options.ranks)?;
    let console =
        Console::stdio().map_err(|e| Error::io("duplicating psyrun's stdout and stderr", e))?;
    run_placed(options, &program, &placements, Arc::new(console))
}

/// The `--output-dir` files of one rank: stdout's and stderr's.
type RankFiles = [Option<(File, PathBuf)>; 2];

fn open_output_files(dir: Option<&Path>, n: usize) -> Result<Vec<RankFiles>, Error> {
    let Some(dir) = dir else {
        return Ok((0..n).map(|_| [None, None]).collect());
    };
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("creating --output-dir {}", dir.display()), e))?;
    let open = |rank: usize, stream: Stream| {
        let path = dir.join(format!("rank.{rank}.{}", stream.name()));
        File::create(&path)
            .map(|f| Some((f, path.clone())))
            .map_err(|e| Error::io(format!("creating {}", path.display()), e))
    };
    (0..n)
        .map(|r| Ok([open(r, Stream::Stdout)?, open(r, Stream::Stderr)?]))
        .collect()
}

/// Runs `program` as the ranks in `placements` (all on this machine), supervises them and
/// returns how the job ended. Sets up the store and the secret, starts each rank with its
/// environment, forwards output to `console`, and stops the job as [`supervise`] describes.
/// The calling thread forks the ranks, and their parent-death signal is tied to that thread
/// (see [`spawn`]): it stays in this function until the ranks are gone. Returns an error if a
/// rank could not be started, after stopping the ones that were.
pub fn run_placed(
    options: &Options,
    program: &Path,
    placements: &[Placement],
    console: Arc<Console>,
) -> Result<Outcome, Error> {
    let mut files = open_output_files(options.output_dir.as_deref(), placements.len())?;
    let secret = Secret::generate()?;
    // Refused connections are reported through the console, so the line never splits a rank's.
    let store_console = console.clone();
    let store = StoreServer::bind_logging(
        SocketAddr::new(job::LOCAL_ADDR, 0),
        secret.clone(),
        Arc::new(move |line: &str| store_console.message(line.trim_start_matches("psyne store: "))),
    )?;
    let master_port = job::free_port(job::LOCAL_ADDR, &[store.addr().port()])
        .map_err(|e| Error::io("finding a free port for MASTER_PORT", e))?;
    let info = job::JobInfo {
        job_id: job::new_job_id()?,
        secret_hex: secret.to_hex(),
        store: store.addr().to_string(),
        master_addr: job::LOCAL_ADDR.to_string(),
        master_port,
    };
    let envs = job::rank_envs(placements, &info);

    let (events_tx, events_rx) = mpsc::channel();
    let signals = SignalWatch::start(events_tx.clone())
        .map_err(|e| Error::io("installing psyrun's signal handlers", e))?;
    let (drained_tx, drained_rx) = mpsc::channel();
    let mut supervisor = Supervisor::new(
        &console,
        ProcessGroups,
        options.grace,
        options.timeout,
        events_rx,
    );
    let mut pids = Vec::with_capacity(envs.len());
    let mut streams = 0;
    let mut launch_error = None;
    for (env, files) in envs.iter().zip(files.iter_mut()) {
        let rank = env.rank;
        let started = start_rank(
            rank,
            program,
            &options.args,
            env,
            files,
            options.tag_output,
            &console,
            &events_tx,
            &drained_tx,
        );
        match started {
            Ok((pid, forwarded)) => {
                supervisor.add_rank(rank, pid);
                pids.push(pid);
                streams += forwarded;
            }
            Err((pid, e)) => {
                if let Some(pid) = pid {
                    // Started but not watchable: it is killed below and not waited for.
                    let _ = spawn::signal_group(pid, libc::SIGKILL);
                }
                launch_error = Some(e);
                break;
            }
        }
    }
    drop((events_tx, drained_tx));
    if launch_error.is_some() {
        if !pids.is_empty() {
            let plural = if pids.len() == 1 { "" } else { "s" };
            console.message(&format!(
                "rank {} could not be started; stopping the {} rank{plural} already running",
                pids.len(),
                pids.len(),
            ));
        }
        supervisor.stop(Cause::LaunchFailed);
    }
    let outcome = supervisor.run();

    // Whatever the ranks left in their process groups goes too, so that nothing outlives the job
    // and the output pipes close.
    for &pid in &pids {
        let _ = spawn::signal_group(pid, libc::SIGKILL);
    }
    drain(&drained_rx, streams, &console);
    drop(signals);
    drop(store);
    // Ranks unlink their shared-memory segments as soon as both ends have mapped them; a rank
    // that died in between leaves one behind, which goes now.
    let prefix = psyne::transport::shm::segment::job_prefix(&info.job_id);
    if let Ok(n) = psyne::transport::shm::segment::remove_job_segments(&prefix) {
        if n > 0 {
            console.message(&format!(
                "removed {n} shared-memory segment(s) the job left in /dev/shm"
            ));
        }
    }
    match launch_error {
        Some(e) => Err(e),
        None => Ok(outcome),
    }
}

/// Starts one rank, its two output forwarders and its waiter. Returns its pid and the number of
/// forwarders started, or the error with the pid if the process was started.
#[allow(clippy::too_many_arguments)]
fn start_rank(
    rank: usize,
    program: &Path,
    args: &[OsString],
    env: &psyne::contract::RankEnv,
    files: &mut RankFiles,
    tag_output: bool,
    console: &Arc<Console>,
    events: &Sender<Event>,
    drained: &Sender<usize>,
) -> Result<(u32, usize), (Option<u32>, Error)> {
    let mut child = spawn::spawn(program, args, env).map_err(|source| {
        (
            None,
            Error::Spawn {
                rank,
                program: program.to_path_buf(),
                source,
            },
        )
    })?;
    let pid = child.id();
    let thread_error = |what: &str, e: std::io::Error| {
        (
            Some(pid),
            Error::io(format!("starting the thread that {what} rank {rank}"), e),
        )
    };
    let prefix = if tag_output {
        format!("[{rank}] ")
    } else {
        String::new()
    };
    let readers: [(Option<Box<dyn std::io::Read + Send>>, Stream); 2] = [
        (
            child
                .stdout
                .take()
                .map(|r| Box::new(r) as Box<dyn std::io::Read + Send>),
            Stream::Stdout,
        ),
        (
            child
                .stderr
                .take()
                .map(|r| Box::new(r) as Box<dyn std::io::Read + Send>),
            Stream::Stderr,
        ),
    ];
    let mut forwarded = 0;
    for ((reader, stream), file) in readers.into_iter().zip(files.iter_mut()) {
        let Some(reader) = reader else { continue };
        let (console, prefix, file, drained) = (
            console.clone(),
            prefix.clone(),
            file.take(),
            drained.clone(),
        );
        std::thread::Builder::new()
            .name(format!("psyrun-{rank}-{}", stream.name()))
            .stack_size(HELPER_STACK)
            .spawn(move || {
                output::forward(
                    reader,
                    Sink {
                        console: &console,
                        stream,
                        prefix,
                        file,
                    },
                );
                let _ = drained.send(rank);
            })
            .map_err(|e| thread_error("forwards the output of", e))?;
        forwarded += 1;
    }
    let events = events.clone();
    std::thread::Builder::new()
        .name(format!("psyrun-wait-{rank}"))
        .stack_size(HELPER_STACK)
        .spawn(move || {
            let termination = match child.wait() {
                Ok(status) => Termination::from_status(status),
                Err(e) => Termination::Unknown(format!("waiting for it failed: {e}")),
            };
            let _ = events.send(Event::Exited { rank, termination });
        })
        .map_err(|e| thread_error("waits for", e))?;
    Ok((pid, forwarded))
}

/// Waits up to [`OUTPUT_DRAIN`] for `streams` forwarders to reach end of file.
fn drain(done: &Receiver<usize>, streams: usize, console: &Console) {
    let deadline = Instant::now() + OUTPUT_DRAIN;
    let mut open = streams;
    while open > 0 {
        match done.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(_) => open -= 1,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                console.message(&format!(
                    "{open} output stream(s) still open {OUTPUT_DRAIN:?} after the ranks ended \
                     (a process that left its rank's process group holds them); not waiting"
                ));
                return;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}
