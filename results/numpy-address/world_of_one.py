"""The NumPy API's per-call cost with no peer: `python world_of_one.py CALLS` (no launcher: a world
of one), an 8-byte all-reduce in place."""

import sys
import time

import numpy as np

import psyne

g = psyne.init()
a = np.ones(2, np.float32)
k = int(sys.argv[1])
for _ in range(1000):
    g.all_reduce(a)
t0 = time.perf_counter()
for _ in range(k):
    g.all_reduce(a)
print(f"{(time.perf_counter() - t0) / k * 1e9:.0f} ns per NumPy all_reduce, world of one")
