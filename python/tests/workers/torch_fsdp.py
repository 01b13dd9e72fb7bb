"""Runs on every rank under psyrun: FSDP2 over the psyne backend.

``torch_fsdp.py fsdp|hsdp [psyne|gloo]``: a small MLP with ``fully_shard`` on each Linear and on
the root, over a 1-D DeviceMesh of every rank (``fsdp``) or a 2-D (replicate x shard) mesh
(``hsdp``: all-reduce across the replicas, reduce-scatter within one), trained for STEPS steps of
SGD with momentum, each rank on its own batch. Checks every step's loss (the mean over ranks)
and the final parameters against one process training on the whole batch, and that the
parameters are bitwise the same on every rank. Before that, the collectives FSDP2 needs, each
element by element against an oracle: group names (DeviceMesh looks groups up by name),
all_gather_into_tensor and reduce_scatter_tensor with SUM, AVG and PREMUL_SUM, their coalesced
forms through ``_coalescing_manager``, uneven all_to_all_single. Exits 1 on the first wrong
result; prints "fsdp OK" on every rank."""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard

import psyne.torch  # noqa: F401

MODE = sys.argv[1]
BACKEND = sys.argv[2] if len(sys.argv) > 2 else "psyne"
dist.init_process_group(BACKEND)
R, S = dist.get_rank(), dist.get_world_size()
STEPS, BATCH = int(os.environ.get("STEPS", "5")), 8
RO = dist.ReduceOp


def fail(what):
    print(f"rank {R}: {what}", flush=True)
    sys.exit(1)


def same(got, want, what):
    if not torch.equal(got, want):
        fail(f"{what}: got {got.tolist()[:8]}, want {want.tolist()[:8]}")


def data(rank, n, salt=0):
    g = torch.Generator().manual_seed(100 * rank + salt)
    return torch.randint(-4, 5, (n,), generator=g).float() / 2


def check_collectives():
    pg = dist.group.WORLD
    if not pg.group_name or dist.distributed_c10d._resolve_process_group(pg.group_name) is not pg:
        fail(f"group name {pg.group_name!r} does not resolve to the group")
    n = 6
    mine = data(R, S * n)
    total = sum(data(r, S * n) for r in range(S))
    part = slice(R * n, (R + 1) * n)
    for name, op, want in (
        ("SUM", RO.SUM, total[part]),
        ("AVG", RO.AVG, total[part] / S),
        ("PREMUL_SUM", dist._make_nccl_premul_sum(0.25), total[part] * 0.25),
        ("PREMUL_SUM tensor", dist._make_nccl_premul_sum(torch.tensor([0.5])), total[part] * 0.5),
    ):
        out = torch.empty(n)
        dist.reduce_scatter_tensor(out, mine.clone(), op=op)
        same(out, want, f"reduce_scatter_tensor {name}")
        w = dist.reduce_scatter_tensor(out, mine.clone(), op=op, async_op=True)
        w.wait()
        same(out, want, f"reduce_scatter_tensor {name} async")
    x = mine.clone()
    dist.all_reduce(x, op=dist._make_nccl_premul_sum(0.5))
    same(x, total * 0.5, "all_reduce PREMUL_SUM")
    gathered = torch.empty(S * n)
    dist.all_gather_into_tensor(gathered, data(R, n))
    same(gathered, torch.cat([data(r, n) for r in range(S)]), "all_gather_into_tensor")
    # the coalesced forms, as FSDP2 and _coalescing_manager call them
    ins = [data(R, n, 1), data(R, 2 * n, 2)]
    outs = [torch.empty(S * n), torch.empty(2 * S * n)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    cm.wait()
    same(outs[0], torch.cat([data(r, n, 1) for r in range(S)]), "all_gather coalesced 0")
    same(outs[1], torch.cat([data(r, 2 * n, 2) for r in range(S)]), "all_gather coalesced 1")
    big = [data(R, S * n, 3), data(R, S * 2, 4)]
    outs = [torch.empty(n), torch.empty(2)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, big):
            dist.reduce_scatter_tensor(o, i, op=RO.AVG)
    cm.wait()
    same(outs[0], sum(data(r, S * n, 3) for r in range(S))[part] / S, "reduce_scatter coalesced 0")
    want = sum(data(r, S * 2, 4) for r in range(S))[R * 2 : R * 2 + 2] / S
    same(outs[1], want, "reduce_scatter coalesced 1")
    check_uneven_all_to_all()


def check_uneven_all_to_all():
    """Rank r sends (r + j) % 3 rows of 2 elements to rank j (zero rows included), as an MoE
    layer's token exchange does."""
    rows = lambda src, dst: (src + dst) % 3  # noqa: E731
    in_splits = [rows(R, j) for j in range(S)]
    out_splits = [rows(j, R) for j in range(S)]
    inp = torch.cat([torch.full((rows(R, j), 2), 100.0 * R + j) for j in range(S)])
    out = torch.full((sum(out_splits), 2), -1.0)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    want = torch.cat([torch.full((rows(j, R), 2), 100.0 * j + R) for j in range(S)])
    same(out, want, "uneven all_to_all_single")
    out.fill_(-1)
    dist.all_to_all_single(out, inp, out_splits, in_splits, async_op=True).wait()
    same(out, want, "uneven all_to_all_single async")


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))


def batch(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(BATCH, 16, generator=g), torch.randn(BATCH, 4, generator=g)


def train(net, ranks, avg_group=None):
    """Losses per step (averaged over the ranks when distributed) and the final parameters."""
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(STEPS):
        xs, ys = zip(*(batch(step, r) for r in ranks))
        loss = nn.functional.mse_loss(net(torch.cat(xs)), torch.cat(ys))
        loss.backward()
        opt.step()
        opt.zero_grad()
        lv = loss.detach().clone()
        if avg_group is not None:
            dist.all_reduce(lv, group=avg_group)
            lv /= S
        losses.append(float(lv))
    with torch.no_grad():
        params = [p.full_tensor() if hasattr(p, "full_tensor") else p.detach() for p in net.parameters()]
    return losses, torch.cat([p.reshape(-1) for p in params])


def mesh():
    if MODE == "fsdp":
        if BACKEND == "psyne":
            return init_device_mesh("cpu", (S,))
        return DeviceMesh.from_group(dist.group.WORLD, "cpu")
    assert S % 2 == 0, "hsdp runs on an even number of ranks"
    return init_device_mesh("cpu", (2, S // 2), mesh_dim_names=("replicate", "shard"))


if BACKEND == "psyne":
    check_collectives()
net = model()
m = mesh()
for layer in net:
    if isinstance(layer, nn.Linear):
        fully_shard(layer, mesh=m)
fully_shard(net, mesh=m)
losses, params = train(net, [R], avg_group=dist.group.WORLD)
single_losses, single_params = train(model(), range(S))

every = torch.empty(S * params.numel())
dist.all_gather_into_tensor(every, params)
for r, theirs in enumerate(every.chunk(S)):
    if not torch.equal(theirs, params):
        fail(f"parameters differ from rank {r}'s: max {(theirs - params).abs().max()}")
for step, (a, b) in enumerate(zip(losses, single_losses)):
    if abs(a - b) > 1e-5 * max(1.0, abs(b)):
        fail(f"step {step}: loss {a} with {MODE} over {BACKEND}, {b} in one process")
if not torch.allclose(params, single_params, rtol=1e-4, atol=1e-6):
    fail(f"parameters differ from one process's by {(params - single_params).abs().max()}")
print(f"rank {R}/{S}: {MODE} {BACKEND} fsdp OK (losses {[round(x, 5) for x in losses]})", flush=True)
sys.stdout.flush()
os._exit(0)  # (Gloo's threads abort the process at interpreter exit in torch 2.15)
