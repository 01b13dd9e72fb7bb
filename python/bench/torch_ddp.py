"""DDP step times over the psyne backend and over Gloo, in one job under psyrun:
``python/bench/torch_ddp.py [ROUNDS] [STEPS]``. An MLP of 9.5 M parameters (1024-2048-2048-1024-1024,
float32), batch 16 per rank, SGD. Per round, alternating the order of the modes: STEPS timed
steps (after 5 warm-up steps) of

- ``local``: the same model without DDP, in the same process (the step without communication);
- ``psyne``: DDP over the psyne backend (its all-reduces asynchronous, overlapping the backward);
- ``psyne-sync``: DDP over psyne with a hook that all-reduces each bucket blocking (the backend
  before issue 36: nothing overlaps);
- ``psyne-shared``: DDP over psyne with ``psyne.torch.shared_allreduce_hook`` (shared buffers);
- ``gloo``: DDP over a Gloo group of the same ranks;
- ``*-view``: the same with ``gradient_as_bucket_view=True`` (the gradients are views of DDP's
  buckets: two copies of the gradients fewer per step); with ``psyne-shared`` the hook then moves
  the buckets into its shared buffers (no copy at all);
- ``*-view-keep``: the same with ``zero_grad(set_to_none=False)`` (the gradients stay the buckets'
  views from step to step and are accumulated in place, instead of each step's new gradient
  being copied into the bucket).

Run it under ``psyrun --bind-to none`` too: psyrun binds each rank to one core by default.

Prints (rank 0) per mode the median over rounds of the slowest rank's median step (ms), and the
gradients' cost: that minus ``local``'s, and ``paired``: the median over rounds of (this mode's
step − ``local``'s step in the same round), steadier when the machine's load changes.
``MODES=a,b,...`` runs only those modes (``local`` always).
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import psyne.torch
from _rounds import alternated, median_step, print_costs

torch.set_num_threads(1)
dist.init_process_group("psyne")
R, S = dist.get_rank(), dist.get_world_size()
GLOO = dist.new_group(backend="gloo")
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 20


def model():
    torch.manual_seed(0)
    dims = [1024, 2048, 2048, 1024, 1024]
    layers = []
    for a, b in zip(dims, dims[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def sync_hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    buf = bucket.buffer()
    dist.all_reduce(buf)
    buf.div_(S)
    fut = torch.futures.Future()
    fut.set_result(buf)
    return fut


def make(mode):
    if mode == "local":
        return model()
    view = "-view" in mode
    if mode.startswith("gloo"):
        return DDP(model(), process_group=GLOO, gradient_as_bucket_view=view)
    net = DDP(model(), gradient_as_bucket_view=view)
    mode = mode.split("-view")[0]
    if mode == "psyne-sync":
        net.register_comm_hook(None, sync_hook)
    elif mode == "psyne-shared":
        net.register_comm_hook(psyne.torch.SharedBuckets(), psyne.torch.shared_allreduce_hook)
    return net


MODES = ["local", "psyne", "psyne-sync", "psyne-shared", "gloo", "psyne-view", "psyne-shared-view", "gloo-view",
         "psyne-shared-view-keep", "gloo-view-keep"]
if os.environ.get("MODES"):
    MODES = ["local"] + [m for m in os.environ["MODES"].split(",") if m != "local"]
NETS = {m: make(m) for m in MODES}
OPTS = {m: torch.optim.SGD(n.parameters(), lr=1e-4) for m, n in NETS.items()}
X, Y = torch.randn(16, 1024), torch.randn(16, 1024)


def step(mode):
    net, opt = NETS[mode], OPTS[mode]
    opt.zero_grad(set_to_none=not mode.endswith("-keep"))
    nn.functional.mse_loss(net(X), Y).backward()
    opt.step()


if R == 0:
    print(f"params {sum(p.numel() for p in NETS['local'].parameters()) / 1e6:.2f} M, {S} ranks, "
          f"load {os.getloadavg()[0]:.1f}, affinity {sorted(os.sched_getaffinity(0))}", flush=True)
results = alternated(list(NETS), ROUNDS, lambda m: median_step(step, m, 5, STEPS))
if R == 0:
    print_costs(results, "gradients")
    print(f"load {os.getloadavg()[0]:.1f}", flush=True)
dist.barrier()
sys.stdout.flush()
os._exit(0)
