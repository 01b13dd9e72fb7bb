//! Whether single-copy pulls pay on this machine.
//!
//! A pull ([`super::cma`]) saves the ring's second copy, but `process_vm_readv(2)` pins the
//! source's pages and copies in the kernel, and what that costs beside a `memcpy` depends on the
//! CPU, the kernel and the hypervisor. On the Intel Xeon VM the pull windows were tuned on
//! (`results/shm-pulls/`) a pull cost about as much as a copy, and pulled collectives ran up to 2x
//! faster; on this project's AMD EPYC VM a pull takes 2-5x as long as a `memcpy` of the same
//! bytes, and the same collectives ran up to 2.5x slower pulled than through the ring
//! (`results/shm-pull-cost/`). So under the default policy
//! ([`super::cma::PullPolicy::ByTraffic`]) a process offers to pull only where it measured a pull
//! to cost at most [`PULLS_PAY_RATIO`] times a copy; `PSY_SHM_CMA=1` pulls regardless.

use super::cma;
use std::io;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Pulls are used by default where a pull of [`PROBE_BYTES`] takes at most this many times as
/// long as a `memcpy` of them: the ring's two copies run on both sides at once, so a pull that
/// costs two copies gains nothing, and 1.5 leaves room for the measurement's noise.
pub const PULLS_PAY_RATIO: f64 = 1.5;

/// The bytes each measured pull and copy moves: a middle size of the pull windows.
const PROBE_BYTES: usize = 256 << 10;

/// The measured pulls and copies; the fastest of each is compared (a preempted one is slower).
const PROBE_ROUNDS: usize = 5;

/// Whether pulls pay on this machine, measured once per process (about a millisecond, the first
/// time a shared-memory link is set up under the default policy). A failed measurement (a pull of
/// this process's own memory refused) says no: the rings carry everything.
pub fn pulls_pay() -> bool {
    static PAYS: OnceLock<bool> = OnceLock::new();
    *PAYS.get_or_init(|| pull_cost().is_ok_and(|ratio| ratio <= PULLS_PAY_RATIO))
}

/// The fastest pull of [`PROBE_BYTES`] from this process's own memory, divided by the fastest
/// `memcpy` of them.
pub fn pull_cost() -> io::Result<f64> {
    let src = vec![0x5au8; PROBE_BYTES];
    let mut dst = vec![0u8; PROBE_BYTES];
    let pid = std::process::id() as i32;
    let (mut copy, mut pull) = (Duration::MAX, Duration::MAX);
    for _ in 0..PROBE_ROUNDS {
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        copy = copy.min(t.elapsed());
        let t = Instant::now();
        let n = cma::pull(pid, src.as_ptr() as u64, &mut dst)?;
        pull = pull.min(t.elapsed());
        if n != PROBE_BYTES {
            return Err(io::Error::other(format!(
                "pulled {n} of {PROBE_BYTES} bytes of this process's own memory"
            )));
        }
    }
    Ok(pull.as_secs_f64() / copy.as_secs_f64().max(1e-9))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cost_of_a_pull_is_measured_and_decides_once() {
        let ratio = pull_cost().expect("pulling from this process itself");
        assert!(ratio.is_finite() && ratio > 0.0, "{ratio}");
        assert_eq!(pulls_pay(), pulls_pay());
    }
}
