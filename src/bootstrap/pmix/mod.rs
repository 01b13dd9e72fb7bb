//! The PMIx client psyne forms a job with where a PMIx server started this process: Open MPI's
//! `mpirun`, PRRTE's `prterun`, `srun --mpi=pmix`. They set `PMIX_NAMESPACE`, `PMIX_RANK` and
//! `PMIX_SERVER_URI*` in every process; psyne then loads `libpmix.so.2` ([`ffi`]), learns its
//! rank, the job's size and whether every rank shares its node from the server, and meets the
//! other ranks ([`crate::bootstrap::meet`]) with `PMIx_Put`, `PMIx_Commit`, one `PMIx_Fence`
//! (`PMIX_COLLECT_DATA`) and `PMIx_Get` of rank 0's record. Then PMIx is finalized: psyne needs
//! it only to start.
//!
//! Where the library is missing, [`Client::connect`] says so and how to install it, and the
//! launch is refused as before (psyne cannot reach the other ranks).

pub mod ffi;

use super::meet::Exchange;
use crate::error::{Error, ErrorKind, Result};
use ffi::{Api, Data, Info, Proc, Value};
use std::ffi::{c_int, CStr, CString};
use std::time::Instant;

/// `PMIX_JOB_SIZE`: the number of processes in the job.
const JOB_SIZE: &str = "pmix.job.size";
/// `PMIX_LOCAL_SIZE`: the job's processes on this node.
const LOCAL_SIZE: &str = "pmix.local.size";
/// `PMIX_COLLECT_DATA`
const COLLECT_DATA: &str = "pmix.collect";
/// `PMIX_TIMEOUT` (seconds)
const TIMEOUT: &str = "pmix.timeout";

/// A connection to this process's PMIx server; finalized on drop.
pub struct Client {
    api: Api,
    me: Proc,
}

/// Where this process sits in the job, as the PMIx server tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// This process's rank.
    pub rank: usize,
    /// The number of processes in the job.
    pub size: usize,
    /// The job's processes on its node (all of them: psyne's store may stay on loopback).
    pub local_size: usize,
    /// The job's PMIx namespace.
    pub namespace: String,
}

impl Client {
    /// Loads the PMIx library and connects to the server named in the environment.
    pub fn connect() -> Result<Client> {
        let api = Api::load().map_err(not_loaded)?;
        let mut me = Proc {
            nspace: [0; 256],
            rank: 0,
        };
        // SAFETY: `me` is a valid pmix_proc_t for PMIx_Init to fill; no options are passed (a
        // null array of length 0).
        let status = unsafe { (api.init)(&mut me, std::ptr::null_mut(), 0) };
        if status != ffi::SUCCESS {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                format!(
                    "PMIx_Init failed: {}; is the launcher that set PMIX_SERVER_URI still \
                     running?",
                    api.describe(status)
                ),
            ));
        }
        Ok(Client { api, me })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.me.rank as usize
    }

    /// The job's namespace.
    pub fn namespace(&self) -> String {
        // SAFETY: PMIx_Init wrote a NUL-terminated namespace into the array, which the zeroed
        // initial value keeps terminated in any case (it holds one more byte than PMIx fills).
        unsafe { CStr::from_ptr(self.me.nspace.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    /// Rank, size and the size on this node, from the server. (Local rank and node are PMIx's
    /// to tell too, but nothing in psyne needs them: shared memory finds its peers by host.)
    pub fn placement(&self, deadline: Instant) -> Result<Placement> {
        Ok(Placement {
            rank: self.rank(),
            size: self.job_number(JOB_SIZE, deadline)?,
            local_size: self.job_number(LOCAL_SIZE, deadline)?,
            namespace: self.namespace(),
        })
    }

    /// A job-level number (`key` of the whole namespace).
    fn job_number(&self, key: &str, deadline: Instant) -> Result<usize> {
        self.number(ffi::RANK_WILDCARD, key, deadline)
    }

    fn number(&self, rank: u32, key: &str, deadline: Instant) -> Result<usize> {
        self.get(rank, key, deadline, |v| {
            // SAFETY: each arm reads the union member PMIx's type tag says holds the value.
            let n = unsafe {
                match v.kind {
                    ffi::TYPE_UINT8 => u64::from(v.data.uint8),
                    ffi::TYPE_UINT16 => u64::from(v.data.uint16),
                    ffi::TYPE_UINT32 | ffi::TYPE_PROC_RANK => u64::from(v.data.uint32),
                    ffi::TYPE_UINT64 => v.data.uint64,
                    ffi::TYPE_SIZE => v.data.size as u64,
                    ffi::TYPE_INT | ffi::TYPE_INT32 => u64::try_from(v.data.integer).ok()?,
                    _ => return None,
                }
            };
            usize::try_from(n).ok()
        })
    }

    /// The string `key` that process `rank` put.
    pub fn string(&self, rank: usize, key: &str, deadline: Instant) -> Result<String> {
        let rank = u32::try_from(rank).map_err(|_| Error::config("a PMIx rank is 32 bits"))?;
        self.get(rank, key, deadline, |v| {
            if v.kind != ffi::TYPE_STRING {
                return None;
            }
            // SAFETY: a PMIX_STRING value holds a NUL-terminated string (or NULL, checked),
            // owned by the value until it is destructed, after this copy.
            let p = unsafe { v.data.string };
            if p.is_null() {
                return None;
            }
            // SAFETY: as above.
            Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        })
    }

    /// `PMIx_Get` of `key` about process `rank`, read by `read` (`None`: not the type expected).
    fn get<T>(
        &self,
        rank: u32,
        key: &str,
        deadline: Instant,
        read: impl FnOnce(&Value) -> Option<T>,
    ) -> Result<T> {
        let proc = Proc {
            nspace: self.me.nspace,
            rank,
        };
        let ckey = c_key(key)?;
        let info = [timeout_info(deadline)?];
        let mut value: *mut Value = std::ptr::null_mut();
        // SAFETY: `proc`, `ckey` and `info` are valid for the call; PMIx writes a pointer to a
        // value it allocated into `value`, or leaves it null on failure.
        let status =
            unsafe { (self.api.get)(&proc, ckey.as_ptr(), info.as_ptr(), info.len(), &mut value) };
        if status != ffi::SUCCESS || value.is_null() {
            return Err(self.failed(&format!("PMIx_Get of {key} (rank {rank})"), status));
        }
        // SAFETY: `value` points to a valid pmix_value_t PMIx allocated for us.
        let got = read(unsafe { &*value });
        // SAFETY: PMIX_VALUE_RELEASE: destruct frees what the value owns, then the value itself
        // is freed with the C allocator PMIx allocated it with; it is not used again.
        unsafe {
            (self.api.value_destruct)(value);
            libc::free(value.cast());
        }
        got.ok_or_else(|| {
            Error::new(
                ErrorKind::Bootstrap,
                format!("PMIx gave {key} (rank {rank}) in a form psyne does not read"),
            )
        })
    }

    /// Puts `value` under `key` for every process of the job ([`ffi::SCOPE_GLOBAL`]); the next
    /// [`Client::fence`] commits it.
    pub fn put_string(&self, key: &str, value: &str) -> Result<()> {
        let ckey = c_key(key)?;
        let cvalue = CString::new(value)
            .map_err(|_| Error::config("a PMIx value may not contain a NUL byte"))?;
        let mut v = Value {
            kind: ffi::TYPE_STRING,
            data: Data {
                string: cvalue.as_ptr().cast_mut(),
            },
        };
        // SAFETY: `ckey` and `v` are valid for the call; PMIx copies the string (it does not
        // keep or free the pointer), and `cvalue` outlives the call.
        let status = unsafe { (self.api.put)(ffi::SCOPE_GLOBAL, ckey.as_ptr(), &mut v) };
        self.check(status, "PMIx_Put")
    }

    /// Commits (nothing, or what was put) and waits until every process of the job has entered
    /// the same fence, collecting their data, or `deadline` passes.
    pub fn fence(&self, deadline: Instant) -> Result<()> {
        // SAFETY: PMIx_Commit takes no arguments.
        let status = unsafe { (self.api.commit)() };
        self.check(status, "PMIx_Commit")?;
        let all = Proc {
            nspace: self.me.nspace,
            rank: ffi::RANK_WILDCARD,
        };
        let info = [
            Info::flag(COLLECT_DATA, true).ok_or_else(|| Error::config("PMIx key"))?,
            timeout_info(deadline)?,
        ];
        // SAFETY: one valid proc and two valid options, all alive for the call.
        let status = unsafe { (self.api.fence)(&all, 1, info.as_ptr(), info.len()) };
        self.check(
            status,
            "PMIx_Fence over the whole job (is every rank starting psyne?)",
        )
    }

    fn check(&self, status: c_int, what: &str) -> Result<()> {
        if status == ffi::SUCCESS {
            Ok(())
        } else {
            Err(self.failed(what, status))
        }
    }

    fn failed(&self, what: &str, status: c_int) -> Error {
        Error::new(
            ErrorKind::Bootstrap,
            format!("{what} failed: {}", self.api.describe(status)),
        )
    }
}

impl Exchange for Client {
    fn publish(&self, key: &str, value: &str, _deadline: Instant) -> Result<()> {
        self.put_string(key, value)
    }

    fn fence(&self, deadline: Instant) -> Result<()> {
        Client::fence(self, deadline)
    }

    fn read_rank0(&self, key: &str, deadline: Instant) -> Result<String> {
        self.string(0, key, deadline)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // SAFETY: no options (a null array of length 0). PMIx counts its initializations (an
        // MPI library in the same process may hold one), so this ends only psyne's.
        unsafe { (self.api.finalize)(std::ptr::null(), 0) };
    }
}

/// The error for a PMIx library that would not load (`why`: the loader's words).
fn not_loaded(why: String) -> Error {
    Error::new(
        ErrorKind::Bootstrap,
        format!(
            "the PMIx library could not be loaded ({why}); {}",
            ffi::INSTALL_HINT
        ),
    )
}

fn c_key(key: &str) -> Result<CString> {
    CString::new(key).map_err(|_| Error::config("a PMIx key may not contain a NUL byte"))
}

/// `PMIX_TIMEOUT` for the time left until `deadline`, in whole seconds (at least 1).
fn timeout_info(deadline: Instant) -> Result<Info> {
    let left = deadline.saturating_duration_since(Instant::now());
    let secs = c_int::try_from(left.as_secs() + 1).unwrap_or(c_int::MAX);
    Info::int(TIMEOUT, secs).ok_or_else(|| Error::config("PMIx key"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_reported_with_what_to_install() {
        let e = Api::load_from(&["libpsyne-no-such-pmix.so".into()])
            .map(|_| ())
            .map_err(not_loaded)
            .expect_err("no such library");
        assert_eq!(e.kind(), ErrorKind::Bootstrap);
        assert!(e.to_string().contains("libpmix2"), "{e}");
        assert!(e.to_string().contains("libpsyne-no-such-pmix.so"), "{e}");
    }
}
