"""Runs on every rank under psyrun: one collective (argv[1], or "all") x every dtype x every op x
several counts, blocking and non-blocking, against a NumPy oracle. Every rank can compute every
other rank's input (a deterministic function of rank, dtype and count), so each checks its own
result locally. Exits 1 on the first wrong result, after printing what differed."""

import asyncio
import sys

import numpy as np

import psyne

g = psyne.init()
R, S = g.rank, g.size
COUNTS = [0, 1, 5, 1001, 70001]
DTYPES = [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
FLOAT_OPS = ["sum", "prod", "min", "max", "avg"]
INT_OPS = FLOAT_OPS + ["band", "bor", "bxor"]


def data(rank, dtype, count, salt=0):
    """Small values, so that sums and products of up to 4 ranks are exact in every dtype."""
    rng = np.random.default_rng(1000 * rank + 7 * count + salt + 13 * np.dtype(dtype).num)
    if np.dtype(dtype).kind == "u":
        v = rng.integers(0, 4, count)
    elif np.dtype(dtype).kind == "i":
        v = rng.integers(-3, 4, count)
    else:
        v = rng.integers(-4, 5, count) / 2  # halves: exact in f16 too
    return v.astype(dtype)


def oracle(op, arrays, dtype):
    a = np.stack(arrays) if arrays[0].size else np.zeros((len(arrays), 0), dtype)
    kind = np.dtype(dtype).kind
    with np.errstate(over="ignore"):
        if op in ("sum", "avg"):
            s = a.sum(axis=0, dtype=dtype)
            if op == "avg":
                if kind == "f":
                    return (a.astype(np.float64).sum(axis=0) / S).astype(dtype)
                return (np.trunc(a.astype(np.float64).sum(axis=0) / S)).astype(dtype)
            return s
        if op == "prod":
            return a.prod(axis=0, dtype=dtype)
        if op == "min":
            return a.min(axis=0)
        if op == "max":
            return a.max(axis=0)
        f = {"band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}[op]
        return f.reduce(a, axis=0)


def same(got, want, what):
    if got is None or want is None:
        ok = got is None and want is None
    else:
        ok = got.dtype == want.dtype and got.shape == want.shape
        if ok and got.size:
            if np.dtype(got.dtype).kind == "f":
                ok = np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=2e-3, atol=0)
            else:
                ok = np.array_equal(got, want)
    if not ok:
        print(f"rank {R}: WRONG {what}: got {got!r:.300} want {want!r:.300}", flush=True)
        sys.exit(1)


def ops_for(dtype):
    return INT_OPS if np.dtype(dtype).kind in "iu" else FLOAT_OPS


def chunks(count):
    """The even split of count over the group, as (start, end) per rank."""
    base, extra = divmod(count, S)
    out, start = [], 0
    for r in range(S):
        n = base + (1 if r < extra else 0)
        out.append((start, start + n))
        start += n
    return out


def t_all_reduce(dt, n, mode):
    for op in ops_for(dt):
        mine = data(R, dt, n)
        want = oracle(op, [data(r, dt, n) for r in range(S)], dt)
        if mode == "async":
            req = g.all_reduce_async(mine, op)
            got = req.wait()
            assert got is mine
        else:
            got = g.all_reduce(mine, op)
        same(mine, want, f"all_reduce {op} {np.dtype(dt)} n={n} {mode}")


def t_reduce(dt, n, mode):
    root = S - 1
    for op in ops_for(dt):
        mine = data(R, dt, n)
        want = oracle(op, [data(r, dt, n) for r in range(S)], dt) if R == root else data(R, dt, n)
        (g.reduce_async(mine, op, root).wait() if mode == "async" else g.reduce(mine, op, root))
        same(mine, want, f"reduce {op} {np.dtype(dt)} n={n} {mode}")


def t_broadcast(dt, n, mode):
    root = 1 % S
    mine = data(R, dt, n)
    (g.broadcast_async(mine, root).wait() if mode == "async" else g.broadcast(mine, root))
    same(mine, data(root, dt, n), f"broadcast {np.dtype(dt)} n={n} {mode}")


def t_all_gather(dt, n, mode):
    mine = data(R, dt, n)
    want = np.stack([data(r, dt, n) for r in range(S)]) if n else np.zeros((S, 0), dt)
    got = g.all_gather_async(mine).wait() if mode == "async" else g.all_gather(mine)
    same(got, want, f"all_gather {np.dtype(dt)} n={n} {mode}")
    # uneven: out of total n elements, rank r contributes its chunk
    total = n
    spans = chunks(total)
    full = data(99, dt, total)
    out = np.empty(total, dt)
    lo, hi = spans[R]
    g.all_gather(full[lo:hi].copy(), out=out)
    same(out, full, f"all_gather into uneven {np.dtype(dt)} n={n}")


def t_reduce_scatter(dt, n, mode):
    spans = chunks(n)
    lo, hi = spans[R]
    for op in ops_for(dt):
        mine = data(R, dt, n)
        want = oracle(op, [data(r, dt, n) for r in range(S)], dt)[lo:hi]
        got = g.reduce_scatter_async(mine, op).wait() if mode == "async" else g.reduce_scatter(mine, op)
        same(got, want, f"reduce_scatter {op} {np.dtype(dt)} n={n} {mode}")


def t_scatter(dt, n, mode):
    root = S - 1
    spans = chunks(n)
    lo, hi = spans[R]
    full = data(root, dt, n)
    x = full if R == root else None
    kw = {} if R == root else {"out": np.empty(hi - lo, dt), "count": n}
    got = g.scatter_async(x, root, **kw).wait() if mode == "async" else g.scatter(x, root, **kw)
    same(got, full[lo:hi], f"scatter {np.dtype(dt)} n={n} {mode}")


def t_gather(dt, n, mode):
    root = 0
    spans = chunks(n)
    lo, hi = spans[R]
    full = data(42, dt, n)
    got = g.gather_async(full[lo:hi].copy(), root, count=n).wait() if mode == "async" else g.gather(full[lo:hi].copy(), root, count=n)
    same(got, full if R == root else None, f"gather {np.dtype(dt)} n={n} {mode}")


def t_all_to_all(dt, n, mode):
    # every rank passes n elements; chunk j of rank r's input goes to rank j
    mine = data(R, dt, n)
    spans = chunks(n)
    lo, hi = spans[R]
    want = np.concatenate([data(r, dt, n)[lo:hi] for r in range(S)]) if n else np.zeros(0, dt)
    got = g.all_to_all_async(mine).wait() if mode == "async" else g.all_to_all(mine)
    same(got, want, f"all_to_all {np.dtype(dt)} n={n} {mode}")


def t_send_recv(dt, n, mode):
    if S == 1:
        return
    nxt, prv = (R + 1) % S, (R - 1) % S
    buf = np.empty(n, dt)
    if mode == "async":
        s = g.send_async(data(R, dt, n), nxt)
        got = g.recv_async(buf, prv).wait()
        s.wait()
    elif R % 2 == 0:
        g.send(data(R, dt, n), nxt)
        got = g.recv(buf, prv)
    else:
        got = g.recv(buf, prv)
        g.send(data(R, dt, n), nxt)
    same(got, data(prv, dt, n), f"send/recv {np.dtype(dt)} n={n} {mode}")


TESTS = {
    "all_reduce": t_all_reduce,
    "reduce": t_reduce,
    "broadcast": t_broadcast,
    "all_gather": t_all_gather,
    "reduce_scatter": t_reduce_scatter,
    "scatter": t_scatter,
    "gather": t_gather,
    "all_to_all": t_all_to_all,
    "send_recv": t_send_recv,
}


def t_misc():
    # barrier, split, with_algo, asyncio, ordering of async and blocking calls, buffer protocol
    g.barrier()
    g.barrier_async().wait(timeout=60)
    sub = g.split(R % 2, key=-R)
    assert sub is not None and sub.size == len(range(R % 2, S, 2)), sub
    x = np.array([R], np.int64)
    sub.all_reduce(x)
    assert x[0] == sum(range(R % 2, S, 2)), x
    assert sub.rank == sorted(range(R % 2, S, 2), key=lambda r: -r).index(R)
    none = g.split(None if R == 0 else 1)
    assert (none is None) == (R == 0)
    ring = g.with_algo("ring")
    y = np.ones(10, np.float32)
    ring.all_reduce(y)
    same(y, np.full(10, S, np.float32), "with_algo ring")
    # async then blocking then async: issue order kept
    a = np.full(1000, R, np.int32)
    b = np.full(7, R, np.int32)
    c = np.full(3, R, np.int32)
    ra = g.all_reduce_async(a, "max")
    g.all_reduce(b, "sum")
    rc = g.all_reduce_async(c, "min")
    assert rc.wait(timeout=60) is c and ra.wait(timeout=60) is a and ra.test() and rc.test()
    same(a, np.full(1000, S - 1, np.int32), "async max")
    same(b, np.full(7, sum(range(S)), np.int32), "blocking between asyncs")
    same(c, np.zeros(3, np.int32), "async min")

    async def main():
        z = np.full(4, 2.0)
        r = await g.all_reduce_async(z, "prod")
        return r

    same(asyncio.run(main()), np.full(4, 2.0**S), "asyncio await")
    # buffer protocol and DLPack objects are used in place
    ba = bytearray([R + 1] * 8)
    g.all_reduce(ba, "max")
    assert ba == bytearray([S] * 8), ba
    import array

    arr = array.array("d", [1.0, 2.0])
    g.all_reduce(arr)
    assert list(arr) == [S * 1.0, S * 2.0], arr
    # 2-D arrays: reductions element-wise, all_gather stacks
    m = np.full((3, 4), R, np.float64)
    g.all_reduce(m)
    same(m, np.full((3, 4), sum(range(S)), np.float64), "2-D all_reduce")
    st = g.all_gather(np.full((2, 2), R, np.int16))
    same(st, np.stack([np.full((2, 2), r, np.int16) for r in range(S)]), "2-D all_gather")


which = sys.argv[1] if len(sys.argv) > 1 else "all"
modes = ["blocking", "async"]
names = list(TESTS) if which == "all" else [which] if which in TESTS else []
for name in names:
    for dt in DTYPES:
        for n in COUNTS:
            for mode in modes:
                TESTS[name](dt, n, mode)
if which in ("all", "misc"):
    t_misc()
g.barrier()
print(f"rank {R}/{S}: {which} OK", flush=True)
