"""Runs on every rank under psyrun: tensors in psyne's shared memory.

``psyne.torch.empty_shared`` tensors of several sizes (below and above the 16 KiB where the
shared path starts) and dtypes, all-reduced blocking and with ``async_op=True`` (SUM, AVG, MAX),
element by element against an oracle, through ``all_reduce_shared`` (counted); then DDP with
``shared_allreduce_hook``: parameters bitwise the same on every rank and equal to one process's.
Exits 1 on the first wrong result; prints "shared OK"."""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import psyne.torch
from psyne import _torch_shared

dist.init_process_group("psyne")
R, S = dist.get_rank(), dist.get_world_size()
RO = dist.ReduceOp

runs = {"shared": 0}
_run, _submit = _torch_shared.SharedCall.run, _torch_shared.SharedCall.submit


def counted_run(self, group):
    runs["shared"] += 1
    return _run(self, group)


def counted_submit(self, group, keep):
    runs["shared"] += 1
    return _submit(self, group, keep)


_torch_shared.SharedCall.run, _torch_shared.SharedCall.submit = counted_run, counted_submit


def fail(what):
    print(f"rank {R}: {what}", flush=True)
    sys.exit(1)


def data(rank, n, dtype):
    g = torch.Generator().manual_seed(100 * rank + n)
    return (torch.randint(-4, 5, (n,), generator=g).float() / 2).to(dtype)


def check_all_reduce():
    for n in (1000, 5000, 1 << 20):
        for dtype in (torch.float32, torch.float64, torch.bfloat16):
            for name, op in (("sum", RO.SUM), ("avg", RO.AVG), ("max", RO.MAX)):
                if name == "avg" and dtype == torch.bfloat16:
                    continue  # (AVG's division rounds differently in bf16)
                want = torch.stack([data(r, n, torch.float64) for r in range(S)])
                want = {"sum": want.sum(0), "avg": want.sum(0) / S, "max": want.max(0).values}[name].to(dtype)
                for mode in ("blocking", "async"):
                    t = psyne.torch.empty_shared(n, dtype=dtype)
                    if t.numel() != n or t.dtype != dtype or t.abs().sum() != 0:
                        fail(f"empty_shared({n}, {dtype}) is not {n} zeros")
                    t.copy_(data(R, n, dtype))
                    before = runs["shared"]
                    if mode == "async":
                        dist.all_reduce(t, op=op, async_op=True).wait()
                    else:
                        dist.all_reduce(t, op=op)
                    if runs["shared"] != before + 1:
                        fail(f"all_reduce of an empty_shared tensor did not take the shared path ({mode})")
                    if not torch.equal(t, want):
                        bad = (t != want).nonzero()[:4].flatten().tolist()
                        fail(f"{mode} {name} {dtype} n={n}: wrong at {bad}: {t[bad].tolist()} vs {want[bad].tolist()}")
    t = psyne.torch.empty_shared(4, 256)
    if tuple(t.shape) != (4, 256):
        fail(f"empty_shared(4, 256) has shape {tuple(t.shape)}")
    ordinary = torch.ones(1 << 20)
    before = runs["shared"]
    dist.all_reduce(ordinary)
    if runs["shared"] != before or ordinary[0] != S:
        fail("an ordinary tensor took the shared path")


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 8))


def batch(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(16, 64, generator=g), torch.randn(16, 8, generator=g)


def train(net, ranks, steps=8, to_none=True):
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        xs, ys = zip(*(batch(step, r) for r in ranks))
        opt.zero_grad(set_to_none=to_none)
        nn.functional.mse_loss(net(torch.cat(xs)), torch.cat(ys)).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def check_ddp_hook(view, to_none):
    """DDP with the shared hook, its gradients views of the buckets or not, set to None by
    zero_grad or zeroed: equal on every rank and to one process; with views, the buckets moved
    into the shared buffers (the gradients then live there)."""
    what = f"DDP (gradient_as_bucket_view={view}, set_to_none={to_none}) with shared_allreduce_hook"
    net = DDP(model(), bucket_cap_mb=0.1, gradient_as_bucket_view=view)
    state = psyne.torch.SharedBuckets()
    net.register_comm_hook(state, psyne.torch.shared_allreduce_hook)
    before = runs["shared"]
    mine = train(net, [R], to_none=to_none)
    if runs["shared"] == before:
        fail(f"{what} never took the shared path")
    if bool(state.adopted) != view:
        fail(f"{what}: {state.adopted} buckets moved into shared memory")
    if view:
        shared = {t.untyped_storage().data_ptr() for t in state.buffers.values()}
        if any(p.grad.untyped_storage().data_ptr() not in shared for p in net.parameters()):
            fail(f"{what}: a gradient is not in a shared buffer after training")
    single = train(model(), range(S))
    every = torch.empty(S * mine.numel())
    dist.all_gather_into_tensor(every, mine)
    for r, theirs in enumerate(every.chunk(S)):
        if not torch.equal(theirs, mine):
            fail(f"{what}: parameters differ from rank {r}'s")
    if not torch.allclose(mine, single, rtol=1e-4, atol=1e-5):
        fail(f"{what} differs from one process by {(mine - single).abs().max()}")


check_all_reduce()
for view, to_none in ((False, True), (True, True), (True, False)):
    check_ddp_hook(view, to_none)
print(f"rank {R}/{S}: shared OK ({runs['shared']} shared all-reduces)", flush=True)
sys.stdout.flush()
os._exit(0)
