//! Wiring the full mesh of TCP links through the store.

use crate::auth::{self, Secret};
use crate::bootstrap::Store;
use crate::error::{Error, ErrorKind, Result};
use crate::handshakes::{Handshakes, Log};
use crate::transport::{PeerInfo, TransportKind};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Receive buffer asked for on every connection before it connects, so the window scale it
/// negotiates allows it (the kernel may cap it at `net.core.rmem_max`). The send buffer is the
/// link's own choice, by where the peer lives ([`super::send_buffer_for`]).
const RECV_BUFFER: usize = 4 << 20;

/// What [`connect_mesh`] needs to know.
pub struct MeshOptions<'a> {
    /// This rank.
    pub rank: usize,
    /// Ranks in the group.
    pub size: usize,
    /// Prefix of this group's keys in the store (unique per group instance).
    pub prefix: &'a str,
    /// The job secret every link proves.
    pub secret: &'a Secret,
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

/// The authenticated connections of a rank, in blocking mode, and where each peer lives: what
/// exchanging addresses gives, before any transport is chosen.
pub struct Mesh {
    /// The bootstrap stream to each peer, by rank (`None` for this rank itself).
    pub streams: Vec<Option<TcpStream>>,
    /// Where each rank lives (this rank's own entry included), with
    /// [`TransportKind::Tcp`] for every peer until a transport upgrades its stream.
    pub peers: Vec<PeerInfo>,
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

fn parse_entry(rank: usize, raw: &[u8]) -> Result<(SocketAddr, PeerInfo)> {
    let text = String::from_utf8_lossy(raw);
    let bad = || {
        Error::new(
            ErrorKind::Bootstrap,
            format!("rank {rank} published an unreadable address {text:?} in the store (a different psyne version?)"),
        )
    };
    let parts: Vec<&str> = text.split(' ').collect();
    let [addr_text, host, host_key, shm] = parts[..] else {
        return Err(bad());
    };
    let addr = addr_text.parse().map_err(|_| bad())?;
    Ok((
        addr,
        PeerInfo {
            host: host.to_string(),
            addr: addr_text.to_string(),
            host_key: host_key.to_string(),
            shm_ok: shm == "1",
            transport: TransportKind::Tcp,
        },
    ))
}

/// Connects this rank to every other rank of the group: listens, publishes its address under
/// `prefix`, reads everyone's, connects to lower ranks (the nearest first) and accepts higher
/// ones. Connections that fail the handshake are logged to stderr and dropped; wiring goes on
/// until `deadline`.
pub fn connect_mesh(store: &dyn Store, opts: MeshOptions<'_>) -> Result<Mesh> {
    let (rank, size, deadline) = (opts.rank, opts.size, opts.deadline);
    let (listener, me) = listen_and_publish(store, &opts)?;
    let acceptor = {
        let secret = opts.secret.clone();
        let expected = size - rank - 1;
        std::thread::Builder::new()
            .name("psyne-accept".into())
            .spawn(move || accept_all(listener, rank, size, expected, &secret, deadline))
            .map_err(|e| Error::io("starting the accept thread", e))?
    };
    let mut streams: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
    let (addresses, mut peers): (Vec<SocketAddr>, Vec<PeerInfo>) =
        read_addresses(store, &opts)?.into_iter().unzip();
    peers[rank] = me;
    // Nearest lower rank first: at any moment each rank is dialled by about one other, where in
    // rank order every rank would dial rank 0 at once (and a listener holds at most
    // `handshakes::MAX_PENDING` unproven connections: 256 ranks on 2 cores overflowed it).
    for peer in (0..rank).rev() {
        streams[peer] = Some(connect_lower(&opts, peer, &peers[peer], addresses[peer])?);
    }
    let accepted = acceptor
        .join()
        .map_err(|_| Error::new(ErrorKind::Bootstrap, "the accept thread panicked"))??;
    for (peer, stream) in accepted {
        streams[peer] = Some(stream);
    }
    Ok(Mesh { streams, peers })
}

/// Listens on the options' address and publishes it (with host, host key and whether this rank
/// allows shared memory) under the group's prefix; returns the listener and this rank's entry.
fn listen_and_publish(
    store: &dyn Store,
    opts: &MeshOptions<'_>,
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
        host: host.clone(),
        addr: local.to_string(),
        host_key: host_key.clone(),
        shm_ok: opts.shm_ok,
        transport: TransportKind::Local,
    };
    Ok((listener, me))
}

/// Waits for every rank (this one too) to publish its address, and reads them all in one
/// request ([`Store::get_many`]).
fn read_addresses(
    store: &dyn Store,
    opts: &MeshOptions<'_>,
) -> Result<Vec<(SocketAddr, PeerInfo)>> {
    let rank = opts.rank;
    let keys: Vec<String> = (0..opts.size)
        .map(|peer| format!("{}/addr/{peer}", opts.prefix))
        .collect();
    let raw = store.get_many(&keys, opts.deadline).map_err(|e| {
        e.context(format!(
            "rank {rank}: waiting for every rank to publish its address"
        ))
    })?;
    raw.iter()
        .enumerate()
        .map(|(peer, raw)| parse_entry(peer, raw))
        .collect()
}

/// Connects to a lower rank and proves the job secret.
fn connect_lower(
    opts: &MeshOptions<'_>,
    peer: usize,
    info: &PeerInfo,
    addr: SocketAddr,
) -> Result<TcpStream> {
    let rank = opts.rank;
    let mut stream = connect_to(addr, opts.deadline).map_err(|e| {
        Error::new(
            ErrorKind::Bootstrap,
            format!("rank {rank}: cannot connect to rank {peer} ({info}): {e}; is that address reachable from this host? (PSY_ADDR sets what a rank advertises)"),
        )
    })?;
    auth::connect(&mut stream, opts.secret, rank as u64, opts.deadline)
        .map_err(|e| e.context(format!("rank {rank}: connecting to rank {peer} ({info})")))?;
    Ok(stream)
}

/// Accepts the `expected` higher ranks until `deadline`, with every handshake concurrent (see
/// [`crate::handshakes`]): strangers are refused without delaying the peers.
fn accept_all(
    listener: TcpListener,
    rank: usize,
    size: usize,
    expected: usize,
    secret: &Secret,
    deadline: Instant,
) -> Result<Vec<(usize, TcpStream)>> {
    let mut got: Vec<(usize, TcpStream)> = Vec::new();
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::io("configuring the listener", e))?;
    let log: Log = Arc::new(|line: &str| crate::report::warn(line));
    let mut handshakes = Handshakes::new(secret.clone(), format!("rank {rank}"), log);
    while got.len() < expected {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            handshakes.finish();
            return Err(never_connected(rank, size, &got, handshakes.refused()));
        }
        let step = handshakes.step(&listener, left.min(Duration::from_millis(100)), deadline);
        for proven in step {
            let claim = proven.claim as usize;
            if claim <= rank || claim >= size || got.iter().any(|(r, _)| *r == claim) {
                let why = format!("it claims to be rank {claim}, which this rank does not expect");
                handshakes.refuse(proven.from, &why);
                continue;
            }
            got.push((claim, proven.stream));
        }
    }
    handshakes.finish();
    Ok(got)
}

/// The error of a rank whose higher ranks did not all connect by the deadline.
fn never_connected(rank: usize, size: usize, got: &[(usize, TcpStream)], refused: usize) -> Error {
    let missing: Vec<usize> = (rank + 1..size)
        .filter(|r| !got.iter().any(|(g, _)| g == r))
        .collect();
    let strangers = if refused > 0 {
        format!(
            "; meanwhile {refused} connection(s) that did not prove the job's secret were refused"
        )
    } else {
        String::new()
    };
    Error::new(
        ErrorKind::Timeout,
        format!("rank {rank}: ranks {missing:?} never connected (did they start? raise PSY_TIMEOUT if start-up is slow){strangers}"),
    )
}
