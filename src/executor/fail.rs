//! The errors every engine reports, built in one place so they read the same whichever engine ran
//! the call: who (rank, host, address, transport), what (the call and its arguments), and what to
//! try.

use super::header::OpDesc;
use crate::error::{Error, ErrorKind};
use crate::transport::shm::board::AbortMark;
use crate::transport::shm::withdraw::Withdrawal;
use crate::transport::PeerInfo;
use std::fmt::Display;

/// Where a call runs: which call, on which rank, among which peers.
#[derive(Clone, Copy)]
pub(crate) struct Site<'a> {
    /// The call.
    pub(crate) desc: &'a OpDesc,
    /// This rank.
    pub(crate) rank: usize,
    /// Every rank's whereabouts, by rank.
    pub(crate) peers: &'a [PeerInfo],
}

impl Site<'_> {
    /// `rank 3 (host a at 10.0.0.1:4000, tcp)`.
    pub(crate) fn who(&self, peer: usize) -> String {
        let info = self
            .peers
            .get(peer)
            .map(|p| p.to_string())
            .unwrap_or_default();
        format!("rank {peer} ({info})")
    }

    /// `peer` called something else (`theirs`, described).
    pub(crate) fn mismatch(&self, peer: usize, theirs: impl Display) -> Error {
        Error::new(
            ErrorKind::Mismatch,
            format!(
                "collective mismatch: rank {} called {} but {} called {theirs}; every rank must make the same calls in the same order with the same arguments",
                self.rank,
                self.desc.describe(),
                self.who(peer)
            ),
        )
    }

    /// `peer` is gone: `what` says how this rank found out, as a clause after its name
    /// (`closed its connection; ...`).
    pub(crate) fn lost(&self, peer: usize, what: impl Display) -> Error {
        Error::new(
            ErrorKind::PeerLost,
            format!(
                "{} on rank {}: {} {what}",
                self.desc.label(),
                self.rank,
                self.who(peer)
            ),
        )
        .about_peer(peer)
    }

    /// The connection to `peer` failed while `doing` (sending, receiving) with `e`.
    pub(crate) fn lost_connection(&self, peer: usize, doing: &str, e: impl Display) -> Error {
        Error::new(
            ErrorKind::PeerLost,
            format!(
                "{} on rank {}: lost the connection to {} while {doing}: {e}; that rank probably exited or crashed, check its output",
                self.desc.label(),
                self.rank,
                self.who(peer)
            ),
        )
        .about_peer(peer)
    }

    /// The deadline passed while waiting for `peer` to `what` (a clause: `send`, `join it on the
    /// node board`).
    pub(crate) fn timeout(&self, peer: usize, what: impl Display) -> Error {
        Error::new(
            ErrorKind::Timeout,
            format!(
                "{} on rank {}: timed out waiting for {} to {what}; it may be stuck, dead, or in a different collective (PSY_TIMEOUT raises the limit)",
                self.desc.describe(),
                self.rank,
                self.who(peer)
            ),
        )
        .about_peer(peer)
    }

    /// The group's interrupt check gave `reason` while this rank waited for `peer` to `what`.
    /// Not about the peer (which did nothing wrong): this rank gave the call up.
    pub(crate) fn interrupted(&self, peer: usize, what: impl Display, reason: &str) -> Error {
        Error::new(
            ErrorKind::Aborted,
            format!(
                "{} on rank {}: interrupted ({reason}) while waiting for {} to {what}; a group \
                 whose call was interrupted refuses every later call (its peers are told): \
                 form a new group, or restart the job",
                self.desc.describe(),
                self.rank,
                self.who(peer)
            ),
        )
    }

    /// `peer` failed with an error of `kind` and told this rank so; `reason` is its message, if
    /// it sent one.
    pub(crate) fn aborted_by(&self, peer: usize, kind: ErrorKind, reason: Option<&str>) -> Error {
        let reason = reason.map(|r| format!(": {r}")).unwrap_or_default();
        Error::new(
            kind,
            format!(
                "{} on rank {}: {} failed and aborted the group{reason}",
                self.desc.label(),
                self.rank,
                self.who(peer)
            ),
        )
    }

    /// `peer` gave up the group, as its board slot says (`mark`); the whole reason follows over
    /// the links, but this names at least the rank its error was about.
    pub(crate) fn aborted_on_board(&self, peer: usize, mark: AbortMark) -> Error {
        let kind = super::header::kind_of(mark.code);
        let reason = mark.about.map(|about| match kind {
            ErrorKind::PeerLost => format!("it lost {}", self.who(about)),
            ErrorKind::Timeout => format!("it timed out waiting for {}", self.who(about)),
            _ => format!("its {kind:?} error was about {}", self.who(about)),
        });
        self.aborted_by(peer, kind, reason.as_deref())
    }

    /// `owner`'s part of this call was withdrawn by `w.by`, which gave up waiting for it
    /// ([`crate::transport::shm::withdraw`]): the call fails on every rank. `owner` is this rank
    /// when it arrived too late to join. `gone` is a rank of this host whose process has ended,
    /// if the caller found one: a rank that gave up because it lost a peer withdraws every part
    /// it still waited for, so the lost rank may be neither `owner` nor `w.by`. The error is about
    /// the lost rank when known, else about `owner` if that is another rank ([`Error::peer`]:
    /// psyrun names the rank the others lost).
    pub(crate) fn withdrawn(&self, owner: usize, w: Withdrawal, gone: Option<usize>) -> Error {
        let kind = super::header::kind_of(w.code);
        let why = match kind {
            ErrorKind::Timeout => "its deadline passed (PSY_TIMEOUT)".to_string(),
            ErrorKind::PeerLost => match gone {
                Some(g) => format!("it found {} gone", self.who(g)),
                None => "it found a rank gone".to_string(),
            },
            ErrorKind::Mismatch => "it found that rank in another call".to_string(),
            other => format!("of a {other:?} error"),
        };
        let whose = if owner == self.rank {
            "this rank's part: this rank joined the call too late".to_string()
        } else {
            format!("the part of {}", self.who(owner))
        };
        let err = Error::new(
            kind,
            format!(
                "{} on rank {}: {} gave up this call while waiting, because {why}, and withdrew {whose}; so the call fails on every rank rather than completing on some (every rank must call it within PSY_TIMEOUT of the others)",
                self.desc.describe(),
                self.rank,
                self.who(w.by),
            ),
        );
        let lost = gone.filter(|_| kind == ErrorKind::PeerLost);
        match lost.or((owner != self.rank).then_some(owner)) {
            Some(about) => err.about_peer(about),
            None => err,
        }
    }

    /// `peer`'s point-to-point counts disagree with `mine` (this rank's for `peer`): a `send`
    /// before this call was never received, or a `recv` is missing.
    pub(crate) fn unreceived_sends(&self, peer: usize, mine: super::Pair) -> Error {
        Error::new(
            ErrorKind::Mismatch,
            format!(
                "{} on rank {}: {} and this rank disagree about the messages between them before this call (this rank sent {} and received {}; a `send` was not matched by a `recv` on the other rank before this collective, or the ranks called different operations)",
                self.desc.label(),
                self.rank,
                self.who(peer),
                mine.sent,
                mine.received
            ),
        )
    }

    /// The ranks of a node-board call sent `sent` point-to-point messages before it but received
    /// only `received` (modulo 2^16).
    pub(crate) fn unmatched_sends(&self, sent: u16, received: u16) -> Error {
        Error::new(
            ErrorKind::Mismatch,
            format!(
                "{} on rank {}: the group's ranks sent {sent} point-to-point messages before this call but received {received} (modulo 65536): a `send` was not matched by a `recv` before this collective, or the ranks called different operations",
                self.desc.label(),
                self.rank,
            ),
        )
    }

    /// `peer` sent bytes that are not a psyne message; `hint` says what that may mean.
    pub(crate) fn garbage(&self, peer: usize, hint: &str) -> Error {
        Error::new(
            ErrorKind::Io,
            format!(
                "{} on rank {}: {} sent bytes that are not a psyne message{hint}",
                self.desc.label(),
                self.rank,
                self.who(peer)
            ),
        )
    }

    /// A broken invariant of psyne itself.
    pub(crate) fn internal(&self, what: impl Display) -> Error {
        Error::new(
            ErrorKind::Io,
            format!(
                "{} on rank {}: internal error: {what}",
                self.desc.label(),
                self.rank
            ),
        )
    }
}

/// The error of every call on a group that failed earlier with `first`.
pub(crate) fn refused(label: &str, first: &Error) -> Error {
    Error::new(
        ErrorKind::Aborted,
        format!("{label} refused: this group is unusable after an earlier failure and cannot be used again (create a new one): {first}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::header::{kind_code, OpKind};
    use crate::transport::TransportKind;
    use crate::{Collective, DType, ReduceOp};
    use std::sync::Arc;

    fn peers(n: usize) -> Vec<PeerInfo> {
        (0..n)
            .map(|r| PeerInfo {
                host: Arc::from("h"),
                addr: None,
                host_key: Arc::from("h"),
                shm_ok: true,
                transport: if r == 0 {
                    TransportKind::Local
                } else {
                    TransportKind::Shm
                },
            })
            .collect()
    }

    fn desc() -> OpDesc {
        OpDesc {
            kind: OpKind::Collective(Collective::AllReduce),
            algo: None,
            dtype: DType::F32,
            op: Some(ReduceOp::Sum),
            count: 20,
            seq: 1,
        }
    }

    #[test]
    fn a_withdrawal_for_a_lost_rank_names_the_lost_rank_not_the_one_that_withdrew() {
        let (peers, desc) = (peers(3), desc());
        let site = Site {
            desc: &desc,
            rank: 0,
            peers: &peers,
        };
        let lost = Withdrawal {
            by: 2,
            code: kind_code(ErrorKind::PeerLost),
        };
        // Rank 0 came too late: rank 2 had given up because rank 1's process ended.
        let e = site.withdrawn(0, lost, Some(1));
        assert_eq!(e.kind(), ErrorKind::PeerLost);
        assert!(e.message().contains("found rank 1 (h"), "{e}");
        assert!(e.message().contains("too late"), "{e}");
        assert_eq!(e.peer(), Some(1), "psyrun names the lost rank: {e}");
        // Unknown (e.g. a rank of another host): no rank is named as the lost one.
        let e = site.withdrawn(0, lost, None);
        assert!(e.message().contains("found a rank gone"), "{e}");
        assert_eq!(e.peer(), None, "{e}");
        // Another rank's part: the error is about it unless the lost rank is known.
        assert_eq!(site.withdrawn(2, lost, None).peer(), Some(2));
        assert_eq!(site.withdrawn(2, lost, Some(1)).peer(), Some(1));
        // A timeout names no lost rank, whatever process ended.
        let late = Withdrawal {
            by: 2,
            code: kind_code(ErrorKind::Timeout),
        };
        let e = site.withdrawn(0, late, Some(1));
        assert!(e.message().contains("PSY_TIMEOUT"), "{e}");
        assert_eq!(e.peer(), None, "{e}");
    }
}
