//! The command line: clap parses it, a `--config` preset fills what flags left unset, and the
//! result is checked into a plain [`Command`] before anything runs.
//!
//! ```text
//! psybench [-n N] [--config FILE] <allreduce|broadcast|reduce|allgather|reducescatter|alltoall|
//!                                  gather|scatter|barrier|sendrecv|all> [sweep flags]
//! psybench [-n N] [--config FILE] check [COLLECTIVE...] [sweep flags]
//! psybench plot INPUT... [-o OUT.png]
//! psybench compare A [B]
//! psybench peak [--size SIZE] [--iters N]
//! psybench [-n N] tune [COLLECTIVE...] [--output FILE] [--margin PCT] [sweep flags]
//! ```
//!
//! With `--config` the subcommand may be left out when the preset names a `collective`.
//! Defaults: sizes `8:256M` (`check`: `1,1K,64K,1M`; barrier alone: one row of size 0), factor 2,
//! dtype f32, op sum, root 0, algo auto, transport auto, iterations by size
//! ([`crate::sizes::default_iters`]), stream cadence, check on, backend native (`check`: native
//! and, when built with MPI, mpi). Sizes are rounded up to whole elements of the dtype.
//! Errors print like clap's and exit with code 2; `--help` and `--version` exit 0.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use clap::error::ErrorKind;
use clap::{Args, CommandFactory, Parser, Subcommand};
use psyne::{Algo, DType, ReduceOp, ReduceOrder};

use crate::config::{self, ListValue, SweepFile};
use crate::factors::{algo_applies, algos_for};
use crate::model::{Backend, BenchColl, Cadence, Sweep};
use crate::sizes::{self, SizeSpec};
use crate::stats::parse_cadence;

/// Sizes `check` uses when none are given.
pub const CHECK_SIZES: &str = "1,1K,64K,1M";

/// What psybench was asked to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Measure: `psybench allreduce ...`, `psybench all ...`.
    Sweep {
        /// `-n N`: spawn N local ranks; `None` when started by psyrun, mpirun or alone.
        ranks: Option<usize>,
        /// What to measure, merged and checked.
        sweep: Sweep,
    },
    /// Draw one PNG from one or more JSON/CSV reports.
    Plot {
        /// Reports to draw together (JSON or CSV).
        inputs: Vec<PathBuf>,
        /// The PNG (default: the first input with extension `.png`).
        output: PathBuf,
    },
    /// A table of B ÷ A ratios per size; with `b` absent, the two backends inside `a`.
    Compare {
        /// The baseline report.
        a: PathBuf,
        /// The report compared with it.
        b: Option<PathBuf>,
    },
    /// Memory-copy and loopback TCP bandwidth of this host.
    Peak {
        /// Buffer size in bytes (`None`: the peak module's default).
        bytes: Option<u64>,
        /// Repetitions (`None`: the peak module's default).
        iters: Option<u64>,
    },
    /// psyne's all-reduce schedules on a many-core host, timed by the cost model.
    Model {
        /// A preset of [`crate::many_cores::MACHINES`].
        machine: String,
        /// Ranks, one per core (`None`: every core).
        ranks: Option<usize>,
        /// Bytes of f32 per rank.
        sizes: Vec<u64>,
        /// Where to write the rows as CSV.
        csv: Option<PathBuf>,
    },
    /// Measure every algorithm and write the fastest per size to a tuning file.
    Tune {
        /// `-n N`: spawn N local ranks.
        ranks: Option<usize>,
        /// What to measure (`algos` is ignored: every algorithm runs).
        sweep: Sweep,
        /// Where to write, and how much faster a change must be.
        options: crate::tune::TuneOptions,
    },
    /// Cross-check backends (or the oracle) element by element; `sweep.check` is true.
    Check {
        /// `-n N`: spawn N local ranks.
        ranks: Option<usize>,
        /// What to check.
        sweep: Sweep,
    },
}

/// A usage error (or `--help`/`--version` output), rendered like clap's, with its exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    message: String,
    code: i32,
}

impl CliError {
    /// The process exit code: 2 for usage errors, 0 for help and version.
    pub fn exit_code(&self) -> i32 {
        self.code
    }

    /// The text to print.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Prints the text: to stdout for help and version, else to stderr.
    pub fn print(&self) {
        if self.code == 0 {
            print!("{}", self.message);
        } else {
            eprint!("{}", self.message);
        }
    }

    fn usage(sub: Option<&str>, msg: impl fmt::Display) -> CliError {
        let mut root = Cli::command();
        root.build();
        let err = match sub.and_then(|s| root.find_subcommand_mut(s)) {
            Some(c) => c.error(ErrorKind::ValueValidation, msg),
            None => root.error(ErrorKind::ValueValidation, msg),
        };
        CliError::from(err)
    }
}

impl From<clap::Error> for CliError {
    fn from(e: clap::Error) -> CliError {
        CliError {
            message: e.render().to_string(),
            code: e.exit_code(),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message.trim_end())
    }
}

impl std::error::Error for CliError {}

const EXAMPLES: &str = "\
Examples:
  psybench -n 4 allreduce --sizes 8:256M          spawn 4 local ranks and sweep
  psyrun -n 4 psybench allreduce --sizes 8:256M   the same under psyrun
  psybench -n 2 all --sizes 1K:64M --csv r.csv --json r.json --plot r.png
  mpirun -n 2 psybench allreduce --backend mpi --json mpi.json
  psybench plot native.json mpi.json -o compare.png
  psybench compare native.json mpi.json
  psybench --config configs/quick.toml
  psybench -n 2 tune                              measure every algorithm, write ~/.config/psyne/tuning

Sizes: MIN:MAX (geometric, --factor, default 2) or a list 8,1K,1M; K = 1024.
Bandwidth: GB/s = 1e9 B/s; busbw uses nccl-tests' bus factors.";

#[derive(Parser, Debug)]
#[command(
    name = "psybench",
    version,
    about = "Sweep psyne's collectives over message sizes: latency and bandwidth as tables, CSV, JSON and PNG",
    after_help = EXAMPLES,
    arg_required_else_help = true
)]
struct Cli {
    /// Spawn N local ranks (leave out under psyrun or mpirun)
    #[arg(short = 'n', long = "np", value_name = "N", global = true)]
    np: Option<usize>,
    /// Sweep preset (TOML); flags on the command line win over it
    #[arg(long, value_name = "FILE", global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    sub: Option<Sub>,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// Every rank ends with the reduction of all buffers (size: each rank's buffer)
    #[command(name = "allreduce", visible_alias = "all-reduce")]
    AllReduce(SweepArgs),
    /// The root's buffer to every rank (size: the buffer)
    #[command(name = "broadcast", visible_alias = "bcast")]
    Broadcast(SweepArgs),
    /// The reduction of all buffers at the root (size: each rank's buffer)
    #[command(name = "reduce")]
    Reduce(SweepArgs),
    /// Every rank ends with all chunks (size: the gathered total)
    #[command(name = "allgather", visible_alias = "all-gather")]
    AllGather(SweepArgs),
    /// Each rank ends with its chunk of the reduction (size: the total before scattering)
    #[command(name = "reducescatter", visible_alias = "reduce-scatter")]
    ReduceScatter(SweepArgs),
    /// Chunk j of rank i goes to rank j (size: each rank's send buffer)
    #[command(name = "alltoall", visible_alias = "all-to-all")]
    AllToAll(SweepArgs),
    /// All chunks at the root (size: the gathered total)
    #[command(name = "gather")]
    Gather(SweepArgs),
    /// The root's buffer split over ranks (size: the total)
    #[command(name = "scatter")]
    Scatter(SweepArgs),
    /// No rank leaves until all have entered (no data; latency only)
    #[command(name = "barrier")]
    Barrier(SweepArgs),
    /// Ring shift: each rank sends to the next, receives from the previous (size: the message)
    #[command(name = "sendrecv")]
    SendRecv(SweepArgs),
    /// Every operation above, in that order
    #[command(name = "all")]
    All(SweepArgs),
    /// Draw one PNG (latency and busbw vs size) from JSON or CSV reports
    #[command(name = "plot")]
    Plot(PlotArgs),
    /// Table of B ÷ A time and busbw ratios per size (one input: its two backends)
    #[command(name = "compare")]
    Compare(CompareArgs),
    /// Memory-copy and loopback TCP bandwidth of this host
    #[command(name = "peak")]
    Peak(PeakArgs),
    /// Cross-check backends element by element (default: every operation)
    #[command(name = "check")]
    Check(CheckArgs),
    /// psyne's all-reduce schedules on a many-core host (64-192 cores), timed by a cost model
    /// from assumed bandwidths and latencies (docs/many-cores.md); measures nothing
    #[command(name = "model")]
    Model(ModelArgs),
    /// Measure every algorithm at every size on this layout and write the fastest per size to
    /// psyne's tuning file, which later jobs load (PSY_TUNING); prints the default and tuned
    /// choice per size
    #[command(name = "tune")]
    Tune(TuneArgs),
}

#[derive(Args, Debug, Clone, Default)]
struct SweepArgs {
    /// Sizes in bytes: MIN:MAX (geometric) or a list A,B,C; suffixes K, M, G (K = 1024) [default: 8:256M]
    #[arg(long, value_name = "MIN:MAX|LIST")]
    sizes: Option<String>,
    /// Geometric factor between sizes of a MIN:MAX range [default: 2]
    #[arg(long, value_name = "F")]
    factor: Option<f64>,
    /// Element type: f32 f64 f16 bf16 i8 i16 i32 i64 u8 u16 u32 u64 [default: f32]
    #[arg(long, value_name = "TYPE")]
    dtype: Option<String>,
    /// Reduction op: sum prod min max avg band bor bxor [default: sum]
    #[arg(long, value_name = "OP")]
    op: Option<String>,
    /// Root rank of broadcast, reduce, gather, scatter [default: 0]
    #[arg(long, value_name = "RANK")]
    root: Option<usize>,
    /// Algorithm(s): auto, or names separated by commas (ring, rd, rabenseifner, tree, pipeline, linear, hier, ...) [default: auto]. hier (allreduce, broadcast, allgather) is host-aware; on one host, or one rank per host, it runs and labels the flat algorithm
    #[arg(long, value_name = "ALGO[,ALGO]")]
    algo: Option<String>,
    /// Transport between the native backend's ranks: auto (shared memory on one host, TCP across), tcp, or shm [default: auto]
    #[arg(long, value_name = "NAME")]
    transport: Option<String>,
    /// Reduction order(s) of the native backend's reducing operations: fast, canonical
    /// (rank-order sums, the same bits for every algorithm and size), or fast,canonical (both,
    /// alternated per size and round, canonical rows labelled `canonical`) [default: the
    /// group's, PSY_REDUCE_ORDER or fast]
    #[arg(long, value_name = "ORDER[,ORDER]")]
    reduce_order: Option<String>,
    /// Timed iterations per size [default: 1000 for small sizes down to 5 for 256M]
    #[arg(long, value_name = "N")]
    iters: Option<u64>,
    /// Untimed warm-up iterations per size [default: iters / 10, 2 to 20]
    #[arg(long, value_name = "N")]
    warmup: Option<u64>,
    /// Measure every size N times, the backends alternating (the first one first in odd rounds,
    /// last in even ones); compare, plot and fits take the median of the rounds [default: 1]
    #[arg(long, value_name = "N")]
    rounds: Option<u64>,
    /// Operate in place where the collective has an in-place form
    #[arg(long)]
    in_place: bool,
    /// All-reduce buffers from Group::alloc_shared with all_reduce_shared (native backend,
    /// allreduce only; rows of 16 KiB and more show algo `shared`, smaller ones take the
    /// ordinary path and show its algorithm)
    #[arg(long)]
    shared_buffers: bool,
    /// stream: iterations back to back, slowest rank (nccl-tests); isolated: a barrier before
    /// each, slowest rank; osu: a barrier after each, mean over ranks (OSU) [default: stream]
    #[arg(long, value_name = "MODE")]
    cadence: Option<String>,
    /// Do not check results element by element (the #wrong column shows N/A)
    #[arg(long)]
    no_check: bool,
    /// Backend(s): native, mpi, or native,mpi (interleaved per size) [default: native]
    #[arg(long, value_name = "NAME[,NAME]")]
    backend: Option<String>,
    /// Write every row to this CSV (rewritten after each size)
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Write the whole report to this JSON (rewritten after each size)
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Draw latency and busbw curves to this PNG at the end
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Reference bandwidth in GB/s, for "% of peak" (see `psybench peak`)
    #[arg(long, value_name = "GBPS")]
    peak: Option<f64>,
}

impl SweepArgs {
    fn into_file(self, np: Option<usize>) -> SweepFile {
        SweepFile {
            collective: None,
            np,
            sizes: self.sizes.map(ListValue::text),
            factor: self.factor,
            dtype: self.dtype,
            op: self.op,
            root: self.root,
            algo: self.algo.map(ListValue::text),
            transport: self.transport,
            reduce_order: self.reduce_order.map(ListValue::text),
            iters: self.iters,
            warmup: self.warmup,
            rounds: self.rounds,
            in_place: self.in_place.then_some(true),
            shared_buffers: self.shared_buffers.then_some(true),
            cadence: self.cadence,
            no_check: self.no_check.then_some(true),
            backend: self.backend.map(ListValue::text),
            csv: self.csv,
            json: self.json,
            plot: self.plot,
            peak: self.peak,
        }
    }
}

#[derive(Args, Debug)]
struct PlotArgs {
    /// Reports to draw together (JSON or CSV)
    #[arg(required = true, value_name = "INPUT")]
    inputs: Vec<PathBuf>,
    /// The PNG to write [default: the first input with extension .png]
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct CompareArgs {
    /// The baseline report (JSON or CSV)
    #[arg(value_name = "A")]
    a: PathBuf,
    /// The report compared with A; without it, A's two backends are compared
    #[arg(value_name = "B")]
    b: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct PeakArgs {
    /// Buffer size for the copy and the TCP stream (K, M, G suffixes)
    #[arg(long, value_name = "SIZE", value_parser = parse_size_arg)]
    size: Option<u64>,
    /// Repetitions of each measurement
    #[arg(long, value_name = "N")]
    iters: Option<u64>,
}

#[derive(Args, Debug)]
struct ModelArgs {
    /// The machine: epyc-9654-2s, xeon-8480-2s or this-vm
    #[arg(long, value_name = "NAME", default_value = "epyc-9654-2s")]
    machine: String,
    /// Ranks, one per core, filling cache domains in order (default: every core)
    #[arg(long, value_name = "N")]
    ranks: Option<usize>,
    /// Sizes per rank: MIN:MAX (×4 steps) or a list
    #[arg(long, value_name = "SIZES", default_value = "64K:256M")]
    sizes: String,
    /// Also write the rows as CSV
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct CheckArgs {
    /// Operations to check (default: all)
    #[arg(value_name = "COLLECTIVE")]
    collectives: Vec<String>,
    #[command(flatten)]
    sweep: SweepArgs,
}

#[derive(Args, Debug)]
struct TuneArgs {
    /// Operations to tune (default: every collective; sendrecv has no algorithms)
    #[arg(value_name = "COLLECTIVE")]
    collectives: Vec<String>,
    /// The tuning file to write; its sections for other layouts are kept [default:
    /// $XDG_CONFIG_HOME/psyne/tuning, else ~/.config/psyne/tuning, where psyne looks first]
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// How much faster, in percent, another algorithm must be than the default to replace it
    /// [default: 5]
    #[arg(long, value_name = "PCT")]
    margin: Option<f64>,
    #[command(flatten)]
    sweep: SweepArgs,
}

/// What `tune` measures when no size is given: 8 B to 32 MiB, every factor of 4.
const TUNE_SIZES: &str = "8:32M";
const TUNE_FACTOR: f64 = 4.0;
const TUNE_ROUNDS: u64 = 3;

fn parse_size_arg(s: &str) -> Result<u64, String> {
    sizes::parse_size(s).map_err(|e| e.to_string())
}

/// Removes psybench's own spawn flag (`-n N`, `-nN`, `-n=N`, `--np N`, `--np=N`) from an
/// argument list, keeping everything else in order (the program name included). A rank that
/// psybench spawns gets the rest, so it does not spawn again. Nothing after `--` is touched.
pub fn strip_spawn_flag(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut i = 0;
    let mut done = false;
    while i < args.len() {
        let a = &args[i];
        if done {
            out.push(a.clone());
        } else if a == "--" {
            done = true;
            out.push(a.clone());
        } else if a == "-n" || a == "--np" {
            i += 2;
            continue;
        } else if a.starts_with("--np=")
            || (a.starts_with("-n") && !a.starts_with("--") && a.len() > 2)
        {
            // -n4, -n=4, --np=4
        } else {
            out.push(a.clone());
        }
        i += 1;
    }
    out
}

/// Parses a command line (the program name first) into a [`Command`], reading `--config` when
/// given.
pub fn parse_from<I, T>(args: I) -> Result<Command, CliError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = Cli::try_parse_from(args)?;
    let preset = load_preset(cli.config.as_deref())?;
    let Some(sub) = cli.sub else {
        return preset_command(cli.np, preset);
    };
    let preset_ref = preset.as_ref().map(|(p, f)| (p.as_path(), f.clone()));
    let coll = |c: BenchColl| vec![c];
    let (name, colls, args) = match sub {
        Sub::AllReduce(a) => ("allreduce", coll(BenchColl::AllReduce), a),
        Sub::Broadcast(a) => ("broadcast", coll(BenchColl::Broadcast), a),
        Sub::Reduce(a) => ("reduce", coll(BenchColl::Reduce), a),
        Sub::AllGather(a) => ("allgather", coll(BenchColl::AllGather), a),
        Sub::ReduceScatter(a) => ("reducescatter", coll(BenchColl::ReduceScatter), a),
        Sub::AllToAll(a) => ("alltoall", coll(BenchColl::AllToAll), a),
        Sub::Gather(a) => ("gather", coll(BenchColl::Gather), a),
        Sub::Scatter(a) => ("scatter", coll(BenchColl::Scatter), a),
        Sub::Barrier(a) => ("barrier", coll(BenchColl::Barrier), a),
        Sub::SendRecv(a) => ("sendrecv", coll(BenchColl::SendRecv), a),
        Sub::All(a) => ("all", BenchColl::ALL.to_vec(), a),
        Sub::Plot(p) => return plot_command(p),
        Sub::Compare(c) => return Ok(Command::Compare { a: c.a, b: c.b }),
        Sub::Peak(p) => return peak_command(p),
        Sub::Check(c) => return check_command(c, cli.np, preset_ref),
        Sub::Model(m) => return model_command(m),
        Sub::Tune(t) => return tune_command(t, cli.np, preset_ref),
    };
    sweep_command(
        Some(name),
        &colls,
        args.into_file(cli.np),
        preset_ref,
        false,
    )
}

/// The `--config` preset at `path`, read and parsed, with its path.
fn load_preset(path: Option<&Path>) -> Result<Option<(PathBuf, SweepFile)>, CliError> {
    match path {
        Some(p) => Ok(Some(
            config::load(p)
                .map(|f| (p.to_path_buf(), f))
                .map_err(|e| CliError::usage(None, e))?,
        )),
        None => Ok(None),
    }
}

/// No subcommand: the preset must say what to measure.
fn preset_command(
    np: Option<usize>,
    preset: Option<(PathBuf, SweepFile)>,
) -> Result<Command, CliError> {
    let Some((path, file)) = preset else {
        return Err(CliError::usage(
            None,
            "name what to measure, e.g. `psybench allreduce`, or give a --config preset",
        ));
    };
    let flags = SweepArgs::default().into_file(np);
    sweep_command(None, &[], flags, Some((&path, file)), false)
}

/// `psybench plot`: the output defaults to the first input as `.png` and must not be an input.
fn plot_command(p: PlotArgs) -> Result<Command, CliError> {
    let output = match p.output {
        Some(o) => o,
        None => p.inputs[0].with_extension("png"),
    };
    if p.inputs.contains(&output) {
        return Err(CliError::usage(
            Some("plot"),
            format!(
                "the output {} is also an input; name another PNG with -o",
                output.display()
            ),
        ));
    }
    Ok(Command::Plot {
        inputs: p.inputs,
        output,
    })
}

/// `psybench peak`: at least one repetition.
fn peak_command(p: PeakArgs) -> Result<Command, CliError> {
    if p.iters == Some(0) {
        return Err(CliError::usage(
            Some("peak"),
            "--iters 0 measures nothing; use --iters 1 or more",
        ));
    }
    Ok(Command::Peak {
        bytes: p.size,
        iters: p.iters,
    })
}

/// `psybench model`: a known machine and sizes.
fn model_command(m: ModelArgs) -> Result<Command, CliError> {
    if crate::many_cores::machine(&m.machine).is_none() {
        return Err(CliError::usage(
            Some("model"),
            format!(
                "--machine {}: not a machine the model knows; choose one of {}",
                m.machine,
                crate::many_cores::MACHINES.join(", ")
            ),
        ));
    }
    let sizes = crate::sizes::parse_sizes(&m.sizes, 4.0)
        .map_err(|e| CliError::usage(Some("model"), format!("--sizes: {e}")))?;
    Ok(Command::Model {
        machine: m.machine,
        ranks: m.ranks,
        sizes,
        csv: m.csv,
    })
}

/// `psybench check [COLLECTIVE...]`: a sweep that checks (every operation when none is named).
fn check_command(
    c: CheckArgs,
    np: Option<usize>,
    preset: Option<(&Path, SweepFile)>,
) -> Result<Command, CliError> {
    let mut colls = Vec::new();
    for name in &c.collectives {
        colls.extend(
            parse_collectives(name)
                .map_err(|m| CliError::usage(Some("check"), format!("invalid COLLECTIVE: {m}")))?,
        );
    }
    let flags = c.sweep.into_file(np);
    sweep_command(Some("check"), &colls, flags, preset, true)
}

/// `psybench tune [COLLECTIVE...]`: a sweep of every algorithm, by default every collective but
/// sendrecv at [`TUNE_SIZES`] (every factor of [`TUNE_FACTOR`]), [`TUNE_ROUNDS`] rounds.
fn tune_command(
    t: TuneArgs,
    np: Option<usize>,
    preset: Option<(&Path, SweepFile)>,
) -> Result<Command, CliError> {
    let err = |m: String| CliError::usage(Some("tune"), m);
    let mut colls = Vec::new();
    for name in &t.collectives {
        colls.extend(parse_collectives(name).map_err(|m| err(format!("invalid COLLECTIVE: {m}")))?);
    }
    if colls.is_empty() {
        colls = BenchColl::ALL.to_vec();
    }
    colls.retain(|c| *c != BenchColl::SendRecv);
    if colls.is_empty() {
        return Err(err(
            "sendrecv has no algorithms to tune; name a collective".into()
        ));
    }
    let margin = t.margin.unwrap_or(5.0);
    if !(0.0..100.0).contains(&margin) {
        return Err(err(format!(
            "--margin {margin} is not a percentage from 0 to below 100, e.g. 5"
        )));
    }
    let mut a = t.sweep;
    let refused = [
        (a.algo.is_some(), "--algo (tune measures every algorithm)"),
        (
            a.shared_buffers,
            "--shared-buffers (tune chooses for ordinary buffers)",
        ),
        (
            a.plot.is_some(),
            "--plot (draw the --json report with `psybench plot`)",
        ),
        (
            a.backend.as_deref().is_some_and(|b| b.trim() != "native"),
            "--backend (tune tunes psyne's own)",
        ),
    ];
    if let Some((_, what)) = refused.iter().find(|(given, _)| *given) {
        return Err(err(format!("tune does not take {what}; leave it out")));
    }
    if a.sizes.is_none() {
        a.sizes = Some(TUNE_SIZES.into());
        a.factor = a.factor.or(Some(TUNE_FACTOR));
    }
    a.rounds = a.rounds.or(Some(TUNE_ROUNDS));
    let Command::Sweep { ranks, sweep } =
        sweep_command(Some("tune"), &colls, a.into_file(np), preset, false)?
    else {
        unreachable!("sweep_command without is_check makes a Sweep");
    };
    Ok(Command::Tune {
        ranks,
        sweep,
        options: crate::tune::TuneOptions {
            output: t.output,
            margin: margin / 100.0,
        },
    })
}

/// Parses an operation name (`allreduce`, `all-reduce`, ...) or `all`.
pub fn parse_collectives(name: &str) -> Result<Vec<BenchColl>, String> {
    let n = name.trim().to_ascii_lowercase().replace(['-', '_'], "");
    if n == "all" {
        return Ok(BenchColl::ALL.to_vec());
    }
    let n = match n.as_str() {
        "bcast" => "broadcast",
        other => other,
    };
    BenchColl::parse(n).map(|c| vec![c]).ok_or_else(|| {
        let names: Vec<&str> = BenchColl::ALL.iter().map(|c| c.name()).collect();
        format!(
            "unknown operation `{name}`; choose one of {}, or all",
            names.join(", ")
        )
    })
}

/// Parses an element type: psyne's names (`f32`, `bf16`, ...) or nccl-tests' (`float`,
/// `double`, `half`, `int`, ...).
pub fn parse_dtype(name: &str) -> Result<DType, String> {
    let n = name.trim().to_ascii_lowercase();
    let alias = match n.as_str() {
        "float" | "float32" => "f32",
        "double" | "float64" => "f64",
        "half" | "float16" => "f16",
        "bfloat16" => "bf16",
        "int" | "int32" => "i32",
        "int8" | "char" => "i8",
        "int64" => "i64",
        "uint8" => "u8",
        "uint32" => "u32",
        "uint64" => "u64",
        other => other,
    };
    DType::parse(alias).ok_or_else(|| {
        let names: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
        format!("unknown type `{name}`; choose one of {}", names.join(", "))
    })
}

/// Parses a reduction op name (`sum`, `band`, ...).
pub fn parse_op(name: &str) -> Result<ReduceOp, String> {
    ReduceOp::parse(&name.trim().to_ascii_lowercase()).ok_or_else(|| {
        let names: Vec<&str> = ReduceOp::ALL.iter().map(|o| o.name()).collect();
        format!("unknown op `{name}`; choose one of {}", names.join(", "))
    })
}

/// Parses comma-separated reduction orders (`fast`, `canonical`), each once.
pub fn parse_reduce_orders(list: &str) -> Result<Vec<ReduceOrder>, String> {
    let mut orders = Vec::new();
    for part in list.split(',') {
        let order = ReduceOrder::parse(part).map_err(|e| e.message().to_string())?;
        if orders.contains(&order) {
            return Err(format!("reduce order `{order}` is named twice"));
        }
        orders.push(order);
    }
    Ok(orders)
}

/// Parses `auto` or comma-separated algorithm names (`None` is automatic choice).
pub fn parse_algos(list: &str) -> Result<Vec<Option<Algo>>, String> {
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim) {
        let a = if part == "auto" {
            None
        } else {
            let Some(a) = Algo::parse(&part.to_ascii_lowercase()) else {
                let names: Vec<&str> = Algo::ALL.iter().map(|a| a.name()).collect();
                return Err(format!(
                    "unknown algorithm `{part}`; choose auto or one of {} (also rd, tree)",
                    names.join(", ")
                ));
            };
            Some(a)
        };
        if !out.contains(&a) {
            out.push(a);
        }
    }
    Ok(out)
}

/// Parses comma-separated backend names (`native`, `mpi`).
pub fn parse_backends(list: &str) -> Result<Vec<Backend>, String> {
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim) {
        let b = match part {
            "native" | "psyne" => Backend::Native,
            "mpi" => Backend::Mpi,
            _ => {
                return Err(format!(
                    "unknown backend `{part}`; choose native, mpi, or native,mpi"
                ))
            }
        };
        if !out.contains(&b) {
            out.push(b);
        }
    }
    Ok(out)
}

/// Where a value came from, for error messages.
struct Origin<'a> {
    file: Option<&'a Path>,
}

impl Origin<'_> {
    fn name(&self, key: &str) -> String {
        match self.file {
            None => format!("--{key}"),
            Some(p) => format!("`{key}` in {}", p.display()),
        }
    }

    /// The error for `value` of `key`: `why`, without a leading "`value`: " (the message
    /// names the value already).
    fn invalid(&self, key: &str, value: &dyn fmt::Display, why: String) -> String {
        let quoted = format!("`{value}`: ");
        let why = why.strip_prefix(&quoted).unwrap_or(&why);
        format!("invalid value '{value}' for {}: {why}", self.name(key))
    }
}

/// The values of one layer (flags or file), parsed and checked one by one.
#[derive(Default)]
struct Typed {
    collectives: Option<Vec<BenchColl>>,
    np: Option<usize>,
    sizes: Option<SizeSpec>,
    factor: Option<f64>,
    dtype: Option<DType>,
    op: Option<ReduceOp>,
    root: Option<usize>,
    algos: Option<Vec<Option<Algo>>>,
    transport: Option<String>,
    reduce_orders: Option<Vec<ReduceOrder>>,
    iters: Option<u64>,
    warmup: Option<u64>,
    rounds: Option<u64>,
    in_place: Option<bool>,
    shared_buffers: Option<bool>,
    cadence: Option<Cadence>,
    no_check: Option<bool>,
    backends: Option<Vec<Backend>>,
    csv: Option<PathBuf>,
    json: Option<PathBuf>,
    plot: Option<PathBuf>,
    peak: Option<f64>,
}

impl Typed {
    /// This layer over `lower`: each value from here when set, else from `lower`.
    fn over(self, lower: Typed) -> Typed {
        Typed {
            collectives: self.collectives.or(lower.collectives),
            np: self.np.or(lower.np),
            sizes: self.sizes.or(lower.sizes),
            factor: self.factor.or(lower.factor),
            dtype: self.dtype.or(lower.dtype),
            op: self.op.or(lower.op),
            root: self.root.or(lower.root),
            algos: self.algos.or(lower.algos),
            transport: self.transport.or(lower.transport),
            reduce_orders: self.reduce_orders.or(lower.reduce_orders),
            iters: self.iters.or(lower.iters),
            warmup: self.warmup.or(lower.warmup),
            rounds: self.rounds.or(lower.rounds),
            in_place: self.in_place.or(lower.in_place),
            shared_buffers: self.shared_buffers.or(lower.shared_buffers),
            cadence: self.cadence.or(lower.cadence),
            no_check: self.no_check.or(lower.no_check),
            backends: self.backends.or(lower.backends),
            csv: self.csv.or(lower.csv),
            json: self.json.or(lower.json),
            plot: self.plot.or(lower.plot),
            peak: self.peak.or(lower.peak),
        }
    }
}

/// What `--cadence` accepts, as its error says.
const CADENCES: &str =
    "choose stream (back to back, as nccl-tests), isolated (a barrier before each) or \
                        osu (a barrier after each, mean over ranks, as the OSU micro-benchmarks)";

/// Parses and checks one layer, value by value in the order of [`Typed`]'s fields; the first
/// bad value is the error.
fn typed(f: SweepFile, o: &Origin<'_>) -> Result<Typed, String> {
    let text = |v: Option<ListValue>| v.map(|v| v.to_flag());
    Ok(Typed {
        collectives: parsed(
            text(f.collective).as_deref(),
            o,
            "collective",
            parse_collective_list,
        )?,
        np: at_least_one(f.np, o, "np", "spawn at least one rank, e.g. -n 2")?,
        sizes: parsed(text(f.sizes).as_deref(), o, "sizes", |t| {
            sizes::parse_spec(t).map_err(|e| e.0)
        })?,
        factor: f
            .factor
            .map(|x| sizes::check_factor(x).map_err(|e| o.invalid("factor", &x, e.0)))
            .transpose()?,
        dtype: parsed(f.dtype.as_deref(), o, "dtype", parse_dtype)?,
        op: parsed(f.op.as_deref(), o, "op", parse_op)?,
        root: f.root,
        algos: parsed(text(f.algo).as_deref(), o, "algo", parse_algos)?,
        transport: parsed(f.transport.as_deref(), o, "transport", |t| {
            psyne::TransportPolicy::parse(t)
                .map(|_| t.to_string())
                .map_err(|e| format!("{e}"))
        })?,
        reduce_orders: parsed(
            text(f.reduce_order).as_deref(),
            o,
            "reduce-order",
            parse_reduce_orders,
        )?,
        iters: at_least_one(
            f.iters,
            o,
            "iters",
            "at least one timed iteration is needed; leave it out to scale with size",
        )?,
        warmup: f.warmup,
        rounds: at_least_one(
            f.rounds,
            o,
            "rounds",
            "at least one round is needed; leave it out for one",
        )?,
        in_place: f.in_place,
        shared_buffers: f.shared_buffers,
        cadence: parsed(f.cadence.as_deref(), o, "cadence", |c| {
            parse_cadence(c).ok_or_else(|| CADENCES.to_string())
        })?,
        no_check: f.no_check,
        backends: parsed(text(f.backend).as_deref(), o, "backend", parse_backends)?,
        csv: f.csv,
        json: f.json,
        plot: f.plot,
        peak: positive_peak(f.peak, o)?,
    })
}

/// `text` (when given) parsed by `parse`; its error names `key` and where it came from.
fn parsed<T>(
    text: Option<&str>,
    o: &Origin<'_>,
    key: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<T>, String> {
    text.map(|t| parse(t).map_err(|e| o.invalid(key, &t, e)))
        .transpose()
}

/// `value` (when given), refused with `why` when it is 0.
fn at_least_one<T>(
    value: Option<T>,
    o: &Origin<'_>,
    key: &str,
    why: &str,
) -> Result<Option<T>, String>
where
    T: Copy + PartialEq + From<u8> + fmt::Display,
{
    match value {
        Some(n) if n == T::from(0) => Err(o.invalid(key, &n, why.into())),
        v => Ok(v),
    }
}

/// `--peak` (when given): a finite bandwidth above 0.
fn positive_peak(peak: Option<f64>, o: &Origin<'_>) -> Result<Option<f64>, String> {
    match peak {
        Some(p) if !p.is_finite() || p <= 0.0 => Err(o.invalid(
            "peak",
            &p,
            "a bandwidth in GB/s greater than 0, e.g. --peak 12.5".into(),
        )),
        p => Ok(p),
    }
}

/// Operations separated by commas (each a name or `all`), repeats next to each other dropped.
fn parse_collective_list(text: &str) -> Result<Vec<BenchColl>, String> {
    let mut v = Vec::new();
    for part in text.split(',') {
        v.extend(parse_collectives(part)?);
    }
    v.dedup();
    Ok(v)
}

/// The command for a sweep (`is_check`: a check) of `colls` (none: the preset's), from the
/// command line's `flags` over the `preset`'s values over the defaults.
fn sweep_command(
    sub: Option<&str>,
    colls: &[BenchColl],
    flags: SweepFile,
    preset: Option<(&Path, SweepFile)>,
    is_check: bool,
) -> Result<Command, CliError> {
    let err = |m: String| CliError::usage(sub, m);
    let f = typed(flags, &Origin { file: None }).map_err(err)?;
    let c = match preset {
        Some((path, file)) => typed(file, &Origin { file: Some(path) }).map_err(err)?,
        None => Typed::default(),
    };
    let values = f.over(c);
    let ranks = values.np;
    let sweep = sweep_of(values, colls, is_check).map_err(err)?;
    Ok(if is_check {
        Command::Check { ranks, sweep }
    } else {
        Command::Sweep { ranks, sweep }
    })
}

/// The merged values checked together and completed with the defaults.
fn sweep_of(t: Typed, colls: &[BenchColl], is_check: bool) -> Result<Sweep, String> {
    let collectives = collectives_of(colls, t.collectives, is_check)?;
    let dtype = t.dtype.unwrap_or(DType::F32);
    let op = t.op.unwrap_or(ReduceOp::Sum);
    check_op(&collectives, op, dtype)?;
    let sizes = sweep_sizes(t.sizes, t.factor, &collectives, dtype, is_check)?;
    let algos = t.algos.unwrap_or_else(|| vec![None]);
    check_algos(&collectives, &algos)?;
    let backends = backends_of(t.backends, is_check)?;
    let no_check = t.no_check.unwrap_or(false);
    if is_check && no_check {
        return Err("check with --no-check checks nothing; drop --no-check".into());
    }
    Ok(Sweep {
        collectives,
        sizes,
        dtype,
        op,
        root: t.root.unwrap_or(0),
        algos,
        transport: t.transport.unwrap_or_else(|| "auto".into()),
        reduce_orders: t.reduce_orders.unwrap_or_default(),
        iters: t.iters,
        warmup: t.warmup,
        rounds: t.rounds.unwrap_or(1),
        in_place: t.in_place.unwrap_or(false),
        shared_buffers: t.shared_buffers.unwrap_or(false),
        cadence: t.cadence.unwrap_or(Cadence::Stream),
        check: !no_check,
        backends,
        csv: t.csv,
        json: t.json,
        plot: t.plot,
        peak_gbps: t.peak,
    })
}

/// The operations: those on the command line, else the preset's, else (`check`) all of them.
fn collectives_of(
    colls: &[BenchColl],
    preset: Option<Vec<BenchColl>>,
    is_check: bool,
) -> Result<Vec<BenchColl>, String> {
    if !colls.is_empty() {
        Ok(colls.to_vec())
    } else if let Some(v) = preset {
        Ok(v)
    } else if is_check {
        Ok(BenchColl::ALL.to_vec())
    } else {
        Err(
            "the config names no operation: add `collective = \"allreduce\"` (or \"all\") to it, \
             or name one on the command line: psybench allreduce --config FILE"
                .into(),
        )
    }
}

/// A bitwise `op` needs an integer `dtype` when any of `collectives` reduces.
fn check_op(collectives: &[BenchColl], op: ReduceOp, dtype: DType) -> Result<(), String> {
    if collectives.iter().any(|c| c.reduces()) {
        op.check(dtype).map_err(|_| {
            format!(
                "--op {} is bitwise and needs an integer --dtype, not {dtype}; use e.g. \
                 --dtype i32, or --op sum/prod/min/max/avg for floating-point types",
                op.name()
            )
        })?;
    }
    Ok(())
}

/// The sizes to measure, whole elements of `dtype`: `spec` expanded by `factor`, else the
/// defaults (`check`: [`CHECK_SIZES`]; barrier alone: size 0; else
/// [`sizes::DEFAULT_SIZES`]).
fn sweep_sizes(
    spec: Option<SizeSpec>,
    factor: Option<f64>,
    collectives: &[BenchColl],
    dtype: DType,
    is_check: bool,
) -> Result<Vec<u64>, String> {
    let spec = match spec {
        Some(s) => s,
        None if is_check => sizes::parse_spec(CHECK_SIZES).map_err(|e| e.0)?,
        None if collectives.iter().all(|c| *c == BenchColl::Barrier) => SizeSpec::List(vec![0]),
        None => sizes::parse_spec(sizes::DEFAULT_SIZES).map_err(|e| e.0)?,
    };
    let factor = factor.unwrap_or(sizes::DEFAULT_FACTOR);
    let raw = sizes::expand(&spec, factor).map_err(|e| e.0)?;
    Ok(sizes::round_sizes(&raw, dtype))
}

/// The backends asked for, else native (`check` built with MPI: native and mpi); mpi only
/// when built with it.
fn backends_of(asked: Option<Vec<Backend>>, is_check: bool) -> Result<Vec<Backend>, String> {
    let default_backends = if is_check && cfg!(feature = "mpi") {
        vec![Backend::Native, Backend::Mpi]
    } else {
        vec![Backend::Native]
    };
    let backends = asked.unwrap_or(default_backends);
    if backends.contains(&Backend::Mpi) && !cfg!(feature = "mpi") {
        return Err(
            "--backend mpi: this psybench was built without MPI; rebuild with \
             `cargo build --release -p psybench --features mpi` (needs Open MPI or MPICH) \
             and run it under mpirun"
                .into(),
        );
    }
    Ok(backends)
}

/// Every named algorithm must implement the operation (one operation), or at least one of them
/// (several: the others run with automatic choice, see [`crate::factors::algos_to_run`]).
fn check_algos(colls: &[BenchColl], algos: &[Option<Algo>]) -> Result<(), String> {
    for a in algos.iter().flatten() {
        let usable = colls.iter().any(|c| algo_applies(*c, Some(*a)));
        if colls.len() == 1 && !usable {
            let c = colls[0];
            let names: Vec<&str> = algos_for(c).iter().map(|a| a.name()).collect();
            if names.is_empty() {
                return Err(format!(
                    "{} has no algorithm choice; drop --algo {a}",
                    c.name()
                ));
            }
            return Err(format!(
                "algorithm `{a}` does not implement {}; choose auto or one of {}",
                c.name(),
                names.join(", ")
            ));
        }
        if !usable {
            return Err(format!(
                "algorithm `{a}` implements none of the operations asked for; choose auto or \
                 one that implements at least one of them"
            ));
        }
    }
    Ok(())
}
