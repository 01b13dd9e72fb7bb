//! How a [`Group`] runs calls in the background: a call is issued (its turn taken) on the
//! caller's thread, and its job runs in that turn on the group's worker thread, handing its result
//! to a [`Work`]. Every `_async` form of [`crate::Communicator`] is one such job.

use super::core::Turn;
use super::{work, Group, Work};
use crate::error::Result;

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
}
