"""The timing both scripts here use: ``f()`` called ``k`` times after a barrier, ``reps`` times;
the median of the reps' mean per call, in microseconds (this rank's)."""

import time

import torch.distributed as dist


def best(f, k=20000, reps=7):
    out = []
    for _ in range(reps):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(k):
            f()
        out.append((time.perf_counter() - t0) / k * 1e6)
    out.sort()
    return out[len(out) // 2]
