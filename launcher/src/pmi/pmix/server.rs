//! libpmix's server: started once per process and kept running.
//!
//! libpmix 4.2.2 cannot start a server a second time in one process: the second
//! `PMIx_server_init` aborts the process (its listener thread calls `FD_SET` on a closed
//! descriptor; observed, with or without a host `listener`). psyrun runs several jobs in one
//! process (`--max-restarts`), so the server is initialised by the first
//! [`PmixService`](super::PmixService) and left running; each service registers its own
//! namespace and deregisters it on drop, after which libpmix has removed every file it made.
//!
//! libpmix's directory is fixed at that first init, yet each job's files belong inside that
//! job's tmpdir. So libpmix is given a fixed, process-private path ([`link_path`]): a symbolic
//! link that each service points at its own private directory while it runs and removes on
//! drop.

use super::ffi::{self, ServerApi};
use super::info::{self, InfoArray};
use super::upcalls;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The running server: its functions and the host name it was started with.
struct Running {
    api: &'static ServerApi,
    hostname: String,
}

static SERVER: Mutex<Option<Running>> = Mutex::new(None);

/// The path libpmix keeps its files under: a symbolic link to the running job's private
/// directory (`$TMPDIR/psyrun-pmix-PID`).
pub fn link_path() -> PathBuf {
    std::env::temp_dir().join(format!("psyrun-pmix-{}", std::process::id()))
}

/// Points [`link_path`] at `dir` (replacing a link left by this process, never anything else).
pub fn point_link_at(dir: &Path) -> Result<(), String> {
    let link = link_path();
    if let Ok(meta) = std::fs::symlink_metadata(&link) {
        if !meta.file_type().is_symlink() {
            return Err(format!(
                "PMIx: {} exists and is not psyrun's link",
                link.display()
            ));
        }
        std::fs::remove_file(&link)
            .map_err(|e| format!("PMIx: cannot replace {}: {e}", link.display()))?;
    }
    std::os::unix::fs::symlink(dir, &link).map_err(|e| {
        format!(
            "PMIx: cannot link {} to {}: {e}",
            link.display(),
            dir.display()
        )
    })
}

/// Removes [`link_path`] if it is a link.
pub fn remove_link() {
    let link = link_path();
    if std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()) {
        let _ = std::fs::remove_file(&link);
    }
}

/// The server's functions, starting it first if no service of this process has; `hostname`
/// is this host's name as the job's maps spell it.
pub fn get(hostname: &str) -> Result<&'static ServerApi, String> {
    let mut server = SERVER.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(running) = server.as_ref() {
        if running.hostname != hostname {
            return Err(format!(
                "PMIx: this process's server runs as host {:?}, not {hostname:?}",
                running.hostname
            ));
        }
        return Ok(running.api);
    }
    let api: &'static ServerApi = Box::leak(Box::new(ServerApi::load()?));
    let module = Box::leak(Box::new(upcalls::module()));
    let mut options = InfoArray::new(api, &info::server_info(&link_path(), hostname))?;
    // SAFETY: `module` is a complete module of `extern "C"` upcalls, leaked so it lives as long
    // as the server; `options` is a valid array of `len()` infos that outlives the call.
    let status = unsafe { (api.init)(module, options.as_mut_ptr(), options.len()) };
    if status != ffi::SUCCESS {
        return Err(format!("PMIx_server_init: {}", api.describe(status)));
    }
    *server = Some(Running {
        api,
        hostname: hostname.to_string(),
    });
    Ok(api)
}
