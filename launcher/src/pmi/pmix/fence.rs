//! A fence, finished off libpmix's thread: this host's blob goes through the job's
//! [`Exchange`](crate::pmi::Exchange) (round `n` for the `n`th fence, the same on every host),
//! and the concatenation of every host's blob, in node order, goes back to libpmix, which unpacks
//! the other hosts' data from it. With one host that is this host's blob. The wait is bounded by
//! the service's timeout; past it the fence fails with `PMIX_ERR_TIMEOUT` (the ranks' `MPI_Init`
//! then fails rather than hangs).

use super::ffi::{self, ModexCallback};
use super::shared::{Callback, Shared};
use std::ffi::{c_char, c_int, c_void};
use std::sync::{mpsc, Arc};

/// Starts round `round` with this host's `blob`; `done` gets the result.
pub fn start(
    shared: Arc<Shared>,
    round: u64,
    blob: Vec<u8>,
    done: Callback<ModexCallback>,
) -> Result<(), String> {
    std::thread::Builder::new()
        .name(format!("psyrun-pmix-fence-{round}"))
        .spawn(move || {
            let outcome = gather(&shared, round, blob);
            deliver(&shared, outcome, done);
        })
        .map(|_| ())
        .map_err(|e| format!("cannot start a thread for PMIx fence {round}: {e}"))
}

/// Every host's blob, concatenated; or the status to fail the fence with.
fn gather(shared: &Arc<Shared>, round: u64, blob: Vec<u8>) -> Result<Vec<u8>, c_int> {
    let (tx, rx) = mpsc::channel();
    let exchange = Arc::clone(&shared.exchange);
    let node = shared.node;
    let spawned = std::thread::Builder::new()
        .name(format!("psyrun-pmix-gather-{round}"))
        .spawn(move || {
            // The receiver may have given up (timeout); then the result is dropped.
            let _ = tx.send(exchange.all_gather(node, round, blob));
        });
    if let Err(e) = spawned {
        eprintln!("psyrun: PMIx fence {round}: cannot start a thread: {e}");
        return Err(ffi::ERROR);
    }
    match rx.recv_timeout(shared.timeout) {
        Ok(Ok(blobs)) => Ok(blobs.concat()),
        Ok(Err(e)) => {
            eprintln!("psyrun: PMIx fence {round} failed: {e}");
            Err(ffi::ERROR)
        }
        Err(_) => {
            eprintln!(
                "psyrun: PMIx fence {round}: the other hosts did not answer within {:?}",
                shared.timeout
            );
            Err(ffi::ERR_TIMEOUT)
        }
    }
}

/// Hands the outcome to libpmix, unless the service has stopped.
fn deliver(shared: &Shared, outcome: Result<Vec<u8>, c_int>, done: Callback<ModexCallback>) {
    let delivered = shared.while_open(|| match outcome {
        Ok(data) => {
            let data = Box::new(data);
            let (ptr, len) = (data.as_ptr().cast::<c_char>(), data.len());
            let keep = Box::into_raw(data).cast::<c_void>();
            // SAFETY: libpmix's fence callback with its own cbdata, called once while the
            // server runs; `ptr`/`len` stay valid until libpmix calls `release` with `keep`,
            // which frees them.
            unsafe { (done.func)(ffi::SUCCESS, ptr, len, done.data, Some(release), keep) }
        }
        Err(status) => {
            // SAFETY: as above, with no data to release.
            unsafe {
                (done.func)(
                    status,
                    std::ptr::null(),
                    0,
                    done.data,
                    None,
                    std::ptr::null_mut(),
                )
            }
        }
    });
    if !delivered {
        eprintln!("psyrun: a PMIx fence ended after its service stopped");
    }
}

/// libpmix is done with a fence's data: free it.
unsafe extern "C" fn release(keep: *mut c_void) {
    if keep.is_null() {
        return;
    }
    // SAFETY: `keep` is the `Box<Vec<u8>>` leaked in `deliver`, released once by libpmix. Dropping
    // a Vec cannot panic, so nothing unwinds into C.
    drop(unsafe { Box::from_raw(keep.cast::<Vec<u8>>()) });
}
