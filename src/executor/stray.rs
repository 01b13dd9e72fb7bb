//! A message from a peer that the running call does not expect: the engines that do not use the
//! links for data (the node board, shared buffers) look at them while they wait, because a peer
//! in another collective (or one that aborted) says so there.

use super::header::{self, Header, HEADER_LEN};
use super::{Call, Links};
use crate::error::Error;
use std::time::{Duration, Instant};

/// Whether `peer` has sent this rank anything not yet read.
pub(crate) fn pending(links: &Links, peer: usize) -> bool {
    links
        .links
        .get(peer)
        .and_then(|l| l.as_ref())
        .is_some_and(|l| l.pending())
}

/// Reads the header of `peer`'s unexpected message and returns the error it means: another
/// collective (a mismatch), an abort, or garbage.
pub(crate) fn stray_error(links: &mut Links, peer: usize, call: &Call) -> Error {
    let Links {
        rank, links, peers, ..
    } = links;
    let site = call.site(*rank, peers);
    let Some(link) = links.get_mut(peer).and_then(|l| l.as_mut()) else {
        return site.internal(format!("no link to rank {peer}"));
    };
    let mut h = [0u8; HEADER_LEN];
    let mut got = 0;
    let until = Instant::now() + Duration::from_millis(200);
    while got < HEADER_LEN && Instant::now() < until {
        match link.read_some(&mut h[got..]) {
            Ok(0) => {
                return site.lost(peer, "closed its connection; it probably exited or crashed")
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
            Err(e) => return site.lost(peer, format!("is lost: {e}")),
        }
    }
    match header::decode(&h) {
        Header::Data { desc: theirs, .. } => site.mismatch(peer, theirs.describe()),
        Header::Abort { kind, .. } => site.aborted_by(peer, kind, None),
        Header::Garbage => site.garbage(peer, ""),
    }
}
