//! Copies whose destination bypasses the cache (non-temporal stores), for the large messages a
//! receiver copies out of a ring into a buffer that nothing reads soon.
//!
//! An ordinary store to a line not in the cache first reads the line (the read for ownership), so
//! a copy into a buffer larger than the cache reads the destination as well as the source. A
//! non-temporal store writes the line without reading it and without evicting what is cached:
//! 2-rank broadcasts, all-gathers, all-to-alls and send/recvs of 16-64 MiB took 0.83-0.90 of the
//! time with them on the 2-core AMD VM (`results/stream-copies/`). Intel MPI's all-gather of
//! 16 MiB runs below the two-copy floor of `scripts/probes/floors/staged2.c` with no copy by
//! system call (`results/stream-copies/intel-allgather-strace.txt`): single copies do not
//! explain it.
//!
//! Non-temporal stores are weakly ordered: [`copy`] ends with a store fence, so whatever the
//! caller publishes after it (a flag a peer reads, the end of a call) is ordered after the data.
//! A caller making many copies in a row ([`super::ring::Ring::read_streaming`], a 32 KiB piece at
//! a time) uses [`copy_unfenced`] and one [`fence`] after the last.

/// The smallest call worth streaming: in a call whose work buffer (on this rank) is at least
/// this many bytes, the step engine reads copy receives of 1 MiB or more that no send of their
/// step forwards with [`crate::transport::Link::read_some_streaming`], and an all-gather copies
/// its own chunk into its output so. Half the last-level cache ([`last_level_cache`]), 16 MiB
/// where it is not known: below that, two ranks' buffers stay in the cache between calls and a
/// streamed copy only sends them to memory. On the 2-core AMD VM (32 MiB L3): messages of
/// 4-8 MiB in calls of 4-8 MiB took up to 1.7 times as long streamed (broadcast, send/recv),
/// calls of 16-64 MiB 0.83-0.90 of the time (all-gather, broadcast, all-to-all, send/recv):
/// `results/stream-copies/`.
fn stream_min() -> usize {
    static MIN: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MIN.get_or_init(|| last_level_cache().map_or(16 << 20, |bytes| bytes / 2))
}

/// Whether a call whose work buffer holds `call_bytes` (on this rank) streams ([`stream_min`]).
pub(crate) fn streams(call_bytes: usize) -> bool {
    call_bytes >= stream_min()
}

/// The size of CPU 0's highest-level cache, from sysfs (`/sys/devices/system/cpu/cpu0/cache`).
fn last_level_cache() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.flatten()
        .filter_map(|e| {
            let level = std::fs::read_to_string(e.path().join("level")).ok()?;
            let size = std::fs::read_to_string(e.path().join("size")).ok()?;
            Some((level.trim().parse::<u32>().ok()?, parse_size(size.trim())?))
        })
        .max()
        .map(|(_, bytes)| bytes)
}

/// A sysfs cache size (`32768K`, `1M`, `512`) in bytes.
fn parse_size(text: &str) -> Option<usize> {
    let (digits, unit) = match text.as_bytes().last()? {
        b'K' => (&text[..text.len() - 1], 1 << 10),
        b'M' => (&text[..text.len() - 1], 1 << 20),
        b'G' => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    digits.parse::<usize>().ok()?.checked_mul(unit)
}

/// Copies `len` bytes from `src` to `dst` with non-temporal stores where the CPU has them
/// (x86-64: SSE2, part of the baseline), else an ordinary copy; then fences the stores.
///
/// # Safety
///
/// As [`std::ptr::copy_nonoverlapping`]: `src` readable and `dst` writable for `len` bytes, the
/// two not overlapping.
pub(crate) unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller's contract, passed on.
    unsafe { copy_unfenced(src, dst, len) };
    fence();
}

/// [`copy`] without the fence: the caller fences ([`fence`]) before it publishes anything the
/// data must precede.
///
/// # Safety
///
/// As [`copy`].
pub(crate) unsafe fn copy_unfenced(src: *const u8, dst: *mut u8, len: usize) {
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

/// Orders the non-temporal stores made before it before every store after it.
pub(crate) fn fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is in every x86-64 CPU; the fence has no other effect.
    unsafe {
        std::arch::x86_64::_mm_sfence();
    }
}

#[cfg(target_arch = "x86_64")]
unsafe fn copy_x86_64(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: every access is inside `[src, src + len)` or `[dst, dst + len)` (the caller's
    // contract): the head copy takes at most `len` bytes, the blocks whole 64 bytes of the rest,
    // the tail what is left. `_mm_stream_si128` needs a 16-byte aligned address: `dst + head` is
    // one, and every block starts a multiple of 64 bytes after it. SSE2 is in every x86-64 CPU.
    unsafe {
        let head = ((dst as usize).wrapping_neg() & 15).min(len);
        std::ptr::copy_nonoverlapping(src, dst, head);
        let blocks = crate::copy::copy_blocks(src.add(head), dst.add(head), len - head, |d, v| {
            std::arch::x86_64::_mm_stream_si128(d, v)
        });
        let i = head + blocks;
        std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sysfs_cache_sizes_parse() {
        assert_eq!(super::parse_size("32768K"), Some(32 << 20));
        assert_eq!(super::parse_size("1M"), Some(1 << 20));
        assert_eq!(super::parse_size("512"), Some(512));
        assert_eq!(super::parse_size("K"), None);
        assert_eq!(super::parse_size("lots"), None);
        assert!(super::stream_min() >= 1 << 10);
        assert!(super::streams(super::stream_min()) && !super::streams(super::stream_min() - 1));
    }

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
