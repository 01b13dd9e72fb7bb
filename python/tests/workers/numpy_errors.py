"""Runs under psyrun; argv[1] names the case. Each rank checks the exception it gets and prints
"OK" (so the job exits 0) only if it is the right one."""

import os
import sys
import threading
import time

import numpy as np

import psyne

case = sys.argv[1]
g = psyne.init()
R, S = g.rank, g.size


def expect(exc_type, f, *a, **kw):
    try:
        f(*a, **kw)
    except exc_type as e:
        return e
    except Exception as e:  # noqa: BLE001
        print(f"rank {R}: expected {exc_type.__name__}, got {type(e).__name__}: {e}", flush=True)
        sys.exit(1)
    print(f"rank {R}: expected {exc_type.__name__}, got no error", flush=True)
    sys.exit(1)


if case == "arguments":
    # refused on the calling rank before anything is sent; the group stays usable
    x = np.zeros(8, np.float32)
    e = expect(ValueError, g.all_reduce, np.zeros(8)[::2])
    assert "contiguous" in str(e), e
    e = expect(TypeError, g.all_reduce, np.zeros(4, np.complex64))
    assert "complex64" in str(e), e
    expect(TypeError, g.all_reduce, np.zeros(4, bool))
    expect(TypeError, g.all_reduce, np.zeros(4, ">f4"))  # non-native byte order
    expect(TypeError, g.all_reduce, [1.0, 2.0])
    expect(TypeError, g.all_reduce, "abc")
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    expect(ValueError, g.all_reduce, ro)
    expect(ValueError, g.all_reduce, x, "bogus")
    expect(ValueError, g.broadcast, x, S)
    expect(ValueError, g.reduce_scatter, x, "sum", np.zeros(100, np.float32))
    expect(ValueError, g.all_gather, x, np.zeros(9 * S, np.float32))  # chunk 9, input 8
    expect(TypeError, g.all_gather, x, np.zeros(8 * S, np.float64))
    expect(ValueError, g.all_to_all, x, x)  # out overlaps input
    e = expect(psyne.InvalidArgumentError, g.all_reduce, x, "band")
    assert isinstance(e, ValueError) and e.kind == "InvalidArgument", e
    if S > 1:
        expect(ValueError, g.send, x, R)
    g.all_reduce(x)  # still usable
    print(f"rank {R}: OK", flush=True)

elif case == "mismatch":
    x = np.zeros(16, np.float32)
    if R == 0:
        e = expect(psyne.MismatchError, g.all_reduce, x)
    else:
        e = expect(psyne.MismatchError, g.all_gather, x)
    assert e.kind == "Mismatch" and isinstance(e, psyne.Error), e
    e2 = expect(psyne.AbortedError, g.barrier)  # the group refuses further calls
    print(f"rank {R}: OK {type(e).__name__} / {type(e2).__name__}", flush=True)

elif case == "peer_lost":
    x = np.zeros(1 << 16, np.float32)
    g.barrier()
    if R == S - 1:
        os._exit(0)  # leaves without a word
    e = expect((psyne.PeerLostError, psyne.AbortedError), g.all_reduce, x)
    assert isinstance(e, ConnectionError) or isinstance(e, psyne.AbortedError), e
    print(f"rank {R}: OK {type(e).__name__} peer={e.peer}: {e}", flush=True)

elif case == "timeout":
    # PSY_TIMEOUT is short; the last rank comes late, the others time out
    x = np.zeros(4, np.float32)
    if R == S - 1:
        time.sleep(float(os.environ["PSY_TIMEOUT"]) * 3)
        # Whether the late rank's own call fails depends on the engine (the node board may hold
        # the data the others left); it must not hang either way.
        try:
            g.all_reduce(x)
        except psyne.Error:
            pass
        print(f"rank {R}: OK (late)", flush=True)
    else:
        t0 = time.monotonic()
        e = expect((psyne.TimeoutError, psyne.PeerLostError, psyne.AbortedError), g.all_reduce, x)
        took = time.monotonic() - t0
        assert took < float(os.environ["PSY_TIMEOUT"]) * 2.5, took
        if R == 0:
            assert isinstance(e, psyne.TimeoutError) and isinstance(e, TimeoutError), e
        print(f"rank {R}: OK {type(e).__name__} after {took:.1f} s", flush=True)

elif case == "gil":
    # a Python thread keeps counting while this rank is blocked in a collective
    count = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    g.barrier()
    if R == 0:
        th = threading.Thread(target=spin)
        th.start()
        time.sleep(0.05)
        before = count[0]
        t0 = time.monotonic()
        g.barrier()  # the other rank joins 1 s later
        blocked = time.monotonic() - t0
        during = count[0] - before
        stop.set()
        th.join(10)
        assert blocked > 0.8, blocked
        assert during > 100_000, f"the counting thread advanced only {during} in {blocked:.2f} s"
        print(f"rank {R}: OK counted {during} while blocked {blocked:.2f} s", flush=True)
    else:
        time.sleep(1.0)
        g.barrier()
        print(f"rank {R}: OK", flush=True)
else:
    sys.exit(f"unknown case {case}")
