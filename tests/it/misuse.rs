//! A group used where it cannot serve: from a child forked after it was made, or from two
//! threads at once. Every such call is refused with `ErrorKind::Usage`, before anything is sent,
//! and the group goes on serving its own process and thread. Ranks are threads over real shared
//! memory and TCP.

use crate::common;

use common::Wiring;
use psyne::Communicator;
use psyne::{ErrorKind, Group, ReduceOp};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

/// What a forked child reports through its pipe: one line per call, `ok NAME` or `bad NAME: ...`.
fn child_calls(g: &Group, parent: u32) -> (i32, String) {
    let me = std::process::id();
    let look = |name: &str, r: psyne::Result<()>| match r {
        Err(e)
            if e.kind() == ErrorKind::Usage
                && e.message()
                    .contains(&format!("created in process {parent}"))
                && e.message().contains(&format!("this is process {me}")) =>
        {
            format!("ok {name}\n")
        }
        Err(e) => format!("bad {name}: {:?} {e}\n", e.kind()),
        Ok(()) => format!("bad {name}: it succeeded\n"),
    };
    // The case first: an all-reduce on the node board, the other rank calling too.
    let mut report = look(
        "all_reduce",
        g.all_reduce(&mut [100.0f64; 8], ReduceOp::Sum),
    );
    if report.starts_with("ok") {
        let big = g.all_reduce(&mut vec![100.0f64; 100_000], ReduceOp::Sum);
        report += &look("all_reduce over the links", big);
        let work = g.all_reduce_async(vec![100.0f64; 8], ReduceOp::Sum);
        report += &look("all_reduce_async", work.wait().map(drop));
        report += &look("barrier", g.barrier());
        report += &look("revoke", g.revoke());
        report += &look("agree", g.agree(true).map(drop));
        report += &look("check_process", g.check_process());
    }
    let bad = report.lines().any(|l| l.starts_with("bad"));
    (i32::from(bad), report)
}

/// Forks; the child runs [`child_calls`], writes its report into a pipe and exits with 0 if
/// every call was refused as it should be. Returns the child's exit status and report.
fn fork_and_call(g: &Group) -> (i32, String) {
    let parent = std::process::id();
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe(2) to fill.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    // SAFETY: the child only calls psyne (which must refuse at once, touching no lock that
    // another thread could hold), formats strings (glibc's malloc is fork-safe), writes to a
    // pipe with write(2) and leaves with _exit; it prints nothing (stderr's lock could be held).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let (code, report) = child_calls(g, parent);
        // SAFETY: writes the report's bytes to the pipe's write end, then exits without running
        // destructors or atexit handlers of the parent's state.
        unsafe {
            libc::write(fds[1], report.as_ptr().cast(), report.len());
            libc::_exit(code);
        }
    }
    // SAFETY: closes this process's copy of the write end, so that reading ends at the child's exit.
    unsafe { libc::close(fds[1]) };
    let deadline = Instant::now() + T;
    let mut status = 0;
    loop {
        // SAFETY: waits without blocking for our own child `pid`, into a valid int.
        let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if got == pid {
            break;
        }
        if Instant::now() > deadline {
            // SAFETY: signals and reaps the child this test forked, by its pid.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            panic!("the forked child did not finish within {T:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut report = vec![0u8; 4096];
    // SAFETY: reads into our buffer of that length from the pipe's read end, then closes it.
    let n = unsafe {
        let n = libc::read(fds[0], report.as_mut_ptr().cast(), report.len());
        libc::close(fds[0]);
        n
    };
    report.truncate(n.max(0) as usize);
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    (code, String::from_utf8_lossy(&report).into_owned())
}

#[test]
fn a_child_forked_after_the_group_was_made_is_refused_every_call() {
    // Issue 33, item 3: the child's all-reduce joined the other rank's call (which got the
    // child's 100 + 2) while the parent's got 1 + 2 from the same call.
    let results = common::with_wiring(2, Wiring::Shm, T, |g| {
        let child = (g.rank() == 0).then(|| fork_and_call(&g));
        let mut buf = [(g.rank() + 1) as f64; 8];
        let r = g.all_reduce(&mut buf, ReduceOp::Sum);
        (child, r, buf)
    });
    let (child, _, _) = &results[0];
    let (code, report) = child.as_ref().expect("rank 0 forked");
    assert_eq!(
        *code, 0,
        "the child's calls were not all refused:\n{report}"
    );
    assert_eq!(report.lines().count(), 7, "{report}");
    for (rank, (_, r, buf)) in results.iter().enumerate() {
        assert!(r.is_ok(), "rank {rank}: {r:?}");
        assert_eq!(
            buf, &[3.0; 8],
            "rank {rank}: the parents' call is theirs alone"
        );
    }
}

#[test]
fn a_call_from_a_second_thread_while_the_first_is_in_a_call_is_refused() {
    // Issue 33, item 12. Rank 0 calls from two threads at once; rank 1 joins only once one of
    // them has been refused (an event), so the other is still waiting in its call then: the two
    // overlap whichever thread came first.
    let (refused, heard) = mpsc::channel::<()>();
    let heard = Mutex::new(heard);
    let results = common::with_wiring(2, Wiring::Shm, T, move |g| {
        if g.rank() == 1 {
            let got = heard
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .recv_timeout(T / 4);
            let mut buf = [2.0f64; 8];
            let r = g.all_reduce(&mut buf, ReduceOp::Sum);
            return vec![(got.is_ok(), r, buf)];
        }
        std::thread::scope(|s| {
            let calls: Vec<_> = (0..2)
                .map(|i| {
                    let (g, refused) = (&g, refused.clone());
                    std::thread::Builder::new()
                        .name(format!("caller-{i}"))
                        .spawn_scoped(s, move || {
                            let mut buf = [1.0f64; 8];
                            let r = g.all_reduce(&mut buf, ReduceOp::Sum);
                            if r.is_err() {
                                let _ = refused.send(());
                            }
                            (true, r, buf)
                        })
                        .expect("spawning a caller")
                })
                .collect();
            calls
                .into_iter()
                .map(|c| c.join().expect("a caller panicked"))
                .collect()
        })
    });
    let rank0 = &results[0];
    let refusals: Vec<_> = rank0
        .iter()
        .filter_map(|(_, r, _)| r.as_ref().err())
        .collect();
    assert_eq!(
        refusals.len(),
        1,
        "one of the two overlapping calls is refused: {rank0:?}"
    );
    let e = refusals[0];
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    assert!(
        e.message().contains("two threads at once")
            && e.message().contains("thread 'caller-0'")
            && e.message().contains("thread 'caller-1'"),
        "the refusal names both threads: {e}"
    );
    for (_, r, buf) in rank0 {
        match r {
            Ok(()) => assert_eq!(buf, &[3.0; 8]),
            Err(_) => assert_eq!(buf, &[1.0; 8], "a refused call leaves its buffer alone"),
        }
    }
    let (heard, r, buf) = &results[1][0];
    assert!(heard, "rank 1 heard of the refusal");
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(buf, &[3.0; 8]);
}

#[test]
fn threads_may_use_a_group_by_turns_and_async_calls_hold_it_until_they_finish() {
    let (refused, heard) = mpsc::channel::<()>();
    let heard = Mutex::new(heard);
    let results = common::with_wiring(2, Wiring::Tcp, T, move |g| -> psyne::Result<Vec<f64>> {
        let mut sums = Vec::new();
        // By turns: each thread's call finished before the next thread calls.
        for turn in 0..3 {
            let g = g.clone();
            let sum = std::thread::spawn(move || {
                let mut buf = [turn as f64 + g.rank() as f64; 4];
                g.all_reduce(&mut buf, ReduceOp::Sum).map(|()| buf[0])
            })
            .join()
            .expect("a turn panicked")?;
            sums.push(sum);
        }
        // A non-blocking call holds the group for its thread until it completes: on rank 0,
        // another thread is refused meanwhile (rank 1 issues its part only after that, so the
        // call is still in flight), and the issuing thread is not.
        if g.rank() == 1 {
            let got = heard
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .recv_timeout(T / 4);
            assert!(got.is_ok(), "rank 0's other thread was refused");
        }
        let work = g.all_reduce_async(vec![10.0f64; 4], ReduceOp::Sum);
        if g.rank() == 0 {
            let g2 = g.clone();
            let other = std::thread::spawn(move || g2.barrier())
                .join()
                .expect("the other thread panicked");
            let e = other.expect_err("another thread's call while a non-blocking one is in flight");
            assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
            let _ = refused.send(());
        }
        let mut mine = [1.0f64; 4];
        g.all_reduce(&mut mine, ReduceOp::Sum)?;
        sums.push(work.wait()?[0]);
        sums.push(mine[0]);
        Ok(sums)
    });
    for (rank, r) in results.into_iter().enumerate() {
        let sums = r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        assert_eq!(sums, vec![1.0, 3.0, 5.0, 20.0, 2.0], "rank {rank}");
    }
}
