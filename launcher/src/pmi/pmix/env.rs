//! A rank's environment: what `PMIx_server_setup_fork` gives (how the rank's libpmix finds this
//! server), and the few Open MPI settings that make Open MPI 4.1 use it (see the module docs
//! of [`super`] for why each is there).

use std::ffi::{c_char, CStr, OsString};
use std::os::unix::ffi::OsStringExt;

/// The Open MPI 4.1 settings given to every rank besides libpmix's own variables (why each: the
/// module docs of [`super`]).
pub const OMPI_ENV: [(&str, &str); 4] = [
    // No launcher guess: only `schizo/ompi` may load, and it declines in an application, so no
    // `schizo` module declares the rank a singleton (`schizo/orte`) or a Slurm/Flux task. The
    // one setting without which Open MPI 4.1 runs a world of one.
    ("OMPI_MCA_schizo", "ompi"),
    // Take the launch from PMIx, and fail rather than fall back to a world of one.
    ("OMPI_MCA_ess", "pmi"),
    // psyrun binds (or deliberately does not bind) each rank; Open MPI must not rebind it ...
    ("OMPI_MCA_hwloc_base_binding_policy", "none"),
    // ... and knows it was placed by its launcher.
    ("OMPI_MCA_orte_externally_bound", "1"),
];

/// Open MPI's settings as environment pairs.
pub fn ompi_env() -> Vec<(OsString, OsString)> {
    OMPI_ENV
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect()
}

/// Splits `NAME=value` (a `NAME` without `=` gets an empty value).
pub fn split_assignment(entry: &[u8]) -> (OsString, OsString) {
    match entry.iter().position(|&b| b == b'=') {
        Some(i) => (
            OsString::from_vec(entry[..i].to_vec()),
            OsString::from_vec(entry[i + 1..].to_vec()),
        ),
        None => (OsString::from_vec(entry.to_vec()), OsString::new()),
    }
}

/// Takes the NULL-terminated `environ`-style array libpmix built: its entries, split, and frees
/// every string and the array.
///
/// # Safety
/// `env` must be NULL or a malloc'd NULL-terminated array of malloc'd NUL-terminated strings
/// that nobody else frees or uses afterwards.
pub unsafe fn take_environ(env: *mut *mut c_char) -> Vec<(OsString, OsString)> {
    let mut out = Vec::new();
    if env.is_null() {
        return out;
    }
    let mut i = 0;
    loop {
        // SAFETY: the array is NULL-terminated and `i` has not passed its end (loop ends at NULL).
        let entry = unsafe { *env.add(i) };
        if entry.is_null() {
            break;
        }
        // SAFETY: a NUL-terminated string of the array (the caller's promise), freed just after.
        out.push(split_assignment(
            unsafe { CStr::from_ptr(entry) }.to_bytes(),
        ));
        // SAFETY: malloc'd, not used again.
        unsafe { libc::free(entry.cast()) };
        i += 1;
    }
    // SAFETY: malloc'd, not used again.
    unsafe { libc::free(env.cast()) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_split_at_the_first_equals_sign() {
        assert_eq!(
            split_assignment(b"PMIX_SERVER_URI41=ns.0;tcp4://127.0.0.1:1=2"),
            (
                "PMIX_SERVER_URI41".into(),
                "ns.0;tcp4://127.0.0.1:1=2".into()
            )
        );
        assert_eq!(split_assignment(b"EMPTY="), ("EMPTY".into(), "".into()));
        assert_eq!(split_assignment(b"BARE"), ("BARE".into(), "".into()));
    }

    #[test]
    fn open_mpi_settings_are_plain_mca_variables() {
        let env = ompi_env();
        assert!(env.iter().any(|(k, v)| k == "OMPI_MCA_ess" && v == "pmi"));
        // Nothing that pretends to be another launcher (Flux, Slurm), which other programs read.
        for (k, _) in &env {
            let k = k.to_string_lossy();
            assert!(k.starts_with("OMPI_MCA_"), "{k}");
        }
    }

    #[test]
    fn a_null_environ_is_empty() {
        // SAFETY: NULL is allowed.
        assert!(unsafe { take_environ(std::ptr::null_mut()) }.is_empty());
    }
}
