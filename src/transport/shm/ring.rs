//! A single-producer single-consumer byte ring in memory that two processes map.
//!
//! The ring stores no pointers, only counters, so each process can map it at a different address.
//! One side writes ([`Ring::write`], [`Ring::close`], [`Ring::wait_writable`]), the other reads
//! ([`Ring::read`], [`Ring::wait_readable`]); each side holds its own [`Ring`] handle, made by
//! [`Ring::init`] (the creator) or [`Ring::attach`] (the other process, or another thread).
//!
//! # Memory layout
//!
//! The memory must be 64-byte aligned ([`ALIGN`]; a mapping is page aligned). All fields are
//! native-endian; both processes run on the same host. The lines that change on every write or
//! read are each written by one side only (`tail` by the writer, `head` by the reader), so the two
//! cores never fight over a line (no false sharing); the two sleep lines are written by both sides,
//! but only around a sleep, and are otherwise only read:
//!
//! ```text
//! offset  size  field              written by         read by
//! ------  ----  -----------------  -----------------  -----------------------------------------
//!      0     8  magic "PSYRING1"   creator (once)     attach
//!      8     8  capacity (bytes)   creator (once)     attach
//!     64     8  tail               writer             reader: bytes ever written (monotonic)
//!     72     4  closed (0/1)       writer (or reader) both: no more data after `tail`
//!    128     8  head               reader             writer: bytes ever read (monotonic)
//!    192     4  data_wait.sleeping reader             writer: the reader sleeps for data
//!    196     4  data_wait.seq      writer             reader: futex word the reader sleeps on
//!    256     4  space_wait.sleeping writer            reader: the writer sleeps for space
//!    260     4  space_wait.seq     reader             writer: futex word the writer sleeps on
//!    320  cap   data               writer             reader: byte `i` of the stream is at
//!                                                     `320 + (i & (cap - 1))`
//! ```
//!
//! The rest of each line is padding. [`Ring::HEADER`] is 320; [`Ring::bytes_needed`] adds the
//! capacity, rounded up to 64 so rings packed one after another stay aligned.
//!
//! `head <= tail <= head + cap` always holds for a well-behaved peer; the counters are `u64` and
//! never wrap in practice (2^64 bytes). Even a corrupt or hostile peer cannot make this side read
//! or write outside the mapping: every length is clamped to the capacity and every position is
//! masked. (It can of course make this side see garbage data.)
//!
//! # Ordering and wake-ups
//!
//! Data: the writer copies bytes in, then stores `tail` (Release, in fact SeqCst); the reader loads
//! `tail` (Acquire) before copying bytes out, then stores `head` (Release/SeqCst); the writer
//! loads `head` (Acquire) before reusing that space. So every byte is written before it is read
//! and read before it is overwritten.
//!
//! Sleeping costs no system call on the fast path: a writer calls `futex::wake` only when the
//! reader has announced that it sleeps (and symmetrically for space). The sleeper (reader shown;
//! the writer waiting for space is the mirror image):
//!
//! ```text
//! reader (wait_readable)                     writer (write)
//! s = data_wait.seq          (SeqCst)  L     copy bytes
//! data_wait.sleeping = 1     (SeqCst)  A     tail = t + n                (SeqCst)  W
//! if tail != head or closed  (SeqCst)  R     if data_wait.sleeping != 0  (SeqCst)  F
//!     sleeping = 0; return                       data_wait.seq += 1      (SeqCst)  B
//! futex_wait(data_wait.seq, s)                   futex_wake(data_wait.seq)
//! sleeping = 0                (SeqCst)
//! ```
//!
//! No lost wake-up: all these operations are SeqCst, so they lie in one total order S consistent
//! with each thread's program order. If the reader's re-check R misses the writer's store W
//! (reads the old `tail`), then R precedes W in S, so S has L < A < R < W < F. F is a SeqCst load
//! after A, so it reads A's 1 (or a later value: the reader's own clear, which it only does after
//! it stopped waiting, or a later announce, which also asks for a wake). So the writer bumps the
//! sequence (B, after F) and wakes. Since L < B in S, `s` is the value before B, and either the
//! futex call runs after B (the kernel sees `seq != s` and returns at once) or before it (the
//! reader is queued when the wake comes, so the wake finds it: the kernel compares the word and
//! queues the waiter under the lock that FUTEX_WAKE takes). If instead R sees W, the reader does
//! not sleep at all. A stale `sleeping == 1` seen by the writer only causes a harmless extra wake.
//! [`Ring::close`] publishes `closed` the same way and wakes both sides.
//!
//! The waits do not spin: on this kind of host a futex sleep and wake costs tens of
//! microseconds, so callers that expect data soon should poll [`Ring::read`] / [`Ring::write`]
//! for a bounded time before calling [`Ring::wait_readable`] / [`Ring::wait_writable`].

use super::futex;
use std::cell::Cell;
use std::fmt;
use std::io::IoSlice;
use std::mem::{offset_of, size_of};
use std::ptr::NonNull;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::time::Duration;

/// Alignment that the memory given to [`Ring::init`] and [`Ring::attach`] must have (a cache
/// line). Page-aligned mappings satisfy it.
pub const ALIGN: usize = 64;

/// A write or read larger than this publishes its progress (`tail`, `head`) after every this many
/// bytes instead of once at the end, so the other side starts on the first bytes while the rest
/// are still being copied: a 1 MiB message otherwise crosses as "copy it all in, then copy it all
/// out", twice the time of the overlapped copies. Small enough to stay in L1/L2 between the two
/// copies, large enough that the extra stores and wake checks cost nothing measurable.
const PUBLISH_EVERY: usize = 32 << 10;

/// "PSYRING1", little-endian: marks an initialised ring of this layout version.
const MAGIC: u64 = u64::from_le_bytes(*b"PSYRING1");

/// Written once by the creator.
#[repr(C, align(64))]
struct Meta {
    magic: AtomicU64,
    capacity: AtomicU64,
}

/// Written by the writer only.
#[repr(C, align(64))]
struct Producer {
    /// Bytes ever written (published).
    tail: AtomicU64,
    /// 1 once the writer has closed the ring.
    closed: AtomicU32,
}

/// Written by the reader only.
#[repr(C, align(64))]
struct Consumer {
    /// Bytes ever read (released back to the writer).
    head: AtomicU64,
}

/// One side's sleep announcement and the futex word it sleeps on.
#[repr(C, align(64))]
struct Sleep {
    /// 1 while the sleeping side is (about to be) in a futex wait; written by the sleeper.
    sleeping: AtomicU32,
    /// Bumped by the other side before it wakes the sleeper; the futex word.
    seq: AtomicU32,
}

/// The ring header, [`Ring::HEADER`] bytes, followed by the data.
#[repr(C)]
struct Header {
    meta: Meta,
    prod: Producer,
    cons: Consumer,
    /// The reader sleeps here waiting for data (or close).
    data_wait: Sleep,
    /// The writer sleeps here waiting for space.
    space_wait: Sleep,
}

// The layout documented above, checked at compile time.
const _: () = {
    assert!(size_of::<Header>() == 320);
    assert!(offset_of!(Header, meta) == 0);
    assert!(offset_of!(Header, prod) == 64);
    assert!(offset_of!(Header, cons) == 128);
    assert!(offset_of!(Header, data_wait) == 192);
    assert!(offset_of!(Header, space_wait) == 256);
    assert!(offset_of!(Meta, capacity) == 8);
    assert!(offset_of!(Producer, closed) == 8);
    assert!(offset_of!(Sleep, seq) == 4);
    assert!(std::mem::align_of::<Header>() == ALIGN);
};

/// One side's handle on a ring in shared memory.
///
/// The handle does not own the memory; whoever made it (see [`Ring::init`], [`Ring::attach`])
/// keeps the mapping alive for as long as the handle exists. It is `Send` but not `Sync`: one
/// thread at a time uses a handle.
pub struct Ring {
    hdr: NonNull<Header>,
    data: NonNull<u8>,
    cap: usize,
    mask: u64,
    /// The most bytes the writer lets stand unread ([`Ring::set_window`]): the capacity unless
    /// the link's current call asks for less.
    window: Cell<usize>,
    /// The writer's last view of `head`: space known to be free without touching the reader's line.
    seen_head: Cell<u64>,
    /// The reader's last view of `tail`: bytes known to be readable without touching the writer's
    /// line.
    seen_tail: Cell<u64>,
}

// SAFETY: a `Ring` is a pair of pointers into memory that stays valid wherever the handle goes
// (the `init`/`attach` contract: the mapping outlives the handle), and the shared state is only
// touched through atomics or through the data region under the single-producer single-consumer
// protocol. Keeping to that discipline (one writer and one reader at a time, across all handles
// and processes) is the caller's contract, made when creating the handle. The `Cell`s are
// per-handle caches and move with it; `Ring` is not `Sync`, so they are never shared.
unsafe impl Send for Ring {}

impl Ring {
    /// Bytes of header before the data (320: five 64-byte lines).
    pub const HEADER: usize = size_of::<Header>();

    /// Bytes of memory a ring of `capacity` data bytes occupies: [`Ring::HEADER`] plus the
    /// capacity rounded up to a multiple of 64, so that rings laid out back to back stay
    /// [`ALIGN`]-aligned.
    ///
    /// # Panics
    ///
    /// If `capacity` is not a power of two, or the total overflows `usize`.
    pub fn bytes_needed(capacity: usize) -> usize {
        assert!(
            capacity.is_power_of_two(),
            "ring capacity {capacity} is not a power of two"
        );
        let data = capacity.checked_next_multiple_of(ALIGN);
        match data.and_then(|d| d.checked_add(Self::HEADER)) {
            Some(n) => n,
            None => panic!("ring capacity {capacity} is too large"),
        }
    }

    /// Writes a fresh, empty, open ring of `capacity` data bytes at `mem` and returns a handle on
    /// it. The creator calls this once, before telling the other side where the ring is.
    ///
    /// # Safety
    ///
    /// - `mem` is valid for reads and writes of [`Ring::bytes_needed`]`(capacity)` bytes, and stays
    ///   valid (mapped) for as long as this handle and every handle [`Ring::attach`]ed to it live.
    /// - Nobody else accesses that memory during this call (no other handle is in use on it).
    /// - Afterwards the memory is accessed only through [`Ring`] handles, with at most one writer
    ///   and one reader at a time (single producer, single consumer).
    ///
    /// # Panics
    ///
    /// If `capacity` is not a power of two or `mem` is not [`ALIGN`]-byte aligned.
    pub unsafe fn init(mem: *mut u8, capacity: usize) -> Ring {
        assert!(
            capacity.is_power_of_two(),
            "ring capacity {capacity} is not a power of two"
        );
        assert!(
            !mem.is_null() && (mem as usize) % ALIGN == 0,
            "ring memory at {mem:p} is not {ALIGN}-byte aligned"
        );
        let hdr = mem.cast::<Header>();
        let fresh = Header {
            meta: Meta {
                magic: AtomicU64::new(0),
                capacity: AtomicU64::new(capacity as u64),
            },
            prod: Producer {
                tail: AtomicU64::new(0),
                closed: AtomicU32::new(0),
            },
            cons: Consumer {
                head: AtomicU64::new(0),
            },
            data_wait: Sleep {
                sleeping: AtomicU32::new(0),
                seq: AtomicU32::new(0),
            },
            space_wait: Sleep {
                sleeping: AtomicU32::new(0),
                seq: AtomicU32::new(0),
            },
        };
        // SAFETY: `mem` is non-null, aligned for `Header` (checked above) and valid for writes of
        // at least `HEADER` bytes, and nobody else accesses it during this call (the contract).
        unsafe { hdr.write(fresh) };
        // SAFETY: the header was just written and lives as long as the returned handle.
        let magic = unsafe { &(*hdr).meta.magic };
        // Release: whoever sees the magic (Acquire in `attach`) sees the whole header.
        magic.store(MAGIC, Release);
        // SAFETY: `mem` holds an initialised header of this capacity and satisfies the validity
        // contract, passed on from our caller.
        unsafe { Ring::from_raw(mem, capacity) }
    }

    /// Returns a handle on a ring that [`Ring::init`] wrote at `mem` (possibly in another
    /// process, through another mapping of the same memory) after checking its magic number and
    /// capacity. Errors say what did not match.
    ///
    /// # Safety
    ///
    /// - `mem` is valid for reads and writes of [`Ring::bytes_needed`]`(capacity)` bytes, and stays
    ///   valid for as long as the returned handle lives.
    /// - If a ring was initialised there, its initialisation happened before this call (for
    ///   another process: it was announced after `init` returned, through something that orders
    ///   memory, such as a socket round trip).
    /// - The memory is accessed only through [`Ring`] handles, with at most one writer and one
    ///   reader at a time.
    pub unsafe fn attach(mem: *mut u8, capacity: usize) -> Result<Ring, String> {
        if mem.is_null() || (mem as usize) % ALIGN != 0 {
            return Err(format!(
                "ring memory at {mem:p} is not {ALIGN}-byte aligned"
            ));
        }
        if !capacity.is_power_of_two() {
            return Err(format!("ring capacity {capacity} is not a power of two"));
        }
        // SAFETY: `mem` is non-null, aligned (checked) and valid for at least `HEADER` bytes (the
        // contract); the header fields are atomics, so reading them while the other side may
        // write them is fine, and all-zero or garbage bytes are valid values for them.
        let hdr = unsafe { &*mem.cast::<Header>() };
        let magic = hdr.meta.magic.load(Acquire);
        if magic != MAGIC {
            return Err(format!(
                "no ring at {mem:p}: magic {magic:#018x}, expected {MAGIC:#018x} (not initialised, \
                 or initialised by a different version of psyne)"
            ));
        }
        let found = hdr.meta.capacity.load(Relaxed);
        if found != capacity as u64 {
            return Err(format!(
                "the ring at {mem:p} holds {found} bytes, but {capacity} were expected (both sides \
                 must use the same ring size)"
            ));
        }
        // SAFETY: an initialised ring of this capacity is at `mem` (checked), and the validity
        // contract is our caller's.
        Ok(unsafe { Ring::from_raw(mem, capacity) })
    }

    /// Builds the handle.
    ///
    /// # Safety
    ///
    /// `mem` is non-null, [`ALIGN`]-aligned, holds an initialised header for `capacity` (a power
    /// of two), and is valid for `bytes_needed(capacity)` bytes for the handle's life.
    unsafe fn from_raw(mem: *mut u8, capacity: usize) -> Ring {
        // SAFETY: non-null by the contract.
        let hdr = unsafe { NonNull::new_unchecked(mem.cast::<Header>()) };
        // SAFETY: the data region starts `HEADER` bytes in, inside the valid range (contract);
        // the result is non-null because `mem` is.
        let data = unsafe { NonNull::new_unchecked(mem.add(Self::HEADER)) };
        // SAFETY: the header is initialised and valid (contract).
        let h = unsafe { hdr.as_ref() };
        Ring {
            hdr,
            data,
            cap: capacity,
            mask: capacity as u64 - 1,
            window: Cell::new(capacity),
            seen_head: Cell::new(h.cons.head.load(Acquire)),
            seen_tail: Cell::new(h.prod.tail.load(Acquire)),
        }
    }

    fn hdr(&self) -> &Header {
        // SAFETY: the header is initialised and stays valid while the handle lives (the
        // `init`/`attach` contract); all its mutable fields are atomics.
        unsafe { self.hdr.as_ref() }
    }

    /// Data bytes the ring holds at most.
    #[allow(dead_code)] // the ring's documented API, exercised by its tests; links use the `_or` forms
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Writer: lets at most `bytes` (at least 1, at most the capacity) stand unread from now on,
    /// so that a write runs at most that far ahead of the reader. Bytes already written stay.
    pub fn set_window(&self, bytes: usize) {
        self.window.set(bytes.clamp(1, self.cap));
    }

    /// Bytes a write may add to `used` unread ones (none once the window is full).
    fn free(&self, used: usize) -> usize {
        self.window.get().saturating_sub(used)
    }

    /// Bytes published between `head` and `tail`, clamped to the capacity (a corrupt peer could
    /// store anything in its counter).
    fn used(&self, head: u64, tail: u64) -> usize {
        let used = tail.wrapping_sub(head);
        if used > self.cap as u64 {
            self.cap
        } else {
            used as usize
        }
    }

    /// Copies `src` into the data region at stream position `pos`, in two parts if it wraps.
    ///
    /// # Safety
    ///
    /// `src.len() <= self.cap`, and the region `[pos, pos + src.len())` is free: the caller is the
    /// only writer and has seen (Acquire) a `head` with `pos + src.len() <= head + cap`.
    unsafe fn copy_in(&self, pos: u64, src: &[u8], streaming: bool) {
        let off = (pos & self.mask) as usize;
        let first = src.len().min(self.cap - off);
        let base = self.data.as_ptr();
        let copy = if streaming {
            super::stream_copy::copy_unfenced
        } else {
            crate::copy::copy_bytes
        };
        // SAFETY: `off < cap` and `first <= cap - off`, so the first part lies in the data region;
        // the second part is `src.len() - first <= off` bytes at its start (as `src.len() <= cap`).
        // No one reads these bytes now (the contract), and `src` cannot overlap them: the data
        // region is only accessed through ring handles, never through Rust references.
        unsafe {
            copy(src.as_ptr(), base.add(off), first);
            copy(src.as_ptr().add(first), base, src.len() - first);
        }
    }

    /// Writer: copies as much of `bufs` (in order, as one stream) as fits and returns how many
    /// bytes that was: 0 when the ring is full, or holds as many unread bytes as its window
    /// allows ([`Ring::set_window`]) (or `bufs` is empty, or the ring was closed).
    /// Never blocks. Wakes a reader sleeping in [`Ring::wait_readable`] (a system call only then).
    pub fn write(&self, bufs: &[IoSlice<'_>]) -> usize {
        self.write_with(bufs, false)
    }

    /// Writer: [`Ring::write`], the copies into the ring bypassing the cache (non-temporal
    /// stores, `stream_copy`), so the reader's copies come from memory rather than from this
    /// core's cache: for a host where lines cross between cores slowly
    /// (the `crossing` module).
    pub fn write_streaming(&self, bufs: &[IoSlice<'_>]) -> usize {
        self.write_with(bufs, true)
    }

    fn write_with(&self, bufs: &[IoSlice<'_>], streaming: bool) -> usize {
        let h = self.hdr();
        if h.prod.closed.load(Relaxed) != 0 {
            return 0; // nothing may follow a close: the reader may already have seen the end
        }
        let want = bufs.iter().fold(0usize, |n, b| n.saturating_add(b.len()));
        if want == 0 {
            return 0;
        }
        let tail = h.prod.tail.load(Relaxed); // our own counter
        let mut free = self.free(self.used(self.seen_head.get(), tail));
        if free < want {
            // Acquire: the reader's copies out of the space it released happened before ours.
            let head = h.cons.head.load(Acquire);
            self.seen_head.set(head);
            free = self.free(self.used(head, tail));
        }
        let n = free.min(want);
        if n == 0 {
            return 0;
        }
        let mut pos = tail;
        let mut left = n;
        let mut unpublished = 0;
        for b in bufs {
            let mut b: &[u8] = b;
            while left > 0 && !b.is_empty() {
                let take = b.len().min(left).min(PUBLISH_EVERY - unpublished);
                // SAFETY: `take <= n <= free <= cap`, and `[pos, pos + take)` lies within the `n`
                // free bytes after `tail` (by the Acquire load of `head` that computed `free`, or
                // an older, smaller view of it); we are the only writer (the SPSC contract).
                unsafe { self.copy_in(pos, &b[..take], streaming) };
                pos += take as u64;
                left -= take;
                b = &b[take..];
                unpublished += take;
                if unpublished == PUBLISH_EVERY && left > 0 {
                    // Publish what is in so far, so the reader copies it out while we go on.
                    self.publish_tail(pos, streaming);
                    unpublished = 0;
                }
            }
            if left == 0 {
                break;
            }
        }
        self.publish_tail(pos, streaming);
        n
    }

    /// Writer: makes the stream up to `pos` readable and wakes a reader that sleeps for it; after
    /// `streaming` copies, first orders their non-temporal stores before the `tail` store.
    fn publish_tail(&self, pos: u64, streaming: bool) {
        if streaming {
            super::stream_copy::fence();
        }
        let h = self.hdr();
        // SeqCst (a Release store, and ordered before the `sleeping` load below): see the module
        // docs for why the reader cannot miss both this store and our wake.
        h.prod.tail.store(pos, SeqCst);
        wake_if_sleeping(&h.data_wait);
    }

    /// Reader: copies what is available, up to `buf.len()` bytes, and returns how many: 0 when the
    /// ring is empty (then, if [`Ring::is_closed`] was true *before* this call, the stream has
    /// ended). Never blocks. Wakes a writer sleeping in [`Ring::wait_writable`].
    pub fn read(&self, buf: &mut [u8]) -> usize {
        self.read_with(buf, false)
    }

    /// Reader: [`Ring::read`], the copies into `buf` bypassing the cache (non-temporal stores,
    /// `stream_copy`): for a large message that nothing reads soon.
    pub fn read_streaming(&self, buf: &mut [u8]) -> usize {
        let n = self.read_with(buf, true);
        super::stream_copy::fence();
        n
    }

    fn read_with(&self, buf: &mut [u8], streaming: bool) -> usize {
        let copy = if streaming {
            super::stream_copy::copy_unfenced
        } else {
            crate::copy::copy_bytes
        };
        let mut done = 0;
        // Whole bytes: every position is aligned to one, so the ring always hands them over.
        let read = self.read_in_place(buf.len(), 1, |part| {
            let dst = &mut buf[done..done + part.len()];
            // SAFETY: both are `part.len()` bytes; `part` lies in the data region, which only
            // ring handles reach, and `dst` is an exclusive borrow of the caller's buffer, so
            // they do not overlap.
            unsafe { copy(part.as_ptr(), dst.as_mut_ptr(), part.len()) };
            done += part.len();
        });
        read.unwrap_or(0)
    }

    /// Reader: hands up to `max` published bytes to `f` where they lie in the data region,
    /// whole `unit`s only, a contiguous part of at most [`PUBLISH_EVERY`] bytes at a time, and
    /// gives each part's space back once `f` returns (so the writer refills while we go on): a
    /// reduction reads the message straight from the ring, without first copying it out, and
    /// [`Ring::read`] copies each part out. Returns how many bytes `f` was handed (0 when
    /// less than a unit is there), or `None` when the next byte is not aligned to `unit` (a power
    /// of two, at most 8): then read it with a copy. Never blocks; wakes a sleeping writer.
    pub fn read_in_place(
        &self,
        max: usize,
        unit: usize,
        mut f: impl FnMut(&[u8]),
    ) -> Option<usize> {
        debug_assert!(unit.is_power_of_two() && unit <= 8);
        let h = self.hdr();
        let head = h.cons.head.load(Relaxed); // our own counter
        let base = self.data.as_ptr();
        if (base as usize).wrapping_add((head & self.mask) as usize) & (unit - 1) != 0 {
            return None;
        }
        let mut avail = self.used(head, self.seen_tail.get());
        if avail < max {
            // Acquire: the writer's copies into these bytes happened before we read them.
            let tail = h.prod.tail.load(Acquire);
            self.seen_tail.set(tail);
            avail = self.used(head, tail);
        }
        let n = avail.min(max) / unit * unit;
        let mut done = 0;
        while done < n {
            let off = ((head + done as u64) & self.mask) as usize;
            // A multiple of `unit`: so are `n - done` and `PUBLISH_EVERY`, and `cap - off` (`off`
            // is one, as the head was aligned and moves by whole units, and `cap` is a power of
            // two, so one too where it holds a unit at all: `n` is 0 otherwise).
            let take = (n - done).min(PUBLISH_EVERY).min(self.cap - off);
            // SAFETY: `off + take <= cap`, so the part lies in the data region; its bytes are
            // published (by the Acquire load of `tail` that computed `avail`, or an older view of
            // it) and the writer does not touch them until `head` passes them, which happens only
            // below, after `f` has returned and the slice is gone. We are the only reader.
            let part = unsafe { std::slice::from_raw_parts(base.add(off), take) };
            f(part);
            done += take;
            // SeqCst, as in `read_with`: our reads happened before the writer reuses the space,
            // and the store is ordered before the `sleeping` load of the wake-up.
            h.cons.head.store(head + done as u64, SeqCst);
            wake_if_sleeping(&h.space_wait);
        }
        Some(n)
    }

    /// Bytes published and not yet read (a snapshot).
    pub fn readable(&self) -> usize {
        let h = self.hdr();
        let head = h.cons.head.load(Acquire);
        self.used(head, h.prod.tail.load(Acquire))
    }

    /// Bytes that a write could accept now (a snapshot).
    #[allow(dead_code)] // the ring's documented API, exercised by its tests; links use the `_or` forms
    pub fn writable(&self) -> usize {
        let h = self.hdr();
        let tail = h.prod.tail.load(Acquire);
        self.free(self.used(h.cons.head.load(Acquire), tail))
    }

    /// Writer: no more data. The reader reads what was written before, then sees the end: a
    /// [`Ring::read`] returning 0 after [`Ring::is_closed`] returned true. Later writes accept
    /// nothing. Wakes both sides if they sleep. Idempotent; the reader may call it too (for
    /// instance when it learns that the writer's process died), with the same effect.
    ///
    /// To detect the end without a race against a last write, check `is_closed()` first, then
    /// `read()`: a close is published after the data before it, so if the flag was seen, a read
    /// that follows sees all of that data.
    pub fn close(&self) {
        let h = self.hdr();
        // SeqCst: Release (the data before the close is visible to whoever sees it), and ordered
        // before the `sleeping` loads in the wake-ups, as for `tail`.
        h.prod.closed.store(1, SeqCst);
        wake_if_sleeping(&h.data_wait);
        wake_if_sleeping(&h.space_wait);
    }

    /// Whether the ring was closed ([`Ring::close`]). Acquire: data written before the close is
    /// visible to reads after this returns true.
    pub fn is_closed(&self) -> bool {
        self.hdr().prod.closed.load(Acquire) != 0
    }

    /// Reader: sleeps until data is readable, the ring is closed, or `timeout` passes (at once if
    /// either holds already, or if `timeout` is zero). May return early for no reason: re-check.
    #[allow(dead_code)] // the ring's documented API, exercised by its tests; links use the `_or` forms
    pub fn wait_readable(&self, timeout: Duration) {
        let h = self.hdr();
        self.sleep(&h.data_wait, timeout, || {
            h.prod.tail.load(SeqCst) != h.cons.head.load(Relaxed) || h.prod.closed.load(SeqCst) != 0
        });
    }

    /// Writer: sleeps until some space is free, the ring is closed, or `timeout` passes (at once if
    /// either holds already, or if `timeout` is zero). May return early for no reason: re-check.
    pub fn wait_writable(&self, timeout: Duration) {
        let h = self.hdr();
        self.sleep(&h.space_wait, timeout, || {
            let tail = h.prod.tail.load(Relaxed);
            self.free(self.used(h.cons.head.load(SeqCst), tail)) > 0
                || h.prod.closed.load(SeqCst) != 0
        });
    }

    /// Reader: like [`Ring::wait_readable`], but also returns when `also()` holds. `also` must
    /// read what the writer publishes with SeqCst loads, and the writer must call
    /// [`Ring::wake_reader`] after publishing it (a SeqCst store), so no wake-up is lost.
    pub fn wait_readable_or(&self, timeout: Duration, also: impl Fn() -> bool) {
        let h = self.hdr();
        self.sleep(&h.data_wait, timeout, || {
            h.prod.tail.load(SeqCst) != h.cons.head.load(Relaxed)
                || h.prod.closed.load(SeqCst) != 0
                || also()
        });
    }

    /// Writer: sleeps on the writer's futex word until `ready()` holds, the ring is closed, or
    /// `timeout` passes, whatever the ring's free space. `ready` must read what the reader
    /// publishes with SeqCst loads, and the reader must call [`Ring::wake_writer`] after
    /// publishing it.
    pub fn wait_writer_event(&self, timeout: Duration, ready: impl Fn() -> bool) {
        let h = self.hdr();
        self.sleep(&h.space_wait, timeout, || {
            h.prod.closed.load(SeqCst) != 0 || ready()
        });
    }

    /// Writer: wakes the reader if it sleeps (after publishing something outside the ring that
    /// its [`Ring::wait_readable_or`] condition reads).
    pub fn wake_reader(&self) {
        wake_if_sleeping(&self.hdr().data_wait);
    }

    /// Reader: wakes the writer if it sleeps (after publishing something outside the ring that
    /// its [`Ring::wait_writer_event`] condition reads).
    pub fn wake_writer(&self) {
        wake_if_sleeping(&self.hdr().space_wait);
    }

    /// Writer: bytes ever written to the stream (the writer's own counter).
    pub fn written(&self) -> u64 {
        self.hdr().prod.tail.load(Relaxed)
    }

    /// Reader: bytes ever read from the stream (the reader's own counter).
    pub fn consumed(&self) -> u64 {
        self.hdr().cons.head.load(Relaxed)
    }

    /// The sleeper's half of the protocol in the module docs: read the sequence, announce,
    /// re-check `ready` (which must use SeqCst loads of what the other side publishes), wait.
    fn sleep(&self, w: &Sleep, timeout: Duration, ready: impl Fn() -> bool) {
        if timeout.is_zero() {
            return;
        }
        let seq = w.seq.load(SeqCst);
        w.sleeping.store(1, SeqCst);
        if !ready() {
            futex::wait(&w.seq, seq, timeout);
        }
        w.sleeping.store(0, SeqCst);
    }

    /// Whether the reader is announced as sleeping (tests synchronise on it).
    #[cfg(test)]
    fn reader_sleeping(&self) -> bool {
        self.hdr().data_wait.sleeping.load(SeqCst) != 0
    }

    /// Whether the writer is announced as sleeping.
    #[cfg(test)]
    fn writer_sleeping(&self) -> bool {
        self.hdr().space_wait.sleeping.load(SeqCst) != 0
    }
}

/// The waker's half: after publishing (a SeqCst store), wake the other side if it announced that
/// it sleeps. No system call otherwise.
fn wake_if_sleeping(w: &Sleep) {
    if w.sleeping.load(SeqCst) != 0 {
        w.seq.fetch_add(1, SeqCst);
        futex::wake(&w.seq, 1);
    }
}

impl fmt::Debug for Ring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = self.hdr();
        f.debug_struct("Ring")
            .field("capacity", &self.cap)
            .field("head", &h.cons.head.load(Relaxed))
            .field("tail", &h.prod.tail.load(Relaxed))
            .field("closed", &(h.prod.closed.load(Relaxed) != 0))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::shm::segment::{self, Segment};
    use std::io::Read;
    use std::process::{Command, Stdio};
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;

    /// Heap memory aligned like a mapping's cache lines, as backing for rings in tests.
    #[repr(C, align(64))]
    #[derive(Clone, Copy)]
    struct Line([u8; 64]);

    struct Mem(Vec<Line>);

    impl Mem {
        fn for_ring(capacity: usize) -> Mem {
            Mem(vec![
                Line([0; 64]);
                Ring::bytes_needed(capacity).div_ceil(64)
            ])
        }
        fn ptr(&mut self) -> *mut u8 {
            self.0.as_mut_ptr().cast()
        }
    }

    /// A writer and a reader handle on one fresh ring in `mem`.
    fn pair(mem: &mut Mem, capacity: usize) -> (Ring, Ring) {
        let p = mem.ptr();
        // SAFETY: `mem` is 64-aligned, `bytes_needed(capacity)` long, outlives the handles (the
        // callers keep it alive until they are dropped), and is used only through them.
        unsafe {
            (
                Ring::init(p, capacity),
                Ring::attach(p, capacity).expect("attach"),
            )
        }
    }

    /// A third handle on the ring in `mem`, used only to look at the sleep flags.
    fn observer(mem: &mut Mem, capacity: usize) -> Ring {
        // SAFETY: as in `pair`; the observer neither reads nor writes data.
        unsafe { Ring::attach(mem.ptr(), capacity).expect("attach") }
    }

    /// xorshift64: deterministic pseudo-random numbers without a crate.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        /// Uniform-ish in `0..n`.
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Byte `i` of the test stream: a mix of `i`, so a shifted or repeated block never matches.
    fn pattern(i: u64) -> u8 {
        let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^= x >> 29;
        (x >> 32) as u8
    }

    fn fill(buf: &mut [u8], from: u64) {
        for (k, b) in buf.iter_mut().enumerate() {
            *b = pattern(from + k as u64);
        }
    }

    /// One wait bounded by `deadline`, failing on a lost wake-up: a wait that lasts its full
    /// (long) timeout although its condition holds means that the other side published and the
    /// wake-up never came.
    fn wait_checked(ring: &Ring, for_data: bool, deadline: Instant) {
        const PER_WAIT: Duration = Duration::from_secs(5);
        let now = Instant::now();
        assert!(
            now < deadline,
            "test deadline passed while waiting ({ring:?})"
        );
        let t = PER_WAIT.min(deadline - now);
        if for_data {
            ring.wait_readable(t);
        } else {
            ring.wait_writable(t);
        }
        let took = now.elapsed();
        if took >= PER_WAIT {
            let ready = if for_data {
                ring.readable() > 0 || ring.is_closed()
            } else {
                ring.writable() > 0
            };
            assert!(
                !ready,
                "lost wake-up: a wait took {took:?} although it could go on ({ring:?})"
            );
        }
    }

    /// Closes the ring and raises `abort` if the thread panics, so the other side stops at once.
    struct OnPanic<'a>(&'a Ring, &'a AtomicBool);

    impl Drop for OnPanic<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                self.1.store(true, SeqCst);
                self.0.close();
            }
        }
    }

    /// Sends `src` through the ring in randomly sized groups of 0 to 3 slices, waiting (or
    /// sometimes spinning) when full, then closes.
    fn produce(ring: &Ring, src: &[u8], seed: u64, deadline: Instant, abort: &AtomicBool) {
        let _guard = OnPanic(ring, abort);
        let mut rng = Rng(seed);
        let mut pos = 0;
        while pos < src.len() {
            assert!(!abort.load(Relaxed), "the reader failed");
            let mut at = pos;
            let mut slices = Vec::new();
            for _ in 0..=rng.below(3) {
                let len = rng.below(24 << 10).min(src.len() - at);
                slices.push(IoSlice::new(&src[at..at + len]));
                at += len;
            }
            let n = ring.write(&slices);
            pos += n;
            if n == 0 && at > pos {
                if rng.below(4) == 0 {
                    std::hint::spin_loop();
                } else {
                    wait_checked(ring, false, deadline);
                }
            }
        }
        ring.close();
    }

    /// Reads until the end, in random sizes, waiting (or sometimes spinning) when empty; calls
    /// `check(offset, bytes)` on each piece and returns the total.
    fn consume(
        ring: &Ring,
        seed: u64,
        deadline: Instant,
        abort: &AtomicBool,
        mut check: impl FnMut(u64, &[u8]),
    ) -> u64 {
        let _guard = OnPanic(ring, abort);
        let mut rng = Rng(seed);
        let mut buf = vec![0u8; 70_000];
        let mut total = 0u64;
        loop {
            assert!(!abort.load(Relaxed), "the writer failed");
            let closed = ring.is_closed();
            let want = 1 + rng.below(buf.len());
            let n = ring.read(&mut buf[..want]);
            if n > 0 {
                check(total, &buf[..n]);
                total += n as u64;
            } else if closed {
                return total;
            } else if rng.below(4) == 0 {
                std::hint::spin_loop();
            } else {
                wait_checked(ring, true, deadline);
            }
        }
    }

    #[test]
    fn layout_sizes() {
        assert_eq!(Ring::HEADER, 320);
        assert_eq!(Ring::bytes_needed(1), 320 + 64);
        assert_eq!(Ring::bytes_needed(64), 320 + 64);
        assert_eq!(Ring::bytes_needed(1 << 20), 320 + (1 << 20));
        assert!(std::panic::catch_unwind(|| Ring::bytes_needed(100)).is_err());
        assert!(std::panic::catch_unwind(|| Ring::bytes_needed(0)).is_err());
    }

    #[test]
    fn stream_64_mib_through_64_kib_with_random_sizes() {
        let total: usize = if cfg!(miri) { 256 << 10 } else { 64 << 20 };
        let mut src = vec![0u8; total];
        fill(&mut src, 0);
        let mut mem = Mem::for_ring(64 << 10);
        let (w, r) = pair(&mut mem, 64 << 10);
        let deadline = Instant::now() + Duration::from_secs(120);
        let abort = &AtomicBool::new(false);
        let src = &src[..];
        let got = std::thread::scope(|s| {
            s.spawn(move || produce(&w, src, 0x1234_5678_9abc_def1, deadline, abort));
            consume(&r, 0x0fed_cba9_8765_4321, deadline, abort, |at, bytes| {
                let at = at as usize;
                assert!(at + bytes.len() <= src.len(), "more bytes than were sent");
                assert!(
                    bytes == &src[at..at + bytes.len()],
                    "wrong bytes at offset {at}"
                );
            })
        });
        assert_eq!(got, total as u64);
        assert_eq!(r.readable(), 0);
    }

    #[test]
    fn writes_and_reads_of_many_publication_chunks_keep_the_stream() {
        // Slices that straddle the points where a write publishes its progress, a ring that
        // wraps in the middle of a chunk, and reads of other lengths than the writes.
        let cap = 4 * PUBLISH_EVERY;
        let mut mem = Mem::for_ring(cap);
        let (w, r) = pair(&mut mem, cap);
        let mut rng = Rng(0x5eed);
        let (mut sent, mut got) = (0u64, 0u64);
        let mut out = vec![0u8; cap];
        for _ in 0..40 {
            let lens = [
                rng.below(PUBLISH_EVERY + 7),
                1,
                rng.below(2 * PUBLISH_EVERY),
            ];
            let mut parts: Vec<Vec<u8>> = Vec::new();
            let mut at = sent;
            for len in lens {
                let mut part = vec![0u8; len];
                fill(&mut part, at);
                at += len as u64;
                parts.push(part);
            }
            let slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
            let n = w.write(&slices);
            assert_eq!(n as u64, (at - sent).min(cap as u64 - (sent - got)));
            sent += n as u64;
            while got < sent {
                let want = rng.below(3 * PUBLISH_EVERY) + 1;
                let k = r.read(&mut out[..want.min(cap)]);
                assert!(k > 0, "published bytes must be readable");
                for (i, b) in out[..k].iter().enumerate() {
                    assert_eq!(*b, pattern(got + i as u64), "byte {}", got + i as u64);
                }
                got += k as u64;
            }
            assert_eq!(r.readable(), 0);
        }
    }

    #[test]
    fn wraps_around_in_two_parts() {
        let mut mem = Mem::for_ring(16);
        let (w, r) = pair(&mut mem, 16);
        assert_eq!(w.write(&[IoSlice::new(b"0123456789")]), 10);
        let mut buf = [0u8; 16];
        assert_eq!(r.read(&mut buf), 10);
        assert_eq!(&buf[..10], b"0123456789");
        // Positions 10..16 then 0..6: both the write and the read wrap.
        assert_eq!(
            w.write(&[IoSlice::new(b"abcdefg"), IoSlice::new(b"hijkl")]),
            12
        );
        assert_eq!((r.readable(), w.writable()), (12, 4));
        assert_eq!(r.read(&mut buf[..5]), 5);
        assert_eq!(r.read(&mut buf[5..]), 7);
        assert_eq!(&buf[..12], b"abcdefghijkl");
        // Many laps with sizes that do not divide the capacity.
        let mut at = 0u64;
        let mut out = 0u64;
        for k in 0..5000u64 {
            let mut chunk = [0u8; 13];
            let len = (k % 14) as usize;
            fill(&mut chunk[..len], at);
            at += w.write(&[IoSlice::new(&chunk[..len])]) as u64;
            let mut got = [0u8; 16];
            let n = r.read(&mut got[..(k % 9) as usize + 1]);
            for (i, b) in got[..n].iter().enumerate() {
                assert_eq!(*b, pattern(out + i as u64), "byte {}", out + i as u64);
            }
            out += n as u64;
        }
        assert_eq!(out + r.readable() as u64, at);
    }

    #[test]
    fn a_reader_in_place_gets_whole_aligned_units_in_order_and_frees_their_space() {
        let mut mem = Mem::for_ring(64);
        let (w, r) = pair(&mut mem, 64);
        // Not at a unit's boundary: in place refuses, a copy reads on.
        assert_eq!(w.write(&[IoSlice::new(b"abc")]), 3);
        assert_eq!(r.read_in_place(8, 4, |_| panic!("nothing whole")), Some(0));
        let mut one = [0u8; 1];
        assert_eq!(r.read(&mut one), 1);
        assert_eq!(r.read_in_place(8, 4, |_| panic!("misaligned")), None);
        assert_eq!(w.write(&[IoSlice::new(b"d")]), 1);
        assert_eq!(r.read(&mut [0u8; 3]), 3);
        // Laps of odd-sized writes: the reader takes whole units, each part aligned and within
        // the data region, the stream in order, and the writer gets the space back.
        let (mut at, mut out) = (4u64, 4u64);
        for k in 0..3000u64 {
            let mut chunk = [0u8; 40];
            let len = (k % 37) as usize + 1;
            fill(&mut chunk[..len], at);
            at += w.write(&[IoSlice::new(&chunk[..len])]) as u64;
            let mut parts = 0;
            let n = r
                .read_in_place((k % 29) as usize + 1, 4, |part| {
                    assert_eq!(part.as_ptr() as usize % 4, 0, "aligned");
                    assert_eq!(part.len() % 4, 0, "whole units");
                    for (i, b) in part.iter().enumerate() {
                        assert_eq!(*b, pattern(out + i as u64), "byte {}", out + i as u64);
                    }
                    out += part.len() as u64;
                    parts += 1;
                })
                .expect("aligned: the stream moves by whole units from position 4");
            assert!(
                n <= (k % 29) as usize + 1 && parts <= 2,
                "at most the max, wrapping once"
            );
        }
        assert!(out > 100 * 64, "the stream went round many times: {out}");
        assert_eq!(out + r.readable() as u64, at);
    }

    #[test]
    fn close_lets_the_reader_drain_then_see_the_end() {
        let mut mem = Mem::for_ring(64);
        let (w, r) = pair(&mut mem, 64);
        assert!(!r.is_closed());
        assert_eq!(w.write(&[IoSlice::new(b"abc")]), 3);
        w.close();
        w.close(); // idempotent
        assert!(r.is_closed() && w.is_closed());
        assert_eq!(
            w.write(&[IoSlice::new(b"more")]),
            0,
            "nothing may follow a close"
        );
        let mut buf = [0u8; 8];
        assert_eq!(r.read(&mut buf), 3);
        assert_eq!(&buf[..3], b"abc");
        assert_eq!(r.read(&mut buf), 0);
        // A closed ring never makes anyone wait.
        let t = Instant::now();
        r.wait_readable(Duration::from_secs(30));
        w.wait_writable(Duration::from_secs(30));
        assert!(t.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn writes_larger_than_the_capacity_are_partial() {
        let mut mem = Mem::for_ring(64);
        let (w, r) = pair(&mut mem, 64);
        let mut big = [0u8; 100];
        fill(&mut big, 0);
        assert_eq!(w.write(&[IoSlice::new(&big)]), 64);
        assert_eq!(
            w.write(&[IoSlice::new(&big)]),
            0,
            "a full ring takes nothing"
        );
        assert_eq!(w.writable(), 0);
        let mut buf = [0u8; 100];
        assert_eq!(r.read(&mut buf[..10]), 10);
        assert_eq!(w.write(&[IoSlice::new(&big[64..])]), 10);
        assert_eq!(r.read(&mut buf[10..]), 64);
        assert_eq!(&buf[..74], &big[..74]);
        // Several slices: the stream is cut wherever the space ends, in order.
        let (a, b, c) = (&big[..30], &big[30..60], &big[60..90]);
        assert_eq!(
            w.write(&[IoSlice::new(a), IoSlice::new(b), IoSlice::new(c)]),
            64
        );
        assert_eq!(r.read(&mut buf), 64);
        assert_eq!(&buf[..64], &big[..64]);
        // Empty writes and reads do nothing.
        assert_eq!(w.write(&[]), 0);
        assert_eq!(w.write(&[IoSlice::new(&[])]), 0);
        assert_eq!(r.read(&mut []), 0);
    }

    #[test]
    fn attach_checks_magic_capacity_and_alignment() {
        let mut mem = Mem::for_ring(256);
        let p = mem.ptr();
        // SAFETY: `p` is valid, aligned memory for a 256-byte ring, used only through rings here.
        let err = unsafe { Ring::attach(p, 256) }.expect_err("zeroed memory is no ring");
        assert!(err.contains("magic"), "{err}");
        // SAFETY: as above.
        let w = unsafe { Ring::init(p, 256) };
        // SAFETY: as above; 128 is smaller than the memory, so the attach is in bounds.
        let err = unsafe { Ring::attach(p, 128) }.expect_err("wrong capacity");
        assert!(err.contains("256"), "{err}");
        // SAFETY: `p + 8` lies inside the memory; attach rejects it before reading.
        let err = unsafe { Ring::attach(p.add(8), 256) }.expect_err("misaligned");
        assert!(err.contains("aligned"), "{err}");
        // SAFETY: as above.
        let r = unsafe { Ring::attach(p, 256) }.expect("attach");
        assert_eq!(w.write(&[IoSlice::new(b"shared")]), 6);
        let mut buf = [0u8; 6];
        assert_eq!(r.read(&mut buf), 6);
        assert_eq!(&buf, b"shared");
        assert_eq!(r.capacity(), 256);
    }

    /// Spins (no sleep) until `cond` holds or the deadline passes.
    fn spin_until(deadline: Instant, what: &str, cond: impl Fn() -> bool) {
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::hint::spin_loop();
        }
    }

    #[test]
    fn wait_readable_wakes_promptly_when_data_arrives() {
        let mut mem = Mem::for_ring(64);
        let (w, r) = pair(&mut mem, 64);
        let look = observer(&mut mem, 64);
        let deadline = Instant::now() + Duration::from_secs(20);
        let woken = std::thread::scope(|s| {
            let sleeper = s.spawn(move || {
                // Each wait would last 60 s: a return within the deadline proves the wake.
                while r.readable() == 0 {
                    assert!(Instant::now() < deadline, "not woken");
                    r.wait_readable(Duration::from_secs(60));
                }
                Instant::now()
            });
            spin_until(deadline, "the reader to sleep", || look.reader_sleeping());
            let sent = Instant::now();
            assert_eq!(w.write(&[IoSlice::new(b"x")]), 1);
            sleeper.join().map(|t| t.saturating_duration_since(sent))
        });
        let woken = woken.expect("the reader panicked");
        println!("wait_readable woken {woken:?} after the write");
        assert!(woken < Duration::from_secs(20));
    }

    #[test]
    fn wait_writable_wakes_promptly_when_space_frees() {
        // A full ring, and a ring with room whose window is full: the writer must sleep (not
        // spin on the room beyond its window) and wake when the reader frees a byte.
        for window in [256, 64] {
            let mut mem = Mem::for_ring(256);
            let (w, r) = pair(&mut mem, 256);
            let look = observer(&mut mem, 256);
            w.set_window(window);
            assert_eq!(w.write(&[IoSlice::new(&[7u8; 300])]), window);
            let deadline = Instant::now() + Duration::from_secs(20);
            std::thread::scope(|s| {
                let sleeper = s.spawn(move || {
                    while w.writable() == 0 {
                        assert!(Instant::now() < deadline, "not woken");
                        w.wait_writable(Duration::from_secs(60));
                    }
                });
                spin_until(deadline, "the writer to sleep", || look.writer_sleeping());
                assert_eq!(r.read(&mut [0u8; 1]), 1);
                sleeper.join().expect("the writer panicked");
            });
        }
    }

    #[test]
    fn a_window_limits_how_far_the_writer_runs_ahead() {
        let mut mem = Mem::for_ring(256);
        let (w, r) = pair(&mut mem, 256);
        let mut big = [0u8; 300];
        fill(&mut big, 0);
        w.set_window(100);
        assert_eq!(w.write(&[IoSlice::new(&big)]), 100);
        assert_eq!(w.writable(), 0, "a full window takes nothing");
        assert_eq!(w.write(&[IoSlice::new(&big[100..])]), 0);
        let mut buf = [0u8; 300];
        assert_eq!(r.read(&mut buf[..40]), 40);
        assert_eq!(w.write(&[IoSlice::new(&big[100..])]), 40);
        // A window larger than the ring is the ring; a narrower one keeps what is written.
        w.set_window(usize::MAX);
        assert_eq!(w.write(&[IoSlice::new(&big[140..])]), 156);
        w.set_window(0);
        assert_eq!(r.read(&mut buf[40..]), 256);
        assert_eq!(&buf[..296], &big[..296]);
        assert_eq!(
            w.write(&[IoSlice::new(&big[296..])]),
            1,
            "a window holds a byte at least"
        );
        assert_eq!(w.writable(), 0);
    }

    #[test]
    fn close_wakes_a_sleeping_reader() {
        let mut mem = Mem::for_ring(64);
        let (w, r) = pair(&mut mem, 64);
        let look = observer(&mut mem, 64);
        let deadline = Instant::now() + Duration::from_secs(20);
        std::thread::scope(|s| {
            let sleeper = s.spawn(move || {
                while !r.is_closed() {
                    assert!(Instant::now() < deadline, "not woken");
                    r.wait_readable(Duration::from_secs(60));
                }
            });
            spin_until(deadline, "the reader to sleep", || look.reader_sleeping());
            w.close();
            sleeper.join().expect("the reader panicked");
        });
    }

    #[test]
    fn sleep_wake_stress_ping_pong() {
        // Every message makes the other side sleep and be woken: a lost wake-up shows as a wait
        // that lasts its full timeout (wait_checked fails then).
        let rounds: u64 = if cfg!(miri) { 50 } else { 20_000 };
        let (mut ma, mut mb) = (Mem::for_ring(64), Mem::for_ring(64));
        let (a_tx, a_rx) = pair(&mut ma, 64);
        let (b_tx, b_rx) = pair(&mut mb, 64);
        let deadline = Instant::now() + Duration::from_secs(120);
        let abort = &AtomicBool::new(false);
        let recv = move |ring: &Ring| -> u64 {
            let mut got = [0u8; 8];
            let mut n = 0;
            while n < 8 {
                assert!(!abort.load(Relaxed), "the other side failed");
                wait_checked(ring, true, deadline); // always wait first: returns at once if ready
                n += ring.read(&mut got[n..]);
            }
            u64::from_le_bytes(got)
        };
        std::thread::scope(|s| {
            s.spawn(move || {
                let _guard = OnPanic(&b_tx, abort);
                for i in 0..rounds {
                    assert_eq!(recv(&a_rx), i);
                    assert_eq!(b_tx.write(&[IoSlice::new(&(i + 1).to_le_bytes())]), 8);
                }
            });
            let _guard = OnPanic(&a_tx, abort);
            for i in 0..rounds {
                assert_eq!(a_tx.write(&[IoSlice::new(&i.to_le_bytes())]), 8);
                assert_eq!(recv(&b_rx), i + 1);
            }
        });
    }

    #[test]
    fn sleep_wake_stress_small_messages_streamed() {
        // A tiny ring and a reader that always waits before reading: the writer fills it and
        // sleeps for space, the reader sleeps for data, over and over.
        let count: u64 = if cfg!(miri) { 200 } else { 200_000 };
        let mut mem = Mem::for_ring(64);
        let (w, r) = pair(&mut mem, 64);
        let deadline = Instant::now() + Duration::from_secs(120);
        let abort = &AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(move || {
                let _guard = OnPanic(&w, abort);
                for i in 0..count {
                    let msg = i.to_le_bytes();
                    let mut n = 0;
                    while n < 8 {
                        assert!(!abort.load(Relaxed), "the reader failed");
                        n += w.write(&[IoSlice::new(&msg[n..])]);
                        if n < 8 {
                            wait_checked(&w, false, deadline);
                        }
                    }
                }
                w.close();
            });
            let _guard = OnPanic(&r, abort);
            let mut next = 0u64;
            let mut msg = [0u8; 8];
            let mut n = 0;
            loop {
                assert!(!abort.load(Relaxed), "the writer failed");
                wait_checked(&r, true, deadline);
                let closed = r.is_closed();
                let got = r.read(&mut msg[n..]);
                n += got;
                if n == 8 {
                    assert_eq!(u64::from_le_bytes(msg), next);
                    next += 1;
                    n = 0;
                }
                if got == 0 && closed {
                    break;
                }
            }
            assert_eq!((next, n), (count, 0));
        });
    }

    #[test]
    fn sleep_wake_race_sweep() {
        // The sleeper writes, then at once waits for the reply; the responder spins for the
        // message and replies after a random delay of a few hundred nanoseconds, so its publish
        // lands anywhere in the sleeper's announce / re-check / futex window. A protocol with a
        // gap there loses the wake-up and a wait lasts its full timeout (wait_checked fails).
        let rounds: u64 = if cfg!(miri) { 20 } else { 100_000 };
        let (mut ma, mut mb) = (Mem::for_ring(64), Mem::for_ring(64));
        let (a_tx, a_rx) = pair(&mut ma, 64);
        let (b_tx, b_rx) = pair(&mut mb, 64);
        let deadline = Instant::now() + Duration::from_secs(120);
        let abort = &AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(move || {
                let _guard = OnPanic(&b_tx, abort);
                let mut rng = Rng(0x5eed_1234_abcd_ef01);
                let mut m = [0u8; 8];
                for i in 0..rounds {
                    let mut n = 0;
                    let mut spins = 0u32;
                    while n < 8 {
                        n += a_rx.read(&mut m[n..]);
                        spins = spins.wrapping_add(1);
                        if spins % 4096 == 0 {
                            assert!(!abort.load(Relaxed), "the sleeper failed");
                            assert!(Instant::now() < deadline, "deadline passed");
                        }
                    }
                    assert_eq!(u64::from_le_bytes(m), i);
                    let scale = 1 << rng.below(9); // log-uniform: mostly short delays
                    for _ in 0..rng.below(scale) {
                        std::hint::spin_loop();
                    }
                    assert_eq!(b_tx.write(&[IoSlice::new(&m)]), 8);
                }
            });
            let _guard = OnPanic(&a_tx, abort);
            let mut m = [0u8; 8];
            for i in 0..rounds {
                assert_eq!(a_tx.write(&[IoSlice::new(&i.to_le_bytes())]), 8);
                let mut n = 0;
                while n < 8 {
                    assert!(!abort.load(Relaxed), "the responder failed");
                    wait_checked(&b_rx, true, deadline);
                    n += b_rx.read(&mut m[n..]);
                }
                assert_eq!(u64::from_le_bytes(m), i);
            }
        });
    }

    /// Environment variable that turns `cross_process_child_role` into the writing child.
    const CHILD_ENV: &str = "PSYNE_TEST_RING_CHILD_SEGMENT";
    const XPROC_CAP: usize = 64 << 10;
    const XPROC_BYTES: u64 = 16 << 20;

    /// Unlinks a segment name when dropped, even when the test fails.
    struct Unlink(String);

    impl Drop for Unlink {
        fn drop(&mut self) {
            let _ = segment::unlink(&self.0);
        }
    }

    /// Kills and reaps the child if the test fails before it does.
    struct Reap(Option<std::process::Child>);

    impl Drop for Reap {
        fn drop(&mut self) {
            if let Some(mut child) = self.0.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    /// The child's side of `ring_across_processes` (does nothing in a normal test run): opens the
    /// segment named in the environment, attaches, writes the pattern in random sizes, closes.
    #[test]
    #[cfg_attr(miri, ignore = "needs shm_open and a child process")]
    fn cross_process_child_role() {
        let Ok(name) = std::env::var(CHILD_ENV) else {
            return;
        };
        let seg = Segment::open(&name, Ring::bytes_needed(XPROC_CAP)).expect("child: open");
        // SAFETY: the mapping is page aligned and `bytes_needed(XPROC_CAP)` long, outlives the
        // ring (dropped first), and the parent only reads.
        let ring = unsafe { Ring::attach(seg.as_ptr(), XPROC_CAP) }.expect("child: attach");
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut rng = Rng(0xdead_beef_cafe_f00d);
        let mut chunk = vec![0u8; 40_000];
        let mut pos = 0u64;
        while pos < XPROC_BYTES {
            let len = (1 + rng.below(chunk.len())).min((XPROC_BYTES - pos) as usize);
            fill(&mut chunk[..len], pos);
            let mut done = 0;
            while done < len {
                let n = ring.write(&[IoSlice::new(&chunk[done..len])]);
                done += n;
                if n == 0 {
                    wait_checked(&ring, false, deadline);
                }
            }
            pos += len as u64;
        }
        ring.close();
    }

    #[test]
    #[cfg_attr(miri, ignore = "needs shm_open and a child process")]
    fn ring_across_processes() {
        let name = format!("/psyne-test-{}-ring-xproc", std::process::id());
        let _unlink = Unlink(name.clone());
        let seg = Segment::create(&name, Ring::bytes_needed(XPROC_CAP)).expect("create");
        // SAFETY: the fresh mapping is page aligned and long enough; the ring is dropped before
        // the segment; the child only writes, this side only reads.
        let ring = unsafe { Ring::init(seg.as_ptr(), XPROC_CAP) };
        let this_test = module_path!().split_once("::").map_or("", |(_, rest)| rest);
        let child = Command::new(std::env::current_exe().expect("current_exe"))
            .args([
                &format!("{this_test}::cross_process_child_role"),
                "--exact",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &name)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning the test binary as the child");
        let mut child = Reap(Some(child));
        let deadline = Instant::now() + Duration::from_secs(60);
        let abort = AtomicBool::new(false);
        let got = consume(&ring, 42, deadline, &abort, |at, bytes| {
            for (k, b) in bytes.iter().enumerate() {
                assert_eq!(
                    *b,
                    pattern(at + k as u64),
                    "wrong byte at offset {}",
                    at + k as u64
                );
            }
        });
        let mut proc = child.0.take().expect("child");
        let status = proc.wait().expect("waiting for the child");
        let mut out = String::new();
        if let Some(mut o) = proc.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        if let Some(mut e) = proc.stderr.take() {
            let _ = e.read_to_string(&mut out);
        }
        assert!(status.success(), "the child failed ({status}):\n{out}");
        assert!(
            out.contains("1 passed"),
            "the child did not run its role:\n{out}"
        );
        assert_eq!(got, XPROC_BYTES);
    }

    /// Pins the calling thread to `cpu` (best effort).
    fn pin(cpu: usize) {
        // SAFETY: `cpu_set_t` is plain old data; all-zero is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid cpu_set_t and `cpu` is below CPU_SETSIZE on any test machine;
        // sched_setaffinity(0, ...) only changes the calling thread and reads `set`.
        unsafe {
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
        }
    }

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }

    /// One-way latency of an 8-byte message, ping-pong through two rings on two cores with
    /// spinning readers. Run with `cargo test --release -p psyne --lib bench_ -- --ignored
    /// --nocapture`.
    #[test]
    #[ignore = "benchmark: run explicitly in release mode"]
    fn bench_ping_pong_latency() {
        const ROUNDS: u64 = 200_000;
        let (mut ma, mut mb) = (Mem::for_ring(4096), Mem::for_ring(4096));
        let (a_tx, a_rx) = pair(&mut ma, 4096);
        let (b_tx, b_rx) = pair(&mut mb, 4096);
        let spin_read = |ring: &Ring| {
            let mut m = [0u8; 8];
            let mut n = 0;
            while n < 8 {
                n += ring.read(&mut m[n..]);
            }
            u64::from_le_bytes(m)
        };
        let mut runs = Vec::new();
        std::thread::scope(|s| {
            s.spawn(move || {
                pin(1);
                loop {
                    let v = spin_read(&a_rx);
                    assert_eq!(b_tx.write(&[IoSlice::new(&v.to_le_bytes())]), 8);
                    if v == u64::MAX {
                        break;
                    }
                }
            });
            pin(0);
            for run in 0..7 {
                let t = Instant::now();
                for i in 0..ROUNDS {
                    assert_eq!(a_tx.write(&[IoSlice::new(&i.to_le_bytes())]), 8);
                    assert_eq!(spin_read(&b_rx), i);
                }
                let one_way_us = t.elapsed().as_secs_f64() * 1e6 / (2 * ROUNDS) as f64;
                if run > 0 {
                    runs.push(one_way_us); // run 0 warms up
                }
            }
            assert_eq!(a_tx.write(&[IoSlice::new(&u64::MAX.to_le_bytes())]), 8);
            spin_read(&b_rx);
        });
        println!(
            "ring ping-pong, 8 B, one way: median {:.3} us, runs {runs:.3?}",
            median(runs.clone())
        );
        // Baseline in the same run: the bare cost of handing a flag between the two cores.
        let flag = &AtomicU64::new(0);
        let mut base = Vec::new();
        std::thread::scope(|s| {
            s.spawn(move || {
                pin(1);
                let mut v = 1;
                while v < 8 * ROUNDS {
                    while flag.load(Acquire) != v {
                        std::hint::spin_loop();
                    }
                    flag.store(v + 1, Release);
                    v += 2;
                }
            });
            pin(0);
            for _ in 0..4 {
                let t = Instant::now();
                for _ in 0..ROUNDS {
                    let v = flag.load(Relaxed);
                    flag.store(v + 1, Release);
                    while flag.load(Acquire) != v + 2 {
                        std::hint::spin_loop();
                    }
                }
                base.push(t.elapsed().as_secs_f64() * 1e6 / (2 * ROUNDS) as f64);
            }
        });
        println!(
            "baseline atomic flag ping-pong, one way: median {:.3} us",
            median(base)
        );
    }

    /// Streaming bandwidth through a 1 MiB ring in 256 KiB writes, two cores, spinning.
    #[test]
    #[ignore = "benchmark: run explicitly in release mode"]
    fn bench_stream_bandwidth() {
        const CAP: usize = 1 << 20;
        const CHUNK: usize = 256 << 10;
        const BYTES: u64 = 4 << 30;
        let mut src = vec![0u8; CHUNK];
        fill(&mut src, 0);
        let src = &src[..];
        let mut runs = Vec::new();
        for _ in 0..5 {
            let mut mem = Mem::for_ring(CAP);
            let (w, r) = pair(&mut mem, CAP);
            let t = Instant::now();
            std::thread::scope(|s| {
                s.spawn(move || {
                    pin(1);
                    let mut sent = 0u64;
                    while sent < BYTES {
                        let mut done = 0;
                        while done < CHUNK {
                            done += w.write(&[IoSlice::new(&src[done..])]);
                        }
                        sent += CHUNK as u64;
                    }
                });
                pin(0);
                let mut buf = vec![0u8; CHUNK];
                let mut got = 0u64;
                while got < BYTES {
                    got += r.read(&mut buf) as u64;
                }
            });
            runs.push(BYTES as f64 / t.elapsed().as_secs_f64() / 1e9);
        }
        println!(
            "ring stream, 1 MiB ring, 256 KiB writes: median {:.2} GB/s, runs {runs:.2?}",
            median(runs.clone())
        );
        // Baseline in the same run: one core copying the same chunks (a ring copies each byte
        // twice, on two cores, in parallel).
        let mut dst = vec![0u8; CHUNK];
        let mut base = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            let mut done = 0u64;
            while done < BYTES {
                dst.copy_from_slice(src);
                std::hint::black_box(&mut dst);
                done += CHUNK as u64;
            }
            base.push(BYTES as f64 / t.elapsed().as_secs_f64() / 1e9);
        }
        println!(
            "baseline memcpy of 256 KiB chunks, one core: median {:.2} GB/s",
            median(base)
        );
    }
}
