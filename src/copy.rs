//! Copies of data that stay fast wherever the two buffers lie.
//!
//! glibc's `memcpy` copies lengths from about 2 KiB to under 512 KiB with `rep movsb`, which on
//! the AMD EPYC VM runs 15-22 times slower when the destination lies 1-31 bytes after the source
//! modulo 4 KiB: 32 KiB in 14.2 µs instead of 0.72, 256 KiB in 114 µs instead of 6.0
//! (`scripts/probes/copy-alias.c`, `results/copy-alias/`). Where buffers lie is the caller's
//! choice and the ring's position, so a collective hit it in some jobs and not in others: psyne's
//! 2-rank reduce-scatter of 64 KiB took 25-36 µs in a job whose input and output happened to lie
//! so, and 6-7 µs otherwise. [`copy_slice`] and [`copy_bytes`] copy those lengths with a vector
//! loop of their own instead: 32-byte AVX loads and aligned stores where the CPU has AVX, as fast
//! as `memcpy` at its best distance and at every other distance too
//! (`scripts/probes/copy-vector.c`, `results/copy-vector/`); elsewhere a 16-byte SSE2 loop for the
//! slow distances and `memcpy` for the rest. Every copy of call data goes through them; headers
//! and other small fixed copies need not.

use std::ptr;

/// Copies shorter than this are `memcpy`'s whatever the distance: it copies them with vector
/// loads and stores of its own (`rep movsb` measured slow from 2176 bytes, not at 2112 or less,
/// where the 16-byte loop is the slower by ~20 ns).
const LOOP_MIN: usize = 2049;

/// Copies this long or longer are `memcpy`'s whatever the distance: it no longer uses
/// `rep movsb` for them (measured slow at 448 KiB, not at 512 KiB), and the 16-byte loop is
/// slower (the AVX loop is as fast as `memcpy` there, not faster).
const LOOP_MAX: usize = 512 << 10;

/// Destinations this many bytes or fewer after their source (modulo 4 KiB, and not 0) are copied
/// by the loop: the slow distances, measured at 1, 4, 8, 16, 24, 28 and 31 (not at 0, 32, 48,
/// 63 or more).
const NEAR: usize = 31;

/// Copies `src` into `dst`, as `dst.copy_from_slice(src)`.
///
/// # Panics
///
/// If the lengths differ (as `copy_from_slice`).
pub(crate) fn copy_slice<T: Copy>(dst: &mut [T], src: &[T]) {
    assert_eq!(dst.len(), src.len(), "copy_slice between unequal lengths");
    // SAFETY: both slices are valid for `len * size_of::<T>()` bytes, `dst` is an exclusive
    // borrow so they cannot overlap, and `T: Copy` has no drop to skip or repeat.
    unsafe {
        copy_bytes(
            src.as_ptr().cast::<u8>(),
            dst.as_mut_ptr().cast::<u8>(),
            std::mem::size_of_val(src),
        )
    }
}

/// Copies `len` bytes from `src` to `dst`, as [`ptr::copy_nonoverlapping`].
///
/// # Safety
///
/// As [`ptr::copy_nonoverlapping`]: `src` readable and `dst` writable for `len` bytes, the two
/// not overlapping.
pub(crate) unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    if (LOOP_MIN..LOOP_MAX).contains(&len) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx") {
            // SAFETY: the caller's contract, passed on (`len` is over 128); the CPU has AVX.
            return unsafe { copy_avx(src, dst, len) };
        }
        if near_after(src, dst) {
            // SAFETY: the caller's contract, passed on.
            return unsafe { copy_loop(src, dst, len) };
        }
    }
    // SAFETY: the caller's contract, passed on.
    unsafe { ptr::copy_nonoverlapping(src, dst, len) }
}

/// Whether `dst` lies 1 to [`NEAR`] bytes after `src`, modulo 4 KiB.
fn near_after(src: *const u8, dst: *mut u8) -> bool {
    let distance = (dst as usize).wrapping_sub(src as usize) % 4096;
    (1..=NEAR).contains(&distance)
}

/// Copies with 16-byte loads and stores, 64 bytes at a time.
///
/// # Safety
///
/// As [`copy_bytes`].
unsafe fn copy_loop(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract; unaligned stores need no alignment, SSE2 is in every
    // x86-64 CPU.
    unsafe {
        let done = copy_blocks(src, dst, len, |d, v| {
            std::arch::x86_64::_mm_storeu_si128(d, v)
        });
        ptr::copy_nonoverlapping(src.add(done), dst.add(done), len - done);
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the caller's contract, passed on.
    unsafe {
        ptr::copy_nonoverlapping(src, dst, len);
    }
}

/// Copies `len` bytes with 32-byte AVX loads and stores, 128 bytes a step, the stores aligned:
/// the first 32 bytes and the last 128 are loaded before the loop and stored after it (they may
/// overlap the loop's blocks, which copy the same bytes), and the loop runs from the
/// destination's first 32-byte boundary after its start. As fast as `memcpy` at `memcpy`'s best
/// distance and at every distance modulo 4 KiB (`results/copy-vector/`).
///
/// # Safety
///
/// As [`copy_bytes`], `len` at least 128, and the CPU must have AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn copy_avx(src: *const u8, dst: *mut u8, len: usize) {
    use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_store_si256, _mm256_storeu_si256};
    debug_assert!(len >= 128);
    let load = |at: usize| {
        // SAFETY: every caller's `at + 32 <= len`, inside `[src, src + len)`; unaligned loads
        // need no alignment.
        unsafe { _mm256_loadu_si256(src.add(at).cast::<__m256i>()) }
    };
    let first = load(0);
    let last = [
        load(len - 128),
        load(len - 96),
        load(len - 64),
        load(len - 32),
    ];
    // The loop's first block starts at the destination's next 32-byte boundary (1-32 bytes on:
    // the bytes before it are `first`'s).
    let mut at = 32 - (dst as usize & 31);
    while at + 128 < len {
        let block = [load(at), load(at + 32), load(at + 64), load(at + 96)];
        for (k, v) in block.into_iter().enumerate() {
            // SAFETY: `at + 32 * k + 32 <= at + 128 < len`, inside `[dst, dst + len)`, and
            // `dst + at` is 32-byte aligned, as an aligned store needs.
            unsafe { _mm256_store_si256(dst.add(at + 32 * k).cast::<__m256i>(), v) };
        }
        at += 128;
    }
    // SAFETY: `len >= 128`: every store lies inside `[dst, dst + len)`; unaligned stores need no
    // alignment. The loop's blocks and these hold the same bytes where they overlap.
    unsafe {
        _mm256_storeu_si256(dst.cast::<__m256i>(), first);
        for (k, v) in last.into_iter().enumerate() {
            _mm256_storeu_si256(dst.add(len - 128 + 32 * k).cast::<__m256i>(), v);
        }
    }
}

/// Copies the whole 64-byte blocks of `len` bytes from `src` to `dst`, each as four unaligned
/// 16-byte loads and four `store`s; returns the bytes copied (the rest is the caller's). The one
/// loop of [`copy_loop`] and the non-temporal copies of `transport::shm::stream_copy`.
///
/// # Safety
///
/// As [`copy_bytes`], and `store` must be safe to call with any 16-byte slot of `dst` that the
/// caller's alignment allows (`dst` 16-byte aligned for an aligned store).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn copy_blocks(
    src: *const u8,
    dst: *mut u8,
    len: usize,
    store: impl Fn(*mut std::arch::x86_64::__m128i, std::arch::x86_64::__m128i),
) -> usize {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128};
    let mut i = 0;
    // SAFETY: the loop takes 64 bytes at `i` only while `i + 64 <= len`, inside `[src, src +
    // len)` and `[dst, dst + len)` (the caller's contract); unaligned loads need no alignment.
    unsafe {
        while i + 64 <= len {
            let s = src.add(i).cast::<__m128i>();
            let d = dst.add(i).cast::<__m128i>();
            let (a, b) = (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)));
            let (c, e) = (_mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
            store(d, a);
            store(d.add(1), b);
            store(d.add(2), c);
            store(d.add(3), e);
            i += 64;
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_byte_at_every_distance_and_length() {
        let src: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut dst = vec![0u8; 24_576];
        for len in [0, 1, 63, 64, 2048, 2049, 2050, 4096, 4161, 16_000] {
            for shift in [0, 1, 15, 16, 31, 32, 64, 100] {
                dst.fill(0xAA);
                // The destination `shift` bytes further along (modulo 4 KiB) than the source.
                let at = (src.as_ptr() as usize + shift).wrapping_sub(dst.as_ptr() as usize) % 4096;
                copy_slice(&mut dst[at..at + len], &src[..len]);
                assert_eq!(&dst[at..at + len], &src[..len], "len {len} shift {shift}");
                assert!(
                    dst[..at].iter().all(|&b| b == 0xAA),
                    "before: len {len} shift {shift}"
                );
                assert!(
                    dst[at + len..].iter().all(|&b| b == 0xAA),
                    "after: len {len} shift {shift}"
                );
            }
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_avx_copy_fills_every_byte_at_every_alignment_and_no_more() {
        if !std::arch::is_x86_feature_detected!("avx") {
            return;
        }
        let src: Vec<u8> = (0..5_100u32).map(|i| (i * 13 + i / 241) as u8).collect();
        let mut dst = vec![0u8; 5_200];
        // From the shortest it takes (128) through lengths whose loop runs 0, 1 and many blocks,
        // each at every destination alignment modulo 32 and two source alignments.
        for len in (128..=420).chain([2049, 4095, 4096, 4097, 4999]) {
            for at in 0..32 {
                for from in [0, 7] {
                    dst.fill(0x5A);
                    let (s, d) = (&src[from..from + len], &mut dst[at..at + len]);
                    // SAFETY: both ranges are in bounds for `len` bytes and in different
                    // vectors; the CPU has AVX (checked above); `len >= 128`.
                    unsafe { copy_avx(s.as_ptr(), d.as_mut_ptr(), len) };
                    assert_eq!(&dst[at..at + len], s, "len {len} at {at} from {from}");
                    assert!(dst[..at].iter().all(|&b| b == 0x5A), "before: {len} {at}");
                    assert!(
                        dst[at + len..].iter().all(|&b| b == 0x5A),
                        "after: {len} {at}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_loop_takes_only_near_distances() {
        let base = 0x10_0000usize as *const u8;
        let at = |d: usize| (0x10_0000usize + d) as *mut u8;
        assert!(!near_after(base, at(0)));
        assert!(near_after(base, at(1)));
        assert!(near_after(base, at(16)));
        assert!(near_after(base, at(4096 + 31)));
        assert!(!near_after(base, at(32)));
        assert!(!near_after(base, at(4095)));
        assert!(!near_after(base, at(2048)));
    }

    #[test]
    fn typed_slices_copy_whole_elements() {
        let src: Vec<f64> = (0..3000).map(|i| i as f64 * 0.5).collect();
        let mut dst = vec![0.0f64; 3000];
        copy_slice(&mut dst, &src);
        assert_eq!(dst, src);
    }

    #[test]
    #[should_panic(expected = "unequal lengths")]
    fn unequal_lengths_panic_as_copy_from_slice_does() {
        copy_slice(&mut [0u8; 3], &[1u8; 4]);
    }
}
