"""Distributed softmax over a vector split across ranks: a max all-reduce (for stability), then a
sum all-reduce of the exponentials; the gathered result equals softmax of the whole vector."""

import numpy as np

import psyne

g = psyne.init()
N = 100_001
z = np.random.default_rng(3).standard_normal(N).astype(np.float64) * 10
base, extra = divmod(N, g.size)  # psyne's even split: the first N % size chunks one longer
lo = g.rank * base + min(g.rank, extra)
hi = lo + g.chunk_len(N)
mine = z[lo:hi]
m = g.all_reduce(np.array([mine.max() if mine.size else -np.inf]), "max")[0]
e = np.exp(mine - m)
s = g.all_reduce(np.array([e.sum()]), "sum")[0]
soft = e / s
whole = g.all_gather(soft, out=np.empty(N))
want = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
assert np.allclose(whole, want, rtol=1e-12, atol=1e-15) and abs(whole.sum() - 1) < 1e-12
print(f"rank {g.rank}/{g.size}: softmax of {N} values, sum {whole.sum():.15f}, max {whole.max():.3e}: OK", flush=True)
