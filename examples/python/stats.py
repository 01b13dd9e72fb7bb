"""Global statistics: count, sum and sum of squares all-reduced in one call give the mean and the
variance of data spread over the ranks (and min/max in another), checked against NumPy."""

import numpy as np

import psyne

g = psyne.init()
rng = np.random.default_rng(100 + g.rank)
mine = rng.normal(5.0, 2.0, 200_000 + 1000 * g.rank)
acc = np.array([mine.size, mine.sum(), (mine * mine).sum()], np.float64)
g.all_reduce(acc, "sum")
n, s, ss = acc
mean, var = s / n, ss / n - (s / n) ** 2
ext = g.all_reduce(np.array([-mine.min(), mine.max()]), "max")
everything = np.concatenate([np.random.default_rng(100 + r).normal(5.0, 2.0, 200_000 + 1000 * r) for r in range(g.size)])
assert n == everything.size
assert abs(mean - everything.mean()) < 1e-9 and abs(var - everything.var()) < 1e-7, (mean, var)
assert -ext[0] == everything.min() and ext[1] == everything.max()
print(f"rank {g.rank}/{g.size}: n={int(n)} mean={mean:.6f} var={var:.6f} min={-ext[0]:.3f} max={ext[1]:.3f}: OK", flush=True)
