//! `psyne._native`: the Rust half of the Python package.
//!
//! Deliberately small and low-level: the Python half (`python/psyne/__init__.py`) checks every
//! array (contiguity, alignment, dtype, lengths, aliasing) and hands this module raw addresses and
//! element counts of memory it keeps alive for the call. This module turns them back into slices,
//! runs psyne's collective on them with the GIL released, and turns psyne's errors into the
//! exception classes of `psyne._errors`, one per [`psyne::ErrorKind`].
//!
//! Non-blocking calls run on psyne's worker thread of the group (shared by its `with_algo` views),
//! in the order they were issued, on the caller's arrays ([`psyne::Group::submit_borrowed`]) and
//! with psyne's [`psyne::Work`] as their handle; a blocking call first waits (GIL released) for
//! the calls issued before it, so every rank issues the group's calls to psyne in program order,
//! as psyne requires. The calls are named by one table, [`CALLS`], exported to Python. As in
//! psyne, the calls in flight on a group (queued, running, or blocking) all come from one Python
//! thread: a call from another thread meanwhile raises `psyne.UsageError` naming both threads
//! (two threads' calls would be ordered differently on different ranks). A process forked after
//! the group was made is refused every call (`UsageError`), before anything is queued or waited
//! for: the worker thread does not exist in the child.
//!
//! Ctrl-C: a wait with the GIL released (a blocking call, the wait for the calls issued before
//! it, `Request.wait`) checks for a pending signal every [`psyne::INTERRUPT_CHECK_EVERY`] once it
//! has waited that long, as NumPy's and the socket module's blocking calls do (`Interrupts`). A
//! signal whose handler raises (SIGINT's `KeyboardInterrupt`) ends the call: the exception is
//! raised, the peers are told, and the group refuses every later call with an error saying it
//! was interrupted.

mod address;
mod shared;
mod torch_hot;

use psyne::Tunables;
use psyne::{Algo, Communicator, DType, Element, Group, GroupOptions, ReduceOp, Secret, Store};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::cell::Cell;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The Python exception class, in `psyne._errors`, of each kind of psyne error.
fn class_name(kind: psyne::ErrorKind) -> &'static str {
    use psyne::ErrorKind as K;
    match kind {
        K::InvalidArgument => "InvalidArgumentError",
        K::Config => "ConfigError",
        K::Bootstrap => "BootstrapError",
        K::Auth => "AuthError",
        K::Timeout => "TimeoutError",
        K::Mismatch => "MismatchError",
        K::PeerLost => "PeerLostError",
        K::Io => "IoError",
        K::Aborted => "AbortedError",
        K::Revoked => "RevokedError",
        K::Usage => "UsageError",
    }
}

/// psyne's error as an instance of its `psyne._errors` class, with `kind` and `peer` attributes.
fn to_py(e: psyne::Error) -> PyErr {
    Python::attach(|py| {
        let make = || -> PyResult<PyErr> {
            let errors = py.import("psyne._errors")?;
            let class = errors.getattr(class_name(e.kind()))?;
            let err = class.call1((e.message().to_string(),))?;
            err.setattr("kind", format!("{:?}", e.kind()))?;
            err.setattr("peer", e.peer())?;
            Ok(PyErr::from_value(err))
        };
        make().unwrap_or_else(|import_failed| {
            PyRuntimeError::new_err(format!(
                "{} (and psyne._errors could not be loaded: {import_failed})",
                e.message()
            ))
        })
    })
}

/// A contiguous run of `len` elements at `addr`, owned by the Python caller for the call.
#[derive(Clone, Copy)]
struct Buf {
    addr: usize,
    len: usize,
}

impl Buf {
    /// # Safety
    /// `addr` must point to `len` initialised, aligned elements of `T` that stay valid and are not
    /// written by anyone else for `'a`.
    unsafe fn get<'a, T>(self) -> &'a [T] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the caller's contract above.
        unsafe { std::slice::from_raw_parts(self.addr as *const T, self.len) }
    }

    /// # Safety
    /// As [`Buf::get`], and no one else reads or writes the memory for `'a`.
    #[allow(clippy::mut_from_ref)]
    unsafe fn get_mut<'a, T>(self) -> &'a mut [T] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: the caller's contract above.
        unsafe { std::slice::from_raw_parts_mut(self.addr as *mut T, self.len) }
    }
}

/// The calls the Python half makes: their codes, named in [`CALLS`].
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Code {
    AllReduce = 1,
    Broadcast,
    Reduce,
    AllGather,
    ReduceScatter,
    Scatter,
    Gather,
    AllToAll,
    Barrier,
    Send,
    Recv,
}

/// The one table of the calls: exported as `_native.CALLS` (name, code), from which
/// psyne/__init__.py and psyne/torch.py take their codes.
const CALLS: [(&str, Code); 11] = [
    ("all_reduce", Code::AllReduce),
    ("broadcast", Code::Broadcast),
    ("reduce", Code::Reduce),
    ("all_gather", Code::AllGather),
    ("reduce_scatter", Code::ReduceScatter),
    ("scatter", Code::Scatter),
    ("gather", Code::Gather),
    ("all_to_all", Code::AllToAll),
    ("barrier", Code::Barrier),
    ("send", Code::Send),
    ("recv", Code::Recv),
];

impl Code {
    fn of(tag: u8) -> PyResult<(Code, &'static str)> {
        CALLS
            .iter()
            .find(|(_, c)| *c as u8 == tag)
            .map(|&(name, c)| (c, name))
            .ok_or_else(|| PyValueError::new_err(format!("unknown call code {tag}")))
    }
}

/// One call, as the Python half describes it: `Call(code, dtype, a=(addr, len), b=(addr, len),
/// op=sum, root=0, count=0)`, with the codes of `CALLS`, `DTYPE_TAGS` and `OP_TAGS`. `a` is the
/// input (or the in-place buffer), `b` the output; `root` is also the peer of a send or receive.
#[pyclass(module = "psyne._native", frozen)]
#[derive(Clone, Copy)]
struct Call {
    code: Code,
    name: &'static str,
    dtype: DType,
    a: Buf,
    b: Buf,
    op: ReduceOp,
    root: usize,
    count: usize,
}

#[pymethods]
impl Call {
    #[new]
    #[pyo3(signature = (code, dtype, a=(0, 0), b=(0, 0), op=None, root=0, count=0))]
    fn new(
        code: u8,
        dtype: u8,
        a: (usize, usize),
        b: (usize, usize),
        op: Option<u8>,
        root: usize,
        count: usize,
    ) -> PyResult<Call> {
        let (code, name) = Code::of(code)?;
        Ok(Call {
            code,
            name,
            dtype: dtype_of(dtype)?,
            a: Buf {
                addr: a.0,
                len: a.1,
            },
            b: Buf {
                addr: b.0,
                len: b.1,
            },
            op: op.map_or(Ok(ReduceOp::Sum), op_of)?,
            root,
            count,
        })
    }
}

/// Runs `call` with elements of type `T`.
///
/// # Safety
/// The buffers of `call` are valid for `T` as [`Buf::get_mut`] requires, and `a` and `b` do not
/// overlap (the Python half checks both).
unsafe fn run_typed<T: Element>(g: &Group, c: &Call) -> psyne::Result<()> {
    // SAFETY: (for every `get`/`get_mut` below) the function's contract.
    unsafe {
        match c.code {
            Code::AllReduce => g.all_reduce(c.a.get_mut::<T>(), c.op),
            Code::Broadcast => g.broadcast(c.a.get_mut::<T>(), c.root),
            Code::Reduce => g.reduce(c.a.get_mut::<T>(), c.op, c.root),
            Code::AllGather => g.all_gather_into(c.a.get::<T>(), c.b.get_mut::<T>()),
            Code::ReduceScatter => g.reduce_scatter_into(c.a.get::<T>(), c.b.get_mut::<T>(), c.op),
            Code::Scatter => g.scatter_into(c.a.get::<T>(), c.b.get_mut::<T>(), c.count, c.root),
            Code::Gather => g.gather_into(c.a.get::<T>(), c.b.get_mut::<T>(), c.count, c.root),
            Code::AllToAll => g.all_to_all_into(c.a.get::<T>(), c.b.get_mut::<T>()),
            Code::Barrier => g.barrier(),
            Code::Send => g.send(c.a.get::<T>(), c.root),
            Code::Recv => g.recv(c.a.get_mut::<T>(), c.root),
        }
    }
}

/// Runs `call`, choosing `T` from its dtype.
///
/// # Safety
/// As [`run_typed`].
unsafe fn run(g: &Group, c: &Call) -> psyne::Result<()> {
    use psyne::{bf16, f16};
    // SAFETY: the function's contract.
    unsafe {
        match c.dtype {
            DType::F32 => run_typed::<f32>(g, c),
            DType::F64 => run_typed::<f64>(g, c),
            DType::I8 => run_typed::<i8>(g, c),
            DType::I16 => run_typed::<i16>(g, c),
            DType::I32 => run_typed::<i32>(g, c),
            DType::I64 => run_typed::<i64>(g, c),
            DType::U8 => run_typed::<u8>(g, c),
            DType::U16 => run_typed::<u16>(g, c),
            DType::U32 => run_typed::<u32>(g, c),
            DType::U64 => run_typed::<u64>(g, c),
            DType::F16 => run_typed::<f16>(g, c),
            DType::BF16 => run_typed::<bf16>(g, c),
        }
    }
}

thread_local! {
    /// Whether this thread is in a blocking call of this module (whose waits then check for
    /// signals: only the main thread's checks find any, as in Python itself).
    static IN_CALL: Cell<bool> = const { Cell::new(false) };
}

/// Refuses a call into a group from a signal handler that runs while a blocking call of this
/// thread waits (the waiting call holds its group: the new one would wait for it forever).
fn not_in_a_call() -> PyResult<()> {
    if IN_CALL.with(Cell::get) {
        return Err(PyRuntimeError::new_err(
            "a psyne call from a signal handler that runs while a psyne call of this thread \
             waits; the group is in use: do not call psyne from signal handlers",
        ));
    }
    Ok(())
}

/// Marks this thread as in a blocking call until dropped.
struct InCall;

impl InCall {
    fn enter() -> InCall {
        IN_CALL.with(|c| c.set(true));
        InCall
    }
}

impl Drop for InCall {
    fn drop(&mut self) {
        IN_CALL.with(|c| c.set(false));
    }
}

/// How a group's waits give way to a signal (shared by its `with_algo` views and its requests).
#[derive(Default)]
struct Interrupts {
    /// Set once a wait of the group was interrupted: every later call is refused, and a call in
    /// flight on the worker thread gives up at its next check.
    hit: AtomicBool,
    /// What interrupted it (`KeyboardInterrupt`), for the refusals.
    what: Mutex<String>,
    /// The exception the interrupted wait raises, until it is raised.
    raised: Mutex<Option<PyErr>>,
}

impl Interrupts {
    /// Whether to give the current wait up (`Some(reason)`): the group was interrupted already,
    /// or (`here`: on a thread that may run Python's signal handlers) a handler of a pending
    /// signal raised, which is then recorded. Called with the GIL released.
    fn check(&self, here: bool) -> Option<String> {
        if self.hit.load(Ordering::SeqCst) {
            return Some(lock(&self.what).clone());
        }
        if !here {
            return None;
        }
        let raised = Python::attach(|py| py.check_signals().err().map(|e| (type_name(py, &e), e)))?;
        let (name, err) = raised;
        let what = format!("{name} from a signal");
        *lock(&self.what) = what.clone();
        lock(&self.raised).get_or_insert(err);
        self.hit.store(true, Ordering::SeqCst);
        Some(what)
    }

    /// The check psyne asks while a call of the group is blocked: signals only on a thread in a
    /// blocking call of this module.
    fn psyne_check(self: &Arc<Self>) -> psyne::InterruptCheck {
        let me = self.clone();
        Arc::new(move || me.check(IN_CALL.with(Cell::get)))
    }

    /// The error of a later call on an interrupted group.
    fn refused(&self) -> psyne::Error {
        psyne::Error::new(
            psyne::ErrorKind::Aborted,
            format!(
                "a call on this group was interrupted ({}); the group refuses every later call \
                 (its peers were told): form a new group, or restart the job",
                lock(&self.what)
            ),
        )
    }

    /// [`Interrupts::refused`] as the Python exception.
    fn refusal(&self) -> PyErr {
        to_py(self.refused())
    }

    /// The exception of the wait that failed with `e`: the signal's, if the group was just
    /// interrupted and it was not raised yet, else `e` as psyne's error.
    fn raise(&self, e: psyne::Error) -> PyErr {
        match lock(&self.raised).take() {
            Some(err) if self.hit.load(Ordering::SeqCst) => err,
            _ => to_py(e),
        }
    }
}

/// The name of `e`'s class (`KeyboardInterrupt`).
fn type_name(py: Python<'_>, e: &PyErr) -> String {
    e.get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "an exception".into())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The calls in flight on a group: how many (queued on psyne's worker, running, or blocking)
/// and which Python thread issued them. psyne refuses a second thread too, but names threads as
/// Rust sees them; this names them as Python does, and lets a blocking call wait for the calls
/// before it giving way to signals.
#[derive(Default)]
struct Calls {
    state: Mutex<InFlight>,
    drained: Condvar,
}

/// The calls in flight on a group.
#[derive(Default)]
struct InFlight {
    /// Calls issued and not finished.
    calls: usize,
    /// The thread that issued them (its identity and a description for errors).
    holder: Option<(std::thread::ThreadId, Arc<str>)>,
    /// Blocking calls waiting in [`Calls::enter`] for the calls before them: only then does the
    /// last call out wake anyone (a `Condvar` wake is a system call even with no one to wake,
    /// and the last call out is every blocking call).
    waiting: usize,
}

/// `Python thread 'MainThread'` (the name `threading` gives the calling thread), looked up once
/// per thread. Called with the GIL and no lock held: looking it up runs Python code, during
/// which another Python thread may take the GIL.
fn python_thread(py: Python<'_>) -> Arc<str> {
    thread_local! {
        static NAME: std::cell::RefCell<Option<Arc<str>>> = const { std::cell::RefCell::new(None) };
    }
    if let Some(name) = NAME.with(|n| n.borrow().clone()) {
        return name;
    }
    let name = py
        .import("threading")
        .and_then(|t| t.call_method0("current_thread"))
        .and_then(|t| t.getattr("name"))
        .and_then(|n| n.extract::<String>());
    let name: Arc<str> = match name {
        Ok(name) => format!("Python thread '{name}'").into(),
        Err(_) => format!("thread {:?}", std::thread::current().id()).into(),
    };
    NAME.with(|n| *n.borrow_mut() = Some(name.clone()));
    name
}

impl Calls {
    /// Counts one more call in flight from this thread (`what`), or refuses it if another
    /// thread has calls in flight. With `drain`, first waits (GIL released) until this thread's
    /// earlier calls have finished: a blocking call runs after them; that wait gives way to a
    /// signal as the call's own waits do (false, and nothing counted, if it gave up).
    fn enter(&self, py: Python<'_>, what: &str, drain: Option<&Interrupts>) -> PyResult<bool> {
        let me = std::thread::current().id();
        // Before the lock: no Python code runs while it is held (a thread switch there could
        // leave another Python thread holding the GIL and waiting for the lock).
        let my_name = python_thread(py);
        let busy = |st: &InFlight| -> Option<Arc<str>> {
            match &st.holder {
                Some((holder, name)) if st.calls > 0 && *holder != me => Some(name.clone()),
                _ => None,
            }
        };
        let mut st = lock(&self.state);
        if let Some(interrupts) = drain.filter(|_| st.calls > 0 && busy(&st).is_none()) {
            drop(st);
            let gave_up = py.detach(|| {
                let _in_call = InCall::enter();
                let mut st = lock(&self.state);
                // Wait for this thread's calls (no other thread can add any meanwhile).
                while st.calls > 0 && busy(&st).is_none() {
                    st.waiting += 1;
                    st = self
                        .drained
                        .wait_timeout(st, psyne::INTERRUPT_CHECK_EVERY)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                    st.waiting -= 1;
                    if st.calls > 0 && busy(&st).is_none() {
                        drop(st);
                        if interrupts.check(true).is_some() {
                            return true;
                        }
                        st = lock(&self.state);
                    }
                }
                false
            });
            if gave_up {
                return Ok(false);
            }
            st = lock(&self.state);
        }
        if let Some(other) = busy(&st) {
            drop(st);
            return Err(to_py(psyne::Error::new(
                psyne::ErrorKind::Usage,
                format!(
                    "{what} refused: group used from two threads at once: {my_name} called it while {other} has calls on it in flight (queued or running). Ranks pair calls by their order, which two threads would make differ from rank to rank (wrong results); use one group per thread (Group.split) or serialise the calls, the same way on every rank"
                ),
            )));
        }
        if st.holder.as_ref().map(|h| h.0) != Some(me) {
            st.holder = Some((me, my_name));
        }
        st.calls += 1;
        Ok(true)
    }

    /// One call in flight finished.
    fn leave(&self) {
        let mut st = lock(&self.state);
        st.calls -= 1;
        if st.calls == 0 && st.waiting > 0 {
            self.drained.notify_all();
        }
    }
}

/// Counts a call out of the calls in flight when it ends, however it ends (a non-blocking call's
/// job that never runs included).
struct Entered(Arc<Calls>);

impl Drop for Entered {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// A group of ranks (the Python half wraps it as `psyne.Group`).
#[pyclass(module = "psyne._native", frozen)]
struct NativeGroup {
    group: Group,
    calls: Arc<Calls>,
    interrupts: Arc<Interrupts>,
}

impl NativeGroup {
    fn new(group: Group) -> Self {
        let interrupts = Arc::new(Interrupts::default());
        group.set_interrupt_check(interrupts.psyne_check());
        NativeGroup {
            group,
            calls: Arc::default(),
            interrupts,
        }
    }

    /// After a wait outside psyne's call was interrupted: tells the peers (psyne's revoke; a call
    /// in flight on the worker gives up at its next check first) and returns the exception.
    fn interrupted(py: Python<'_>, group: &Group, interrupts: &Interrupts) -> PyErr {
        let _ = py.detach(|| group.revoke());
        interrupts.raise(interrupts.refused())
    }
}

fn dtype_of(tag: u8) -> PyResult<DType> {
    DType::from_tag(tag).ok_or_else(|| PyValueError::new_err(format!("unknown dtype tag {tag}")))
}

fn op_of(tag: u8) -> PyResult<ReduceOp> {
    ReduceOp::from_tag(tag).ok_or_else(|| PyValueError::new_err(format!("unknown op tag {tag}")))
}

#[pymethods]
impl NativeGroup {
    /// This rank, `0..size`.
    #[getter]
    fn rank(&self) -> usize {
        self.group.rank()
    }

    /// Ranks in the group.
    #[getter]
    fn size(&self) -> usize {
        self.group.size()
    }

    /// This rank's chunk length when `count` elements are split evenly over the group.
    fn chunk_len(&self, count: usize) -> usize {
        self.group.chunk_len(count)
    }

    /// The transport to each peer, as one line.
    fn transports(&self, py: Python<'_>) -> PyResult<String> {
        not_in_a_call()?;
        // GIL released: a call of this group on another thread may be asking for it, holding
        // the group (its interrupt check).
        Ok(py.detach(|| self.group.transports()))
    }

    /// The deadline of every wait, in seconds.
    #[getter]
    fn timeout(&self) -> f64 {
        self.group.timeout().as_secs_f64()
    }

    /// A view of this group whose calls use algorithm `name` (same queue, same order).
    fn with_algo(&self, name: &str) -> PyResult<NativeGroup> {
        let algo = Algo::parse(name)
            .ok_or_else(|| PyValueError::new_err(format!("unknown algorithm {name:?}")))?;
        Ok(NativeGroup {
            group: self.group.with_algo(algo),
            calls: self.calls.clone(),
            interrupts: self.interrupts.clone(),
        })
    }

    /// A view of this group whose reducing calls combine the ranks' values in order `name`
    /// (`fast` or `canonical`; same queue, same order of calls).
    fn with_reduce_order(&self, name: &str) -> PyResult<NativeGroup> {
        let order = psyne::ReduceOrder::parse(name).map_err(to_py)?;
        Ok(NativeGroup {
            group: self.group.with_reduce_order(order),
            calls: self.calls.clone(),
            interrupts: self.interrupts.clone(),
        })
    }

    /// The reduction order of this view's reducing calls (`fast` or `canonical`).
    #[getter]
    fn reduce_order(&self) -> &'static str {
        self.group.reduce_order().name()
    }

    /// `MPI_Comm_split`: the subgroup of the ranks that pass the same color, or None.
    fn split(&self, py: Python<'_>, color: Option<u32>, key: i64) -> PyResult<Option<NativeGroup>> {
        not_in_a_call()?;
        self.group.check_process().map_err(to_py)?;
        if !self.calls.enter(py, "split", Some(&self.interrupts))? {
            return Err(NativeGroup::interrupted(py, &self.group, &self.interrupts));
        }
        let entered = Entered(self.calls.clone());
        let group = self.group.clone();
        let r = py.detach(move || group.split(color, key));
        drop(entered);
        r.map(|g| g.map(NativeGroup::new)).map_err(to_py)
    }

    /// `MPIX_Comm_revoke`: every later call on the group fails, here and on every peer.
    fn revoke(&self, py: Python<'_>) -> PyResult<()> {
        not_in_a_call()?;
        let group = self.group.clone();
        py.detach(move || group.revoke()).map_err(to_py)
    }

    /// `MPIX_Comm_agree`: (the AND of the live ranks' flags, the ranks gone), the same on
    /// every survivor.
    fn agree(&self, py: Python<'_>, flag: bool) -> PyResult<(bool, Vec<usize>)> {
        not_in_a_call()?;
        let group = self.group.clone();
        py.detach(move || group.agree(flag)).map_err(to_py)
    }

    /// `MPIX_Comm_shrink`: the survivors' new group.
    fn shrink(&self, py: Python<'_>) -> PyResult<NativeGroup> {
        not_in_a_call()?;
        let group = self.group.clone();
        py.detach(move || group.shrink())
            .map(NativeGroup::new)
            .map_err(to_py)
    }

    /// Runs one collective on raw buffers, blocking, GIL released. Called by psyne/__init__.py
    /// and psyne/torch.py only, which check the buffers first.
    fn run(&self, py: Python<'_>, call: &Call) -> PyResult<()> {
        let call = *call;
        // SAFETY: the Python half checked the buffers (contiguous, aligned, of this dtype and
        // length, not overlapping) and holds them until this returns.
        self.run_with(py, move |group| unsafe { run(group, &call) })
    }

    /// [`NativeGroup::run`] of an in-place all-reduce of `len` elements (dtype tag `dtype`) at
    /// `addr` with op tag `op`, without building a [`Call`]: the torch backend's hot path
    /// (`dist.all_reduce`, blocking), where building one cost a third of psyne's share of an
    /// 8-byte call.
    fn run_all_reduce(
        &self,
        py: Python<'_>,
        dtype: u8,
        addr: usize,
        len: usize,
        op: u8,
    ) -> PyResult<()> {
        let call = Call {
            code: Code::AllReduce,
            name: "all_reduce",
            dtype: dtype_of(dtype)?,
            a: Buf { addr, len },
            b: Buf { addr: 0, len: 0 },
            op: op_of(op)?,
            root: 0,
            count: 0,
        };
        // SAFETY: as in `run`: the Python half checked the buffer and holds it until this
        // returns.
        self.run_with(py, move |group| unsafe { run(group, &call) })
    }

    /// The non-blocking form of [`NativeGroup::run`]: issues the call to psyne's worker and
    /// returns its handle. `keep` (the arrays) is held until the call has finished.
    fn submit(&self, py: Python<'_>, call: &Call, keep: Py<PyAny>) -> PyResult<NativeWork> {
        let call = *call;
        // SAFETY: as in `run`, the arrays kept alive by `keep`.
        let job = move |group: &Group| unsafe { run(group, &call) };
        // SAFETY: the job borrows the caller's arrays through raw addresses; `keep`, which the
        // job holds until it has run, keeps them alive, and the Python half does not touch them
        // until the request has finished.
        unsafe { self.submit_with(py, call.name, keep, job) }
    }
}

impl NativeGroup {
    /// Runs `f` as a blocking call of this group (GIL released, signals checked while it waits,
    /// after the calls issued before it).
    fn run_with<F>(&self, py: Python<'_>, f: F) -> PyResult<()>
    where
        F: FnOnce(&Group) -> psyne::Result<()> + Send,
    {
        let entered = self.enter(py, "a call", true)?;
        let (group, interrupts) = (&self.group, &*self.interrupts);
        let r = py.detach(move || {
            let _in_call = InCall::enter();
            f(group)
        });
        drop(entered);
        r.map_err(|e| interrupts.raise(e))
    }

    /// Issues `f` to psyne's worker of the group, in its turn; its handle. `keep` is held until
    /// `f` has run.
    ///
    /// # Safety
    /// As [`Group::submit_borrowed`]: what `f` borrows stays valid (`keep` holding it) and
    /// untouched until the returned work has finished.
    unsafe fn submit_with<F>(
        &self,
        py: Python<'_>,
        name: &'static str,
        keep: Py<PyAny>,
        f: F,
    ) -> PyResult<NativeWork>
    where
        F: FnOnce(&Group) -> psyne::Result<()> + Send,
    {
        let entered = self.enter(py, "a non-blocking call", false)?;
        let interrupts = self.interrupts.clone();
        let job = move |group: &Group| {
            // The worker was just woken by this submit and, on a rank bound to one core, took
            // that core from the caller until its time slice ended (2-5 ms on a 64 MiB
            // all-reduce): let the caller return first.
            std::thread::yield_now();
            let r = if interrupts.hit.load(Ordering::SeqCst) {
                // Issued before the interrupt, run after: refused like a later call.
                Err(interrupts.refused())
            } else {
                f(group)
            };
            Python::attach(move |_py| drop(keep));
            // Left before the result shows: whoever sees it may call again at once, from
            // any thread.
            drop(entered);
            r
        };
        // SAFETY: the function's contract.
        let work = unsafe { self.group.submit_borrowed(name, job) };
        Ok(NativeWork {
            work: Mutex::new(Some(work)),
            result: OnceLock::new(),
            group: self.group.clone(),
            interrupts: self.interrupts.clone(),
        })
    }
}

impl NativeGroup {
    /// Counts a call (`what`) in flight, after the checks every call makes first: the process,
    /// the group not interrupted, not from a signal handler of a waiting call (blocking calls),
    /// one thread at a time; a blocking call first waits for the calls issued before it.
    fn enter(&self, py: Python<'_>, what: &str, blocking: bool) -> PyResult<Entered> {
        self.group.check_process().map_err(to_py)?;
        let interrupts = &*self.interrupts;
        if interrupts.hit.load(Ordering::SeqCst) {
            return Err(interrupts.refusal());
        }
        if blocking {
            not_in_a_call()?;
        }
        let drain = blocking.then_some(interrupts);
        if !self.calls.enter(py, what, drain)? {
            // Interrupted while waiting for the calls issued before it.
            return Err(NativeGroup::interrupted(py, &self.group, interrupts));
        }
        Ok(Entered(self.calls.clone()))
    }
}

/// The handle of a non-blocking call: psyne's [`psyne::Work`], and its result once taken.
#[pyclass(module = "psyne._native", frozen)]
struct NativeWork {
    work: Mutex<Option<psyne::Work<()>>>,
    /// The result, kept: `wait` may be called again.
    result: OnceLock<psyne::Result<()>>,
    /// The group it runs on (to refuse waiting in a process forked since: no worker would
    /// finish the call), and how that group's waits give way to a signal.
    group: Group,
    interrupts: Arc<Interrupts>,
}

/// How a [`NativeWork::wait`] ended.
enum Waited {
    Finished(psyne::Result<()>),
    TimedOut,
    Interrupted,
}

impl NativeWork {
    /// Waits up to `limit` for the call (GIL released by the caller); its result once finished.
    fn finished(&self, limit: Duration) -> Option<psyne::Result<()>> {
        if let Some(r) = self.result.get() {
            return Some(r.clone());
        }
        let mut work = lock(&self.work);
        if let Some(w) = work.take_if(|w| w.wait_for(limit)) {
            let _ = self.result.set(w.wait());
        }
        drop(work);
        self.result.get().cloned()
    }
}

#[pymethods]
impl NativeWork {
    /// True once the call has finished (successfully or not).
    fn test(&self) -> bool {
        self.result.get().is_some() || lock(&self.work).as_ref().map_or(true, |w| w.test())
    }

    /// Waits (GIL released) until the call finishes or `timeout` seconds pass. Returns True when
    /// it finished successfully, False on timeout, and raises the call's error if it failed. A
    /// signal whose handler raises (Ctrl-C) ends the wait with its exception and gives up the
    /// call (see the module docs).
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        self.group.check_process().map_err(to_py)?;
        let interrupts = &*self.interrupts;
        let deadline = timeout.map(|t| Instant::now() + Duration::from_secs_f64(t.max(0.0)));
        let r = py.detach(|| loop {
            let mut slice = psyne::INTERRUPT_CHECK_EVERY;
            if let Some(d) = deadline {
                slice = slice.min(d.saturating_duration_since(Instant::now()));
            }
            if let Some(r) = self.finished(slice) {
                return Waited::Finished(r);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Waited::TimedOut;
            }
            if interrupts.check(true).is_some() {
                return Waited::Interrupted;
            }
        });
        match r {
            Waited::TimedOut => Ok(false),
            Waited::Finished(Ok(())) => Ok(true),
            Waited::Finished(Err(e)) => Err(interrupts.raise(e)),
            Waited::Interrupted => Err(NativeGroup::interrupted(py, &self.group, interrupts)),
        }
    }
}

/// A psyne [`Store`] over a Python object with `set(key: str, value: bytes)`, `get(key: str,
/// timeout: float) -> bytes` (raising on timeout), `add(key: str, delta: int) -> int` and
/// `set_once(key: str, value: bytes) -> bytes` (atomic: the value held afterwards): how
/// the torch backend forms a group through the store torch gives it.
struct PyStore {
    adapter: Py<PyAny>,
}

fn store_err(what: &str, e: PyErr) -> psyne::Error {
    let kind = Python::attach(|py| {
        if e.is_instance_of::<pyo3::exceptions::PyTimeoutError>(py) {
            psyne::ErrorKind::Timeout
        } else {
            psyne::ErrorKind::Bootstrap
        }
    });
    psyne::Error::new(kind, format!("the Python store's {what} failed: {e}"))
}

impl PyStore {
    /// Runs `f` on the adapter with the GIL held; its error is psyne's, naming method `what`.
    fn call<R>(
        &self,
        what: &str,
        f: impl FnOnce(Python<'_>, &Py<PyAny>) -> PyResult<R>,
    ) -> psyne::Result<R> {
        Python::attach(|py| f(py, &self.adapter)).map_err(|e| store_err(what, e))
    }
}

impl Store for PyStore {
    fn set(&self, key: &str, value: &[u8]) -> psyne::Result<()> {
        self.call("set", |py, a| {
            a.call_method1(py, "set", (key, PyBytes::new(py, value)))
                .map(drop)
        })
    }

    fn get(&self, key: &str, deadline: Instant) -> psyne::Result<Vec<u8>> {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .as_secs_f64();
        self.call("get", |py, a| {
            a.call_method1(py, "get", (key, left))?.extract(py)
        })
    }

    fn add(&self, key: &str, delta: i64) -> psyne::Result<i64> {
        self.call("add", |py, a| {
            a.call_method1(py, "add", (key, delta))?.extract(py)
        })
    }

    fn set_once(&self, key: &str, value: &[u8]) -> psyne::Result<Vec<u8>> {
        self.call("set_once", |py, a| {
            a.call_method1(py, "set_once", (key, PyBytes::new(py, value)))?
                .extract(py)
        })
    }

    /// A Python store has no connection psyne can watch: the key just keeps `value`.
    fn set_ephemeral(&self, key: &str, value: &[u8], _when_gone: &[u8]) -> psyne::Result<()> {
        self.set(key, value)
    }
}

/// Joins the job this process belongs to (psyne's environment contract: psyrun, torchrun's
/// variables, or alone a world of one).
///
/// The joining runs on a thread of its own while this one waits, GIL released, checking for
/// signals every [`psyne::INTERRUPT_CHECK_EVERY`]: Ctrl-C while the other ranks are awaited
/// raises at once instead of at `PSY_TIMEOUT`. The abandoned join goes on to its deadline in the
/// background; a group it forms then is dropped (its peers see this rank leave).
#[pyfunction]
fn init(py: Python<'_>) -> PyResult<NativeGroup> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("psyne-py-init".into())
        .spawn(move || {
            let _ = tx.send(psyne::init());
        })
        .map_err(|e| PyRuntimeError::new_err(format!("starting the init thread: {e}")))?;
    let mut rx = rx;
    loop {
        // The receiver moves into the GIL-free closure and back (it is not Sync).
        let (got, back) = py.detach(move || (rx.recv_timeout(psyne::INTERRUPT_CHECK_EVERY), rx));
        rx = back;
        match got {
            Ok(formed) => return formed.map(NativeGroup::new).map_err(to_py),
            Err(mpsc::RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(PyRuntimeError::new_err(
                    "psyne.init: the thread joining the job ended without a result",
                ))
            }
        }
    }
}

/// Which attempt of a restarted job this process belongs to (`psyne::contract::restart_count`).
#[pyfunction]
fn restart_count() -> PyResult<usize> {
    psyne::contract::restart_count().map_err(to_py)
}

/// A world of one.
#[pyfunction]
fn alone() -> NativeGroup {
    NativeGroup::new(Group::alone())
}

/// Forms a group through a Python key-value store (see [`PyStore`]): every rank calls it with the
/// same `prefix`, `size`, `secret` (hex) and `job_id`; `bind_ip` is the address this rank listens
/// on and advertises. Tunables (`PSY_TIMEOUT`, `PSY_TRANSPORT`, ...) come from the environment.
#[pyfunction]
#[pyo3(signature = (store, rank, size, prefix, secret, job_id, bind_ip))]
#[allow(clippy::too_many_arguments)]
fn init_from_store(
    py: Python<'_>,
    store: Py<PyAny>,
    rank: usize,
    size: usize,
    prefix: String,
    secret: &str,
    job_id: String,
    bind_ip: &str,
) -> PyResult<NativeGroup> {
    if size == 0 || rank >= size {
        return Err(PyValueError::new_err(format!(
            "rank {rank} is not in a group of {size}"
        )));
    }
    let secret = Secret::from_hex(secret).map_err(to_py)?;
    let bind_ip: IpAddr = bind_ip
        .parse()
        .map_err(|_| PyValueError::new_err(format!("{bind_ip:?} is not an IP address")))?;
    let tunables = Tunables::from_env().map_err(to_py)?;
    let options = GroupOptions {
        rank,
        size,
        prefix,
        secret,
        bind_ip,
        tunables,
        job_id,
        host_key: psyne::host_key(),
    };
    let store: Arc<dyn Store> = Arc::new(PyStore { adapter: store });
    py.detach(move || Group::builder(options).shared_store(store).build())
        .map(NativeGroup::new)
        .map_err(to_py)
}

/// Refuses a reduction order that is neither `fast` nor `canonical` (a `ConfigError` naming both).
#[pyfunction]
fn check_reduce_order(name: &str) -> PyResult<()> {
    psyne::ReduceOrder::parse(name).map(drop).map_err(to_py)
}

/// A new random job secret, hex.
#[pyfunction]
fn generate_secret() -> PyResult<String> {
    Secret::generate().map(|s| s.to_hex()).map_err(to_py)
}

/// The module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    shared::add_to(m)?;
    torch_hot::add_to(m)?;
    m.add_class::<NativeGroup>()?;
    m.add_class::<NativeWork>()?;
    m.add_class::<Call>()?;
    let calls: Vec<(&str, u8)> = CALLS.iter().map(|&(name, c)| (name, c as u8)).collect();
    m.add("CALLS", calls)?;
    m.add_function(wrap_pyfunction!(address::array_address, m)?)?;
    m.add_function(wrap_pyfunction!(init, m)?)?;
    m.add_function(wrap_pyfunction!(check_reduce_order, m)?)?;
    m.add_function(wrap_pyfunction!(alone, m)?)?;
    m.add_function(wrap_pyfunction!(restart_count, m)?)?;
    m.add_function(wrap_pyfunction!(init_from_store, m)?)?;
    m.add_function(wrap_pyfunction!(generate_secret, m)?)?;
    let tags: Vec<(&str, u8)> = DType::ALL.iter().map(|d| (d.name(), *d as u8)).collect();
    m.add("DTYPE_TAGS", tags)?;
    let ops: Vec<(&str, u8)> = ReduceOp::ALL.iter().map(|o| (o.name(), *o as u8)).collect();
    m.add("OP_TAGS", ops)?;
    m.add("MIN_SHARED_BYTES", psyne::MIN_SHARED_BYTES)?;
    Ok(())
}
