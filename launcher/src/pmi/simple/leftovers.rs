//! Shared-memory files that MPICH and Intel MPI ranks killed before they finish `MPI_Init` or
//! `MPI_Finalize` leave in `/dev/shm` (ranks that run their course remove them). Two kinds:
//!
//! - A segment the first rank of a node creates under a random name and announces to the others
//!   through PMI, the path hex-encoded as a value (MPICH's `MPL_shm` `/dev/shm/mpich_shar_tmpXXXXXX`,
//!   Intel MPI's `/dev/shm/Intel_MPI_XXXXXX`): [`announced_segment`] recognises such a value;
//!   the service collects them ([`SimpleService::shm_segments`](super::SimpleService::shm_segments)).
//! - Files named after the kvsname, below.
//!
//! MPICH 4.1+ (`ch4/shm/posix/posix_init.c`) maps `/dev/shm/mpich_shm_W_N` and
//! `/dev/shm/mpich_vci_W_N`, `W` the hex FNV-1a hash of the kvsname (MPICH 5.0.2; the
//! development branch hashes `"KVSNAME-0"`, counting `MPI_Init`s) and `N` the node id. The
//! first rank of a node to open the name initialises it, so a leftover file of an earlier job with
//! the same kvsname breaks the next one (MPICH 5 asserts "Invalid GenQ flag" in `MPI_Init`):
//! every job (and every restart of one) needs its own `job_id`, and the launcher removes these
//! files when it ends a job.

/// The `/dev/shm` paths MPICH may have left for `job_id`'s node `node`.
pub fn mpich_shm_files(job_id: &str, node: usize) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for name in [job_id.to_string(), format!("{job_id}-0")] {
        let world = fnv1a(name.as_bytes());
        for kind in ["shm", "vci"] {
            out.push(format!("/dev/shm/mpich_{kind}_{world:x}_{node}").into());
        }
    }
    out
}

/// The prefixes of segment paths the MPI libraries announce.
const ANNOUNCED: [&str; 2] = ["/dev/shm/mpich_shar_tmp", "/dev/shm/Intel_MPI_"];

/// The shared-memory file a PMI value names, if it is the hex encoding of a path the MPI
/// libraries create for their node's ranks (a plain file name under `/dev/shm`).
pub fn announced_segment(value: &str) -> Option<std::path::PathBuf> {
    if value.len() % 2 != 0 || value.len() > 2 * 64 || value.len() < 2 * ANNOUNCED[1].len() {
        return None;
    }
    let bytes: Vec<u8> = (0..value.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(value.get(i..i + 2)?, 16).ok())
        .collect::<Option<_>>()?;
    let path = String::from_utf8(bytes).ok()?;
    of_announced_kind(&path).then(|| path.into())
}

/// Whether `path` is a plain file name under `/dev/shm` of a kind the MPI libraries announce
/// ([`ANNOUNCED`] and letters and digits).
fn of_announced_kind(path: &str) -> bool {
    ANNOUNCED
        .iter()
        .find_map(|p| path.strip_prefix(p))
        .is_some_and(|name| !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// The segments of the announced kinds in `/dev/shm` that this user owns, that were created (or
/// last changed) at `since` or later, and that no process maps or holds open: what a job's ranks
/// killed before every rank mapped one leave. Not every such segment is announced through PMI:
/// MPICH makes more inside and after `MPI_Init` and hands their names over shared memory (a
/// rank's death can release a PMI barrier, and the next rank makes its node segment just before
/// psyrun's SIGTERM lands). A file a live process uses, another job's included, is never
/// listed; nor is one of another user. `/proc` is read only when there is a candidate.
pub fn orphans_since(since: std::time::SystemTime) -> Vec<std::path::PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let uid = own_uid();
    let candidates: Vec<std::path::PathBuf> = std::fs::read_dir("/dev/shm")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            of_announced_kind(&p.to_string_lossy())
                && std::fs::symlink_metadata(p).is_ok_and(|m| {
                    m.is_file() && m.uid() == uid && m.modified().is_ok_and(|t| t >= since)
                })
        })
        .collect();
    if candidates.is_empty() {
        return candidates;
    }
    let in_use = files_in_use();
    candidates
        .into_iter()
        .filter(|p| !in_use.contains(p))
        .collect()
}

/// This process's real user id.
fn own_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    // /proc/self is owned by the process's user; no libc call needed.
    std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid())
}

/// Every `/dev/shm` path some process maps or holds open (as far as this user may look).
fn files_in_use() -> std::collections::HashSet<std::path::PathBuf> {
    let mut used = std::collections::HashSet::new();
    let pids = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        });
    for pid in pids {
        let dir = pid.path();
        if let Ok(maps) = std::fs::read_to_string(dir.join("maps")) {
            used.extend(
                maps.lines()
                    .filter_map(|l| l.split_whitespace().nth(5))
                    .filter(|p| p.starts_with("/dev/shm/"))
                    .map(std::path::PathBuf::from),
            );
        }
        for fd in std::fs::read_dir(dir.join("fd"))
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                if target.starts_with("/dev/shm/") {
                    used.insert(target);
                }
            }
        }
    }
    used
}

/// 32-bit FNV-1a, as MPICH's `HASH_FNV`.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(2_166_136_261u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(16_777_619)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orphans_are_unused_files_of_the_announced_kinds_made_since_the_job_began() {
        use std::os::fd::AsRawFd;
        use std::time::{Duration, SystemTime};
        let tag = std::process::id();
        let before = SystemTime::now() - Duration::from_secs(1);
        let orphan = format!("/dev/shm/mpich_shar_tmpPsyOrphan{tag}");
        let held = format!("/dev/shm/Intel_MPI_PsyHeld{tag}");
        let mapped = format!("/dev/shm/mpich_shar_tmpPsyMapped{tag}");
        let other = format!("/dev/shm/psyne-not-mpi-{tag}");
        std::fs::write(&orphan, b"x").expect("a file in /dev/shm");
        std::fs::write(&other, b"x").expect("a file in /dev/shm");
        let open = std::fs::File::create(&held).expect("a file in /dev/shm");
        {
            // Mapped, its descriptor closed at the end of this block: in use only through the map.
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&mapped)
                .expect("a file in /dev/shm");
            f.set_len(4096).expect("sizing it");
            // SAFETY: a fresh shared mapping of a 4096-byte file we own; it is never
            // dereferenced and stays mapped until the test process ends (it is tiny).
            let at = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    4096,
                    libc::PROT_READ,
                    libc::MAP_SHARED,
                    f.as_raw_fd(),
                    0,
                )
            };
            assert_ne!(at, libc::MAP_FAILED);
        }
        let found = orphans_since(before);
        let later = orphans_since(SystemTime::now() + Duration::from_secs(60));
        drop(open);
        for f in [&orphan, &held, &mapped, &other] {
            let _ = std::fs::remove_file(f);
        }
        assert!(found.contains(&orphan.clone().into()), "{found:?}");
        assert!(
            !found.contains(&held.clone().into()),
            "an open file is in use: {found:?}"
        );
        assert!(
            !found.contains(&mapped.clone().into()),
            "a mapped file is in use: {found:?}"
        );
        assert!(
            !found.contains(&other.clone().into()),
            "not an MPI name: {found:?}"
        );
        assert!(
            !later.contains(&orphan.into()),
            "made before `since`: {later:?}"
        );
    }

    fn hex(s: &str) -> String {
        s.bytes().map(|b| format!("{b:02X}")).collect()
    }

    #[test]
    fn announced_segments_are_recognised() {
        for path in ["/dev/shm/mpich_shar_tmp43rpDv", "/dev/shm/Intel_MPI_MyqJtP"] {
            assert_eq!(announced_segment(&hex(path)), Some(path.into()));
        }
        for other in [
            "/dev/shm/x",
            "/dev/shm/Intel_MPI_../../etc",
            "/etc/passwd",
            "mpich",
        ] {
            assert_eq!(announced_segment(&hex(other)), None, "{other}");
        }
        assert_eq!(announced_segment("2F6465762"), None);
        assert_eq!(
            announced_segment("zz6465762F73686D2F496E74656C5F4D50495F4D79714A7450"),
            None
        );
    }

    #[test]
    fn names_match_mpich() {
        // FNV-1a test vectors.
        assert_eq!(fnv1a(b""), 0x811c_9dc5);
        assert_eq!(fnv1a(b"a"), 0xe40c_292c);
        // Seen left by MPICH 5.0.2 ranks of job psy-pmi-test-31126-1, killed.
        let files = mpich_shm_files("psy-pmi-test-31126-1", 0);
        let shm = std::path::PathBuf::from("/dev/shm/mpich_shm_7e252b13_0");
        assert_eq!(files[0], shm);
        assert_eq!(
            files[1],
            std::path::PathBuf::from("/dev/shm/mpich_vci_7e252b13_0")
        );
        assert!(files[2].ends_with("mpich_shm_e56619e_0"));
    }
}
