import time, sys, numpy as np, psyne
g = psyne.init(); n = g._n
a = np.ones(2, np.float32)
tag = dict(psyne._native.DTYPE_TAGS)["f32"] if "f32" in dict(psyne._native.DTYPE_TAGS) else None
k = int(sys.argv[1])
for _ in range(1000): g.all_reduce(a)
t0 = time.perf_counter()
for _ in range(k): g.all_reduce(a)
print(f"{(time.perf_counter()-t0)/k*1e9:.0f} ns per NumPy all_reduce, world of one")
