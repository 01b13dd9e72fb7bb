//! Handles of non-blocking operations, and the worker thread that runs them in issue order.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};

use crate::error::{Error, ErrorKind, Result};

struct Slot<T> {
    result: Option<Result<T>>,
    /// Whether the call's turn has been served since its result was stored: only then may
    /// whoever sees the result call the group again, from any thread (`owner`).
    released: bool,
    waker: Option<Waker>,
}

struct Shared<T> {
    slot: Mutex<Slot<T>>,
    done: Condvar,
    /// The process the call was issued in: in a child forked since, the worker thread that would
    /// complete it does not exist, so waiting there fails instead of blocking forever.
    birth: super::owner::Birth,
}

/// The handle of a non-blocking operation. [`Work::wait`] blocks for its result,
/// [`Work::test`] asks whether it is ready, and `.await` waits asynchronously.
#[must_use = "a Work must be waited on (or awaited) to get its buffer back and see errors"]
pub struct Work<T> {
    shared: Arc<Shared<T>>,
}

/// The completing side of a [`Work`].
pub(crate) struct Completer<T> {
    shared: Arc<Shared<T>>,
}

/// A new pending work and its completer.
pub(crate) fn pending<T>() -> (Work<T>, Completer<T>) {
    let shared = Arc::new(Shared {
        slot: Mutex::new(Slot {
            result: None,
            released: false,
            waker: None,
        }),
        done: Condvar::new(),
        birth: super::owner::Birth::here(),
    });
    (
        Work {
            shared: shared.clone(),
        },
        Completer { shared },
    )
}

impl<T> Completer<T> {
    /// Stores the result, while the call still holds its turn: a blocking call issued after it
    /// then finds it stored ([`Work::test`] true) once that call's own turn comes. Nobody is
    /// handed the result before [`Published::release`].
    pub(crate) fn publish(self, result: Result<T>) -> Published<T> {
        let mut slot = match self.shared.slot.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        slot.result = Some(result);
        drop(slot);
        Published {
            shared: self.shared,
        }
    }

    /// Stores the result and releases it at once (a call that never held a turn).
    pub(crate) fn complete(self, result: Result<T>) {
        self.publish(result).release();
    }
}

/// A stored result not yet handed out: see [`Completer::publish`].
pub(crate) struct Published<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Published<T> {
    /// The call's turn is served: hands the result to whoever waits.
    pub(crate) fn release(self) {
        let mut slot = match self.shared.slot.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        slot.released = true;
        if let Some(w) = slot.waker.take() {
            w.wake();
        }
        self.shared.done.notify_all();
    }
}

impl<T> Work<T> {
    /// A work that is already finished with `result`: what a backend with no background engine
    /// returns from [`crate::Communicator::submit`].
    pub fn ready(result: Result<T>) -> Work<T> {
        let (w, c) = pending();
        c.complete(result);
        w
    }

    /// Blocks until the operation finishes and returns its result (the buffer, for operations that
    /// took one). Every operation has a deadline (`PSY_TIMEOUT`), so this returns eventually.
    pub fn wait(self) -> Result<T> {
        self.shared.birth.check("waiting for a non-blocking call")?;
        let mut slot = match self.shared.slot.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        loop {
            if slot.released {
                if let Some(r) = slot.result.take() {
                    return r;
                }
            }
            slot = match self.shared.done.wait(slot) {
                Ok(s) => s,
                Err(p) => p.into_inner(),
            };
        }
    }

    /// Blocks until the operation finishes or `limit` passes: true once it has finished (then
    /// [`Work::wait`] returns at once), as [`Work::test`] says. How a binding waits in slices,
    /// checking for signals between them.
    pub fn wait_for(&self, limit: std::time::Duration) -> bool {
        let mut slot = match self.shared.slot.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        let deadline = std::time::Instant::now() + limit;
        while !slot.released {
            let now = std::time::Instant::now();
            if now >= deadline {
                return false;
            }
            slot = match self.shared.done.wait_timeout(slot, deadline - now) {
                Ok(s) => s.0,
                Err(p) => p.into_inner().0,
            };
        }
        true
    }

    /// True once the operation has finished (successfully or not); `wait` then returns at once.
    /// A blocking call issued after this one returns only after this is true.
    pub fn test(&self) -> bool {
        let mut slot = match self.shared.slot.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        if slot.result.is_none() {
            return false;
        }
        // Stored: the worker is between storing it and serving the call's turn (a few
        // instructions, needing nothing from this thread), so the release is waited for, and a
        // caller that sees `true` may call the group at once from any thread.
        while !slot.released {
            slot = match self.shared.done.wait(slot) {
                Ok(s) => s,
                Err(p) => p.into_inner(),
            };
        }
        true
    }
}

impl<T> Future for Work<T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        if let Err(e) = self.shared.birth.check("waiting for a non-blocking call") {
            return Poll::Ready(Err(e));
        }
        let mut slot = match self.shared.slot.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        let ready = if slot.released {
            slot.result.take()
        } else {
            None
        };
        match ready {
            Some(r) => Poll::Ready(r),
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// One background thread per group, started on the first non-blocking call; it runs jobs in the
/// order they were submitted and ends when the group is dropped.
#[derive(Default)]
pub(crate) struct Worker {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
}

impl Worker {
    /// Queues `job`; fails only if the thread cannot be started.
    pub(crate) fn submit(&self, job: Job) -> Result<()> {
        let mut tx = self
            .tx
            .lock()
            .map_err(|_| Error::new(ErrorKind::Io, "the worker lock was poisoned"))?;
        if tx.is_none() {
            let (send, recv) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("psyne-worker".into())
                .spawn(move || {
                    for job in recv {
                        job();
                    }
                })
                .map_err(|e| Error::io("starting the group's worker thread", e))?;
            *tx = Some(send);
        }
        match tx.as_ref() {
            Some(s) => s
                .send(job)
                .map_err(|_| Error::new(ErrorKind::Io, "the group's worker thread has stopped")),
            None => Err(Error::new(
                ErrorKind::Io,
                "the group's worker thread is missing",
            )),
        }
    }
}

thread_local! {
    /// The group (its core's address) whose job this thread is running, 0 if none.
    static IN_JOB: Cell<usize> = const { Cell::new(0) };
}

/// Marks this thread as running a job of the group at `core`, in that job's turn, until dropped:
/// the calls the job makes on the group run in its turn instead of queueing behind it.
pub(crate) struct InJob(usize);

impl InJob {
    pub(crate) fn enter<T>(core: &Arc<T>) -> InJob {
        InJob(IN_JOB.with(|j| j.replace(Arc::as_ptr(core) as *const () as usize)))
    }
}

impl Drop for InJob {
    fn drop(&mut self) {
        IN_JOB.with(|j| j.set(self.0));
    }
}

/// Whether this thread is running a job of the group at `core` ([`InJob`]).
#[inline]
pub(crate) fn in_job_of<T>(core: &Arc<T>) -> bool {
    IN_JOB.with(|j| j.get() == Arc::as_ptr(core) as *const () as usize)
}
