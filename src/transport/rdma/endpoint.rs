//! What two ranks tell each other through the bootstrap store to connect a queue pair: first
//! whether each can and wants RDMA at all ([`Offer`]), then, per pair, how to reach its queue pair
//! and its memory ([`EndpointInfo`]). Both have a versioned wire format checked field by field:
//! a store entry from another psyne version or a corrupted one is an error, never a panic.

use std::fmt;

/// How an adapter's port is linked: addressing differs (LIDs on InfiniBand, GIDs on RoCE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkLayer {
    /// InfiniBand: routed by LID inside a subnet, GID across subnets.
    Infiniband,
    /// RoCE: Ethernet, always addressed by GID (a global route header on every packet).
    Ethernet,
}

/// A path MTU, as verbs encode it (`IBV_MTU_256` = 1 .. `IBV_MTU_4096` = 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mtu(u8);

impl Mtu {
    /// 1024 bytes, what every adapter supports.
    pub const MTU_1024: Mtu = Mtu(3);
    /// 4096 bytes, the largest.
    #[allow(dead_code)] // the verbs API this mirrors; no caller needs it yet (no RDMA hardware here)
    pub const MTU_4096: Mtu = Mtu(5);

    /// The MTU of verbs code `code` (1..=5).
    pub fn from_code(code: u8) -> Option<Mtu> {
        (1..=5).contains(&code).then_some(Mtu(code))
    }

    /// The verbs code (1..=5).
    pub fn code(self) -> u8 {
        self.0
    }

    /// The MTU in bytes (256..=4096).
    pub fn bytes(self) -> usize {
        128 << self.0
    }
}

/// One side's half of a reliable connection, as published for its peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointInfo {
    /// The port's local identifier (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The port's GID at the chosen index.
    pub gid: [u8; 16],
    /// How the port is linked.
    pub link_layer: LinkLayer,
    /// The port's active MTU (the pair uses the smaller of the two).
    pub mtu: Mtu,
    /// The queue pair number (24 bits).
    pub qpn: u32,
    /// The first packet sequence number this side sends (24 bits).
    pub psn: u32,
    /// Where the peer writes large messages: this side's receive ring.
    pub ring_addr: u64,
    /// The remote key of the ring.
    pub ring_rkey: u32,
    /// Bytes of the ring (a power of two).
    pub ring_len: u32,
    /// Where the peer writes how much of this side's data it consumed.
    pub credit_addr: u64,
    /// The remote key of the credit words.
    pub credit_rkey: u32,
    /// Receive work requests this side keeps posted.
    pub depth: u16,
    /// Bytes of each receive slot (the largest message sent by send/receive).
    pub eager: u32,
}

/// Why an entry could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError(pub String);

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WireError {}

const MAGIC: &[u8; 7] = b"PSYRDMA";
const VERSION: u8 = 1;
/// Bytes of an encoded [`EndpointInfo`].
pub const ENDPOINT_LEN: usize = 8 + 2 + 16 + 1 + 1 + 4 + 4 + 8 + 4 + 4 + 8 + 4 + 2 + 4;

/// Reads little-endian fields off the front of a byte slice.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        out.copy_from_slice(&self.0[..N]);
        self.0 = &self.0[N..];
        out
    }
    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
}

impl EndpointInfo {
    /// The wire form: magic, version, then every field little-endian ([`ENDPOINT_LEN`] bytes).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(ENDPOINT_LEN);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.lid.to_le_bytes());
        out.extend_from_slice(&self.gid);
        out.push(match self.link_layer {
            LinkLayer::Infiniband => 1,
            LinkLayer::Ethernet => 2,
        });
        out.push(self.mtu.code());
        out.extend_from_slice(&self.qpn.to_le_bytes());
        out.extend_from_slice(&self.psn.to_le_bytes());
        out.extend_from_slice(&self.ring_addr.to_le_bytes());
        out.extend_from_slice(&self.ring_rkey.to_le_bytes());
        out.extend_from_slice(&self.ring_len.to_le_bytes());
        out.extend_from_slice(&self.credit_addr.to_le_bytes());
        out.extend_from_slice(&self.credit_rkey.to_le_bytes());
        out.extend_from_slice(&self.depth.to_le_bytes());
        out.extend_from_slice(&self.eager.to_le_bytes());
        out
    }

    /// Reads the wire form, checking every field's range.
    pub fn decode(raw: &[u8]) -> Result<EndpointInfo, WireError> {
        let bad = |what: String| Err(WireError(format!("RDMA endpoint entry: {what}")));
        if raw.len() < 8 || &raw[..7] != MAGIC {
            return bad("not an RDMA endpoint (a different psyne version?)".into());
        }
        if raw[7] != VERSION {
            return bad(format!(
                "format version {} where {VERSION} was expected (every rank must run the same psyne)",
                raw[7]
            ));
        }
        if raw.len() != ENDPOINT_LEN {
            return bad(format!(
                "{} bytes where {ENDPOINT_LEN} were expected",
                raw.len()
            ));
        }
        let mut r = Reader(&raw[8..]);
        let lid = r.u16();
        let gid = r.take::<16>();
        let link_layer = match r.u8() {
            1 => LinkLayer::Infiniband,
            2 => LinkLayer::Ethernet,
            other => return bad(format!("unknown link layer {other}")),
        };
        let mtu_code = r.u8();
        let Some(mtu) = Mtu::from_code(mtu_code) else {
            return bad(format!("MTU code {mtu_code} is not 1..=5"));
        };
        let info = EndpointInfo {
            lid,
            gid,
            link_layer,
            mtu,
            qpn: r.u32(),
            psn: r.u32(),
            ring_addr: r.u64(),
            ring_rkey: r.u32(),
            ring_len: r.u32(),
            credit_addr: r.u64(),
            credit_rkey: r.u32(),
            depth: r.u16(),
            eager: r.u32(),
        };
        if info.qpn >= 1 << 24 || info.psn >= 1 << 24 {
            return bad(format!(
                "queue pair number {:#x} or PSN {:#x} exceeds 24 bits",
                info.qpn, info.psn
            ));
        }
        if !info.ring_len.is_power_of_two() || info.ring_len < 4096 {
            return bad(format!(
                "ring of {} bytes is not a power of two of at least 4 KiB",
                info.ring_len
            ));
        }
        if info.depth == 0 || info.eager == 0 {
            return bad("no receive slots".into());
        }
        if info.link_layer == LinkLayer::Infiniband && info.lid == 0 && info.gid == [0; 16] {
            return bad("an InfiniBand port with neither LID nor GID".into());
        }
        Ok(info)
    }
}

/// What a rank says about RDMA before any queue pair exists, one entry per rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offer {
    /// `PSY_TRANSPORT=rdma`: RDMA with every peer, or an error.
    Force,
    /// RDMA with peers on other hosts that offer it too.
    Allow,
    /// No RDMA, and why (no device, feature off, `PSY_TRANSPORT=tcp`, ...).
    Refuse(String),
}

const OFFER_TAG: &str = "rdma1";

impl Offer {
    /// The wire form: `rdma1 force`, `rdma1 allow`, or `rdma1 none <reason>`.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Offer::Force => format!("{OFFER_TAG} force"),
            Offer::Allow => format!("{OFFER_TAG} allow"),
            Offer::Refuse(why) => format!("{OFFER_TAG} none {}", why.replace('\n', " ")),
        }
        .into_bytes()
    }

    /// Reads the wire form.
    pub fn decode(raw: &[u8]) -> Result<Offer, WireError> {
        let bad = || {
            Err(WireError(format!(
                "RDMA offer entry {:?} is malformed (every rank must run the same psyne)",
                String::from_utf8_lossy(&raw[..raw.len().min(80)])
            )))
        };
        let Ok(text) = std::str::from_utf8(raw) else {
            return bad();
        };
        let Some(rest) = text.strip_prefix(OFFER_TAG) else {
            return bad();
        };
        match rest {
            " force" => Ok(Offer::Force),
            " allow" => Ok(Offer::Allow),
            _ => match rest.strip_prefix(" none ") {
                Some(why) if !why.is_empty() => Ok(Offer::Refuse(why.to_string())),
                _ => bad(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> EndpointInfo {
        EndpointInfo {
            lid: 7,
            gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
            link_layer: LinkLayer::Infiniband,
            mtu: Mtu::MTU_4096,
            qpn: 0x1234,
            psn: 0xabcdef,
            ring_addr: 0x7f00_0000_1000,
            ring_rkey: 0xdead_beef,
            ring_len: 4 << 20,
            credit_addr: 0x7f00_0000_0040,
            credit_rkey: 42,
            depth: 64,
            eager: 8192,
        }
    }

    #[test]
    fn encodes_to_the_documented_length() {
        assert_eq!(sample().encode().len(), ENDPOINT_LEN);
    }

    #[test]
    fn every_corrupted_field_is_rejected() {
        let good = sample().encode();
        let mut cases: Vec<(Vec<u8>, &str)> = Vec::new();
        let mut at = |i: usize, v: u8, why: &'static str| {
            let mut b = good.clone();
            b[i] = v;
            cases.push((b, why));
        };
        at(0, b'X', "not an RDMA endpoint");
        at(7, 9, "format version 9");
        at(26, 3, "link layer");
        at(27, 0, "MTU code");
        at(27, 6, "MTU code");
        at(31, 0x01, "24 bits"); // qpn's top byte
        at(35, 0x01, "24 bits"); // psn's top byte
        cases.push((good[..ENDPOINT_LEN - 1].to_vec(), "bytes where"));
        cases.push(([good.clone(), vec![0]].concat(), "bytes where"));
        for (bytes, why) in cases {
            let e = EndpointInfo::decode(&bytes).unwrap_err();
            assert!(e.0.contains(why), "expected {why:?} in {e}");
        }
        let mut info = sample();
        info.ring_len = 3000;
        assert!(EndpointInfo::decode(&info.encode()).is_err());
        let mut info = sample();
        info.depth = 0;
        assert!(EndpointInfo::decode(&info.encode()).is_err());
        let mut info = sample();
        (info.lid, info.gid) = (0, [0; 16]);
        assert!(EndpointInfo::decode(&info.encode()).is_err());
    }

    #[test]
    fn offers_roundtrip_and_reject_garbage() {
        for o in [
            Offer::Force,
            Offer::Allow,
            Offer::Refuse("no RDMA device".into()),
        ] {
            assert_eq!(Offer::decode(&o.encode()).unwrap(), o);
        }
        for raw in [
            &b""[..],
            b"rdma1",
            b"rdma1 none ",
            b"rdma2 force",
            b"rdma1 maybe",
            b"\xff\xfe",
        ] {
            assert!(Offer::decode(raw).is_err(), "{raw:?}");
        }
        // A reason never spans lines (the entry is one line).
        let o = Offer::Refuse("a\nb".into());
        assert_eq!(
            Offer::decode(&o.encode()).unwrap(),
            Offer::Refuse("a b".into())
        );
    }

    fn any_endpoint() -> impl Strategy<Value = EndpointInfo> {
        (
            (any::<u16>(), any::<[u8; 16]>(), any::<bool>(), 1u8..=5),
            (
                0u32..1 << 24,
                0u32..1 << 24,
                any::<u64>(),
                any::<u32>(),
                12u32..31,
            ),
            (any::<u64>(), any::<u32>(), 1u16.., 1u32..),
        )
            .prop_map(
                |((lid, gid, ib, mtu), (qpn, psn, ring_addr, ring_rkey, shift), (ca, ck, d, e))| {
                    EndpointInfo {
                        lid: if ib { lid.max(1) } else { lid },
                        gid,
                        link_layer: if ib {
                            LinkLayer::Infiniband
                        } else {
                            LinkLayer::Ethernet
                        },
                        mtu: Mtu::from_code(mtu).expect("1..=5"),
                        qpn,
                        psn,
                        ring_addr,
                        ring_rkey,
                        ring_len: 1 << shift,
                        credit_addr: ca,
                        credit_rkey: ck,
                        depth: d,
                        eager: e,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn endpoints_roundtrip(info in any_endpoint()) {
            prop_assert_eq!(EndpointInfo::decode(&info.encode()).unwrap(), info);
        }

        #[test]
        fn arbitrary_bytes_never_panic(raw in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = EndpointInfo::decode(&raw);
            let _ = Offer::decode(&raw);
        }

        #[test]
        fn one_flipped_byte_never_panics_and_rarely_passes(info in any_endpoint(), at in 0usize..ENDPOINT_LEN, x in 1u8..) {
            let mut raw = info.encode();
            raw[at] ^= x;
            if let Ok(back) = EndpointInfo::decode(&raw) {
                // Only a field without a range check changed; the result differs from the input.
                prop_assert_ne!(back, info);
                prop_assert!(at >= 8);
            }
        }
    }
}
