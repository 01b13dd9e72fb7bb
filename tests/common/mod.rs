//! Ranks as threads in one process, wired through an in-memory store over real TCP sockets.

#![allow(dead_code)]

use psyne::bootstrap::MemoryStore;
use psyne::{Group, GroupOptions};
use std::sync::Arc;
use std::time::Duration;

/// Runs `f(group)` on `size` threads, one rank each, and returns their results in rank order.
pub fn with_ranks<R: Send + 'static>(
    size: usize,
    timeout: Duration,
    f: impl Fn(Group) -> R + Send + Sync + 'static,
) -> Vec<R> {
    let store = Arc::new(MemoryStore::new());
    let f = Arc::new(f);
    let threads: Vec<_> = (0..size)
        .map(|rank| {
            let (store, f) = (store.clone(), f.clone());
            std::thread::spawn(move || {
                let mut opts = GroupOptions::local(rank, size, "test");
                opts.timeout = timeout;
                let group = Group::from_store(&*store, opts).expect("forming the group");
                f(group)
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("a rank thread panicked"))
        .collect()
}
