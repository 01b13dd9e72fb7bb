"""Runs on 2 ranks under psyrun; argv[1] names the case: numpy-small (the node board), numpy-large
(the ring over links), numpy-async (``Request.wait`` on the worker thread's call), torch (the
torch.distributed backend), numpy-handler (a SIGINT handler that calls into the group while
the call waits: refused with RuntimeError, which the handler raises, instead of a deadlock), or
init (rank 0 waits in ``psyne.init()`` for rank 1, which never calls it).

Rank 0 prints ``ready pid=PID`` and enters an all-reduce that rank 1 never joins; the test then
sends SIGINT to that pid. Rank 0 prints how long the call took to raise ``KeyboardInterrupt``,
then that the group refuses the next call (and how), and exits with code 3, which ends the job
(psyrun then stops rank 1). Rank 1 makes no psyne call: it waits for a signal, alive, so that
rank 0's wait can only end by the interrupt or the timeout."""

import os
import signal
import sys
import time

import numpy as np

case = sys.argv[1]
if case == "init":
    import psyne

    if os.environ["PSY_RANK"] == "1":
        print("rank 1: waiting outside psyne", flush=True)
        while True:
            signal.pause()
    started = time.monotonic()
    print(f"ready pid={os.getpid()}", flush=True)
    try:
        psyne.init()
    except KeyboardInterrupt as e:
        print(f"rank 0: KeyboardInterrupt after {time.monotonic() - started:.2f} s: {e}", flush=True)
    else:
        print("rank 0: the call returned", flush=True)
        sys.exit(1)
    sys.exit(3)
elif case == "torch":
    import torch
    import torch.distributed as dist

    import psyne.torch  # noqa: F401  (registers the backend)

    dist.init_process_group("psyne")
    R = dist.get_rank()
else:
    import psyne

    g = psyne.init()
    R = g.rank

if R == 1:
    print("rank 1: waiting outside psyne", flush=True)
    while True:
        signal.pause()

n = 100_000 if case == "numpy-large" else 8
x = np.ones(n)


def call():
    if case == "torch":
        dist.all_reduce(torch.ones(n, dtype=torch.float64))
    elif case == "numpy-async":
        g.all_reduce_async(x).wait()
    else:
        g.all_reduce(x)


expected = KeyboardInterrupt
if case == "numpy-handler":
    expected = RuntimeError

    def handler(signum, frame):
        g.revoke()  # refused: the waiting call holds the group

    signal.signal(signal.SIGINT, handler)

started = time.monotonic()
print(f"ready pid={os.getpid()}", flush=True)
try:
    call()
except expected as e:
    print(f"rank 0: {type(e).__name__} after {time.monotonic() - started:.2f} s: {e}", flush=True)
except BaseException as e:  # noqa: BLE001
    print(f"rank 0: {type(e).__name__} instead of {expected.__name__}: {e}", flush=True)
    sys.exit(1)
else:
    print("rank 0: the call returned", flush=True)
    sys.exit(1)

t0 = time.monotonic()
try:
    call()
except Exception as e:  # noqa: BLE001
    print(f"rank 0: refused {type(e).__name__} after {time.monotonic() - t0:.2f} s: {e}", flush=True)
else:
    print("rank 0: the next call was not refused", flush=True)
    sys.exit(1)
sys.exit(3)
