"""The NumPy API's per-call time for small arrays: `psyrun -n 2 python numpy_small.py [ROUNDS]`.

Times `Group.all_reduce` and `Group.broadcast` of float32 arrays of 8 B, 64 B, 1 KiB and 4 KiB,
in place, the same array every call (as an application's loop does); each round times every size
once, and the report gives the slowest rank's mean per call, median (and min–max) over rounds.
Every result is checked after its round.
"""

import statistics
import sys
import time

import numpy as np

import psyne

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
SIZES = [8, 64, 1024, 4096]
ITERS = 20000

g = psyne.init()


def slowest(seconds):
    t = np.array([seconds], np.float64)
    g.all_reduce(t, op="max")
    return float(t[0])


def time_call(name, nbytes):
    a = np.ones(nbytes // 4, np.float32)
    call = getattr(g, name)
    for _ in range(500):
        call(a)
    g.barrier()
    t0 = time.perf_counter()
    for _ in range(ITERS):
        call(a)
    dt = (time.perf_counter() - t0) / ITERS
    a[:] = g.rank + 1
    call(a)
    want = g.size * (g.size + 1) / 2 if name == "all_reduce" else 1.0
    assert np.all(a == want), (name, nbytes, a[:4], want)
    return slowest(dt) * 1e6


times = {(n, b): [] for n in ("all_reduce", "broadcast") for b in SIZES}
for _ in range(ROUNDS):
    for name, nbytes in times:
        times[(name, nbytes)].append(time_call(name, nbytes))
if g.rank == 0:
    print(f"# NumPy API, {g.size} ranks, {ITERS} calls a size a round, {ROUNDS} rounds: us per call")
    for (name, nbytes), v in times.items():
        print(f"{name:10s} {nbytes:5d} B  {statistics.median(v):7.2f}  ({min(v):.2f}-{max(v):.2f})")
