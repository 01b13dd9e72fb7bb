//! The command line: bad input starts nothing and says why; programs are found; arguments pass
//! through untouched.

use crate::common;

use common::*;
use std::process::{Command, Stdio};
use std::time::Instant;

/// A rank script that leaves a mark if it ever runs.
const MARK: &str = r#"touch "$D/started.$PSY_RANK""#;

fn nothing_started(dir: &TempDir) -> bool {
    std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .all(|e| !e.file_name().to_string_lossy().starts_with("started"))
}

#[test]
fn zero_ranks_is_a_usage_error_and_starts_nothing() {
    let dir = TempDir::new("n0");
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "0", "sh", "-c", MARK]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(2));
    assert!(done.stderr.contains("at least 1"), "{}", done.stderr);
    assert!(nothing_started(&dir));
}

#[test]
fn too_many_ranks_is_a_usage_error_naming_the_limit_not_a_crash() {
    let dir = TempDir::new("nbig");
    for n in [
        "99999999",
        "2147483648",
        "18446744073709551615",
        "99999999999999999999999",
    ] {
        let mut cmd = psyrun(&dir);
        cmd.args(["-n", n, "sh", "-c", MARK]);
        let started = Instant::now();
        let done = run(cmd, &dir);
        assert_eq!(done.code(), Some(2), "-n {n}: {}", done.stderr);
        assert!(
            done.stderr.contains("limit of 1048576") || done.stderr.contains("not a number"),
            "-n {n}: {}",
            done.stderr
        );
        assert!(!done.stderr.contains("panicked"), "{}", done.stderr);
        assert!(
            started.elapsed().as_secs() < 10,
            "-n {n} took {:?}",
            started.elapsed()
        );
    }
    // More ranks than this user may run processes here (`ulimit -u`): refused before any starts.
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(r#"ulimit -u 64 && exec "$0" -n 100 sh -c "$1""#)
        .arg(env!("CARGO_BIN_EXE_psyrun"))
        .arg(MARK)
        .env("D", dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(2), "{}", done.stderr);
    assert!(
        done.stderr.contains("at most 64 processes"),
        "{}",
        done.stderr
    );
    assert!(nothing_started(&dir));
}

#[test]
fn an_unknown_flag_is_a_usage_error_and_starts_nothing() {
    let dir = TempDir::new("flag");
    let mut cmd = psyrun(&dir);
    cmd.args(["--frobnicate", "-n", "2", "sh", "-c", MARK]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(2));
    assert!(done.stderr.contains("--frobnicate"), "{}", done.stderr);
    assert!(nothing_started(&dir));
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "2"]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(2));
    assert!(done.stderr.contains("PROGRAM"), "{}", done.stderr);
}

#[test]
fn a_missing_program_exits_127_and_names_it() {
    let dir = TempDir::new("missing");
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "2", "no-such-program-psyrun-test"]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(127));
    assert!(
        done.stderr
            .contains("psyrun: program \"no-such-program-psyrun-test\" not found in PATH"),
        "{}",
        done.stderr
    );
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "2", "./no/such/prog"]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(127));
    assert!(
        done.stderr.contains("./no/such/prog does not exist"),
        "{}",
        done.stderr
    );
}

#[test]
fn a_file_that_is_not_executable_exits_126_and_says_chmod() {
    let dir = TempDir::new("noexec");
    let script = dir.script("rank.sh", &format!("#!/bin/sh\n{MARK}\n"), 0o644);
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "2"]).arg(&script);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(126));
    assert!(
        done.stderr
            .contains(&format!("chmod +x {}", script.display())),
        "{}",
        done.stderr
    );
    assert!(nothing_started(&dir));
}

#[test]
fn a_script_with_a_missing_interpreter_exits_127_and_says_so() {
    let dir = TempDir::new("interp");
    let script = dir.script("rank.sh", "#!/no/such/interpreter\n", 0o755);
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "2"]).arg(&script);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(127), "{}", done.stderr);
    assert!(
        done.stderr.contains("cannot start rank 0") && done.stderr.contains("interpreter"),
        "{}",
        done.stderr
    );
}

#[test]
fn a_bare_name_is_found_beside_the_psyrun_executable() {
    let dir = TempDir::new("beside");
    let copy = dir.path().join("psyrun");
    std::fs::copy(psyrun_path(), &copy).unwrap();
    dir.script(
        "myrank",
        "#!/bin/sh\necho \"beside $PSY_RANK of $PSY_WORLD_SIZE\"\n",
        0o755,
    );
    // Executing a file just written can fail with ETXTBSY while another thread of this test
    // process is between fork and exec with the file's write descriptor: retry briefly.
    let until = Instant::now() + DEADLINE;
    let out = loop {
        let out = Command::new(&copy)
            .args(["-n", "2", "myrank"])
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null())
            .output();
        match out {
            Ok(o) if !String::from_utf8_lossy(&o.stderr).contains("Text file busy") => break o,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {}
            Err(e) => panic!("running the copied psyrun: {e}"),
        }
        assert!(Instant::now() < until, "ETXTBSY for too long");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines: Vec<&str> = stdout.lines().collect();
    lines.sort();
    assert_eq!(lines, ["beside 0 of 2", "beside 1 of 2"]);
}

#[test]
fn the_programs_arguments_pass_through_untouched() {
    let dir = TempDir::new("args");
    let mut cmd = psyrun(&dir);
    cmd.args([
        "-n",
        "2",
        "sh",
        "-c",
        r#"printf '%s|' "$@"; echo"#,
        "argv0",
        "--flag",
        "x",
        "-n",
        "5",
        "--tag-output",
        "a b",
    ]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    assert_eq!(done.stdout, "--flag|x|-n|5|--tag-output|a b|\n".repeat(2));
}

#[test]
fn success_exits_0_and_help_shows_the_exit_codes() {
    let dir = TempDir::new("ok");
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "3", "true"]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(0));
    assert_eq!(done.stdout, "");
    assert_eq!(done.stderr, "");
    let mut cmd = psyrun(&dir);
    cmd.arg("--help");
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(0));
    for want in [
        "Exit codes:",
        "124",
        "125",
        "126",
        "127",
        "128+N",
        "--grace",
        "--timeout",
        "--tag-output",
        "--output-dir",
        "--timestamp-output",
        "--ranks",
        "--wdir",
        "--bind-to",
        "--report-bindings",
        "--dry-run",
    ] {
        assert!(
            done.stdout.contains(want),
            "--help lacks {want}:\n{}",
            done.stdout
        );
    }
}

#[test]
fn dry_run_prints_every_rank_and_starts_nothing_nor_shows_the_secret() {
    let dir = TempDir::new("dry");
    let mut cmd = psyrun(&dir);
    cmd.current_dir(dir.path())
        .env("PSYT_TOKEN", "do-not-print-me")
        .args(["--dry-run", "-n", "2", "-x", "PSYT_TOKEN", "-x", "MODE=a b"])
        .args(["--bind-to", "none", "sh", "-c", MARK])
        .args([":", "-n", "1", "--wdir", "/", "sh", "-c", MARK, "it's"]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    assert!(nothing_started(&dir));
    assert_eq!(done.stderr, "");
    let out = &done.stdout;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let here = std::fs::canonicalize(dir.path()).unwrap();
    assert!(
        out.starts_with("psyrun: dry run: 3 ranks of 2 programs on "),
        "{out}"
    );
    let blocks: Vec<&str> = out.split("\nrank ").skip(1).collect();
    assert_eq!(blocks.len(), 3, "{out}");
    for (r, block) in blocks.iter().enumerate() {
        assert!(
            block.starts_with(&format!("{r} on {}\n", host.trim())),
            "{block}"
        );
        let cwd = if r < 2 {
            here.display().to_string()
        } else {
            "/".into()
        };
        assert!(block.contains(&format!("  cwd:     {cwd}\n")), "{block}");
        assert!(
            block.contains("  binding: cpus ") && block.contains("(not bound)"),
            "{block}"
        );
        assert!(
            block.contains(&format!("  command: /usr/bin/sh -c '{MARK}'"))
                || block.contains(&format!("  command: /bin/sh -c '{MARK}'")),
            "{block}"
        );
        for var in [
            format!("PSY_RANK={r} "),
            "PSY_WORLD_SIZE=3 ".into(),
            format!("PSY_LOCAL_RANK={r} "),
            "PSY_NODE_RANK=0 ".into(),
            "PSY_STORE=127.0.0.1:<port> ".into(),
            "PSY_JOB_ID=<job-id> ".into(),
            "PSY_JOB_SECRET=<secret> ".into(),
            format!("RANK={r} "),
            "MASTER_ADDR=127.0.0.1 ".into(),
        ] {
            assert!(block.contains(&var), "{var} missing: {block}");
        }
        assert!(
            block.contains("-x:      PSYT_TOKEN=<from psyrun's environment> MODE='a b'"),
            "{block}"
        );
    }
    assert!(blocks[2].contains(r#" 'it'\''s'"#), "{}", blocks[2]);
    assert!(!out.contains("do-not-print-me"), "{out}");
    // Nothing that looks like a secret (a long run of hex digits) is printed.
    let longest_hex = out
        .split(|c: char| !c.is_ascii_hexdigit())
        .map(str::len)
        .max()
        .unwrap_or(0);
    assert!(longest_hex < 16, "{out}");
}

#[test]
fn dry_run_still_refuses_what_a_run_would_refuse() {
    let dir = TempDir::new("dry-bad");
    let mut cmd = psyrun(&dir);
    cmd.args(["--dry-run", "-n", "1", "no-such-program-psyrun-dry"]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(127), "{}", done.stderr);
    let mut cmd = psyrun(&dir);
    cmd.env_remove("PSYT_UNSET")
        .args(["--dry-run", "-n", "1", "-x", "PSYT_UNSET", "true"]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(2), "{}", done.stderr);
    assert_eq!(done.stdout, "");
}

/// psyrun with `args`, its memory capped at 1 GiB, run to its end.
fn run_limited(dir: &TempDir, args: &[&str]) -> Done {
    let mut cmd = psyrun(dir);
    cmd.args(args);
    limit_memory(&mut cmd, 1 << 30);
    run(cmd, dir)
}

#[test]
fn a_hostfile_that_is_a_device_or_binary_is_refused_naming_what_and_where() {
    let dir = TempDir::new("hostfile-kind");
    for dev in ["/dev/zero", "/dev/urandom"] {
        let done = run_limited(&dir, &["--hostfile", dev, "-n", "1", MARK]);
        assert_eq!(done.code(), Some(2), "{dev}: {}", done.stderr);
        let want = format!("hostfile {dev}: it is a character device, not a file of text");
        assert!(done.stderr.contains(&want), "{}", done.stderr);
    }
    let binary = dir.path().join("hosts");
    std::fs::write(&binary, b"a:1\nb\0:1\n").unwrap();
    let done = run_limited(
        &dir,
        &["--hostfile", binary.to_str().unwrap(), "-n", "1", MARK],
    );
    assert_eq!(done.code(), Some(2), "{}", done.stderr);
    assert!(
        done.stderr.contains("line 2 is not text (a NUL byte)"),
        "{}",
        done.stderr
    );
    let done = run_limited(&dir, &["--hostfile", "/", "-n", "1", MARK]);
    assert_eq!(done.code(), Some(2), "{}", done.stderr);
    assert!(done.stderr.contains("it is a directory"), "{}", done.stderr);
    assert!(nothing_started(&dir));
}

#[test]
fn a_hostfile_larger_than_16_mib_is_refused_and_a_pipe_is_read() {
    let dir = TempDir::new("hostfile-size");
    let big = dir.path().join("hosts");
    let line = "node01:1\n";
    std::fs::write(&big, line.repeat((16 << 20) / line.len() + 1)).unwrap();
    let big = big.to_str().unwrap();
    let done = run_limited(
        &dir,
        &["--launcher", "local", "--hostfile", big, "-n", "1", MARK],
    );
    assert_eq!(done.code(), Some(2), "{}", done.stderr);
    assert!(
        done.stderr.contains("larger than 16 MiB"),
        "{}",
        done.stderr
    );
    // A pipe (as `--hostfile <(...)` gives) is read like a file.
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        r#"printf 'a:1\nb:1\n' | "$0" --launcher local --hostfile /dev/stdin -n 2 --dry-run true"#,
    ])
    .arg(psyrun_path())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    assert!(
        done.stdout.contains("dry run: 2 ranks on 2 hosts"),
        "{}",
        done.stdout
    );
}

#[test]
fn an_ssh_config_that_is_a_device_is_refused_given_or_found_in_home() {
    let dir = TempDir::new("ssh-config-kind");
    let args = ["--dry-run", "-H", "a,b", "-n", "2", "true"];
    let mut given = vec!["--ssh-config", "/dev/zero"];
    given.extend_from_slice(&args);
    let done = run_limited(&dir, &given);
    assert_eq!(done.code(), Some(2), "{}", done.stderr);
    assert!(
        done.stderr.contains("a character device"),
        "{}",
        done.stderr
    );
    let ssh = dir.path().join(".ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    std::os::unix::fs::symlink("/dev/urandom", ssh.join("config")).unwrap();
    let mut cmd = psyrun(&dir);
    cmd.env("HOME", dir.path()).args(args);
    limit_memory(&mut cmd, 1 << 30);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(2), "{}", done.stderr);
    assert!(
        done.stderr.contains("a character device"),
        "{}",
        done.stderr
    );
}

#[test]
fn host_lists_in_slurm_syntax_expand_and_a_placement_that_cannot_fit_is_exit_2() {
    let dir = TempDir::new("hostlist");
    let mut cmd = psyrun(&dir);
    cmd.args(["--dry-run", "-H", "node[01-03,07]:2", "-n", "8", "true"]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    for (rank, host) in [(0, "node01"), (3, "node02"), (5, "node03"), (7, "node07")] {
        let line = format!("rank {rank} on {host} ");
        assert!(done.stdout.contains(&line), "{line:?}:\n{}", done.stdout);
    }
    // The same hosts with a rank too many: the dry run says why and exits 2.
    let mut cmd = psyrun(&dir);
    cmd.args(["--dry-run", "-H", "node[01-03,07]:2", "-n", "9", "true"]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(2), "{}", done.stdout);
    assert!(done
        .stdout
        .contains("placement fails: 9 ranks do not fit in the 8 slots"));
    // A real run says so before it contacts any host (these names resolve nowhere).
    let mut cmd = psyrun(&dir);
    cmd.args(["-H", "psyne-no-such-host[1-2]:1", "-n", "3", "true"]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(2), "{}", done.stderr);
    assert!(
        done.stderr.contains("3 ranks do not fit in the 2 slots") && !done.stderr.contains("ssh"),
        "{}",
        done.stderr
    );
    // A bad range names the part that is wrong.
    let mut cmd = psyrun(&dir);
    cmd.args(["--dry-run", "-H", "node[01-x]:2", "-n", "1", "true"]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(2), "{}", done.stderr);
    assert!(
        done.stderr.contains("\"01-x\" is not a number"),
        "{}",
        done.stderr
    );
}
