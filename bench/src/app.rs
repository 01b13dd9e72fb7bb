//! What the `psybench` binary does with its command line.

use crate::cli::{self, Command};
use crate::{check, compare, export, launch, peak, runner};
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
fn finish(comms: &[crate::backend::AnyComm]) -> psyne::Result<()> {
    use psyne::Communicator;
    match comms.first() {
        Some(c) => c.barrier(),
        None => Ok(()),
    }
}

fn run(command: Command, args: &[String]) -> psyne::Result<u8> {
    let io = |what: String| psyne::Error::new(ErrorKind::Io, what);
    match command {
        Command::Sweep { ranks: Some(n), .. } | Command::Check { ranks: Some(n), .. }
            if !launch::inside_job() =>
        {
            launch::spawn_ranks(n, cli::strip_spawn_flag(&args[1..]))
        }
        Command::Sweep { sweep, .. } => {
            let comms = launch::connect(&sweep.backends, &sweep.transport)?;
            let outcome = runner::run_sweep(&comms, &sweep)?;
            finish(&comms)?;
            Ok(if outcome.wrong > 0 { EXIT_WRONG } else { 0 })
        }
        Command::Check { sweep, .. } => {
            let comms = launch::connect(&sweep.backends, &sweep.transport)?;
            let wrong = check::run_check(&comms, &sweep)?;
            finish(&comms)?;
            Ok(if wrong > 0 { EXIT_WRONG } else { 0 })
        }
        Command::Plot { inputs, output } => {
            let reports = inputs
                .iter()
                .map(|p| export::read_report(p).map_err(|e| io(format!("{e}"))))
                .collect::<psyne::Result<Vec<_>>>()?;
            crate::plot::draw(&reports, &output)
                .map_err(|e| io(format!("drawing {}: {e}", output.display())))?;
            println!("wrote {}", output.display());
            Ok(0)
        }
        Command::Compare { a, b } => {
            let ra = export::read_report(&a).map_err(|e| io(format!("{e}")))?;
            let rb = match &b {
                Some(p) => Some(export::read_report(p).map_err(|e| io(format!("{e}")))?),
                None => None,
            };
            let la = a.display().to_string();
            let lb = b
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            let c = compare::compare((&la, &ra), rb.as_ref().map(|r| (lb.as_str(), r)))
                .map_err(|e| psyne::Error::invalid(format!("{e}")))?;
            print!("{}", compare::render(&c));
            Ok(0)
        }
        Command::Peak { bytes, iters } => {
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
    }
}
