//! An in-process [`Fabric`] pair for tests: posting a work request performs it at once (copies
//! the bytes into the peer's memory and queues both completions), with the checks a real
//! adapter makes: a send or write with immediate needs a posted receive on the peer (a real
//! reliable connection would stall, here the test fails), a send must fit its slot, a write must
//! stay inside the ring.

use super::fabric::{Completion, Fabric, Shape};
use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// What one end exposes to the other.
struct Side {
    ring: Vec<u8>,
    slots: Vec<Vec<u8>>,
    posted: VecDeque<usize>,
    credit_in: [u64; 2],
    cq: VecDeque<Completion>,
}

struct Wire {
    sides: Mutex<[Side; 2]>,
    bell: Condvar,
}

/// One end of a fake connection.
pub struct FakeFabric {
    wire: Arc<Wire>,
    me: usize,
    staging: Vec<u8>,
    send_slots: Vec<Vec<u8>>,
    credit_out: Vec<[u64; 2]>,
    /// Fail every work request posted after this many (to test broken connections).
    pub fail_after: Option<usize>,
    posted: usize,
}

/// A registration of user memory in the fake: the range it covers.
pub struct FakeRegion(pub usize, pub usize);

/// Two connected ends with every receive slot posted.
pub fn pair(shape: Shape) -> (FakeFabric, FakeFabric) {
    let side = || Side {
        ring: vec![0; shape.ring],
        slots: vec![vec![0; shape.eager]; shape.depth],
        posted: (0..shape.depth).collect(),
        credit_in: [0, 0],
        cq: VecDeque::new(),
    };
    let wire = Arc::new(Wire {
        sides: Mutex::new([side(), side()]),
        bell: Condvar::new(),
    });
    let end = |me| FakeFabric {
        wire: wire.clone(),
        me,
        staging: vec![0; shape.ring],
        send_slots: vec![vec![0; shape.eager]; shape.depth],
        credit_out: vec![[0, 0]; shape.credit_slots],
        fail_after: None,
        posted: 0,
    };
    (end(0), end(1))
}

impl FakeFabric {
    /// Performs one work request: `deliver` acts on (own side, peer side).
    fn perform(
        &mut self,
        wr_id: u64,
        deliver: impl FnOnce(&mut Side, &mut Side) -> Result<(), String>,
    ) -> io::Result<()> {
        self.posted += 1;
        let mut sides = self.wire.sides.lock().expect("fake wire poisoned");
        let [a, b] = &mut *sides;
        let (own, peer) = if self.me == 0 { (a, b) } else { (b, a) };
        let failed = self.fail_after.is_some_and(|n| self.posted > n);
        let result = if failed {
            Err("transport retry counter exceeded (fake)".to_string())
        } else {
            deliver(own, peer)
        };
        own.cq.push_back(match result {
            Ok(()) => Completion::Sent { wr_id },
            Err(what) => Completion::Failed { wr_id, what },
        });
        self.wire.bell.notify_all();
        Ok(())
    }
}

fn take_receive(peer: &mut Side) -> Result<usize, String> {
    peer.posted
        .pop_front()
        .ok_or_else(|| "receiver not ready: the sender overran the peer's receives".to_string())
}

impl Fabric for FakeFabric {
    type Region = FakeRegion;

    fn fill_staging(&mut self, offset: usize, data: &[u8]) {
        self.staging[offset..offset + data.len()].copy_from_slice(data);
    }

    fn fill_send_slot(&mut self, slot: usize, offset: usize, data: &[u8]) {
        self.send_slots[slot][offset..offset + data.len()].copy_from_slice(data);
    }

    fn read_ring(&self, offset: usize, out: &mut [u8]) {
        let sides = self.wire.sides.lock().expect("fake wire poisoned");
        out.copy_from_slice(&sides[self.me].ring[offset..offset + out.len()]);
    }

    fn read_recv_slot(&self, slot: usize, offset: usize, out: &mut [u8]) {
        let sides = self.wire.sides.lock().expect("fake wire poisoned");
        out.copy_from_slice(&sides[self.me].slots[slot][offset..offset + out.len()]);
    }

    fn credit_in(&self) -> [u64; 2] {
        self.wire.sides.lock().expect("fake wire poisoned")[self.me].credit_in
    }

    fn set_credit_out(&mut self, slot: usize, words: [u64; 2]) {
        self.credit_out[slot] = words;
    }

    fn post_send(&mut self, wr_id: u64, slot: usize, len: usize) -> io::Result<()> {
        let data = self.send_slots[slot][..len].to_vec();
        self.perform(wr_id, |_, peer| {
            let rs = take_receive(peer)?;
            if len > peer.slots[rs].len() {
                return Err(format!("a send of {len} bytes overflows the receive slot"));
            }
            peer.slots[rs][..len].copy_from_slice(&data);
            peer.cq.push_back(Completion::Received { slot: rs, len });
            Ok(())
        })
    }

    fn post_write(&mut self, wr_id: u64, offset: usize, len: usize) -> io::Result<()> {
        let data = self.staging[offset..offset + len].to_vec();
        self.perform(wr_id, |_, peer| write_into(peer, offset, &data))
    }

    fn post_write_from(
        &mut self,
        wr_id: u64,
        region: &FakeRegion,
        addr: usize,
        offset: usize,
        len: usize,
    ) -> io::Result<()> {
        assert!(
            region.0 <= addr && addr + len <= region.0 + region.1,
            "a write from memory outside its registration"
        );
        // SAFETY: the link writes from a slice the caller lent it for this call and waits for the
        // write's completion before returning; this fake performs the write right here.
        let data = unsafe { std::slice::from_raw_parts(addr as *const u8, len) }.to_vec();
        self.perform(wr_id, |_, peer| write_into(peer, offset, &data))
    }

    fn post_credit(&mut self, wr_id: u64, slot: usize) -> io::Result<()> {
        let words = self.credit_out[slot];
        self.perform(wr_id, |_, peer| {
            peer.credit_in = words;
            Ok(())
        })
    }

    fn post_recv(&mut self, slot: usize) -> io::Result<()> {
        let mut sides = self.wire.sides.lock().expect("fake wire poisoned");
        sides[self.me].posted.push_back(slot);
        Ok(())
    }

    fn register(&mut self, start: usize, len: usize) -> io::Result<FakeRegion> {
        Ok(FakeRegion(start, len))
    }

    fn poll(&mut self, out: &mut Vec<Completion>) -> io::Result<()> {
        let mut sides = self.wire.sides.lock().expect("fake wire poisoned");
        out.extend(sides[self.me].cq.drain(..));
        Ok(())
    }

    fn arm(&mut self) {}

    fn wait(&mut self, _also: Option<RawFd>, timeout: Duration) {
        let sides = self.wire.sides.lock().expect("fake wire poisoned");
        if sides[self.me].cq.is_empty() {
            let _ = self.wire.bell.wait_timeout(sides, timeout);
        }
    }
}

fn write_into(peer: &mut Side, offset: usize, data: &[u8]) -> Result<(), String> {
    if offset + data.len() > peer.ring.len() {
        return Err("an RDMA write past the end of the ring".into());
    }
    let rs = take_receive(peer)?;
    peer.ring[offset..offset + data.len()].copy_from_slice(data);
    peer.cq.push_back(Completion::Written {
        slot: rs,
        len: data.len(),
    });
    Ok(())
}
