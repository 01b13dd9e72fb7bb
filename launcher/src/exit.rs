//! psyrun's exit codes: the one table. `psyrun --help` prints the same table ([`HELP`]).
//!
//! | code | meaning |
//! |---|---|
//! | `0` | every rank exited with code 0 |
//! | `1`–`255` | the first rank that failed exited with this code (it is passed through unchanged, so it can coincide with the codes below; psyrun's message on stderr names the rank and what happened) |
//! | `2` ([`USAGE`]) | bad command line: unknown flag, `-n 0`, missing program, an unset `-x VAR`, a missing `--wdir`, a binding this machine cannot give; nothing was started |
//! | `124` ([`TIMEOUT`]) | `--timeout` expired; psyrun stopped the job |
//! | `125` ([`LAUNCH_FAILED`]) | psyrun itself failed: could not serve the store, create `--output-dir`, load hwloc for binding, or start a rank |
//! | `126` ([`NOT_EXECUTABLE`]) | the program exists but cannot be executed (no `x` bit: `chmod +x`; a directory; a bad format) |
//! | `127` ([`NOT_FOUND`]) | the program was not found (in `PATH`, or beside the psyrun executable) |
//! | `128+N` ([`SIGNALED_BASE`]` + N`) | the first failing rank was killed by signal N (`137`: SIGKILL), or psyrun received signal N and stopped the job (`129` SIGHUP, `130` SIGINT, `143` SIGTERM) |
//!
//! Ranks that psyrun itself stopped (after another rank failed, a signal, or the timeout) never
//! count as failures: the code is that of the first cause. With `--max-restarts` it is the last
//! attempt's ([`crate::restart`]).

/// Every rank exited with code 0.
pub const SUCCESS: u8 = 0;
/// Bad command line (unknown flag, `-n 0`, no program, an unset `-x VAR`, a missing `--wdir`, a
/// binding this machine cannot give); nothing was started.
pub const USAGE: u8 = 2;
/// `--timeout` expired and psyrun stopped the job (as `timeout(1)` does).
pub const TIMEOUT: u8 = 124;
/// psyrun itself failed: the store, the output directory, hwloc, or starting a rank (as
/// `timeout(1)`'s 125).
pub const LAUNCH_FAILED: u8 = 125;
/// The program exists but cannot be executed (as a shell's 126).
pub const NOT_EXECUTABLE: u8 = 126;
/// The program was not found (as a shell's 127).
pub const NOT_FOUND: u8 = 127;
/// Added to a signal number: a rank killed by signal N, or psyrun stopped by signal N, gives
/// `128 + N` (as a shell does).
pub const SIGNALED_BASE: u8 = 128;

/// The exit code for "killed by" or "stopped by" signal `signal`: `128 + signal`, saturating at
/// 255 for out-of-range numbers.
pub fn for_signal(signal: i32) -> u8 {
    u8::try_from(i32::from(SIGNALED_BASE) + signal.clamp(0, 127)).unwrap_or(u8::MAX)
}

/// The table above as plain text, for `psyrun --help`.
pub const HELP: &str = "\
Exit codes:
  0        every rank exited with code 0
  1-255    the first failing rank's own exit code, passed through unchanged
           (stderr names the rank; it may coincide with the codes below)
  2        bad command line (unknown flag, -n 0, no program, unset -x VAR, missing
           --wdir, a binding this machine cannot give); nothing was started
  124      --timeout expired; psyrun stopped the job
  125      psyrun itself failed (store, --output-dir, hwloc, starting a rank)
  126      the program is not executable (chmod +x it)
  127      the program was not found (in PATH or beside psyrun)
  128+N    the first failing rank was killed by signal N (137: SIGKILL), or psyrun
           got signal N and stopped the job (129 SIGHUP, 130 SIGINT, 143 SIGTERM)

With --max-restarts the code is the last attempt's; with --on-failure continue,
the last ranks'. Ranks psyrun stopped itself never count as failures. Each rank
runs in its own process group: on a failure, a signal or the timeout psyrun
sends SIGTERM to every group, waits --grace seconds, then sends SIGKILL (a
second Ctrl-C skips the wait). Ranks also die if psyrun is killed.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_lists_every_code() {
        for code in [
            SUCCESS,
            USAGE,
            TIMEOUT,
            LAUNCH_FAILED,
            NOT_EXECUTABLE,
            NOT_FOUND,
        ] {
            assert!(
                HELP.lines()
                    .any(|l| l.trim_start().starts_with(&format!("{code} "))),
                "code {code} is missing from the help table"
            );
        }
        assert!(HELP.contains("128+N"));
    }

    #[test]
    fn signals_map_like_a_shell() {
        assert_eq!(for_signal(libc::SIGKILL), 137);
        assert_eq!(for_signal(libc::SIGINT), 130);
        assert_eq!(for_signal(libc::SIGTERM), 143);
        assert_eq!(for_signal(libc::SIGHUP), 129);
        assert_eq!(for_signal(1000), 255);
    }
}
