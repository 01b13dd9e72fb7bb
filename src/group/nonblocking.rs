//! How a [`Group`] runs calls in the background: a call is issued (its turn taken) on the
//! caller's thread, and its job runs in that turn on the group's worker thread, handing its result
//! to a [`Work`]. Every `_async` form of [`crate::Communicator`] is one such job; so is a call on
//! the caller's own memory ([`Group::submit_borrowed`]).

use super::core::Turn;
use super::{work, Group, Work};
use crate::error::Result;

/// A job on the group it runs on, lifetime-erased by [`Group::submit_borrowed`]'s caller.
type Job<'a, R> = Box<dyn FnOnce(&Group) -> Result<R> + Send + 'a>;

impl Group {
    /// Issues a call now and runs `f` in its turn on the worker thread, if this process may call
    /// the group ([`super::owner`]). `what` names the call in errors. The calls `f` makes on the
    /// group it is handed (any handle of this group, on that thread) run in this call's turn.
    pub(super) fn spawn<R, F>(&self, what: &str, f: F) -> Work<R>
    where
        R: Send + 'static,
        F: FnOnce(&Group) -> Result<R> + Send + 'static,
    {
        if let Err(e) = self.core.birth.check(what) {
            return Work::ready(Err(e));
        }
        let ticket = match self.core.gate.take(what) {
            Ok(ticket) => ticket,
            Err(e) => return Work::ready(Err(e)),
        };
        let (handle, completer) = work::pending();
        let group = self.clone();
        let submitted = self.worker.submit(Box::new(move || {
            let core = group.core.clone();
            core.gate.wait_turn(ticket);
            // Stored while the turn is held, so a later blocking call finds it done ...
            let published = {
                let _turn = Turn(&core.gate);
                let _job = work::InJob::enter(&core);
                completer.publish(f(&group))
            };
            drop(group);
            // ... and handed out after the turn is served: whoever sees the result may call
            // again at once, from any thread ([`super::owner::Claim`]).
            published.release();
        }));
        match submitted {
            Ok(()) => handle,
            Err(e) => {
                // The job never runs: serve its ticket so later calls are not stuck behind it.
                self.core.gate.wait_turn(ticket);
                self.core.gate.done();
                Work::ready(Err(e))
            }
        }
    }

    /// [`crate::Communicator::submit`] of a job that borrows: `f` may use memory of the caller
    /// (slices into its buffers, as a language binding hands over), and the call runs in its
    /// turn on the worker thread as every `_async` form does. `what` names the call in errors.
    ///
    /// # Safety
    ///
    /// Everything `f` borrows must stay valid, and must not be used by anyone else, until the
    /// returned [`Work`] has finished ([`Work::wait`] returned, or [`Work::test`] or
    /// [`Work::wait_for`] said `true`); dropping the `Work` earlier does not stop the call. The
    /// job may run at once or later, on another thread.
    pub unsafe fn submit_borrowed<'a, R, F>(&self, what: &str, f: F) -> Work<R>
    where
        R: Send + 'static,
        F: FnOnce(&Group) -> Result<R> + Send + 'a,
    {
        let job: Job<'a, R> = Box::new(f);
        // SAFETY: only the lifetime changes; the caller keeps what `f` borrows alive until the
        // work has finished (the function's contract), and the job is dropped by then.
        let job: Job<'static, R> =
            unsafe { std::mem::transmute::<Job<'a, R>, Job<'static, R>>(job) };
        self.spawn(what, job)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Communicator, Group, ReduceOp};

    #[test]
    fn a_borrowed_submission_runs_on_the_callers_memory_in_issue_order() {
        let g = Group::alone();
        let mut mine = vec![1.0f32, 2.0];
        let first = g.all_reduce_async(vec![3i32], ReduceOp::Sum);
        // SAFETY: `mine` is not touched until the work has finished (waited below).
        let work = unsafe {
            g.submit_borrowed("borrowed", |g| {
                // A job's own calls run in its turn, not behind it.
                g.all_reduce(&mut mine, ReduceOp::Max)?;
                g.barrier()?;
                mine[0] = 7.0;
                Ok(g.rank())
            })
        };
        assert_eq!(work.wait().unwrap(), 0);
        assert_eq!(first.wait().unwrap(), vec![3]);
        assert_eq!(mine, vec![7.0, 2.0]);
        // The worker's job is over: a blocking call from here takes its turn as usual.
        g.barrier().unwrap();
    }

    #[test]
    fn wait_for_says_whether_the_work_has_finished() {
        let g = Group::alone();
        let w = g.barrier_async();
        assert!(w.wait_for(std::time::Duration::from_secs(60)));
        assert!(w.test());
        w.wait().unwrap();
    }
}
