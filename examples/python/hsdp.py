"""HSDP over the psyne backend: a 2-D DeviceMesh (replicate x shard) and `fully_shard` on it, so
parameters are sharded within each half of the ranks and replicated across the halves (the
backward reduce-scatters within a shard group, then all-reduces across the replicas), each rank
training on its part of every batch; at the end the losses and the full parameters are checked
against one process that trained on the whole batches: `psyrun -n 4 python3 hsdp.py` (an even
number of ranks makes a 2 x size/2 mesh; otherwise 1 x size)."""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import psyne.torch  # noqa: F401  (registers the backend "psyne")

dist.init_process_group("psyne")  # was "gloo"
rank, size = dist.get_rank(), dist.get_world_size()
STEPS, PER_RANK = 20, 16
replicas = 2 if size % 2 == 0 else 1


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(size * PER_RANK, 8, generator=g)
    y = x.sum(dim=1, keepdim=True) * 0.5 + 0.01 * torch.randn(size * PER_RANK, 1, generator=g)
    return x, y


def train(model, part, mean_over_ranks):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(STEPS):
        x, y = (part(t) for t in batch(step))
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(mean_over_ranks(loss.detach()))
    return losses


def mean(t):
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    return t.item()


mesh = init_device_mesh("cpu", (replicas, size // replicas), mesh_dim_names=("replicate", "shard"))
model = net()
for layer in model:
    if isinstance(layer, nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
losses = train(model, lambda t: t[rank * PER_RANK:(rank + 1) * PER_RANK], mean)
single = net()
single_losses = train(single, lambda t: t, lambda t: t.item())

with torch.no_grad():
    ours = torch.cat([p.full_tensor().reshape(-1) for p in model.parameters()])
theirs = torch.cat([p.detach().reshape(-1) for p in single.parameters()])
assert all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(losses, single_losses)), (losses, single_losses)
assert torch.allclose(ours, theirs, rtol=1e-4, atol=1e-6), (ours - theirs).abs().max()
print(f"rank {rank}/{size}: HSDP over psyne on a {replicas} x {size // replicas} mesh, {STEPS} steps, loss "
      f"{losses[-1]:.4f}; every loss and the parameters match one process "
      f"(max diff {(ours - theirs).abs().max():.1e}): OK", flush=True)
dist.destroy_process_group()
