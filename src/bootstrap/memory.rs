//! A store in one process's memory: the in-tree fake for tests, and the table behind
//! [`super::StoreServer`].

use super::range_read::{encode, split_values, RangeKey, Ranges, Waiter, MAX_RANGE};
use super::Store;
use crate::error::{Error, ErrorKind, Result};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// A [`Store`] in memory; share it between threads with an `Arc`.
///
/// A get waits for exactly the keys it asks for: each waiting get counts the keys it still
/// misses, a set counts down the gets that wait for its key, and wakes a get only when nothing
/// it asked for is missing. So N ranks each reading every rank's address cost N wake-ups, not
/// N² (every set waking every waiter, as one shared condition variable would). A range read
/// ([`MemoryStore::get_range_encoded`]) is cheaper still: the store keeps one state per range
/// read, and encodes its reply once for every reader.
///
/// What it holds is bounded: at most `MAX_BYTES` (256 MiB) of keys and values (a set beyond that is
/// refused), and range reads as the store's `range_read` says.
#[derive(Default)]
pub struct MemoryStore {
    state: Mutex<State>,
}

/// The most bytes of keys and values a store holds: far more than a job's addresses (a few
/// hundred bytes per rank), far less than would hurt the launcher that serves it.
pub const MAX_BYTES: usize = 256 << 20;

#[derive(Default)]
struct State {
    map: HashMap<String, Vec<u8>>,
    /// Bytes of the keys and values in `map`.
    bytes: usize,
    /// The gets waiting for each key not set yet.
    waiting: HashMap<String, Vec<Arc<Waiter>>>,
    /// The range reads the store holds.
    ranges: Ranges,
}

impl State {
    /// Sets `key` and counts down the gets waiting for it, waking those it completes; refuses a
    /// value that would take the store past [`MAX_BYTES`].
    fn put(&mut self, key: &str, value: Vec<u8>) -> Result<()> {
        let old = self.map.get(key).map_or(0, |v| key.len() + v.len());
        let bytes = self.bytes - old + key.len() + value.len();
        if bytes > MAX_BYTES {
            return Err(Error::invalid(format!(
                "setting store key `{key}` ({} bytes) would make the store hold {bytes} bytes, more than its {MAX_BYTES}: a rank stores far more than psyne does (a bug in the program?)",
                value.len()
            )));
        }
        self.bytes = bytes;
        let new = self.map.insert(key.to_string(), value).is_none();
        self.ranges.was_set(key, new);
        for waiter in self.waiting.remove(key).unwrap_or_default() {
            use std::sync::atomic::Ordering::Relaxed;
            if waiter.missing.fetch_sub(1, Relaxed) == 1 {
                waiter.wake.notify_one();
            }
        }
        Ok(())
    }

    /// Stops waiting for `keys` on behalf of `waiter` (it timed out).
    fn forget(&mut self, keys: &[String], waiter: &Arc<Waiter>) {
        for key in keys {
            if let Some(list) = self.waiting.get_mut(key) {
                list.retain(|w| !Arc::ptr_eq(w, waiter));
                if list.is_empty() {
                    self.waiting.remove(key);
                }
            }
        }
    }
}

fn poisoned() -> Error {
    Error::new(
        ErrorKind::Bootstrap,
        "the store's lock was poisoned by a panic",
    )
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> Result<MutexGuard<'_, State>> {
        self.state.lock().map_err(|_| poisoned())
    }

    /// The values of `{prefix}{i}` for `i` in `indices`, each as `len: u32` then its bytes, in
    /// order, once all are set (or a timeout error naming a missing key at `deadline`): the reply
    /// of [`Store::get_range`] over the network, encoded once and shared by every reader.
    pub fn get_range_encoded(
        &self,
        prefix: &str,
        indices: Range<usize>,
        deadline: Instant,
    ) -> Result<Arc<Vec<u8>>> {
        if indices.len() > MAX_RANGE {
            return Err(Error::invalid(format!(
                "a read of {} keys of `{prefix}`: at most {MAX_RANGE} in one request",
                indices.len()
            )));
        }
        let key = RangeKey {
            prefix: prefix.to_string(),
            indices,
        };
        let mut state = self.lock()?;
        let waiter = Arc::new(Waiter::default());
        let mut registered = false;
        let outcome = loop {
            let State { map, ranges, .. } = &mut *state;
            let read = ranges.get_or_make(&key, |k| map.contains_key(k));
            if read.missing == 0 {
                break Ok(ranges.reply(&key, || encode(&key, map)));
            }
            let now = Instant::now();
            if now >= deadline {
                ranges.forget(&key, &waiter);
                break Err(not_set_in_time(&first_missing(&key, map)));
            }
            // Registered once: a spurious wake-up leaves it in the list (only the range's
            // completion takes it out, and that ends the wait).
            if !registered {
                waiter
                    .missing
                    .store(1, std::sync::atomic::Ordering::Relaxed);
                read.waiters.push(waiter.clone());
                registered = true;
            }
            state = waiter
                .wake
                .wait_timeout(state, deadline - now)
                .map_err(|_| poisoned())?
                .0;
        };
        state.ranges.tidy(&key);
        outcome
    }
}

/// The first key of `key`'s range that `map` does not hold.
fn first_missing(key: &RangeKey, map: &HashMap<String, Vec<u8>>) -> String {
    key.indices
        .clone()
        .map(|i| key.key(i))
        .find(|k| !map.contains_key(k))
        .unwrap_or_else(|| key.key(key.indices.start))
}

/// The error of a get whose key `key` was not set by its deadline.
fn not_set_in_time(key: &str) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!("store key `{key}` was not set in time: a rank did not start or is stuck before joining (raise PSY_TIMEOUT if start-up is slow)"),
    )
}

impl Store for MemoryStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.lock()?.put(key, value.to_vec())
    }

    fn get(&self, key: &str, deadline: Instant) -> Result<Vec<u8>> {
        let mut values = self.get_many(&[key.to_string()], deadline)?;
        Ok(values.pop().unwrap_or_default())
    }

    fn get_many(&self, keys: &[String], deadline: Instant) -> Result<Vec<Vec<u8>>> {
        let mut state = self.lock()?;
        let missing: Vec<String> = keys
            .iter()
            .filter(|k| !state.map.contains_key(*k))
            .cloned()
            .collect();
        if !missing.is_empty() {
            let waiter = Arc::new(Waiter::default());
            waiter
                .missing
                .store(missing.len(), std::sync::atomic::Ordering::Relaxed);
            for key in &missing {
                state
                    .waiting
                    .entry(key.clone())
                    .or_default()
                    .push(waiter.clone());
            }
            while waiter.missing.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                let now = Instant::now();
                if now >= deadline {
                    state.forget(&missing, &waiter);
                    let key = missing
                        .iter()
                        .find(|k| !state.map.contains_key(*k))
                        .unwrap_or(&missing[0]);
                    return Err(not_set_in_time(key));
                }
                state = waiter
                    .wake
                    .wait_timeout(state, deadline - now)
                    .map_err(|_| poisoned())?
                    .0;
            }
        }
        Ok(keys
            .iter()
            .map(|k| state.map.get(k).cloned().unwrap_or_default())
            .collect())
    }

    fn get_range(
        &self,
        prefix: &str,
        indices: Range<usize>,
        deadline: Instant,
    ) -> Result<Vec<Vec<u8>>> {
        let count = indices.len();
        let raw = self.get_range_encoded(prefix, indices, deadline)?;
        split_values(&raw, count).ok_or_else(|| {
            Error::new(
                ErrorKind::Bootstrap,
                "a range read's own reply is malformed (a bug in psyne)",
            )
        })
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let mut state = self.lock()?;
        let old = state
            .map
            .get(key)
            .map(|v| {
                std::str::from_utf8(v)
                    .ok()
                    .and_then(|s| s.parse::<i64>().ok())
                    .ok_or_else(|| {
                        Error::invalid(format!("store key `{key}` does not hold an integer"))
                    })
            })
            .transpose()?
            .unwrap_or(0);
        let new = old.wrapping_add(delta);
        state.put(key, new.to_string().into_bytes())?;
        Ok(new)
    }

    fn set_once(&self, key: &str, value: &[u8]) -> Result<Vec<u8>> {
        let mut state = self.lock()?;
        if let Some(held) = state.map.get(key) {
            return Ok(held.clone());
        }
        state.put(key, value.to_vec())?;
        Ok(value.to_vec())
    }

    /// In one process there is no connection to end: `key` keeps `value`.
    fn set_ephemeral(&self, key: &str, value: &[u8], _when_gone: &[u8]) -> Result<()> {
        self.set(key, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn get_waits_for_a_later_set_and_times_out_otherwise() {
        let s = Arc::new(MemoryStore::new());
        let s2 = s.clone();
        let t = std::thread::spawn(move || s2.get("k", Instant::now() + Duration::from_secs(5)));
        s.set("k", b"v").unwrap();
        assert_eq!(t.join().unwrap().unwrap(), b"v");
        let err = s
            .get("missing", Instant::now() + Duration::from_millis(20))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Timeout);
        assert_eq!(s.add("n", 2).unwrap(), 2);
        assert_eq!(s.add("n", 3).unwrap(), 5);
        assert_eq!(s.set_once("once", b"first").unwrap(), b"first");
        assert_eq!(s.set_once("once", b"second").unwrap(), b"first");
        assert_eq!(s.get("once", Instant::now()).unwrap(), b"first");
    }

    #[test]
    fn many_gets_of_many_keys_each_complete_once_all_their_keys_are_set() {
        let s = Arc::new(MemoryStore::new());
        let keys: Vec<String> = (0..20).map(|i| format!("addr/{i}")).collect();
        let readers: Vec<_> = (0..20)
            .map(|_| {
                let (s, keys) = (s.clone(), keys.clone());
                std::thread::spawn(move || {
                    s.get_many(&keys, Instant::now() + Duration::from_secs(10))
                })
            })
            .collect();
        for (i, key) in keys.iter().enumerate().rev() {
            s.set(key, format!("v{i}").as_bytes()).unwrap();
        }
        let want: Vec<Vec<u8>> = (0..20).map(|i| format!("v{i}").into_bytes()).collect();
        for r in readers {
            assert_eq!(r.join().unwrap().unwrap(), want);
        }
        assert!(s.lock().unwrap().waiting.is_empty());
    }

    #[test]
    fn a_get_that_timed_out_names_a_missing_key_and_stops_waiting() {
        let s = MemoryStore::new();
        s.set("a", b"1").unwrap();
        let keys = ["a", "b", "c"].map(String::from);
        let e = s
            .get_many(&keys, Instant::now() + Duration::from_millis(20))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(e.to_string().contains("`b`"), "{e}");
        assert!(s.lock().unwrap().waiting.is_empty());
        s.set("b", b"2").unwrap();
        s.set("c", b"3").unwrap();
        assert_eq!(s.get_many(&keys, Instant::now()).unwrap()[2], b"3");
    }

    #[test]
    fn range_reads_nobody_waits_for_are_dropped_and_complete_ones_kept_within_a_bound() {
        use super::super::range_read::{MAX_KEPT, MAX_RANGE};
        let s = MemoryStore::new();
        // An insider's reads of ranges that will never be complete, with no wait: each is
        // dropped as soon as it has been answered.
        for i in 0..40 {
            let e = s
                .get_range_encoded(&format!("never{i}/"), 0..MAX_RANGE, Instant::now())
                .unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Timeout);
            assert!(e.to_string().contains(&format!("`never{i}/0`")), "{e}");
        }
        assert_eq!(s.lock().unwrap().ranges.len(), 0);
        let too_many = s.get_range_encoded("p/", 0..MAX_RANGE + 1, Instant::now());
        assert_eq!(too_many.unwrap_err().kind(), ErrorKind::InvalidArgument);
        // Complete reads are kept for later readers, at most MAX_KEPT of them.
        for i in 0..3 * MAX_KEPT {
            s.set(&format!("k/{i}"), b"v").unwrap();
            let got = s.get_range("k/", i..i + 1, Instant::now()).unwrap();
            assert_eq!(got, vec![b"v".to_vec()]);
        }
        assert_eq!(s.lock().unwrap().ranges.len(), MAX_KEPT);
        // A range made of a prefix that ends in digits still completes when its keys are set.
        let s = Arc::new(MemoryStore::new());
        let reader = {
            let s = s.clone();
            std::thread::spawn(move || {
                s.get_range("g7/", 9..12, Instant::now() + Duration::from_secs(10))
            })
        };
        for i in [11, 9, 10] {
            s.set(&format!("g7/{i}"), format!("{i}").as_bytes())
                .unwrap();
        }
        let got = reader.join().unwrap().unwrap();
        assert_eq!(got, vec![b"9".to_vec(), b"10".to_vec(), b"11".to_vec()]);
    }

    #[test]
    fn a_set_that_would_take_the_store_past_its_bound_is_refused() {
        let s = MemoryStore::new();
        let big = vec![0u8; MAX_BYTES / 4];
        for i in 0..3 {
            s.set(&format!("big{i}"), &big).unwrap();
        }
        let e = s.set("big3", &big).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.to_string().contains("more than its"), "{e}");
        // Overwriting a value counts its new size, not both.
        s.set("big0", &big).unwrap();
        s.set("big0", b"small").unwrap();
        s.set("big3", &big).unwrap();
    }
}
