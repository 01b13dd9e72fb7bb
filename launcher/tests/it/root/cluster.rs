//! The SSH test cluster (`scripts/cluster/cluster.sh`) comes up, every host answers over real SSH
//! from inside another host's namespace, and it goes away leaving no namespace, link or daemon.

use crate::common;

use std::path::PathBuf;
use std::process::Command;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/cluster/cluster.sh")
}

/// Tears the cluster down even when the test fails.
struct Down(PathBuf);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = Command::new("timeout")
            .arg("60")
            .arg(script())
            .arg("down")
            .arg(&self.0)
            .status();
    }
}

fn run(args: &[&str]) -> (bool, String) {
    let out = Command::new("timeout")
        .arg("120")
        .arg(script())
        .args(args)
        .output()
        .expect("running cluster.sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn three_hosts_answer_over_ssh_and_leave_nothing_behind() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: the test cluster needs root (CI runs as root)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("psyne-cluster-test-{}", std::process::id()));
    let d = dir.to_string_lossy().into_owned();
    let _machine = common::ClusterLock::take();
    let guard = Down(dir.clone());
    let (ok, text) = run(&["up", "3", &d]);
    assert!(ok, "{text}");
    let (ok, text) = run(&["check", &d]);
    assert!(ok, "{text}");
    for host in ["psyh1: ok", "psyh2: ok", "psyh3: ok"] {
        assert!(text.contains(host), "{text}");
    }
    drop(guard);
    let netns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&netns.stdout).contains("psyh"),
        "namespaces left behind"
    );
    let links = Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .unwrap();
    let links = String::from_utf8_lossy(&links.stdout);
    assert!(
        !links.contains("psybr0") && !links.contains("psyv"),
        "links left behind: {links}"
    );
    assert!(!dir.exists());
}
