//! The agent's stdout, where its frames go (shared by the agent, its MPI services and its relay).

use super::protocol::FromAgent;
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The agent's stdout, where frames go: one writer at a time, and once broken, broken for good.
pub(crate) struct Out {
    file: Mutex<File>,
    broken: AtomicBool,
}

impl Out {
    /// Frames go to `file` (the agent's stdout).
    pub(crate) fn new(file: File) -> Out {
        Out {
            file: Mutex::new(file),
            broken: AtomicBool::new(false),
        }
    }

    /// Writes one frame; false if the link is gone.
    pub(crate) fn send(&self, msg: &FromAgent) -> bool {
        if self.broken.load(Ordering::Relaxed) {
            return false;
        }
        let frame = msg.encode();
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let ok = f.write_all(&frame).and_then(|()| f.flush()).is_ok();
        if !ok {
            self.broken.store(true, Ordering::Relaxed);
        }
        ok
    }
}
