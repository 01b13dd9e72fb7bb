//! `Group::alloc_shared` and `Group::all_reduce_shared`: every op on several element types and
//! lengths against the oracle, with ranks as threads sharing real `/dev/shm` segments; the private
//! fallback over TCP and across fake hosts; mismatched calls; nothing left in /dev/shm.

use crate::common;

use common::Wiring;
use psyne::Communicator;
use psyne::{conformance, oracle, Element, ErrorKind, Group, ReduceOp};
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

/// Allocates, fills with the conformance inputs, all-reduces with each op twice (the second
/// reuses the buffer), and returns every mismatch against the oracle as text.
fn check<E: Element>(g: &Group, len: usize) -> psyne::Result<Vec<String>> {
    let (rank, size) = (g.rank(), g.size());
    let mut buf = g.alloc_shared::<E>(len)?;
    assert_eq!(buf.len(), len);
    assert!(
        buf.iter().all(|x| *x == E::zeroed()),
        "a new shared buffer is zero-filled"
    );
    let mut bad = Vec::new();
    for op in ReduceOp::ALL {
        if op.check(E::DTYPE).is_err() {
            continue;
        }
        for seed in [1, 2] {
            let inputs: Vec<Vec<E>> = (0..size)
                .map(|r| conformance::input(r, len, seed, Some(op)))
                .collect();
            buf.copy_from_slice(&inputs[rank]);
            g.all_reduce_shared(&mut buf, op)?;
            let want = oracle::all_reduce(&inputs, op);
            if let Some(i) = (0..len).find(|&i| buf[i] != want[i]) {
                bad.push(format!(
                    "{:?} {} len {len} seed {seed}: element {i} is {:?}, expected {:?}",
                    E::DTYPE,
                    op.name(),
                    buf[i],
                    want[i]
                ));
            }
        }
    }
    Ok(bad)
}

fn world(size: usize, wiring: Wiring, expect_shared: bool) {
    let results = common::with_wiring(size, wiring, T, move |g| {
        let shared = g.alloc_shared::<f32>(3)?.is_shared();
        let mut bad = Vec::new();
        for len in [0, 1, size + 1, 1001, 100_003] {
            bad.extend(check::<f32>(&g, len)?);
            bad.extend(check::<i64>(&g, len)?);
        }
        bad.extend(check::<u8>(&g, 4097)?);
        bad.extend(check::<psyne::bf16>(&g, 333)?);
        Ok::<_, psyne::Error>((shared, bad))
    });
    for (rank, r) in results.into_iter().enumerate() {
        let (shared, bad) = r.unwrap_or_else(|e| panic!("{wiring:?} rank {rank}: {e}"));
        assert_eq!(shared, expect_shared, "{wiring:?} rank {rank}: is_shared");
        assert!(bad.is_empty(), "{wiring:?} rank {rank}: {bad:#?}");
    }
}

#[test]
fn shared_buffers_all_reduce_correctly_on_one_host() {
    for size in [2, 3, 4] {
        world(size, Wiring::Shm, true);
    }
}

#[test]
fn without_shared_memory_the_buffers_are_private_and_still_correct() {
    world(3, Wiring::Tcp, false);
    world(4, Wiring::Mixed, false);
}

#[test]
fn a_world_of_one_needs_no_sharing() {
    world(1, Wiring::Tcp, false);
}

#[test]
fn different_lengths_are_a_mismatch_on_every_rank() {
    let results = common::with_wiring(3, Wiring::Shm, T, |g| {
        g.alloc_shared::<f32>(100 + g.rank()).map(|_| ())
    });
    for (rank, r) in results.into_iter().enumerate() {
        let e = r.expect_err("different lengths must fail");
        assert_eq!(e.kind(), ErrorKind::Mismatch, "rank {rank}: {e}");
        assert!(e.to_string().contains("100 to 102"), "rank {rank}: {e}");
    }
}

#[test]
fn different_ops_on_one_allocation_are_a_mismatch() {
    let results = common::with_wiring(2, Wiring::Shm, T, |g| {
        // Large enough for the shared path (smaller buffers take the ordinary all-reduce).
        let mut buf = g.alloc_shared::<i32>(10_000)?;
        let op = if g.rank() == 0 {
            ReduceOp::Sum
        } else {
            ReduceOp::Max
        };
        let first = g.all_reduce_shared(&mut buf, op);
        // The buffer is unusable afterwards, with a message that says why.
        let again = g.all_reduce_shared(&mut buf, ReduceOp::Sum);
        Ok::<_, psyne::Error>((first, again))
    });
    for (rank, r) in results.into_iter().enumerate() {
        let (first, again) = r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        let e = first.expect_err("different ops must fail");
        assert_eq!(e.kind(), ErrorKind::Mismatch, "rank {rank}: {e}");
        let e = again.expect_err("a failed buffer refuses further calls");
        assert!(
            e.to_string().contains("earlier failure"),
            "rank {rank}: {e}"
        );
    }
}

/// The job id of [`shared_buffers_leave_nothing_in_dev_shm`]: every other test in this process
/// names its segments after `local<pid>` and creates them for a moment each (ring set-up, node
/// boards, shared buffers), so only a job id of its own tells this test's segments apart.
fn leak_check_job_id() -> String {
    format!("leakcheck{}", std::process::id())
}

#[test]
fn shared_buffers_leave_nothing_in_dev_shm() {
    let results = common::try_with_options(
        3,
        Wiring::Shm,
        T,
        Default::default(),
        |o| o.job_id = leak_check_job_id(),
        |g| {
            let g = g?;
            let buf = g.alloc_shared::<f64>(1 << 16)?;
            // Every rank has mapped every segment and the names are gone, while the buffer lives.
            g.barrier()?;
            let prefix = format!("psyne-{}-", leak_check_job_id());
            let names: Vec<String> = std::fs::read_dir("/dev/shm")
                .map(|d| {
                    d.filter_map(|e| e.ok())
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|n| n.starts_with(&prefix))
                        .collect()
                })
                .unwrap_or_default();
            Ok::<_, psyne::Error>((buf.is_shared(), names))
        },
    );
    for r in results {
        let (shared, names) = r.unwrap();
        assert!(shared);
        assert!(names.is_empty(), "segments left while in use: {names:?}");
    }
}

#[test]
fn a_shared_all_reduce_on_a_failed_group_is_refused() {
    let results = common::with_wiring(2, Wiring::Shm, T, |g| {
        let mut buf = g.alloc_shared::<f32>(10_000)?;
        assert!(buf.is_shared());
        // Different counts: the group fails with a mismatch on every rank.
        let mut small = vec![1.0f32; 10 + 10 * g.rank()];
        let first = g.all_reduce(&mut small, ReduceOp::Sum);
        let shared = g.all_reduce_shared(&mut buf, ReduceOp::Sum);
        Ok::<_, psyne::Error>((first, shared))
    });
    for (rank, r) in results.into_iter().enumerate() {
        let (first, shared) = r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        let e = first.expect_err("different counts must fail");
        assert_eq!(e.kind(), ErrorKind::Mismatch, "rank {rank}: {e}");
        let e = shared.expect_err("a failed group refuses shared calls too");
        assert_eq!(e.kind(), ErrorKind::Aborted, "rank {rank}: {e}");
        assert!(
            e.to_string().contains("count 10"),
            "names the first failure: {e}"
        );
    }
}

#[test]
fn a_failed_shared_all_reduce_poisons_the_group() {
    let results = common::with_wiring(2, Wiring::Shm, T, |g| {
        let mut buf = g.alloc_shared::<i32>(10_000)?;
        let op = if g.rank() == 0 {
            ReduceOp::Sum
        } else {
            ReduceOp::Max
        };
        let first = g.all_reduce_shared(&mut buf, op);
        let mut ordinary = vec![1i32; 4];
        let after = g.all_reduce(&mut ordinary, ReduceOp::Sum);
        let barrier = g.barrier();
        Ok::<_, psyne::Error>((first, after, barrier))
    });
    for (rank, r) in results.into_iter().enumerate() {
        let (first, after, barrier) = r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        let e = first.expect_err("different ops must fail");
        assert_eq!(e.kind(), ErrorKind::Mismatch, "rank {rank}: {e}");
        for later in [after.map(|_| ()), barrier] {
            let e = later.expect_err("the group refuses every later call");
            assert_eq!(e.kind(), ErrorKind::Aborted, "rank {rank}: {e}");
            assert!(e.to_string().contains("shared buffer"), "rank {rank}: {e}");
        }
    }
}

#[test]
fn a_rank_joining_a_shared_all_reduce_its_peer_gave_up_fails_and_writes_nothing() {
    // Issue 33, item 4, on shared buffers: rank 1 joins only once rank 0 has returned its
    // timeout (an event, not a sleep). It must fail too, and must not write its chunk of the
    // result into rank 0's buffer, which rank 0 owns again since its call returned.
    let len = 2 * psyne::MIN_SHARED_BYTES / std::mem::size_of::<f64>();
    let (gave_up, heard) = std::sync::mpsc::channel::<()>();
    let (finished, told) = std::sync::mpsc::channel::<()>();
    let (heard, told) = (std::sync::Mutex::new(heard), std::sync::Mutex::new(told));
    let timeout = Duration::from_millis(800);
    let results = common::with_wiring(2, Wiring::Shm, timeout, move |g| {
        let mut buf = g.alloc_shared::<f64>(len).expect("allocating");
        assert!(buf.is_shared());
        buf.fill((g.rank() + 1) as f64);
        if g.rank() == 1 {
            let heard = heard.lock().unwrap_or_else(|p| p.into_inner());
            heard.recv_timeout(timeout * 20).expect("rank 0 gives up");
        }
        let r = g.all_reduce_shared(&mut buf, ReduceOp::Sum);
        if g.rank() == 0 {
            let _ = gave_up.send(());
            let told = told.lock().unwrap_or_else(|p| p.into_inner());
            told.recv_timeout(timeout * 20).expect("rank 1 returns");
        } else {
            let _ = finished.send(());
        }
        (r, buf.to_vec())
    });
    for (rank, (r, buf)) in results.iter().enumerate() {
        let e = r
            .as_ref()
            .expect_err(&format!("rank {rank} must fail, as rank 0 did"));
        assert_eq!(e.kind(), ErrorKind::Timeout, "rank {rank}: {e}");
        let input = (rank + 1) as f64;
        let wrong = buf.iter().position(|&x| x != input);
        assert_eq!(
            wrong, None,
            "rank {rank}'s buffer changed after its failed call"
        );
    }
    let late = results[1].0.as_ref().expect_err("checked");
    assert!(late.message().contains("withdrew"), "{late}");
}
