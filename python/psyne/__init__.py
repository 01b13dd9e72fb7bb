"""psyne for Python: collective communication on NumPy arrays.

>>> import psyne, numpy as np
>>> g = psyne.init()                      # psyrun's (or torchrun's) environment; alone: a world of 1
>>> x = np.full(4, g.rank, dtype=np.float32)
>>> g.all_reduce(x, op="sum")             # in place, zero-copy, GIL released while it runs
array([0., 0., 0., 0.], dtype=float32)

Every collective of psyne's Rust API is a method of :class:`Group`. Arrays are used where they
are, never copied: they must be C-contiguous, aligned, in native byte order, of a supported dtype
(float32, float64, float16, int8..int64, uint8..uint64, and bfloat16 where NumPy has it through
``ml_dtypes``), and writable where the call writes. Anything else raises ``TypeError`` (not an
array, unsupported dtype) or ``ValueError`` (not contiguous, read-only, wrong length), before any
rank sends anything. Objects exposing the buffer protocol or DLPack are taken as NumPy views of
their memory.

Reduce ops are named by strings: ``"sum"``, ``"prod"``, ``"min"``, ``"max"``, ``"avg"`` (sum
divided by the group size; integers truncate), and for integers ``"band"``, ``"bor"``,
``"bxor"``.

Each blocking call has a non-blocking ``*_async`` form returning a :class:`Request` (``wait()``,
``test()``, ``await``). Calls on one group run in the order they were issued, blocking or not, and
come from one thread at a time: a call from another thread while calls are in flight, or from a
process forked after the group was made, raises :class:`UsageError`.
Errors are :class:`psyne.Error` subclasses carrying psyne's kind (:class:`MismatchError`,
:class:`PeerLostError`, :class:`TimeoutError`, ...). Ctrl-C during a call that waits for its
peers raises ``KeyboardInterrupt`` at once (within about 50 ms, not at the timeout); the group
then refuses every later call (:class:`AbortedError`). ``import psyne`` never imports torch; the
torch.distributed backend is :mod:`psyne.torch`.
"""

from __future__ import annotations

import asyncio
from typing import Any, List, Optional, Tuple

import numpy as np

from . import _errors, _native
from ._errors import (
    AbortedError,
    AuthError,
    BootstrapError,
    ConfigError,
    Error,
    InvalidArgumentError,
    IoError,
    MismatchError,
    PeerLostError,
    RevokedError,
    TimeoutError,
    UsageError,
)

__all__ = [
    "init",
    "init_from_store",
    "alone",
    "Group",
    "Request",
    "OPS",
    "DTYPES",
    *_errors.__all__,
]

_CALL = dict(_native.CALLS)  # a call's name -> its code in python/src/lib.rs's table
_Call = _native.Call  # Call(code, dtype, a=(addr, len), b=(addr, len), op=sum, root=0, count=0)

_TAG = dict(_native.DTYPE_TAGS)  # psyne's dtype name -> wire tag
_OP_TAGS = dict(_native.OP_TAGS)

#: Reduce op names (and accepted aliases) -> psyne's tag.
OPS = dict(_OP_TAGS)
OPS.update({"mean": _OP_TAGS["avg"], "product": _OP_TAGS["prod"]})

_NP_NAMES = {
    "float32": "f32",
    "float64": "f64",
    "float16": "f16",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
}
#: Supported NumPy dtypes -> psyne's dtype name.
DTYPES = {np.dtype(k): v for k, v in _NP_NAMES.items()}
try:  # bfloat16 exists in NumPy only through ml_dtypes (which torch and jax users often have)
    import ml_dtypes as _ml_dtypes  # type: ignore[import-not-found]

    DTYPES[np.dtype(_ml_dtypes.bfloat16)] = "bf16"
except ImportError:  # pragma: no cover - depends on the environment
    pass
_DTYPE_TAG = {dt: _TAG[name] for dt, name in DTYPES.items()}
_BARRIER_CALL = _Call(_CALL["barrier"], _TAG["u8"])

ArrayLike = Any  # a NumPy array, or any object with the buffer protocol or __dlpack__


def _as_array(x: ArrayLike, what: str) -> np.ndarray:
    """``x`` as a NumPy array sharing its memory, or TypeError."""
    if type(x) is np.ndarray:
        return x
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack__") and not isinstance(x, (bytes, bytearray, memoryview)):
        try:
            return np.from_dlpack(x)
        except Exception as e:  # a device array, or a dtype NumPy cannot view
            raise TypeError(f"{what}: cannot view {type(x).__name__} as a NumPy array without a copy: {e}") from e
    try:
        return np.asarray(memoryview(x))
    except TypeError:
        raise TypeError(
            f"{what}: expected a NumPy array or an object with the buffer protocol or __dlpack__, "
            f"got {type(x).__name__}"
        ) from None


def _check(x: ArrayLike, what: str, writable: bool, tag: Optional[int] = None) -> Tuple[np.ndarray, int, int, int]:
    """(array, address, element count, dtype tag) of an array psyne may use in place."""
    a = _as_array(x, what)
    t = _DTYPE_TAG.get(a.dtype)
    if t is None:
        raise TypeError(
            f"{what}: dtype {a.dtype} is not supported by psyne (supported: "
            f"{', '.join(sorted(str(d) for d in DTYPES))}, in native byte order)"
        )
    if tag is not None and t != tag:
        raise TypeError(f"{what}: dtype {a.dtype} differs from the other array's")
    flags = a.flags
    if not flags.c_contiguous:
        raise ValueError(
            f"{what}: the array is not C-contiguous (strides {a.strides}); psyne works in place and "
            "never copies silently: pass np.ascontiguousarray(x) and use the result"
        )
    if not flags.aligned:
        raise ValueError(f"{what}: the array is not aligned for {a.dtype}")
    if writable and not flags.writeable:
        raise ValueError(f"{what}: the array is read-only, and this call writes into it")
    return a, _native.array_address(a), a.size, t


def _op(op: str) -> int:
    try:
        return OPS[op] if op in OPS else OPS[op.lower()]
    except (KeyError, AttributeError, TypeError):
        raise ValueError(f"unknown reduce op {op!r}; one of {', '.join(OPS)}") from None


def _distinct(a: np.ndarray, b: np.ndarray, what: str) -> None:
    if a.size and b.size and np.may_share_memory(a, b):
        raise ValueError(f"{what}: the input and output arrays overlap; pass separate arrays")


def _root(root: int, size: int, what: str) -> int:
    if not 0 <= root < size:
        raise ValueError(f"{what}: root {root} is not a rank of this group of {size}")
    return root


class Request:
    """The handle of a non-blocking call: ``wait()`` gives its result (raising its error),
    ``test()`` says whether it has finished, and ``await request`` waits from asyncio.

    The arrays of the call are in use until it finishes: do not read or write them before then.
    """

    __slots__ = ("_work", "_result", "_keep")

    def __init__(self, work: Any, result: Any, keep: Any) -> None:
        self._work = work
        self._result = result
        self._keep = keep

    def test(self) -> bool:
        """True once the call has finished (successfully or not)."""
        return self._work.test()

    def wait(self, timeout: Optional[float] = None) -> Any:
        """Blocks (GIL released) until the call finishes, then returns its result (the array the
        blocking form returns). Raises the call's error, or :class:`psyne.TimeoutError` if
        ``timeout`` seconds pass first (the call goes on; wait again)."""
        if not self._work.wait(timeout):
            raise TimeoutError(f"the call did not finish within {timeout} s")
        return self._result

    def __await__(self):  # type: ignore[no-untyped-def]
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(None, self.wait).__await__()


class Group:
    """The ranks of a job, connected to each other. Every rank of the group calls each collective,
    in the same order, with matching arguments (a rank that does not gets a
    :class:`MismatchError`, as do the others). Calls run one at a time, in the order they were
    issued; the calls in flight (queued, running or blocking) must all come from one thread, and a
    call from another thread meanwhile raises :class:`UsageError` naming both (ranks pair calls by
    their order, which two threads would make differ between ranks): use one group per thread
    (:meth:`split`) or serialise the calls. A process forked after the group was made is refused
    every call (:class:`UsageError`)."""

    __slots__ = ("_n", "rank", "size")

    def __init__(self, native: Any) -> None:
        self._n = native
        #: This rank, ``0..size``.
        self.rank: int = native.rank
        #: Ranks in the group.
        self.size: int = native.size

    def __repr__(self) -> str:
        return f"<psyne.Group rank {self.rank} of {self.size}>"

    @property
    def timeout(self) -> float:
        """The deadline of every wait, in seconds (``PSY_TIMEOUT``)."""
        return self._n.timeout

    def transports(self) -> str:
        """The transport to each peer (shared memory, TCP, ...), as one line."""
        return self._n.transports()

    def chunk_len(self, count: int) -> int:
        """This rank's chunk length when ``count`` elements are split evenly over the group (the
        first ``count % size`` chunks one longer)."""
        return self._n.chunk_len(count)

    def with_algo(self, name: str) -> "Group":
        """A view of this group whose calls use algorithm ``name`` (``ring``, ``recursive-doubling``,
        ``binomial``, ...); every rank must make the same choice."""
        return Group(self._n.with_algo(name))

    def with_reduce_order(self, order: str) -> "Group":
        """A view of this group whose reducing calls (all-reduce, reduce, reduce-scatter) combine
        the ranks' values in ``order``: ``"fast"`` (the default: the fastest algorithm's order) or
        ``"canonical"`` (every element is the rank-order fold ``((x0 + x1) + x2) + ...``, the same
        bits whatever the size, algorithm, tuning file or transport). Every rank must make the
        same choice. An unknown order raises :class:`ConfigError`."""
        return Group(self._n.with_reduce_order(order))

    @property
    def reduce_order(self) -> str:
        """The order this view's reducing calls combine the ranks' values in (``"fast"`` or
        ``"canonical"``): :meth:`with_reduce_order`'s, else ``PSY_REDUCE_ORDER``'s, else fast."""
        return self._n.reduce_order

    def split(self, color: Optional[int], key: int = 0) -> Optional["Group"]:
        """Like ``MPI_Comm_split``: ranks passing the same ``color`` form a subgroup ordered by
        ``key`` (then rank); a rank passing None joins none and gets None. Every rank calls it."""
        n = self._n.split(color, key)
        return None if n is None else Group(n)

    # -- going on after a failure (ULFM's revoke, agree, shrink) -----------------------------------

    def revoke(self) -> None:
        """Like ``MPIX_Comm_revoke``: every later call on this group fails, on this rank and on every
        other (:class:`RevokedError`), so no survivor stays blocked in a collective a failed rank
        will not join. Then :meth:`shrink`."""
        self._n.revoke()

    def agree(self, flag: bool) -> Tuple[bool, List[int]]:
        """Like ``MPIX_Comm_agree``: every live rank calls it, and all get the same answer: the AND
        of their ``flag`` values and the sorted ranks that are gone. It completes even if ranks die
        during it."""
        ok, gone = self._n.agree(bool(flag))
        return bool(ok), list(gone)

    def shrink(self) -> "Group":
        """Like ``MPIX_Comm_shrink``: the survivors' new group (ranks renumbered in their old
        order), ready for every collective. Every live rank calls it after a failure."""
        return Group(self._n.shrink())

    # -- the collectives: each builds (code, buffers, args) and runs it blocking or queued --------

    def _go(self, blocking: bool, result: Any, keep: Any, call: Any) -> Any:
        if blocking:
            self._n.run(call)
            return result
        return Request(self._n.submit(call, keep), result, keep)

    def _all_reduce(self, x: ArrayLike, op: str, blocking: bool) -> Any:
        a, p, n, t = _check(x, "all_reduce", True)
        return self._go(blocking, a, a, _Call(_CALL["all_reduce"], t, (p, n), op=_op(op)))

    def all_reduce(self, x: ArrayLike, op: str = "sum") -> np.ndarray:
        """In place: every rank's ``x`` becomes the element-wise reduction of all ranks' ``x``
        (same shape and dtype everywhere). Returns ``x`` (as a NumPy array)."""
        return self._all_reduce(x, op, True)

    def all_reduce_async(self, x: ArrayLike, op: str = "sum") -> Request:
        """Non-blocking :meth:`all_reduce`; ``wait()`` returns ``x``."""
        return self._all_reduce(x, op, False)

    def _broadcast(self, x: ArrayLike, root: int, blocking: bool) -> Any:
        a, p, n, t = _check(x, "broadcast", True)
        _root(root, self.size, "broadcast")
        return self._go(blocking, a, a, _Call(_CALL["broadcast"], t, (p, n), root=root))

    def broadcast(self, x: ArrayLike, root: int = 0) -> np.ndarray:
        """In place: every rank's ``x`` becomes ``root``'s. Returns ``x``."""
        return self._broadcast(x, root, True)

    def broadcast_async(self, x: ArrayLike, root: int = 0) -> Request:
        """Non-blocking :meth:`broadcast`."""
        return self._broadcast(x, root, False)

    def _reduce(self, x: ArrayLike, op: str, root: int, blocking: bool) -> Any:
        a, p, n, t = _check(x, "reduce", True)
        _root(root, self.size, "reduce")
        return self._go(blocking, a, a, _Call(_CALL["reduce"], t, (p, n), op=_op(op), root=root))

    def reduce(self, x: ArrayLike, op: str = "sum", root: int = 0) -> np.ndarray:
        """In place on ``root``: its ``x`` becomes the reduction of all ranks' ``x``; the other
        ranks' ``x`` are left as they were. Returns ``x``."""
        return self._reduce(x, op, root, True)

    def reduce_async(self, x: ArrayLike, op: str = "sum", root: int = 0) -> Request:
        """Non-blocking :meth:`reduce`."""
        return self._reduce(x, op, root, False)

    def _all_gather(self, x: ArrayLike, out: Optional[ArrayLike], blocking: bool) -> Any:
        a, p, n, t = _check(x, "all_gather", False)
        if out is None:
            o = np.empty((self.size,) + a.shape, dtype=a.dtype)
        else:
            o = _as_array(out, "all_gather out")
        o, q, m, _ = _check(o, "all_gather out", True, t)
        if n != self._n.chunk_len(m):
            raise ValueError(
                f"all_gather: out has {m} elements, so this rank's input must have "
                f"{self._n.chunk_len(m)} (the even split), not {n}"
            )
        _distinct(a, o, "all_gather")
        return self._go(blocking, o, (a, o), _Call(_CALL["all_gather"], t, (p, n), (q, m)))

    def all_gather(self, x: ArrayLike, out: Optional[ArrayLike] = None) -> np.ndarray:
        """Every rank gets all ranks' ``x`` in rank order: by default a new array of shape
        ``(size, *x.shape)``; or into ``out``, of any shape, whose elements (flat) are split
        evenly over the ranks (the first ``len % size`` chunks one longer), rank ``i``
        contributing chunk ``i``, so the ranks' ``x`` may differ by one element."""
        return self._all_gather(x, out, True)

    def all_gather_async(self, x: ArrayLike, out: Optional[ArrayLike] = None) -> Request:
        """Non-blocking :meth:`all_gather`."""
        return self._all_gather(x, out, False)

    def _reduce_scatter(self, x: ArrayLike, op: str, out: Optional[ArrayLike], blocking: bool) -> Any:
        a, p, n, t = _check(x, "reduce_scatter", False)
        want = self._n.chunk_len(n)
        o = np.empty(want, dtype=a.dtype) if out is None else out
        o, q, m, _ = _check(o, "reduce_scatter out", True, t)
        if m != want:
            raise ValueError(f"reduce_scatter: out must have this rank's chunk of {n}: {want} elements, not {m}")
        _distinct(a, o, "reduce_scatter")
        return self._go(blocking, o, (a, o), _Call(_CALL["reduce_scatter"], t, (p, n), (q, m), _op(op)))

    def reduce_scatter(self, x: ArrayLike, op: str = "sum", out: Optional[ArrayLike] = None) -> np.ndarray:
        """Reduces all ranks' ``x`` (same size everywhere) and gives rank ``i`` chunk ``i`` of the
        result (a 1-D array, or ``out``)."""
        return self._reduce_scatter(x, op, out, True)

    def reduce_scatter_async(
        self, x: ArrayLike, op: str = "sum", out: Optional[ArrayLike] = None
    ) -> Request:
        """Non-blocking :meth:`reduce_scatter`."""
        return self._reduce_scatter(x, op, out, False)

    def _scatter(
        self, x: Optional[ArrayLike], root: int, count: Optional[int], out: Optional[ArrayLike], blocking: bool
    ) -> Any:
        _root(root, self.size, "scatter")
        if x is None:
            if out is None or count is None:
                raise ValueError("scatter: a rank that passes no input must pass out= and count=")
            o, q, m, t = _check(out, "scatter out", True)
            a, p, n = o[:0], 0, 0
        else:
            a, p, n, t = _check(x, "scatter", False)
            if count is None:
                count = n
            o = np.empty(self._n.chunk_len(count), dtype=a.dtype) if out is None else out
            o, q, m, _ = _check(o, "scatter out", True, t)
        if self.rank != root:
            p, n = 0, 0  # a non-root's input is not read
        elif n != count:
            raise ValueError(f"scatter: the root's input has {n} elements but count is {count}")
        want = self._n.chunk_len(count)
        if m != want:
            raise ValueError(f"scatter: out must have this rank's chunk of {count}: {want} elements, not {m}")
        if n:
            _distinct(a, o, "scatter")
        return self._go(blocking, o, (a, o), _Call(_CALL["scatter"], t, (p, n), (q, m), root=root, count=count))

    def scatter(
        self,
        x: Optional[ArrayLike],
        root: int = 0,
        count: Optional[int] = None,
        out: Optional[ArrayLike] = None,
    ) -> np.ndarray:
        """Splits ``root``'s ``x`` (``count`` elements, default ``x.size``) evenly and gives rank
        ``i`` chunk ``i`` (a 1-D array, or ``out``). Every rank passes the same ``count``;
        non-roots pass an array of the same size and dtype (not read), or None with ``out`` and
        ``count``."""
        return self._scatter(x, root, count, out, True)

    def scatter_async(
        self,
        x: Optional[ArrayLike],
        root: int = 0,
        count: Optional[int] = None,
        out: Optional[ArrayLike] = None,
    ) -> Request:
        """Non-blocking :meth:`scatter`."""
        return self._scatter(x, root, count, out, False)

    def _gather(
        self, x: ArrayLike, root: int, count: Optional[int], out: Optional[ArrayLike], blocking: bool
    ) -> Any:
        _root(root, self.size, "gather")
        a, p, n, t = _check(x, "gather", False)
        if count is None:
            count = n * self.size
        if n != self._n.chunk_len(count):
            raise ValueError(
                f"gather: this rank's chunk of {count} has {self._n.chunk_len(count)} elements, not {n}"
            )
        if self.rank == root:
            o = np.empty(count, dtype=a.dtype) if out is None else out
            o, q, m, _ = _check(o, "gather out", True, t)
            if m != count:
                raise ValueError(f"gather: out must have count = {count} elements on the root, not {m}")
            _distinct(a, o, "gather")
            result: Optional[np.ndarray] = o
        else:
            o, q, m, result = a[:0], 0, 0, None
        return self._go(blocking, result, (a, o), _Call(_CALL["gather"], t, (p, n), (q, m), root=root, count=count))

    def gather(
        self,
        x: ArrayLike,
        root: int = 0,
        count: Optional[int] = None,
        out: Optional[ArrayLike] = None,
    ) -> Optional[np.ndarray]:
        """The inverse of :meth:`scatter`: rank ``i`` passes chunk ``i`` of ``count`` elements
        (default ``x.size * size``); ``root`` gets them all in rank order (a 1-D array, or
        ``out``), the others None."""
        return self._gather(x, root, count, out, True)

    def gather_async(
        self,
        x: ArrayLike,
        root: int = 0,
        count: Optional[int] = None,
        out: Optional[ArrayLike] = None,
    ) -> Request:
        """Non-blocking :meth:`gather`."""
        return self._gather(x, root, count, out, False)

    def _all_to_all(self, x: ArrayLike, out: Optional[ArrayLike], blocking: bool) -> Any:
        a, p, n, t = _check(x, "all_to_all", False)
        want = self.size * self._n.chunk_len(n)
        o = np.empty(want, dtype=a.dtype) if out is None else out
        o, q, m, _ = _check(o, "all_to_all out", True, t)
        if m != want:
            raise ValueError(f"all_to_all: out must have size x this rank's chunk = {want} elements, not {m}")
        _distinct(a, o, "all_to_all")
        return self._go(blocking, o, (a, o), _Call(_CALL["all_to_all"], t, (p, n), (q, m)))

    def all_to_all(self, x: ArrayLike, out: Optional[ArrayLike] = None) -> np.ndarray:
        """Chunk ``j`` of this rank's ``x`` (an even split into ``size`` chunks) goes to rank
        ``j``; returns the chunks this rank receives, in rank order (``size`` x this rank's chunk
        length, 1-D, or ``out``). All ranks pass the same size."""
        return self._all_to_all(x, out, True)

    def all_to_all_async(self, x: ArrayLike, out: Optional[ArrayLike] = None) -> Request:
        """Non-blocking :meth:`all_to_all`."""
        return self._all_to_all(x, out, False)

    def barrier(self) -> None:
        """Returns once every rank has called it."""
        self._n.run(_BARRIER_CALL)

    def barrier_async(self) -> Request:
        """Non-blocking :meth:`barrier`."""
        return self._go(False, None, None, _BARRIER_CALL)

    def _send(self, x: ArrayLike, dst: int, blocking: bool) -> Any:
        a, p, n, t = _check(x, "send", False)
        _peer(dst, self, "send")
        return self._go(blocking, None, a, _Call(_CALL["send"], t, (p, n), root=dst))

    def send(self, x: ArrayLike, dst: int) -> None:
        """Sends ``x`` to rank ``dst``, which calls :meth:`recv` with an array of the same size and
        dtype. Messages between two ranks arrive in order. Returns once the transport has it."""
        self._send(x, dst, True)

    def send_async(self, x: ArrayLike, dst: int) -> Request:
        """Non-blocking :meth:`send`."""
        return self._send(x, dst, False)

    def _recv(self, x: ArrayLike, src: int, blocking: bool) -> Any:
        a, p, n, t = _check(x, "recv", True)
        _peer(src, self, "recv")
        return self._go(blocking, a, a, _Call(_CALL["recv"], t, (p, n), root=src))

    def recv(self, x: ArrayLike, src: int) -> np.ndarray:
        """Receives into ``x`` the next message rank ``src`` sent to this rank. Returns ``x``."""
        return self._recv(x, src, True)

    def recv_async(self, x: ArrayLike, src: int) -> Request:
        """Non-blocking :meth:`recv`."""
        return self._recv(x, src, False)


def _peer(peer: int, g: Group, what: str) -> None:
    if not 0 <= peer < g.size or peer == g.rank:
        raise ValueError(f"{what}: {peer} is not another rank of this group of {g.size} (this is rank {g.rank})")


def init(reduce_order: Optional[str] = None) -> Group:
    """Joins the job this process belongs to, as ``psyne::init`` does in Rust: under psyrun through
    ``PSY_STORE`` and friends; under torchrun or any launcher that sets ``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR`` and ``MASTER_PORT``, with rank 0 serving the store; alone, as a world of one.
    Call it once per process (each call forms a new world group). Ctrl-C while it waits for the
    other ranks raises ``KeyboardInterrupt`` at once. ``reduce_order`` (``"fast"`` or
    ``"canonical"``, see :meth:`Group.with_reduce_order`) overrides ``PSY_REDUCE_ORDER``."""
    if reduce_order is not None:
        _native.check_reduce_order(reduce_order)  # refused before joining the job
    g = Group(_native.init())
    return g if reduce_order is None else g.with_reduce_order(reduce_order)


def alone() -> Group:
    """A world of one: every collective is a local no-op or copy."""
    return Group(_native.alone())


def init_from_store(
    store: Any,
    rank: int,
    size: int,
    *,
    prefix: str,
    secret: str,
    job_id: str,
    bind_ip: str = "127.0.0.1",
) -> Group:
    """Forms a group through a key-value store of your own: ``store`` has ``set(key: str, value:
    bytes)``, ``get(key: str, timeout: float) -> bytes`` (waiting for the key; raising
    ``TimeoutError`` when the time is up) and ``add(key: str, delta: int) -> int``. Every rank
    passes the same ``prefix`` (unique per group formed on that store), ``size``, ``secret`` (hex;
    see :func:`generate_secret`) and ``job_id`` (names shared-memory segments); ``bind_ip`` is the
    address this rank listens on and advertises. :mod:`psyne.torch` forms its groups this way
    through the store torch hands it."""
    return Group(_native.init_from_store(store, rank, size, prefix, secret, job_id, bind_ip))


def generate_secret() -> str:
    """A new random job secret, hex, for :func:`init_from_store`."""
    return _native.generate_secret()

from . import elastic  # noqa: E402  (after Group: elastic's State wraps it)
