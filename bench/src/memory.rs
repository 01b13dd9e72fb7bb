//! Whether the largest size of a sweep fits this host's memory, checked before anything large is
//! allocated: `--sizes 1T` is an error naming the limit, not an abort in the allocator.

use psyne::{Error, ErrorKind, Result};

/// Buffers of the message size each rank holds besides every rank's input (its input, its
/// output, and a work copy).
const OWN_BUFFERS: u64 = 3;

/// Bytes the ranks on one host need for a message of `bytes` per rank: each holds its own
/// buffers and, when results are checked, every rank's input to compute the expected result.
pub fn needed(bytes: u64, world: usize, local: usize, check: bool) -> u64 {
    let inputs = if check { world as u64 } else { 0 };
    bytes
        .saturating_mul(OWN_BUFFERS + inputs)
        .saturating_mul(local.max(1) as u64)
}

/// `MemAvailable` of this host, in bytes, if the kernel says.
pub fn available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// Refuses a sweep whose largest size would need more memory than this host has available.
pub fn check_fits(largest: u64, world: usize, local: usize, check: bool) -> Result<()> {
    let need = needed(largest, world, local, check);
    match available() {
        Some(have) if need > have => Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "--sizes: the largest size, {}, needs about {} of memory on this host ({local} rank(s) here, each holding {} buffers of that size{}), more than the {} available (MemAvailable); use smaller sizes{}",
                crate::sizes::format_size(largest),
                crate::sizes::format_size(need),
                OWN_BUFFERS + if check { world as u64 } else { 0 },
                if check { ", every rank's input included to check results" } else { "" },
                crate::sizes::format_size(have),
                if check { ", or --no-check" } else { "" },
            ),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_need_grows_with_ranks_and_checking_and_never_overflows() {
        assert_eq!(needed(1 << 20, 4, 2, false), (3 * 2) << 20);
        assert_eq!(needed(1 << 20, 4, 2, true), (7 * 2) << 20);
        assert_eq!(needed(u64::MAX, 1 << 20, 1 << 20, true), u64::MAX);
        assert!(check_fits(u64::MAX / 4, 2, 2, true).is_err());
        assert!(check_fits(8, 2, 2, true).is_ok());
    }
}
