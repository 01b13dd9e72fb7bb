"""Per-call timings of the psyne torch backend, run under psyrun on every rank:
``python/bench/torch_async.py [ROUNDS]``. Prints (rank 0) one line per measure: the slowest rank's value per round,
then the median over rounds.

- ``ar8_us``: blocking ``dist.all_reduce`` of 2 float32 (8 B), mean over 20000 calls.
- ``ar64m_block_ms``: blocking ``dist.all_reduce`` of 64 MiB float32.
- ``ar64m_return_ms``: ``dist.all_reduce(x, async_op=True)`` of 64 MiB: time to return.
- ``ar64m_async_total_ms``: the same, issue to the end of ``wait()``.
- ``ar64m_shared_ms``: blocking ``dist.all_reduce`` of a 64 MiB ``psyne.torch.empty_shared``
  tensor (psyne's ``all_reduce_shared``, no copy).
- ``gloo_*``: the same over a Gloo group of the same ranks, in the same job, alternated (the
  8-byte mean over 2000 calls).
"""

import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import psyne.torch

dist.init_process_group("psyne")
R = dist.get_rank()
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5


def slowest(v):
    t = torch.tensor([v], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


GLOO = dist.new_group(backend="gloo")


def ar8(group=None, n=20000):
    x = torch.ones(2)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(n):
        dist.all_reduce(x, group=group)
    return (time.perf_counter() - t0) / n * 1e6


big = torch.ones(16 << 20)


def block64(group=None):
    dist.barrier()
    t0 = time.perf_counter()
    dist.all_reduce(big, group=group)
    return (time.perf_counter() - t0) * 1e3


shared = psyne.torch.empty_shared(16 << 20) if hasattr(psyne.torch, "empty_shared") else None
if shared is not None:
    shared.fill_(1)


def shared64():
    dist.barrier()
    t0 = time.perf_counter()
    dist.all_reduce(shared)
    return (time.perf_counter() - t0) * 1e3


def async64(group=None):
    dist.barrier()
    t0 = time.perf_counter()
    w = dist.all_reduce(big, group=group, async_op=True)
    t1 = time.perf_counter()
    w.wait()
    t2 = time.perf_counter()
    return (t1 - t0) * 1e3, (t2 - t0) * 1e3


for _ in range(2000):  # warm-up
    dist.all_reduce(torch.ones(2))
block64()
results = {}


def measure(prefix, group, n8):
    results.setdefault(prefix + "ar8_us", []).append(slowest(ar8(group, n8)))
    results.setdefault(prefix + "ar64m_block_ms", []).append(slowest(block64(group)))
    ret, tot = async64(group)
    results.setdefault(prefix + "ar64m_return_ms", []).append(slowest(ret))
    results.setdefault(prefix + "ar64m_async_total_ms", []).append(slowest(tot))
    if group is None and hasattr(psyne.torch, "empty_shared"):
        results.setdefault("ar64m_shared_ms", []).append(slowest(shared64()))


block64(GLOO)
for i in range(ROUNDS):
    for prefix, group, n8 in [("", None, 20000), ("gloo_", GLOO, 2000)][:: 1 if i % 2 == 0 else -1]:
        measure(prefix, group, n8)
if R == 0:
    for k, v in results.items():
        print(f"{k} median {statistics.median(v):.3f} rounds {' '.join(f'{x:.3f}' for x in v)}", flush=True)
dist.barrier()
sys.stdout.flush()
os._exit(0)  # (Gloo's threads abort the process at interpreter exit in torch 2.15)
