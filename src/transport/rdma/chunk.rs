//! Splitting a large message into RDMA writes: each write lands in the peer's receive ring at the
//! stream position modulo the ring size, never wraps past the ring's end, is at most a chunk
//! long, and the writes of one call fit in the ring's free space and the work requests allowed.

/// One RDMA write: `len` bytes at `offset` in the ring (the same offset in the sender's staging
/// area, which mirrors the ring).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// Offset in the ring.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
}

/// What limits one call's writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of the ring (a power of two).
    pub ring: usize,
    /// Largest single write.
    pub max_chunk: usize,
    /// Work requests that may be posted now (send queue room and the peer's posted receives).
    pub max_wrs: usize,
}

/// Free bytes in the ring when `sent` bytes were written into it and the peer consumed `acked`.
pub fn free_bytes(sent: u64, acked: u64, ring: usize) -> usize {
    let in_flight = sent.saturating_sub(acked);
    ring.saturating_sub(usize::try_from(in_flight).unwrap_or(usize::MAX))
}

/// The writes that move up to `want` bytes of the stream, starting at stream position `sent`.
pub fn plan(sent: u64, acked: u64, want: usize, lim: Limits) -> Vec<Chunk> {
    let mut left = want.min(free_bytes(sent, acked, lim.ring));
    let mut pos = (sent % lim.ring as u64) as usize;
    let mut out = Vec::new();
    while left > 0 && out.len() < lim.max_wrs {
        let len = left.min(lim.ring - pos).min(lim.max_chunk.max(1));
        out.push(Chunk { offset: pos, len });
        left -= len;
        pos = (pos + len) % lim.ring;
    }
    out
}

/// Total bytes of `chunks`.
pub fn total(chunks: &[Chunk]) -> usize {
    chunks.iter().map(|c| c.len).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LIM: Limits = Limits {
        ring: 1 << 16,
        max_chunk: 1 << 14,
        max_wrs: 16,
    };

    #[test]
    fn a_write_at_the_ring_end_splits_there() {
        let c = plan(60_000, 60_000, 10_000, LIM);
        assert_eq!(
            c,
            vec![
                Chunk {
                    offset: 60_000,
                    len: 65_536 - 60_000
                },
                Chunk {
                    offset: 0,
                    len: 10_000 - (65_536 - 60_000)
                }
            ]
        );
    }

    #[test]
    fn a_full_ring_plans_nothing_and_credit_frees_it() {
        assert!(plan(1 << 16, 0, 100, LIM).is_empty());
        assert_eq!(total(&plan(1 << 16, 100, 1000, LIM)), 100);
        assert_eq!(free_bytes(5, 9, 64), 64); // a stale credit above `sent` is harmless
    }

    #[test]
    fn chunks_and_work_requests_are_capped() {
        let c = plan(0, 0, 1 << 20, LIM);
        assert_eq!(c.len(), 4); // the ring (64 KiB) in four 16 KiB chunks
        assert!(c.iter().all(|c| c.len == 1 << 14));
        let c = plan(0, 0, 1 << 20, Limits { max_wrs: 2, ..LIM });
        assert_eq!(total(&c), 2 << 14);
        assert!(plan(0, 0, 100, Limits { max_wrs: 0, ..LIM }).is_empty());
    }

    proptest! {
        #[test]
        fn chunks_tile_the_stream_inside_the_ring(
            sent in 0u64..1 << 40, lag in 0usize..=1 << 16, want in 0usize..1 << 18,
            chunk in 1usize..1 << 15, wrs in 0usize..40,
        ) {
            let lim = Limits { ring: 1 << 16, max_chunk: chunk, max_wrs: wrs };
            let acked = sent - lag as u64;
            let c = plan(sent, acked, want, lim);
            prop_assert!(c.len() <= wrs);
            prop_assert!(total(&c) <= want.min(lim.ring - lag));
            let mut pos = sent;
            for k in &c {
                prop_assert!(k.len > 0 && k.len <= chunk);
                prop_assert_eq!(k.offset as u64, pos % lim.ring as u64);
                prop_assert!(k.offset + k.len <= lim.ring);
                pos += k.len as u64;
            }
            // Only a limit stops it short.
            if total(&c) < want.min(lim.ring - lag) {
                prop_assert_eq!(c.len(), wrs);
            }
        }
    }
}
