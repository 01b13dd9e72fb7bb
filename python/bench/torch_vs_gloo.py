"""torch.distributed over psyne against Gloo, in one job: `psyrun -n 2 python3 torch_vs_gloo.py OUT.json`.

The default group is "psyne"; a second group over the same ranks is "gloo". Each round times
dist.all_reduce (float32, SUM) at every size on both groups, the order of the two alternating
from round to round, and then one DDP training step of the same model on both; a time is the
slowest rank's mean over the round's iterations, and the report gives the median over rounds.
It also times the NumPy API's all_reduce (psyne.Group) at 8 B: the Python layer's per-call cost;
and dist.all_reduce at 8 B on a third group of torch's own "fake" backend (FakeProcessGroup, C++,
whose all_reduce does nothing): torch's floor for any backend, so Gloo's time over it is the
largest ratio any backend could show at 8 B.
Every result is checked (the all-reduced values are right on every rank).
"""

import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import psyne.torch  # noqa: F401
import torch.testing._internal.distributed.fake_pg  # noqa: F401  (registers the "fake" backend)

ROUNDS = int(os.environ.get("ROUNDS", "5"))
SIZES = [8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20, 8 << 20, 64 << 20]

dist.init_process_group("psyne")
R, S = dist.get_rank(), dist.get_world_size()
groups = {"psyne": None, "gloo": dist.new_group(list(range(S)), backend="gloo")}
fake = dist.new_group(list(range(S)), backend="fake")
pg = dist.distributed_c10d._get_default_group()


def iters_for(nbytes):
    return 2000 if nbytes <= 4096 else 300 if nbytes <= 32 << 10 else 60 if nbytes <= 1 << 20 else 8 if nbytes <= 8 << 20 else 3


def slowest(seconds):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def time_all_reduce(group, nbytes):
    n = max(1, nbytes // 4)
    t = torch.ones(n)
    for _ in range(min(10, iters_for(nbytes))):
        dist.all_reduce(t, group=group)
    t.zero_()
    k = iters_for(nbytes)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(k):
        dist.all_reduce(t, group=group)
    dt = (time.perf_counter() - t0) / k
    t.fill_(1.0)
    dist.all_reduce(t, group=group)  # and the result is right
    assert t[0].item() == S and t[-1].item() == S, (t[0].item(), t[-1].item())
    return slowest(dt)


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


ddp = {name: DDP(model(), process_group=g) for name, g in groups.items()}
opts = {name: torch.optim.SGD(m.parameters(), lr=1e-3) for name, m in ddp.items()}
x, y = torch.randn(64, 512), torch.randint(0, 10, (64,))
n_params = sum(p.numel() for p in ddp["psyne"].parameters())


def time_ddp(name, steps=10):
    m, opt = ddp[name], opts[name]
    for _ in range(2):
        opt.zero_grad()
        nn.functional.cross_entropy(m(x), y).backward()
        opt.step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(m(x), y).backward()
        opt.step()
    return slowest((time.perf_counter() - t0) / steps)


def time_floor_8b():
    t = torch.ones(2)
    for _ in range(1000):
        dist.all_reduce(t, group=fake)
    dist.barrier()
    k = 20000
    t0 = time.perf_counter()
    for _ in range(k):
        dist.all_reduce(t, group=fake)
    return slowest((time.perf_counter() - t0) / k)


def time_numpy_8b():
    g = pg.psyne_group
    a = np.ones(2, np.float32)
    for _ in range(1000):
        g.all_reduce(a)
    g.barrier()
    k = 20000
    t0 = time.perf_counter()
    for _ in range(k):
        g.all_reduce(a)
    return slowest((time.perf_counter() - t0) / k)


results = {"all_reduce": {f"{b}": {"psyne": [], "gloo": []} for b in SIZES}, "ddp_step": {"psyne": [], "gloo": []}, "numpy_8B": [], "floor_8B": []}
for rnd in range(ROUNDS):
    order = ["psyne", "gloo"] if rnd % 2 == 0 else ["gloo", "psyne"]
    for nbytes in SIZES:
        for name in order:
            results["all_reduce"][f"{nbytes}"][name].append(time_all_reduce(groups[name], nbytes))
    for name in order:
        results["ddp_step"][name].append(time_ddp(name))
    results["numpy_8B"].append(time_numpy_8b())
    results["floor_8B"].append(time_floor_8b())
    if R == 0:
        print(f"round {rnd + 1}/{ROUNDS} done", flush=True)

# the two DDP models saw the same data from the same start: their parameters agree
pa = torch.cat([p.detach().reshape(-1) for p in ddp["psyne"].parameters()])
pb = torch.cat([p.detach().reshape(-1) for p in ddp["gloo"].parameters()])
assert torch.allclose(pa, pb, rtol=1e-4, atol=1e-5), (pa - pb).abs().max()

if R == 0:
    med = statistics.median
    summary = {
        "ranks": S,
        "rounds": ROUNDS,
        "torch": torch.__version__,
        "ddp_params": n_params,
        "all_reduce_us": {
            b: {n: med(v[n]) * 1e6 for n in v} | {"speedup": med(v["gloo"]) / med(v["psyne"])}
            for b, v in results["all_reduce"].items()
        },
        "ddp_step_ms": {n: med(results["ddp_step"][n]) * 1e3 for n in ("psyne", "gloo")}
        | {"speedup": med(results["ddp_step"]["gloo"]) / med(results["ddp_step"]["psyne"])},
        "numpy_all_reduce_8B_us": med(results["numpy_8B"]) * 1e6,
        "torch_floor_8B_us": med(results["floor_8B"]) * 1e6,
        "largest_possible_8B_speedup": med(results["all_reduce"]["8"]["gloo"]) / med(results["floor_8B"]),
        "raw_seconds": results,
    }
    with open(sys.argv[1], "w") as f:
        json.dump(summary, f, indent=1)
    print(f"{'bytes':>10} {'psyne us':>10} {'gloo us':>10} {'x':>7}")
    for b, v in summary["all_reduce_us"].items():
        print(f"{b:>10} {v['psyne']:>10.1f} {v['gloo']:>10.1f} {v['speedup']:>7.1f}")
    d = summary["ddp_step_ms"]
    print(f"DDP step ({n_params} params): psyne {d['psyne']:.2f} ms, gloo {d['gloo']:.2f} ms, x{d['speedup']:.2f}")
    print(f"NumPy API all_reduce 8 B: {summary['numpy_all_reduce_8B_us']:.2f} us")
    print(
        f"torch's floor (fake backend) 8 B: {summary['torch_floor_8B_us']:.2f} us;"
        f" Gloo over it: x{summary['largest_possible_8B_speedup']:.1f}"
    )
sys.stdout.flush()
os._exit(0)  # (Gloo's threads abort the process at interpreter exit in torch 2.15)
