//! The running PMIx service's state as libpmix's upcalls see it, and the work they queue (a
//! leaf of this module: the upcalls and the fences both use it).

use super::ffi::OpCallback;
use crate::pmi::{Exchange, Report};
use std::ffi::c_void;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the upcalls need of the running service.
pub struct Shared {
    /// The job's namespace: upcalls about others are ignored.
    pub nspace: String,
    /// This host's node index.
    pub node: usize,
    /// The job-wide all-gather behind fences.
    pub exchange: Arc<dyn Exchange>,
    /// How long a fence may wait for the other hosts.
    pub timeout: Duration,
    /// Work for the service's reporter thread; taken when the service stops, which ends it.
    pub work: Mutex<Option<Sender<Work>>>,
    /// Fences started, the next one's round.
    pub rounds: AtomicU64,
    /// False once the service stops: no callback into libpmix after that.
    pub open: Mutex<bool>,
}

/// A callback of libpmix's with its data, to be called on another thread.
pub struct Callback<F> {
    /// The function.
    pub func: F,
    /// Its `cbdata`.
    pub data: *mut c_void,
}

// SAFETY: libpmix's callbacks may be called from any thread (they thread-shift into libpmix's
// progress thread), and `data` is libpmix's opaque token, only ever handed back to it.
unsafe impl<F: Send> Send for Callback<F> {}

/// What the reporter thread does, in order.
pub enum Work {
    /// Pass a report to the launcher.
    Report(Report),
    /// Pass a report, then release the aborting client.
    Abort(Report, Option<Callback<OpCallback>>),
}

impl Shared {
    /// Runs `f` with libpmix's callbacks allowed (the service still open); false if closed.
    pub fn while_open(&self, f: impl FnOnce()) -> bool {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if *open {
            f();
        }
        *open
    }

    /// Hands `work` to the reporter thread (dropped once it is gone).
    pub(super) fn queue(&self, work: Work) {
        let tx = self.work.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = tx.as_ref() {
            // Fails only once the reporter thread is gone: the service stopped, the work is moot.
            let _ = tx.send(work);
        }
    }
}
