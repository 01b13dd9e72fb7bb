"""Runs on every rank under psyrun: the asynchronous Works of the psyne torch backend.

1. Every collective with ``async_op=True`` (and isend/irecv): the Work's Future completes on its
   own, without ``wait()`` (a ``then`` callback sets an event, awaited with the job's deadline),
   with the right result, element by element; then ``wait()`` returns True, ``is_completed()``
   is True and ``exception()`` None.
2. A 64 MiB all_reduce with ``async_op=True`` returns before it has finished.
3. ``wait(timeout)`` on a call a peer has not issued yet raises ``psyne.TimeoutError`` and the
   call goes on: once the peer issues it, ``wait()`` returns True with the right result.
4. Errors: every collective issued with different counts (or roots, or calls) on different ranks,
   each on a fresh group: psyne's ``MismatchError`` is raised through ``wait()`` and through the
   Future (in both orders), ``exception()`` holds it, ``is_completed()`` is True.
Exits 1 on the first wrong result; prints "async OK"."""

import os
import sys
import threading

import torch
import torch.distributed as dist

import psyne
import psyne.torch  # noqa: F401

dist.init_process_group("psyne")
R, S = dist.get_rank(), dist.get_world_size()
DEADLINE = float(os.environ.get("PSY_TIMEOUT", "60"))


def fail(what):
    print(f"rank {R}: {what}", flush=True)
    sys.exit(1)


def data(rank, n, salt=0):
    g = torch.Generator().manual_seed(100 * rank + salt)
    return torch.randint(-4, 5, (n,), generator=g).float()


def completes_alone(work, what):
    """The Work's Future completes without wait(); its value."""
    done = threading.Event()
    chained = work.get_future().then(lambda f: done.set())
    if not done.wait(DEADLINE):
        fail(f"{what}: the Future did not complete within {DEADLINE} s without wait()")
    chained.wait()
    if work.wait() is not True or not work.is_completed() or work.exception() is not None:
        fail(f"{what}: after completing, wait/is_completed/exception are wrong")
    return work.get_future().value()


def same(got, want, what):
    if not torch.equal(got, want):
        fail(f"{what}: got {got.tolist()[:8]}, want {want.tolist()[:8]}")


def check_results():
    n = 5
    total = sum(data(r, S * n) for r in range(S))
    x = data(R, S * n)
    completes_alone(dist.all_reduce(x, async_op=True), "all_reduce")
    same(x, total, "all_reduce")
    x = data(R, n)
    completes_alone(dist.broadcast(x, src=S - 1, async_op=True), "broadcast")
    same(x, data(S - 1, n), "broadcast")
    x = data(R, S * n)
    completes_alone(dist.reduce(x, dst=0, async_op=True), "reduce")
    if R == 0:
        same(x, total, "reduce")
    out = torch.empty(S * n)
    completes_alone(dist.all_gather_into_tensor(out, data(R, n), async_op=True), "all_gather_into_tensor")
    same(out, torch.cat([data(r, n) for r in range(S)]), "all_gather_into_tensor")
    outs = [torch.empty(n) for _ in range(S)]
    completes_alone(dist.all_gather(outs, data(R, n), async_op=True), "all_gather list")
    same(torch.cat(outs), torch.cat([data(r, n) for r in range(S)]), "all_gather list")
    out = torch.empty(n)
    op = dist._make_nccl_premul_sum(0.5)
    completes_alone(dist.reduce_scatter_tensor(out, data(R, S * n), op=op, async_op=True), "reduce_scatter_tensor")
    same(out, total[R * n : (R + 1) * n] * 0.5, "reduce_scatter_tensor PREMUL_SUM")
    out = torch.empty(S * n)
    completes_alone(dist.all_to_all_single(out, data(R, S * n), async_op=True), "all_to_all_single")
    same(out, torch.cat([data(r, S * n)[R * n : (R + 1) * n] for r in range(S)]), "all_to_all_single")
    outs = [torch.empty(n) for _ in range(S)] if R == 0 else None
    completes_alone(dist.gather(data(R, n), outs, dst=0, async_op=True), "gather")
    if R == 0:
        same(torch.cat(outs), torch.cat([data(r, n) for r in range(S)]), "gather")
    out = torch.empty(n)
    ins = list(data(0, S * n).chunk(S)) if R == 0 else None
    completes_alone(dist.scatter(out, ins, src=0, async_op=True), "scatter")
    same(out, data(0, S * n)[R * n : (R + 1) * n], "scatter")
    completes_alone(dist.barrier(async_op=True), "barrier")
    if S > 1:
        check_p2p(n)


def check_p2p(n):
    if R == 0:
        works = [dist.isend(data(0, n, j), j) for j in range(1, S)]
        for j, w in enumerate(works, 1):
            completes_alone(w, f"isend to {j}")
    else:
        x = torch.empty(n)
        completes_alone(dist.irecv(x, 0), "irecv")
        same(x, data(0, n, R), "irecv")


def check_returns_before_done():
    big = torch.ones(16 << 20)
    for attempt in range(5):
        dist.barrier()
        w = dist.all_reduce(big, async_op=True)
        early = not w.is_completed()
        w.wait()
        same(big[:4], torch.full((4,), float(S**(attempt + 1))), "64 MiB all_reduce")
        if early:
            return
    fail("a 64 MiB all_reduce(async_op=True) had always finished when it returned")


def mismatched(name, g, k):
    """Issues collective ``name`` on group ``g`` differently on different ranks; its Work."""
    n = 4 + R  # a count that differs from rank to rank
    if name == "all_reduce":
        return dist.all_reduce(torch.ones(n), group=g, async_op=True)
    if name == "broadcast":
        return dist.broadcast(torch.ones(n), group_src=0, group=g, async_op=True)
    if name == "reduce":
        return dist.reduce(torch.ones(n), group_dst=0, group=g, async_op=True)
    if name == "all_gather_into_tensor":
        return dist.all_gather_into_tensor(torch.empty(S * n), torch.ones(n), group=g, async_op=True)
    if name == "reduce_scatter_tensor":
        return dist.reduce_scatter_tensor(torch.empty(n), torch.ones(S * n), group=g, async_op=True)
    if name == "all_to_all_single":
        return dist.all_to_all_single(torch.empty(S * n), torch.ones(S * n), group=g, async_op=True)
    if name == "gather":
        return dist.gather(torch.ones(n), [torch.empty(n) for _ in range(S)] if R == 0 else None, group_dst=0, group=g, async_op=True)
    if name == "scatter":
        return dist.scatter(torch.empty(n), [torch.ones(n)] * S if R == 0 else None, group_src=0, group=g, async_op=True)
    if name == "barrier":  # rank 0 a barrier, the others an all_reduce
        if R == 0:
            return dist.barrier(group=g, async_op=True)
        return dist.all_reduce(torch.ones(1), group=g, async_op=True)
    raise AssertionError(name)


def raises(f, what):
    try:
        f()
    except psyne.Error as e:
        return e
    except Exception as e:  # torch may wrap the Future's error
        if "psyne" in str(e) or "ismatch" in str(e):
            return e
        fail(f"{what}: raised {type(e).__name__}: {e}, not psyne's error")
    fail(f"{what}: did not raise")


def check_errors():
    names = ["all_reduce", "broadcast", "reduce", "all_gather_into_tensor", "reduce_scatter_tensor",
             "all_to_all_single", "gather", "scatter", "barrier"]
    for k, name in enumerate(names):  # noqa: B007
        g = dist.new_group(list(range(S)), backend="psyne")
        w = mismatched(name, g, k)
        via_wait = lambda: w.wait()  # noqa: E731
        via_future = lambda: w.get_future().wait()  # noqa: E731
        order = [(via_wait, "wait()"), (via_future, "the Future")]
        for f, how in order if k % 2 == 0 else order[::-1]:
            raises(f, f"mismatched {name} through {how}")
        if not w.is_completed() or w.exception() is None:
            fail(f"mismatched {name}: is_completed {w.is_completed()}, exception {w.exception()!r}")
    if S > 1:
        g = dist.new_group(list(range(S)), backend="psyne")
        if R == 0:
            dist.send(torch.ones(4), 1, group=g)  # the receiver sees the wrong count
        elif R == 1:
            w = dist.irecv(torch.ones(5), 0, group=g)
            raises(lambda: w.get_future().wait(), "mismatched recv through the Future")
            raises(lambda: w.wait(), "mismatched recv through wait()")


def check_wait_timeout():
    """Rank 1 issues its all_reduce only after rank 0's wait(timeout) has raised (a barrier on
    the default group orders them)."""
    import datetime

    g = dist.new_group(list(range(S)), backend="psyne")
    x = torch.full((4,), float(R))
    if R == 0:
        w = dist.all_reduce(x, group=g, async_op=True)
        try:
            w.wait(datetime.timedelta(milliseconds=200))
            fail("wait(timeout) returned although rank 1 had not issued the call")
        except psyne.TimeoutError:
            pass
        if w.is_completed():
            fail("a timed-out wait left the Work completed")
        dist.barrier()
        if w.wait() is not True:
            fail("wait() after the timeout did not return True")
    else:
        dist.barrier()
        dist.all_reduce(x, group=g)
    same(x, torch.full((4,), float(sum(range(S)))), "all_reduce after a timed-out wait")


check_results()
check_returns_before_done()
if S > 1:
    check_wait_timeout()
    check_errors()
print(f"rank {R}/{S}: async OK", flush=True)
sys.stdout.flush()
os._exit(0)
