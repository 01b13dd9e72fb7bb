//! The TCP transport: one connection per pair of ranks, `TCP_NODELAY`, send buffers sized by where
//! the peer lives ([`send_buffer_for`]), and
//! the [`crate::auth`] handshake before anything else is read.
//!
//! Addresses ([`exchange_addresses`]): every rank listens and publishes `ip:port` in the store,
//! and reads everyone's in one request. A pair's bootstrap stream, which the other transports
//! upgrade, is dialed by the higher rank ([`dial`]) and accepted by the lower one when the pair
//! is first needed, or when the group forms ([`crate::transport::pairs`]). In the transport table
//! ([`crate::transport::table`]) TCP is the last entry: it can connect every pair, and takes the
//! pairs no other transport could upgrade.

mod link;
mod mesh;

pub(crate) use link::peer_closed;
pub use link::{parse_send_buffer, send_buffer_for, TcpLink, SEND_BUFFER_VAR};
pub use mesh::{dial, exchange_addresses, AddressOptions, Exchanged};

use crate::error::{Error, Result};
use crate::transport::table::{Connected, Formation, Pair, Transport};
use crate::transport::TransportKind;

/// The TCP entry of the transport table.
pub(crate) struct Tcp;

/// The TCP entry of [`crate::transport::table::TABLE`].
pub(crate) fn entry() -> Box<dyn Transport> {
    Box::new(Tcp)
}

impl Transport for Tcp {
    fn kind(&self) -> TransportKind {
        TransportKind::Tcp
    }

    fn can_connect(&mut self, _: &Formation<'_>, _: usize) -> Result<bool> {
        Ok(true)
    }

    fn connect(&mut self, f: &Formation<'_>, pairs: Vec<Pair>) -> Result<Connected> {
        let mut connected = Connected::default();
        for (j, stream) in pairs {
            let same_host = f.peers[j].host_key == f.me().host_key;
            let buffer = send_buffer_for(same_host, f.tunables.tcp_send_buffer);
            let link =
                TcpLink::new(stream, buffer).map_err(|e| Error::io("configuring a link", e))?;
            connected.links.push((j, Box::new(link)));
        }
        Ok(connected)
    }
}
