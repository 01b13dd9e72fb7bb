//! The link's protocol over the in-process fake fabric: byte-stream semantics, ring wrap-around,
//! credit (the fake fails any write that would overrun the peer), end of stream, zero copy and a
//! broken connection.

use super::*;
use crate::transport::rdma::fake::{pair, FakeFabric};
use proptest::prelude::*;

const SMALL: Shape = Shape {
    ring: 4096,
    depth: 4,
    eager: 64,
    max_chunk: 1000,
    sq_data: 6,
    credit_slots: 2,
};

fn links(shape: Shape, zero_copy: Option<usize>) -> (RdmaLink<FakeFabric>, RdmaLink<FakeFabric>) {
    let (a, b) = pair(shape);
    (
        RdmaLink::new(a, shape, None, zero_copy).unwrap(),
        RdmaLink::new(b, shape, None, zero_copy).unwrap(),
    )
}

fn stream(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed * 7) % 251) as u8)
        .collect()
}

/// Pushes `data` with writes of the given sizes (cycled) while draining the other end with reads
/// of the given sizes, on one thread; returns what was read.
fn transfer(
    tx: &mut RdmaLink<FakeFabric>,
    rx: &mut RdmaLink<FakeFabric>,
    data: &[u8],
    writes: &[usize],
    reads: &[usize],
) -> Vec<u8> {
    let (mut sent, mut out, mut w, mut r) = (0, Vec::new(), 0, 0);
    let mut idle = 0;
    while out.len() < data.len() {
        let mut moved = false;
        if sent < data.len() {
            let n = writes[w % writes.len()].max(1).min(data.len() - sent);
            // Two slices, as the executor writes a header and a payload.
            let (x, y) = data[sent..sent + n].split_at(n / 3);
            match tx.write_some(&[IoSlice::new(x), IoSlice::new(y)]) {
                Ok(k) => {
                    assert!(k > 0 && k <= n);
                    sent += k;
                    moved = true;
                }
                Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{e}"),
            }
            w += 1;
        }
        let mut buf = vec![0u8; reads[r % reads.len()].max(1)];
        r += 1;
        match rx.read_some(&mut buf) {
            Ok(0) => panic!("end of stream in the middle"),
            Ok(k) => {
                out.extend_from_slice(&buf[..k]);
                moved = true;
            }
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{e}"),
        }
        idle = if moved { 0 } else { idle + 1 };
        assert!(idle < 100, "no progress: sent {sent}, read {}", out.len());
    }
    out
}

#[test]
fn bytes_arrive_in_order_across_ring_wraps() {
    let (mut a, mut b) = links(SMALL, None);
    let data = stream(1, 100_000);
    let got = transfer(
        &mut a,
        &mut b,
        &data,
        &[1, 63, 64, 65, 3000, 9000],
        &[7, 4096, 100],
    );
    assert_eq!(got, data);
    // And back the other way on the same connection.
    let data = stream(2, 50_000);
    assert_eq!(transfer(&mut b, &mut a, &data, &[5000, 2], &[1, 333]), data);
}

#[test]
fn a_sender_stops_when_the_reader_does_not_read() {
    let (mut a, b) = links(SMALL, None);
    let big = vec![9u8; 20_000];
    let mut sent = 0;
    loop {
        match a.write_some(&[IoSlice::new(&big)]) {
            Ok(n) => sent += n,
            Err(e) => {
                assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{e}");
                break;
            }
        }
        assert!(
            sent <= SMALL.ring,
            "wrote {sent} bytes into a ring of {}",
            SMALL.ring
        );
    }
    assert!(sent > 0);
    assert!(b.pending());
    // Small messages stop too once the peer's receives are used up.
    let mut small = 0;
    while a.write_some(&[IoSlice::new(b"x")]).is_ok() {
        small += 1;
        assert!(small <= SMALL.depth);
    }
}

#[test]
fn the_end_of_stream_follows_the_data() {
    let (mut a, mut b) = links(SMALL, None);
    a.write_some(&[IoSlice::new(b"hello")]).unwrap();
    a.write_some(&[IoSlice::new(&[1u8; 300])]).unwrap();
    a.close_write();
    assert!(a.write_some(&[IoSlice::new(b"late")]).is_err());
    let mut buf = [0u8; 1000];
    let mut got = Vec::new();
    loop {
        match b.read_some(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(got.len(), 305);
    assert_eq!(&got[..5], b"hello");
    assert_eq!(b.read_some(&mut buf).unwrap(), 0, "the end stays the end");
}

#[test]
fn zero_copy_writes_carry_the_same_bytes() {
    let shape = Shape {
        ring: 1 << 16,
        ..SMALL
    };
    let (mut a, mut b) = links(shape, Some(2048));
    let data = stream(3, 200_000);
    assert_eq!(
        transfer(&mut a, &mut b, &data, &[50_000, 10], &[65_536]),
        data
    );
    let e = a.engine.get_mut();
    assert!(
        !e.cache.is_empty(),
        "the large slices went through the cache"
    );
}

#[test]
fn a_failed_work_request_breaks_the_link_with_a_reason() {
    let (mut fa, fb) = pair(SMALL);
    fa.fail_after = Some(2);
    let mut a = RdmaLink::new(fa, SMALL, None, None).unwrap();
    let _b = RdmaLink::new(fb, SMALL, None, None).unwrap();
    for _ in 0..3 {
        let _ = a.write_some(&[IoSlice::new(b"abc")]);
    }
    let e = a.write_some(&[IoSlice::new(b"abc")]).unwrap_err();
    assert!(e.to_string().contains("retry counter exceeded"), "{e}");
    assert!(
        a.pending(),
        "a broken link reports itself so a read sees the error"
    );
    assert!(a.read_some(&mut [0u8; 4]).is_err());
}

#[test]
fn two_threads_stream_both_ways_at_once() {
    let shape = Shape {
        ring: 8192,
        depth: 8,
        eager: 256,
        max_chunk: 3000,
        sq_data: 12,
        credit_slots: 2,
    };
    let (a, b) = links(shape, None);
    let run = |mut link: RdmaLink<FakeFabric>, seed: u64| {
        std::thread::spawn(move || {
            let data = stream(seed, 300_000);
            let expect = stream(seed ^ 1, 300_000);
            let (mut sent, mut got) = (0, Vec::new());
            let mut buf = vec![0u8; 5000];
            let until = Instant::now() + Duration::from_secs(30);
            while sent < data.len() || got.len() < expect.len() {
                assert!(
                    Instant::now() < until,
                    "stalled: sent {sent}, got {}",
                    got.len()
                );
                let mut moved = false;
                if sent < data.len() {
                    let n = ((sent * 7) % 4000 + 1).min(data.len() - sent);
                    if let Ok(k) = link.write_some(&[IoSlice::new(&data[sent..sent + n])]) {
                        sent += k;
                        moved = true;
                    }
                }
                match link.read_some(&mut buf) {
                    Ok(0) => panic!("early end"),
                    Ok(k) => {
                        got.extend_from_slice(&buf[..k]);
                        moved = true;
                    }
                    Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{e}"),
                }
                if !moved {
                    link.block(
                        got.len() < expect.len(),
                        sent < data.len(),
                        Duration::from_millis(5),
                    );
                }
            }
            assert!(got == expect, "seed {seed}: the stream differs");
        })
    };
    let (x, y) = (run(a, 10), run(b, 11));
    x.join().unwrap();
    y.join().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn any_write_and_read_sizes_keep_the_stream(
        writes in proptest::collection::vec(1usize..6000, 1..8),
        reads in proptest::collection::vec(1usize..6000, 1..8),
        len in 0usize..40_000,
    ) {
        let (mut a, mut b) = links(SMALL, None);
        let data = stream(len as u64, len);
        prop_assert_eq!(transfer(&mut a, &mut b, &data, &writes, &reads), data);
    }
}
