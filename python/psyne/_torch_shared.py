"""Tensors in psyne's shared buffers, for the torch backend (:mod:`psyne.torch`).

:func:`psyne.torch.empty_shared` allocates a buffer with ``Group.alloc_shared`` (in memory
every rank of the group on this host maps) and wraps it as a tensor; the process group keeps a
:class:`Registry` of its buffers, so that ``dist.all_reduce`` of such a tensor (the whole
buffer) runs psyne's ``all_reduce_shared``: each rank reduces its chunk straight out of every
rank's buffer and writes the result into all of them, with no copy through any transport.
:func:`shared_allreduce_hook` is a DDP communication hook doing the same for gradient buckets.
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
    """The state of :func:`shared_allreduce_hook`: the process group (None: the default) and one
    shared buffer per DDP gradient bucket (by index, size and dtype)."""

    def __init__(self, group: Any = None) -> None:
        self.group = group
        self.buffers: Dict[Tuple[int, int, torch.dtype], torch.Tensor] = {}


# (No ``from __future__ import annotations`` here: DDP checks the hook's annotations as objects.)
def shared_allreduce_hook(state: SharedBuckets, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook (``model.register_comm_hook(SharedBuckets(), hook)``) that
    averages each gradient bucket through a shared buffer: the bucket is copied in, averaged in
    place with ``all_reduce_shared`` (no transport, no further copy), and the shared buffer itself
    is the result, which DDP copies into the gradients as it does the bucket's. The first step of
    each bucket allocates its buffer (a collective, in bucket order, which DDP keeps the same on
    every rank)."""
    from psyne.torch import empty_shared  # (psyne.torch imports this module)

    group = state.group or dist.group.WORLD
    grads = bucket.buffer()
    key = (bucket.index(), grads.numel(), grads.dtype)
    shared = state.buffers.get(key)
    if shared is None:
        shared = state.buffers[key] = empty_shared(grads.numel(), dtype=grads.dtype, group=group)
    shared.copy_(grads.view(-1))
    work = dist.all_reduce(shared, op=dist.ReduceOp.AVG, group=group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])
