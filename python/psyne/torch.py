"""A ``torch.distributed`` backend over psyne, in Python over psyne's native module.

>>> import psyne.torch                      # registers the backend "psyne"
>>> dist.init_process_group("psyne")        # was "gloo": under psyrun, torchrun or any env://
>>> model = DDP(model)                      # gradients now all-reduced by psyne

Importing this module registers the backend (``torch.distributed.Backend.register_backend``).
``init_process_group("psyne")`` (and ``new_group(..., backend="psyne")``) calls
:func:`create_process_group` with the store torch made for the group, which forms a psyne group
through that store: rank 0 draws a job secret and id and publishes them there (torch's store is
the trust root, as it is for Gloo), every rank publishes the address psyne listens on, and the
ranks connect to each other (shared memory on one host, else TCP). So it works wherever Gloo
works: psyrun (which sets ``MASTER_ADDR``/``MASTER_PORT``), torchrun, or a hand-made ``env://``.

Tensors are handed to psyne where they are (``data_ptr``), never copied, with the GIL released:
CPU, strided, contiguous tensors of float32, float64, float16, bfloat16, int8, int16, int32,
int64, uint8, uint16, uint32, uint64. Anything else (GPU, sparse, non-contiguous, complex, bool)
raises ``TypeError``/``ValueError`` before any rank sends anything. The list forms of all_gather,
gather, scatter, reduce_scatter and all_to_all copy between the list and one contiguous buffer
(as every backend must, unless the list's tensors already lie back to back in memory, which is
used as is); the tensor forms (``all_gather_into_tensor``, ``reduce_scatter_tensor``,
``all_to_all_single``) are zero-copy.

Blocking calls (``async_op=False``, the default of ``dist.all_reduce`` and the others) run on the
calling thread, GIL released, and return a finished ``Work``: as fast as a call can be (the blocking ``all_reduce``'s checks and
call are C++, built on first import: :mod:`psyne._torch_hot`, ``PSY_TORCH_HOT``). Every
other call (``async_op=True``, ``isend``/``irecv``, and the calls torch makes from C++, such as
DDP's and FSDP2's) returns at once: it is issued to psyne's worker thread of the group, which
runs the group's calls in issue order on the caller's tensors (kept alive until the call ends),
and one completer thread per process group completes the ``Work``'s Future as each call ends,
whether or not anyone calls ``wait()`` (see :mod:`psyne._torch_work`). So DDP overlaps its
gradient all-reduces with the backward pass. A failed call (a peer lost, a timeout, ranks that
called different collectives) raises psyne's exception (``psyne.MismatchError``, ...: who, which
call, which peer) from ``wait()`` and from the Future, and ``exception()`` returns it. As with
psyne's own API, one Python thread at a time issues calls on a group (a call from a second thread
while calls are in flight raises ``psyne.UsageError``, since ranks pair calls by their order):
so a Future callback (which runs on the completer thread) must not issue collectives on the group.

Reduce ops: SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR, and PREMUL_SUM (as SUM,
then the reduced output multiplied by the factor: exact for powers of two, else within a rounding
of multiplying every input first).

Deterministic sums: while ``torch.use_deterministic_algorithms(True)`` is on (checked per call),
calls run in psyne's canonical reduction order: every sum is the rank-order fold, bit for bit the
same whatever the size, algorithm or transport (``PSY_REDUCE_ORDER=canonical`` does it always).

Shared memory: :func:`empty_shared` makes a tensor in psyne's shared buffers, which
``dist.all_reduce`` reduces with psyne's ``all_reduce_shared`` (no copy through any transport);
:func:`shared_allreduce_hook` (state :class:`SharedBuckets`) is a DDP communication hook that
averages gradient buckets through such buffers, and with ``gradient_as_bucket_view=True`` moves
DDP's buckets into them (no copy from the second step: see :mod:`psyne._torch_shared`).

FSDP2 and DeviceMesh: the group keeps the name and description torch gives it
(``group_name``, which DeviceMesh and the functional collectives look groups up by), and has the
forms FSDP2 calls: ``all_gather_into_tensor`` (in place too, the input a view of the output's
chunk: that chunk is copied first, as psyne takes input and output apart),
``reduce_scatter_tensor``, their ``*_coalesced`` forms (``_coalescing_manager``) and torch 2.15's
``*_single`` names. ``all_to_all_single`` with uneven split sizes pads every chunk to the largest
of any rank (found by one blocking 8-byte MAX all-reduce, which first waits for the calls issued
before) and runs one even all-to-all: the padding costs copies and bandwidth when the splits
differ a lot.
"""

from __future__ import annotations

import datetime
import os
import socket
from functools import partial
from types import MethodType
from typing import Any, Callable, List, Optional

import torch
import torch.distributed as dist

import psyne
from psyne import _native, _torch_hot, _torch_shared, _torch_work
from psyne._torch_shared import SharedBuckets, shared_allreduce_hook

__all__ = [
    "ProcessGroupPsyne",
    "create_process_group",
    "empty_shared",
    "SharedBuckets",
    "shared_allreduce_hook",
    "BACKEND",
]

#: The backend's name, for ``init_process_group``.
BACKEND = "psyne"

_CALL = dict(_native.CALLS)  # a call's name -> its code in python/src/lib.rs's table
_Call = _native.Call  # Call(code, dtype, a=(addr, len), b=(addr, len), op=sum, root=0, count=0)
_ALL_REDUCE = _CALL["all_reduce"]

_TAG = dict(_native.DTYPE_TAGS)
_DTYPES = {
    torch.float32: _TAG["f32"],
    torch.float64: _TAG["f64"],
    torch.float16: _TAG["f16"],
    torch.bfloat16: _TAG["bf16"],
    torch.int8: _TAG["i8"],
    torch.int16: _TAG["i16"],
    torch.int32: _TAG["i32"],
    torch.int64: _TAG["i64"],
    torch.uint8: _TAG["u8"],
}
for _name, _psy in (("uint16", "u16"), ("uint32", "u32"), ("uint64", "u64")):
    if hasattr(torch, _name):  # torch >= 2.3
        _DTYPES[getattr(torch, _name)] = _TAG[_psy]

_OPS = dict(_native.OP_TAGS)
_RO = dist.ReduceOp
_RO_SUM = _RO.SUM
# By the value of ReduceOp.RedOpType: comparing ReduceOp objects is slow, their enum's int is not.
_REDUCE_OPS = {
    int(_RO.RedOpType.SUM): _OPS["sum"],
    int(_RO.RedOpType.PRODUCT): _OPS["prod"],
    int(_RO.RedOpType.MIN): _OPS["min"],
    int(_RO.RedOpType.MAX): _OPS["max"],
    int(_RO.RedOpType.BAND): _OPS["band"],
    int(_RO.RedOpType.BOR): _OPS["bor"],
    int(_RO.RedOpType.BXOR): _OPS["bxor"],
    int(_RO.RedOpType.AVG): _OPS["avg"],
}
_SUM = _OPS["sum"]
_CPU = torch.device("cpu")
_STRIDED = torch.strided


_PREMUL_SUM = int(_RO.RedOpType.PREMUL_SUM)


def _op(opts: Any) -> int:
    """psyne's op tag for ``opts.reduceOp`` (PREMUL_SUM: SUM, its factor applied by
    :func:`_premul`)."""
    op = opts.reduceOp
    if op == _RO_SUM:  # the common case, first
        return _SUM
    kind = int(op.op)
    tag = _REDUCE_OPS.get(kind)
    if tag is None:
        if kind == _PREMUL_SUM:
            return _SUM
        raise ValueError(
            f"psyne: reduce op {op.op} is not supported (SUM, PRODUCT, MIN, MAX, AVG, PREMUL_SUM, BAND, BOR, BXOR)"
        )
    return tag


def _op_factor(opts: Any) -> tuple:
    """(op tag, PREMUL_SUM's factor or None) of ``opts.reduceOp``."""
    if opts.reduceOp == _RO_SUM:  # the common case, first
        return _SUM, None
    return _op(opts), _premul(opts)


def _premul(opts: Any) -> Any:
    """The factor of a PREMUL_SUM (a number or a one-element tensor), else None."""
    if opts is None:
        return None
    op = opts.reduceOp
    if op == _RO_SUM or int(op.op) != _PREMUL_SUM:
        return None
    factor = op.factor
    if isinstance(factor, torch.Tensor):
        factor = factor.to(_CPU)
    return factor


def _scale(ts: List[torch.Tensor], factor: Any) -> None:
    """PREMUL_SUM's factor, applied to the sums (``sum(f * x_i)`` as ``f * sum(x_i)``: the
    reduced output is 1/size of the input for a reduce-scatter, so scaling it is the cheaper
    side; exact when the factor is a power of two, else within a rounding of NCCL's order)."""
    if factor is not None:
        for t in ts:
            t.mul_(factor)


def _buf(t: torch.Tensor, what: str) -> tuple:
    """(address, element count, dtype tag) of a tensor psyne may use in place."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"psyne {what}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device != _CPU:
        raise TypeError(f"psyne {what}: the tensor is on {t.device}; the psyne backend takes CPU tensors")
    if t.layout != torch.strided:
        raise TypeError(f"psyne {what}: {t.layout} tensors are not supported; pass a dense (strided) tensor")
    tag = _DTYPES.get(t.dtype)
    if tag is None:
        raise TypeError(f"psyne {what}: dtype {t.dtype} is not supported by psyne")
    if not t.is_contiguous():
        raise ValueError(
            f"psyne {what}: the tensor is not contiguous (strides {t.stride()}); psyne works in place "
            "and never copies silently: pass t.contiguous() and use the result"
        )
    return t.data_ptr(), t.numel(), tag


def _same(tag: int, other: int, what: str) -> None:
    if tag != other:
        raise TypeError(f"psyne {what}: the input and output tensors have different dtypes")


def _flat_view(ts: List[torch.Tensor]) -> Optional[torch.Tensor]:
    """A tensor over the memory of ``ts`` if they lie back to back (the usual case for chunks of
    one tensor), else None."""
    if not ts:
        return None
    first = ts[0]
    if not all(t.is_contiguous() and t.dtype == first.dtype and t.device == first.device for t in ts):
        return None
    addr = first.data_ptr()
    for t in ts:
        if t.data_ptr() != addr:
            return None
        addr += t.numel() * t.element_size()
    total = sum(t.numel() for t in ts)
    base = first.untyped_storage()
    start = first.storage_offset()
    if start + total > base.nbytes() // first.element_size():
        return None
    return torch.empty(0, dtype=first.dtype).set_(base, start, (total,))


def _joined(ts: List[torch.Tensor]) -> torch.Tensor:
    """One tensor holding ``ts`` back to back: their own memory if they already lie so, else a
    copy."""
    flat = _flat_view(ts)
    return flat if flat is not None else torch.cat([t.reshape(-1) for t in ts])


def _apart(inp: torch.Tensor, out: torch.Tensor, scratch: Optional[Callable[[torch.Tensor], torch.Tensor]] = None) -> torch.Tensor:
    """``inp``, or a copy of it if its memory overlaps ``out``'s: an in-place all-gather (the input
    a view of this rank's chunk of the output, as FSDP2 passes it, and NCCL allows) is not
    psyne's to receive, which takes input and output apart. The copy is one chunk, made by
    ``scratch`` if given (the group's reused scratch memory, for a blocking call), else a new
    tensor."""
    a, b = inp.data_ptr(), out.data_ptr()
    if a < b + out.numel() * out.element_size() and b < a + inp.numel() * inp.element_size():
        return scratch(inp) if scratch is not None else inp.clone()
    return inp


def _offsets(counts: List[int]) -> List[int]:
    """Where each of ``counts`` starts when laid back to back."""
    out, at = [], 0
    for c in counts:
        out.append(at)
        at += c
    return out


def _unpad(got: torch.Tensor, chunk: int, out: torch.Tensor, counts: List[int]) -> None:
    """Copies the first ``counts[j]`` elements of each ``chunk``-long block of ``got`` into ``out``,
    back to back."""
    for j, off in enumerate(_offsets(counts)):
        out[off : off + counts[j]].copy_(got[j * chunk : j * chunk + counts[j]])


def _split_into(flat: torch.Tensor, outs: List[torch.Tensor]) -> None:
    """Copies the equal chunks of ``flat`` into ``outs``."""
    for o, chunk in zip(outs, flat.chunk(len(outs))):
        o.view(-1).copy_(chunk)


class _Plan:
    """What one torch call becomes: psyne calls in issue order, the tensors they use (kept alive
    until the calls end), the steps that follow them on the Python side, and the Work's
    result."""

    __slots__ = ("what", "calls", "keep", "afters", "result")

    def __init__(self, what: str, result: Any) -> None:
        self.what = what
        self.calls: List[Any] = []
        self.keep: List[torch.Tensor] = []
        self.afters: List[Callable[[], None]] = []
        self.result = result

    def add(self, call: Any, *tensors: torch.Tensor) -> None:
        self.calls.append(call)
        self.keep.extend(tensors)

    def then(self, step: Callable[[], None]) -> None:
        self.afters.append(step)

    def finish(self) -> None:
        for step in self.afters:
            step()


_deterministic = torch.are_deterministic_algorithms_enabled
_HOT = _torch_hot.load()  # the C++ half of the blocking all_reduce, or None (PSY_TORCH_HOT)
_Done = _torch_work.Done
_SYNC_DONE = _Done([])


class ProcessGroupPsyne(dist.ProcessGroup):
    """A torch ``ProcessGroup`` whose collectives are psyne's (see the module's docstring)."""

    def __init__(self, group: psyne.Group) -> None:
        super().__init__(group.rank, group.size)
        self._group = group
        self._n = group._n
        # The same group in canonical reduction order (the same call queue): every call while
        # torch.use_deterministic_algorithms(True) is on runs on it (see _native_for_call).
        self._canonical = group._n.with_reduce_order("canonical")
        self._name = ""
        self._desc = ""
        self._completer = _torch_work.Completer("psyne-torch-completer", self._n.timeout)
        self._shared = _torch_shared.Registry()  # the buffers of empty_shared on this group
        self._any_shared = self._shared.bufs  # its dict: an empty one is a cheap test on the hot path
        self._scratch = torch.empty(0, dtype=torch.uint8)  # see _scratch_copy
        if _HOT is not None:
            # dist.all_reduce calls the instance's attribute: the C++ half, which runs the
            # blocking calls of dense CPU tensors itself and passes every other to the method.
            self.allreduce = _HOT.Hot(
                self._n, self._canonical, MethodType(type(self).allreduce, self), _SYNC_DONE,
                self._any_shared, _DTYPES, _REDUCE_OPS,
            )  # fmt: skip

    # torch asks these
    def getBackendName(self) -> str:
        return BACKEND

    # The group's name and description: torch's ProcessGroup keeps them in its backends, which a
    # Python group has none of; init_process_group/new_group set them (``_set_group_name``), and
    # DeviceMesh, FSDP2 and the functional collectives look groups up by ``group_name``.
    def setGroupName(self, name: str) -> None:
        self._name = name

    def getGroupName(self) -> str:
        return self._name

    def setGroupDesc(self, desc: str) -> None:
        self._desc = desc

    def getGroupDesc(self) -> str:
        return self._desc

    def shutdown(self) -> None:
        """What ``destroy_process_group`` calls: ends the completer thread once the works issued
        before have completed."""
        self._completer.stop()

    @property
    def psyne_group(self) -> psyne.Group:
        """The psyne group underneath (NumPy API)."""
        return self._group

    def _root(self, root: int, what: str) -> int:
        if not 0 <= root < self.size():
            raise ValueError(f"psyne {what}: root {root} is not a rank of this group of {self.size()}")
        return root

    def _native_for_call(self) -> Any:
        """The native group a call runs on: in canonical reduction order (sums bit for bit the
        same whatever the algorithm, size or transport) while torch's deterministic mode is on,
        checked per call since users switch it on after ``init_process_group``; else the group
        as formed (``PSY_REDUCE_ORDER``'s order)."""
        return self._canonical if _deterministic() else self._n

    def _go(self, plan: _Plan, opts: Any) -> dist.Work:
        """Runs ``plan``: at once on this thread when ``opts`` asks for a blocking call, else
        issued to psyne's worker, returning a pending Work (see :mod:`psyne._torch_work`)."""
        n = self._native_for_call()
        if opts is not None and not opts.asyncOp:
            for call in plan.calls:
                n.run(call) if type(call) is _Call else call.run(n)
            plan.finish()
            return _Done(plan.result)
        keep = plan.keep
        natives = [n.submit(call, keep) if type(call) is _Call else call.submit(n, keep) for call in plan.calls]
        work = _torch_work.Pending(plan.what, natives, plan.result, plan.finish if plan.afters else None)
        self._completer.add(work)
        return work

    # -- collectives -----------------------------------------------------------------------------

    def allreduce(self, tensors: List[torch.Tensor], opts: Any = None) -> dist.Work:
        if opts is not None and not opts.asyncOp:
            # The hot path (every blocking all_reduce): _op_factor, _native_for_call and the
            # checks of _buf inlined, no plan (each Python call costs ~0.1 us of an 8-byte
            # all_reduce's ~4: results/torch-ddp/).
            if opts.reduceOp == _RO_SUM:
                op, factor = _SUM, None
            else:
                op, factor = _op(opts), _premul(opts)
            n = self._canonical if _deterministic() else self._n
            run = n.run_all_reduce
            for t in tensors:  # all checked before the first is reduced: refused whole
                if _DTYPES.get(t.dtype) is None or not t.is_cpu or t.layout is not _STRIDED or not t.is_contiguous():
                    _buf(t, "all_reduce")  # raises the precise error
            for t in tensors:
                tag = _DTYPES[t.dtype]
                if self._any_shared:  # tensors of empty_shared: all_reduce_shared
                    shared = self._shared.find(t)
                    if shared is not None:
                        _torch_shared.SharedCall(shared, op).run(n)
                        continue
                run(tag, t.data_ptr(), t.numel(), op)
            if factor is not None:
                _scale(tensors, factor)
            return _SYNC_DONE  # dist.all_reduce(async_op=False) only waits on it: one shared Work
        op, factor = (_SUM, None) if opts is None else _op_factor(opts)
        plan = _Plan("all_reduce", tensors)
        for t in tensors:
            a, n, tag = _buf(t, "all_reduce")
            shared = self._shared.find(t) if self._any_shared else None
            if shared is not None:
                plan.add(_torch_shared.SharedCall(shared, op), t)
            else:
                plan.add(_Call(_ALL_REDUCE, tag, (a, n), (0, 0), op), t)
        if factor is not None:
            plan.then(partial(_scale, tensors, factor))
        return self._go(plan, opts)

    def allreduce_coalesced(self, tensors: List[torch.Tensor], opts: Any = None) -> dist.Work:
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors: List[torch.Tensor], opts: Any) -> dist.Work:
        root = self._root(opts.rootRank, "broadcast")
        plan = _Plan("broadcast", tensors)
        for t in tensors:
            a, n, tag = _buf(t, "broadcast")
            plan.add(_Call(_CALL["broadcast"], tag, (a, n), root=root), t)
        return self._go(plan, opts)

    def reduce(self, tensors: List[torch.Tensor], opts: Any) -> dist.Work:
        root = self._root(opts.rootRank, "reduce")
        op = _op(opts)
        plan = _Plan("reduce", tensors)
        for t in tensors:
            a, n, tag = _buf(t, "reduce")
            plan.add(_Call(_CALL["reduce"], tag, (a, n), op=op, root=root), t)
        if self.rank() == root:
            plan.then(partial(_scale, tensors, _premul(opts)))
        return self._go(plan, opts)

    def _scratch_copy(self, t: torch.Tensor) -> torch.Tensor:
        """A copy of ``t`` in the group's scratch memory, grown to the largest copy asked and
        reused by the next one (so only for blocking calls: the copy must not outlive the call).
        A new tensor per call costs more than the copy: at 8 MiB and up its fresh pages fault in
        (FSDP2's in-place all-gathers took 2x their time with ``clone()``: results/torch-fsdp/)."""
        nbytes = t.numel() * t.element_size()
        if self._scratch.numel() < nbytes:
            self._scratch = torch.empty(nbytes, dtype=torch.uint8)
        return self._scratch[:nbytes].view(t.dtype).view(t.shape).copy_(t)

    def _all_gather_into(self, plan: _Plan, out: torch.Tensor, inp: torch.Tensor, scratch: Any = None) -> None:
        inp = _apart(inp, out, scratch)
        a, n, tag = _buf(inp, "all_gather")
        b, m, otag = _buf(out, "all_gather output")
        _same(tag, otag, "all_gather")
        if m != n * self.size():
            raise ValueError(f"psyne all_gather: the output has {m} elements, not size x input = {n * self.size()}")
        plan.add(_Call(_CALL["all_gather"], tag, (a, n), (b, m)), inp, out)

    def allgather(
        self, output_tensors: List[List[torch.Tensor]], input_tensors: List[torch.Tensor], opts: Any = None
    ) -> dist.Work:
        plan = _Plan("all_gather", output_tensors)
        for outs, inp in zip(output_tensors, input_tensors):
            if len(outs) != self.size():
                raise ValueError(f"psyne all_gather: {len(outs)} output tensors for a group of {self.size()}")
            flat = _flat_view(outs)
            if flat is not None:
                self._all_gather_into(plan, flat, inp)
            else:
                tmp = torch.empty(inp.numel() * self.size(), dtype=inp.dtype)
                self._all_gather_into(plan, tmp, inp)
                plan.then(partial(_split_into, tmp, outs))
        return self._go(plan, opts)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> dist.Work:
        plan = _Plan("all_gather_into_tensor", [output])
        blocking = opts is not None and not opts.asyncOp
        self._all_gather_into(plan, output, input, self._scratch_copy if blocking else None)
        return self._go(plan, opts)

    def all_gather_single_coalesced(
        self, outputs: List[torch.Tensor], inputs: List[torch.Tensor], opts: Any = None
    ) -> dist.Work:
        plan = _Plan("all_gather_into_tensor (coalesced)", outputs)
        for o, i in zip(outputs, inputs):
            self._all_gather_into(plan, o, i)
        return self._go(plan, opts)

    def allgather_coalesced(
        self, output_lists: List[List[torch.Tensor]], inputs: List[torch.Tensor], opts: Any = None
    ) -> dist.Work:
        return self.allgather(output_lists, inputs, opts)

    def _reduce_scatter_into(self, plan: _Plan, out: torch.Tensor, inp: torch.Tensor, op: int) -> None:
        inp = _apart(inp, out)
        a, n, tag = _buf(inp, "reduce_scatter")
        b, m, otag = _buf(out, "reduce_scatter output")
        _same(tag, otag, "reduce_scatter")
        if n != m * self.size():
            raise ValueError(f"psyne reduce_scatter: the input has {n} elements, not size x output = {m * self.size()}")
        plan.add(_Call(_CALL["reduce_scatter"], tag, (a, n), (b, m), op), inp, out)

    def reduce_scatter(
        self, output_tensors: List[torch.Tensor], input_tensors: List[List[torch.Tensor]], opts: Any
    ) -> dist.Work:
        op = _op(opts)
        plan = _Plan("reduce_scatter", output_tensors)
        for out, ins in zip(output_tensors, input_tensors):
            if len(ins) != self.size():
                raise ValueError(f"psyne reduce_scatter: {len(ins)} input tensors for a group of {self.size()}")
            self._reduce_scatter_into(plan, out, _joined(ins), op)
        plan.then(partial(_scale, output_tensors, _premul(opts)))
        return self._go(plan, opts)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> dist.Work:
        return self.reduce_scatter_single_coalesced([output], [input], opts)

    def reduce_scatter_single_coalesced(
        self, outputs: List[torch.Tensor], inputs: List[torch.Tensor], opts: Any
    ) -> dist.Work:
        op = _op(opts)
        plan = _Plan("reduce_scatter_tensor", outputs)
        for o, i in zip(outputs, inputs):
            self._reduce_scatter_into(plan, o, i, op)
        factor = _premul(opts)
        if factor is not None:
            plan.then(partial(_scale, outputs, factor))
        return self._go(plan, opts)

    def all_to_all_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: List[int],
        input_split_sizes: List[int],
        opts: Any = None,
    ) -> dist.Work:
        plan = _Plan("all_to_all_single", [output])
        if len(set(input_split_sizes)) > 1 or len(set(output_split_sizes)) > 1:
            self._all_to_all_uneven(plan, output, input, list(output_split_sizes), list(input_split_sizes))
            return self._go(plan, opts)
        size = self.size()
        for t, what in ((input, "input"), (output, "output")):
            if t.numel() % size:
                raise ValueError(f"psyne all_to_all_single: the {what} ({t.numel()} elements) does not split evenly over {size} ranks")
        a, n, tag = _buf(input, "all_to_all")
        b, m, otag = _buf(output, "all_to_all output")
        _same(tag, otag, "all_to_all")
        if m != n:
            raise ValueError(f"psyne all_to_all_single: input ({n}) and output ({m}) sizes differ")
        plan.add(_Call(_CALL["all_to_all"], tag, (a, n), (b, m)), input, output)
        return self._go(plan, opts)

    def _split_rows(self, t: torch.Tensor, splits: List[int], what: str) -> int:
        """Checks (or fills, if empty) ``splits``, rows of ``t`` per rank; the elements of a row."""
        size = self.size()
        if not splits and t.dim():
            splits[:] = [t.shape[0] // size] * size
        if t.dim() == 0 or len(splits) != size or sum(splits) != t.shape[0]:
            raise ValueError(
                f"psyne all_to_all_single: {what} split sizes {splits} do not split the {what}'s "
                f"first dimension ({tuple(t.shape)}) over {size} ranks"
            )
        return t.numel() // t.shape[0] if t.shape[0] else 0

    def _all_to_all_uneven(
        self, plan: _Plan, output: torch.Tensor, input: torch.Tensor, out_splits: List[int], in_splits: List[int]
    ) -> None:
        """all_to_all_single with split sizes (rows of dim 0, as MoE layers pass): the chunks padded
        to the largest chunk of any rank (one blocking 8-byte MAX all-reduce finds it, after the
        calls issued before), one even all_to_all, the chunks copied out."""
        size = self.size()
        _, _, tag = _buf(input, "all_to_all_single")
        _same(tag, _buf(output, "all_to_all_single output")[2], "all_to_all_single")
        rows = self._split_rows(input, in_splits, "input"), self._split_rows(output, out_splits, "output")
        if all(rows) and rows[0] != rows[1]:
            raise ValueError(f"psyne all_to_all_single: input rows of {rows[0]} and output rows of {rows[1]} elements differ")
        row = rows[0] or rows[1]
        ins, outs = [s * row for s in in_splits], [s * row for s in out_splits]
        most = torch.tensor([max(ins + outs)], dtype=torch.int64)
        self._n.run(_Call(_ALL_REDUCE, _TAG["i64"], (most.data_ptr(), 1), op=_OPS["max"]))
        chunk = int(most)
        padded = torch.empty(2 * size * chunk, dtype=input.dtype)
        send, got = padded[: size * chunk], padded[size * chunk :]
        flat_in = input.view(-1)
        for j, off in enumerate(_offsets(ins)):
            send[j * chunk : j * chunk + ins[j]].copy_(flat_in[off : off + ins[j]])
        plan.add(_Call(_CALL["all_to_all"], tag, (send.data_ptr(), send.numel()), (got.data_ptr(), got.numel())), padded)
        plan.then(partial(_unpad, got, chunk, output.view(-1), outs))

    def alltoall(
        self, output_tensors: List[torch.Tensor], input_tensors: List[torch.Tensor], opts: Any = None
    ) -> dist.Work:
        size = self.size()
        if len(input_tensors) != size or len(output_tensors) != size:
            raise ValueError(f"psyne all_to_all: pass {size} input and {size} output tensors")
        sizes = {t.numel() for t in input_tensors} | {t.numel() for t in output_tensors}
        if len(sizes) > 1:
            raise ValueError("psyne all_to_all: tensors of different sizes are not supported")
        plan = _Plan("all_to_all", output_tensors)
        inp = _joined(input_tensors)
        out = _flat_view(output_tensors)
        if out is None:
            out = torch.empty(inp.numel(), dtype=inp.dtype)
            plan.then(partial(_split_into, out, output_tensors))
        a, n, tag = _buf(inp, "all_to_all")
        b, m, otag = _buf(out, "all_to_all output")
        _same(tag, otag, "all_to_all")
        plan.add(_Call(_CALL["all_to_all"], tag, (a, n), (b, m)), inp, out)
        return self._go(plan, opts)

    def _gather_into(self, plan: _Plan, out: Optional[torch.Tensor], inp: torch.Tensor, root: int) -> None:
        """Gathers ``inp`` of every rank into ``out`` on the root (None elsewhere)."""
        a, n, tag = _buf(inp, "gather")
        count = n * self.size()
        if self.rank() != root:
            plan.add(_Call(_CALL["gather"], tag, (a, n), root=root, count=count), inp)
            return
        b, m, otag = _buf(out, "gather output")
        _same(tag, otag, "gather")
        if m != count:
            raise ValueError(f"psyne gather: the output holds {m} elements, not size x input = {count}")
        plan.add(_Call(_CALL["gather"], tag, (a, n), (b, m), root=root, count=count), inp, out)

    def gather(
        self, output_tensors: List[List[torch.Tensor]], input_tensors: List[torch.Tensor], opts: Any
    ) -> dist.Work:
        root = self._root(opts.rootRank, "gather")
        size = self.size()
        plan = _Plan("gather", output_tensors)
        for i, inp in enumerate(input_tensors):
            if self.rank() != root:
                self._gather_into(plan, None, inp, root)
                continue
            outs = output_tensors[i]
            if len(outs) != size:
                raise ValueError(f"psyne gather: {len(outs)} output tensors on the root for a group of {size}")
            out = _flat_view(outs)
            if out is None:
                out = torch.empty(inp.numel() * size, dtype=inp.dtype)
                plan.then(partial(_split_into, out, outs))
            self._gather_into(plan, out, inp, root)
        return self._go(plan, opts)

    def gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> dist.Work:
        root = self._root(opts.rootRank, "gather")
        plan = _Plan("gather", [output])
        self._gather_into(plan, output if self.rank() == root else None, input, root)
        return self._go(plan, opts)

    def scatter(
        self, output_tensors: List[torch.Tensor], input_tensors: List[List[torch.Tensor]], opts: Any
    ) -> dist.Work:
        root = self._root(opts.rootRank, "scatter")
        size = self.size()
        plan = _Plan("scatter", output_tensors)
        for i, out in enumerate(output_tensors):
            b, m, tag = _buf(out, "scatter output")
            count = m * size
            if self.rank() != root:
                plan.add(_Call(_CALL["scatter"], tag, (0, 0), (b, m), root=root, count=count), out)
                continue
            ins = input_tensors[i]
            if len(ins) != size:
                raise ValueError(f"psyne scatter: {len(ins)} input tensors on the root for a group of {size}")
            flat = _joined(ins)
            a, n, itag = _buf(flat, "scatter")
            _same(tag, itag, "scatter")
            if n != count:
                raise ValueError(f"psyne scatter: the inputs hold {n} elements, not size x output = {count}")
            plan.add(_Call(_CALL["scatter"], tag, (a, n), (b, m), root=root, count=count), flat, out)
        return self._go(plan, opts)

    # The older names torch < 2.15 calls (2.15 calls the *_single ones above).
    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> dist.Work:
        return self.all_gather_single(output, input, opts)

    def allgather_into_tensor_coalesced(
        self, outputs: List[torch.Tensor], inputs: List[torch.Tensor], opts: Any = None
    ) -> dist.Work:
        return self.all_gather_single_coalesced(outputs, inputs, opts)

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> dist.Work:
        return self.reduce_scatter_single(output, input, opts)

    def reduce_scatter_tensor_coalesced(
        self, outputs: List[torch.Tensor], inputs: List[torch.Tensor], opts: Any
    ) -> dist.Work:
        return self.reduce_scatter_single_coalesced(outputs, inputs, opts)

    def alltoall_base(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: List[int],
        input_split_sizes: List[int],
        opts: Any = None,
    ) -> dist.Work:
        return self.all_to_all_single(output, input, output_split_sizes, input_split_sizes, opts)

    def gather_into_tensor(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> dist.Work:
        return self.gather_single(output, input, opts)

    def barrier(self, opts: Any = None) -> dist.Work:
        plan = _Plan("barrier", [])
        plan.add(_Call(_CALL["barrier"], _TAG["u8"]))
        return self._go(plan, opts)

    def _peer(self, peer: int, what: str) -> int:
        if not 0 <= peer < self.size() or peer == self.rank():
            raise ValueError(f"psyne {what}: {peer} is not another rank of this group of {self.size()}")
        return peer

    def send(self, tensors: List[torch.Tensor], dstRank: int, tag: int = 0) -> dist.Work:
        dst = self._peer(dstRank, "send")
        plan = _Plan("send", tensors)
        for t in tensors:
            a, n, dt = _buf(t, "send")
            plan.add(_Call(_CALL["send"], dt, (a, n), root=dst), t)
        return self._go(plan, None)

    def recv(self, tensors: List[torch.Tensor], srcRank: int, tag: int = 0) -> dist.Work:
        src = self._peer(srcRank, "recv")
        plan = _Plan("recv", tensors)
        for t in tensors:
            a, n, dt = _buf(t, "recv")
            plan.add(_Call(_CALL["recv"], dt, (a, n), root=src), t)
        return self._go(plan, None)


class _StoreAdapter:
    """torch's store as the key-value store psyne forms its group through (see
    :func:`psyne.init_from_store`)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def set(self, key: str, value: bytes) -> None:
        self._store.set(key, value)

    def get(self, key: str, timeout: float) -> bytes:
        try:
            self._store.wait([key], datetime.timedelta(seconds=max(timeout, 0.001)))
        except Exception as e:  # torch raises DistStoreError (a RuntimeError) on timeout
            if "timeout" in str(e).lower() or "timed out" in str(e).lower():
                raise TimeoutError(f"waiting for {key!r} in torch's store: {e}") from e
            raise
        return bytes(self._store.get(key))

    def add(self, key: str, delta: int) -> int:
        return int(self._store.add(key, delta))

    def set_once(self, key: str, value: bytes) -> bytes:
        # compare_set with an empty expected value sets a missing key, atomically, and returns
        # what the key holds afterwards.
        return bytes(self._store.compare_set(key, b"", value))


def _bind_ip() -> str:
    """``PSY_ADDR``, else the address of this host's interface towards ``MASTER_ADDR`` (loopback
    when the master is this host or unset)."""
    addr = os.environ.get("PSY_ADDR")
    if addr:
        return addr
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    try:
        infos = socket.getaddrinfo(master, None, socket.AF_INET)
        ip = infos[0][4][0]
        if ip.startswith("127."):
            return "127.0.0.1"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((ip, 9))  # UDP: chooses a route, sends nothing
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def empty_shared(*size: Any, dtype: torch.dtype = torch.float32, group: Any = None) -> torch.Tensor:
    """A zero-filled tensor in psyne's shared memory: every rank of ``group`` (a
    psyne process group; None: the default group) on this host maps the memory of every other,
    and ``dist.all_reduce`` of the whole tensor then runs psyne's ``all_reduce_shared``: each rank
    reduces its chunk straight out of every rank's tensor, writing the result into all of them,
    with no copy through any transport (from 16 KiB; below, and where the ranks do not share a
    host, the ordinary all-reduce). A collective: every rank calls it in the same order with the
    same size and dtype. The memory is freed with the last tensor over it."""
    pg = group if group is not None else dist.group.WORLD
    if not isinstance(pg, ProcessGroupPsyne):
        raise TypeError(f"psyne empty_shared: the group is a {type(pg).__name__}, not a psyne process group")
    shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)) else tuple(size)
    tag = _DTYPES.get(dtype)
    if tag is None:
        raise TypeError(f"psyne empty_shared: dtype {dtype} is not supported by psyne")
    count = 1
    for d in shape:
        count *= int(d)
    buf = _native.alloc_shared(pg._n, tag, count)
    pg._shared.add(buf)
    return _torch_shared.tensor_of(buf, dtype, shape)


def create_process_group(store: Any, rank: int, size: int, timeout: Any = None) -> ProcessGroupPsyne:
    """What ``init_process_group("psyne")`` and ``new_group(backend="psyne")`` call: forms a psyne
    group of ``size`` ranks through ``store`` (the store torch made for this group)."""
    key = "psyne/boot"
    if rank == 0:
        store.set(key, f"{psyne.generate_secret()} torch-{os.getpid()}-{os.urandom(6).hex()}")
    adapter = _StoreAdapter(store)
    wait_s = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else 300.0
    secret, job_id = adapter.get(key, wait_s).decode().split()
    group = psyne.init_from_store(
        adapter, rank, size, prefix="psyne/group", secret=secret, job_id=job_id, bind_ip=_bind_ip()
    )
    return ProcessGroupPsyne(group)


def _register() -> None:
    if BACKEND not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND, create_process_group, devices=["cpu"])


_register()
