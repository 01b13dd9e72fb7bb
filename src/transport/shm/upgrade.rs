//! The shared-memory entry of the transport table: which pairs share memory, and moving their
//! TCP connections onto shared memory.
//!
//! The upgrade is one exchange among the pairs shared memory won, over their bootstrap streams:
//! (1) this rank creates a segment for, and offers it to, every higher peer; (2) it answers the
//! offer of every lower peer, mapping its segment; (3) it collects the answers of the higher
//! peers and unlinks every name. Offers and answers are small and buffered, so the exchange
//! cannot deadlock. A pair whose segment cannot be created or mapped stays on TCP (an error
//! under `PSY_TRANSPORT=shm`).

use super::cma::{self, offsets, PullPolicy, SideInfo};
use super::link::ShmLink;
use super::pull_cost;
use super::ring::Ring;
use super::segment::{self, Segment};
use crate::auth::with_deadline;
use crate::error::{Error, ErrorKind, Result};
use crate::transport::table::{Connected, Formation, Pair, Transport};
use crate::transport::{PeerInfo, TransportKind, TransportPolicy};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Instant;

/// `PSY_SHM_RING_BYTES`: bytes of each ring, per direction and pair.
pub const RING_BYTES: &str = "PSY_SHM_RING_BYTES";

const MAGIC: &[u8; 8] = b"PSYSHM01";
const NAME_FIELD: usize = 96;
const OFFER_LEN: usize = 8 + NAME_FIELD + 16 + 8;
const PAGE: usize = 4096;
const SHM_OK: &[u8; 8] = b"SHMOK\0\0\0";
const SHM_NO: &[u8; 8] = b"SHMNO\0\0\0";

fn round_up(n: usize) -> usize {
    n.div_ceil(PAGE) * PAGE
}

/// The smallest rings a pair falls back to where `/dev/shm` has no room for the ones it wants
/// ([`Setup::create`]): as small as the rings the link's own tests run with.
const SMALLEST_FALLBACK: usize = 64 << 10;

/// Segment layout: a header page (magic, nonce), then ring A (lower rank → higher), then ring B.
fn layout(ring_bytes: usize) -> (usize, usize, usize) {
    let ring = round_up(Ring::bytes_needed(ring_bytes));
    (PAGE, PAGE + ring, PAGE + 2 * ring)
}

/// The value of [`RING_BYTES`], clamped to 4 KiB..1 GiB and rounded up to a power of two; `None`
/// when unset or unreadable.
pub fn parse_ring_bytes(text: Option<&str>) -> Option<usize> {
    text.and_then(|v| v.trim().parse::<usize>().ok())
        .map(|v| v.clamp(4096, 1 << 30).next_power_of_two())
}

/// The ring size for a host with `local_ranks` ranks, unless `set` (from `PSY_SHM_RING_BYTES`)
/// says otherwise: 2 MiB per direction for a pair alone on its host (one-way calls run that far
/// ahead of their reader, exchanges [`super::link::EXCHANGE_WINDOW`]), 1 MiB for up to 8 ranks,
/// less when more share the host (every pair has its own rings). Only 2 ranks on 2 cores were
/// measured (`results/ring-reader-lag/`).
pub fn ring_bytes_for(local_ranks: usize, set: Option<usize>) -> usize {
    set.unwrap_or(match local_ranks {
        0..=2 => 2 << 20,
        3..=8 => 1 << 20,
        9..=16 => 512 << 10,
        _ => 256 << 10,
    })
}

fn shares_memory(me: &PeerInfo, other: &PeerInfo, policy: TransportPolicy) -> bool {
    policy != TransportPolicy::Tcp && me.shm_ok && other.shm_ok && me.host_key == other.host_key
}

/// The shared-memory entry of [`crate::transport::table::TABLE`].
pub(crate) fn entry() -> Box<dyn Transport> {
    Box::new(Shm)
}

/// Shared memory, for pairs on one host that both allow it.
struct Shm;

impl Transport for Shm {
    fn kind(&self) -> TransportKind {
        TransportKind::Shm
    }

    fn can_connect(&mut self, f: &Formation<'_>, peer: usize) -> Result<bool> {
        Ok(shares_memory(f.me(), &f.peers[peer], f.policy()))
    }

    fn connect(&mut self, f: &Formation<'_>, pairs: Vec<Pair>) -> Result<Connected> {
        let setup = Setup::new(f);
        let (lower, higher): (Vec<Pair>, Vec<Pair>) =
            pairs.into_iter().partition(|(j, _)| *j < f.rank);
        let mut done = Connected::default();
        let mut offered = Vec::with_capacity(higher.len());
        for (j, mut stream) in higher {
            let seg = setup.offer(j, &mut stream)?;
            offered.push((j, stream, seg));
        }
        for (j, stream) in lower {
            setup.answer(j, stream, &mut done)?;
        }
        for (j, stream, seg) in offered {
            setup.collect(j, stream, seg, &mut done)?;
        }
        Ok(done)
    }
}

/// How this rank's pairs are upgraded, the same for every pair of one group.
struct Setup<'a> {
    rank: usize,
    /// `PSY_TRANSPORT`: under `shm` a pair that cannot share memory is an error.
    policy: TransportPolicy,
    /// The job id (part of every segment name, so jobs never meet).
    job_id: &'a str,
    /// The group's key prefix (part of every segment name, so groups never meet).
    group: &'a str,
    /// Bytes of each ring this rank asks for (a power of two); a pair's rings may be smaller
    /// where `/dev/shm` has no room for them ([`Setup::create`]).
    ring_bytes: usize,
    /// Which slices go by pull descriptor ([`cma`]).
    pulls: PullPolicy,
    /// Whether this host runs more ranks of the group than it has cores.
    crowded: bool,
    /// When to give up.
    deadline: Instant,
}

/// A bootstrap error naming what this rank was doing.
fn failed(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::new(ErrorKind::Bootstrap, format!("{what}: {e}"))
}

impl Setup<'_> {
    fn new<'a>(f: &Formation<'a>) -> Setup<'a> {
        let local_ranks = (0..f.size()).filter(|&j| f.same_host(j)).count();
        let ring_bytes = ring_bytes_for(local_ranks, f.tunables.shm_ring_bytes);
        Setup {
            rank: f.rank,
            policy: f.policy(),
            job_id: f.job_id,
            group: f.prefix,
            ring_bytes,
            pulls: f.tunables.shm_pulls,
            crowded: crate::wait::oversubscribed(local_ranks),
            deadline: f.deadline,
        }
    }

    /// Step 1, to a higher peer `j`: creates a segment and offers it (an empty offer if it
    /// cannot, and `auto` allows TCP instead); returns it with the bytes of its rings.
    fn offer(&self, j: usize, stream: &mut TcpStream) -> Result<Option<(Segment, usize)>> {
        let rank = self.rank;
        let name = segment::name_for(self.job_id, self.group, rank, j);
        let mut offer = vec![0u8; OFFER_LEN];
        offer[..8].copy_from_slice(MAGIC);
        let seg = match self.create(&name, j) {
            Ok((seg, nonce, ring_bytes)) => {
                let n = name.len().min(NAME_FIELD);
                offer[8..8 + n].copy_from_slice(&name.as_bytes()[..n]);
                offer[8 + NAME_FIELD..8 + NAME_FIELD + 16].copy_from_slice(&nonce);
                offer[OFFER_LEN - 8..].copy_from_slice(&(ring_bytes as u64).to_le_bytes());
                Some((seg, ring_bytes))
            }
            Err(e) if self.policy == TransportPolicy::Shm => {
                return Err(Error::new(ErrorKind::Bootstrap, format!("rank {rank}: cannot create shared memory for rank {j} ({e}); PSY_TRANSPORT=shm requires it (is /dev/shm mounted and writable?)")));
            }
            Err(e) => {
                crate::report::warn(format_args!(
                    "rank {rank}: shared memory with rank {j} unavailable ({e}); using TCP"
                ));
                None
            }
        };
        with_deadline(stream, self.deadline, |s| s.write_all(&offer)).map_err(failed(format!(
            "rank {rank}: offering shared memory to rank {j}"
        )))?;
        Ok(seg)
    }

    /// Step 2, from a lower peer `j`: reads its offer, maps the segment if it can, and says
    /// whether it did.
    fn answer(&self, j: usize, mut stream: TcpStream, done: &mut Connected) -> Result<()> {
        let rank = self.rank;
        let mut offer = vec![0u8; OFFER_LEN];
        with_deadline(&mut stream, self.deadline, |s| s.read_exact(&mut offer)).map_err(failed(
            format!("rank {rank}: waiting for rank {j}'s shared-memory offer"),
        ))?;
        let accepted = self.accept(&offer);
        if let Ok((seg, _, _)) = &accepted {
            introduce(seg, false, self.pulls);
        }
        let reply = if accepted.is_ok() { SHM_OK } else { SHM_NO };
        with_deadline(&mut stream, self.deadline, |s| s.write_all(reply)).map_err(failed(
            format!("rank {rank}: answering rank {j}'s shared-memory offer"),
        ))?;
        match accepted {
            Ok((seg, to_lower, from_lower)) => {
                let link = ShmLink::new(
                    seg,
                    to_lower,
                    from_lower,
                    stream,
                    false,
                    self.pulls,
                    self.crowded,
                )
                .map_err(|e| Error::io("configuring a shared-memory link", e))?;
                done.links.push((j, Box::new(link)));
            }
            Err(e) if self.policy == TransportPolicy::Shm => {
                return Err(Error::new(ErrorKind::Bootstrap, format!("rank {rank}: cannot use rank {j}'s shared memory ({e}); PSY_TRANSPORT=shm requires it")));
            }
            Err(e) => {
                crate::report::warn(format_args!(
                    "rank {rank}: shared memory with rank {j} unavailable ({e}); using TCP"
                ));
                done.kept.push((j, stream));
            }
        }
        Ok(())
    }

    /// Step 3, from a higher peer `j` offered `seg`: reads its answer and unlinks the name.
    fn collect(
        &self,
        j: usize,
        mut stream: TcpStream,
        seg: Option<(Segment, usize)>,
        done: &mut Connected,
    ) -> Result<()> {
        let rank = self.rank;
        let mut reply = [0u8; 8];
        let answer = with_deadline(&mut stream, self.deadline, |s| s.read_exact(&mut reply));
        if let Some((seg, _)) = &seg {
            let _ = segment::unlink(seg.name());
        }
        answer.map_err(failed(format!(
            "rank {rank}: waiting for rank {j} to map shared memory"
        )))?;
        let Some((seg, ring_bytes)) = seg else {
            done.kept.push((j, stream)); // this rank offered nothing; both keep TCP
            return Ok(());
        };
        if &reply != SHM_OK {
            if self.policy == TransportPolicy::Shm {
                return Err(Error::new(ErrorKind::Bootstrap, format!("rank {rank}: rank {j} could not map the shared memory; PSY_TRANSPORT=shm requires it")));
            }
            done.kept.push((j, stream)); // rank j reported why; both keep TCP
            return Ok(());
        }
        let (a_at, b_at, _) = layout(ring_bytes);
        // SAFETY: the segment was laid out for rings of `ring_bytes`, page aligned; rings A and B
        // were initialised at these offsets by `create` and lie inside it.
        let (to_higher, from_higher) = unsafe {
            (
                Ring::attach(seg.as_ptr().add(a_at), ring_bytes),
                Ring::attach(seg.as_ptr().add(b_at), ring_bytes),
            )
        };
        let (to_higher, from_higher) = (
            to_higher.map_err(|e| Error::new(ErrorKind::Bootstrap, e))?,
            from_higher.map_err(|e| Error::new(ErrorKind::Bootstrap, e))?,
        );
        introduce(&seg, true, self.pulls);
        let link = ShmLink::new(
            seg,
            to_higher,
            from_higher,
            stream,
            true,
            self.pulls,
            self.crowded,
        )
        .map_err(|e| Error::io("configuring a shared-memory link", e))?;
        done.links.push((j, Box::new(link)));
        Ok(())
    }
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
/// pull descriptor. A failed check only costs speed: the rings carry everything. `pulls`: the
/// policy ([`crate::transport::TransportTunables::shm_pulls`]); under the default one, this side
/// offers to pull only where pulls pay on this machine ([`pull_cost::pulls_pay`]).
fn introduce(seg: &Segment, lower: bool, pulls: PullPolicy) {
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
    if pid <= 0 {
        return;
    }
    let offered = match pulls {
        PullPolicy::Off => false,
        PullPolicy::Every { .. } => true,
        PullPolicy::ByTraffic => pull_cost::pulls_pay(),
    };
    if !offered {
        return;
    }
    if cma::probe(pid, addr).is_ok() {
        me.can_pull.store(1, SeqCst);
    }
}

impl Setup<'_> {
    /// Creates and initialises the segment for higher peer `j`; returns it, the nonce written
    /// into its header and the bytes of its rings: the rings asked for, or where `/dev/shm` has
    /// no room for them, the largest smaller ones it has room for, down to
    /// [`SMALLEST_FALLBACK`] (saying so). With 2 ranks on a host a pair wants 4 MiB of rings,
    /// which a 4 MiB `/dev/shm` cannot hold, where the 2 MiB of earlier versions fitted.
    fn create(&self, name: &str, j: usize) -> std::io::Result<(Segment, [u8; 16], usize)> {
        let mut ring_bytes = self.ring_bytes;
        let seg = loop {
            match Segment::create(name, layout(ring_bytes).2) {
                Ok(seg) => break seg,
                Err(e) if segment::no_room(&e) && ring_bytes / 2 >= SMALLEST_FALLBACK => {
                    crate::report::warn(format_args!(
                        "rank {}: rings of {} KiB with rank {j} do not fit in /dev/shm ({e}); \
                         trying {} KiB",
                        self.rank,
                        ring_bytes >> 10,
                        ring_bytes >> 11
                    ));
                    ring_bytes /= 2;
                }
                Err(e) => return Err(e),
            }
        };
        let (a_at, b_at, _) = layout(ring_bytes);
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).map_err(|e| std::io::Error::other(e.to_string()))?;
        // SAFETY: the mapping is laid out for rings of `ring_bytes` ([`layout`]), writable, and
        // not yet shared with anyone (the peer has not been told its name); the header page and
        // both rings lie inside it at page-aligned offsets.
        unsafe {
            let p = seg.as_ptr();
            std::ptr::copy_nonoverlapping(MAGIC.as_ptr(), p, 8);
            std::ptr::copy_nonoverlapping(nonce.as_ptr(), p.add(8), 16);
            Ring::init(p.add(a_at), ring_bytes);
            Ring::init(p.add(b_at), ring_bytes);
        }
        // The lower rank's pid and probe address, for the peer's check (it cannot probe yet
        // itself).
        introduce(&seg, true, self.pulls);
        Ok((seg, nonce, ring_bytes))
    }

    /// Opens the segment an offer names, checks it is the one the (authenticated) offerer created,
    /// and returns it with the higher rank's sending ring (B) and receiving ring (A).
    fn accept(&self, offer: &[u8]) -> std::result::Result<(Segment, Ring, Ring), String> {
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
        // Smaller rings than this rank's: the peer's /dev/shm had no room for more (`create`).
        if ring_bytes > self.ring_bytes {
            return Err(format!("the peer's rings are {ring_bytes} bytes, more than this rank's {} (set PSY_SHM_RING_BYTES alike on every rank)", self.ring_bytes));
        }
        let (a_at, b_at, len) = layout(ring_bytes);
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
}
