//! `psybench peak`: how fast this host can move bytes at all, the yardstick for "% of peak":
//! a single-threaded memory copy and a loopback TCP stream between two threads (the kernel's
//! own socket buffers, 4 MiB writes and reads). Loopback is moody: the same stream written and
//! read 256 KiB at a time ran at 3.7–8.3 GB/s across runs here, and psyne's broadcast of 64 MiB
//! over TCP reaches about 7 GB/s (`results/tcp-sndbuf/`), so take this as a floor of what
//! loopback can do, not a ceiling.

use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

/// This host's raw bandwidths, GB/s = 1e9 bytes per second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Peak {
    /// Single-threaded memcpy of `copy_bytes`, median of several runs.
    pub memcpy_gbps: f64,
    /// Bytes per copy.
    pub copy_bytes: u64,
    /// One TCP stream over 127.0.0.1, median of several runs.
    pub tcp_loopback_gbps: f64,
    /// Bytes per stream.
    pub stream_bytes: u64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Measures memcpy bandwidth on `bytes`-sized buffers (median of `runs`).
pub fn memcpy_gbps(bytes: usize, runs: usize) -> f64 {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    dst.copy_from_slice(&src); // fault the pages in
    let times = (0..runs.max(1))
        .map(|_| {
            let start = Instant::now();
            dst.copy_from_slice(&src);
            std::hint::black_box(&dst);
            start.elapsed().as_secs_f64()
        })
        .collect();
    bytes as f64 / median(times) / 1e9
}

/// Measures psyne's reduction kernel (`dst = dst + src`) for `dtype` on `bytes`-sized buffers
/// (median of `runs`), in GB/s of `dst`: compare it with [`memcpy_gbps`] of the same size to see
/// whether reduction or memory is the limit.
pub fn reduce_gbps(dtype: psyne::DType, bytes: usize, runs: usize) -> f64 {
    let words = bytes.div_ceil(8);
    // u64 storage keeps every element type aligned; zero bits are a valid value of every type.
    let src = vec![0u64; words];
    let mut dst = vec![0u64; words];
    let r = psyne::reduce::Reducer::new(dtype, psyne::ReduceOp::Sum)
        .unwrap_or_else(|_| unreachable!("sum is defined for every type"));
    let mut apply = || {
        r.apply(
            bytemuck::cast_slice_mut(&mut dst),
            bytemuck::cast_slice(&src),
        )
    };
    apply(); // fault the pages in
    let times = (0..runs.max(1))
        .map(|_| {
            let start = Instant::now();
            apply();
            start.elapsed().as_secs_f64()
        })
        .collect();
    (words * 8) as f64 / median(times) / 1e9
}

/// Measures one loopback TCP stream of `bytes` between two threads (median of `runs`).
pub fn tcp_loopback_gbps(bytes: usize, runs: usize) -> std::io::Result<f64> {
    const CHUNK: usize = 4 << 20;
    let mut times = Vec::new();
    for _ in 0..runs.max(1) {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let sender = std::thread::spawn(move || -> std::io::Result<()> {
            let mut s = TcpStream::connect(addr)?;
            s.set_nodelay(true)?;
            let buf = vec![7u8; CHUNK];
            let mut left = bytes;
            while left > 0 {
                let n = left.min(CHUNK);
                s.write_all(&buf[..n])?;
                left -= n;
            }
            Ok(())
        });
        let (mut r, _) = listener.accept()?;
        let mut buf = vec![0u8; CHUNK];
        let start = Instant::now();
        let mut got = 0;
        while got < bytes {
            let n = r.read(&mut buf)?;
            if n == 0 {
                break;
            }
            got += n;
        }
        times.push(start.elapsed().as_secs_f64());
        sender
            .join()
            .map_err(|_| std::io::Error::other("the sending thread panicked"))??;
    }
    Ok(bytes as f64 / median(times) / 1e9)
}

/// Both measurements, with sizes large enough to leave the caches (256 MiB copies, 1 GiB
/// streams).
pub fn measure() -> std::io::Result<Peak> {
    let copy_bytes = 256 << 20;
    let stream_bytes = 1 << 30;
    Ok(Peak {
        memcpy_gbps: memcpy_gbps(copy_bytes, 5),
        copy_bytes: copy_bytes as u64,
        tcp_loopback_gbps: tcp_loopback_gbps(stream_bytes, 3)?,
        stream_bytes: stream_bytes as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_measurements_are_positive_and_finite() {
        let m = memcpy_gbps(1 << 20, 3);
        assert!(m.is_finite() && m > 0.0, "{m}");
        let t = tcp_loopback_gbps(8 << 20, 1).unwrap();
        assert!(t.is_finite() && t > 0.0, "{t}");
    }
}
