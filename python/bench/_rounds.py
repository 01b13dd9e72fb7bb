"""The timing loop the torch training benchmarks share (``torch_ddp.py``, ``torch_fsdp.py``): a
mode's step timed after warm-up, each rank's median, the slowest rank's; and the modes
alternated over rounds (order reversed every other round)."""

import statistics
import time
from typing import Callable, Dict, List

import torch
import torch.distributed as dist


def median_step(step: Callable[[str], None], mode: str, warmup: int, steps: int) -> float:
    """The slowest rank's median time of ``step(mode)`` in ms, over ``steps`` timed steps after
    ``warmup`` untimed ones and a barrier."""
    for _ in range(warmup):
        step(mode)
    dist.barrier()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step(mode)
        times.append(time.perf_counter() - t0)
    t = torch.tensor([statistics.median(times) * 1e3], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def alternated(modes: List[str], rounds: int, measure: Callable[[str], float]) -> Dict[str, List[float]]:
    """``measure(mode)`` for every mode, ``rounds`` times, the order reversed every other round."""
    results: Dict[str, List[float]] = {m: [] for m in modes}
    for i in range(rounds):
        for m in modes if i % 2 == 0 else modes[::-1]:
            results[m].append(measure(m))
    return results


def print_costs(results: Dict[str, List[float]], cost: str) -> None:
    """One line per mode: its median step, the ``cost`` (median step minus the ``local`` mode's),
    the cost paired round by round (median of step minus that round's ``local`` step), and every
    round's step, in ms."""
    local = statistics.median(results["local"])
    for m, v in results.items():
        med = statistics.median(v)
        paired = statistics.median(x - y for x, y in zip(v, results["local"]))
        print(f"{m:22s} step {med:8.2f} ms  {cost} {med - local:8.2f} ms  paired {paired:8.2f} ms  "
              f"rounds {' '.join(f'{x:.2f}' for x in v)}", flush=True)
