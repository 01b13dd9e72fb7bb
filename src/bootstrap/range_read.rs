//! Range reads in the in-memory store ([`super::MemoryStore::get_range_encoded`]): every rank
//! of a group reads the same keys `{prefix}0`, `{prefix}1`, ... (every rank's address). The
//! store keeps one [`RangeRead`] per range asked for: how many of its keys it still misses, the
//! gets waiting for it, and once complete its reply, encoded once and handed to every later
//! reader. So N ranks reading N addresses cost the store N lookups and one encoding, not N² of
//! each.
//!
//! What a client (even one with the job secret) can make the store hold is bounded: a range
//! read names at most [`MAX_RANGE`] keys; one that is incomplete is dropped as soon as nobody
//! waits for it (a read with no wait, or one that timed out); complete ones are kept for later
//! readers, at most [`MAX_KEPT`] of them (the least recently read go first) and at most
//! [`MAX_ENCODED`] bytes of encoded replies. A set looks only at the ranges of its own prefix
//! ([`Ranges::was_set`]), not at every range ever read.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// One waiting get: how many of its keys are still missing (under the store's lock), and where
/// it sleeps.
#[derive(Default)]
pub(crate) struct Waiter {
    pub(crate) missing: std::sync::atomic::AtomicUsize,
    pub(crate) wake: std::sync::Condvar,
}

/// The most keys one range read may name (a group of 65,536 ranks): a bound on the work and the
/// memory one request can cost the store.
pub(crate) const MAX_RANGE: usize = 1 << 16;
/// The most complete range reads kept for later readers.
pub(crate) const MAX_KEPT: usize = 64;
/// The most bytes of encoded replies kept for later readers.
pub(crate) const MAX_ENCODED: usize = 64 << 20;

/// Which keys a range read names.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub(crate) struct RangeKey {
    pub(crate) prefix: String,
    pub(crate) indices: Range<usize>,
}

impl RangeKey {
    /// The key of index `i`.
    pub(crate) fn key(&self, i: usize) -> String {
        format!("{}{i}", self.prefix)
    }
}

/// The ways `key` splits into a prefix and an index written without leading zeros (as
/// [`super::range_keys`] writes it): one per start of a canonical number within its trailing
/// digits (a prefix may itself end in digits).
fn splits(key: &str) -> impl Iterator<Item = (&str, usize)> {
    let digits = key.len() - key.bytes().rev().take_while(u8::is_ascii_digit).count();
    (digits..key.len()).filter_map(move |at| {
        let number = &key[at..];
        let canonical = number == "0" || !number.starts_with('0');
        let i = number.parse().ok().filter(|_| canonical)?;
        Some((&key[..at], i))
    })
}

/// One range's state in the store.
pub(crate) struct RangeRead {
    /// The indices it names.
    indices: Range<usize>,
    /// How many of its keys are not set yet.
    pub(crate) missing: usize,
    /// Gets waiting for the range to complete.
    pub(crate) waiters: Vec<Arc<Waiter>>,
    /// The reply, once complete: each value as `len: u32` then its bytes, in order. Dropped
    /// when one of the range's keys is set again, and encoded anew by the next reader.
    encoded: Option<Arc<Vec<u8>>>,
    /// When it was last read ([`Ranges`]' clock).
    last_read: u64,
}

impl RangeRead {
    /// Index `i` of the range was set (`new`: for the first time): counts it down, and wakes
    /// every waiting get when the range is complete. Returns the bytes of encoding dropped.
    fn was_set(&mut self, new: bool) -> usize {
        let dropped = self.encoded.take().map_or(0, |e| e.len());
        if new {
            self.missing = self.missing.saturating_sub(1);
            if self.missing == 0 {
                for waiter in self.waiters.drain(..) {
                    waiter.missing.store(0, Relaxed);
                    waiter.wake.notify_one();
                }
            }
        }
        dropped
    }
}

/// Every range read the store holds, by prefix.
#[derive(Default)]
pub(crate) struct Ranges {
    by_prefix: HashMap<String, Vec<RangeRead>>,
    /// Bytes of encoded replies kept.
    encoded_bytes: usize,
    /// Counts reads, to find the least recently read.
    clock: u64,
}

impl Ranges {
    /// `key` was set (`new`: for the first time): tells the ranges it belongs to.
    pub(crate) fn was_set(&mut self, key: &str, new: bool) {
        if self.by_prefix.is_empty() {
            return;
        }
        for (prefix, i) in splits(key) {
            let Some(reads) = self.by_prefix.get_mut(prefix) else {
                continue;
            };
            for read in reads.iter_mut().filter(|r| r.indices.contains(&i)) {
                self.encoded_bytes -= read.was_set(new);
            }
        }
    }

    /// The read of `key`, made (counting what `is_set` says is missing) if there is none.
    pub(crate) fn get_or_make(
        &mut self,
        key: &RangeKey,
        is_set: impl Fn(&str) -> bool,
    ) -> &mut RangeRead {
        self.clock += 1;
        let clock = self.clock;
        let reads = self.by_prefix.entry(key.prefix.clone()).or_default();
        let at = match reads.iter().position(|r| r.indices == key.indices) {
            Some(at) => at,
            None => {
                let missing = key
                    .indices
                    .clone()
                    .filter(|&i| !is_set(&key.key(i)))
                    .count();
                reads.push(RangeRead {
                    indices: key.indices.clone(),
                    missing,
                    waiters: Vec::new(),
                    encoded: None,
                    last_read: clock,
                });
                reads.len() - 1
            }
        };
        let read = &mut reads[at];
        read.last_read = clock;
        read
    }

    /// The reply of the complete read of `key`, encoding it with `encode` if this is its first
    /// reader since a change (and keeping the encoding if there is room for it).
    pub(crate) fn reply(
        &mut self,
        key: &RangeKey,
        encode: impl FnOnce() -> Vec<u8>,
    ) -> Arc<Vec<u8>> {
        let room = MAX_ENCODED.saturating_sub(self.encoded_bytes);
        let Some(read) = self.find(key) else {
            return Arc::new(encode());
        };
        if let Some(e) = &read.encoded {
            return e.clone();
        }
        let e = Arc::new(encode());
        if e.len() <= room {
            read.encoded = Some(e.clone());
            self.encoded_bytes += e.len();
        }
        e
    }

    /// Stops `waiter` waiting for the read of `key`.
    pub(crate) fn forget(&mut self, key: &RangeKey, waiter: &Arc<Waiter>) {
        if let Some(read) = self.find(key) {
            read.waiters.retain(|w| !Arc::ptr_eq(w, waiter));
        }
    }

    /// After a read of `key`: drops it if it is incomplete and nobody waits for it, and the least
    /// recently read complete ones beyond [`MAX_KEPT`].
    pub(crate) fn tidy(&mut self, key: &RangeKey) {
        if self
            .find(key)
            .is_some_and(|r| r.missing > 0 && r.waiters.is_empty())
        {
            self.remove(&key.prefix, |r| r.indices == key.indices);
        }
        while self.len() > MAX_KEPT {
            let Some((prefix, indices)) = self.least_recently_read_idle() else {
                break;
            };
            self.remove(&prefix, |r| r.indices == indices);
        }
    }

    /// How many range reads the store holds.
    pub(crate) fn len(&self) -> usize {
        self.by_prefix.values().map(Vec::len).sum()
    }

    fn find(&mut self, key: &RangeKey) -> Option<&mut RangeRead> {
        self.by_prefix
            .get_mut(&key.prefix)?
            .iter_mut()
            .find(|r| r.indices == key.indices)
    }

    /// The read that nobody waits for and was read longest ago.
    fn least_recently_read_idle(&self) -> Option<(String, Range<usize>)> {
        self.by_prefix
            .iter()
            .flat_map(|(p, reads)| reads.iter().map(move |r| (p, r)))
            .filter(|(_, r)| r.waiters.is_empty())
            .min_by_key(|(_, r)| r.last_read)
            .map(|(p, r)| (p.clone(), r.indices.clone()))
    }

    fn remove(&mut self, prefix: &str, which: impl Fn(&RangeRead) -> bool) {
        let Some(reads) = self.by_prefix.get_mut(prefix) else {
            return;
        };
        if let Some(at) = reads.iter().position(which) {
            let read = reads.swap_remove(at);
            self.encoded_bytes -= read.encoded.map_or(0, |e| e.len());
        }
        if reads.is_empty() {
            self.by_prefix.remove(prefix);
        }
    }
}

/// Each value of the range as `len: u32` then its bytes (a missing one as empty).
pub(crate) fn encode(key: &RangeKey, map: &HashMap<String, Vec<u8>>) -> Vec<u8> {
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
    fn a_key_splits_at_each_canonical_number_of_its_trailing_digits() {
        fn all(k: &str) -> Vec<(&str, usize)> {
            splits(k).collect()
        }
        assert_eq!(all("g/addr/12"), vec![("g/addr/", 12), ("g/addr/1", 2)]);
        assert_eq!(all("g/addr/0"), vec![("g/addr/", 0)]);
        assert_eq!(all("g/addr/02"), vec![("g/addr/0", 2)]);
        assert_eq!(all("g/addr/10"), vec![("g/addr/", 10), ("g/addr/1", 0)]);
        assert!(all("g/addr/").is_empty());
        assert!(all("g/addr/3x").is_empty());
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
