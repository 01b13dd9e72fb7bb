"""Shared helpers: find psyrun, run a worker script on N ranks under it, check /dev/shm is clean.

Every test here runs real processes under the real psyrun (over real shared memory): a worker
script under ``workers/`` checks its own results on every rank and exits non-zero on the first
wrong one; the test asserts the job's exit code and what the ranks printed. Each launch has a
deadline (``timeout``), so nothing hangs.
"""

import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
WORKERS = HERE / "workers"

# The torch tests run the C++ half of the blocking all_reduce (psyne/_torch_hot.py) and fail if it
# cannot be built, rather than quietly testing the Python path only (test_torch_hot.py runs both).
os.environ.setdefault("PSY_TORCH_HOT", "on")


def _psyrun() -> str:
    if os.environ.get("PSYRUN"):
        return os.environ["PSYRUN"]
    roots = [os.environ.get("CARGO_TARGET_DIR"), str(REPO / "target")]
    for root in filter(None, roots):
        for profile in ("release", "debug"):
            p = pathlib.Path(root) / profile / "psyrun"
            if p.exists():
                return str(p)
    pytest.exit("psyrun not found: build it (cargo build --release -p psyrun) or set PSYRUN", 2)


PSYRUN = _psyrun()


def shm_segments() -> set:
    """psyne's segments in /dev/shm, less those of groups with threads as ranks
    (``psyne-local<pid>-``: only the Rust tests make them, which may run beside these tests)."""
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("psy") and not n.startswith("psyne-local")}
    except FileNotFoundError:
        return set()


def launch(
    n: int, script: str, *args: str, timeout: float = 120, env: dict = None, flags: tuple = ()
) -> subprocess.CompletedProcess:
    """Runs ``workers/<script>`` on ``n`` ranks under psyrun (with psyrun's ``flags``); returns the
    finished process."""
    e = dict(os.environ)
    e.setdefault("PSY_TIMEOUT", "60")
    e.pop("RANK", None)
    e.pop("WORLD_SIZE", None)
    if env:
        e.update(env)
    cmd = [PSYRUN, "-n", str(n), *flags, sys.executable, str(WORKERS / script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e, cwd=str(HERE))


def check(p: subprocess.CompletedProcess, n: int, marker: str = "OK") -> None:
    """The job succeeded and every rank printed ``marker``."""
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"exit {p.returncode}\n{out[-6000:]}"
    assert out.count(marker) >= n, f"expected {n} x {marker!r}\n{out[-6000:]}"


@pytest.fixture(autouse=True)
def no_leftover_shm():
    """A test leaves no psyne shared-memory segment behind."""
    before = shm_segments()
    yield
    left = shm_segments() - before
    assert not left, f"shared-memory segments left behind: {sorted(left)}"
