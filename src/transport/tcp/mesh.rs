//! Wiring the full mesh of TCP links through the store.

use crate::auth::{self, Secret};
use crate::bootstrap::Store;
use crate::error::{Error, ErrorKind, Result};
use crate::transport::PeerInfo;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Socket buffer size asked for on every link (the kernel may cap it at `net.core.*mem_max`).
const SOCKET_BUFFER: usize = 4 << 20;

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

/// The authenticated connections of a rank, indexed by peer rank (`None` for itself), in blocking
/// mode, and where each peer lives.
pub type Mesh = (Vec<Option<TcpStream>>, Vec<PeerInfo>);

fn tune(socket: &Socket) -> std::io::Result<()> {
    socket.set_recv_buffer_size(SOCKET_BUFFER)?;
    socket.set_send_buffer_size(SOCKET_BUFFER)?;
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
            transport: "tcp",
        },
    ))
}

/// Connects this rank to every other rank of the group: listens, publishes its address under
/// `prefix`, reads everyone's, connects to lower ranks and accepts higher ones. Connections that
/// fail the handshake are logged to stderr and dropped; wiring goes on until `deadline`.
pub fn connect_mesh(store: &dyn Store, opts: MeshOptions<'_>) -> Result<Mesh> {
    let MeshOptions {
        rank,
        size,
        prefix,
        secret,
        bind_ip,
        host,
        host_key,
        shm_ok,
        deadline,
    } = opts;
    let listener = listen(bind_ip, size).map_err(|e| {
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
    store.set(
        &format!("{prefix}/addr/{rank}"),
        format!("{local} {host} {host_key} {}", u8::from(shm_ok)).as_bytes(),
    )?;

    let expected = size - rank - 1;
    let acceptor = {
        let secret = secret.clone();
        std::thread::Builder::new()
            .name("psyne-accept".into())
            .spawn(move || accept_all(listener, rank, size, expected, &secret, deadline))
            .map_err(|e| Error::io("starting the accept thread", e))?
    };

    let mut links: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
    let mut peers = vec![
        PeerInfo {
            host: host.clone(),
            addr: local.to_string(),
            host_key: host_key.clone(),
            shm_ok,
            transport: "self",
        };
        size
    ];
    for (peer, info) in peers.iter_mut().enumerate() {
        if peer == rank {
            continue;
        }
        let raw = store
            .get(&format!("{prefix}/addr/{peer}"), deadline)
            .map_err(|e| {
                e.context(format!(
                    "rank {rank}: waiting for rank {peer} to publish its address"
                ))
            })?;
        let (addr, found) = parse_entry(peer, &raw)?;
        *info = found;
        if peer < rank {
            let fail = |e: std::io::Error| {
                Error::new(
                    ErrorKind::Bootstrap,
                    format!("rank {rank}: cannot connect to rank {peer} ({info}): {e}; is that address reachable from this host? (PSY_ADDR sets what a rank advertises)"),
                )
            };
            let mut stream = connect_to(addr, deadline).map_err(fail)?;
            auth::connect(&mut stream, secret, rank as u64, deadline).map_err(|e| {
                e.context(format!("rank {rank}: connecting to rank {peer} ({info})"))
            })?;
            links[peer] = Some(stream);
        }
    }
    let accepted = acceptor
        .join()
        .map_err(|_| Error::new(ErrorKind::Bootstrap, "the accept thread panicked"))??;
    for (peer, stream) in accepted {
        links[peer] = Some(stream);
    }
    Ok((links, peers))
}

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
    while got.len() < expected {
        let (mut stream, from) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    let have: Vec<usize> = got.iter().map(|(r, _)| *r).collect();
                    let missing: Vec<usize> =
                        (rank + 1..size).filter(|r| !have.contains(r)).collect();
                    return Err(Error::new(
                        ErrorKind::Timeout,
                        format!("rank {rank}: ranks {missing:?} never connected (did they start? raise PSY_TIMEOUT if start-up is slow)"),
                    ));
                }
                wait_readable(listener.as_raw_fd(), left.min(Duration::from_millis(100)));
                continue;
            }
            Err(e) => return Err(Error::io(format!("rank {rank}: accepting a connection"), e)),
        };
        let _ = stream.set_nonblocking(false);
        let hs_deadline = deadline.min(Instant::now() + Duration::from_secs(10));
        match auth::accept(&mut stream, secret, hs_deadline) {
            Ok(claim) => {
                let claim = claim as usize;
                if claim <= rank || claim >= size || got.iter().any(|(r, _)| *r == claim) {
                    eprintln!("psyne: rank {rank}: rejected a connection from {from} claiming to be rank {claim}");
                    continue;
                }
                got.push((claim, stream));
            }
            Err(e) => eprintln!("psyne: rank {rank}: rejected a connection from {from}: {e}"),
        }
    }
    Ok(got)
}

/// Blocks until `fd` is readable or `timeout` passes.
pub(crate) fn wait_readable(fd: i32, timeout: Duration) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `p` is a valid pollfd for the duration of the call and we pass a count of 1.
    unsafe {
        libc::poll(&mut p, 1, timeout.as_millis().min(i32::MAX as u128) as i32);
    }
}
