//! The server module: the functions libpmix calls on its progress thread when a client connects,
//! finalizes, aborts, fences or asks for another host's data. Each copies what it is handed,
//! queues the work for psyrun's own threads and returns at once; panics are caught, never
//! unwound into C.
//!
//! libpmix hosts one server per process, and its upcalls carry no pointer of psyrun's, so the
//! running service's state is a process-wide [`Shared`], set by [`install`] and taken by
//! [`uninstall`].

use super::ffi::{self, ModexCallback, OpCallback, Proc, ServerModule};
use super::info::text;
use super::shared::{Callback, Shared, Work};
use crate::pmi::Report;
use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};

static SHARED: Mutex<Option<Arc<Shared>>> = Mutex::new(None);

fn slot() -> MutexGuard<'static, Option<Arc<Shared>>> {
    SHARED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Makes `shared` the running service's; an error if one is running already.
pub fn install(shared: Arc<Shared>) -> Result<(), String> {
    let mut slot = slot();
    if slot.is_some() {
        return Err(
            "a PMIx server is running in this process already (libpmix hosts one per process)"
                .into(),
        );
    }
    *slot = Some(shared);
    Ok(())
}

/// Forgets the running service (upcalls after this do nothing).
pub fn uninstall() {
    slot().take();
}

fn current() -> Option<Arc<Shared>> {
    slot().clone()
}

/// The module handed to `PMIx_server_init`.
pub fn module() -> ServerModule {
    ServerModule {
        client_connected: Some(client_connected),
        client_finalized: Some(client_finalized),
        abort: Some(abort),
        fence_nb: Some(fence_nb),
        direct_modex: Some(direct_modex),
        unused_before_job_control: [None; 14],
        job_control: Some(job_control),
        unused_after_job_control: [None; 8],
    }
}

/// The rank of `proc_` if it is of the running job.
///
/// # Safety
/// `proc_` must be NULL or point to a valid `pmix_proc_t`.
unsafe fn our_rank(shared: &Shared, proc_: *const Proc) -> Option<usize> {
    // SAFETY: NULL or valid (the caller's promise).
    let p = unsafe { proc_.as_ref() }?;
    // SAFETY: PMIx keeps the namespace NUL-terminated within its array.
    let nspace = unsafe { text(p.nspace.as_ptr()) };
    (nspace == shared.nspace).then_some(p.rank as usize)
}

/// Runs an upcall's body, turning a panic into `PMIX_ERROR`.
fn guarded(body: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(ffi::ERROR)
}

/// Queues `report(rank)` for the rank `proc_` names, if it is one of this job's; answers
/// libpmix that the operation is done.
///
/// # Safety
///
/// `proc_` is the valid proc libpmix passed to an upcall.
unsafe fn report_rank(proc_: *const Proc, report: impl FnOnce(usize) -> Report) -> c_int {
    guarded(|| {
        if let Some(shared) = current() {
            // SAFETY: the caller's guarantee.
            if let Some(rank) = unsafe { our_rank(&shared, proc_) } {
                shared.queue(Work::Report(report(rank)));
            }
        }
        ffi::OPERATION_SUCCEEDED
    })
}

unsafe extern "C" fn client_connected(
    proc_: *const Proc,
    _server_object: *mut c_void,
    _cbfunc: Option<OpCallback>,
    _cbdata: *mut c_void,
) -> c_int {
    // SAFETY: libpmix passes a valid proc.
    unsafe { report_rank(proc_, |rank| Report::Spoke { rank }) }
}

unsafe extern "C" fn client_finalized(
    proc_: *const Proc,
    _server_object: *mut c_void,
    _cbfunc: Option<OpCallback>,
    _cbdata: *mut c_void,
) -> c_int {
    // SAFETY: libpmix passes a valid proc.
    unsafe { report_rank(proc_, |rank| Report::Finalized { rank }) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn abort(
    proc_: *const Proc,
    _server_object: *mut c_void,
    status: c_int,
    msg: *const c_char,
    _procs: *mut Proc,
    _nprocs: usize,
    cbfunc: Option<OpCallback>,
    cbdata: *mut c_void,
) -> c_int {
    guarded(|| {
        let Some(shared) = current() else {
            return ffi::OPERATION_SUCCEEDED;
        };
        // SAFETY: libpmix passes a valid proc.
        let Some(rank) = (unsafe { our_rank(&shared, proc_) }) else {
            return ffi::OPERATION_SUCCEEDED;
        };
        // SAFETY: `msg` is NULL or the client's NUL-terminated message, copied here.
        let message = unsafe { text(msg) };
        // Open MPI's MPI_Abort says "N/A" for no message.
        let message = if message == "N/A" {
            String::new()
        } else {
            message
        };
        let report = Report::Abort {
            rank,
            code: status,
            message,
        };
        let release = cbfunc.map(|func| Callback { func, data: cbdata });
        shared.queue(Work::Abort(report, release));
        ffi::SUCCESS
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn fence_nb(
    _procs: *const Proc,
    _nprocs: usize,
    _info: *const ffi::Info,
    _ninfo: usize,
    data: *mut c_char,
    ndata: usize,
    cbfunc: Option<ModexCallback>,
    cbdata: *mut c_void,
) -> c_int {
    guarded(|| {
        let (Some(shared), Some(func)) = (current(), cbfunc) else {
            return ffi::ERR_NOT_SUPPORTED;
        };
        let blob = if data.is_null() || ndata == 0 {
            Vec::new()
        } else {
            // SAFETY: libpmix hands `ndata` readable bytes at `data`, valid during this call;
            // they are copied here.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), ndata) }.to_vec()
        };
        let round = shared.rounds.fetch_add(1, Ordering::SeqCst);
        let done = Callback { func, data: cbdata };
        match super::fence::start(shared, round, blob, done) {
            Ok(()) => ffi::SUCCESS,
            Err(_) => ffi::ERROR,
        }
    })
}

/// Another host's data for one rank. With every host's data handed to every host at each fence
/// (Open MPI's default: `PMIX_COLLECT_DATA`), libpmix finds it locally and never asks; asked
/// anyway, psyrun answers "not supported" at once so the client's `PMIx_Get` fails instead of
/// hanging.
unsafe extern "C" fn direct_modex(
    _proc: *const Proc,
    _info: *const ffi::Info,
    _ninfo: usize,
    _cbfunc: Option<ModexCallback>,
    _cbdata: *mut c_void,
) -> c_int {
    ffi::ERR_NOT_SUPPORTED
}

/// Job control asked of the launcher (kill, signal, checkpoint ...): not offered. Its presence
/// matters all the same: libpmix records a client's `PMIX_REGISTER_CLEANUP` requests (Open
/// MPI's shared-memory files in `/dev/shm`) only when the host has this entry, and then removes
/// them when the namespace is deregistered, even if the ranks were killed. libpmix handles
/// those directives itself and asks the host only about the rest.
unsafe extern "C" fn job_control(
    _requestor: *const Proc,
    _targets: *const Proc,
    _ntargets: usize,
    _directives: *const ffi::Info,
    _ndirs: usize,
    _cbfunc: Option<ffi::InfoCallback>,
    _cbdata: *mut c_void,
) -> c_int {
    ffi::ERR_NOT_SUPPORTED
}

/// The reporter thread's loop: runs queued work until the service stops.
pub fn reporter_loop(rx: mpsc::Receiver<Work>, report: crate::pmi::Reporter, shared: Arc<Shared>) {
    for work in rx {
        match work {
            Work::Report(r) => report(r),
            Work::Abort(r, release) => {
                report(r);
                if let Some(cb) = release {
                    shared.while_open(|| {
                        // SAFETY: libpmix's abort callback with its own cbdata, called once,
                        // while the server is still running.
                        unsafe { (cb.func)(ffi::SUCCESS, cb.data) }
                    });
                }
            }
        }
    }
}
