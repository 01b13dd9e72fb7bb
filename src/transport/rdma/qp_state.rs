//! The life of a reliable-connected queue pair as data: reset → init → ready to receive → ready to
//! send, with the attributes each step sets. [`plan`] computes the three transitions from the two
//! endpoints, purely; the verbs layer only applies them in order. Values follow what rdma-core's
//! `rc_pingpong`, Gloo's `ibverbs` pair and NCCL's `net_ib` use.

use super::endpoint::{EndpointInfo, LinkLayer, Mtu};

/// A queue pair's state (the ones this transport uses, and the error state it may fall into).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// Just created: nothing can be posted.
    Reset,
    /// Receives may be posted; nothing moves yet.
    Init,
    /// Ready to receive: connected to the peer's queue pair.
    Rtr,
    /// Ready to send.
    Rts,
    /// A work request failed; the pair is unusable.
    #[allow(dead_code)]
    // the verbs API this mirrors; no caller needs it yet (no RDMA hardware here)
    Error,
}

/// How the queue pair addresses its peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressVector {
    /// The peer's LID (ignored on RoCE).
    pub dlid: u16,
    /// A global route header: the peer's GID, this side's GID index and the hop limit. Always on
    /// RoCE; on InfiniBand only when the LID cannot route (no LID).
    pub grh: Option<([u8; 16], u8, u8)>,
    /// Service level.
    pub sl: u8,
    /// This side's port.
    pub port: u8,
}

/// One attribute a transition sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QpAttr {
    /// Partition key index.
    PkeyIndex(u16),
    /// This side's port number.
    Port(u8),
    /// Let the peer RDMA-write into memory registered for it.
    RemoteWriteAccess,
    /// The path MTU.
    PathMtu(Mtu),
    /// The peer's queue pair number.
    DestQpn(u32),
    /// The first sequence number expected from the peer.
    RqPsn(u32),
    /// RDMA reads/atomics the peer may have in flight to us.
    MaxDestRdAtomic(u8),
    /// Receiver-not-ready NAK timer code.
    MinRnrTimer(u8),
    /// How to reach the peer.
    Av(AddressVector),
    /// The first sequence number this side sends.
    SqPsn(u32),
    /// Local ACK timeout code (4.096 µs · 2^code).
    Timeout(u8),
    /// Transport retries before a work request fails.
    RetryCnt(u8),
    /// Receiver-not-ready retries (7: forever).
    RnrRetry(u8),
    /// RDMA reads/atomics this side may have in flight.
    MaxRdAtomic(u8),
}

/// One step: the state to move to and what to set on the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The state before.
    pub from: QpState,
    /// The state after.
    pub to: QpState,
    /// The attributes this step sets.
    pub attrs: Vec<QpAttr>,
}

/// This side's choices that are not in the published endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalPort {
    /// Port number.
    pub port: u8,
    /// GID index used for the global route header.
    pub gid_index: u8,
}

/// Whether `to` may follow `from` in this transport's life of a queue pair.
pub fn allowed(from: QpState, to: QpState) -> bool {
    use QpState::*;
    matches!(
        (from, to),
        (Reset, Init) | (Init, Rtr) | (Rtr, Rts) | (_, Error) | (_, Reset)
    ) && from != to
}

/// The transitions that connect this side (`me`, published as `mine`) to `peer`.
pub fn plan(me: LocalPort, mine: &EndpointInfo, peer: &EndpointInfo) -> [Transition; 3] {
    let global = mine.link_layer == LinkLayer::Ethernet
        || peer.link_layer == LinkLayer::Ethernet
        || peer.lid == 0;
    let av = AddressVector {
        dlid: if global { 0 } else { peer.lid },
        grh: global.then_some((peer.gid, me.gid_index, 64)),
        sl: 0,
        port: me.port,
    };
    [
        Transition {
            from: QpState::Reset,
            to: QpState::Init,
            attrs: vec![
                QpAttr::PkeyIndex(0),
                QpAttr::Port(me.port),
                QpAttr::RemoteWriteAccess,
            ],
        },
        Transition {
            from: QpState::Init,
            to: QpState::Rtr,
            attrs: vec![
                QpAttr::PathMtu(mine.mtu.min(peer.mtu)),
                QpAttr::DestQpn(peer.qpn),
                QpAttr::RqPsn(peer.psn),
                QpAttr::MaxDestRdAtomic(1),
                QpAttr::MinRnrTimer(12),
                QpAttr::Av(av),
            ],
        },
        Transition {
            from: QpState::Rtr,
            to: QpState::Rts,
            attrs: vec![
                QpAttr::SqPsn(mine.psn),
                QpAttr::Timeout(14),
                QpAttr::RetryCnt(7),
                QpAttr::RnrRetry(7),
                QpAttr::MaxRdAtomic(1),
            ],
        },
    ]
}

/// Tracks a queue pair's state as transitions are applied, refusing out-of-order ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpMachine(pub QpState);

impl QpMachine {
    /// Applies `t` if it starts where the machine is and is allowed.
    pub fn apply(&mut self, t: &Transition) -> Result<(), String> {
        if t.from != self.0 || !allowed(t.from, t.to) {
            return Err(format!(
                "queue pair transition {:?} → {:?} attempted in state {:?}",
                t.from, t.to, self.0
            ));
        }
        self.0 = t.to;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(ll: LinkLayer, lid: u16, mtu: u8, qpn: u32, psn: u32) -> EndpointInfo {
        EndpointInfo {
            lid,
            gid: [qpn as u8; 16],
            link_layer: ll,
            mtu: Mtu::from_code(mtu).unwrap(),
            qpn,
            psn,
            ring_addr: 0,
            ring_rkey: 0,
            ring_len: 1 << 20,
            credit_addr: 0,
            credit_rkey: 0,
            depth: 64,
            eager: 8192,
        }
    }

    const ME: LocalPort = LocalPort {
        port: 1,
        gid_index: 3,
    };

    #[test]
    fn the_plan_walks_reset_init_rtr_rts_in_order() {
        let (a, b) = (
            endpoint(LinkLayer::Infiniband, 1, 5, 10, 100),
            endpoint(LinkLayer::Infiniband, 2, 5, 20, 200),
        );
        let mut m = QpMachine(QpState::Reset);
        for t in plan(ME, &a, &b) {
            m.apply(&t).unwrap();
        }
        assert_eq!(m.0, QpState::Rts);
        // Applying the plan again from RTS is refused.
        assert!(m.apply(&plan(ME, &a, &b)[0]).is_err());
    }

    #[test]
    fn out_of_order_transitions_are_refused() {
        let (a, b) = (
            endpoint(LinkLayer::Infiniband, 1, 5, 10, 100),
            endpoint(LinkLayer::Infiniband, 2, 5, 20, 200),
        );
        let p = plan(ME, &a, &b);
        for skip in [1, 2] {
            let mut m = QpMachine(QpState::Reset);
            assert!(m.apply(&p[skip]).is_err());
            assert_eq!(m.0, QpState::Reset);
        }
        assert!(!allowed(QpState::Init, QpState::Rts));
        assert!(!allowed(QpState::Rts, QpState::Rts));
        assert!(allowed(QpState::Rts, QpState::Error));
        assert!(allowed(QpState::Error, QpState::Reset));
    }

    #[test]
    fn sequence_numbers_cross_over() {
        let (a, b) = (
            endpoint(LinkLayer::Infiniband, 1, 5, 10, 100),
            endpoint(LinkLayer::Infiniband, 2, 5, 20, 200),
        );
        let p = plan(ME, &a, &b);
        assert!(p[1].attrs.contains(&QpAttr::DestQpn(20)));
        assert!(p[1].attrs.contains(&QpAttr::RqPsn(200)));
        assert!(p[2].attrs.contains(&QpAttr::SqPsn(100)));
        let q = plan(ME, &b, &a);
        assert!(q[1].attrs.contains(&QpAttr::RqPsn(100)));
        assert!(q[2].attrs.contains(&QpAttr::SqPsn(200)));
    }

    fn av(t: &Transition) -> AddressVector {
        t.attrs
            .iter()
            .find_map(|a| match a {
                QpAttr::Av(av) => Some(av.clone()),
                _ => None,
            })
            .unwrap()
    }

    #[test]
    fn infiniband_routes_by_lid_and_roce_by_gid() {
        let ib = plan(
            ME,
            &endpoint(LinkLayer::Infiniband, 1, 5, 10, 1),
            &endpoint(LinkLayer::Infiniband, 2, 4, 20, 2),
        );
        let v = av(&ib[1]);
        assert_eq!((v.dlid, v.grh, v.port), (2, None, 1));
        assert!(ib[1]
            .attrs
            .contains(&QpAttr::PathMtu(Mtu::from_code(4).unwrap())));

        let roce = plan(
            ME,
            &endpoint(LinkLayer::Ethernet, 0, 3, 10, 1),
            &endpoint(LinkLayer::Ethernet, 0, 5, 20, 2),
        );
        let v = av(&roce[1]);
        assert_eq!(v.dlid, 0);
        assert_eq!(v.grh, Some(([20; 16], 3, 64)));
        assert!(roce[1].attrs.contains(&QpAttr::PathMtu(Mtu::MTU_1024)));
    }

    #[test]
    fn mtu_bytes_match_the_verbs_codes() {
        let bytes: Vec<usize> = (1..=5)
            .map(|c| Mtu::from_code(c).unwrap().bytes())
            .collect();
        assert_eq!(bytes, [256, 512, 1024, 2048, 4096]);
        assert!(Mtu::from_code(0).is_none() && Mtu::from_code(6).is_none());
    }
}
