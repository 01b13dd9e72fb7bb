"""The C++ half of the torch backend's blocking all_reduce (psyne/_torch_hot.cpp, built by
psyne/_torch_hot.py): the calls it passes to the Python method, under psyrun with it and without it
(PSY_TORCH_HOT=off); how PSY_TORCH_HOT handles a build that cannot happen (no compiler, an earlier
failure, a bad value); and two processes building it at once into an empty cache (one compiles)."""

import os
import subprocess
import sys

import pytest

from conftest import check, launch

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("mode", ["on", "off"])
def test_the_calls_each_half_takes_and_passes_on(mode):
    check(launch(2, "torch_hot.py", timeout=180, env={"PSY_TORCH_HOT": mode}), 2, "hot OK")


IMPORT = "import psyne.torch as pt; print('HOT', pt._HOT is not None)"


def _import(env: dict) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k not in ("PSY_TORCH_HOT", "CXX")}
    e.update(env)
    return subprocess.run([sys.executable, "-W", "always", "-c", IMPORT], capture_output=True, text=True, timeout=120, env=e)


def test_without_a_compiler_auto_warns_and_keeps_the_python_path(tmp_path):
    p = _import({"PSY_CACHE_DIR": str(tmp_path), "CXX": str(tmp_path / "no-such-c++")})
    assert p.returncode == 0, p.stderr
    assert "HOT False" in p.stdout
    assert "no C++ compiler" in p.stderr and "apt install g++" in p.stderr, p.stderr


def test_without_a_compiler_on_is_an_import_error(tmp_path):
    p = _import({"PSY_TORCH_HOT": "on", "PSY_CACHE_DIR": str(tmp_path), "CXX": str(tmp_path / "no-such-c++")})
    assert p.returncode != 0
    assert "ImportError" in p.stderr and "PSY_TORCH_HOT=on" in p.stderr and "no C++ compiler" in p.stderr, p.stderr


def test_a_failed_build_is_not_retried_on_every_import(tmp_path):
    cxx = tmp_path / "failing-c++"
    # It writes a partial output first, as a compiler killed mid-link can: nothing of it may stay.
    cxx.write_text(
        "#!/bin/sh\nwhile [ \"$1\" != -o ]; do shift; done\necho partial > \"$2\"\n"
        "echo 'pretend error: this compiler refuses' >&2\nexit 3\n"
    )
    cxx.chmod(0o755)
    env = {"PSY_CACHE_DIR": str(tmp_path / "cache"), "CXX": str(cxx)}
    first = _import(env)
    assert "HOT False" in first.stdout and "the compiler failed (exit 3)" in first.stderr, first.stderr
    logs = list((tmp_path / "cache").rglob("failed.log"))
    assert len(logs) == 1 and "pretend error" in logs[0].read_text()
    assert [f.name for f in logs[0].parent.iterdir() if f.name.startswith(".")] == [], "a partial build was left"
    second = _import(env)
    assert "HOT False" in second.stdout and "an earlier build failed" in second.stderr, second.stderr
    assert "delete that file to retry" in second.stderr


def test_a_bad_mode_is_refused():
    p = _import({"PSY_TORCH_HOT": "fast"})
    assert p.returncode != 0 and "PSY_TORCH_HOT='fast' is not one of auto, on, off" in p.stderr, p.stderr


def test_off_neither_builds_nor_warns(tmp_path):
    p = _import({"PSY_TORCH_HOT": "off", "PSY_CACHE_DIR": str(tmp_path)})
    assert p.returncode == 0 and "HOT False" in p.stdout and "Warning" not in p.stderr, p.stderr
    assert not list(tmp_path.iterdir())


def test_two_processes_build_it_once_into_an_empty_cache(tmp_path):
    count = tmp_path / "compiles"
    cxx = tmp_path / "counting-c++"
    cxx.write_text(f"#!/bin/sh\necho run >> {count}\nexec c++ \"$@\"\n")
    cxx.chmod(0o755)
    env = dict(os.environ, PSY_TORCH_HOT="on", PSY_CACHE_DIR=str(tmp_path / "cache"), CXX=str(cxx))
    both = [
        subprocess.Popen([sys.executable, "-c", IMPORT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in both]
    for p, (out, err) in zip(both, outs):
        assert p.returncode == 0 and "HOT True" in out, err
    assert count.read_text().count("run") == 1
    built = list((tmp_path / "cache").rglob("psyne_torch_hot.so"))
    assert len(built) == 1
    assert not [f for f in built[0].parent.iterdir() if f.name.startswith(".")], "a partial build was left"
