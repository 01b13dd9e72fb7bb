//! Futex wait and wake on a 32-bit word that may live in memory shared between processes.
//!
//! Both calls use the *shared* futex operations (`FUTEX_WAIT`, `FUTEX_WAKE`, without
//! `FUTEX_PRIVATE_FLAG`): the kernel then keys the wait queue on the physical page, so a process
//! waiting on a word in a `MAP_SHARED` mapping is woken by another process waking the same word
//! through its own mapping. (They also work, a little more slowly, on private memory.)
//!
//! Neither call reports errors: a wait may return early for any reason (the value differed, a
//! signal, the timeout, a wake meant for someone else), so callers always re-check their condition
//! in a loop, and a wake has nothing useful to report.

use std::ptr;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Longest single wait, in seconds (about 68 years); longer timeouts are clamped to it.
const MAX_WAIT_SECS: u64 = i32::MAX as u64;

/// Sleeps while `word` holds `expected`, for at most `timeout`.
///
/// Returns when woken by [`wake`], when the timeout expires, at once when `word` does not hold
/// `expected` (`EAGAIN`; the kernel compares and enqueues atomically with respect to [`wake`], so
/// a wake that follows a change of the word is never lost), or on a signal (`EINTR`). Spurious
/// returns are possible: re-check the condition. A zero timeout returns at once.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    if timeout.is_zero() {
        return;
    }
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(MAX_WAIT_SECS) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word.as_ptr()` points to a live, 4-byte aligned u32 for the whole call (it is
    // borrowed); the kernel only reads it. `ts` is a valid relative timespec on our stack that
    // outlives the call. `uaddr2` and `val3` are ignored by FUTEX_WAIT. The result is deliberately
    // ignored: every outcome (woken, ETIMEDOUT, EAGAIN, EINTR) is a return to a re-checking caller.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes up to `n` waiters sleeping in [`wait`] on `word` (in this or any other process that maps
/// the same memory). Waking nobody is not an error.
pub fn wake(word: &AtomicU32, n: i32) {
    // SAFETY: `word.as_ptr()` is a live, aligned u32 for the call; FUTEX_WAKE does not access the
    // memory, it only uses the address as a key. The timeout, `uaddr2` and `val3` arguments are
    // ignored by FUTEX_WAKE. The result (how many were woken, or an error for a bad address, which
    // a reference cannot be) is not needed.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            n,
            ptr::null::<libc::timespec>(),
            ptr::null::<u32>(),
            0u32,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn wait_returns_at_once_when_the_word_differs() {
        let w = AtomicU32::new(7);
        let t = Instant::now();
        wait(&w, 8, Duration::from_secs(30));
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "FUTEX_WAIT on a differing value slept"
        );
    }

    #[test]
    fn wait_returns_after_the_timeout() {
        let w = AtomicU32::new(0);
        wait(&w, 0, Duration::from_millis(5));
        wait(&w, 0, Duration::ZERO);
    }

    #[test]
    fn wake_wakes_a_sleeper() {
        // The sleeper waits up to 30 s per call; being woken well before that proves the wake.
        let w = Arc::new(AtomicU32::new(0));
        let w2 = Arc::clone(&w);
        let ready = Arc::new(AtomicU32::new(0));
        let ready2 = Arc::clone(&ready);
        let sleeper = std::thread::spawn(move || {
            let t = Instant::now();
            ready2.store(1, Ordering::SeqCst);
            while w2.load(Ordering::SeqCst) == 0 {
                wait(&w2, 0, Duration::from_secs(30));
            }
            t.elapsed()
        });
        while ready.load(Ordering::SeqCst) == 0 {
            std::hint::spin_loop();
        }
        w.store(1, Ordering::SeqCst);
        wake(&w, 1);
        let took = sleeper.join().expect("sleeper panicked");
        assert!(
            took < Duration::from_secs(20),
            "woken only by the timeout: {took:?}"
        );
    }
}
