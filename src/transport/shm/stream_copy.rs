//! Copies whose destination bypasses the cache (non-temporal stores), for the large messages a
//! receiver copies out of a ring into a buffer that nothing reads soon.
//!
//! An ordinary store to a line not in the cache first reads the line (the read for ownership), so
//! a copy into a buffer larger than the cache reads the destination as well as the source. A
//! non-temporal store writes the line without reading it and without evicting what is cached: on
//! the 2-core AMD VM, a 2-rank broadcast of 16-64 MiB took 0.76-0.79 of the time and an all-gather
//! 0.88-0.89 with them (an exploratory build that streamed every copy out of the ring; smaller
//! copies and reduce windows, which are read right after, were slower so), and Intel MPI's
//! all-gather at 16 MiB runs below the two-copy floor of `scripts/probes/floors/staged2.c`
//! (`results/versus-every-mpi/`) with no system call: single copies do not explain it.
//!
//! Non-temporal stores are weakly ordered: [`copy`] ends with a store fence, so whatever the
//! caller publishes after it (a ring's head, a flag a peer reads) is ordered after the data.

/// The step engine reads copy receives of at least this many bytes that no send of their step
/// forwards with [`crate::transport::Link::read_some_streaming`], and an all-gather copies its
/// own chunk of this many bytes into its output so: on the 2-core AMD VM, 2-rank broadcasts of
/// 16-64 MiB took 0.80-0.83 of the time and all-gathers of 8-64 MiB 0.80-0.82, and streaming every
/// copy out of a ring made 1 MiB ones slower (`results/stream-copies/`).
pub(crate) const STREAM_MIN: usize = 4 << 20;

/// Copies `len` bytes from `src` to `dst` with non-temporal stores where the CPU has them
/// (x86-64: SSE2, part of the baseline), else an ordinary copy; then fences the stores.
///
/// # Safety
///
/// As [`std::ptr::copy_nonoverlapping`]: `src` readable and `dst` writable for `len` bytes, the
/// two not overlapping.
pub(crate) unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract, passed on.
    unsafe {
        copy_x86_64(src, dst, len);
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the caller's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, len);
    }
}

#[cfg(target_arch = "x86_64")]
unsafe fn copy_x86_64(src: *const u8, dst: *mut u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    // SAFETY: every access is inside `[src, src + len)` or `[dst, dst + len)` (the caller's
    // contract): the head copy takes at most `len` bytes, the loop takes 64 bytes at `i` only while
    // `i + 64 <= len`, the tail takes the rest. `_mm_stream_si128` needs a 16-byte aligned address:
    // `dst + head` is one, and `i - head` stays a multiple of 64. SSE2 is in every x86-64 CPU.
    unsafe {
        let head = ((dst as usize).wrapping_neg() & 15).min(len);
        std::ptr::copy_nonoverlapping(src, dst, head);
        let mut i = head;
        while i + 64 <= len {
            let s = src.add(i).cast::<__m128i>();
            let d = dst.add(i).cast::<__m128i>();
            let (a, b) = (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)));
            let (c, e) = (_mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
            i += 64;
        }
        std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i);
        _mm_sfence();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_length_and_alignment_copies_every_byte() {
        let src: Vec<u8> = (0..700u32).map(|i| (i * 7 + 3) as u8).collect();
        for offset in 0..17 {
            for len in [0, 1, 15, 16, 63, 64, 65, 127, 128, 300, 683 - offset] {
                let mut dst = vec![0u8; 700];
                // SAFETY: both ranges lie inside their vectors (offset + len <= 700) and the two
                // vectors do not overlap.
                unsafe { super::copy(src.as_ptr().add(3), dst.as_mut_ptr().add(offset), len) };
                assert_eq!(
                    &dst[offset..offset + len],
                    &src[3..3 + len],
                    "offset {offset} len {len}"
                );
                assert!(dst[..offset]
                    .iter()
                    .chain(&dst[offset + len..])
                    .all(|&b| b == 0));
            }
        }
    }
}
