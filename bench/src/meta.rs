//! What a run was, for the reader of its numbers: command line, source revision, machine, load,
//! date. Each part is gathered by its own function; [`collect`] assembles a [`RunMeta`].
//! Parsers of `/proc` text are separate from the reads so they can be tested.

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::model::{Backend, Record, RunMeta, Sweep};

/// The command line, each argument shell-quoted where needed (`psybench -n 2 allreduce ...`).
pub fn command_line() -> String {
    let args: Vec<String> = std::env::args().collect();
    quote_args(&args)
}

/// Joins arguments with spaces, single-quoting those a shell would split or expand.
pub fn quote_args(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@%".contains(c));
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `git describe --always --dirty` of the psybench source tree, or `None` when git or the tree
/// is absent (an installed binary).
pub fn git_revision() -> Option<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    if !dir.exists() {
        return None;
    }
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["describe", "--always", "--dirty"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// Online CPU cores of this host (all of them, not only those this process may run on: psyrun
/// pins ranks to single cores).
pub fn cores() -> usize {
    // SAFETY: sysconf only reads a system value.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 {
        n as usize
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// Whether this process may run on every online core (no launcher bound it to fewer), if the
/// kernel says.
pub fn runs_on_every_core() -> Option<bool> {
    // SAFETY: `set` is a plain bitmask the kernel fills; we pass its exact size.
    let count = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        libc::CPU_COUNT(&set)
    };
    Some(count as usize >= cores())
}

/// The CPU model named in `/proc/cpuinfo` text (`model name`, or `Hardware`/`cpu model`/`cpu` on
/// other architectures), with runs of spaces collapsed.
pub fn parse_cpu_model(cpuinfo: &str) -> Option<String> {
    for key in ["model name", "Hardware", "cpu model", "cpu"] {
        for line in cpuinfo.lines() {
            if let Some((k, v)) = line.split_once(':') {
                if k.trim() == key && !v.trim().is_empty() {
                    return Some(v.split_whitespace().collect::<Vec<_>>().join(" "));
                }
            }
        }
    }
    None
}

/// This host's CPU model, or `unknown`.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| parse_cpu_model(&t))
        .unwrap_or_else(|| "unknown".into())
}

/// The 1-minute load average from `/proc/loadavg` text.
pub fn parse_loadavg(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

/// This host's 1-minute load average, if readable.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| parse_loadavg(&t))
}

/// psyne's (and psybench's) version.
pub fn psyne_version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// The civil date `(year, month, day)` of a day number counted from 1970-01-01 (proleptic
/// Gregorian; Howard Hinnant's `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `secs` since the Unix epoch as RFC 3339 UTC (`2024-05-01T12:34:56Z`).
pub fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The current time as RFC 3339 UTC.
pub fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    rfc3339(secs)
}

/// The metadata of a run of `sweep` on `world_size` ranks whose hosts are `hosts` (each rank's
/// host name in rank order; duplicates are dropped here), as rank `rank` sees it. Reads this
/// host's CPU, cores, load and the clock. Only rank 0's metadata is written, so only rank 0 asks
/// git for the source revision: a `git` child of every rank, started as the sweep begins, takes
/// the cores the ranks run on.
pub fn collect(sweep: &Sweep, world_size: usize, hosts: &[String], rank: usize) -> RunMeta {
    let mut uniq: Vec<String> = Vec::new();
    for h in hosts {
        if !uniq.contains(h) {
            uniq.push(h.clone());
        }
    }
    if uniq.is_empty() {
        uniq.push(psyne::hostname());
    }
    RunMeta {
        command: command_line(),
        git_revision: if rank == 0 { git_revision() } else { None },
        hosts: uniq,
        cores: cores(),
        cpu_model: cpu_model(),
        world_size,
        transport: sweep.transport.clone(),
        algos: sweep
            .algos
            .iter()
            .map(|a| a.map_or_else(|| "auto".to_string(), |a| a.name().to_string()))
            .collect(),
        backends: sweep
            .backends
            .iter()
            .map(|b: &Backend| b.name().to_string())
            .collect(),
        psyne_version: psyne_version(),
        date: now_rfc3339(),
        load_average: load_average(),
        peak_gbps: sweep.peak_gbps,
        tuning_file: None,
        unbound_ranks: None,
    }
}

/// Metadata rebuilt from records alone (a CSV carries no metadata): world size, transport,
/// algorithms and backends from the rows; unknown machine; `source` (the file) as the command.
pub fn from_records(records: &[Record], source: &str) -> RunMeta {
    let mut algos: Vec<String> = Vec::new();
    let mut backends: Vec<String> = Vec::new();
    let mut transports: Vec<String> = Vec::new();
    for r in records {
        for (list, v) in [
            (&mut algos, &r.algo),
            (&mut backends, &r.backend),
            (&mut transports, &r.transport),
        ] {
            if !list.contains(v) {
                list.push(v.clone());
            }
        }
    }
    RunMeta {
        command: format!("(read from {source})"),
        git_revision: None,
        hosts: Vec::new(),
        cores: 0,
        cpu_model: "unknown".into(),
        world_size: records.iter().map(|r| r.ranks).max().unwrap_or(0),
        transport: transports.join(","),
        algos,
        backends,
        psyne_version: String::new(),
        date: String::new(),
        load_average: None,
        peak_gbps: None,
        tuning_file: None,
        unbound_ranks: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_714_566_896), "2024-05-01T12:34:56Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn proc_parsers() {
        let info = "processor\t: 0\nmodel name\t: AMD EPYC   7B13 64-Core Processor\n";
        assert_eq!(
            parse_cpu_model(info).as_deref(),
            Some("AMD EPYC 7B13 64-Core Processor")
        );
        assert_eq!(parse_loadavg("0.52 0.40 0.31 1/123 456"), Some(0.52));
        assert_eq!(parse_loadavg(""), None);
    }

    #[test]
    fn quoting() {
        let a: Vec<String> = ["psybench", "--sizes", "8:1M", "it's"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(quote_args(&a), r"psybench --sizes 8:1M 'it'\''s'");
    }
}
