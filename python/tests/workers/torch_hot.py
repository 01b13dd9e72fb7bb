"""Runs on every rank under psyrun: the C++ half of the blocking all_reduce (psyne/_torch_hot.cpp),
or, with PSY_TORCH_HOT=off, the Python method, on the calls that go to the other half: which half
a group's ``allreduce`` is, several tensors in one call checked element by element, a call with
one tensor psyne cannot take (refused whole: the others untouched), keyword and option-less calls,
PREMUL_SUM, and psyne's own error (ranks that disagree on the length) raised through the call.
Exits 1 on the first wrong result."""

import os
import sys

import numpy as np
import torch
import torch.distributed as dist

import psyne
import psyne.torch as pt

dist.init_process_group("psyne")
R, S = dist.get_rank(), dist.get_world_size()
pg = dist.distributed_c10d._get_default_group()
RO = dist.ReduceOp
MODE = os.environ.get("PSY_TORCH_HOT", "auto")


def fail(what):
    print(f"rank {R}: {what}", flush=True)
    sys.exit(1)


def same(got, want, what):
    if not np.array_equal(got.numpy(), np.asarray(want)):
        fail(f"{what}: got {got.numpy()!r}, want {want!r}")


def rows(r):
    """Rank r's tensors: three dtypes, three lengths."""
    return [
        torch.arange(5, dtype=torch.float32) + r,
        torch.arange(3, dtype=torch.int64) * (r + 1),
        torch.full((2, 2), float(r + 2), dtype=torch.float64),
    ]


def options(op, blocking=True):
    o = dist.AllreduceOptions()
    o.reduceOp = op
    o.asyncOp = not blocking
    return o


# which half serves dist.all_reduce
half = type(pg.allreduce).__name__
evens = dist.new_group(list(range(S)), backend="psyne")
want_half = "method" if MODE == "off" else "Hot"
for g, what in ((pg, "default group"), (evens, "new_group")):
    if type(g.allreduce).__name__ != want_half:
        fail(f"{what}: allreduce is a {type(g.allreduce).__name__}, want {want_half} (PSY_TORCH_HOT={MODE})")

# several tensors in one blocking call, each against the oracle, for SUM, MAX and PRODUCT
for name, op, fold in (("sum", RO.SUM, np.add), ("max", RO.MAX, np.maximum), ("prod", RO.PRODUCT, np.multiply)):
    ts = rows(R)
    work = pg.allreduce(ts, options(op))
    work.wait()
    for i, t in enumerate(ts):
        want = rows(0)[i].numpy()
        for r in range(1, S):
            want = fold(want, rows(r)[i].numpy())
        same(t, want, f"{name} tensor {i} of 3")

# one tensor psyne cannot take: the call is refused whole, before anything is sent
ts = [torch.ones(4), torch.ones(4, 4).t(), torch.ones(2)]
try:
    pg.allreduce(ts, options(RO.SUM))
    fail("a non-contiguous tensor among three was taken")
except ValueError as e:
    if "not contiguous" not in str(e):
        fail(f"the refusal does not say why: {e}")
same(ts[0], np.ones(4), "the first tensor of a refused call")

# calls the C++ half passes on: keywords, no options (non-blocking), PREMUL_SUM
t = torch.ones(3)
pg.allreduce(tensors=[t], opts=options(RO.SUM)).wait()
same(t, np.full(3, float(S)), "keyword call")
t = torch.ones(3)
pg.allreduce([t]).wait()
same(t, np.full(3, float(S)), "call without options")
t = torch.ones(4)
dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0))
same(t, np.full(4, 2.0 * S), "PREMUL_SUM")
t = torch.ones(4)
dist.all_reduce(t, group=evens)
same(t, np.full(4, float(S)), "the second group")

# psyne's own error through the call: the ranks disagree on the length
if S > 1:
    try:
        dist.all_reduce(torch.ones(4 + R))
        fail("ranks with different lengths did not fail")
    except psyne.MismatchError as e:
        print(f"rank {R}: mismatch raised: {type(e).__name__}", flush=True)
print(f"rank {R}/{S}: hot OK ({half})", flush=True)
sys.stdout.flush()
os._exit(0)
