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
    names = " or ".join(t.__name__ for t in (exc_type if isinstance(exc_type, tuple) else (exc_type,)))
    try:
        f(*a, **kw)
    except exc_type as e:
        return e
    except Exception as e:  # noqa: BLE001
        print(f"rank {R}: expected {names}, got {type(e).__name__}: {e}", flush=True)
        sys.exit(1)
    print(f"rank {R}: expected {names}, got no error", flush=True)
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
        # One call, one outcome: the others gave up this call, so it fails here too (on the node
        # board the late rank finds its part withdrawn) and leaves x as it was.
        x[:] = 7
        e = expect((psyne.TimeoutError, psyne.PeerLostError, psyne.AbortedError), g.all_reduce, x)
        assert (x == 7).all(), x
        print(f"rank {R}: OK (late) {type(e).__name__}: {e}", flush=True)
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
elif case == "fork":
    # Issue 33, item 3: a child forked by rank 0 after init() is refused every call (UsageError
    # naming both processes), before anything is queued, waited for or sent; the parents' call
    # is theirs alone (the child's all-reduce used to reach rank 1: 100 + 2).
    parent = os.getpid()
    done = g.all_reduce_async(np.ones(4))
    assert (done.wait() == 2.0).all()
    x = np.full(8, float(R + 1))
    if R == 0:
        rd, wr = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(rd)
            lines = []
            calls = [
                ("all_reduce", lambda: g.all_reduce(np.full(8, 100.0))),
                ("all_reduce_async", lambda: g.all_reduce_async(np.full(8, 100.0)).wait(5)),
                ("barrier", g.barrier),
                ("wait for the parent's request", lambda: done.wait(5)),
                ("split", lambda: g.split(0)),
            ]
            for name, call in calls:
                try:
                    call()
                    lines.append(f"bad {name}: no error")
                except psyne.UsageError as e:
                    ok = f"created in process {parent}" in str(e) and f"this is process {os.getpid()}" in str(e)
                    lines.append(f"{'ok' if ok else 'bad'} {name}: {e}")
                except BaseException as e:  # noqa: BLE001
                    lines.append(f"bad {name}: {type(e).__name__}: {e}")
                if lines[0].startswith("bad"):
                    break
            os.write(wr, "\n".join(lines).encode())
            os._exit(0 if all(line.startswith("ok") for line in lines) else 1)
        os.close(wr)
        deadline = time.monotonic() + 30
        while True:
            done_pid, status = os.waitpid(pid, os.WNOHANG)
            if done_pid == pid:
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                sys.exit("rank 0: the forked child did not finish in 30 s")
            time.sleep(0.01)
        report = os.read(rd, 65536).decode()
        os.close(rd)
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
            print(f"rank 0: the child's calls were not all refused:\n{report}", flush=True)
            sys.exit(1)
    g.all_reduce(x)
    assert (x == 3.0).all(), f"rank {R}: {x} (the child's contribution reached it?)"
    print(f"rank {R}: OK", flush=True)

elif case == "threads":
    # Two Python threads of rank 0 call at once: the one that comes second is refused
    # (UsageError naming both threads) while the first waits in its call for rank 1, which
    # joins only after hearing of the refusal (through a barrier of a second group).
    side = g.split(0)
    if R == 0:
        results = {}
        refused = threading.Event()

        def call(name):
            x = np.full(8, 1.0)
            try:
                g.all_reduce(x)
                results[name] = x
            except psyne.UsageError as e:
                results[name] = e
                refused.set()

        threads = [threading.Thread(target=call, args=(f"caller-{i}",), name=f"caller-{i}") for i in range(2)]
        for t in threads:
            t.start()
        assert refused.wait(30), "no call was refused"
        side.barrier()  # tell rank 1
        for t in threads:
            t.join(60)
        errors = [v for v in results.values() if isinstance(v, Exception)]
        sums = [v for v in results.values() if not isinstance(v, Exception)]
        assert len(errors) == 1 and len(sums) == 1, results
        msg = str(errors[0])
        assert "two threads at once" in msg and "'caller-0'" in msg and "'caller-1'" in msg, msg
        assert (sums[0] == 3.0).all(), sums
        # A non-blocking call holds the group for its thread until it finishes.
        req = g.all_reduce_async(np.full(4, 1.0))
        box = []
        th = threading.Thread(target=lambda: box.append(expect(psyne.UsageError, g.barrier)), name="other")
        th.start()
        th.join(30)
        assert box, "the other thread's call was not refused"
        side.barrier()
        assert (req.wait() == 3.0).all()
        # By turns (the first thread's calls finished) is fine.
        th = threading.Thread(target=lambda: box.append(g.all_reduce(np.full(4, 1.0))), name="later")
        th.start()
        th.join(30)
        assert (box[-1] == 3.0).all(), box
    else:
        side.barrier()
        x = np.full(8, 2.0)
        g.all_reduce(x)
        assert (x == 3.0).all(), x
        side.barrier()
        assert (g.all_reduce_async(np.full(4, 2.0)).wait() == 3.0).all()
        assert (g.all_reduce(np.full(4, 2.0)) == 3.0).all()
    print(f"rank {R}: OK", flush=True)

else:
    sys.exit(f"unknown case {case}")
