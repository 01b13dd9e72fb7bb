//! Range reads in the in-memory store ([`super::MemoryStore::get_range_encoded`]): every rank
//! of a group reads the same keys `{prefix}0`, `{prefix}1`, ... (every rank's address). The
//! store keeps one [`RangeRead`] per range asked for: which keys it still misses, the gets
//! waiting for it, and once complete its reply, encoded once and handed to every later reader.
//! So N ranks reading N addresses cost the store N lookups and one encoding, not N² of each.

use super::memory::Waiter;
use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The most keys one range read may name: a bound on what a request can make the store hold.
pub(crate) const MAX_RANGE: usize = 1 << 20;

/// Which keys a range read names.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub(crate) struct RangeKey {
    pub(crate) prefix: String,
    pub(crate) indices: Range<usize>,
}

impl RangeKey {
    /// The index `i` for which `key` is `{prefix}{i}` (written without leading zeros, as
    /// [`super::range_keys`] writes it), if it is one of this range's keys.
    pub(crate) fn index_of(&self, key: &str) -> Option<usize> {
        let digits = key.strip_prefix(self.prefix.as_str())?;
        let canonical = !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && (digits == "0" || !digits.starts_with('0'));
        let i: usize = digits.parse().ok().filter(|_| canonical)?;
        self.indices.contains(&i).then_some(i)
    }

    /// The key of index `i`.
    pub(crate) fn key(&self, i: usize) -> String {
        format!("{}{i}", self.prefix)
    }
}

/// One range's state in the store.
pub(crate) struct RangeRead {
    /// Indices not set yet.
    pub(crate) missing: BTreeSet<usize>,
    /// Gets waiting for the range to complete.
    pub(crate) waiters: Vec<Arc<Waiter>>,
    /// The reply, once complete: each value as `len: u32` then its bytes, in order. Dropped
    /// when one of the range's keys is set again, and encoded anew by the next reader.
    pub(crate) encoded: Option<Arc<Vec<u8>>>,
}

impl RangeRead {
    /// A range read of `key` over the values in `map`.
    pub(crate) fn new(key: &RangeKey, map: &HashMap<String, Vec<u8>>) -> RangeRead {
        RangeRead {
            missing: key
                .indices
                .clone()
                .filter(|&i| !map.contains_key(&key.key(i)))
                .collect(),
            waiters: Vec::new(),
            encoded: None,
        }
    }

    /// Index `i` of the range was set: counts it down, and wakes every waiting get when the range
    /// is complete.
    pub(crate) fn was_set(&mut self, i: usize) {
        self.encoded = None;
        if self.missing.remove(&i) && self.missing.is_empty() {
            for waiter in self.waiters.drain(..) {
                waiter.missing.store(0, Relaxed);
                waiter.wake.notify_one();
            }
        }
    }

    /// The reply, encoding it from `map` if this is its first reader since a change.
    pub(crate) fn reply(&mut self, key: &RangeKey, map: &HashMap<String, Vec<u8>>) -> Arc<Vec<u8>> {
        self.encoded
            .get_or_insert_with(|| Arc::new(encode(key, map)))
            .clone()
    }
}

/// Each value of the range as `len: u32` then its bytes (a missing one as empty).
fn encode(key: &RangeKey, map: &HashMap<String, Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    for i in key.indices.clone() {
        let value = map.get(&key.key(i)).map(Vec::as_slice).unwrap_or_default();
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        out.extend_from_slice(value);
    }
    out
}

/// `count` values, each `len: u32` then its bytes, filling `raw` exactly; `None` otherwise.
pub(crate) fn split_values(mut raw: &[u8], count: usize) -> Option<Vec<Vec<u8>>> {
    let mut values = Vec::with_capacity(count);
    for _ in 0..count {
        let (len, rest) = raw.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        let (value, rest) = (len <= rest.len()).then(|| rest.split_at(len))?;
        values.push(value.to_vec());
        raw = rest;
    }
    raw.is_empty().then_some(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_canonical_keys_of_a_range_belong_to_it() {
        let k = RangeKey {
            prefix: "g/addr/".into(),
            indices: 2..12,
        };
        assert_eq!(k.index_of("g/addr/2"), Some(2));
        assert_eq!(k.index_of("g/addr/11"), Some(11));
        for other in [
            "g/addr/1",
            "g/addr/12",
            "g/addr/02",
            "g/addr/+3",
            "g/addr/",
            "g/addr/3x",
            "h/addr/3",
        ] {
            assert_eq!(k.index_of(other), None, "{other}");
        }
        assert_eq!(k.key(7), "g/addr/7");
    }

    #[test]
    fn a_reply_splits_back_into_its_values() {
        let k = RangeKey {
            prefix: "p".into(),
            indices: 0..3,
        };
        let map: HashMap<String, Vec<u8>> = [("p0", &b"a"[..]), ("p1", b""), ("p2", b"ccc")]
            .map(|(k, v)| (k.to_string(), v.to_vec()))
            .into();
        let raw = encode(&k, &map);
        assert_eq!(
            split_values(&raw, 3).unwrap(),
            vec![b"a".to_vec(), vec![], b"ccc".to_vec()]
        );
        assert_eq!(split_values(&raw, 2), None, "too many bytes for 2 values");
        assert_eq!(
            split_values(&raw[..raw.len() - 1], 3),
            None,
            "a value cut short"
        );
    }
}
