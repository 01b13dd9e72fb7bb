//! Output forwarding: whole lines, tags, per-rank files.

use crate::common;

use common::*;
use std::collections::BTreeMap;
use std::time::Duration;

const N: usize = 4;
const LINES: usize = 300;

/// Each rank prints LINES long lines (1000 to 9000 bytes: most are longer than a pipe's atomic
/// write) to stdout and as many to stderr, all at once: `R<rank> L<i> <filler> END`.
const SPEW: &str = r#"awk -v r="$PSY_RANK" -v n=300 'BEGIN {
  c = substr("abcdefgh", r + 1, 1); s = c;
  while (length(s) < 9000) s = s s;
  for (i = 0; i < n; i++) {
    len = 1000 + (i * 977 + r * 131) % 8000;
    printf "R%d L%d %s END\n", r, i, substr(s, 1, len);
    printf "R%d E%d %s END\n", r, i, substr(s, 1, len) > "/dev/stderr";
  }
}'"#;

/// This machine's name, as `--tag-output` shows it.
fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

/// Splits a `--tag-output` line `[HOST][RANK] rest` into its parts.
fn split_tag(line: &str) -> Option<(&str, usize, &str)> {
    let rest = line.strip_prefix('[')?;
    let (host, rest) = rest.split_once("][")?;
    let (rank, rest) = rest.split_once("] ")?;
    Some((host, rank.parse().ok()?, rest))
}

/// Checks that every line is one whole line of SPEW (after `prefix(rank)`), and that each rank's
/// lines all arrived, in order.
fn check_lines(text: &str, kind: char, tagged: bool) {
    check_mixed_lines(text, kind, None, tagged)
}

/// As [`check_lines`], skipping whole lines of kind `skip` (stdout and stderr in one stream).
fn check_mixed_lines(text: &str, kind: char, skip: Option<char>, tagged: bool) {
    let mut next: BTreeMap<usize, usize> = BTreeMap::new();
    for (no, line) in text.lines().enumerate() {
        if let Some(skip) = skip {
            let body = if tagged {
                line.split_once("] ").map_or(line, |x| x.1)
            } else {
                line
            };
            if body.split(' ').nth(1).is_some_and(|t| t.starts_with(skip)) {
                continue;
            }
        }
        let bad = || {
            format!(
                "line {no} is not a whole line: {:?}",
                &line[..line.len().min(120)]
            )
        };
        let mut rest = line;
        if tagged {
            let (host, tag_rank, after) = split_tag(line).unwrap_or_else(|| panic!("{}", bad()));
            assert_eq!(host, this_host(), "{}", bad());
            assert!(
                after.starts_with(&format!("R{tag_rank} ")),
                "tag [{tag_rank}] on another rank's line: {}",
                bad()
            );
            rest = after;
        }
        let mut parts = rest.splitn(4, ' ');
        let rank: usize = parts
            .next()
            .and_then(|p| p.strip_prefix('R'))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{}", bad()));
        let i: usize = parts
            .next()
            .and_then(|p| p.strip_prefix(kind))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{}", bad()));
        let filler = parts.next().unwrap_or_else(|| panic!("{}", bad()));
        assert_eq!(parts.next(), Some("END"), "{}", bad());
        let c = b"abcdefgh"[rank] as char;
        let len = 1000 + (i * 977 + rank * 131) % 8000;
        assert!(
            filler.len() == len && filler.chars().all(|x| x == c),
            "{}",
            bad()
        );
        let want = next.entry(rank).or_default();
        assert_eq!(i, *want, "rank {rank}'s lines out of order");
        *want += 1;
    }
    assert_eq!(next.len(), N, "lines from every rank");
    assert!(
        next.values().all(|&n| n == LINES),
        "all lines arrived: {next:?}"
    );
}

#[test]
fn concurrent_long_lines_are_never_interleaved() {
    let dir = TempDir::new("interleave");
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", &N.to_string(), "sh", "-c", SPEW]);
    let done = run(cmd, &dir);
    assert_eq!(
        done.code(),
        Some(0),
        "stderr head: {}",
        &done.stderr[..done.stderr.len().min(300)]
    );
    check_lines(&done.stdout, 'L', false);
    check_lines(&done.stderr, 'E', false);
}

#[test]
fn stdout_and_stderr_on_one_pipe_never_mix_either() {
    let dir = TempDir::new("2and1");
    // `sh` becomes psyrun with its stderr on its stdout pipe, as `psyrun ... 2>&1` would.
    let mut cmd = std::process::Command::new("sh");
    cmd.env("D", dir.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .args(["-c", r#"exec "$0" -n "$1" --tag-output sh -c "$2" 2>&1"#])
        .arg(psyrun_path())
        .args([&N.to_string(), SPEW]);
    let job = Job::start(cmd, &dir);
    let done = job.wait(DEADLINE);
    assert_eq!(done.code(), Some(0));
    let text = done.stdout;
    assert_eq!(text.lines().count(), 2 * N * LINES);
    check_mixed_lines(&text, 'L', Some('E'), true);
    check_mixed_lines(&text, 'E', Some('L'), true);
}

#[test]
fn tag_output_prefixes_every_line_with_its_rank() {
    let dir = TempDir::new("tag");
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", &N.to_string(), "--tag-output", "sh", "-c", SPEW]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(0));
    check_lines(&done.stdout, 'L', true);
    check_lines(&done.stderr, 'E', true);
}

#[test]
fn output_dir_holds_each_ranks_streams_and_the_last_partial_line_is_kept() {
    let dir = TempDir::new("outdir");
    let out = dir.path().join("made/by/psyrun");
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "3", "--output-dir"])
        .arg(&out)
        .args([
            "sh",
            "-c",
            r#"echo "out $PSY_RANK"; echo "err $PSY_RANK" >&2; echo "more $PSY_RANK"; printf "tail $PSY_RANK""#,
        ]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    for r in 0..3 {
        let read = |s: &str| std::fs::read_to_string(out.join(format!("rank.{r}.{s}"))).unwrap();
        assert_eq!(read("stdout"), format!("out {r}\nmore {r}\ntail {r}"));
        assert_eq!(read("stderr"), format!("err {r}\n"));
        // On the console the partial last line is ended, so it cannot run into another line.
        for want in [
            format!("out {r}\n"),
            format!("more {r}\n"),
            format!("tail {r}\n"),
        ] {
            assert!(done.stdout.contains(&want), "{want:?} in {:?}", done.stdout);
        }
        assert!(done.stderr.contains(&format!("err {r}\n")));
    }
    assert_eq!(done.stdout.lines().count(), 9);
}

#[test]
fn ranks_shows_only_the_ranks_listed_and_output_dir_still_gets_all() {
    let dir = TempDir::new("ranks");
    let out = dir.path().join("out");
    let mut cmd = psyrun(&dir);
    cmd.args([
        "-n",
        "6",
        "--ranks",
        "0,3-4",
        "--tag-output",
        "--output-dir",
    ])
    .arg(&out)
    .args([
        "sh",
        "-c",
        r#"echo "out $PSY_RANK"; echo "err $PSY_RANK" >&2"#,
    ]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    let host = this_host();
    let mut lines: Vec<&str> = done.stdout.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [0, 3, 4].map(|r| format!("[{host}][{r}] out {r}")),
        "{}",
        done.stdout
    );
    let mut lines: Vec<&str> = done.stderr.lines().collect();
    lines.sort();
    assert_eq!(lines, [0, 3, 4].map(|r| format!("[{host}][{r}] err {r}")));
    for r in 0..6 {
        let read = |s: &str| std::fs::read_to_string(out.join(format!("rank.{r}.{s}"))).unwrap();
        assert_eq!(read("stdout"), format!("out {r}\n"));
        assert_eq!(read("stderr"), format!("err {r}\n"));
    }
}

#[test]
fn bad_rank_lists_are_usage_errors_that_say_why() {
    let dir = TempDir::new("badranks");
    for (list, want) in [
        ("0,5", "--ranks names rank 5, but the job has 3 ranks (0-2)"),
        ("2-1", "runs backwards; write 1-2"),
        ("a", "not a rank number"),
        ("0,,1", "empty item"),
    ] {
        let mut cmd = psyrun(&dir);
        cmd.args([
            "-n",
            "3",
            "--ranks",
            list,
            "sh",
            "-c",
            r#"touch "$D/started""#,
        ]);
        let done = run(cmd, &dir);
        assert_eq!(done.code(), Some(2), "--ranks {list}: {}", done.stderr);
        assert!(
            done.stderr.contains(want),
            "--ranks {list}: {}",
            done.stderr
        );
        assert!(!dir.path().join("started").exists());
    }
}

/// Parses `2026-11-21T10:00:00.123456Z` into microseconds since the epoch.
fn parse_stamp(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 27 || b[4] != b'-' || b[10] != b'T' || b[19] != b'.' || b[26] != b'Z' {
        return None;
    }
    let num = |a: usize, z: usize| s.get(a..z)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (h, mi, sec, us) = (num(11, 13)?, num(14, 16)?, num(17, 19)?, num(20, 26)?);
    // Days from civil (Howard Hinnant), for the check only.
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * (if mo > 2 { mo - 3 } else { mo + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400 + h * 3600 + mi * 60 + sec) * 1_000_000) + us)
}

#[test]
fn timestamps_are_wall_clock_microseconds_taken_when_the_line_is_read() {
    let dir = TempDir::new("stamps");
    let now_us = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as i64
    };
    let before = now_us();
    let mut cmd = psyrun(&dir);
    cmd.args([
        "-n",
        "2",
        "--timestamp-output",
        "--tag-output",
        "sh",
        "-c",
        r#"echo "first $PSY_RANK"; sleep 0.3; echo "second $PSY_RANK""#,
    ]);
    let done = run(cmd, &dir);
    let after = now_us();
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    let host = this_host();
    let mut stamps = std::collections::BTreeMap::new();
    for line in done.stdout.lines() {
        let (stamp, rest) = line.split_once(' ').unwrap();
        let t = parse_stamp(stamp).unwrap_or_else(|| panic!("bad stamp in {line:?}"));
        assert!(before <= t && t <= after, "{line:?} outside the run");
        let (h, rank, text) = split_tag(rest).unwrap_or_else(|| panic!("no tag in {line:?}"));
        assert_eq!(h, host);
        assert!(text.ends_with(&format!(" {rank}")), "{line:?}");
        stamps.insert(text.to_string(), t);
    }
    assert_eq!(stamps.len(), 4, "{}", done.stdout);
    for r in 0..2 {
        let gap = stamps[&format!("second {r}")] - stamps[&format!("first {r}")];
        // Read when written, not when the rank ended: the sleep between the lines shows.
        assert!(gap >= 250_000, "rank {r}: lines {gap} us apart");
    }
}

/// psyrun's peak resident memory (VmHWM), in KiB.
fn peak_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn ten_mib_lines_from_two_ranks_arrive_whole_tagged_once_in_bounded_memory() {
    let dir = TempDir::new("long-lines");
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "2", "--tag-output", "sh", "-c", &long_lines_sh(LONG)]);
    let job = Job::start(cmd, &dir);
    eventually(DEADLINE, "both ranks' end lines", || {
        let text = job.stdout.text();
        text.contains("] R0 end\n") && text.contains("] R1 end\n")
    });
    let peak = peak_kib(job.pid());
    std::fs::write(dir.path().join("go"), "").unwrap();
    let done = job.wait(DEADLINE);
    assert_eq!(done.code(), Some(0), "stderr: {}", done.stderr);
    check_long_lines(&done.stdout, LONG, &[&this_host(), &this_host()]);
    // Two 10 MiB lines buffered whole would take 20 MiB; streamed, psyrun stays far below.
    eprintln!("psyrun's peak memory: {peak} KiB");
    assert!(peak < 16 * 1024, "psyrun's peak memory: {peak} KiB");
}

#[test]
fn a_long_partial_line_left_open_does_not_hold_back_the_other_ranks() {
    let dir = TempDir::new("stalled-line");
    // Rank 0 writes 200 KB without a newline and exits, leaving a grandchild that holds its
    // stdout open (so psyrun sees no end of file until it kills the group); rank 1 then writes a
    // line and waits until it has been forwarded.
    let body = r#"if [ "$PSY_RANK" = 0 ]; then head -c 200000 /dev/zero | tr '\0' p; sleep 300 & exit 0; fi
sleep 0.3; echo "R1 line"; i=0; while [ ! -e "$D/seen" ]; do i=$((i+1)); [ $i -gt 1000 ] && exit 99; sleep 0.02; done"#;
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "2", "--tag-output", "sh", "-c", body]);
    let job = Job::start(cmd, &dir);
    eventually(
        Duration::from_secs(10),
        "rank 1's line on the console",
        || job.stdout.text().contains("[1] R1 line\n"),
    );
    std::fs::write(dir.path().join("seen"), "").unwrap();
    let done = job.wait(DEADLINE);
    assert_eq!(done.code(), Some(0), "stderr: {}", done.stderr);
    let partial = format!("[0] {}\n", "p".repeat(200_000));
    assert!(
        done.stdout.lines().count() == 2 && done.stdout.contains(&partial),
        "{} bytes: {:?}...",
        done.stdout.len(),
        &done.stdout[..done.stdout.len().min(100)]
    );
}
