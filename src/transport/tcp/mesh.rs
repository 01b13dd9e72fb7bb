//! Exchanging addresses through the store, and dialing a peer: how every pair's bootstrap
//! stream begins ([`crate::transport::pairs`] decides when).

use crate::auth::{self, Secret};
use crate::bootstrap::Store;
use crate::error::{Error, ErrorKind, Result};
use crate::transport::{PeerInfo, TransportKind};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Receive buffer asked for on every connection before it connects, so the window scale it
/// negotiates allows it (the kernel may cap it at `net.core.rmem_max`). The send buffer is the
/// link's own choice, by where the peer lives ([`super::send_buffer_for`]).
const RECV_BUFFER: usize = 4 << 20;

/// What [`exchange_addresses`] needs to know.
pub struct AddressOptions<'a> {
    /// This rank.
    pub rank: usize,
    /// Ranks in the group.
    pub size: usize,
    /// Prefix of this group's keys in the store (unique per group instance).
    pub prefix: &'a str,
    /// The local address to listen on and advertise.
    pub bind_ip: IpAddr,
    /// The host name to report in messages.
    pub host: String,
    /// This machine's identity ([`crate::transport::host_key`]): equal keys may share memory.
    pub host_key: String,
    /// Whether this rank allows shared memory with peers of the same host key.
    pub shm_ok: bool,
    /// When to give up.
    pub deadline: Instant,
}

fn tune(socket: &Socket) -> std::io::Result<()> {
    socket.set_recv_buffer_size(RECV_BUFFER)?;
    socket.set_nodelay(true)
}

fn listen(ip: IpAddr, backlog: usize) -> std::io::Result<TcpListener> {
    let addr = SocketAddr::new(ip, 0);
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    tune(&socket)?;
    socket.bind(&SockAddr::from(addr))?;
    socket.listen(backlog.clamp(16, 4096) as i32)?;
    Ok(socket.into())
}

fn connect_to(addr: SocketAddr, deadline: Instant) -> std::io::Result<TcpStream> {
    let mut wait = Duration::from_millis(2);
    loop {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        tune(&socket)?;
        let left = deadline.saturating_duration_since(Instant::now());
        match socket.connect_timeout(&SockAddr::from(addr), left.max(Duration::from_millis(10))) {
            Ok(()) => return Ok(socket.into()),
            Err(e) if Instant::now() + wait < deadline => {
                let _ = e;
                std::thread::sleep(wait);
                wait = (wait * 2).min(Duration::from_millis(200));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Rank `rank`'s entry in the address table, `ADDRESS HOST HOST_KEY SHM`: where it listens and
/// where it lives. `prev` is the entry before it, raw and read: ranks of one host publish one
/// after another, so an entry that goes on as the previous one does (the same host, key and
/// choice of shared memory) takes its names from it, and only its address is read. In a group
/// of hundreds, every rank reads every entry, so this is most of forming's reading.
fn parse_entry(rank: usize, raw: &[u8], prev: Option<(&[u8], &PeerInfo)>) -> Result<PeerInfo> {
    let bad = || {
        let text = String::from_utf8_lossy(raw);
        Error::new(
            ErrorKind::Bootstrap,
            format!("rank {rank} published an unreadable address {text:?} in the store (a different psyne version?)"),
        )
    };
    let (addr_text, lives) = split_entry(raw);
    let addr: SocketAddr = std::str::from_utf8(addr_text)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(bad)?;
    let (host, host_key, shm_ok) = match prev {
        Some((prev_lives, p)) if prev_lives == lives => {
            (p.host.clone(), p.host_key.clone(), p.shm_ok)
        }
        _ => {
            let text = lives.strip_prefix(b" ").ok_or_else(bad)?;
            let text = std::str::from_utf8(text).map_err(|_| bad())?;
            let mut parts = text.split(' ');
            let (Some(host), Some(host_key), Some(shm), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(bad());
            };
            (host.into(), host_key.into(), shm == "1")
        }
    };
    Ok(PeerInfo {
        host,
        addr: Some(addr),
        host_key,
        shm_ok,
        transport: TransportKind::Tcp,
    })
}

/// An entry as its address and the rest (from the space after the address: where it lives).
fn split_entry(raw: &[u8]) -> (&[u8], &[u8]) {
    let space = raw.iter().position(|&b| b == b' ').unwrap_or(raw.len());
    raw.split_at(space)
}

/// Where every rank of a group listens and lives: what exchanging addresses gives, before any
/// pair is connected.
pub struct Exchanged {
    /// This rank's listener (its address is published).
    pub listener: TcpListener,
    /// Where each rank listens and lives (this rank's own entry included), with
    /// [`TransportKind::Tcp`] for every peer until a transport is chosen for the pair.
    pub peers: Vec<PeerInfo>,
}

/// Listens, publishes this rank's address under the options' prefix and reads everyone's in one
/// request. Connecting pairs is [`dial`]'s and the listener's owner's business.
pub fn exchange_addresses(store: &dyn Store, opts: &AddressOptions<'_>) -> Result<Exchanged> {
    let (listener, me) = listen_and_publish(store, opts)?;
    let mut peers = read_addresses(store, opts)?;
    peers[opts.rank] = me;
    Ok(Exchanged { listener, peers })
}

/// Listens on the options' address and publishes it (with host, host key and whether this rank
/// allows shared memory) under the group's prefix; returns the listener and this rank's entry.
fn listen_and_publish(
    store: &dyn Store,
    opts: &AddressOptions<'_>,
) -> Result<(TcpListener, PeerInfo)> {
    let (rank, bind_ip) = (opts.rank, opts.bind_ip);
    let listener = listen(bind_ip, opts.size).map_err(|e| {
        Error::io(
            format!(
                "rank {rank}: listening on {bind_ip} (set PSY_ADDR to an address of this host)"
            ),
            e,
        )
    })?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::io("reading the listener's address", e))?;
    let (host, host_key) = (&opts.host, &opts.host_key);
    store.set(
        &format!("{}/addr/{rank}", opts.prefix),
        format!("{local} {host} {host_key} {}", u8::from(opts.shm_ok)).as_bytes(),
    )?;
    let me = PeerInfo {
        host: host.as_str().into(),
        addr: Some(local),
        host_key: host_key.as_str().into(),
        shm_ok: opts.shm_ok,
        transport: TransportKind::Local,
    };
    Ok((listener, me))
}

/// Waits for every rank (this one too) to publish its address, and reads them all in one
/// request ([`Store::get_range`]): every rank's address and where it lives, by rank.
fn read_addresses(store: &dyn Store, opts: &AddressOptions<'_>) -> Result<Vec<PeerInfo>> {
    let rank = opts.rank;
    let prefix = format!("{}/addr/", opts.prefix);
    let raw = store
        .get_range(&prefix, 0..opts.size, opts.deadline)
        .map_err(|e| {
            e.context(format!(
                "rank {rank}: waiting for every rank to publish its address"
            ))
        })?;
    parse_table(&raw)
}

/// Every rank's entry of the address table, read: where each rank listens and lives.
fn parse_table(raw: &[Vec<u8>]) -> Result<Vec<PeerInfo>> {
    let mut peers: Vec<PeerInfo> = Vec::with_capacity(raw.len());
    for (peer, entry) in raw.iter().enumerate() {
        let prev = peer
            .checked_sub(1)
            .and_then(|p| Some((split_entry(&raw[p]).1, peers.get(p)?)));
        peers.push(parse_entry(peer, entry, prev)?);
    }
    Ok(peers)
}

/// Connects this rank (`rank`) to `peer` (listening and living as `info` says) and proves the
/// job secret; a connection refused, or pushed out by a busy listener, is retried (with
/// backoff) until `deadline`.
pub fn dial(
    rank: usize,
    secret: &Secret,
    peer: usize,
    info: &PeerInfo,
    deadline: Instant,
) -> Result<TcpStream> {
    let addr = info.addr.ok_or_else(|| {
        Error::new(
            ErrorKind::Bootstrap,
            format!(
                "rank {rank}: internal error: rank {peer} ({info}) has no address to connect to"
            ),
        )
    })?;
    let dial_once = || {
        connect_to(addr, deadline).map_err(|e| {
            Error::new(
                ErrorKind::PeerLost,
                format!("rank {rank}: cannot connect to rank {peer} ({info}): {e}; did it exit, or is that address unreachable from this host? (PSY_ADDR sets what a rank advertises)"),
            )
            .about_peer(peer)
        })
    };
    auth::connect_retrying(dial_once, secret, rank as u64, deadline)
        .map_err(|e| e.context(format!("rank {rank}: connecting to rank {peer} ({info})")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn table(entries: &[&[u8]]) -> Result<Vec<PeerInfo>> {
        parse_table(&entries.iter().map(|e| e.to_vec()).collect::<Vec<_>>())
    }

    #[test]
    fn entries_of_one_host_share_its_names_and_keep_their_own_addresses() {
        let peers = table(&[
            b"127.0.0.1:5000 a key-a 1",
            b"127.0.0.1:5001 a key-a 1",
            b"[::1]:6000 b key-b 0",
            b"127.0.0.1:5002 a key-a 1",
        ])
        .unwrap();
        let want: Vec<SocketAddr> = [
            "127.0.0.1:5000",
            "127.0.0.1:5001",
            "[::1]:6000",
            "127.0.0.1:5002",
        ]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
        assert_eq!(peers.len(), want.len());
        for (peer, addr) in peers.iter().zip(&want) {
            assert_eq!(peer.addr, Some(*addr));
            assert_eq!(peer.transport, TransportKind::Tcp);
        }
        let names = |p: &PeerInfo| (p.host.to_string(), p.host_key.to_string(), p.shm_ok);
        assert_eq!(names(&peers[0]), ("a".into(), "key-a".into(), true));
        assert_eq!(names(&peers[2]), ("b".into(), "key-b".into(), false));
        assert_eq!(names(&peers[3]), names(&peers[0]));
        assert!(
            Arc::ptr_eq(&peers[0].host, &peers[1].host),
            "shared with the one before"
        );
        assert!(Arc::ptr_eq(&peers[0].host_key, &peers[1].host_key));
        assert!(!Arc::ptr_eq(&peers[2].host, &peers[3].host));
        assert_eq!(peers[3].to_string(), "host a at 127.0.0.1:5002, tcp");
    }

    #[test]
    fn an_unreadable_entry_is_an_error_naming_its_rank() {
        let good: &[u8] = b"127.0.0.1:5000 a key-a 1";
        for bad in [
            &b"127.0.0.1:5001"[..],
            b"127.0.0.1:5001 ",
            b"nowhere a key-a 1",
            b"127.0.0.1:5001 a key-a",
            b"127.0.0.1:5001 a key-a 1 more",
            b"127.0.0.1:5001 a \xff 1",
            b"\xff a key-a 1",
            b"",
        ] {
            let e = table(&[good, bad]).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Bootstrap);
            assert!(
                e.message()
                    .contains("rank 1 published an unreadable address"),
                "{e}"
            );
        }
    }
}
