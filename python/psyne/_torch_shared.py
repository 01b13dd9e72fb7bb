"""Tensors in psyne's shared buffers, for the torch backend (:mod:`psyne.torch`).

:func:`psyne.torch.empty_shared` allocates a buffer with ``Group.alloc_shared`` (in memory
every rank of the group on this host maps) and wraps it as a tensor; the process group keeps a
:class:`Registry` of its buffers, so that ``dist.all_reduce`` of such a tensor (the whole
buffer) runs psyne's ``all_reduce_shared``: each rank reduces its chunk straight out of every
rank's buffer and writes the result into all of them, with no copy through any transport.
:func:`shared_allreduce_hook` is a DDP communication hook doing the same for gradient buckets;
with ``DDP(..., gradient_as_bucket_view=True)`` it moves DDP's buckets (and so the gradients)
into the shared buffers, after which a step copies nothing.
"""

import weakref
from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist

from psyne import _native


class SharedCall:
    """An all-reduce of a whole shared buffer, as a :class:`psyne.torch` plan holds it."""

    __slots__ = ("buf", "op")

    def __init__(self, buf: Any, op: int) -> None:
        self.buf = buf
        self.op = op

    def run(self, group: Any) -> None:
        _native.all_reduce_shared(group, self.buf, self.op)

    def submit(self, group: Any, keep: Any) -> Any:
        return _native.submit_all_reduce_shared(group, self.buf, self.op, keep)


class _Memory:
    """The buffer's memory as NumPy sees it (``__array_interface__``); the array, and the tensor
    made from it, keep this object and so the buffer alive."""

    def __init__(self, buf: Any, nbytes: int) -> None:
        self.buf = buf
        self.__array_interface__ = {"data": (buf.addr, False), "shape": (nbytes,), "typestr": "|u1", "version": 3}


def tensor_of(buf: Any, dtype: torch.dtype, shape: Tuple[int, ...]) -> torch.Tensor:
    """A tensor of ``dtype`` and ``shape`` over ``buf``'s memory (no copy)."""
    itemsize = torch.empty(0, dtype=dtype).element_size()
    if buf.len == 0:
        return torch.empty(shape, dtype=dtype)
    raw = torch.from_numpy(np.asarray(_Memory(buf, buf.len * itemsize)))
    return raw.view(dtype).view(shape)


class Registry:
    """A process group's shared buffers by address, held weakly (a buffer is freed with the
    last tensor over it)."""

    def __init__(self) -> None:
        #: address -> weak reference to the buffer
        self.bufs: Dict[int, "weakref.ref[Any]"] = {}

    def add(self, buf: Any) -> None:
        self.bufs[buf.addr] = weakref.ref(buf)

    def find(self, t: torch.Tensor) -> Optional[Any]:
        """The buffer that ``t`` covers exactly (its first element to its last), else None."""
        ref = self.bufs.get(t.data_ptr())
        if ref is None:
            return None
        buf = ref()
        if buf is None:
            del self.bufs[t.data_ptr()]
            return None
        return buf if buf.len == t.numel() and t.is_contiguous() else None


class SharedBuckets:
    """The state of :func:`shared_allreduce_hook`: the process group (None: the default), one
    shared buffer per DDP gradient bucket (by index, size and dtype), and how many buckets DDP
    now keeps in them (``adopted``: see the hook)."""

    def __init__(self, group: Any = None) -> None:
        self.group = group
        self.buffers: Dict[Tuple[int, int, torch.dtype], torch.Tensor] = {}
        #: buckets whose memory is now their shared buffer (zero-copy from the next step)
        self.adopted = 0


def _adopt(bucket: dist.GradBucket, grads: torch.Tensor, shared: torch.Tensor) -> bool:
    """Moves DDP's bucket into ``shared`` (which holds a copy of it), if DDP runs with
    ``gradient_as_bucket_view=True``: then every parameter's ``.grad`` is the very tensor DDP
    keeps as its view of the bucket, and the bucket's ``buffer()`` the very tensor DDP keeps as
    the bucket, so pointing them (``set_``) at ``shared`` makes DDP's bucket live in shared memory:
    from the next step the backward pass accumulates the gradients there, the hook all-reduces
    them where they are, and DDP, seeing the result alias its bucket, copies nothing back. Without
    the view option the gradients are copied into views DDP does not show, and nothing is moved
    (returns False)."""
    params, views = bucket.parameters(), bucket.gradients()
    base, size = grads.data_ptr(), grads.element_size()
    for p, v in zip(params, views):
        if p.grad is None or p.grad.data_ptr() != v.data_ptr() or p.grad.shape != v.shape:
            return False
    storage = shared.untyped_storage()
    start = shared.storage_offset()
    with torch.no_grad():
        for p, v in zip(params, views):
            p.grad.set_(storage, start + (v.data_ptr() - base) // size, v.shape, v.stride())
        grads.set_(storage, start, grads.shape, grads.stride())
    return True


def _gather_strays(bucket: dist.GradBucket) -> None:
    """Copies into the bucket (now the shared buffer) any parameter's gradient that is not the
    bucket's view of it: none while DDP keeps the views :func:`_adopt` moved (the usual case, one
    pointer comparison per parameter); a guard for gradients replaced behind DDP's back."""
    for p, v in zip(bucket.parameters(), bucket.gradients()):
        g = p.grad
        if g is not None and g.data_ptr() != v.data_ptr():
            v.copy_(g)


# (No ``from __future__ import annotations`` here: DDP checks the hook's annotations as objects.)
def shared_allreduce_hook(state: SharedBuckets, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook (``model.register_comm_hook(SharedBuckets(), hook)``) that
    averages each gradient bucket through a shared buffer with ``all_reduce_shared`` (no
    transport, no further copy), the shared buffer itself being the result. The first step of
    each bucket allocates its buffer (a collective, in bucket order, which DDP keeps the same on
    every rank) and copies the bucket in. With ``DDP(..., gradient_as_bucket_view=True)`` the hook
    then moves DDP's bucket and the gradients' views into that buffer (see :func:`_adopt`), so
    later steps copy nothing: the backward pass writes the gradients into shared memory, they
    are averaged in place and used there by the optimizer. Without that option every step copies
    the bucket in, and DDP copies the result out into the gradients."""
    from psyne.torch import empty_shared  # (psyne.torch imports this module)

    group = state.group or dist.group.WORLD
    grads = bucket.buffer()
    key = (bucket.index(), grads.numel(), grads.dtype)
    shared = state.buffers.get(key)
    if shared is None:
        shared = state.buffers[key] = empty_shared(grads.numel(), dtype=grads.dtype, group=group)
    if grads.data_ptr() != shared.data_ptr():  # not (yet) DDP's bucket: copy it in
        shared.copy_(grads.view(-1))
        state.adopted += _adopt(bucket, grads, shared)
    else:  # DDP's bucket is the shared buffer: a gradient that is not in it is copied in
        _gather_strays(bucket)
    work = dist.all_reduce(shared, op=dist.ReduceOp.AVG, group=group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])
