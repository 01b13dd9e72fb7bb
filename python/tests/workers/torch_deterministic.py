"""Runs on every rank under psyrun: with ``torch.use_deterministic_algorithms(True)`` switched on
after ``init_process_group("psyne")``, float32/float64 ``all_reduce`` (blocking and async, SUM and
AVG), ``reduce`` and ``reduce_scatter_tensor`` equal, bit for bit, the rank-order fold
``((x0 + x1) + x2) + ...`` on inputs that round, at sizes on either side of psyne's algorithm
switches. Prints how many elements fast order (deterministic mode off) got otherwise, for the log.
Exits 1 on the first difference."""

import sys

import torch
import torch.distributed as dist

import psyne.torch  # noqa: F401

dist.init_process_group("psyne")
R, S = dist.get_rank(), dist.get_world_size()


def data(rank, dtype, count):
    g = torch.Generator().manual_seed(97 * rank + count)
    v = (torch.rand(count, generator=g, dtype=torch.float64) - 0.5) * 2000
    return (v / torch.tensor([3.0, 7.0, 1000.0], dtype=torch.float64)[torch.arange(count) % 3]).to(dtype)


def fold(arrays, avg):
    acc = arrays[0].clone()
    for a in arrays[1:]:
        acc = acc + a
    return acc / S if avg else acc


def same_bits(got, want, what):
    if not torch.equal(got.view(-1), want.view(-1)):
        i = int((got != want).nonzero()[0])
        print(f"rank {R}: {what}: element {i} is {got[i].item()!r}, expected {want[i].item()!r}", flush=True)
        sys.exit(1)


differ_fast = 0
for dtype in (torch.float32, torch.float64):
    for count in (1, 7, 3001, 70001, 600001):
        inputs = [data(r, dtype, count) for r in range(S)]
        want = fold(inputs, False)
        what = f"{dtype} count {count}"
        torch.use_deterministic_algorithms(False)
        x = inputs[R].clone()
        dist.all_reduce(x)
        differ_fast += int((x != want).sum())
        torch.use_deterministic_algorithms(True)
        x = inputs[R].clone()
        dist.all_reduce(x)
        same_bits(x, want, "all_reduce " + what)
        x = inputs[R].clone()
        dist.all_reduce(x, async_op=True).wait()
        same_bits(x, want, "all_reduce async " + what)
        x = inputs[R].clone()
        dist.all_reduce(x, op=dist.ReduceOp.AVG)
        same_bits(x, fold(inputs, True), "all_reduce avg " + what)
        x = inputs[R].clone()
        dist.reduce(x, dst=S - 1)
        same_bits(x, want if R == S - 1 else inputs[R], "reduce " + what)
        even = count - count % S
        out = torch.empty(even // S, dtype=dtype)
        dist.reduce_scatter_tensor(out, inputs[R][:even].clone())
        chunk = even // S
        same_bits(out, fold([i[:even] for i in inputs], False)[R * chunk : (R + 1) * chunk], "reduce_scatter " + what)
print(f"rank {R}: fast order differed from the rank-order fold in {differ_fast} elements", flush=True)
print(f"rank {R}/{S}: deterministic OK", flush=True)
dist.destroy_process_group()
