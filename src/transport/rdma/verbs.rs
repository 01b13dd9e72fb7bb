//! The verbs side (feature `rdma`): finding the adapter, and a [`Fabric`] over a real
//! reliable-connected queue pair. Everything here needs an RDMA device to run; the protocol above
//! it is tested over the in-tree fake, and what this file does has not run on hardware in this
//! repository's CI (see the README).

use super::config::{RdmaConfig, EAGER_BYTES, MAX_CHUNK, RECV_DEPTH};
use super::endpoint::{EndpointInfo, LinkLayer, Mtu};
use super::fabric::{Completion, Fabric, Shape};
use super::link::RdmaLink;
use super::qp_state::{self, LocalPort, QpAttr, QpMachine, QpState, Transition};
use super::status::Availability;
use crate::auth::with_deadline;
use crate::error::{Error, ErrorKind, Result};
use crate::transport::table::{Connected, Formation, Pair};
use crate::transport::Link;
use sideway::ibverbs::address::{AddressHandleAttribute, Gid, GidType};
use sideway::ibverbs::completion::{
    BasicCompletionQueue, CompletionChannel, GenericCompletionQueue, PollCompletionQueueError,
    WorkCompletionOperationType, WorkCompletionStatus,
};
use sideway::ibverbs::device::{Device as VerbsDevice, DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{self, DeviceContext, PortState};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, PostSendGuard, QueuePair, QueuePairAttribute, QueuePairState,
    SetScatterGatherEntry, WorkRequestFlags,
};
use sideway::ibverbs::AccessFlags;
use std::alloc::Layout;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

const NO_VERBS_FIX: &str = "install rdma-core's user-space library and the provider for your adapter (Debian/Ubuntu: apt-get install libibverbs1 ibverbs-providers)";

const NO_DEVICE_FIX: &str = "check `ibv_devices`, and that the kernel's RDMA modules are loaded (ib_uverbs and the adapter's driver: mlx5_ib, irdma, bnxt_re, ...)";

/// An opened adapter port, shared by every link of a group.
pub struct Device {
    ctx: Arc<DeviceContext>,
    pd: Arc<ProtectionDomain>,
    name: String,
    port: u8,
    gid_index: u32,
    lid: u16,
    gid: [u8; 16],
    link_layer: LinkLayer,
    mtu: Mtu,
}

fn libibverbs_loads() -> bool {
    // SAFETY: the name is a NUL-terminated string; dlopen has no other precondition. The handle
    // is closed at once (the library stays loaded if sideway's loader holds it too).
    unsafe {
        let h = libc::dlopen(
            c"libibverbs.so.1".as_ptr(),
            libc::RTLD_LAZY | libc::RTLD_LOCAL,
        );
        if h.is_null() {
            return false;
        }
        libc::dlclose(h);
        true
    }
}

impl Device {
    /// Opens the adapter and port `config` names, or the first with an active port; absent
    /// (with reason and fix) where there is none.
    pub fn open(config: &RdmaConfig) -> std::result::Result<Device, Availability> {
        let list = device_list(config)?;
        let mut seen = Vec::new();
        for dev in list.iter() {
            let name = dev.name();
            if config.device.as_ref().is_some_and(|w| *w != name) {
                continue;
            }
            if let Some(device) = open_adapter(&dev, name, config, &mut seen) {
                return Ok(device);
            }
        }
        Err(Availability::absent(
            format!("no active RDMA port ({})", seen.join("; ")),
            "check the link with `ibv_devinfo` (and the subnet manager on InfiniBand), or pick another with PSY_RDMA_DEVICE / PSY_RDMA_PORT",
        ))
    }

    /// One line: adapter, port, link layer, address.
    pub fn describe(&self) -> String {
        match self.link_layer {
            LinkLayer::Infiniband => format!(
                "{} port {}, InfiniBand, LID {}, MTU {}",
                self.name,
                self.port,
                self.lid,
                self.mtu.bytes()
            ),
            LinkLayer::Ethernet => format!(
                "{} port {}, RoCE, GID {} (index {}), MTU {}",
                self.name,
                self.port,
                Gid { raw: self.gid },
                self.gid_index,
                self.mtu.bytes()
            ),
        }
    }
}

/// The adapters libibverbs lists; absent where it cannot be loaded, lists none, or lacks the
/// one `config` names.
fn device_list(config: &RdmaConfig) -> std::result::Result<DeviceList, Availability> {
    if !libibverbs_loads() {
        return Err(Availability::absent(
            "libibverbs.so.1 cannot be loaded",
            NO_VERBS_FIX,
        ));
    }
    let list = DeviceList::new().map_err(|e| {
        let mut why = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            why = format!("{why}: {s}");
            source = s.source();
        }
        Availability::absent(
            format!("no RDMA device (libibverbs cannot list devices: {why})"),
            NO_DEVICE_FIX,
        )
    })?;
    let names: Vec<String> = list.iter().map(|d| d.name()).collect();
    if names.is_empty() {
        return Err(Availability::absent(
            "no RDMA device (libibverbs lists none)",
            NO_DEVICE_FIX,
        ));
    }
    if let Some(want) = &config.device {
        if !names.contains(want) {
            return Err(Availability::absent(
                format!(
                    "{}={want}: no such RDMA device (found: {})",
                    super::config::DEVICE,
                    names.join(", ")
                ),
                "set PSY_RDMA_DEVICE to one of those, or unset it",
            ));
        }
    }
    Ok(list)
}

/// Opens adapter `name` on its first usable port (the one `config` names, else any active);
/// what stood in the way goes to `seen`.
fn open_adapter(
    dev: &VerbsDevice<'_>,
    name: String,
    config: &RdmaConfig,
    seen: &mut Vec<String>,
) -> Option<Device> {
    let ctx = match dev.open() {
        Ok(c) => c,
        Err(e) => {
            seen.push(format!("{name}: cannot open ({e})"));
            return None;
        }
    };
    let ports: Vec<u8> = match (config.port, ctx.query_device()) {
        (Some(p), _) => vec![p],
        (None, Ok(attr)) => (1..=attr.phys_port_cnt()).collect(),
        (None, Err(e)) => {
            seen.push(format!("{name}: cannot query ({e})"));
            return None;
        }
    };
    for port in ports {
        match open_port(&ctx, &name, port, config) {
            Ok(device) => return Some(device),
            Err(why) => seen.push(why),
        }
    }
    None
}

/// The device on `port` of an opened adapter, if the port is active and its GID and a
/// protection domain can be had; else why not.
fn open_port(
    ctx: &Arc<DeviceContext>,
    name: &str,
    port: u8,
    config: &RdmaConfig,
) -> std::result::Result<Device, String> {
    let attr = ctx
        .query_port(port)
        .map_err(|e| format!("{name} port {port}: {e}"))?;
    if attr.port_state() != PortState::Active {
        return Err(format!("{name} port {port} is {:?}", attr.port_state()));
    }
    let link_layer = match attr.link_layer() {
        device_context::LinkLayer::Ethernet => LinkLayer::Ethernet,
        _ => LinkLayer::Infiniband,
    };
    let gid_index = config
        .gid_index
        .unwrap_or_else(|| pick_gid(ctx, port, link_layer));
    let gid = ctx
        .query_gid(port, gid_index)
        .map_err(|e| format!("{name} port {port}: GID {gid_index}: {e}"))?
        .raw;
    let pd = ctx
        .alloc_pd()
        .map_err(|e| format!("{name}: cannot allocate a protection domain ({e})"))?;
    let mtu = Mtu::from_code(attr.active_mtu() as u8).unwrap_or(Mtu::MTU_1024);
    Ok(Device {
        ctx: Arc::clone(ctx),
        pd,
        name: name.to_string(),
        port,
        gid_index,
        lid: attr.lid(),
        gid,
        link_layer,
        mtu,
    })
}

/// On RoCE, the port's first RoCE v2 GID (an IPv4-mapped one if any), else index 0.
fn pick_gid(ctx: &DeviceContext, port: u8, link_layer: LinkLayer) -> u32 {
    if link_layer == LinkLayer::Infiniband {
        return 0;
    }
    let Ok(table) = ctx.query_gid_table() else {
        return 0;
    };
    let v2: Vec<_> = table
        .iter()
        .filter(|e| e.port_num() == u32::from(port) && e.gid_type() == GidType::RoceV2)
        .filter(|e| !e.gid().is_zero())
        .collect();
    let mapped = v2
        .iter()
        .find(|e| e.gid().raw[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
    mapped.or(v2.first()).map(|e| e.gid_index()).unwrap_or(0)
}

/// One link's registered memory: ring, staging, receive slots, send slots, credit words.
struct Buffers {
    base: NonNull<u8>,
    layout: Layout,
    ring: usize,
    staging: usize,
    recv_slots: usize,
    send_slots: usize,
    credit_in: usize,
    credit_out: usize,
}

impl Buffers {
    fn new(shape: &Shape) -> io::Result<Buffers> {
        let ring = 0;
        let staging = shape.ring;
        let recv_slots = staging + shape.ring;
        let send_slots = recv_slots + shape.depth * shape.eager;
        let credit_in = (send_slots + shape.depth * shape.eager).next_multiple_of(64);
        let credit_out = credit_in + 64;
        let len = credit_out + shape.credit_slots * 16;
        let layout = Layout::from_size_align(len, 4096)
            .map_err(|e| io::Error::other(format!("buffer layout: {e}")))?;
        // SAFETY: the layout has a non-zero size (the ring alone is at least 4 KiB).
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let base =
            NonNull::new(p).ok_or_else(|| io::Error::other("out of memory for RDMA buffers"))?;
        Ok(Buffers {
            base,
            layout,
            ring,
            staging,
            recv_slots,
            send_slots,
            credit_in,
            credit_out,
        })
    }

    fn addr(&self, offset: usize) -> u64 {
        self.base.as_ptr() as u64 + offset as u64
    }

    /// Copies `data` to `offset`. The caller keeps writes inside the allocation.
    fn put(&self, offset: usize, data: &[u8]) {
        assert!(offset + data.len() <= self.layout.size());
        // SAFETY: in bounds (checked); the destination is this process's memory, not being
        // written by the adapter (staging, send slots and credit words are only read by it, and
        // only after the work request that reads them is posted).
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.as_ptr().add(offset), data.len())
        }
    }

    /// Copies from `offset` into `out`.
    fn get(&self, offset: usize, out: &mut [u8]) {
        assert!(offset + out.len() <= self.layout.size());
        // SAFETY: in bounds (checked); the bytes read were placed by the adapter before the
        // completion that announced them was polled, and are not written again until the link
        // returns credit for them.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.base.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            )
        }
    }
}

impl Drop for Buffers {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; the memory region registered over it is
        // dropped first (field order in `VerbsFabric`).
        unsafe { std::alloc::dealloc(self.base.as_ptr(), self.layout) }
    }
}

/// A link's queue pair, completion queue and registered buffers.
pub struct VerbsFabric {
    // Field order is drop order: the queue pair before its completion queue and channel, the
    // memory region before the memory.
    qp: BasicQueuePair,
    cq: Arc<BasicCompletionQueue>,
    channel: Arc<CompletionChannel>,
    mr: Arc<MemoryRegion>,
    buf: Buffers,
    pd: Arc<ProtectionDomain>,
    shape: Shape,
    peer: Option<EndpointInfo>,
    armed: bool,
}

// SAFETY: `Buffers` points to memory this fabric owns alone; sideway's handles are Send. The
// fabric is used by one thread at a time (the link holds it behind `&mut`/`RefCell`).
unsafe impl Send for VerbsFabric {}

/// A registration of user memory for zero-copy sends.
pub struct UserRegion(Arc<MemoryRegion>);

fn op_err(what: &str) -> impl Fn(String) -> io::Error + '_ {
    move |e| io::Error::other(format!("{what}: {e}"))
}

impl VerbsFabric {
    /// Creates the queue pair (moved to init) and buffers, and posts every receive.
    fn create(device: &Device, shape: Shape) -> io::Result<VerbsFabric> {
        let channel = device
            .ctx
            .create_comp_channel()
            .map_err(|e| op_err("creating a completion channel")(e.to_string()))?;
        channel.set_nonblocking(true)?;
        let cqe = (shape.depth + shape.sq_data + shape.credit_slots + 2) as u32;
        let cq = device
            .ctx
            .create_cq_builder()
            .setup_cqe(cqe)
            .setup_comp_channel(&channel, 0)
            .build()
            .map_err(|e| op_err("creating a completion queue")(e.to_string()))?;
        let handle = GenericCompletionQueue::from(Arc::clone(&cq));
        let qp = device
            .pd
            .create_qp_builder()
            .setup_send_cq(handle.clone())
            .setup_recv_cq(handle)
            .setup_max_send_wr((shape.sq_data + shape.credit_slots + 1) as u32)
            .setup_max_recv_wr(shape.depth as u32)
            .setup_max_send_sge(1)
            .setup_max_recv_sge(1)
            .build()
            .map_err(|e| op_err("creating a queue pair")(e.to_string()))?;
        let buf = Buffers::new(&shape)?;
        let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
        // SAFETY: `buf` owns `layout.size()` bytes at `base` and outlives the region (field order).
        let mr = unsafe {
            device
                .pd
                .reg_mr(buf.base.as_ptr() as usize, buf.layout.size(), access)
        }
        .map_err(|e| op_err("registering link buffers")(e.to_string()))?;
        let mut fabric = VerbsFabric {
            qp,
            cq,
            channel,
            mr,
            buf,
            pd: Arc::clone(&device.pd),
            shape,
            peer: None,
            armed: false,
        };
        let mut machine = QpMachine(QpState::Reset);
        fabric.apply(
            &mut machine,
            &qp_state::plan(
                device.local(),
                &device.endpoint_template(),
                &device.endpoint_template(),
            )[0],
        )?;
        for slot in 0..shape.depth {
            fabric.post_recv(slot)?;
        }
        Ok(fabric)
    }

    fn endpoint(&self, device: &Device, psn: u32) -> EndpointInfo {
        EndpointInfo {
            qpn: self.qp.qp_number(),
            psn,
            ring_addr: self.buf.addr(self.buf.ring),
            ring_rkey: self.mr.rkey(),
            ring_len: self.shape.ring as u32,
            credit_addr: self.buf.addr(self.buf.credit_in),
            credit_rkey: self.mr.rkey(),
            depth: self.shape.depth as u16,
            eager: self.shape.eager as u32,
            ..device.endpoint_template()
        }
    }

    /// Applies one planned transition to the queue pair.
    fn apply(&mut self, machine: &mut QpMachine, t: &Transition) -> io::Result<()> {
        machine.apply(t).map_err(io::Error::other)?;
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(match t.to {
            QpState::Reset => QueuePairState::Reset,
            QpState::Init => QueuePairState::Init,
            QpState::Rtr => QueuePairState::ReadyToReceive,
            QpState::Rts => QueuePairState::ReadyToSend,
            QpState::Error => QueuePairState::Error,
        });
        for a in &t.attrs {
            match a {
                QpAttr::PkeyIndex(i) => {
                    attr.setup_pkey_index(*i);
                }
                QpAttr::Port(p) => {
                    attr.setup_port(*p);
                }
                QpAttr::RemoteWriteAccess => {
                    attr.setup_access_flags(AccessFlags::LocalWrite | AccessFlags::RemoteWrite);
                }
                QpAttr::PathMtu(m) => {
                    attr.setup_path_mtu(device_context::Mtu::from(u32::from(m.code())));
                }
                QpAttr::DestQpn(n) => {
                    attr.setup_dest_qp_num(*n);
                }
                QpAttr::RqPsn(n) => {
                    attr.setup_rq_psn(*n);
                }
                QpAttr::MaxDestRdAtomic(n) => {
                    attr.setup_max_dest_read_atomic(*n);
                }
                QpAttr::MinRnrTimer(n) => {
                    attr.setup_min_rnr_timer(*n);
                }
                QpAttr::Av(av) => {
                    let mut ah = AddressHandleAttribute::new();
                    ah.setup_dest_lid(av.dlid)
                        .setup_port(av.port)
                        .setup_service_level(av.sl);
                    if let Some((gid, index, hops)) = av.grh {
                        ah.setup_grh_dest_gid(&Gid { raw: gid })
                            .setup_grh_src_gid_index(index)
                            .setup_grh_hop_limit(hops);
                    }
                    attr.setup_address_vector(&ah);
                }
                QpAttr::SqPsn(n) => {
                    attr.setup_sq_psn(*n);
                }
                QpAttr::Timeout(n) => {
                    attr.setup_timeout(*n);
                }
                QpAttr::RetryCnt(n) => {
                    attr.setup_retry_cnt(*n);
                }
                QpAttr::RnrRetry(n) => {
                    attr.setup_rnr_retry(*n);
                }
                QpAttr::MaxRdAtomic(n) => {
                    attr.setup_max_read_atomic(*n);
                }
            }
        }
        self.qp
            .modify(&attr)
            .map_err(|e| io::Error::other(format!("moving the queue pair to {:?}: {e}", t.to)))
    }

    fn peer(&self) -> io::Result<&EndpointInfo> {
        self.peer
            .as_ref()
            .ok_or_else(|| io::Error::other("the queue pair is not connected"))
    }

    fn post(
        &mut self,
        wr_id: u64,
        local: u64,
        lkey: u32,
        len: usize,
        remote: Option<(u64, u32)>,
        imm: Option<u32>,
    ) -> io::Result<()> {
        let mut guard = self.qp.start_post_send();
        let wr = guard.construct_wr(wr_id, WorkRequestFlags::Signaled);
        let handle = match (remote, imm) {
            (Some((addr, rkey)), Some(imm)) => wr.setup_write_imm(rkey, addr, imm),
            (Some((addr, rkey)), None) => wr.setup_write(rkey, addr),
            (None, _) => wr.setup_send(),
        };
        if len > 0 {
            // SAFETY: `local..local + len` lies in memory registered under `lkey` (the link's
            // buffers, or a user region the link keeps registered and does not return from the
            // write call before the adapter has read it).
            unsafe { handle.setup_sge(lkey, local, len as u32) };
        }
        guard
            .post()
            .map_err(|e| io::Error::other(format!("posting a work request: {e}")))
    }
}

impl Fabric for VerbsFabric {
    type Region = UserRegion;

    fn fill_staging(&mut self, offset: usize, data: &[u8]) {
        self.buf.put(self.buf.staging + offset, data);
    }

    fn fill_send_slot(&mut self, slot: usize, offset: usize, data: &[u8]) {
        self.buf
            .put(self.buf.send_slots + slot * self.shape.eager + offset, data);
    }

    fn read_ring(&self, offset: usize, out: &mut [u8]) {
        self.buf.get(self.buf.ring + offset, out);
    }

    fn read_recv_slot(&self, slot: usize, offset: usize, out: &mut [u8]) {
        self.buf
            .get(self.buf.recv_slots + slot * self.shape.eager + offset, out);
    }

    fn credit_in(&self) -> [u64; 2] {
        let p = self.buf.addr(self.buf.credit_in) as *const u64;
        // SAFETY: two aligned u64 words inside the buffers (64-byte aligned offset); the peer's
        // adapter writes them at any time, hence volatile reads. Each word only grows, so a read
        // racing a write sees the old or the new value, both safe to act on.
        unsafe {
            [
                std::ptr::read_volatile(p),
                std::ptr::read_volatile(p.add(1)),
            ]
        }
    }

    fn set_credit_out(&mut self, slot: usize, words: [u64; 2]) {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&words[0].to_ne_bytes());
        bytes[8..].copy_from_slice(&words[1].to_ne_bytes());
        self.buf.put(self.buf.credit_out + slot * 16, &bytes);
    }

    fn post_send(&mut self, wr_id: u64, slot: usize, len: usize) -> io::Result<()> {
        let local = self.buf.addr(self.buf.send_slots + slot * self.shape.eager);
        let lkey = self.mr.lkey();
        self.post(wr_id, local, lkey, len, None, None)
    }

    fn post_write(&mut self, wr_id: u64, offset: usize, len: usize) -> io::Result<()> {
        let peer = self.peer()?.clone();
        let local = self.buf.addr(self.buf.staging + offset);
        let lkey = self.mr.lkey();
        let remote = (peer.ring_addr + offset as u64, peer.ring_rkey);
        self.post(
            wr_id,
            local,
            lkey,
            len,
            Some(remote),
            Some((len as u32).to_be()),
        )
    }

    fn post_write_from(
        &mut self,
        wr_id: u64,
        region: &UserRegion,
        addr: usize,
        offset: usize,
        len: usize,
    ) -> io::Result<()> {
        let peer = self.peer()?.clone();
        let remote = (peer.ring_addr + offset as u64, peer.ring_rkey);
        self.post(
            wr_id,
            addr as u64,
            region.0.lkey(),
            len,
            Some(remote),
            Some(len as u32),
        )
    }

    fn post_credit(&mut self, wr_id: u64, slot: usize) -> io::Result<()> {
        let peer = self.peer()?.clone();
        let local = self.buf.addr(self.buf.credit_out + slot * 16);
        let lkey = self.mr.lkey();
        self.post(
            wr_id,
            local,
            lkey,
            16,
            Some((peer.credit_addr, peer.credit_rkey)),
            None,
        )
    }

    fn post_recv(&mut self, slot: usize) -> io::Result<()> {
        let addr = self.buf.addr(self.buf.recv_slots + slot * self.shape.eager);
        let lkey = self.mr.lkey();
        let mut guard = self.qp.start_post_recv();
        let wr = guard.construct_wr(slot as u64);
        // SAFETY: the slot lies inside the registered buffers and is not read until the
        // completion of this receive says what arrived.
        unsafe { wr.setup_sge(lkey, addr, self.shape.eager as u32) };
        guard
            .post()
            .map_err(|e| io::Error::other(format!("posting a receive: {e}")))
    }

    fn register(&mut self, start: usize, len: usize) -> io::Result<UserRegion> {
        // SAFETY: the link registers only memory of a slice it was lent, page-rounded (pages
        // mapped for the slice); the cache drops the registration before the link is dropped.
        let mr = unsafe { self.pd.reg_mr(start, len, AccessFlags::LocalWrite) }.map_err(|e| {
            io::Error::other(format!("registering {len} bytes of user memory: {e}"))
        })?;
        Ok(UserRegion(mr))
    }

    fn poll(&mut self, out: &mut Vec<Completion>) -> io::Result<()> {
        let poller = match self.cq.start_poll() {
            Ok(p) => p,
            Err(PollCompletionQueueError::CompletionQueueEmpty) => return Ok(()),
            Err(e) => return Err(io::Error::other(format!("polling completions: {e}"))),
        };
        for wc in poller {
            let wr_id = wc.wr_id();
            if wc.status() != WorkCompletionStatus::Success as u32 {
                out.push(Completion::Failed {
                    wr_id,
                    what: format!(
                        "{:?} (vendor error {:#x})",
                        WorkCompletionStatus::from(wc.status()),
                        wc.vendor_err()
                    ),
                });
                continue;
            }
            out.push(match WorkCompletionOperationType::from(wc.opcode()) {
                WorkCompletionOperationType::Receive => Completion::Received {
                    slot: wr_id as usize,
                    len: wc.byte_len() as usize,
                },
                WorkCompletionOperationType::ReceiveWithImmediate => Completion::Written {
                    slot: wr_id as usize,
                    len: u32::from_be(wc.imm_data()) as usize,
                },
                _ => Completion::Sent { wr_id },
            });
        }
        Ok(())
    }

    fn arm(&mut self) {
        if self.armed {
            return;
        }
        // SAFETY: the completion queue is alive (owned by self); arming asks the adapter for one
        // event on the channel at the next completion.
        let rc = unsafe {
            let cq = sideway::ibverbs::completion::CompletionQueue::cq(&*self.cq).as_ptr();
            rdma_mummy_sys::ibv_req_notify_cq(cq, 0)
        };
        self.armed = rc == 0;
    }

    fn wait(&mut self, also: Option<RawFd>, timeout: Duration) {
        self.arm();
        let mut fds = vec![libc::pollfd {
            fd: self.channel.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if let Some(fd) = also {
            fds.push(libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        // The link arms, polls, then waits: a completion between its poll and this wait has
        // raised an event already.
        let ms = timeout.as_millis().clamp(0, 1000) as i32;
        // SAFETY: `fds` is a valid array of `fds.len()` pollfds for the duration of the call.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if fds[0].revents & libc::POLLIN != 0 {
            let mut cq_out: *mut rdma_mummy_sys::ibv_cq = std::ptr::null_mut();
            let mut ctx: *mut std::ffi::c_void = std::ptr::null_mut();
            // SAFETY: the channel is alive and non-blocking; on success the event belongs to our
            // completion queue and is acknowledged at once.
            unsafe {
                if rdma_mummy_sys::ibv_get_cq_event(
                    self.channel.comp_channel().as_ptr(),
                    &mut cq_out,
                    &mut ctx,
                ) == 0
                {
                    rdma_mummy_sys::ibv_ack_cq_events(cq_out, 1);
                    self.armed = false;
                }
            }
        }
    }
}

impl Device {
    fn local(&self) -> LocalPort {
        LocalPort {
            port: self.port,
            gid_index: self.gid_index as u8,
        }
    }

    fn endpoint_template(&self) -> EndpointInfo {
        EndpointInfo {
            lid: self.lid,
            gid: self.gid,
            link_layer: self.link_layer,
            mtu: self.mtu,
            qpn: 0,
            psn: 0,
            ring_addr: 0,
            ring_rkey: 0,
            ring_len: 4096,
            credit_addr: 0,
            credit_rkey: 0,
            depth: 1,
            eager: 1,
        }
    }
}

fn shape(config: &RdmaConfig) -> Shape {
    Shape {
        ring: config.ring_bytes,
        depth: RECV_DEPTH,
        eager: EAGER_BYTES,
        max_chunk: MAX_CHUNK,
        sq_data: RECV_DEPTH,
        credit_slots: 8,
    }
}

fn ep_key(prefix: &str, from: usize, to: usize) -> String {
    format!("{prefix}/rdma/ep/{from}/{to}")
}

/// One side of a pair being connected: the peer, its bootstrap stream, this side's queue pair
/// and buffers, and the endpoint this side published.
struct Half {
    peer: usize,
    stream: TcpStream,
    fabric: VerbsFabric,
    mine: EndpointInfo,
}

/// Connects a queue pair to each peer in `pairs`: publishes this side's endpoints, reads the
/// peers', moves every queue pair to ready-to-send, then confirms over each TCP connection that
/// the peer is ready too (a write before the peer's queue pair can receive would be lost).
pub(super) fn connect_pairs(
    f: &Formation<'_>,
    config: &RdmaConfig,
    pairs: Vec<Pair>,
) -> Result<Connected> {
    let device = Device::open(config).map_err(|a| {
        Error::new(
            ErrorKind::Bootstrap,
            format!("rank {}: the RDMA device went away: {a}", f.rank),
        )
    })?;
    let shape = shape(config);
    let mut halves = Vec::with_capacity(pairs.len());
    for (peer, stream) in pairs {
        halves.push(publish_endpoint(f, &device, shape, peer, stream)?);
    }
    for half in &mut halves {
        connect_queue_pair(f, &device, shape, half)?;
    }
    // Ready: one byte each way on every pair's TCP connection (writes first: no deadlock).
    for half in &mut halves {
        with_deadline(&mut half.stream, f.deadline, |s| s.write_all(b"R"))
            .map_err(|e| fail(f, half.peer, "saying ready", e))?;
    }
    let mut connected = Connected::default();
    for half in halves {
        let (peer, link) = await_ready(f, config, shape, half)?;
        connected.links.push((peer, link));
    }
    Ok(connected)
}

/// The error for a step of connecting to `peer`.
fn fail(f: &Formation<'_>, peer: usize, what: &str, e: io::Error) -> Error {
    let (rank, host) = (f.rank, &f.peers[peer].host);
    Error::new(
        ErrorKind::Bootstrap,
        format!("rank {rank}: RDMA to rank {peer} ({host}): {what}: {e}"),
    )
}

/// Creates the queue pair and buffers for `peer` and publishes how to reach them.
fn publish_endpoint(
    f: &Formation<'_>,
    device: &Device,
    shape: Shape,
    peer: usize,
    stream: TcpStream,
) -> Result<Half> {
    let fabric = VerbsFabric::create(device, shape).map_err(|e| fail(f, peer, "setting up", e))?;
    let mut psn = [0u8; 4];
    getrandom::fill(&mut psn).map_err(|e| Error::new(ErrorKind::Io, format!("random PSN: {e}")))?;
    let mine = fabric.endpoint(device, u32::from_le_bytes(psn) & 0xff_ffff);
    f.store
        .set(&ep_key(f.prefix, f.rank, peer), &mine.encode())?;
    Ok(Half {
        peer,
        stream,
        fabric,
        mine,
    })
}

/// Reads the peer's endpoint and moves this side's queue pair to ready-to-send.
fn connect_queue_pair(
    f: &Formation<'_>,
    device: &Device,
    shape: Shape,
    half: &mut Half,
) -> Result<()> {
    let (rank, j) = (f.rank, half.peer);
    let raw = f
        .store
        .get(&ep_key(f.prefix, j, rank), f.deadline)
        .map_err(|e| e.context(format!("rank {rank}: waiting for rank {j}'s RDMA endpoint")))?;
    let theirs = EndpointInfo::decode(&raw)
        .map_err(|e| Error::new(ErrorKind::Bootstrap, format!("rank {j}: {e}")))?;
    if theirs.ring_len as usize != shape.ring
        || theirs.depth as usize != shape.depth
        || theirs.eager as usize != shape.eager
    {
        return Err(Error::new(ErrorKind::Config, format!("rank {rank}: rank {j}'s RDMA buffers differ from this rank's (set PSY_RDMA_RING_BYTES alike on every rank)")));
    }
    let plan = qp_state::plan(device.local(), &half.mine, &theirs);
    let mut machine = QpMachine(QpState::Init);
    for t in &plan[1..] {
        half.fabric
            .apply(&mut machine, t)
            .map_err(|e| fail(f, j, "connecting the queue pair", e))?;
    }
    half.fabric.peer = Some(theirs);
    Ok(())
}

/// Waits for the peer's ready byte and makes the link (keeping the stream for liveness).
fn await_ready(
    f: &Formation<'_>,
    config: &RdmaConfig,
    shape: Shape,
    half: Half,
) -> Result<(usize, Box<dyn Link>)> {
    let Half {
        peer,
        mut stream,
        fabric,
        ..
    } = half;
    let mut byte = [0u8; 1];
    with_deadline(&mut stream, f.deadline, |s| s.read_exact(&mut byte))
        .map_err(|e| fail(f, peer, "waiting for the peer to be ready", e))?;
    if &byte != b"R" {
        return Err(fail(
            f,
            peer,
            "handshake",
            io::Error::other("unexpected byte"),
        ));
    }
    let link = RdmaLink::new(fabric, shape, Some(stream), config.zero_copy_bytes)
        .map_err(|e| fail(f, peer, "configuring the link", e))?;
    Ok((peer, Box::new(link)))
}
