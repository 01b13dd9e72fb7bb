//! The RDMA transport's knobs, read from the environment once per group (into
//! [`crate::transport::TransportTunables::rdma`]): which adapter and port, which GID, how large
//! the per-peer buffers are.
//!
//! | variable | meaning |
//! |---|---|
//! | `PSY_RDMA_DEVICE` | adapter name (`mlx5_0`); default: the first with an active port |
//! | `PSY_RDMA_PORT` | port number on it (from 1); default: its first active port |
//! | `PSY_RDMA_GID_INDEX` | GID table index (RoCE); default: the first RoCE v2 GID of the port, else 0 |
//! | `PSY_RDMA_RING_BYTES` | bytes of each peer's receive ring (power of two, default 4 MiB) |
//! | `PSY_RDMA_ZERO_COPY_BYTES` | send slices at least this long straight from user memory (off) |

use crate::error::{Error, Result};

/// `PSY_RDMA_DEVICE`
pub const DEVICE: &str = "PSY_RDMA_DEVICE";
/// `PSY_RDMA_PORT`
pub const PORT: &str = "PSY_RDMA_PORT";
/// `PSY_RDMA_GID_INDEX`
pub const GID_INDEX: &str = "PSY_RDMA_GID_INDEX";
/// `PSY_RDMA_RING_BYTES`
pub const RING_BYTES: &str = "PSY_RDMA_RING_BYTES";
/// `PSY_RDMA_ZERO_COPY_BYTES`
pub const ZERO_COPY_BYTES: &str = "PSY_RDMA_ZERO_COPY_BYTES";

/// Default bytes of a receive ring (and of the matching send staging area).
pub const DEFAULT_RING_BYTES: usize = 4 << 20;
/// Messages up to this many bytes go by send/receive into a pre-posted slot; longer ones by RDMA
/// write with immediate into the peer's ring.
pub const EAGER_BYTES: usize = 8 << 10;
/// Receive work requests kept posted per peer (and eager slots on each side).
pub const RECV_DEPTH: usize = 64;
/// Largest single RDMA write.
pub const MAX_CHUNK: usize = 512 << 10;

/// Where and how to run the transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaConfig {
    /// The adapter to use, by name; `None`: the first with an active port.
    pub device: Option<String>,
    /// The port to use; `None`: the first active one.
    pub port: Option<u8>,
    /// The GID index; `None`: chosen from the port's table.
    pub gid_index: Option<u32>,
    /// Bytes of each receive ring (a power of two).
    pub ring_bytes: usize,
    /// Slices at least this long are sent from user memory through the registration cache.
    pub zero_copy_bytes: Option<usize>,
}

impl Default for RdmaConfig {
    fn default() -> Self {
        RdmaConfig {
            device: None,
            port: None,
            gid_index: None,
            ring_bytes: DEFAULT_RING_BYTES,
            zero_copy_bytes: None,
        }
    }
}

impl RdmaConfig {
    /// Reads the variables through `get` (the environment in production, a map in tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<RdmaConfig> {
        let text = |name: &str| {
            get(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let number = |name: &str| -> Result<Option<u64>> {
            match text(name) {
                None => Ok(None),
                Some(v) => v.parse::<u64>().map(Some).map_err(|_| {
                    Error::config(format!("{name}={v:?} is not a non-negative integer"))
                }),
            }
        };
        let port = match number(PORT)? {
            None => None,
            Some(p) if (1..=255).contains(&p) => Some(p as u8),
            Some(p) => {
                return Err(Error::config(format!(
                    "{PORT}={p}: ports are numbered from 1 to 255 (see `ibv_devinfo`)"
                )))
            }
        };
        let gid_index = match number(GID_INDEX)? {
            None => None,
            Some(g) => Some(u32::try_from(g).map_err(|_| {
                Error::config(format!("{GID_INDEX}={g} is too large (see `show_gids`)"))
            })?),
        };
        let ring_bytes = match number(RING_BYTES)? {
            None => DEFAULT_RING_BYTES,
            Some(b) if b.is_power_of_two() && ((64 << 10)..=(1 << 30)).contains(&b) => b as usize,
            Some(b) => {
                return Err(Error::config(format!(
                    "{RING_BYTES}={b}: use a power of two from 64 KiB to 1 GiB"
                )))
            }
        };
        let zero_copy_bytes = match number(ZERO_COPY_BYTES)? {
            None | Some(0) => None,
            Some(b) => Some(b as usize),
        };
        Ok(RdmaConfig {
            device: text(DEVICE),
            port,
            gid_index,
            ring_bytes,
            zero_copy_bytes,
        })
    }

    /// Reads the variables from the environment.
    pub fn from_env() -> Result<RdmaConfig> {
        RdmaConfig::from_lookup(|name| std::env::var(name).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<RdmaConfig> {
        RdmaConfig::from_lookup(crate::transport::lookup_in(pairs))
    }

    #[test]
    fn nothing_set_is_the_default() {
        assert_eq!(parse(&[]).unwrap(), RdmaConfig::default());
    }

    #[test]
    fn every_variable_is_read() {
        let c = parse(&[
            (DEVICE, " mlx5_1 "),
            (PORT, "2"),
            (GID_INDEX, "3"),
            (RING_BYTES, "1048576"),
            (ZERO_COPY_BYTES, "65536"),
        ])
        .unwrap();
        assert_eq!(c.device.as_deref(), Some("mlx5_1"));
        assert_eq!((c.port, c.gid_index), (Some(2), Some(3)));
        assert_eq!((c.ring_bytes, c.zero_copy_bytes), (1 << 20, Some(65536)));
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (k, v) in [
            (PORT, "0"),
            (PORT, "x"),
            (PORT, "256"),
            (RING_BYTES, "1000"),
            (RING_BYTES, "1024"),
            (GID_INDEX, "-1"),
        ] {
            let e = parse(&[(k, v)]).unwrap_err();
            assert!(e.to_string().contains(k), "{k}={v}: {e}");
        }
    }
}
