//! What the `psybench` binary does with its command line.

use std::path::{Path, PathBuf};

use crate::backend::AnyComm;
use crate::cli::{self, Command};
use crate::model::{Report, Sweep};
use crate::{check, compare, export, launch, peak, runner, tune};
use psyne::ErrorKind;

/// Exit status: wrong results.
pub const EXIT_WRONG: u8 = 1;
/// Exit status: bad usage, or a communication or I/O error.
pub const EXIT_ERROR: u8 = 2;

/// Runs psybench with `args` (the first is the program name) and returns the exit status:
/// 0 success, 1 a result differed from the oracle, 2 a usage, communication or I/O error; with
/// `-n`, the job's status as psyrun reports it.
pub fn main_with(args: Vec<String>) -> u8 {
    let command = match cli::parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            e.print();
            return u8::try_from(e.exit_code()).unwrap_or(EXIT_ERROR);
        }
    };
    match run(command, &args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("psybench: {e}");
            EXIT_ERROR
        }
    }
}

/// No rank exits before rank 0 has printed and written everything: a launcher stops the whole
/// job when the first rank exits non-zero.
fn finish(comms: &[AnyComm]) -> psyne::Result<()> {
    use psyne::Communicator;
    match comms.first() {
        Some(any) => crate::backend::on_backend!(any, c => c.barrier()),
        None => Ok(()),
    }
}

fn run(command: Command, args: &[String]) -> psyne::Result<u8> {
    match command {
        Command::Sweep {
            ranks: Some(n),
            sweep,
        }
        | Command::Check {
            ranks: Some(n),
            sweep,
        }
        | Command::Tune {
            ranks: Some(n),
            sweep,
            ..
        } if !launch::inside_job() => {
            // Every rank here: refuse a size that cannot fit before starting any of them.
            let largest = sweep.sizes.iter().copied().max().unwrap_or(0);
            crate::memory::check_fits(largest, n, n, sweep.check)?;
            launch::spawn_ranks(n, cli::strip_spawn_flag(&args[1..]))
        }
        Command::Sweep { sweep, .. } => {
            on_ranks(&sweep, |comms| Ok(runner::run_sweep(comms, &sweep)?.wrong))
        }
        Command::Check { sweep, .. } => on_ranks(&sweep, |comms| check::run_check(comms, &sweep)),
        Command::Tune { sweep, options, .. } => {
            // The defaults are what tuning compares against: a tuning file in place is ignored.
            std::env::set_var(psyne::contract::TUNING, "off");
            on_ranks(&sweep, |comms| match comms.first() {
                Some(comm) => tune::run(comm, &sweep, &options),
                None => Ok(0),
            })
        }
        Command::Plot { inputs, output } => draw_plot(&inputs, &output),
        Command::Compare { a, b } => print_comparison(&a, b.as_deref()),
        Command::Peak { bytes, iters } => print_peaks(bytes, iters),
        Command::Model {
            machine,
            ranks,
            sizes,
            csv,
        } => print_model(&machine, ranks, &sizes, csv.as_deref()),
    }
}

/// `psybench model`: the table, and the CSV if asked.
fn print_model(
    name: &str,
    ranks: Option<usize>,
    sizes: &[u64],
    csv: Option<&std::path::Path>,
) -> psyne::Result<u8> {
    let machine = crate::many_cores::machine(name)
        .ok_or_else(|| psyne::Error::config(format!("no machine `{name}` in the model")))?;
    let rows = crate::many_cores::run(&machine, ranks.unwrap_or(machine.cores()), sizes)?;
    if let Some(path) = csv {
        std::fs::write(path, rows)
            .map_err(|e| io_error(format!("writing {}: {e}", path.display())))?;
    }
    Ok(0)
}

/// Connects this rank to `sweep`'s backends, runs `work` (which returns how many elements
/// were wrong) and waits for every rank to finish; the exit status says whether any was wrong.
fn on_ranks(
    sweep: &Sweep,
    work: impl FnOnce(&[AnyComm]) -> psyne::Result<u64>,
) -> psyne::Result<u8> {
    let comms = launch::connect(&sweep.backends, &sweep.transport)?;
    let wrong = work(&comms)?;
    finish(&comms)?;
    Ok(if wrong > 0 { EXIT_WRONG } else { 0 })
}

/// An I/O error with `what` as its message.
fn io_error(what: String) -> psyne::Error {
    psyne::Error::new(ErrorKind::Io, what)
}

/// Reads a JSON or CSV report, its error as an I/O error.
fn read_report(path: &Path) -> psyne::Result<Report> {
    export::read_report(path).map_err(|e| io_error(format!("{e}")))
}

/// `psybench plot`: draws the reports at `inputs` into `output`.
fn draw_plot(inputs: &[PathBuf], output: &Path) -> psyne::Result<u8> {
    let reports = inputs
        .iter()
        .map(|p| read_report(p))
        .collect::<psyne::Result<Vec<_>>>()?;
    crate::plot::draw(&reports, output)
        .map_err(|e| io_error(format!("drawing {}: {e}", output.display())))?;
    println!("wrote {}", output.display());
    Ok(0)
}

/// `psybench compare`: prints the ratios of `b` to `a` (or of `a`'s two backends).
fn print_comparison(a: &Path, b: Option<&Path>) -> psyne::Result<u8> {
    let ra = read_report(a)?;
    let rb = b.map(read_report).transpose()?;
    let la = a.display().to_string();
    let lb = b.map(|p| p.display().to_string()).unwrap_or_default();
    let c = compare::compare((&la, &ra), rb.as_ref().map(|r| (lb.as_str(), r)))
        .map_err(|e| psyne::Error::invalid(format!("{e}")))?;
    print!("{}", compare::render(&c));
    Ok(0)
}

/// `psybench peak`: memory-copy, loopback TCP and reduction-kernel bandwidth of this host.
fn print_peaks(bytes: Option<u64>, iters: Option<u64>) -> psyne::Result<u8> {
    let copy = bytes.unwrap_or(256 << 20) as usize;
    let runs = iters.unwrap_or(5) as usize;
    let mem = peak::memcpy_gbps(copy, runs);
    let tcp = peak::tcp_loopback_gbps(copy.max(64 << 20) * 4, runs.div_ceil(2))
        .map_err(|e| psyne::Error::io("measuring loopback TCP", e))?;
    println!(
        "memory copy:  {mem:.2} GB/s  (single thread, {} MiB buffers, median of {runs})",
        copy >> 20
    );
    println!(
        "loopback TCP: {tcp:.2} GB/s  (one stream over 127.0.0.1, {} MiB, median of {})",
        (copy.max(64 << 20) * 4) >> 20,
        runs.div_ceil(2)
    );
    let kernels: Vec<String> = [
        psyne::DType::F32,
        psyne::DType::F64,
        psyne::DType::I32,
        psyne::DType::U8,
        psyne::DType::F16,
        psyne::DType::BF16,
    ]
    .iter()
    .map(|&d| format!("{d} {:.1}", peak::reduce_gbps(d, copy, runs)))
    .collect();
    println!(
        "sum kernels:  {} GB/s  (psyne's dst += src, {} MiB, median of {runs}: compare with the copy)",
        kernels.join(", "),
        copy >> 20
    );
    println!("GB/s = 1e9 bytes/s; pass one of these to a sweep as --peak GBPS");
    Ok(0)
}
