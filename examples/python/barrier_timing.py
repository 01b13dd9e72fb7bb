"""Barrier timing: the median time of a barrier, and a check that a barrier really waits: the
last rank sleeps 0.2 s before it enters, and no rank leaves before it entered (ranks on one host)."""

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
# The late rank notes when it enters (time.monotonic: one clock for every process of a host);
# every other rank must leave after that, however the machine schedules them.
if g.rank == g.size - 1:
    time.sleep(0.2)
entered = np.array([time.monotonic()])
t = time.perf_counter()
g.barrier()
left = time.monotonic()
waited = time.perf_counter() - t
g.broadcast(entered, root=g.size - 1)
if g.size > 1 and g.rank != g.size - 1:
    assert left >= entered[0], (left, entered[0])
med = g.all_reduce(np.array([np.median(times)]), "max")[0]
print(f"rank {g.rank}/{g.size}: barrier median {np.median(times) * 1e6:.1f} us (slowest rank {med * 1e6:.1f} us); waited {waited * 1e3:.0f} ms for the late rank: OK", flush=True)
