//! Probe of results/broadcast-modes/: 2-rank broadcast time per buffer, several fresh buffers in one
//! job, each rank's local copy of the same size beside it. Build as an example of psyne:
//!   cp results/broadcast-modes/probe.rs examples/bcast_modes.rs
//!   cargo build --release --example bcast_modes
//!   target/release/psyrun -n 2 target/release/examples/bcast_modes BYTES BUFFERS ITERS ROUNDS
//! (env PCT=1: percentiles of the calls; LOCAL=1: the local copy's µs per batch).
use psyne::Communicator;
use std::time::Instant;

fn pfn(addr: usize) -> u64 {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open("/proc/self/pagemap").unwrap();
    f.seek(SeekFrom::Start((addr / 4096 * 8) as u64)).unwrap();
    let mut b = [0u8; 8];
    f.read_exact(&mut b).unwrap();
    u64::from_le_bytes(b) & ((1 << 55) - 1)
}

fn main() {
    let bytes: usize = std::env::args().nth(1).map(|a| a.parse().unwrap()).unwrap_or(1 << 20);
    let nbuf: usize = std::env::args().nth(2).map(|a| a.parse().unwrap()).unwrap_or(8);
    let iters: usize = std::env::args().nth(3).map(|a| a.parse().unwrap()).unwrap_or(100);
    let g = psyne::init().unwrap();
    let n = bytes / 4;
    let mut bufs: Vec<&mut [f32]> = (0..nbuf)
        .map(|_| unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            );
            std::slice::from_raw_parts_mut(p as *mut f32, n)
        })
        .collect();
    let rounds: usize = std::env::args().nth(4).map(|a| a.parse().unwrap()).unwrap_or(3);
    for r in 0..rounds {
        for (i, b) in bufs.iter_mut().enumerate() {
            for _ in 0..10 {
                g.broadcast(b, 0).unwrap();
                g.barrier().unwrap();
            }
            let mut t = 0.0;
            let mut each = Vec::new();
            for _ in 0..iters {
                let s = Instant::now();
                g.broadcast(b, 0).unwrap();
                let e = s.elapsed().as_secs_f64();
                t += e;
                each.push(e * 1e6);
                g.barrier().unwrap();
            }
            each.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let q = |f: f64| each[((each.len() - 1) as f64 * f) as usize];
            if std::env::var("PCT").is_ok() {
                println!("rank {} min {:.0} p10 {:.0} p25 {:.0} p50 {:.0} p75 {:.0} p90 {:.0} max {:.0}", g.rank(), q(0.0), q(0.1), q(0.25), q(0.5), q(0.75), q(0.9), q(1.0));
            }
            let src = vec![1.0f32; n];
            let mut dst = vec![0.0f32; n];
            let s = Instant::now();
            for _ in 0..iters {
                dst.copy_from_slice(&src);
                std::hint::black_box(&mut dst);
            }
            let local = s.elapsed().as_secs_f64() / iters as f64 * 1e6;
            let mut loc = vec![0.0f64; g.size()];
            g.all_gather_into(&[local], &mut loc).unwrap();
            if g.rank() == 0 && std::env::var("LOCAL").is_ok() {
                println!("local copy us {:.1} {:.1}", loc[0], loc[1]);
            }
            let mut all = vec![0.0f64; g.size()];
            g.all_gather_into(&[t / iters as f64 * 1e6], &mut all).unwrap();
            let p = pfn(b.as_ptr() as usize);
            let mut pf = vec![0u64; g.size()];
            g.all_gather_into(&[p], &mut pf).unwrap();
            if g.rank() == 0 {
                println!("round {r} buf {i} us {:.1} {:.1} pfn {:x} {:x}", all[0], all[1], pf[0], pf[1]);
            }
        }
    }
}
