//! `-x` and `--wdir`: variables reach every rank byte for byte, unset ones and missing
//! directories stop the launch before anything starts.

use crate::common;

use common::*;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

/// Awkward values: spaces, both quotes, a newline, `=`, a backslash, a `$`, a tab, a byte that
/// is not UTF-8, and an empty one.
fn awkward() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("PSYT_SPACES", b"  two  spaces  ".to_vec()),
        ("PSYT_QUOTES", b"it's \"quoted\" 'twice'".to_vec()),
        ("PSYT_NEWLINE", b"line one\nline two\n".to_vec()),
        ("PSYT_EQUALS", b"a=b==c=".to_vec()),
        ("PSYT_SHELL", b"$HOME `id` \\n \t$(true);|&".to_vec()),
        ("PSYT_BYTES", b"\xff\xfe latin1 \xe9".to_vec()),
        ("PSYT_EMPTY", b"".to_vec()),
    ]
}

/// A rank script that prints every awkward variable between delimiters.
fn printer() -> String {
    let mut s = String::new();
    for (name, _) in awkward() {
        s.push_str(&format!(r#"printf '<%s>' "${name}"; "#));
    }
    s
}

fn expected() -> Vec<u8> {
    let mut want = Vec::new();
    for (_, value) in awkward() {
        want.push(b'<');
        want.extend_from_slice(&value);
        want.push(b'>');
    }
    want
}

fn set_args() -> Vec<OsString> {
    let mut args = Vec::new();
    for (name, value) in awkward() {
        args.push(OsString::from("-x"));
        let mut v = format!("{name}=").into_bytes();
        v.extend_from_slice(&value);
        args.push(OsString::from_vec(v));
    }
    args
}

#[test]
fn set_values_arrive_byte_for_byte_on_stdout() {
    let dir = TempDir::new("xset");
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "1"])
        .args(set_args())
        .args(["sh", "-c", &printer()]);
    let out = cmd.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut want = expected();
    // psyrun ends the last, unterminated line on its console.
    want.push(b'\n');
    assert_eq!(
        out.stdout,
        want,
        "{:?}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn set_and_forwarded_values_reach_every_rank_exactly() {
    let dir = TempDir::new("xall");
    let files = dir.path().join("out");
    // Half set on the command line, half forwarded from psyrun's environment by name.
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", "3", "--output-dir"]).arg(&files);
    for (i, (name, value)) in awkward().into_iter().enumerate() {
        if i % 2 == 0 {
            cmd.env(name, OsString::from_vec(value));
            cmd.args(["-x", name]);
        } else {
            let mut v = format!("{name}=").into_bytes();
            v.extend_from_slice(&value);
            cmd.arg("-x").arg(OsString::from_vec(v));
        }
    }
    cmd.args(["sh", "-c", &printer()]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    for r in 0..3 {
        let got = std::fs::read(files.join(format!("rank.{r}.stdout"))).unwrap();
        assert_eq!(
            got,
            expected(),
            "rank {r}: {:?}",
            String::from_utf8_lossy(&got)
        );
    }
}

#[test]
fn an_unset_forwarded_variable_is_an_error_naming_it_and_starts_nothing() {
    let dir = TempDir::new("xunset");
    let mut cmd = psyrun(&dir);
    cmd.env_remove("PSYT_NOT_SET").args([
        "-n",
        "2",
        "-x",
        "PSYT_NOT_SET",
        "sh",
        "-c",
        r#"touch "$D/started""#,
    ]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(2), "{}", done.stderr);
    assert!(
        done.stderr
            .contains("-x PSYT_NOT_SET: PSYT_NOT_SET is not set in psyrun's environment"),
        "{}",
        done.stderr
    );
    assert!(!dir.path().join("started").exists());
}

#[test]
fn variables_psyrun_sets_itself_and_bad_names_are_refused() {
    let dir = TempDir::new("xbad");
    for (x, want) in [
        ("PSY_RANK=7", "psyrun sets PSY_RANK for every rank itself"),
        ("WORLD_SIZE", "psyrun sets WORLD_SIZE"),
        ("9LIVES=1", "not a variable name"),
        ("=1", "not a variable name"),
    ] {
        let mut cmd = psyrun(&dir);
        cmd.args(["-n", "1", "-x", x, "true"]);
        let done = run(cmd, &dir);
        assert_eq!(done.code(), Some(2), "-x {x}: {}", done.stderr);
        assert!(done.stderr.contains(want), "-x {x}: {}", done.stderr);
    }
}

#[test]
fn the_last_value_of_a_name_wins_and_mpmd_parts_add_their_own() {
    let dir = TempDir::new("xmpmd");
    let mut cmd = psyrun(&dir);
    cmd.args([
        "--tag-output",
        "-n",
        "1",
        "-x",
        "A=1",
        "-x",
        "B=first",
        "-x",
        "B=second",
    ])
    .args(["sh", "-c", r#"echo "$A $B ${C-unset}""#])
    .args([":", "-n", "1", "-x", "C=3", "-x", "A=one"])
    .args(["sh", "-c", r#"echo "$A $B ${C-unset}""#]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    let mut lines: Vec<&str> = done
        .stdout
        .lines()
        .map(|l| l.split_once("] ").unwrap().1)
        .collect();
    lines.sort();
    assert_eq!(lines, ["1 second unset", "one second 3"], "{}", done.stdout);
}

#[test]
fn ranks_run_in_psyruns_directory_or_in_wdir() {
    let dir = TempDir::new("wdir");
    let sub = dir.path().join("sub dir");
    std::fs::create_dir(&sub).unwrap();
    let rel = dir.script("rel.sh", "#!/bin/sh\npwd -P\n", 0o755);
    let canon = |p: &std::path::Path| std::fs::canonicalize(p).unwrap();

    // Default: psyrun's own working directory.
    let mut cmd = psyrun(&dir);
    cmd.current_dir(&sub)
        .args(["-n", "2", "sh", "-c", "pwd -P"]);
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    let want = format!("{}\n", canon(&sub).display());
    assert_eq!(done.stdout, want.repeat(2));

    // --wdir: there, and a relative program path still means relative to psyrun's directory.
    let mut cmd = psyrun(&dir);
    cmd.current_dir(dir.path())
        .args(["-n", "2", "--wdir"])
        .arg(&sub)
        .arg("./rel.sh");
    let done = run(cmd, &dir);
    assert_eq!(done.code(), Some(0), "{}", done.stderr);
    assert_eq!(done.stdout, want.repeat(2));
    assert!(rel.exists());

    // A missing directory, or a file, stops the launch.
    for (bad, why) in [
        (dir.path().join("missing"), "No such file or directory"),
        (rel.clone(), "not a directory"),
    ] {
        let mut cmd = psyrun(&dir);
        cmd.args(["-n", "1", "--wdir"])
            .arg(&bad)
            .args(["sh", "-c", r#"touch "$D/started""#]);
        let done = run(cmd, &dir);
        assert_eq!(done.code(), Some(2), "{}", done.stderr);
        assert!(
            done.stderr.contains(&format!("--wdir {}", bad.display())) && done.stderr.contains(why),
            "{}",
            done.stderr
        );
        assert!(!dir.path().join("started").exists());
    }
}
