//! Every rank gets the launch contract's environment, the store answers, the secret stays off
//! command lines.

use crate::common;

use common::*;
use psyne::Secret;
use psyne::{Store, TcpStore};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn every_rank_sees_the_contract_and_the_store_answers() {
    const N: usize = 3;
    let dir = TempDir::new("contract");
    // Each rank records its environment, its stdin and its pid, then waits (at most ~20 s) for
    // the test to say "go" so the test can look at it while it runs.
    let script = format!(
        r#"env > "$D/env.$PSY_RANK.tmp" && mv "$D/env.$PSY_RANK.tmp" "$D/env.$PSY_RANK"
readlink /proc/$$/fd/0 > "$D/stdin.$PSY_RANK"
{RECORD_PID}
i=0; while [ ! -e "$D/go" ]; do i=$((i+1)); [ $i -gt 1000 ] && exit 98; sleep 0.02; done"#
    );
    let mut cmd = psyrun(&dir);
    cmd.args(["-n", &N.to_string(), "--timeout", "60", "sh", "-c", &script]);
    let mut job = Job::start(cmd, &dir);
    let pids = job.wait_for_pids(N);
    eventually(DEADLINE, "every rank's environment", || {
        (0..N).all(|r| dir.path().join(format!("env.{r}")).exists())
    });

    let envs: Vec<BTreeMap<String, String>> = (0..N)
        .map(|r| parse_env(&std::fs::read_to_string(dir.path().join(format!("env.{r}"))).unwrap()))
        .collect();
    let ranks: BTreeSet<String> = envs.iter().map(|e| e["PSY_RANK"].clone()).collect();
    assert_eq!(ranks, (0..N).map(|r| r.to_string()).collect());
    for (r, e) in envs.iter().enumerate() {
        let want = [
            ("PSY_RANK", r.to_string()),
            ("PSY_WORLD_SIZE", N.to_string()),
            ("PSY_LOCAL_RANK", r.to_string()),
            ("PSY_LOCAL_SIZE", N.to_string()),
            ("PSY_NODE_RANK", "0".into()),
            ("RANK", r.to_string()),
            ("WORLD_SIZE", N.to_string()),
            ("LOCAL_RANK", r.to_string()),
            ("LOCAL_WORLD_SIZE", N.to_string()),
            ("MASTER_ADDR", "127.0.0.1".into()),
        ];
        for (k, v) in want {
            assert_eq!(e.get(k), Some(&v), "rank {r}: {k}");
        }
        for k in ["PSY_STORE", "PSY_JOB_ID", "PSY_JOB_SECRET", "MASTER_PORT"] {
            assert_eq!(
                e.get(k),
                envs[0].get(k),
                "rank {r}: {k} differs from rank 0's"
            );
        }
        let stdin = std::fs::read_to_string(dir.path().join(format!("stdin.{r}"))).unwrap();
        assert_eq!(stdin.trim(), "/dev/null", "rank {r}'s stdin");
    }
    let e = &envs[0];
    let store = e["PSY_STORE"].clone();
    let store_port: u16 = store.rsplit(':').next().unwrap().parse().unwrap();
    assert!(store.starts_with("127.0.0.1:"), "{store}");
    let master_port: u16 = e["MASTER_PORT"].parse().unwrap();
    assert!(master_port != 0 && master_port != store_port);
    assert!(
        e["PSY_JOB_ID"].starts_with(&format!("psy-{}-", job.pid())),
        "{}",
        e["PSY_JOB_ID"]
    );
    let secret = e["PSY_JOB_SECRET"].clone();
    assert!(secret.len() >= 32, "a short secret: {secret}");

    // The secret is on no command line: not psyrun's, not a rank's, not anyone's.
    for pid in pids.iter().copied().chain([job.pid()]) {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        assert!(
            !String::from_utf8_lossy(&cmdline).contains(&secret),
            "pid {pid}"
        );
    }
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            assert!(
                !String::from_utf8_lossy(&cmdline).contains(&secret),
                "{:?}",
                entry.path()
            );
        }
    }

    // The store psyrun serves answers the job's secret.
    let secret = Secret::from_hex(&secret).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let a = TcpStore::connect(&store, &secret, deadline).expect("connecting to PSY_STORE");
    let b = TcpStore::connect(&store, &secret, deadline).expect("connecting to PSY_STORE");
    a.set("hello", b"world").unwrap();
    assert_eq!(b.get("hello", deadline).unwrap(), b"world");
    assert_eq!(b.add("n", 2).unwrap(), 2);
    let stranger = TcpStore::connect(&store, &Secret::generate().unwrap(), deadline);
    assert!(
        stranger.is_err(),
        "the store let in a client without the secret"
    );

    std::fs::write(dir.path().join("go"), "").unwrap();
    let done = job.wait(DEADLINE);
    assert_eq!(done.code(), Some(0), "stderr: {}", done.stderr);
}
