"""Every collective, before and after, on small arrays: `psyrun -n 4 python3 cheatsheet.py`.
Each rank prints what it had and what it got, and checks it."""

import numpy as np

import psyne

g = psyne.init()
r, n = g.rank, g.size


def show(name, before, after, want):
    assert np.array_equal(after, want), (name, after, want)
    print(f"rank {r}: {name:<15} {np.asarray(before).tolist()!s:<24} -> {np.asarray(after).tolist()}", flush=True)


x = np.array([r, 10 * r], np.int64)
show("all_reduce sum", x.copy(), g.all_reduce(x.copy(), "sum"), np.array([1, 10]) * sum(range(n)))
show("all_reduce max", x.copy(), g.all_reduce(x.copy(), "max"), np.array([1, 10]) * (n - 1))
show("broadcast 0", x.copy(), g.broadcast(x.copy(), root=0), np.array([0, 0]))
red = g.reduce(x.copy(), "sum", root=0)
show("reduce to 0", x, red, np.array([1, 10]) * sum(range(n)) if r == 0 else x)
show("all_gather", x, g.all_gather(x), np.array([[q, 10 * q] for q in range(n)]))
full = np.arange(2 * n, dtype=np.int64)
show("reduce_scatter", full, g.reduce_scatter(full, "sum"), full[2 * r:2 * r + 2] * n)
show("scatter from 0", full if r == 0 else [], g.scatter(full if r == 0 else None, 0, count=2 * n, out=np.empty(2, np.int64)), full[2 * r:2 * r + 2])
got = g.gather(x, root=0)
show("gather to 0", x, got if r == 0 else np.array([]), np.array([[q, 10 * q] for q in range(n)]).ravel() if r == 0 else np.array([]))
a2a = np.array([100 * r + j for j in range(n)], np.int64)
show("all_to_all", a2a, g.all_to_all(a2a), np.array([100 * q + r for q in range(n)]))
if n > 1:
    buf = np.empty(2, np.int64)
    if r == 0:
        g.send(x, 1)
    if r == 1:
        show("recv from 0", buf.copy(), g.recv(buf, 0), np.array([0, 0]))
g.barrier()
print(f"rank {r}: cheatsheet OK", flush=True)
