//! Binding ranks to CPUs with hwloc (or, without its library, with the topology Linux gives in
//! `/sys`): what `--report-bindings` prints is what each rank's kernel affinity
//! (`Cpus_allowed_list` in `/proc/self/status`) really is, and requests the machine cannot meet
//! fail before anything starts, naming the fix.
//!
//! The tests adapt to the machine's core count (2 here and in CI).

use crate::common;

use common::*;
use std::collections::BTreeMap;

/// Each rank prints `RANK CPUS` from its own /proc/self/status.
const SHOW_AFFINITY: &str =
    r#"echo "$PSY_RANK $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)""#;

/// The CPUs this test process may use, as the kernel lists them, and how many.
fn own_cpus() -> (String, usize) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string();
    let count = list
        .split(',')
        .map(|item| match item.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
            None => 1,
        })
        .sum();
    (list, count)
}

/// Cores psyrun may use: CPUs, assuming one hardware thread per core (true on this VM; with
/// SMT the binding tests only get stricter than needed).
fn cores() -> usize {
    let (_, cpus) = own_cpus();
    let threads: usize =
        std::fs::read_to_string("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list")
            .ok()
            .map_or(1, |l| l.trim().split(',').count().max(1));
    cpus / threads.max(1)
}

/// Whether psyrun can read this machine's topology (from hwloc, or from `/sys` without it): an
/// explicit binding of one rank succeeds.
fn can_bind() -> bool {
    let dir = TempDir::new("hashwloc");
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "1", "--bind-to", "core", "true"]);
    let done = run(cmd, &dir);
    match done.code() {
        Some(0) => true,
        Some(125) if done.stderr.contains("hwloc could not be loaded") => false,
        _ => panic!("psyrun -n 1 --bind-to core true: {}", done.stderr),
    }
}

/// `RANK -> cpus` from `--report-bindings` lines: `psyrun: HOST rank R: cpus LIST (...)`.
fn reported(stderr: &str) -> BTreeMap<usize, String> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("psyrun: "))
        .filter_map(|l| {
            let (_host, rest) = l.split_once(" rank ")?;
            let (rank, rest) = rest.split_once(": cpus ")?;
            let list = rest.split_whitespace().next()?;
            Some((rank.parse().ok()?, list.to_string()))
        })
        .collect()
}

/// `RANK -> cpus` as the ranks saw them.
fn actual(stdout: &str) -> BTreeMap<usize, String> {
    stdout
        .lines()
        .filter_map(|l| {
            let (rank, list) = l.split_once(' ')?;
            Some((rank.parse().ok()?, list.to_string()))
        })
        .collect()
}

fn run_bound(dir: &TempDir, flags: &[&str]) -> Done {
    let mut cmd = psyrun(dir);
    cmd.args(flags)
        .arg("--report-bindings")
        .args(["sh", "-c", SHOW_AFFINITY]);
    run(cmd, dir)
}

#[test]
fn each_rank_gets_its_own_core_and_the_report_matches_the_kernel() {
    if !can_bind() || cores() < 2 {
        eprintln!("skipped: needs a topology and 2 cores");
        return;
    }
    let dir = TempDir::new("bind2");
    let done = run_bound(&dir, &["-n", "2", "--bind-to", "core"]);
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    let (rep, act) = (reported(&done.stderr), actual(&done.stdout));
    assert_eq!(rep.len(), 2, "{}", done.stderr);
    assert_eq!(
        rep, act,
        "reported:\n{}\nactual:\n{}",
        done.stderr, done.stdout
    );
    assert_ne!(act[&0], act[&1], "two ranks on one core");
    for (r, list) in &act {
        assert!(
            !list.contains(','),
            "rank {r} got more than one core: {list}"
        );
    }
    // The default does the same when the cores suffice.
    let done = run_bound(&dir, &["-n", "2"]);
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    assert_eq!(reported(&done.stderr), actual(&done.stdout));
    assert!(done.stderr.contains("(bound to core 0)"), "{}", done.stderr);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert!(
        done.stderr
            .contains(&format!("psyrun: {} rank 1: cpus ", host.trim())),
        "{}",
        done.stderr
    );
}

#[test]
fn more_ranks_than_cores_are_not_bound_by_default_and_psyrun_says_so() {
    let dir = TempDir::new("bindmany");
    let n = cores() + 2;
    let done = run_bound(&dir, &["-n", &n.to_string()]);
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    let notes: Vec<&str> = done
        .stderr
        .lines()
        .filter(|l| l.contains("not binding"))
        .collect();
    assert_eq!(notes.len(), 1, "one note: {}", done.stderr);
    let (own, _) = own_cpus();
    let act = actual(&done.stdout);
    assert_eq!(act.len(), n);
    assert!(act.values().all(|l| *l == own), "{}", done.stdout);
    assert_eq!(reported(&done.stderr), act);
    // Without --report-bindings nothing is said.
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", &n.to_string(), "true"]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(0));
    assert_eq!(done.stderr, "");
}

#[test]
fn cpus_per_rank_binds_a_rank_to_several_cores() {
    if !can_bind() || cores() < 2 {
        eprintln!("skipped: needs a topology and 2 cores");
        return;
    }
    let dir = TempDir::new("bindcpr");
    let done = run_bound(&dir, &["-n", "1", "--cpus-per-rank", "2"]);
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    let act = actual(&done.stdout);
    assert_eq!(reported(&done.stderr), act);
    assert!(
        done.stderr.contains("(bound to cores 0-1)"),
        "{}",
        done.stderr
    );
    assert_eq!(act[&0].split([',', '-']).count(), 2, "{}", act[&0]);
}

#[test]
fn more_cores_than_the_machine_has_is_an_error_naming_the_fixes() {
    if !can_bind() {
        eprintln!("skipped: needs a topology");
        return;
    }
    let dir = TempDir::new("bindbig");
    let too_many = (cores() + 1).to_string();
    for flags in [
        vec!["-n", "1", "--cpus-per-rank", &too_many],
        vec!["-n", "1", "--bind-to", "core", "--cpus-per-rank", &too_many],
        vec!["-n", &too_many, "--bind-to", "core"],
    ] {
        let mut cmd = psyrun(&dir);
        cmd.args(&flags).args(["sh", "-c", r#"touch "$D/started""#]);
        let done = run(cmd, &dir);
        assert_eq!(done.code(), Some(2), "{flags:?}: {}", done.stderr);
        let e = &done.stderr;
        assert!(
            e.contains(&format!("this host has only {}", cores())),
            "{e}"
        );
        assert!(
            e.contains("--oversubscribe") && e.contains("--bind-to none"),
            "{e}"
        );
        assert!(!dir.path().join("started").exists());
    }
    // The fixes work.
    let done = run_bound(
        &dir,
        &["-n", "1", "--bind-to", "none", "--cpus-per-rank", &too_many],
    );
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    assert!(done.stderr.contains("(not bound)"), "{}", done.stderr);
}

#[test]
fn oversubscribed_cores_are_reused_round_robin() {
    if !can_bind() || cores() < 2 {
        eprintln!("skipped: needs a topology and 2 cores");
        return;
    }
    let dir = TempDir::new("bindover");
    let n = 2 * cores() + 1;
    let done = run_bound(
        &dir,
        &["-n", &n.to_string(), "--bind-to", "core", "--oversubscribe"],
    );
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    let act = actual(&done.stdout);
    assert_eq!(reported(&done.stderr), act);
    assert_eq!(act.len(), n);
    for r in 0..n {
        assert_eq!(
            act[&r],
            act[&(r % cores())],
            "rank {r} is not on core {}",
            r % cores()
        );
    }
    assert_ne!(act[&0], act[&1]);
}

#[test]
fn without_hwloc_ranks_bind_to_the_cores_linux_describes_and_bind_to_none_still_works() {
    let dir = TempDir::new("nohwloc");
    let no_hwloc = dir.path().join("no-libhwloc.so");
    // An explicit binding and the default both read the cores from /sys/devices/system.
    for flags in [&["-n", "2", "--bind-to", "core"][..], &["-n", "2"][..]] {
        let mut cmd = psyrun(&dir);
        cmd.env("PSYRUN_HWLOC_LIB", &no_hwloc)
            .args(flags)
            .arg("--report-bindings")
            .args(["sh", "-c", SHOW_AFFINITY]);
        let done = run(cmd, &dir);
        assert_eq!(done.code(), Some(0), "{flags:?}: {}", done.stderr);
        let (rep, act) = (reported(&done.stderr), actual(&done.stdout));
        assert_eq!(rep, act, "{flags:?}: {}\n{}", done.stderr, done.stdout);
        if cores() >= 2 {
            assert_ne!(act[&0], act[&1], "{flags:?}: two ranks on one core");
            assert!(!done.stderr.contains("not binding"), "{}", done.stderr);
        }
    }

    let mut cmd = psyrun(&dir);
    cmd.env("PSYRUN_HWLOC_LIB", &no_hwloc).args([
        "-n",
        "2",
        "--bind-to",
        "none",
        "--report-bindings",
        "sh",
        "-c",
        SHOW_AFFINITY,
    ]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    assert_eq!(reported(&done.stderr), actual(&done.stdout));
}

#[test]
fn map_by_and_bind_to_objects_cover_the_machine() {
    if !can_bind() {
        eprintln!("skipped: needs a topology");
        return;
    }
    // One socket and one NUMA node here: binding to either gives every CPU to every rank.
    let dir = TempDir::new("bindobj");
    let (own, _) = own_cpus();
    for flags in [
        ["-n", "1", "--bind-to", "socket", "--map-by", "socket"],
        ["-n", "1", "--bind-to", "numa", "--map-by", "numa"],
    ] {
        let done = run_bound(&dir, &flags);
        assert_eq!(done.code(), Some(0), "{flags:?}: {}", done.stderr);
        let act = actual(&done.stdout);
        assert_eq!(reported(&done.stderr), act);
        let numa_nodes = std::fs::read_dir("/sys/devices/system/node").map_or(1, |d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("node"))
                .count()
        });
        let sockets = std::fs::read_to_string("/proc/cpuinfo").map_or(1, |t| {
            let mut ids: Vec<&str> = t.lines().filter(|l| l.starts_with("physical id")).collect();
            ids.sort();
            ids.dedup();
            ids.len().max(1)
        });
        if numa_nodes == 1 && sockets == 1 {
            assert_eq!(act[&0], own, "{flags:?}");
        }
    }
}
