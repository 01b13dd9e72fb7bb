"""FSDP2 step times over the psyne backend and over Gloo, in one job under psyrun:
``python/bench/torch_fsdp.py SIZE [ROUNDS] [STEPS]`` with SIZE ``10m`` (an MLP
1024-2048-2048-1024-1024, 9.44 M parameters) or ``100m`` (an MLP of six 4096x4096 layers,
100.7 M parameters); float32, batch 16 per rank, SGD, ``torch.set_num_threads(1)``.

Modes, alternated per round (the order reversed every other round):

- ``local``: the same model without FSDP, in the same process: the step without communication
  (each rank computes the whole model on its batch, as every FSDP rank does);
- ``psyne``: ``fully_shard`` on every Linear and on the root over a 1-D mesh of the psyne group
  (FSDP2 issues its all-gathers and reduce-scatters as it does on every backend: see ``PROFILE``);
- ``gloo``: the same over a Gloo group of the same ranks;
- ``*-async``: the same with ``_set_unshard_async_op(True)`` and explicit prefetching of the next
  layer (``set_modules_to_forward_prefetch``/``..._backward_prefetch``): FSDP2 then issues its
  all-gathers with ``async_op=True`` ahead of the layer that needs them (by default, on CPU, it
  issues every collective blocking).

Per round STEPS timed steps after 3 warm-up steps; each rank's median step, the slowest rank's;
printed (rank 0): per mode the median over rounds, and communication = that minus ``local``'s.
``PROFILE=1`` also prints the collectives one psyne step calls (name, elements, async_op), and
the time the step spends inside the backend's methods (the rest of "communication" is FSDP2's
own work around the collectives: copies into and out of its buffers, their allocation).
"""

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

import psyne.torch
from _rounds import alternated, median_step, print_costs

torch.set_num_threads(1)
dist.init_process_group("psyne")
R, S = dist.get_rank(), dist.get_world_size()
GLOO = dist.new_group(backend="gloo")
SIZE = sys.argv[1] if len(sys.argv) > 1 else "10m"
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
STEPS = int(sys.argv[3]) if len(sys.argv) > 3 else 5
DIMS = {"10m": [1024, 2048, 2048, 1024, 1024], "100m": [4096] * 7}[SIZE]


def model():
    torch.manual_seed(0)
    layers = []
    for a, b in zip(DIMS, DIMS[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def make(mode):
    net = model()
    if mode == "local":
        return net
    group = dist.group.WORLD if mode.startswith("psyne") else GLOO
    mesh = DeviceMesh.from_group(group, "cpu")
    linears = [fully_shard(layer, mesh=mesh) for layer in net if isinstance(layer, nn.Linear)]
    net = fully_shard(net, mesh=mesh)
    if mode.endswith("-async"):
        net._set_unshard_async_op(True)
        for a, b in zip(linears, linears[1:]):
            a.set_modules_to_forward_prefetch([b])
            b.set_modules_to_backward_prefetch([a])
    return net


MODES = ["local", "psyne", "gloo", "psyne-async", "gloo-async"]
NETS = {m: make(m) for m in MODES}
OPTS = {m: torch.optim.SGD(n.parameters(), lr=1e-4) for m, n in NETS.items()}
X, Y = torch.randn(16, DIMS[0]), torch.randn(16, DIMS[-1])


def step(mode):
    net, opt = NETS[mode], OPTS[mode]
    opt.zero_grad()
    nn.functional.mse_loss(net(X), Y).backward()
    opt.step()


def profile(mode):
    """The collectives one FSDP2 step of ``mode`` (a psyne one) calls, by wrapping the process group's methods."""
    pg = dist.group.WORLD
    seen, spent, depth = [], [0.0], [0]
    names = ["all_gather_single", "all_gather_single_coalesced", "reduce_scatter_single",
             "reduce_scatter_single_coalesced", "allreduce", "allgather", "reduce_scatter", "barrier"]
    orig = {n: getattr(pg, n) for n in names}

    def wrap(name):
        def call(*args):
            opts = args[-1]
            ts = [a for a in args if isinstance(a, torch.Tensor)] or [t for a in args if isinstance(a, list) for t in a if isinstance(t, torch.Tensor)]
            t0 = time.perf_counter()
            depth[0] += 1
            work = orig[name](*args)
            depth[0] -= 1
            if depth[0] == 0:  # (reduce_scatter_single calls the coalesced form: counted once)
                spent[0] += time.perf_counter() - t0
            seen.append((name, [t.numel() for t in ts], getattr(opts, "asyncOp", None)))
            return work
        return call

    for n in names:
        setattr(pg, n, wrap(n))
    step(mode)
    seen.clear()
    spent[0] = 0.0
    t0 = time.perf_counter()
    step(mode)
    total = time.perf_counter() - t0
    for n in names:
        setattr(pg, n, orig[n])
    if R == 0:
        print(f"collectives of one {mode} step: (method, elements of its tensors, async_op)")
        for s in seen:
            print("  call", *s, flush=True)
        print(f"  {spent[0] * 1e3:.1f} ms of the {total * 1e3:.1f} ms step inside the backend's "
              "methods (blocking calls: the whole collective)", flush=True)


if R == 0:
    print(f"FSDP2 params {sum(p.numel() for p in NETS['local'].parameters()) / 1e6:.2f} M, {S} ranks, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
if os.environ.get("PROFILE"):
    profile("psyne")
    profile("psyne-async")
results = alternated(MODES, ROUNDS, lambda m: median_step(step, m, 3, STEPS))
if R == 0:
    print_costs(results, "communication")
    print(f"load {os.getloadavg()[0]:.1f}", flush=True)
dist.barrier()
sys.stdout.flush()
os._exit(0)
