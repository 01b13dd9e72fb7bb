"""Runs on every rank under psyrun: torch.distributed with backend "psyne", every collective x
dtype x op, checked against a NumPy oracle; then the errors for tensors psyne cannot take.
Exits 1 on the first wrong result."""

import os
import sys

import numpy as np
import torch
import torch.distributed as dist

import psyne.torch  # noqa: F401  (registers the backend)

dist.init_process_group("psyne")
R, S = dist.get_rank(), dist.get_world_size()
assert dist.get_backend() == "psyne", dist.get_backend()
RO = dist.ReduceOp

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
for name in ("uint16", "uint32", "uint64"):
    if hasattr(torch, name):
        DTYPES.append(getattr(torch, name))
FLOAT_OPS = [("sum", RO.SUM), ("prod", RO.PRODUCT), ("min", RO.MIN), ("max", RO.MAX), ("avg", RO.AVG)]
INT_OPS = FLOAT_OPS + [("band", RO.BAND), ("bor", RO.BOR), ("bxor", RO.BXOR)]
COUNTS = [1, 5, 1001, 65537]


def is_float(dt):
    return dt.is_floating_point


def np_of(dt):
    return np.float32 if dt in (torch.bfloat16,) else torch.empty(0, dtype=dt).numpy().dtype


def data(rank, dt, n, salt=0):
    rng = np.random.default_rng(1000 * rank + 7 * n + salt + 31 * DTYPES.index(dt))
    if is_float(dt):
        v = rng.integers(-4, 5, n) / 2
    elif str(dt).startswith("torch.uint"):
        v = rng.integers(0, 4, n)
    else:
        v = rng.integers(-3, 4, n)
    if dt == torch.bfloat16:
        return torch.from_numpy(v.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(v.astype(np_of(dt)))


def to_np(t):
    return t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()


def oracle(op, ts, dt):
    a = np.stack([to_np(t) for t in ts]).astype(np.float64 if is_float(dt) else np_of(dt))
    with np.errstate(over="ignore"):
        if op == "sum":
            return a.sum(axis=0, dtype=a.dtype)
        if op == "avg":
            s = a.astype(np.float64).sum(axis=0) / S
            return s if is_float(dt) else np.trunc(s)
        if op == "prod":
            return a.prod(axis=0, dtype=a.dtype)
        if op == "min":
            return a.min(axis=0)
        if op == "max":
            return a.max(axis=0)
        return {"band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}[op].reduce(a, axis=0)


def same(got, want, what):
    g = to_np(got) if isinstance(got, torch.Tensor) else got
    w = to_np(want) if isinstance(want, torch.Tensor) else want
    ok = g.shape == np.shape(w) and (
        np.allclose(g.astype(np.float64), np.asarray(w, np.float64), rtol=1e-2, atol=0)
        if g.dtype.kind == "f"
        else np.array_equal(g, np.asarray(w).astype(g.dtype))
    )
    if not ok:
        print(f"rank {R}: WRONG {what}: got {g!r:.300} want {w!r:.300}", flush=True)
        sys.exit(1)


for dt in DTYPES:
    for n in COUNTS:
        tag = f"{dt} n={n}"
        ops = FLOAT_OPS if is_float(dt) else INT_OPS
        for name, op in ops:
            t = data(R, dt, n)
            dist.all_reduce(t, op=op)
            same(t, oracle(name, [data(r, dt, n) for r in range(S)], dt), f"all_reduce {name} {tag}")
            t = data(R, dt, n)
            dist.reduce(t, dst=S - 1, op=op)
            want = oracle(name, [data(r, dt, n) for r in range(S)], dt) if R == S - 1 else data(R, dt, n)
            same(t, want, f"reduce {name} {tag}")
            # reduce_scatter (tensor and list forms): every rank passes S*n
            big = [data(r, dt, S * n, 1) for r in range(S)]
            full = oracle(name, big, dt)
            out = torch.empty(n, dtype=dt)
            dist.reduce_scatter_tensor(out, big[R], op=op)
            same(out, full[R * n:(R + 1) * n], f"reduce_scatter_tensor {name} {tag}")
            out = torch.empty(n, dtype=dt)
            dist.reduce_scatter(out, [c.clone() for c in big[R].chunk(S)], op=op)
            same(out, full[R * n:(R + 1) * n], f"reduce_scatter list {name} {tag}")
        # async form, get_future
        t = data(R, dt, n)
        w = dist.all_reduce(t, async_op=True)
        w.wait()
        fut = w.get_future().wait()
        assert fut[0] is t or torch.equal(fut[0], t)
        same(t, oracle("sum", [data(r, dt, n) for r in range(S)], dt), f"all_reduce async {tag}")
        # broadcast
        t = data(R, dt, n)
        dist.broadcast(t, src=S - 1)
        same(t, data(S - 1, dt, n), f"broadcast {tag}")
        # all_gather (list, into tensor)
        outs = [torch.empty(n, dtype=dt) for _ in range(S)]
        dist.all_gather(outs, data(R, dt, n))
        for r in range(S):
            same(outs[r], data(r, dt, n), f"all_gather list {tag}")
        o = torch.empty(S * n, dtype=dt)
        dist.all_gather_into_tensor(o, data(R, dt, n))
        same(o, torch.cat([data(r, dt, n) for r in range(S)]), f"all_gather_into_tensor {tag}")
        # all_to_all (single, list)
        mine = data(R, dt, S * n, 2)
        o = torch.empty(S * n, dtype=dt)
        dist.all_to_all_single(o, mine)
        same(o, torch.cat([data(r, dt, S * n, 2)[R * n:(R + 1) * n] for r in range(S)]), f"all_to_all_single {tag}")
        outs = [torch.empty(n, dtype=dt) for _ in range(S)]
        dist.all_to_all(outs, [c.clone() for c in mine.chunk(S)])
        for r in range(S):
            same(outs[r], data(r, dt, S * n, 2)[R * n:(R + 1) * n], f"all_to_all list {tag}")
        # gather, scatter
        g = [torch.empty(n, dtype=dt) for _ in range(S)] if R == 0 else None
        dist.gather(data(R, dt, n), g, dst=0)
        if R == 0:
            for r in range(S):
                same(g[r], data(r, dt, n), f"gather {tag}")
        o = torch.empty(n, dtype=dt)
        dist.scatter(o, [data(r, dt, n, 3) for r in range(S)] if R == S - 1 else None, src=S - 1)
        same(o, data(R, dt, n, 3), f"scatter {tag}")
        # send/recv around a ring, blocking and isend/irecv
        if S > 1:
            nxt, prv = (R + 1) % S, (R - 1) % S
            buf = torch.empty(n, dtype=dt)
            if R % 2 == 0:
                dist.send(data(R, dt, n), nxt)
                dist.recv(buf, prv)
            else:
                dist.recv(buf, prv)
                dist.send(data(R, dt, n), nxt)
            same(buf, data(prv, dt, n), f"send/recv {tag}")
dist.barrier()

# subgroups through new_group: the even ranks
evens = dist.new_group(list(range(0, S, 2)), backend="psyne")
if R % 2 == 0:
    t = torch.tensor([float(R)])
    dist.all_reduce(t, group=evens)
    same(t, np.array([float(sum(range(0, S, 2)))]), "new_group all_reduce")


def expect(exc, f, *a, **kw):
    try:
        f(*a, **kw)
    except exc:
        return
    except Exception as e:  # noqa: BLE001
        print(f"rank {R}: expected {exc.__name__}, got {type(e).__name__}: {e}", flush=True)
        sys.exit(1)
    print(f"rank {R}: expected {exc.__name__}, no error", flush=True)
    sys.exit(1)


# tensors psyne cannot take are refused on every rank before anything is sent
expect(ValueError, dist.all_reduce, torch.zeros(4, 4).t())
expect(TypeError, dist.all_reduce, torch.zeros(4).to_sparse())
expect(TypeError, dist.all_reduce, torch.zeros(4, dtype=torch.bool))
t = torch.ones(3)
dist.all_reduce(t)
same(t, np.full(3, float(S)), "usable after refusals")
dist.barrier()
print(f"rank {R}/{S}: torch OK", flush=True)
sys.stdout.flush()
dist.destroy_process_group()
os._exit(0)
