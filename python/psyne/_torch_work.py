"""The ``Work`` objects of the psyne torch backend (:mod:`psyne.torch`), and the thread that
completes them.

A non-blocking call (``async_op=True``, point-to-point, and every call torch makes from C++, such
as DDP's) is issued to psyne's worker thread of the group (``_native.NativeGroup.submit``), in
issue order, and returns at once a :class:`Pending` work. Each process group has one
:class:`Completer`: a daemon thread that waits for its works in issue order (natively, the GIL
released), runs what must follow the collective on the Python side (copies out of a temporary,
PREMUL_SUM's scaling), then completes the work's ``torch.futures.Future`` with its result, or
with its error. So the Future completes whether or not anyone calls ``wait()`` (DDP chains its
bucket callbacks on it), and an error reaches both ``wait()`` and the Future: never lost.
"""

from __future__ import annotations

import atexit
import datetime
import queue
import threading
import weakref
from typing import Any, Callable, List, Optional

import torch
import torch.distributed as dist

from psyne import _errors


class Done(dist.Work):
    """A finished call (the blocking path): ``wait()`` returns at once; ``get_future()`` is
    completed with the output tensors (what DDP's comm hooks expect)."""

    def __init__(self, result: Any) -> None:
        super().__init__()
        self._result = result
        self._future: Optional[torch.futures.Future] = None

    def wait(self, timeout: datetime.timedelta = datetime.timedelta(0)) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def exception(self) -> Any:
        return None

    def result(self) -> Any:
        return self._result

    def get_future(self) -> torch.futures.Future:
        if self._future is None:
            fut: torch.futures.Future = torch.futures.Future()
            fut.set_result(self._result)
            self._future = fut
        return self._future


def _seconds(timeout: Any) -> Optional[float]:
    """``wait``'s timeout in seconds; None for torch's "no timeout" (zero or unset)."""
    if isinstance(timeout, datetime.timedelta):
        secs = timeout.total_seconds()
        return secs if secs > 0 else None
    return None


class Pending(dist.Work):
    """A call issued to psyne's worker: ``natives`` (its ``NativeWork``\\ s, one per psyne call),
    then ``after`` (run on the completer thread once they succeeded), then ``result``."""

    def __init__(self, what: str, natives: List[Any], result: Any, after: Optional[Callable[[], None]]) -> None:
        super().__init__()
        self._what = what
        self._natives = natives
        self._result = result
        self._after = after
        self._exc: Optional[BaseException] = None
        self._future: torch.futures.Future = torch.futures.Future()

    def wait(self, timeout: datetime.timedelta = datetime.timedelta(0)) -> bool:
        """Waits until the call has finished; raises its error (psyne's exception classes), or
        ``psyne.TimeoutError`` once ``timeout`` (if not zero) has passed."""
        secs = _seconds(timeout)
        for n in self._natives:
            if not n.wait(secs):  # raises the call's error
                raise _errors.TimeoutError(
                    f"psyne {self._what}: not finished after {secs} s (Work.wait's timeout); the "
                    "call goes on, wait again or let the group's own deadline (PSY_TIMEOUT) end it"
                )
        self._future.wait()  # the completer's step after the call; raises its error
        return True

    def is_completed(self) -> bool:
        return self._future.done()

    def is_success(self) -> bool:
        return self._future.done() and self._exc is None

    def exception(self) -> Any:
        return self._exc

    def result(self) -> Any:
        return self._result

    def get_future(self) -> torch.futures.Future:
        return self._future

    def _complete(self) -> None:
        """On the completer thread: waits for the call, runs ``after``, completes the Future."""
        err: Optional[BaseException] = None
        for n in self._natives:
            try:
                n.wait(None)
            except BaseException as e:  # noqa: BLE001 - every error goes to the Work and its Future
                err = err or e
        if err is None and self._after is not None:
            try:
                self._after()
            except BaseException as e:  # noqa: BLE001
                err = e
        self._natives = []
        self._after = None
        self._exc = err
        if err is None:
            self._future.set_result(self._result)
        else:
            self._future.set_exception(err)


class Completer:
    """One daemon thread per process group completing its :class:`Pending` works in issue order
    (started with the first). At interpreter exit (and ``destroy_process_group``) it is stopped
    and joined, for up to the group's ``timeout`` seconds: a daemon thread still inside torch's
    C++ code when the interpreter finalizes is ended by ``pthread_exit``, whose unwinding
    through torch's frames aborts the process ("terminate called without an active
    exception")."""

    def __init__(self, name: str, timeout: float) -> None:
        self._name = name
        self._timeout = timeout
        self._queue: "queue.SimpleQueue[Optional[Pending]]" = queue.SimpleQueue()
        self._thread: Optional[threading.Thread] = None

    def add(self, work: Pending) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
            _RUNNING.add(self)
        self._queue.put(work)

    def _run(self) -> None:
        while True:
            work = self._queue.get()
            if work is None:
                return
            work._complete()

    def stop(self) -> None:
        """Ends the thread once the works issued before have completed, and waits for it (up to
        the group's timeout)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            if thread is not threading.current_thread():
                thread.join(self._timeout)


_RUNNING: "weakref.WeakSet[Completer]" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for completer in list(_RUNNING):
        completer.stop()
