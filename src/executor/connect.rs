//! Connecting, before a call runs, the pairs its engine uses that are not connected yet, and
//! adopting the links higher peers made meanwhile ([`crate::transport::pairs`]).

use super::fail::Site;
use super::{Call, Engine, Links};
use crate::error::{Error, ErrorKind, Result};
use crate::transport::pairs::Arrived;
use crate::transport::shm::board::Board;
use std::time::Instant;

impl Links {
    /// Adopts the links the accept thread connected since the last look (cheap when there are
    /// none): a peer in another call that dialed this rank then shows its message on its link.
    pub(crate) fn adopt_arrived(&mut self) -> Result<()> {
        match &self.connector {
            Some(connector) if connector.has_arrivals() => {
                let arrived = connector.take(false, Instant::now());
                self.install(arrived)
            }
            _ => Ok(()),
        }
    }

    /// Connects the pairs `engine` uses that are not connected yet: dials the lower peers and
    /// waits for the higher ones, which dial in the same call. On a group with a node board
    /// (`board`, and the number `next_flat` the next operation on it would have), a higher peer
    /// that gave up, died, or is in a call on the board ends the wait with the error saying so.
    pub(crate) fn connect_for(
        &mut self,
        engine: &impl Engine,
        call: &Call,
        board: Option<(&Board, u64)>,
    ) -> Result<()> {
        let mut missing = Vec::new();
        let (rank, links) = (self.rank, &self.links);
        engine.each_peer(&mut |peer| {
            if peer != rank && links.get(peer).is_some_and(Option::is_none) {
                missing.push(peer);
            }
        });
        if missing.is_empty() {
            return Ok(());
        }
        self.adopt_arrived()?;
        missing.sort_unstable();
        missing.dedup();
        missing.retain(|&peer| self.links[peer].is_none());
        if missing.is_empty() {
            return Ok(());
        }
        let label = call.desc.label();
        let Some(connector) = &self.connector else {
            return Err(Error::new(
                ErrorKind::Bootstrap,
                format!("{label} on rank {rank}: ranks {missing:?} are not connected and this group cannot connect more"),
            ));
        };
        let site = call.site(rank, &self.peers);
        let watch = |peer: usize| board.and_then(|(board, k)| elsewhere(board, k, site, peer));
        let arrived = connector
            .connect(&missing, Instant::now() + call.timeout, &watch)
            .map_err(|e| {
                e.context(format!(
                    "{label} on rank {rank}: connecting the pairs it uses"
                ))
            })?;
        self.install(arrived)
    }

    /// Makes what arrived the links to those peers.
    fn install(&mut self, arrived: Vec<(usize, Arrived)>) -> Result<()> {
        for (peer, arrived) in arrived {
            match arrived {
                Arrived::Link(link) => {
                    self.peers[peer].transport = link.transport();
                    self.links[peer] = Some(link);
                }
                // Only pairs that connect while the group forms arrive as bare streams, and
                // those connected then: a second one is refused before it gets here.
                Arrived::Stream(_) => {}
                Arrived::Failed(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Why `peer` will not connect in this call, as the node board shows it: it gave up the group,
/// its process is gone, or it published operation `next_flat` (it is in a call on the board).
fn elsewhere(board: &Board, next_flat: u64, site: Site<'_>, peer: usize) -> Option<Error> {
    if let Some(mark) = board.aborted(peer) {
        return Some(site.aborted_on_board(peer, mark));
    }
    if board.slot(peer, (next_flat % 2) as usize).ready(next_flat) {
        return Some(site.mismatch(peer, "a call on the node board"));
    }
    let pid = board.pid(peer);
    (pid != 0 && !crate::wait::process_alive(pid)).then(|| {
        site.lost(
            peer,
            format_args!("(process {pid}) exited before connecting to this rank; check its output"),
        )
    })
}
