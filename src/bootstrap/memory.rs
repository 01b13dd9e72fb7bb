//! A store in one process's memory: the in-tree fake for tests, and the table behind
//! [`super::StoreServer`].

use super::Store;
use crate::error::{Error, ErrorKind, Result};
use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use std::time::Instant;

/// A [`Store`] in memory; share it between threads with an `Arc`.
#[derive(Default)]
pub struct MemoryStore {
    map: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, HashMap<String, Vec<u8>>>> {
        self.map.lock().map_err(|_| {
            Error::new(
                ErrorKind::Bootstrap,
                "the store's lock was poisoned by a panic",
            )
        })
    }
}

impl Store for MemoryStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.lock()?.insert(key.to_string(), value.to_vec());
        self.changed.notify_all();
        Ok(())
    }

    fn get(&self, key: &str, deadline: Instant) -> Result<Vec<u8>> {
        let mut map = self.lock()?;
        loop {
            if let Some(v) = map.get(key) {
                return Ok(v.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!("store key `{key}` was not set in time: a rank did not start or is stuck before joining (raise PSY_TIMEOUT if start-up is slow)"),
                ));
            }
            map = self
                .changed
                .wait_timeout(map, deadline - now)
                .map_err(|_| {
                    Error::new(
                        ErrorKind::Bootstrap,
                        "the store's lock was poisoned by a panic",
                    )
                })?
                .0;
        }
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let mut map = self.lock()?;
        let old = map
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
        map.insert(key.to_string(), new.to_string().into_bytes());
        self.changed.notify_all();
        Ok(new)
    }

    fn set_once(&self, key: &str, value: &[u8]) -> Result<Vec<u8>> {
        let mut map = self.lock()?;
        let held = map
            .entry(key.to_string())
            .or_insert_with(|| value.to_vec())
            .clone();
        self.changed.notify_all();
        Ok(held)
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
}
