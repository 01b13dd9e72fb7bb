"""Barrier timing: the median time of a barrier, and a check that a barrier really waits: the
last rank sleeps 0.2 s before it enters, and no rank leaves before then."""

import time

import numpy as np

import psyne

g = psyne.init()
for _ in range(100):
    g.barrier()
times = []
for _ in range(1000):
    t = time.perf_counter()
    g.barrier()
    times.append(time.perf_counter() - t)
if g.rank == g.size - 1:
    time.sleep(0.2)
t = time.perf_counter()
g.barrier()
waited = time.perf_counter() - t
if g.size > 1 and g.rank != g.size - 1:
    assert waited > 0.15, waited
med = g.all_reduce(np.array([np.median(times)]), "max")[0]
print(f"rank {g.rank}/{g.size}: barrier median {np.median(times) * 1e6:.1f} us (slowest rank {med * 1e6:.1f} us); waited {waited * 1e3:.0f} ms for the late rank: OK", flush=True)
