"""Distributed argmax: each rank finds its local maximum; an all_gather of (value, global index)
pairs lets every rank pick the global one (ties: the lowest index), checked against np.argmax."""

import numpy as np

import psyne

g = psyne.init()
N = 500_009
v = np.random.default_rng(11).integers(0, 1000, N).astype(np.float64)
lo, hi = g.rank * N // g.size, (g.rank + 1) * N // g.size
i = int(np.argmax(v[lo:hi])) + lo if hi > lo else -1
mine = np.array([v[i] if i >= 0 else -np.inf, i], np.float64)
pairs = g.all_gather(mine)
best = max((val, -idx) for val, idx in pairs if idx >= 0)
arg = int(-best[1])
assert arg == int(np.argmax(v)), (arg, np.argmax(v))
print(f"rank {g.rank}/{g.size}: argmax = {arg} (value {v[arg]}): OK", flush=True)
