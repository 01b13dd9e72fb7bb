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
    let name = ANNOUNCED.iter().find_map(|p| path.strip_prefix(p))?;
    let plain = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric());
    plain.then(|| path.into())
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
