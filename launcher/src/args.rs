//! The command line: parsed by clap into [`Cli`], then checked into the plain [`Options`] that the
//! rest of psyrun acts on. Nothing is looked up, bound or started here.

use crate::exit;
use clap::Parser;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// The default `--grace`: seconds between SIGTERM and SIGKILL when psyrun stops ranks.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// What the user typed, as clap parses it. Use [`Options::parse_from`] rather than this directly.
#[derive(Debug, Parser)]
#[command(
    name = "psyrun",
    version,
    about = "Start N ranks of a program on this machine, wire them up, forward their output, and stop them all when one fails",
    after_help = exit::HELP,
    override_usage = "psyrun -n N [OPTIONS] PROGRAM [ARGS]..."
)]
pub struct Cli {
    /// Number of ranks to start (at least 1).
    #[arg(short = 'n', long = "np", value_name = "N", value_parser = parse_ranks)]
    pub ranks: usize,

    /// Prefix every output line with `[RANK] `.
    #[arg(long)]
    pub tag_output: bool,

    /// Also write each rank's output to DIR/rank.N.stdout and DIR/rank.N.stderr (DIR is created).
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,

    /// Seconds a rank gets to exit after SIGTERM before SIGKILL (fractions allowed; 0 kills at once).
    #[arg(long, value_name = "SECS", default_value = "5", value_parser = parse_grace,
        allow_negative_numbers = true)]
    pub grace: Duration,

    /// Stop the job if it runs longer than SECS seconds (exit 124).
    #[arg(long, value_name = "SECS", value_parser = parse_timeout,
        allow_negative_numbers = true)]
    pub timeout: Option<Duration>,

    /// The program (a bare name is looked up in PATH, then beside psyrun) and its arguments.
    /// Everything from PROGRAM on goes to the program, flags included.
    #[arg(
        value_name = "PROGRAM",
        required = true,
        num_args = 1..,
        trailing_var_arg = true
    )]
    pub command: Vec<OsString>,
}

/// A checked command line: what psyrun should do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Number of ranks, at least 1.
    pub ranks: usize,
    /// The program as typed (a bare name or a path); [`crate::program::resolve`] finds it.
    pub program: OsString,
    /// Arguments passed to every rank, unchanged.
    pub args: Vec<OsString>,
    /// Prefix forwarded lines with `[RANK] `.
    pub tag_output: bool,
    /// Where to also write each rank's streams, if anywhere.
    pub output_dir: Option<PathBuf>,
    /// Time between SIGTERM and SIGKILL when stopping ranks.
    pub grace: Duration,
    /// Longest the job may run, if limited.
    pub timeout: Option<Duration>,
}

/// Why the command line was not accepted, or a request for help or the version.
/// [`ArgsError::print`] prints it the way clap does; [`ArgsError::exit_code`] is 0 for help and
/// version.
#[derive(Debug)]
pub struct ArgsError(clap::Error);

impl ArgsError {
    /// 0 for `--help` and `--version`, [`exit::USAGE`] for every real error.
    pub fn exit_code(&self) -> u8 {
        if self.0.use_stderr() {
            exit::USAGE
        } else {
            exit::SUCCESS
        }
    }

    /// Prints the message (help and version on stdout, errors on stderr) as clap formats it.
    pub fn print(&self) {
        // Printing can only fail if the stream is closed; there is nowhere else to report it.
        let _ = self.0.print();
    }
}

impl std::fmt::Display for ArgsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for ArgsError {}

impl Options {
    /// Parses a full command line (the first item is the program name, as in
    /// `std::env::args_os()`).
    pub fn parse_from<I, T>(args: I) -> Result<Options, ArgsError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let cli = Cli::try_parse_from(args).map_err(ArgsError)?;
        Ok(Options::from(cli))
    }
}

impl From<Cli> for Options {
    fn from(cli: Cli) -> Options {
        let mut command = cli.command.into_iter();
        // clap guarantees at least one value (`required`, `num_args = 1..`).
        let program = command.next().unwrap_or_default();
        Options {
            ranks: cli.ranks,
            program,
            args: command.collect(),
            tag_output: cli.tag_output,
            output_dir: cli.output_dir,
            grace: cli.grace,
            timeout: cli.timeout,
        }
    }
}

fn parse_ranks(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(0) => Err("the number of ranks must be at least 1 (e.g. -n 4)".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{text:?} is not a number of ranks (e.g. -n 4)")),
    }
}

fn parse_seconds(text: &str, zero_ok: bool) -> Result<Duration, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds (e.g. 2.5)"))?;
    if !secs.is_finite() || secs < 0.0 || (!zero_ok && secs == 0.0) || secs > 1e9 {
        let least = if zero_ok { "0 or more" } else { "more than 0" };
        return Err(format!("{text:?} seconds is out of range: give {least}"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn parse_grace(text: &str) -> Result<Duration, String> {
    parse_seconds(text, true)
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    parse_seconds(text, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Options, ArgsError> {
        Options::parse_from(std::iter::once("psyrun").chain(line.split_whitespace()))
    }

    fn err(line: &str) -> String {
        let e = parse(line).expect_err(line);
        assert_eq!(e.exit_code(), exit::USAGE, "{line}: {e}");
        e.to_string()
    }

    #[test]
    fn defaults() {
        let o = parse("-n 4 train").unwrap();
        assert_eq!(
            o,
            Options {
                ranks: 4,
                program: "train".into(),
                args: vec![],
                tag_output: false,
                output_dir: None,
                grace: DEFAULT_GRACE,
                timeout: None,
            }
        );
    }

    #[test]
    fn everything_after_the_program_belongs_to_it() {
        let o = parse("-n 2 --tag-output prog --flag x -n 7 --tag-output --help").unwrap();
        assert_eq!(o.ranks, 2);
        assert!(o.tag_output);
        assert_eq!(o.program, "prog");
        let args: Vec<&str> = o.args.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(args, ["--flag", "x", "-n", "7", "--tag-output", "--help"]);
        let o = parse("-n 1 -- -weird-name a").unwrap();
        assert_eq!(o.program, "-weird-name");
        assert_eq!(o.args, vec![OsString::from("a")]);
    }

    #[test]
    fn all_flags() {
        let o = parse("--np 3 --output-dir out --grace 0.5 --timeout 10 ./p").unwrap();
        assert_eq!(o.ranks, 3);
        assert_eq!(o.output_dir, Some(PathBuf::from("out")));
        assert_eq!(o.grace, Duration::from_millis(500));
        assert_eq!(o.timeout, Some(Duration::from_secs(10)));
        assert_eq!(parse("-n 1 --grace 0 p").unwrap().grace, Duration::ZERO);
    }

    #[test]
    fn bad_lines_are_usage_errors_that_name_the_problem() {
        assert!(err("-n 0 prog").contains("at least 1"));
        assert!(err("-n x prog").contains("not a number"));
        assert!(err("-n 2").contains("PROGRAM"));
        assert!(err("prog").contains("-n"));
        assert!(err("--bogus -n 2 prog").contains("--bogus"));
        assert!(err("-n 2 --timeout 0 prog").contains("out of range"));
        assert!(err("-n 2 --timeout -1 prog").contains("out of range"));
        assert!(err("-n 2 --grace -1 prog").contains("--grace"));
        assert!(err("-n 2 --grace nan prog").contains("out of range"));
    }

    #[test]
    fn help_and_version_exit_zero_and_help_has_the_exit_codes() {
        let e = parse("--help").unwrap_err();
        assert_eq!(e.exit_code(), 0);
        assert!(e.to_string().contains("Exit codes:"));
        assert!(e.to_string().contains("--tag-output"));
        assert_eq!(parse("--version").unwrap_err().exit_code(), 0);
    }
}
