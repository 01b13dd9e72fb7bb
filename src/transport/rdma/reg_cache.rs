//! A cache of memory registrations: registering memory with an adapter pins its pages and costs
//! tens of microseconds, so a buffer sent from again and again is registered once. Ranges are
//! page aligned; a request inside a cached range hits; a request that overlaps cached ranges
//! without fitting in one is registered as their union, which replaces them; the least recently
//! used entries go when there are too many or they pin too much. Generic over the handle, so the
//! policy is tested without an adapter.
//!
//! A cached registration stays valid only while its memory stays mapped: the transport uses the
//! cache only where it was asked to (`PSY_RDMA_ZERO_COPY_BYTES`), see the README.

/// Page size registrations are aligned to.
pub const PAGE: usize = 4096;

/// The page-aligned range that covers `[addr, addr + len)` (at least one page).
pub fn page_span(addr: usize, len: usize) -> (usize, usize) {
    let start = addr - addr % PAGE;
    let end = (addr + len.max(1)).div_ceil(PAGE) * PAGE;
    (start, end - start)
}

#[derive(Debug)]
struct Entry<R> {
    start: usize,
    len: usize,
    last_used: u64,
    region: R,
}

impl<R> Entry<R> {
    fn covers(&self, start: usize, len: usize) -> bool {
        self.start <= start && start + len <= self.start + self.len
    }
    fn overlaps(&self, start: usize, len: usize) -> bool {
        self.start < start + len && start < self.start + self.len
    }
}

/// The cache. `R` is a registration (dropping it deregisters).
#[derive(Debug)]
pub struct RegCache<R> {
    entries: Vec<Entry<R>>,
    tick: u64,
    max_entries: usize,
    max_bytes: usize,
}

impl<R> RegCache<R> {
    /// A cache of at most `max_entries` registrations pinning at most `max_bytes` together (one
    /// registration larger than that is still kept, alone).
    pub fn new(max_entries: usize, max_bytes: usize) -> Self {
        RegCache {
            entries: Vec::new(),
            tick: 0,
            max_entries: max_entries.max(1),
            max_bytes,
        }
    }

    /// Registrations held.
    #[allow(dead_code)] // the cache's API, exercised by its tests; no caller needs it yet
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is cached.
    #[allow(dead_code)] // the cache's API, exercised by its tests; no caller needs it yet
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes pinned by the registrations held.
    pub fn bytes(&self) -> usize {
        self.entries.iter().map(|e| e.len).sum()
    }

    /// The cached ranges, as `(start, len)`, in no particular order.
    #[allow(dead_code)] // the cache's API, exercised by its tests; no caller needs it yet
    pub fn ranges(&self) -> Vec<(usize, usize)> {
        self.entries.iter().map(|e| (e.start, e.len)).collect()
    }

    /// The registration covering `[addr, addr + len)`, registering it with `register(start, len)`
    /// on a miss. Returns it and the registrations that left the cache (to drop after any work
    /// still using them is complete).
    pub fn get_or_register<E>(
        &mut self,
        addr: usize,
        len: usize,
        register: impl FnOnce(usize, usize) -> Result<R, E>,
    ) -> Result<(&R, Vec<R>), E> {
        self.tick += 1;
        let (start, span) = page_span(addr, len);
        if let Some(i) = self.entries.iter().position(|e| e.covers(start, span)) {
            self.entries[i].last_used = self.tick;
            return Ok((&self.entries[i].region, Vec::new()));
        }
        // The union with every overlapping entry, which the new registration replaces.
        let (mut lo, mut hi) = (start, start + span);
        for e in self.entries.iter().filter(|e| e.overlaps(start, span)) {
            lo = lo.min(e.start);
            hi = hi.max(e.start + e.len);
        }
        let region = register(lo, hi - lo)?;
        let mut gone = self.remove_where(|e| e.overlaps(lo, hi - lo));
        self.entries.push(Entry {
            start: lo,
            len: hi - lo,
            last_used: self.tick,
            region,
        });
        gone.extend(self.evict());
        // Eviction reorders entries; the newest is the one used at this tick (a hit returned).
        let newest = self
            .entries
            .iter()
            .rposition(|e| e.last_used == self.tick)
            .unwrap_or(self.entries.len() - 1);
        Ok((&self.entries[newest].region, gone))
    }

    /// Drops every registration overlapping `[addr, addr + len)` (memory about to be unmapped).
    #[allow(dead_code)] // the cache's API, exercised by its tests; no caller needs it yet
    pub fn invalidate(&mut self, addr: usize, len: usize) -> Vec<R> {
        let (start, span) = page_span(addr, len);
        self.remove_where(|e| e.overlaps(start, span))
    }

    fn remove_where(&mut self, gone: impl Fn(&Entry<R>) -> bool) -> Vec<R> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.entries.len() {
            if gone(&self.entries[i]) {
                out.push(self.entries.swap_remove(i).region);
            } else {
                i += 1;
            }
        }
        out
    }

    /// Removes least recently used entries (never the newest) until within the limits.
    fn evict(&mut self) -> Vec<R> {
        let mut out = Vec::new();
        while self.entries.len() > 1
            && (self.entries.len() > self.max_entries || self.bytes() > self.max_bytes)
        {
            let oldest = self
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.last_used != self.tick)
                .min_by_key(|(_, e)| e.last_used)
                .map(|(i, _)| i);
            match oldest {
                Some(i) => out.push(self.entries.swap_remove(i).region),
                None => break,
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cell::Cell;

    /// A fake registration: which range it covers and a serial number.
    type Fake = (usize, usize, u32);

    fn reg(cache: &mut RegCache<Fake>, n: &Cell<u32>, addr: usize, len: usize) -> (Fake, usize) {
        let (r, gone) = cache
            .get_or_register(addr, len, |s, l| {
                n.set(n.get() + 1);
                Ok::<_, ()>((s, l, n.get()))
            })
            .unwrap();
        (*r, gone.len())
    }

    #[test]
    fn spans_are_page_aligned_and_cover_the_request() {
        assert_eq!(page_span(0, 0), (0, PAGE));
        assert_eq!(page_span(PAGE, PAGE), (PAGE, PAGE));
        assert_eq!(page_span(PAGE + 1, PAGE), (PAGE, 2 * PAGE));
        assert_eq!(page_span(10, 5), (0, PAGE));
    }

    #[test]
    fn a_range_inside_a_registration_hits() {
        let (mut c, n) = (RegCache::new(8, usize::MAX), Cell::new(0));
        let (a, _) = reg(&mut c, &n, 0x10000, 0x8000);
        let (b, _) = reg(&mut c, &n, 0x11000, 0x100);
        assert_eq!(a, b);
        assert_eq!(n.get(), 1);
    }

    #[test]
    fn overlapping_ranges_merge_into_one_registration() {
        let (mut c, n) = (RegCache::new(8, usize::MAX), Cell::new(0));
        reg(&mut c, &n, 0x10000, 0x2000);
        reg(&mut c, &n, 0x20000, 0x1000);
        let (m, gone) = reg(&mut c, &n, 0x11000, 0x10000); // overlaps both
        assert_eq!((m.0, m.1), (0x10000, 0x11000));
        assert_eq!(gone, 2);
        assert_eq!(c.ranges(), vec![(0x10000, 0x11000)]);
    }

    #[test]
    fn the_least_recently_used_goes_first() {
        let (mut c, n) = (RegCache::new(2, usize::MAX), Cell::new(0));
        let (a, _) = reg(&mut c, &n, 0x10000, 10);
        reg(&mut c, &n, 0x20000, 10);
        reg(&mut c, &n, 0x10000, 10); // touch a
        let (_, gone) = reg(&mut c, &n, 0x30000, 10); // evicts the second, not a
        assert_eq!(gone, 1);
        let mut r = c.ranges();
        r.sort();
        assert_eq!(r, vec![(0x10000, PAGE), (0x30000, PAGE)]);
        assert_eq!(reg(&mut c, &n, 0x10000, 10).0, a);
    }

    #[test]
    fn the_byte_budget_is_kept_but_a_huge_region_stays_alone() {
        let (mut c, n) = (RegCache::new(8, 4 * PAGE), Cell::new(0));
        reg(&mut c, &n, 0, PAGE);
        reg(&mut c, &n, 0x10000, PAGE);
        let (_, gone) = reg(&mut c, &n, 0x100000, 10 * PAGE);
        assert_eq!(gone, 2);
        assert_eq!(c.len(), 1);
        assert_eq!(c.invalidate(0x100000 + 5 * PAGE, 1).len(), 1);
        assert!(c.is_empty());
    }

    #[test]
    fn a_failed_registration_changes_nothing() {
        let mut c: RegCache<Fake> = RegCache::new(8, usize::MAX);
        c.get_or_register(0, 10, |s, l| Ok::<_, ()>((s, l, 1)))
            .unwrap();
        let r = c.get_or_register(PAGE / 2, 2 * PAGE, |_, _| Err("pinned too much"));
        assert_eq!(r.map(|_| ()), Err("pinned too much"));
        assert_eq!(c.ranges(), vec![(0, PAGE)]);
    }

    proptest! {
        /// After any sequence of requests: every request was answered by a registration covering
        /// it, entries never overlap, and the limits hold (a lone oversized entry aside).
        #[test]
        fn invariants_hold(ops in proptest::collection::vec((0usize..64, 1usize..5 * PAGE, any::<bool>()), 1..60)) {
            let (mut c, n) = (RegCache::new(4, 12 * PAGE), Cell::new(0));
            for (page, len, drop) in ops {
                let addr = page * PAGE + len % 97;
                if drop {
                    c.invalidate(addr, len);
                    continue;
                }
                let (r, _) = reg(&mut c, &n, addr, len);
                prop_assert!(r.0 <= addr && addr + len <= r.0 + r.1);
                let mut rs = c.ranges();
                rs.sort();
                for w in rs.windows(2) {
                    prop_assert!(w[0].0 + w[0].1 <= w[1].0, "overlap: {:?}", rs);
                }
                prop_assert!(c.len() <= 4);
                prop_assert!(c.len() == 1 || c.bytes() <= 12 * PAGE);
            }
        }
    }
}
