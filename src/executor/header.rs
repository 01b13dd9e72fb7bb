//! The header in front of every message: what the sender believes the operation is, so a receiver
//! can tell a mismatched call from a slow one, and an abort notice. A collective's header also
//! carries how many point-to-point messages the sender has sent to and received from the
//! receiver ([`Pair`]), so that a `send` whose receiver was in another call is found out by the
//! first collective after it, on both ranks.

use crate::dtype::DType;
use crate::error::ErrorKind;
use crate::reduce::ReduceOp;
use crate::schedule::{Algo, Collective};

/// Bytes in a header.
pub const HEADER_LEN: usize = 40;
const MAGIC: u16 = 0x5053;
const KIND_DATA: u8 = 1;
const KIND_ABORT: u8 = 2;
const NO_ROOT: u32 = u32::MAX;

/// What operation a message belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// A collective (all ranks of the group take part).
    Collective(Collective),
    /// A point-to-point send/recv between two ranks.
    PointToPoint,
}

/// Everything ranks must agree on for one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpDesc {
    /// Which operation.
    pub kind: OpKind,
    /// The algorithm (collectives only).
    pub algo: Option<Algo>,
    /// The element type.
    pub dtype: DType,
    /// The reduction op, for reducing collectives.
    pub op: Option<ReduceOp>,
    /// The count as [`Collective::layout`] defines it (elements, for point-to-point).
    pub count: u64,
    /// The sequence number: per group for collectives, per ordered pair for point-to-point.
    pub seq: u64,
}

impl OpDesc {
    /// A short name like `all_reduce #12`.
    pub fn label(&self) -> String {
        match self.kind {
            OpKind::Collective(c) => format!("{} #{}", c.name(), self.seq),
            OpKind::PointToPoint => format!("send/recv #{}", self.seq),
        }
    }

    /// Every argument, for mismatch messages.
    pub fn describe(&self) -> String {
        let mut s = match self.kind {
            OpKind::Collective(c) => format!(
                "{} #{} (count {}, {}",
                c.name(),
                self.seq,
                self.count,
                self.dtype
            ),
            OpKind::PointToPoint => format!(
                "send/recv #{} ({} elements of {}",
                self.seq, self.count, self.dtype
            ),
        };
        if let Some(op) = self.op {
            s += &format!(", op {op}");
        }
        if let OpKind::Collective(c) = self.kind {
            if let Some(root) = c.root() {
                s += &format!(", root {root}");
            }
        }
        if let Some(a) = self.algo {
            s += &format!(", algorithm {a}");
        }
        s + ")"
    }
}

/// Point-to-point messages between this rank and one peer so far, in both directions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pair {
    /// Messages this rank sent to the peer.
    pub sent: u64,
    /// Messages this rank received from the peer.
    pub received: u64,
}

impl Pair {
    /// The counts as the peer sees them: what one rank sent, the other received.
    pub fn mirrored(self) -> Pair {
        Pair {
            sent: self.received,
            received: self.sent,
        }
    }
}

/// Writes the sender's counts for the receiver into a data header (the low 16 bits of each:
/// enough to tell that a message is missing).
pub fn set_pair(h: &mut [u8; HEADER_LEN], pair: Pair) {
    h[12..14].copy_from_slice(&(pair.sent as u16).to_le_bytes());
    h[14..16].copy_from_slice(&(pair.received as u16).to_le_bytes());
}

/// Whether a header's counts agree with `mine`, this rank's counts for the sender.
pub fn pair_agrees(h: &[u8; HEADER_LEN], mine: Pair) -> bool {
    let theirs = mine.mirrored();
    h[12..14] == (theirs.sent as u16).to_le_bytes()
        && h[14..16] == (theirs.received as u16).to_le_bytes()
}

/// What this rank has sent and received in all, over every peer: a node-board header carries it,
/// since one header there goes to every peer.
pub fn total(pairs: &[Pair]) -> Pair {
    pairs.iter().fold(Pair::default(), |t, p| Pair {
        sent: t.sent.wrapping_add(p.sent),
        received: t.received.wrapping_add(p.received),
    })
}

/// Whether two data headers describe the same call (their point-to-point counts aside).
pub fn same_call(a: &[u8; HEADER_LEN], b: &[u8; HEADER_LEN]) -> bool {
    a[..12] == b[..12] && a[16..] == b[16..]
}

/// The sums of the point-to-point totals in every rank's node-board header: every message sent
/// before the call was received iff the two sums agree (each modulo 2^16).
#[derive(Debug, Default)]
pub struct PairSums {
    sent: u16,
    received: u16,
}

impl PairSums {
    /// Adds one rank's header.
    pub fn add(&mut self, h: &[u8; HEADER_LEN]) {
        self.sent = self.sent.wrapping_add(u16::from_le_bytes([h[12], h[13]]));
        self.received = self
            .received
            .wrapping_add(u16::from_le_bytes([h[14], h[15]]));
    }

    /// The sums, if they disagree.
    pub fn unbalanced(&self) -> Option<(u16, u16)> {
        (self.sent != self.received).then_some((self.sent, self.received))
    }
}

/// A decoded header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// A data message of `len` bytes for `desc`.
    Data {
        /// The sender's view of the operation.
        desc: OpDesc,
        /// Payload bytes that follow.
        len: u64,
    },
    /// The sender failed; `len` bytes of UTF-8 reason follow.
    Abort {
        /// The kind of the sender's error.
        kind: ErrorKind,
        /// Reason bytes that follow.
        len: u64,
    },
    /// Not a psyne header (a corrupted or foreign stream).
    Garbage,
}

const COLLS: [fn(usize) -> Collective; 9] = [
    |_| Collective::AllReduce,
    |r| Collective::Broadcast { root: r },
    |r| Collective::Reduce { root: r },
    |_| Collective::AllGather,
    |_| Collective::ReduceScatter,
    |r| Collective::Scatter { root: r },
    |r| Collective::Gather { root: r },
    |_| Collective::AllToAll,
    |_| Collective::Barrier,
];
const P2P_TAG: u8 = 100;

fn kind_tag(kind: OpKind) -> (u8, u32) {
    match kind {
        OpKind::PointToPoint => (P2P_TAG, NO_ROOT),
        OpKind::Collective(c) => {
            // The tag is 1 + the index of the collective's constructor in COLLS (decode's table).
            let tag = match c {
                Collective::AllReduce => 1,
                Collective::Broadcast { .. } => 2,
                Collective::Reduce { .. } => 3,
                Collective::AllGather => 4,
                Collective::ReduceScatter => 5,
                Collective::Scatter { .. } => 6,
                Collective::Gather { .. } => 7,
                Collective::AllToAll => 8,
                Collective::Barrier => 9,
            };
            (tag, c.root().map_or(NO_ROOT, |r| r as u32))
        }
    }
}

const ERROR_KINDS: [ErrorKind; 11] = [
    ErrorKind::InvalidArgument,
    ErrorKind::Config,
    ErrorKind::Bootstrap,
    ErrorKind::Auth,
    ErrorKind::Timeout,
    ErrorKind::Mismatch,
    ErrorKind::PeerLost,
    ErrorKind::Io,
    ErrorKind::Aborted,
    ErrorKind::Revoked,
    ErrorKind::Usage,
];

/// Encodes a data header.
pub fn encode_data(desc: &OpDesc, len: u64) -> [u8; HEADER_LEN] {
    let (tag, root) = kind_tag(desc.kind);
    let mut h = [0u8; HEADER_LEN];
    h[0..2].copy_from_slice(&MAGIC.to_le_bytes());
    h[2] = KIND_DATA;
    h[3] = tag;
    h[4] = desc.dtype as u8;
    h[5] = desc.op.map_or(0, |o| o as u8);
    h[6] = desc.algo.map_or(0, |a| a as u8);
    h[8..12].copy_from_slice(&root.to_le_bytes());
    h[16..24].copy_from_slice(&desc.seq.to_le_bytes());
    h[24..32].copy_from_slice(&desc.count.to_le_bytes());
    h[32..40].copy_from_slice(&len.to_le_bytes());
    h
}

/// The number an error kind travels as (in an abort header, or a node board's abort mark).
pub(crate) fn kind_code(kind: ErrorKind) -> u8 {
    ERROR_KINDS.iter().position(|k| *k == kind).unwrap_or(0) as u8
}

/// The error kind of [`kind_code`]'s number; [`ErrorKind::Aborted`] for an unknown one.
pub(crate) fn kind_of(code: u8) -> ErrorKind {
    ERROR_KINDS
        .get(code as usize)
        .copied()
        .unwrap_or(ErrorKind::Aborted)
}

/// Encodes an abort header announcing `len` bytes of reason.
pub fn encode_abort(kind: ErrorKind, len: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..2].copy_from_slice(&MAGIC.to_le_bytes());
    h[2] = KIND_ABORT;
    h[3] = kind_code(kind);
    h[32..40].copy_from_slice(&len.to_le_bytes());
    h
}

/// Decodes a header.
pub fn decode(h: &[u8; HEADER_LEN]) -> Header {
    let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap_or([0; 8]));
    if u16::from_le_bytes([h[0], h[1]]) != MAGIC {
        return Header::Garbage;
    }
    let len = u64_at(32);
    match h[2] {
        KIND_ABORT => Header::Abort {
            kind: kind_of(h[3]),
            len,
        },
        KIND_DATA => {
            let root = u32::from_le_bytes(h[8..12].try_into().unwrap_or([0; 4])) as usize;
            let kind = match h[3] {
                P2P_TAG => OpKind::PointToPoint,
                t if (1..=COLLS.len() as u8).contains(&t) => {
                    OpKind::Collective(COLLS[t as usize - 1](root))
                }
                _ => return Header::Garbage,
            };
            let Some(dtype) = DType::from_tag(h[4]) else {
                return Header::Garbage;
            };
            let op = if h[5] == 0 {
                None
            } else {
                ReduceOp::from_tag(h[5])
            };
            let algo = if h[6] == 0 {
                None
            } else {
                Algo::from_tag(h[6])
            };
            Header::Data {
                desc: OpDesc {
                    kind,
                    algo,
                    dtype,
                    op,
                    count: u64_at(24),
                    seq: u64_at(16),
                },
                len,
            }
        }
        _ => Header::Garbage,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let descs = [
            OpDesc {
                kind: OpKind::Collective(Collective::Gather { root: 5 }),
                algo: Some(Algo::Linear),
                dtype: DType::BF16,
                op: None,
                count: 77,
                seq: 9,
            },
            OpDesc {
                kind: OpKind::Collective(Collective::AllReduce),
                algo: Some(Algo::Ring),
                dtype: DType::F32,
                op: Some(ReduceOp::Avg),
                count: 1 << 40,
                seq: 1,
            },
            OpDesc {
                kind: OpKind::PointToPoint,
                algo: None,
                dtype: DType::U8,
                op: None,
                count: 3,
                seq: 2,
            },
        ];
        for d in descs {
            assert_eq!(
                decode(&encode_data(&d, 12)),
                Header::Data { desc: d, len: 12 }
            );
        }
        assert_eq!(
            decode(&encode_abort(ErrorKind::Mismatch, 5)),
            Header::Abort {
                kind: ErrorKind::Mismatch,
                len: 5
            }
        );
        assert_eq!(decode(&[7u8; HEADER_LEN]), Header::Garbage);
        // Every collective's tag decodes back to it (the encoder's match and decoder's table agree).
        for make in COLLS {
            let c = make(3);
            let d = OpDesc {
                kind: OpKind::Collective(c),
                algo: None,
                dtype: DType::U8,
                op: None,
                count: 1,
                seq: 1,
            };
            assert_eq!(
                decode(&encode_data(&d, 0)),
                Header::Data { desc: d, len: 0 },
                "{c}"
            );
        }
    }
}
