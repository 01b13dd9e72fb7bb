//! Moving the TCP connections between ranks of one host onto shared memory.

use super::cma::{self, offsets, SideInfo};
use super::link::ShmLink;
use super::ring::Ring;
use super::segment::{self, Segment};
use crate::auth::with_deadline;
use crate::error::{Error, ErrorKind, Result};
use crate::transport::tcp::TcpLink;
use crate::transport::{Link, PeerInfo, TransportPolicy};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Instant;

/// Identifies a machine: peers with equal keys can share memory ([`crate::transport::host_key`]).
pub type HostKey = String;

/// What the upgrade needs to know.
#[derive(Debug, Clone)]
pub struct ShmOptions<'a> {
    /// `PSY_TRANSPORT`.
    pub policy: TransportPolicy,
    /// The job id (part of every segment name, so jobs never meet).
    pub job_id: &'a str,
    /// The group's key prefix (part of every segment name, so groups never meet).
    pub group: &'a str,
    /// Bytes of each ring (a power of two).
    pub ring_bytes: usize,
    /// When to give up.
    pub deadline: Instant,
}

const MAGIC: &[u8; 8] = b"PSYSHM01";
const NAME_FIELD: usize = 96;
const OFFER_LEN: usize = 8 + NAME_FIELD + 16 + 8;
const PAGE: usize = 4096;

fn round_up(n: usize) -> usize {
    n.div_ceil(PAGE) * PAGE
}

/// Segment layout: a header page (magic, nonce), then ring A (lower rank → higher), then ring B.
fn layout(ring_bytes: usize) -> (usize, usize, usize) {
    let ring = round_up(Ring::bytes_needed(ring_bytes));
    (PAGE, PAGE + ring, PAGE + 2 * ring)
}

/// The ring size for a host with `local_ranks` ranks, unless `PSY_SHM_RING_BYTES` says otherwise:
/// 1 MiB per direction, less when many ranks share the host (every pair has its own rings).
pub fn default_ring_bytes(local_ranks: usize) -> usize {
    if let Some(v) = std::env::var("PSY_SHM_RING_BYTES")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        return v.clamp(4096, 1 << 30).next_power_of_two();
    }
    match local_ranks {
        0..=8 => 1 << 20,
        9..=16 => 512 << 10,
        _ => 256 << 10,
    }
}

fn shares_memory(me: &PeerInfo, other: &PeerInfo, policy: TransportPolicy) -> bool {
    policy != TransportPolicy::Tcp && me.shm_ok && other.shm_ok && me.host_key == other.host_key
}

/// Turns every connection into a link: shared memory for peers on this host (when both allow it),
/// TCP for the others. Updates `peers[..].transport`. Every rank of the group calls this with the
/// same options; the exchange cannot deadlock (offers and answers are small and buffered).
pub fn upgrade_local_links(
    rank: usize,
    streams: Vec<Option<TcpStream>>,
    peers: &mut [PeerInfo],
    opts: &ShmOptions<'_>,
) -> Result<Vec<Option<Box<dyn Link>>>> {
    let size = streams.len();
    let mut streams = streams;
    let local: Vec<bool> = (0..size)
        .map(|j| j != rank && shares_memory(&peers[rank], &peers[j], opts.policy))
        .collect();
    let (a_at, b_at, len) = layout(opts.ring_bytes);
    let io = |what: String| {
        move |e: std::io::Error| Error::new(ErrorKind::Bootstrap, format!("{what}: {e}"))
    };

    // 1. Offer a segment to every higher local peer.
    let mut offered: Vec<Option<Segment>> = (0..size).map(|_| None).collect();
    for j in (rank + 1..size).filter(|&j| local[j]) {
        let name = segment::name_for(opts.job_id, opts.group, rank, j);
        let mut offer = vec![0u8; OFFER_LEN];
        offer[..8].copy_from_slice(MAGIC);
        match create(&name, len, a_at, b_at, opts.ring_bytes) {
            Ok((seg, nonce)) => {
                let n = name.len().min(NAME_FIELD);
                offer[8..8 + n].copy_from_slice(&name.as_bytes()[..n]);
                offer[8 + NAME_FIELD..8 + NAME_FIELD + 16].copy_from_slice(&nonce);
                offer[OFFER_LEN - 8..].copy_from_slice(&(opts.ring_bytes as u64).to_le_bytes());
                offered[j] = Some(seg);
            }
            Err(e) if opts.policy == TransportPolicy::Shm => {
                return Err(Error::new(ErrorKind::Bootstrap, format!("rank {rank}: cannot create shared memory for rank {j} ({e}); PSY_TRANSPORT=shm requires it (is /dev/shm mounted and writable?)")));
            }
            Err(e) => eprintln!(
                "psyne: rank {rank}: shared memory with rank {j} unavailable ({e}); using TCP"
            ),
        }
        let stream = streams[j]
            .as_mut()
            .ok_or_else(|| Error::new(ErrorKind::Bootstrap, "missing connection"))?;
        with_deadline(stream, opts.deadline, |s| s.write_all(&offer)).map_err(io(format!(
            "rank {rank}: offering shared memory to rank {j}"
        )))?;
    }

    // 2. Answer every lower local peer's offer.
    let mut links: Vec<Option<Box<dyn Link>>> = (0..size).map(|_| None).collect();
    for j in (0..rank).filter(|&j| local[j]) {
        let stream = streams[j]
            .as_mut()
            .ok_or_else(|| Error::new(ErrorKind::Bootstrap, "missing connection"))?;
        let mut offer = vec![0u8; OFFER_LEN];
        with_deadline(stream, opts.deadline, |s| s.read_exact(&mut offer)).map_err(io(format!(
            "rank {rank}: waiting for rank {j}'s shared-memory offer"
        )))?;
        let accepted = accept(&offer, len, a_at, b_at);
        if let Ok((seg, _, _)) = &accepted {
            introduce(seg, false);
        }
        let reply: &[u8; 8] = if accepted.is_ok() {
            b"SHMOK\0\0\0"
        } else {
            b"SHMNO\0\0\0"
        };
        with_deadline(stream, opts.deadline, |s| s.write_all(reply)).map_err(io(format!(
            "rank {rank}: answering rank {j}'s shared-memory offer"
        )))?;
        match accepted {
            Ok((seg, to_lower, from_lower)) => {
                let tcp = streams[j]
                    .take()
                    .ok_or_else(|| Error::new(ErrorKind::Bootstrap, "missing connection"))?;
                let link = ShmLink::new(seg, to_lower, from_lower, tcp, false)
                    .map_err(|e| Error::io("configuring a shared-memory link", e))?;
                links[j] = Some(Box::new(link));
                peers[j].transport = "shm";
            }
            Err(e) if opts.policy == TransportPolicy::Shm => {
                return Err(Error::new(ErrorKind::Bootstrap, format!("rank {rank}: cannot use rank {j}'s shared memory ({e}); PSY_TRANSPORT=shm requires it")));
            }
            Err(e) => eprintln!(
                "psyne: rank {rank}: shared memory with rank {j} unavailable ({e}); using TCP"
            ),
        }
    }

    // 3. Collect the answers of the higher peers; unlink every name at once.
    for j in (rank + 1..size).filter(|&j| local[j]) {
        let seg = offered[j].take();
        let stream = streams[j]
            .as_mut()
            .ok_or_else(|| Error::new(ErrorKind::Bootstrap, "missing connection"))?;
        let mut reply = [0u8; 8];
        let answer = with_deadline(stream, opts.deadline, |s| s.read_exact(&mut reply));
        if let Some(seg) = &seg {
            let _ = segment::unlink(seg.name());
        }
        answer.map_err(io(format!(
            "rank {rank}: waiting for rank {j} to map shared memory"
        )))?;
        let Some(seg) = seg else { continue }; // this rank offered nothing; both keep TCP
        if &reply != b"SHMOK\0\0\0" {
            if opts.policy == TransportPolicy::Shm {
                return Err(Error::new(ErrorKind::Bootstrap, format!("rank {rank}: rank {j} could not map the shared memory; PSY_TRANSPORT=shm requires it")));
            }
            continue; // rank j reported why; both keep TCP
        }
        // SAFETY: the segment is `len` bytes, page aligned; rings A and B were initialised at
        // these offsets by `create` and lie inside it.
        let (to_higher, from_higher) = unsafe {
            (
                Ring::attach(seg.as_ptr().add(a_at), opts.ring_bytes),
                Ring::attach(seg.as_ptr().add(b_at), opts.ring_bytes),
            )
        };
        let (to_higher, from_higher) = (
            to_higher.map_err(|e| Error::new(ErrorKind::Bootstrap, e))?,
            from_higher.map_err(|e| Error::new(ErrorKind::Bootstrap, e))?,
        );
        let tcp = streams[j]
            .take()
            .ok_or_else(|| Error::new(ErrorKind::Bootstrap, "missing connection"))?;
        introduce(&seg, true);
        let link = ShmLink::new(seg, to_higher, from_higher, tcp, true)
            .map_err(|e| Error::io("configuring a shared-memory link", e))?;
        links[j] = Some(Box::new(link));
        peers[j].transport = "shm";
    }

    // Everything else stays on TCP.
    for (j, stream) in streams.into_iter().enumerate() {
        if let Some(stream) = stream {
            links[j] = Some(Box::new(
                TcpLink::new(stream).map_err(|e| Error::io("configuring a link", e))?,
            ));
            peers[j].transport = "tcp";
        }
    }
    peers[rank].transport = "self";
    Ok(links)
}

/// The word a peer reads from this process to check that it may ([`cma::probe`]).
static PROBE: u64 = cma::PROBE_WORD;

/// The side info at `off` in the segment's header page.
fn side(seg: &Segment, off: usize) -> &SideInfo {
    // SAFETY: `off` is a 64-byte aligned offset inside the first page of the mapping (every
    // segment is at least a page long: `layout` puts the rings after it), which lives as long as
    // the borrow of `seg`; `SideInfo` holds only atomics, valid for any bytes.
    unsafe { &*seg.as_ptr().add(off).cast::<SideInfo>() }
}

/// Writes this side's process id and probe address into the header page, then, if the peer's are
/// there (always for the higher rank; for the lower rank once the higher answered), checks that
/// this process can read the peer's memory and says so, so the peer may send large slices by
/// pull descriptor. A failed check only costs speed: the rings carry everything.
fn introduce(seg: &Segment, lower: bool) {
    let (mine, theirs) = if lower {
        (offsets::SIDE_LOWER, offsets::SIDE_HIGHER)
    } else {
        (offsets::SIDE_HIGHER, offsets::SIDE_LOWER)
    };
    let me = side(seg, mine);
    me.pid.store(u64::from(std::process::id()), SeqCst);
    me.probe_addr
        .store(std::ptr::addr_of!(PROBE) as u64, SeqCst);
    let peer = side(seg, theirs);
    let (pid, addr) = (peer.pid.load(SeqCst) as i32, peer.probe_addr.load(SeqCst));
    if pid <= 0 || cma::min_pull_from_env().is_none() {
        return;
    }
    if cma::probe(pid, addr).is_ok() {
        me.can_pull.store(1, SeqCst);
    }
}

/// Creates and initialises a segment; returns it and the nonce written into its header.
fn create(
    name: &str,
    len: usize,
    a_at: usize,
    b_at: usize,
    ring_bytes: usize,
) -> std::io::Result<(Segment, [u8; 16])> {
    let seg = Segment::create(name, len)?;
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce).map_err(|e| std::io::Error::other(e.to_string()))?;
    // SAFETY: the mapping is `len` bytes, writable, and not yet shared with anyone (the peer has
    // not been told its name); the header page and both rings lie inside it at page-aligned
    // offsets.
    unsafe {
        let p = seg.as_ptr();
        std::ptr::copy_nonoverlapping(MAGIC.as_ptr(), p, 8);
        std::ptr::copy_nonoverlapping(nonce.as_ptr(), p.add(8), 16);
        Ring::init(p.add(a_at), ring_bytes);
        Ring::init(p.add(b_at), ring_bytes);
    }
    // The lower rank's pid and probe address, for the peer's check (it cannot probe yet itself).
    introduce(&seg, true);
    Ok((seg, nonce))
}

/// Opens the segment an offer names, checks it is the one the (authenticated) offerer created,
/// and returns it with the higher rank's sending ring (B) and receiving ring (A).
fn accept(
    offer: &[u8],
    len: usize,
    a_at: usize,
    b_at: usize,
) -> std::result::Result<(Segment, Ring, Ring), String> {
    if &offer[..8] != MAGIC {
        return Err("the peer offered no shared memory".into());
    }
    let name_bytes = &offer[8..8 + NAME_FIELD];
    let end = name_bytes
        .iter()
        .position(|b| *b == 0)
        .unwrap_or(NAME_FIELD);
    if end == 0 {
        return Err("the peer could not create shared memory".into());
    }
    let name = std::str::from_utf8(&name_bytes[..end])
        .map_err(|_| "a malformed segment name".to_string())?;
    let ring_bytes = u64::from_le_bytes(
        offer[OFFER_LEN - 8..]
            .try_into()
            .map_err(|_| "malformed offer")?,
    ) as usize;
    if !ring_bytes.is_power_of_two() || !(4096..=1 << 30).contains(&ring_bytes) {
        return Err(format!("the peer offered rings of {ring_bytes} bytes, not a power of two between 4 KiB and 1 GiB"));
    }
    let (a, b, want_len) = layout(ring_bytes);
    if (a, b, want_len) != (a_at, b_at, len) {
        return Err(format!("the peer's rings are {ring_bytes} bytes; this rank's differ (set PSY_SHM_RING_BYTES alike on every rank)"));
    }
    let seg = Segment::open(name, len).map_err(|e| format!("opening {name}: {e}"))?;
    let mut header = [0u8; 24];
    // SAFETY: the mapping is at least one page long; 24 bytes are read from its start.
    unsafe { std::ptr::copy_nonoverlapping(seg.as_ptr(), header.as_mut_ptr(), 24) };
    if &header[..8] != MAGIC || header[8..24] != offer[8 + NAME_FIELD..8 + NAME_FIELD + 16] {
        return Err(format!(
            "{name} is not the segment the peer created (nonce differs): refusing it"
        ));
    }
    // SAFETY: the segment is `len` bytes and page aligned; the offerer initialised both rings at
    // these offsets before sending the offer (the TCP round trip orders it before this read).
    let (from_lower, to_lower) = unsafe {
        (
            Ring::attach(seg.as_ptr().add(a_at), ring_bytes)?,
            Ring::attach(seg.as_ptr().add(b_at), ring_bytes)?,
        )
    };
    Ok((seg, to_lower, from_lower))
}
