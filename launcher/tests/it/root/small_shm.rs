//! psyne in a `/dev/shm` too small for the node board's data areas (8 MiB over the board) and
//! for a pair's 2 MiB rings (4 MiB and a page): the job runs every collective right without the
//! areas and with 1 MiB rings, still over shared memory, and says so, instead of dying of SIGBUS
//! at the first touch of a page the tmpfs has no room for (`src/transport/shm/board.rs`,
//! `src/transport/shm/upgrade.rs`). The job runs in a mount namespace of its own with a 4 MiB
//! tmpfs on `/dev/shm`, which goes with it.

use crate::common;

use common::*;

#[test]
fn a_job_in_a_small_dev_shm_runs_without_the_boards_data_areas_on_smaller_rings_and_says_so() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !on_path("unshare") {
        eprintln!("skipped: a tmpfs of its own needs root and unshare (CI runs as root)");
        return;
    }
    let dir = TempDir::new("smallshm");
    let mut job = psyrun(&dir);
    job.args(["-n", "2", "--tag-output", "--grace", "2"])
        .arg(env!("CARGO_BIN_EXE_psyne-check"))
        // 3000 elements: parts of up to 12 KiB, which would rotate with the data areas.
        .args(["--counts", "1,3000"])
        .env("PSY_TIMEOUT", "30");
    let mount = "mount -t tmpfs -o size=4m,mode=1777 psyne-small-shm /dev/shm";
    let done = run(in_mount_namespace(&job, mount), &dir);
    assert_every_rank_matched(&done, 2);
    assert!(
        done.stderr
            .contains("the node board runs without its data areas")
            && done.stderr.contains("No space left on device")
            && done
                .stderr
                .contains("rings of 2048 KiB with rank 1 do not fit in /dev/shm")
            && done.stderr.contains("trying 1024 KiB"),
        "stderr:\n{}",
        done.stderr
    );
    assert_eq!(
        done.stdout.matches("links over shm").count(),
        2,
        "both ranks over shared memory:\n{}",
        done.stdout
    );
}
