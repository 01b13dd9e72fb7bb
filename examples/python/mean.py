"""Distributed mean: each rank holds a slice of a large data set; all_reduce of (sum, count)
gives every rank the global mean, checked against the mean of the whole data set."""

import numpy as np

import psyne

g = psyne.init()
N = 1_000_003
data = np.random.default_rng(7).standard_normal(N)  # every rank can make the whole set, to check
lo, hi = g.rank * N // g.size, (g.rank + 1) * N // g.size
part = np.array([data[lo:hi].sum(), hi - lo], np.float64)
g.all_reduce(part, "sum")
mean = part[0] / part[1]
assert part[1] == N and abs(mean - data.mean()) < 1e-12, (mean, data.mean())
print(f"rank {g.rank}/{g.size}: mean of {N} values = {mean:.12f} (expected {data.mean():.12f}): OK", flush=True)
