"""Runs on every rank under psyrun: the same small model trained with DDP over psyne (the
default group) and over Gloo (a second group in the same job), from the same initial parameters
on the same data. Checks that psyne's parameters are bitwise identical on every rank, that they
match Gloo's to float tolerance, and that they match one process training on the whole batch."""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import psyne.torch  # noqa: F401

dist.init_process_group("psyne")
R, S = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(list(range(S)), backend="gloo")
STEPS, BATCH = int(os.environ.get("STEPS", "20")), 16


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(20, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 3))


def batch(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(BATCH, 20, generator=g), torch.randn(BATCH, 3, generator=g)


def train(net, ranks):
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    for step in range(STEPS):
        xs, ys = zip(*(batch(step, r) for r in ranks))
        x, y = torch.cat(xs), torch.cat(ys)
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


p_psyne = train(DDP(model()), [R])
p_gloo = train(DDP(model(), process_group=gloo), [R])
p_single = train(model(), range(S))  # one process, the whole batch

every = torch.empty(S * p_psyne.numel())
dist.all_gather_into_tensor(every, p_psyne)
for r, theirs in enumerate(every.chunk(S)):
    if not torch.equal(theirs, p_psyne):
        print(f"rank {R}: parameters differ from rank {r}'s: max {(theirs - p_psyne).abs().max()}", flush=True)
        sys.exit(1)
if not torch.allclose(p_psyne, p_gloo, rtol=1e-5, atol=1e-6):
    print(f"rank {R}: psyne and gloo differ by {(p_psyne - p_gloo).abs().max()}", flush=True)
    sys.exit(1)
if not torch.allclose(p_psyne, p_single, rtol=1e-4, atol=1e-5):
    print(f"rank {R}: psyne and one process differ by {(p_psyne - p_single).abs().max()}", flush=True)
    sys.exit(1)
print(f"rank {R}/{S}: ddp OK (psyne vs gloo max diff {(p_psyne - p_gloo).abs().max():.2e})", flush=True)
sys.stdout.flush()
os._exit(0)  # (Gloo's threads abort the process at interpreter exit in torch 2.15)
