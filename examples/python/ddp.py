"""A DDP training loop over the psyne backend: a small MLP learns a noisy linear map; each rank
trains on its part of every batch, and at the end the parameters are checked against one process
that trained on the whole batches: `psyrun -n 4 python3 ddp.py` (or torchrun)."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import psyne.torch  # registers the backend "psyne"

dist.init_process_group("psyne")  # was "gloo"
rank, size = dist.get_rank(), dist.get_world_size()
STEPS, PER_RANK = 50, 32


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(size * PER_RANK, 8, generator=g)
    y = x.sum(dim=1, keepdim=True) * 0.5 + 0.01 * torch.randn(size * PER_RANK, 1, generator=g)
    return x, y


def train(model, part):
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(STEPS):
        x, y = batch(step)
        x, y = part(x), part(y)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    return model, loss.item()


# The fastest form on one host: the gradients are views of DDP's buckets, and psyne's hook moves
# the buckets into its shared memory (after the first step no copy of the gradients at all).
# `DDP(net())` alone works too (docs/python.md says what each costs).
ddp = DDP(net(), gradient_as_bucket_view=True)
ddp.register_comm_hook(psyne.torch.SharedBuckets(), psyne.torch.shared_allreduce_hook)
model, loss = train(ddp, lambda t: t[rank * PER_RANK:(rank + 1) * PER_RANK])
single, single_loss = train(net(), lambda t: t)
ours = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
theirs = torch.cat([p.detach().reshape(-1) for p in single.parameters()])
every = torch.empty(size * ours.numel())
dist.all_gather_into_tensor(every, ours)
assert all(torch.equal(c, ours) for c in every.chunk(size)), "ranks' parameters differ"
assert torch.allclose(ours, theirs, rtol=1e-4, atol=1e-5), (ours - theirs).abs().max()
print(f"rank {rank}/{size}: DDP over psyne, {STEPS} steps, loss {loss:.4f}; parameters equal on every rank and "
      f"match one process (max diff {(ours - theirs).abs().max():.1e}): OK", flush=True)
dist.destroy_process_group()
