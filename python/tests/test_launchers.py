"""psyne.init() under launchers other than psyrun: Open MPI's mpirun, whose PMIx server tells
psyne the rank, the size and where rank 0's store is (the Rust library's PMIx path, reached from
Python unchanged). torchrun is in test_torch_backend.py."""

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys

import pytest

from conftest import WORKERS, check


def mpirun(n: int, *args: str, env: dict = None) -> subprocess.CompletedProcess:
    """``mpirun -n N python WORKER ARGS`` as this machine needs it (root, more ranks than cores)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("PSY_")}
    e["PSY_TIMEOUT"] = "60"
    if env:
        e.update(env)
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", str(n), sys.executable, *args]
    # One MPI job at a time in a /dev/shm shared with the Rust tests: their MPI jobs
    # (common::MpiLock, the same lock file) count and clean up MPI's files there by name. Where
    # pytest has a /dev/shm of its own (scripts/ci/test-python.sh as root), neither sees the
    # other's files, and waiting for the Rust tests' MPI jobs would only hold up this one.
    with contextlib.ExitStack() as held:
        if os.environ.get("PSYNE_TEST_SHM") != "own":
            fcntl.flock(held.enter_context(open("/tmp/psyne-mpi.lock", "a")), fcntl.LOCK_EX)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=e)


needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed (scripts/setup.sh installs Open MPI)")


@needs_mpirun
@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("coll", ["all_reduce", "all_gather"])
def test_numpy_collectives_under_mpirun(coll, transport):
    p = mpirun(3, str(WORKERS / "numpy_matrix.py"), coll, env={"PSY_TRANSPORT": transport})
    check(p, 3, f"{coll} OK")


@needs_mpirun
def test_without_the_pmix_library_mpirun_is_refused_naming_it():
    p = mpirun(2, str(WORKERS / "numpy_matrix.py"), "all_reduce", env={"PSY_PMIX_LIB": "libpsyne-test-no-pmix.so"})
    assert p.returncode != 0, p.stdout
    assert "OK" not in p.stdout
    assert "started by Open MPI's mpirun" in p.stderr, p.stderr[-3000:]
    assert "apt-get install libpmix2" in p.stderr, p.stderr[-3000:]
