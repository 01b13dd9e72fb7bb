//! `PSY_TUNING` naming something that is not a regular file: every rank of the job reads it at
//! `init`, so a FIFO (no writer ever) or a device (`/dev/zero`, endless) must fail the job at
//! once, naming what it is, rather than hold every rank in `open` outside `PSY_TIMEOUT` or read
//! until memory runs out.

use crate::common;

use common::*;
use std::path::PathBuf;
use std::time::Duration;

/// The job's timeout; a refusal must come well before it.
const PSY_TIMEOUT: u64 = 30;

fn check_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_psyne-check"))
}

#[test]
fn a_tuning_file_that_is_a_fifo_or_a_device_fails_the_job_at_once_naming_what_it_is() {
    let dir = TempDir::new("tuning-fifo");
    let fifo = dir.path().join("tuning");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    for (tuning, what) in [
        (fifo.clone(), "it is a FIFO or pipe, not a regular file"),
        (
            PathBuf::from("/dev/zero"),
            "it is a character device, not a regular file",
        ),
    ] {
        let mut cmd = psyrun(&dir);
        cmd.args(["-n", "2", "--grace", "2"])
            .arg(check_bin())
            .args(["--counts", "5"])
            .env("PSY_TIMEOUT", PSY_TIMEOUT.to_string())
            .env("PSY_TUNING", &tuning);
        // Reading /dev/zero without end must not exhaust this shared machine.
        limit_memory(&mut cmd, 1 << 30);
        // Half the job's own timeout: the refusal is immediate, not a deadline passing.
        let done = Job::start(cmd, &dir).wait(Duration::from_secs(PSY_TIMEOUT / 2));
        let ctx = format!("stdout:\n{}\nstderr:\n{}", done.stdout, done.stderr);
        assert_ne!(done.code(), Some(0), "{}: {ctx}", tuning.display());
        assert!(
            done.stderr.contains(&format!(
                "cannot read the tuning file {}: {what}",
                tuning.display()
            )),
            "{ctx}"
        );
        assert!(done.stderr.contains("or set PSY_TUNING=off"), "{ctx}");
    }
}
