"""Ctrl-C in a collective: SIGINT to a rank blocked in a call its peer never joins raises
KeyboardInterrupt within a fraction of PSY_TIMEOUT (not when the call times out), through the
NumPy API (blocking on the node board and on the ring, and ``Request.wait``) and the torch
backend; the group then refuses every later call with an error saying it was interrupted. A
signal handler that calls into the waiting group is refused (its RuntimeError ends the call)
rather than deadlocking. Ctrl-C while ``psyne.init()`` waits for the other ranks raises at once
too."""

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import PSYRUN, WORKERS

#: The job's PSY_TIMEOUT; the interrupt must come within a third of it.
TIMEOUT = 15.0


def _state(pid: int):
    """The process's state letter (``S`` while it sleeps in a wait), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


class _Lines:
    """The job's output lines, read by a thread as they come."""

    def __init__(self, stream):
        self.q = queue.Queue()
        self.seen = []
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream):
        for line in stream:
            self.q.put(line)
        self.q.put(None)

    def wait_for(self, pattern: str, limit: float):
        """The first match of ``pattern`` in a line, waiting at most ``limit`` seconds."""
        end = time.monotonic() + limit
        for line in self.seen:
            m = re.search(pattern, line)
            if m:
                return m
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            try:
                line = self.q.get(timeout=left)
            except queue.Empty:
                return None
            if line is None:
                return None
            self.seen.append(line)
            m = re.search(pattern, line)
            if m:
                return m

    def text(self) -> str:
        while True:
            try:
                line = self.q.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                self.seen.append(line)
        return "".join(self.seen)


@pytest.mark.parametrize("case", ["numpy-small", "numpy-large", "numpy-async", "torch", "numpy-handler", "init"])
def test_ctrl_c_in_a_blocked_collective_raises_at_once_and_the_group_refuses_the_next_call(case):
    if case == "torch":
        pytest.importorskip("torch")
    env = dict(os.environ, PSY_TIMEOUT=str(int(TIMEOUT)))
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    cmd = [PSYRUN, "-n", "2", "--tag-output", sys.executable, str(WORKERS / "interrupt.py"), case]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        lines = _Lines(job.stdout)
        # Starting Python (and torch) on a busy machine: generous, and not part of the bound.
        ready = lines.wait_for(r"ready pid=(\d+)", 120)
        assert ready, f"rank 0 never got ready:\n{lines.text()}"
        pid = int(ready.group(1))
        # Blocked in the call: rank 0's main thread asleep in psyne's wait.
        end = time.monotonic() + TIMEOUT / 3
        while _state(pid) != "S":
            assert time.monotonic() < end, f"rank 0 ({pid}) never blocked: {_state(pid)}\n{lines.text()}"
            time.sleep(0.001)
        sent = time.monotonic()
        os.kill(pid, signal.SIGINT)
        # A handler that calls into the group gets RuntimeError, which ends the call instead.
        raised = "RuntimeError" if case == "numpy-handler" else "KeyboardInterrupt"
        got = lines.wait_for(rf"{raised} after|instead of {raised}|the call returned", 2 * TIMEOUT)
        took = time.monotonic() - sent
        out = lines.text()
        assert got and f"{raised} after" in got.group(0), out
        if case == "numpy-handler":
            assert "do not call psyne from signal handlers" in out, out
        assert took < TIMEOUT / 3, f"KeyboardInterrupt {took:.1f} s after SIGINT (PSY_TIMEOUT {TIMEOUT} s)\n{out}"
        if case == "init":
            # No group was formed: nothing to refuse.
            assert job.wait(timeout=TIMEOUT) == 3, lines.text()
            return
        refused = lines.wait_for(r"refused (\w+) after ([\d.]+) s: (.*)", TIMEOUT)
        out = lines.text()
        assert refused, out
        assert refused.group(1) in ("AbortedError", "Error", "RuntimeError"), out
        assert "interrupted" in refused.group(3), out
        assert float(refused.group(2)) < 1.0, out
        assert job.wait(timeout=TIMEOUT) == 3, out
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
