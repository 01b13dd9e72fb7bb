//! The job's key-value space as one host sees it: every pair this host's ranks put, plus every
//! pair the other hosts contributed at the barriers so far; and the host-local node attributes
//! of PMI-2.
//!
//! A barrier hands the pairs put here since the last one to the [`Exchange`](crate::pmi::Exchange)
//! as one blob: for each pair, the key's length and bytes then the value's, lengths as 4-byte
//! little-endian integers.

use std::collections::HashMap;

/// The longest key accepted (`keylen_max`).
pub const KEY_MAX: usize = 64;
/// The longest value accepted (`vallen_max`).
pub const VALUE_MAX: usize = 1024;
/// The longest kvsname (`kvsname_max`).
pub const KVSNAME_MAX: usize = 256;
/// Bytes of keys and values one rank may put in all (bounds the memory a rank can make the
/// service hold; an MPI library puts a few business cards).
pub const PUT_BYTES_PER_RANK: usize = 1 << 20;

/// Key-value pairs: the job-wide space and this host's part since the last barrier.
#[derive(Debug, Default)]
pub struct Kvs {
    pairs: HashMap<String, String>,
    pending: Vec<(String, String)>,
    node_attrs: HashMap<String, String>,
}

impl Kvs {
    /// Records a pair put by a rank of this host: visible here at once, to the other hosts after
    /// the next barrier.
    pub fn put(&mut self, key: &str, value: &str) {
        self.pairs.insert(key.to_string(), value.to_string());
        self.pending.push((key.to_string(), value.to_string()));
    }

    /// The value of `key`, if any host put it (other hosts' pairs after a barrier).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs.get(key).map(String::as_str)
    }

    /// The blob of this host's pairs since the last barrier; they are then no longer pending.
    pub fn take_pending_blob(&mut self) -> Vec<u8> {
        encode(&std::mem::take(&mut self.pending))
    }

    /// Merges every host's blob of one barrier round (this host's included).
    pub fn merge(&mut self, blobs: &[Vec<u8>]) -> Result<(), String> {
        for (node, blob) in blobs.iter().enumerate() {
            let pairs = decode(blob).map_err(|e| format!("the blob of node {node}: {e}"))?;
            self.pairs.extend(pairs);
        }
        Ok(())
    }

    /// Sets a node attribute (PMI-2 `info-putnodeattr`, seen by this host's ranks only).
    pub fn put_node_attr(&mut self, key: &str, value: &str) {
        self.node_attrs.insert(key.to_string(), value.to_string());
    }

    /// A node attribute.
    pub fn node_attr(&self, key: &str) -> Option<&str> {
        self.node_attrs.get(key).map(String::as_str)
    }
}

/// Encodes pairs as a blob.
pub fn encode(pairs: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in pairs {
        for s in [k, v] {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
    }
    out
}

/// Decodes a blob made by [`encode`].
pub fn decode(mut blob: &[u8]) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    while !blob.is_empty() {
        let key = take_string(&mut blob)?;
        let value = take_string(&mut blob)?;
        pairs.push((key, value));
    }
    Ok(pairs)
}

fn take_string(blob: &mut &[u8]) -> Result<String, String> {
    let (len, rest) = blob
        .split_first_chunk::<4>()
        .ok_or("cut short in a length")?;
    let len = u32::from_le_bytes(*len) as usize;
    if rest.len() < len {
        return Err(format!(
            "cut short: {len} bytes announced, {} left",
            rest.len()
        ));
    }
    let (s, rest) = rest.split_at(len);
    *blob = rest;
    String::from_utf8(s.to_vec()).map_err(|_| "a key or value that is not text".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_round_trip_and_merge() {
        let mut a = Kvs::default();
        a.put("k0", "v0");
        a.put("k1", "");
        let blob = a.take_pending_blob();
        assert_eq!(a.take_pending_blob(), Vec::<u8>::new());
        let mut b = Kvs::default();
        b.put("kb", "vb");
        let blob_b = b.take_pending_blob();
        b.merge(&[blob.clone(), blob_b.clone()]).unwrap();
        a.merge(&[blob, blob_b]).unwrap();
        for kvs in [&a, &b] {
            assert_eq!(kvs.get("k0"), Some("v0"));
            assert_eq!(kvs.get("k1"), Some(""));
            assert_eq!(kvs.get("kb"), Some("vb"));
            assert_eq!(kvs.get("none"), None);
        }
    }

    #[test]
    fn bad_blobs_are_errors() {
        let mut kvs = Kvs::default();
        let good = encode(&[("a".into(), "b".into())]);
        assert!(kvs.merge(&[good[..good.len() - 1].to_vec()]).is_err());
        assert!(kvs.merge(&[vec![1, 0]]).is_err());
        assert!(kvs
            .merge(&[vec![], vec![1, 0, 0, 0, 0xff, 0, 0, 0, 0]])
            .is_err());
    }

    #[test]
    fn node_attributes_are_separate() {
        let mut kvs = Kvs::default();
        kvs.put_node_attr("n", "1");
        assert_eq!(kvs.node_attr("n"), Some("1"));
        assert_eq!(kvs.get("n"), None);
        assert!(kvs.take_pending_blob().is_empty());
    }
}
