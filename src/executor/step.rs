//! One step of a schedule: all its sends and receives, driven together without blocking.

use super::fail::Site;
use super::header::{self, Header, OpDesc, OpKind, Pair, HEADER_LEN};
use super::view::WorkView;
use super::{Call, Engine, Links};
use crate::error::{Error, ErrorKind, Result};
use crate::reduce::Reducer;
use crate::schedule::{Collective, RecvMode, Schedule, Step};
use crate::transport::shm::crossing::Chooser;
use crate::transport::shm::stream_copy;
use crate::transport::{Link, Traffic};
use crate::wait::{Interrupt, Next, Spinner, WaitPolicy};
use std::io::{self, IoSlice};
use std::time::{Duration, Instant};

/// The largest read between two reductions, so reduction overlaps arrival; and of a receive that
/// a send of its step forwards, so the forward starts early.
const MAX_READ: usize = 256 << 10;
/// The largest read of any other receive (a copy nothing forwards): everything a shared-memory
/// ring holds (1 MiB by default) in one go, a pull or a socket read at most this much before the
/// step looks at its other messages and the deadline. Reading such a receive [`MAX_READ`] at a
/// time made a 2-rank all-gather of 16 MiB go back and forth between writing, copying its own
/// chunk and reading in small pieces, out of step with its peer: 2,700-7,400 passes of the step's
/// loop a call, 15-40 % of the call idle (a probe build's counters); reading all that has arrived
/// keeps both ranks writing, copying and reading a ringful at a time, in step (14-280 passes,
/// 0-40 µs idle), and took 0.75-0.91 of the time at 4-64 MiB: `results/copy-reads/`.
const MAX_COPY_READ: usize = 4 << 20;
/// The most bytes of one reducing receive held in scratch memory, read but not yet reduced. The
/// scratch is a circular window this long, which stays in the cache, instead of a copy of the
/// whole message, which would go through memory twice more.
const REDUCE_WINDOW: usize = 2 * MAX_READ;
/// Messages up to this size (header included) are read in one call.
const STAGE: usize = 512;
/// A message up to this size (header not included) that has arrived by the time its receive
/// first looks is read with its header in one call where the link can
/// ([`Link::read_some_split`]): over TCP 0.87-0.96 of the time of 1-256 KiB exchanges. A message
/// waited for reads its header alone, as do larger ones: split reads took 1.02-1.18 of the time
/// of one-way 16 KiB calls and 1.07 of a 1 MiB all-gather's (`results/tcp-header-read/`).
const SPLIT_MAX: usize = 256 << 10;
/// The longest abort reason read.
const MAX_REASON: u64 = 64 << 10;

/// An engine: a schedule's steps over the links, one after the other.
pub(crate) struct Steps<'a> {
    /// This rank's steps.
    pub(crate) schedule: &'a Schedule,
    /// The work buffer, `schedule.buf_len` elements of the call's type, aligned for it (or the
    /// caller's input and output standing in for it, when the schedule [`WorkView::fits`]).
    pub(crate) buf: WorkView<'a>,
    /// Scratch memory kept between calls.
    pub(crate) memory: &'a mut StepMemory,
}

impl Engine for Steps<'_> {
    fn each_peer(&self, f: &mut dyn FnMut(usize)) {
        for step in &self.schedule.steps {
            step.sends.iter().for_each(|s| f(s.peer));
            step.recvs.iter().for_each(|r| f(r.peer));
        }
    }

    fn run(self, call: &Call, links: &mut Links) -> Result<()> {
        let Links {
            rank,
            links,
            peers,
            mid_message,
            p2p,
            ..
        } = links;
        let call_bytes = self.schedule.buf_len * call.desc.dtype.size();
        let ctx = StepCtx {
            site: call.site(*rank, peers),
            pairs: matches!(call.desc.kind, OpKind::Collective(_)).then_some(p2p.as_slice()),
            elem_size: call.desc.dtype.size(),
            reducer: call.reducer,
            deadline: Instant::now() + call.timeout,
            wait: call.wait,
            interrupt: &call.interrupt,
            streams: stream_copy::streams(call_bytes),
        };
        let traffic = traffic_of(&call.desc);
        let collective = matches!(call.desc.kind, OpKind::Collective(_));
        let reads =
            (self.schedule.steps.iter()).any(|s| s.recvs.iter().any(|r| !r.span.is_empty()));
        let choice = (self.memory.crossing).choose(traffic, call_bytes, collective, reads);
        if let Some((next, wishes)) = choice.publish {
            // Before anything is sent: see `crossing`'s module docs.
            links
                .iter_mut()
                .flatten()
                .for_each(|l| l.ask_crossings(next, wishes));
        }
        for send in self.schedule.steps.iter().flat_map(|s| &s.sends) {
            if let Some(Some(l)) = links.get_mut(send.peer) {
                l.set_traffic(traffic);
                l.set_call_bytes(call_bytes);
                let crossing = choice.send_crossing(|seq, bit| l.asked_crossing(seq, bit));
                l.set_crossing(crossing);
            }
        }
        await_messages(&call.desc, &self.schedule.steps, links, true);
        // Only a timed call reads the clock (a small call's budget is a few hundred ns).
        let started = choice.timed().then(Instant::now);
        let mut buf = self.buf;
        let result = self
            .schedule
            .steps
            .iter()
            .try_for_each(|step| run_step(&ctx, links, mid_message, step, &mut buf, self.memory))
            .map(|()| buf.finish());
        if let (Ok(()), Some(started)) = (&result, started) {
            self.memory.crossing.finish(choice, started.elapsed());
        }
        await_messages(&call.desc, &self.schedule.steps, links, false);
        result
    }
}

/// For a point-to-point receive, tells the link of each source that this rank is now blocked
/// receiving the call's message of `desc.count` elements (`waiting`), or no longer
/// ([`Link::await_message`]).
fn await_messages(
    desc: &OpDesc,
    steps: &[Step],
    links: &mut [Option<Box<dyn Link>>],
    waiting: bool,
) {
    if desc.kind != OpKind::PointToPoint {
        return;
    }
    let bytes = desc.count as usize * desc.dtype.size();
    for recv in steps.iter().flat_map(|s| &s.recvs) {
        if let Some(Some(l)) = links.get_mut(recv.peer) {
            l.await_message(waiting.then_some((desc.seq, bytes)));
        }
    }
}

/// The pattern of a call's messages, which a link may carry differently ([`Link::set_traffic`]).
pub(crate) fn traffic_of(desc: &OpDesc) -> Traffic {
    match desc.kind {
        OpKind::Collective(
            Collective::AllToAll | Collective::AllGather | Collective::ReduceScatter,
        ) => Traffic::Exchange,
        OpKind::Collective(Collective::AllReduce) => Traffic::ReducingExchange,
        OpKind::Collective(Collective::Reduce { .. }) => Traffic::ReducingOneWay,
        OpKind::Collective(
            Collective::Broadcast { .. }
            | Collective::Scatter { .. }
            | Collective::Gather { .. }
            | Collective::Barrier,
        ) => Traffic::OneWay,
        OpKind::PointToPoint => Traffic::Eager { seq: desc.seq },
    }
}

struct StepCtx<'a> {
    site: Site<'a>,
    /// For a collective, the point-to-point counts per peer that its headers carry and check.
    pairs: Option<&'a [Pair]>,
    elem_size: usize,
    reducer: Option<Reducer>,
    deadline: Instant,
    wait: WaitPolicy,
    interrupt: &'a Interrupt,
    /// Whether the call's work buffer is large enough that its copy receives of at least
    /// [`STREAM_MSG_MIN`] bytes bypass the cache ([`stream_copy::streams`]).
    streams: bool,
}

/// The smallest copy receive read bypassing the cache in a call that streams.
const STREAM_MSG_MIN: usize = 1 << 20;

struct SendSt {
    peer: usize,
    start: usize,
    len: usize,
    forward: bool,
    hdr: [u8; HEADER_LEN],
    hdr_done: usize,
    done: usize,
}

impl SendSt {
    fn complete(&self) -> bool {
        self.hdr_done == HEADER_LEN && self.done == self.len
    }
}

struct RecvSt {
    peer: usize,
    start: usize,
    len: usize,
    reduce: bool,
    hdr: [u8; HEADER_LEN],
    hdr_got: usize,
    got: usize,
    applied: usize,
    /// Whether it is read bypassing the cache ([`StepCtx::streams`]: a large copy receive of a
    /// large call that no send of its step forwards).
    streaming: bool,
    /// The most bytes one read takes: [`MAX_READ`] for a reducing or forwarded receive, else
    /// [`MAX_COPY_READ`].
    max_read: usize,
    /// Where this receive's window starts in the step's scratch memory (reducing receives).
    scratch_off: usize,
    /// Its length: the message's, rounded up to 8 bytes, at most [`REDUCE_WINDOW`]. Byte `i` of
    /// the message lands at `scratch_off + i % window`.
    window: usize,
    /// Whether a look for its header found nothing (then the header is read alone, [`SPLIT_MAX`]).
    waited: bool,
}

impl RecvSt {
    fn header_ok(&self) -> bool {
        self.hdr_got == HEADER_LEN
    }
    fn complete(&self) -> bool {
        self.header_ok() && self.got == self.len && (!self.reduce || self.applied == self.len)
    }
    /// Whether it has room for more of its message: not while its reduce window is full (it
    /// then waits for a send to let the reduction go on).
    fn has_room(&self) -> bool {
        !self.header_ok()
            || (self.got < self.len && !(self.reduce && self.got - self.applied >= self.window))
    }
}

fn link<'a>(
    ctx: &StepCtx<'_>,
    links: &'a mut [Option<Box<dyn Link>>],
    peer: usize,
) -> Result<&'a mut Box<dyn Link>> {
    links
        .get_mut(peer)
        .and_then(|l| l.as_mut())
        .ok_or_else(|| ctx.site.internal(format!("no link to rank {peer}")))
}

/// Memory a step needs, kept between steps so the hot path does not allocate, and how the
/// group's calls crossed so far.
#[derive(Default)]
pub(crate) struct StepMemory {
    /// How each kind and size of call writes its shared-memory messages
    /// ([`crate::transport::shm::crossing`]).
    pub(crate) crossing: Chooser,
    sends: Vec<SendSt>,
    recvs: Vec<RecvSt>,
    /// Reduce receives land here first (8-byte aligned), each in its window.
    scratch: Vec<u64>,
    /// A small message and its header land here first (kept: zeroing it per call costs).
    stage: Stage,
}

impl StepMemory {
    /// No memory yet, and calls that cross as `crossing` chooses.
    pub(crate) fn new(crossing: Chooser) -> StepMemory {
        StepMemory {
            crossing,
            ..StepMemory::default()
        }
    }
}

/// A step's scratch memory, as its loop uses it.
struct Mem<'a> {
    /// The reduce windows.
    scratch: &'a mut [u8],
    /// The small-message stage.
    stage: &'a mut [u8; STAGE],
}

/// Where a small message is read with its header in one call.
struct Stage([u8; STAGE]);

impl Default for Stage {
    fn default() -> Self {
        Stage([0; STAGE])
    }
}

/// Runs one step to completion or error; on error, marks in `mid_message` the peers whose
/// outgoing stream stopped inside a message.
fn run_step(
    ctx: &StepCtx<'_>,
    links: &mut [Option<Box<dyn Link>>],
    mid_message: &mut [bool],
    step: &Step,
    buf: &mut WorkView<'_>,
    memory: &mut StepMemory,
) -> Result<()> {
    let StepMemory {
        sends,
        recvs,
        scratch,
        stage,
        ..
    } = memory;
    plan_sends(ctx, step, buf, sends)?;
    let scratch_bytes = plan_recvs(ctx, step, buf, recvs)?;
    if scratch.len() * 8 < scratch_bytes {
        scratch.resize(scratch_bytes / 8, 0);
    }
    let scratch: &mut [u8] = bytemuck::cast_slice_mut(scratch.as_mut_slice());
    let reducer = if recvs.iter().any(|r| r.reduce) {
        Some(
            ctx.reducer
                .ok_or_else(|| ctx.site.internal("a reducing step without a reduction op"))?,
        )
    } else {
        None
    };
    let mem = Mem {
        scratch,
        stage: &mut stage.0,
    };
    let out = drive(ctx, links, sends, recvs, buf, mem, reducer);
    if out.is_err() {
        for s in sends.iter().filter(|s| s.hdr_done > 0 && !s.complete()) {
            if let Some(m) = mid_message.get_mut(s.peer) {
                *m = true;
            }
        }
    }
    out
}

/// The byte range of an element span.
fn byte_span(ctx: &StepCtx<'_>, span: &std::ops::Range<usize>) -> std::ops::Range<usize> {
    span.start * ctx.elem_size..span.end * ctx.elem_size
}

/// The send states of `step`, each with its header, into `sends`.
fn plan_sends(
    ctx: &StepCtx<'_>,
    step: &Step,
    buf: &WorkView<'_>,
    sends: &mut Vec<SendSt>,
) -> Result<()> {
    let es = ctx.elem_size;
    sends.clear();
    for s in &step.sends {
        if !buf.readable(&byte_span(ctx, &s.span)) {
            return Err(ctx
                .site
                .internal(format!("send span {:?} outside the buffer", s.span)));
        }
        let len = s.span.len() * es;
        let mut hdr = header::encode_data(ctx.site.desc, len as u64);
        if let Some(pair) = ctx.pairs.and_then(|p| p.get(s.peer)) {
            header::set_pair(&mut hdr, *pair);
        }
        sends.push(SendSt {
            peer: s.peer,
            start: s.span.start * es,
            len,
            forward: s.forward,
            hdr,
            hdr_done: 0,
            done: 0,
        });
    }
    Ok(())
}

/// The receive states of `step` into `recvs`; returns the scratch bytes their reduce windows
/// take.
fn plan_recvs(
    ctx: &StepCtx<'_>,
    step: &Step,
    buf: &WorkView<'_>,
    recvs: &mut Vec<RecvSt>,
) -> Result<usize> {
    let es = ctx.elem_size;
    recvs.clear();
    let mut scratch_bytes = 0;
    for r in &step.recvs {
        if !buf.writable(&byte_span(ctx, &r.span)) {
            return Err(ctx
                .site
                .internal(format!("receive span {:?} outside the buffer", r.span)));
        }
        let len = r.span.len() * es;
        let reduce = r.mode == RecvMode::Reduce;
        let window = if reduce {
            (len.div_ceil(8) * 8).min(REDUCE_WINDOW)
        } else {
            0
        };
        let forwarded = step
            .sends
            .iter()
            .any(|s| s.forward && s.span.start < r.span.end && r.span.start < s.span.end);
        recvs.push(RecvSt {
            peer: r.peer,
            start: r.span.start * es,
            len,
            reduce,
            hdr: [0; HEADER_LEN],
            hdr_got: 0,
            got: 0,
            applied: 0,
            streaming: ctx.streams && !reduce && len >= STREAM_MSG_MIN && !forwarded,
            max_read: if reduce || forwarded {
                MAX_READ
            } else {
                MAX_COPY_READ
            },
            scratch_off: scratch_bytes,
            window,
            waited: false,
        });
        scratch_bytes += window;
    }
    Ok(scratch_bytes)
}

fn drive(
    ctx: &StepCtx<'_>,
    links: &mut [Option<Box<dyn Link>>],
    sends: &mut [SendSt],
    recvs: &mut [RecvSt],
    buf: &mut WorkView<'_>,
    mut mem: Mem<'_>,
    reducer: Option<Reducer>,
) -> Result<()> {
    let mut spinner = Spinner::new(ctx.wait);
    loop {
        let sent = match pump_sends(ctx, links, sends, recvs, buf) {
            Ok(sent) => sent,
            Err(e) if e.kind() == ErrorKind::PeerLost => {
                // A peer that gave up closes its links, and a send it had still to pull then
                // fails here; but it wrote why before it closed (a mismatch, say), and what it
                // sent says more than the closed link: read what has arrived first.
                pump_recvs(ctx, links, sends, recvs, buf, &mut mem, reducer)?;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let received = pump_recvs(ctx, links, sends, recvs, buf, &mut mem, reducer)?;
        if sends.iter().all(SendSt::complete) && recvs.iter().all(RecvSt::complete) {
            return Ok(());
        }
        if sent || received {
            spinner.progressed();
            continue;
        }
        // A message between cores on one host arrives within a microsecond or two: look again
        // without a system call first (the spinner's polling phase has no PAUSE: one costs more
        // than a look at the rings on this CPU).
        if spinner.idle() == Next::Block {
            wait(ctx, links, sends, recvs)?;
            spinner.blocked();
        }
    }
}

/// Whether entry `i` is the first unfinished one of its peer (messages to or from one peer go
/// in schedule order).
fn first_of_peer<S>(
    all: &[S],
    i: usize,
    peer: impl Fn(&S) -> usize,
    done: impl Fn(&S) -> bool,
) -> bool {
    !done(&all[i])
        && !all[..i]
            .iter()
            .any(|o| peer(o) == peer(&all[i]) && !done(o))
}

/// Writes what each send may send now; true if anything was written.
#[inline]
fn pump_sends(
    ctx: &StepCtx<'_>,
    links: &mut [Option<Box<dyn Link>>],
    sends: &mut [SendSt],
    recvs: &[RecvSt],
    buf: &mut WorkView<'_>,
) -> Result<bool> {
    let mut progressed = false;
    for i in 0..sends.len() {
        if !first_of_peer(sends, i, |s| s.peer, SendSt::complete) {
            continue;
        }
        let avail = if sends[i].forward {
            forward_limit(&sends[i], recvs)
        } else {
            sends[i].len
        };
        progressed |= send_some(ctx, links, &mut sends[i], avail, buf)?;
    }
    Ok(progressed)
}

/// Writes the rest of `s`'s header and its data up to `avail`; true if anything was written.
#[inline]
fn send_some(
    ctx: &StepCtx<'_>,
    links: &mut [Option<Box<dyn Link>>],
    s: &mut SendSt,
    avail: usize,
    buf: &mut WorkView<'_>,
) -> Result<bool> {
    if s.hdr_done == HEADER_LEN && s.done >= avail {
        return Ok(false);
    }
    let data = buf.read(s.start + s.done..s.start + avail);
    let slices = [IoSlice::new(&s.hdr[s.hdr_done..]), IoSlice::new(data)];
    match link(ctx, links, s.peer)?.write_some(&slices) {
        Ok(0) => {
            Err(ctx
                .site
                .lost_connection(s.peer, "sending", "the connection accepts no more data"))
        }
        Ok(mut n) => {
            let h = n.min(HEADER_LEN - s.hdr_done);
            s.hdr_done += h;
            n -= h;
            buf.sent(s.start + s.done..s.start + s.done + n);
            s.done += n;
            Ok(true)
        }
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(ctx.site.lost_connection(s.peer, "sending", e)),
    }
}

/// Reads what has arrived for each receive and reduces what may be reduced; true if anything
/// happened.
#[inline]
fn pump_recvs(
    ctx: &StepCtx<'_>,
    links: &mut [Option<Box<dyn Link>>],
    sends: &[SendSt],
    recvs: &mut [RecvSt],
    buf: &mut WorkView<'_>,
    mem: &mut Mem<'_>,
    reducer: Option<Reducer>,
) -> Result<bool> {
    let mut progressed = false;
    for i in 0..recvs.len() {
        if !first_of_peer(recvs, i, |r| r.peer, RecvSt::complete) {
            continue;
        }
        if let Some(red) = reducer.filter(|_| recvs[i].reduce) {
            if let Some(n) = reduce_in_place(ctx, links, &mut recvs[i], sends, buf, red)? {
                progressed |= n > 0;
                continue;
            }
        }
        progressed |= receive(ctx, links, &mut recvs[i], buf, mem)?;
        if !recvs[i].reduce {
            continue;
        }
        let (p, e) = reducible(&recvs[i], sends, ctx.elem_size);
        if e > p {
            let r = &mut recvs[i];
            if let Some(red) = reducer {
                // The window may wrap inside [p, e): at most two pieces, each of whole elements
                // (the window's length is a multiple of 8 bytes, so of every element size).
                let mut at = p - r.start;
                while at < e - r.start {
                    let pos = at % r.window;
                    let n = (e - r.start - at).min(r.window - pos);
                    let src = &mem.scratch[r.scratch_off + pos..r.scratch_off + pos + n];
                    buf.reduce(r.start + at..r.start + at + n, src, red);
                    at += n;
                }
            }
            r.applied = e - r.start;
            progressed = true;
        }
    }
    Ok(progressed)
}

/// How many bytes of a forward send are available: those its covering `Copy` receive has written.
fn forward_limit(s: &SendSt, recvs: &[RecvSt]) -> usize {
    let pos = s.start + s.done;
    recvs
        .iter()
        .filter(|r| !r.reduce && r.header_ok() && r.start <= pos && pos < r.start + r.len.max(1))
        .map(|r| (r.start + r.got).saturating_sub(s.start).min(s.len))
        .max()
        .unwrap_or(if s.len == 0 { 0 } else { s.done })
}

/// The byte range `[p, e)` of a reducing receive that may be combined now: received whole
/// elements not yet applied, stopping where a plain send still has to send the old values. Whole
/// elements only: a partial write can leave a send's progress in the middle of one.
fn reducible(r: &RecvSt, sends: &[SendSt], es: usize) -> (usize, usize) {
    reducible_up_to(r.start + r.applied, r.start + (r.got / es) * es, sends, es)
}

/// [`reducible`] from `p` on, of the bytes up to `e` (received, or to be received).
fn reducible_up_to(p: usize, mut e: usize, sends: &[SendSt], es: usize) -> (usize, usize) {
    for s in sends.iter().filter(|s| !s.forward && s.done < s.len) {
        let unsent = s.start + s.done;
        let end = s.start + s.len;
        if p >= unsent && p < end {
            e = p;
        } else if unsent > p {
            e = e.min(unsent);
        }
    }
    let whole = (e.max(p) - p) / es * es;
    (p, p + whole)
}

/// Reduces what has arrived for reducing receive `r` straight from where its link holds it
/// ([`Link::read_in_place`]), when nothing of it waits in its window and its header is in: the
/// bytes read, or `None` where the link cannot, or nothing may be reduced yet (then [`receive`]
/// copies them into the window). Only as many bytes as may be reduced now are taken
/// ([`reducible_up_to`]); the rest wait in the link.
fn reduce_in_place(
    ctx: &StepCtx<'_>,
    links: &mut [Option<Box<dyn Link>>],
    r: &mut RecvSt,
    sends: &[SendSt],
    buf: &mut WorkView<'_>,
    reducer: Reducer,
) -> Result<Option<usize>> {
    if !r.header_ok() || r.got != r.applied || r.got == r.len {
        return Ok(None);
    }
    let es = ctx.elem_size;
    let (p, e) = reducible_up_to(r.start + r.got, r.start + r.len, sends, es);
    let want = (e - p).min(MAX_READ);
    if want == 0 {
        // A send of this step still has to read the values here: the window takes what arrives
        // meanwhile, as it always did, so that the peer's ring drains whatever this rank's
        // sends wait for.
        return Ok(None);
    }
    let link = link(ctx, links, r.peer)?.as_mut();
    let mut at = p;
    let mut reduce = |part: &[u8]| {
        buf.reduce(at..at + part.len(), part, reducer);
        at += part.len();
    };
    let Some(read) = link.read_in_place(want, es, &mut reduce) else {
        return Ok(None);
    };
    let n = bytes_read(ctx, r.peer, read, false)?;
    r.got += n;
    r.applied += n;
    Ok(Some(n))
}

/// Where the next bytes of reducing receive `r` go in its window, and how many fit there: up to
/// the window's end, and never over bytes not yet reduced.
fn window_room(r: &RecvSt) -> (usize, usize) {
    let pos = r.got % r.window;
    (pos, (r.window - pos).min(r.window - (r.got - r.applied)))
}

/// Reads what has arrived for `r`; true if anything did.
fn receive(
    ctx: &StepCtx<'_>,
    links: &mut [Option<Box<dyn Link>>],
    r: &mut RecvSt,
    buf: &mut WorkView<'_>,
    mem: &mut Mem<'_>,
) -> Result<bool> {
    let link = link(ctx, links, r.peer)?.as_mut();
    let mut progressed = false;
    if !r.header_ok() {
        if !receive_header(ctx, link, r, buf, mem)? {
            return Ok(false);
        }
        if !r.header_ok() || r.reduce {
            // A reducing receive's data waits for the next pass, which reduces it straight from
            // the link where the link can ([`reduce_in_place`]) instead of copying it into the
            // window here.
            return Ok(true);
        }
        progressed = true;
    }
    if r.got < r.len {
        let mut want = (r.len - r.got).min(r.max_read);
        let dest = if r.reduce {
            let (pos, room) = window_room(r);
            want = want.min(room);
            if want == 0 {
                return Ok(progressed);
            }
            &mut mem.scratch[r.scratch_off + pos..r.scratch_off + pos + want]
        } else {
            buf.write(r.start + r.got..r.start + r.got + want)
        };
        let n = read_or_lost(ctx, link, r.peer, dest, r.streaming)?;
        r.got += n;
        progressed |= n > 0;
    }
    Ok(progressed)
}

/// Reads (more of) `r`'s header, and with it a small message whole, or the first bytes of a
/// larger one that had arrived before its first look, where the link reads both in one call
/// ([`Link::read_some_split`], [`SPLIT_MAX`]); checks a complete header. True if anything was
/// read.
fn receive_header(
    ctx: &StepCtx<'_>,
    link: &mut dyn Link,
    r: &mut RecvSt,
    buf: &mut WorkView<'_>,
    mem: &mut Mem<'_>,
) -> Result<bool> {
    if r.len > STAGE - HEADER_LEN && r.len <= SPLIT_MAX && !r.waited {
        return receive_header_split(ctx, link, r, buf, mem);
    }
    // A small message is read with its header in one call (one syscall instead of two), never
    // past its end: the next bytes of the stream belong to the next message.
    let stage = &mut *mem.stage;
    let payload = if r.len <= STAGE - HEADER_LEN {
        r.len
    } else {
        0
    };
    let want = HEADER_LEN - r.hdr_got + payload;
    let n = read_or_lost(ctx, link, r.peer, &mut stage[..want], false)?;
    let h = match took_header(r, n, &stage[..]) {
        Taken::Nothing => return Ok(false),
        Taken::Part => return Ok(true),
        Taken::Whole(h) => h,
    };
    let extra = &stage[h..n];
    check_header(ctx, link, r, extra)?;
    if !extra.is_empty() {
        first_bytes(r, buf, mem.scratch, extra.len()).copy_from_slice(extra);
        r.got = extra.len();
    }
    Ok(true)
}

/// [`receive_header`] of a message too large to stage: the header, and where the link can in the
/// same call, the message's first bytes straight to where they go (the checks come after: a
/// mismatched message fails the call, whose buffer is then undefined, as after any failure).
fn receive_header_split(
    ctx: &StepCtx<'_>,
    link: &mut dyn Link,
    r: &mut RecvSt,
    buf: &mut WorkView<'_>,
    mem: &mut Mem<'_>,
) -> Result<bool> {
    let head_len = HEADER_LEN - r.hdr_got;
    let rest_len = r.len.min(if r.reduce { r.window } else { r.max_read });
    let mut head = [0u8; HEADER_LEN];
    let rest = first_bytes(r, buf, mem.scratch, rest_len);
    let read = link.read_some_split(&mut head[..head_len], rest);
    let n = bytes_read(ctx, r.peer, read, false)?;
    let h = match took_header(r, n, &head) {
        Taken::Nothing => return Ok(false),
        Taken::Part => return Ok(true),
        Taken::Whole(h) => h,
    };
    let extra = n - h;
    check_header(ctx, link, r, &rest[..extra])?;
    r.got = extra;
    Ok(true)
}

/// What a read of `r`'s header came to ([`took_header`]).
enum Taken {
    /// Nothing had arrived.
    Nothing,
    /// Some of the header; the rest is still to come.
    Part,
    /// The header is whole; this many of the bytes read were its.
    Whole(usize),
}

/// Takes the header bytes among the `n` just read for `r`, which begin `read` (the header's
/// remaining bytes first, then any of the message's); a read of nothing marks `r` as waited for.
fn took_header(r: &mut RecvSt, n: usize, read: &[u8]) -> Taken {
    if n == 0 {
        r.waited = true;
        return Taken::Nothing;
    }
    let h = n.min(HEADER_LEN - r.hdr_got);
    r.hdr[r.hdr_got..r.hdr_got + h].copy_from_slice(&read[..h]);
    r.hdr_got += h;
    if r.header_ok() {
        Taken::Whole(h)
    } else {
        Taken::Part
    }
}

/// Where the first `n` bytes of receive `r` go: its reduce window, or its span of the buffer.
fn first_bytes<'m>(
    r: &RecvSt,
    buf: &'m mut WorkView<'_>,
    scratch: &'m mut [u8],
    n: usize,
) -> &'m mut [u8] {
    if r.reduce {
        &mut scratch[r.scratch_off..r.scratch_off + n]
    } else {
        buf.write(r.start..r.start + n)
    }
}

/// Reads into `dest` from `peer`'s link (bypassing the cache if `streaming`): the bytes read, 0
/// when nothing has arrived; end of stream or a failure is the peer lost.
#[inline]
fn read_or_lost(
    ctx: &StepCtx<'_>,
    link: &mut dyn Link,
    peer: usize,
    dest: &mut [u8],
    streaming: bool,
) -> Result<usize> {
    let read = if streaming {
        link.read_some_streaming(dest)
    } else {
        link.read_some(dest)
    };
    bytes_read(ctx, peer, read, dest.is_empty())
}

/// What a read from `peer` came to: the bytes read, 0 when nothing had arrived; end of stream
/// (unless `nothing_wanted`) or a failure is the peer lost.
#[inline]
fn bytes_read(
    ctx: &StepCtx<'_>,
    peer: usize,
    read: io::Result<usize>,
    nothing_wanted: bool,
) -> Result<usize> {
    match read {
        Ok(0) if !nothing_wanted => {
            Err(ctx
                .site
                .lost_connection(peer, "receiving", "the connection was closed"))
        }
        Ok(n) => Ok(n),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            Ok(0)
        }
        Err(e) => Err(ctx.site.lost_connection(peer, "receiving", e)),
    }
}

/// Validates a complete header; `early` holds payload bytes already read with it.
fn check_header(ctx: &StepCtx<'_>, link: &mut dyn Link, r: &RecvSt, early: &[u8]) -> Result<()> {
    let site = &ctx.site;
    match header::decode(&r.hdr) {
        Header::Data { desc, .. } if desc != *site.desc => {
            Err(site.mismatch(r.peer, desc.describe()))
        }
        Header::Data { len, .. } if len != r.len as u64 => Err(Error::new(
            ErrorKind::Mismatch,
            format!(
                "{} on rank {}: {} sent {len} bytes where {} were expected; the ranks disagree about the group (world size or algorithm settings such as PSY_ALGO)",
                site.desc.label(),
                site.rank,
                site.who(r.peer),
                r.len
            ),
        )),
        Header::Data { .. } => match ctx.pairs.and_then(|p| p.get(r.peer)) {
            Some(&mine) if !header::pair_agrees(&r.hdr, mine) => {
                Err(site.unreceived_sends(r.peer, mine))
            }
            _ => Ok(()),
        },
        Header::Abort { kind, len } => {
            let reason = read_reason(
                link,
                early,
                len.min(MAX_REASON) as usize,
                ctx.deadline.min(Instant::now() + Duration::from_secs(5)),
            );
            Err(site.aborted_by(r.peer, kind, Some(&reason)))
        }
        Header::Garbage => Err(site.garbage(
            r.peer,
            " (corrupted stream, or a different psyne version)",
        )),
    }
}

/// The abort reason: `early` (bytes already read with the header), then the rest from the link.
fn read_reason(link: &mut dyn Link, early: &[u8], len: usize, deadline: Instant) -> String {
    let mut text = vec![0u8; len];
    let got_early = early.len().min(len);
    text[..got_early].copy_from_slice(&early[..got_early]);
    let mut got = got_early;
    while got < len && Instant::now() < deadline {
        match link.read_some(&mut text[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => match link.poll_fd() {
                Some(fd) => poll_fds(
                    &mut [libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    }],
                    Duration::from_millis(50),
                ),
                None => link.block(true, false, Duration::from_millis(50)),
            },
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&text[..got]).into_owned()
}

fn poll_fds(fds: &mut [libc::pollfd], timeout: Duration) {
    // SAFETY: `fds` is a valid, exclusively borrowed slice of pollfd for the whole call, and its
    // length is passed as the count.
    unsafe {
        libc::poll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            timeout.as_millis().min(1000) as i32,
        );
    }
}

/// Blocks until a link the step waits on is ready, or fails at the deadline.
fn wait(
    ctx: &StepCtx<'_>,
    links: &mut [Option<Box<dyn Link>>],
    sends: &[SendSt],
    recvs: &[RecvSt],
) -> Result<()> {
    // Links with a descriptor are polled together; a link without one (shared memory) is waited
    // on through `Link::block` with a short timeout, after a zero-timeout poll of the others.
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut blockers: Vec<(usize, bool, bool)> = Vec::new(); // (peer, read, write)
    let mut want = |l: &dyn Link, peer: usize, ev: libc::c_short| match l.poll_fd() {
        Some(fd) => match fds.iter_mut().find(|p| p.fd == fd) {
            Some(p) => p.events |= ev,
            None => fds.push(libc::pollfd {
                fd,
                events: ev,
                revents: 0,
            }),
        },
        None => {
            let (r, w) = (ev == libc::POLLIN, ev == libc::POLLOUT);
            match blockers.iter_mut().find(|b| b.0 == peer) {
                Some(b) => {
                    b.1 |= r;
                    b.2 |= w;
                }
                None => blockers.push((peer, r, w)),
            }
        }
    };
    let mut waiting_for = None;
    for (i, s) in sends.iter().enumerate() {
        let active = !s.complete() && !sends[..i].iter().any(|o| o.peer == s.peer && !o.complete());
        let avail = if s.forward {
            forward_limit(s, recvs)
        } else {
            s.len
        };
        if active && (s.hdr_done < HEADER_LEN || s.done < avail) {
            want(link(ctx, links, s.peer)?.as_ref(), s.peer, libc::POLLOUT);
            waiting_for.get_or_insert((s.peer, "take the data this rank sends"));
        }
    }
    for (i, r) in recvs.iter().enumerate() {
        let active = !r.complete() && !recvs[..i].iter().any(|o| o.peer == r.peer && !o.complete());
        if active && r.has_room() {
            want(link(ctx, links, r.peer)?.as_ref(), r.peer, libc::POLLIN);
            waiting_for = Some((r.peer, "send"));
        }
    }
    let Some((peer, what)) = waiting_for else {
        return Err(ctx.site.internal(
            "the step waits for nothing but is not complete (a schedule breaks the model)",
        ));
    };
    let left = ctx.deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(ctx.site.timeout(peer, what));
    }
    if let Some(reason) = ctx.interrupt.poll() {
        return Err(ctx.site.interrupted(peer, what, &reason));
    }
    let left = ctx.interrupt.slice(left);
    match blockers.first() {
        None => poll_fds(&mut fds, left),
        Some(&(peer, read, write)) => {
            if !fds.is_empty() {
                poll_fds(&mut fds, Duration::ZERO);
            }
            // With several links to wait on, wake often enough to serve the others too.
            let slice = if blockers.len() + fds.len() > 1 {
                Duration::from_micros(200)
            } else {
                Duration::from_millis(5)
            };
            link(ctx, links, peer)?.block(read, write, left.min(slice));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recv(start: usize, len: usize, got: usize, applied: usize) -> RecvSt {
        RecvSt {
            peer: 1,
            start,
            len,
            reduce: true,
            hdr: [0; HEADER_LEN],
            hdr_got: HEADER_LEN,
            got,
            applied,
            streaming: false,
            max_read: MAX_READ,
            scratch_off: 0,
            window: len,
            waited: false,
        }
    }

    #[test]
    fn a_reduce_window_takes_bytes_up_to_its_end_and_never_over_unreduced_ones() {
        let at = |len, window, got, applied| {
            let r = RecvSt {
                window,
                ..recv(0, len, got, applied)
            };
            window_room(&r)
        };
        assert_eq!(at(1000, 128, 0, 0), (0, 128));
        assert_eq!(at(1000, 128, 100, 50), (100, 28), "up to the window's end");
        assert_eq!(at(1000, 128, 128, 0), (0, 0), "full: nothing reduced yet");
        assert_eq!(
            at(1000, 128, 128, 40),
            (0, 40),
            "after the wrap, up to the unreduced"
        );
        assert_eq!(at(1000, 128, 200, 100), (72, 28));
        assert_eq!(at(1000, 128, 256, 256), (0, 128));
    }

    fn send(start: usize, len: usize, done: usize) -> SendSt {
        SendSt {
            peer: 1,
            start,
            len,
            forward: false,
            hdr: [0; HEADER_LEN],
            hdr_done: HEADER_LEN,
            done,
        }
    }

    #[test]
    fn only_whole_elements_are_reduced_whatever_a_partial_send_left() {
        // Recursive doubling: the same bytes are sent (old values) and received (to reduce into
        // them). A partial write that stopped mid-element must not split an element.
        for done in 0..=64 {
            for got in 0..=64 {
                let (p, e) = reducible(&recv(128, 64, got, 0), &[send(128, 64, done)], 4);
                assert_eq!(p, 128);
                assert_eq!((e - p) % 4, 0, "sent {done}, got {got}: [{p}, {e})");
                assert!(e - p <= got.min(done), "sent {done}, got {got}: [{p}, {e})");
            }
        }
        // Already applied elements stay applied; a finished send no longer limits.
        assert_eq!(
            reducible(&recv(0, 64, 61, 8), &[send(0, 64, 64)], 8),
            (8, 56)
        );
    }

    /// A TCP link to a peer whose stream the test writes: the link and the peer's end.
    fn tcp_pair() -> (Box<dyn Link>, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let peer = listener.accept().unwrap().0;
        let buffer = crate::transport::tcp::send_buffer_for(true, Some(128 << 10));
        let link = crate::transport::tcp::TcpLink::new(stream, buffer).unwrap();
        (Box::new(link), peer)
    }

    #[test]
    fn a_message_read_with_its_header_is_checked_before_it_counts() {
        use crate::executor::header::encode_data;
        use crate::transport::{PeerInfo, TransportKind};
        use std::io::Write;
        let ours = OpDesc {
            kind: OpKind::Collective(crate::Collective::AllReduce),
            algo: None,
            dtype: crate::DType::F32,
            op: Some(crate::ReduceOp::Sum),
            count: 1024,
            seq: 7,
        };
        let peers: Vec<PeerInfo> = (0..2)
            .map(|_| PeerInfo {
                host: "h".into(),
                addr: None,
                host_key: "h".into(),
                shm_ok: false,
                transport: TransportKind::Tcp,
            })
            .collect();
        let interrupt = Interrupt::new(None);
        let ctx = StepCtx {
            site: Site {
                desc: &ours,
                rank: 0,
                peers: &peers,
            },
            pairs: None,
            elem_size: 4,
            reducer: None,
            deadline: Instant::now() + Duration::from_secs(20),
            wait: WaitPolicy::new(Duration::ZERO, 1),
            interrupt: &interrupt,
            streams: false,
        };
        let len = 4096;
        for (theirs, want) in [
            (
                OpDesc {
                    count: 2048,
                    ..ours
                },
                Some(ErrorKind::Mismatch),
            ),
            (OpDesc { seq: 8, ..ours }, Some(ErrorKind::Mismatch)),
            (ours, None),
        ] {
            let (link, mut peer) = tcp_pair();
            let mut links: Vec<Option<Box<dyn Link>>> = vec![None, Some(link)];
            let mut message = encode_data(&theirs, len as u64).to_vec();
            message.extend((0..len + 100).map(|i| i as u8));
            peer.write_all(&message).unwrap();
            let fd = links[1].as_ref().unwrap().poll_fd().unwrap();
            while !links[1].as_ref().unwrap().pending() {
                let events = libc::POLLIN;
                poll_fds(
                    &mut [libc::pollfd {
                        fd,
                        events,
                        revents: 0,
                    }],
                    ctx.deadline.saturating_duration_since(Instant::now()),
                );
            }
            let mut r = RecvSt {
                peer: 1,
                reduce: false,
                hdr_got: 0,
                max_read: MAX_COPY_READ,
                ..recv(0, len, 0, 0)
            };
            let mut bytes = vec![0u8; len];
            let (mut scratch, mut stage) = (vec![0u8; 0], Stage::default());
            let mut mem = Mem {
                scratch: &mut scratch,
                stage: &mut stage.0,
            };
            let mut view = WorkView::whole(&mut bytes);
            let link = links[1].as_mut().unwrap().as_mut();
            let got = receive_header(&ctx, link, &mut r, &mut view, &mut mem);
            match want {
                Some(kind) => assert_eq!(got.unwrap_err().kind(), kind),
                None => {
                    assert!(got.unwrap());
                    assert!(r.header_ok() && r.got > 0, "the data came with the header");
                    assert!(r.got <= len, "never past the message");
                    let sent = &message[HEADER_LEN..HEADER_LEN + r.got];
                    assert_eq!(&bytes[..r.got], sent);
                }
            }
        }
    }
}
