//! PMI-1 `barrier_in` and PMI-2 `kvs-fence`: once every rank of this host is in, this host's
//! puts since the last round go to [`Exchange::all_gather`](crate::pmi::Exchange::all_gather)
//! on a thread of its own (the server keeps serving), every host's pairs are merged, and every
//! local rank is answered. A barrier that cannot complete (a rank of this host closed its socket
//! or finalized before entering it, the exchange failed, or `timeout` passed since the first
//! rank entered) answers every waiting rank with an error and then closes its connection (old
//! clients ignore the error); later barriers then fail the same way at once, since the hosts'
//! round numbers no longer agree.

use super::conn::State;
use super::round::Entry;
use super::server::{Event, Server};
use super::wire::{Framing, Message};
use std::time::Instant;

/// The reply command of a barrier request.
fn reply_cmd(framing: Framing) -> &'static str {
    match framing {
        Framing::V1 => "barrier_out",
        Framing::V2 => "kvs-fence-response",
    }
}

impl Server {
    /// A local rank enters the barrier (`request` is its `barrier_in` or `kvs-fence`).
    pub fn barrier_enter(&mut self, local: usize, request: &Message) {
        if let Some(why) = self.barrier.failed.clone() {
            self.fail(local, request, &format!("an earlier barrier failed: {why}"));
            return self.hang_up(local);
        }
        if self.barrier.entered.iter().any(|e| e.local == local) || self.barrier.exchanging {
            let text = "a second barrier_in before barrier_out";
            return self.fail(local, request, text);
        }
        self.barrier.since.get_or_insert_with(Instant::now);
        self.barrier.entered.push(Entry {
            local,
            framing: request.framing,
            thrid: request.get("thrid").map(str::to_string),
        });
        self.barrier_check("");
    }

    /// Starts the exchange if every local rank is in; fails the round if one never can be
    /// (`why` names the event that made it so, if any).
    pub fn barrier_check(&mut self, why: &str) {
        if self.barrier.entered.is_empty() || self.barrier.exchanging {
            return;
        }
        let missing: Vec<usize> = (0..self.conns.len())
            .filter(|l| !self.barrier.entered.iter().any(|e| e.local == *l))
            .collect();
        let impossible: Vec<String> = missing
            .iter()
            .filter_map(|&l| {
                let conn = self.conns[l].as_ref()?;
                let state = match conn.state {
                    State::Open => return None,
                    State::Done => "finalized",
                    State::Lost => "lost its PMI connection",
                };
                Some(format!("rank {} {state}", conn.rank))
            })
            .collect();
        if !impossible.is_empty() {
            let mut text = format!(
                "the barrier cannot complete: {} before entering it",
                impossible.join(", ")
            );
            if !why.is_empty() {
                text = format!("{text} ({why})");
            }
            return self.barrier_fail(&text);
        }
        if missing.is_empty() {
            self.start_exchange();
        }
    }

    fn start_exchange(&mut self) {
        self.barrier.exchanging = true;
        let blob = self.kvs.take_pending_blob();
        let (round, node) = (self.barrier.round, self.node);
        let exchange = self.exchange.clone();
        let waker = self.waker.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("pmi-barrier-{round}"))
            .spawn(move || {
                let result = exchange.all_gather(node, round, blob);
                waker.send(Event::Exchanged(round, result));
            });
        if let Err(e) = spawned {
            self.barrier_fail(&format!("no thread for the exchange: {e}"));
        }
    }

    /// The exchange of `round` ended.
    pub fn exchanged(&mut self, round: u64, result: Result<Vec<Vec<u8>>, String>) {
        if !self.barrier.exchanging || round != self.barrier.round {
            return; // A round that already failed here.
        }
        let merged = result.and_then(|blobs| self.kvs.merge(&blobs));
        match merged {
            Ok(()) => {
                for e in std::mem::take(&mut self.barrier.entered) {
                    let pairs = vec![("rc".into(), "0".into())];
                    self.send(
                        e.local,
                        e.framing,
                        reply_cmd(e.framing),
                        pairs,
                        e.thrid.as_deref(),
                    );
                }
                self.barrier.round += 1;
                self.barrier.since = None;
                self.barrier.exchanging = false;
            }
            Err(e) => self.barrier_fail(&format!("the exchange with the other hosts failed: {e}")),
        }
    }

    /// Answers every waiting rank with `why` and fails every later barrier.
    pub fn barrier_fail(&mut self, why: &str) {
        let why = format!("PMI barrier {}: {why}", self.barrier.round);
        self.control.problem(why.clone());
        for e in std::mem::take(&mut self.barrier.entered) {
            let pairs = self.error_pairs(e.framing, &why);
            self.send(
                e.local,
                e.framing,
                reply_cmd(e.framing),
                pairs,
                e.thrid.as_deref(),
            );
            self.hang_up(e.local);
        }
        self.barrier.since = None;
        self.barrier.exchanging = false;
        self.barrier.failed = Some(why);
    }

    /// Closes a rank's connection after its error reply: MPICH 4.0.2's PMI-1 client ignores
    /// the `rc` of `barrier_out` and would go on to wait for the missing ranks in shared memory
    /// forever; a closed socket makes its next PMI call, and so `MPI_Init`, fail.
    fn hang_up(&mut self, local: usize) {
        if let Some(conn) = self.conns[local].as_mut() {
            conn.state = State::Lost;
            conn.close_after_replies();
        }
    }

    /// Why the round timed out: the ranks not in yet, or the exchange.
    pub fn barrier_timeout_reason(&self) -> String {
        if self.barrier.exchanging {
            return format!(
                "the other hosts did not all reach it within {:?}",
                self.timeout
            );
        }
        let missing: Vec<String> = (0..self.conns.len())
            .filter(|l| !self.barrier.entered.iter().any(|e| e.local == *l))
            .map(|l| self.map.hosts[self.node].ranks[l].to_string())
            .collect();
        format!(
            "rank(s) {} of this host did not enter it within {:?}",
            missing.join(", "),
            self.timeout
        )
    }
}
