"""Runs on every rank under psyrun: canonical reduction order from Python. ``psyne.init(reduce_order=
"canonical")`` (and ``Group.with_reduce_order``) make float32/float64/float16 all-reduce, reduce and
reduce-scatter with sum, prod and avg equal, bit for bit, to the rank-order fold NumPy computes
pairwise (``((x0 + x1) + x2) + ...``, float16 through float32 as psyne does), on random inputs
that round. Exits 1 on the first difference."""

import sys

import numpy as np

import psyne

mode = sys.argv[1]
if mode == "init":
    g = psyne.init(reduce_order="canonical")
else:
    g = psyne.init().with_reduce_order("canonical")
assert g.reduce_order == "canonical", g.reduce_order
assert g.with_reduce_order("fast").reduce_order == "fast"
R, S = g.rank, g.size


def data(rank, dtype, count, op):
    rng = np.random.default_rng(97 * rank + count)
    if op == "prod":
        v = rng.uniform(0.75, 1.25, count)
    else:
        v = rng.uniform(-1000, 1000, count) / rng.choice([3.0, 7.0, 1000.0], count)
    return v.astype(dtype)


def fold(arrays, op, dtype):
    """The rank-order fold, each step rounded to ``dtype`` (float16 combined in float32)."""
    wide = np.float32 if dtype == np.float16 else dtype
    acc = arrays[0].copy()
    for a in arrays[1:]:
        x, y = acc.astype(wide), a.astype(wide)
        acc = (x * y if op == "prod" else x + y).astype(dtype)
    if op == "avg":
        acc = (acc.astype(wide) / wide(S)).astype(dtype)
    return acc


def same_bits(got, want, what):
    if got.tobytes() != want.tobytes():
        i = int(np.flatnonzero(got.view(np.uint8) != want.view(np.uint8))[0] // got.itemsize)
        print(f"rank {R}: {what}: element {i} is {got[i]!r}, expected {want[i]!r}", flush=True)
        sys.exit(1)


for dtype in (np.float32, np.float64, np.float16):
    for op in ("sum", "prod", "avg"):
        for count in (1, 5, 3001, 70001):
            inputs = [data(r, dtype, count, op) for r in range(S)]
            want = fold(inputs, op, dtype)
            what = f"{np.dtype(dtype).name} {op} count {count}"
            x = inputs[R].copy()
            g.all_reduce(x, op=op)
            same_bits(x, want, "all_reduce " + what)
            x = inputs[R].copy()
            g.reduce(x, op=op, root=S - 1)
            same_bits(x, want if R == S - 1 else inputs[R], "reduce " + what)
            n = g.chunk_len(count)
            out = np.empty(n, dtype)
            g.reduce_scatter(inputs[R], op=op, out=out)
            lo = (count // S) * R + min(R, count % S)
            same_bits(out, want[lo : lo + n], "reduce_scatter " + what)
print(f"rank {R}: canonical OK", flush=True)
