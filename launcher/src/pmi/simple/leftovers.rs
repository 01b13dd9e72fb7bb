//! Shared-memory files MPICH ranks name after the job's kvsname, which a job whose ranks were
//! killed leaves in `/dev/shm` (a rank that exits normally removes them).
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
