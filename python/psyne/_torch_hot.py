"""The torch backend's blocking ``all_reduce`` in C++ (``_torch_hot.cpp``), built on first use.

An 8-byte ``dist.all_reduce`` on a Python ProcessGroup spent as long in Python's reads of the
tensor and the options as in psyne's call (``results/torch-ddp/floor-split-2026-11-27/``). The
C++ half reads them as fields; the group's ``allreduce`` is its ``Hot`` object, which runs the
common call (blocking, dense contiguous CPU tensors, any op but PREMUL_SUM) through psyne's native
all-reduce and hands every other call to the Python method.

It is compiled against the installed torch, as torch's own C++ extensions are, the first time
``psyne.torch`` is imported with that torch (about 30 s; one process compiles, the others of the
job wait for it), into ``$PSY_CACHE_DIR/torch-hot/<key>/`` (default ``~/.cache/psyne``), where
``<key>`` names the source, torch, Python and compiler: a new torch builds a new one. It needs a
C++ compiler (``$CXX``, else ``c++``) and Python's headers (Debian: ``apt install g++
python3-dev``).

``PSY_TORCH_HOT``: ``auto`` (the default) builds or loads it and, when that fails, warns once and
keeps the Python path (the same results, slower at small sizes); ``on`` makes a failure an
``ImportError`` of ``psyne.torch``; ``off`` never builds or loads it.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import subprocess
import sys
import sysconfig
import time
import warnings
from pathlib import Path
from types import ModuleType
from typing import List, Optional

import torch

from psyne import _native  # noqa: F401  (the C++ half imports its capsule: loaded first)

#: The module name the C++ source defines (``PyInit_psyne_torch_hot``).
MODULE = "psyne_torch_hot"
SOURCE = Path(__file__).with_name("_torch_hot.cpp")
#: How long a process waits for another that is compiling the same build.
BUILD_WAIT_S = 600.0
MODES = ("auto", "on", "off")


class HotPathError(Exception):
    """The C++ half could not be built or loaded (its message says why and what to do)."""


def mode() -> str:
    """``PSY_TORCH_HOT``, checked."""
    value = os.environ.get("PSY_TORCH_HOT", "auto").strip().lower() or "auto"
    if value not in MODES:
        raise ImportError(f"psyne.torch: PSY_TORCH_HOT={value!r} is not one of {', '.join(MODES)}")
    return value


def cache_root() -> Path:
    """``$PSY_CACHE_DIR``, else ``$XDG_CACHE_HOME/psyne``, else ``~/.cache/psyne``."""
    if os.environ.get("PSY_CACHE_DIR"):
        return Path(os.environ["PSY_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "psyne"


def compile_command(output: Path) -> List[str]:
    """The compiler's command line for ``output`` (torch's headers and libraries, C++20 as torch's
    extensions are built)."""
    torch_dir = Path(torch.__file__).parent  # what torch.utils.cpp_extension's paths are made of
    torch_lib = torch_dir / "lib"
    cxx = os.environ.get("CXX", "c++")
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    includes = [f"-I{torch_dir / 'include'}", f"-I{sysconfig.get_path('include')}"]
    return [
        cxx, "-O2", "-std=c++20", "-fPIC", "-shared", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        "-DTORCH_API_INCLUDE_EXTENSION_H", *includes, str(SOURCE), "-o", str(output),
        f"-L{torch_lib}", "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python", f"-Wl,-rpath,{torch_lib}",
    ]  # fmt: skip


def build_key() -> str:
    """Names one build: the source, torch, Python and the command line (compiler included)."""
    h = hashlib.sha256(SOURCE.read_bytes())
    for part in (torch.__version__, torch.__file__, sys.version, *compile_command(Path("out"))):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def _lock(path: Path, deadline: float) -> int:
    """An exclusive ``flock`` on ``path`` (released by the kernel if this process dies), waited
    for until ``deadline``."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise HotPathError(
                    f"another process has been building {path.parent} for {BUILD_WAIT_S:.0f} s; "
                    "wait for it, or set PSY_TORCH_HOT=off"
                ) from None
            time.sleep(0.05)


def _compile(target: Path) -> None:
    """Compiles into ``target`` (written beside it, then renamed: never seen half-written)."""
    headers = Path(sysconfig.get_path("include")) / "Python.h"
    if not headers.exists():
        raise HotPathError(f"Python's headers are missing ({headers}): install them (Debian: apt install python3-dev)")
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    command = compile_command(partial)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_WAIT_S)
    except FileNotFoundError:
        raise HotPathError(f"no C++ compiler {command[0]!r}: install one (Debian: apt install g++) or set CXX") from None
    except subprocess.TimeoutExpired:
        partial.unlink(missing_ok=True)
        raise HotPathError(f"the compiler ran longer than {BUILD_WAIT_S:.0f} s") from None
    if done.returncode != 0:
        partial.unlink(missing_ok=True)  # whatever the compiler wrote before it failed
        log = target.with_name("failed.log")
        log.write_text(" ".join(command) + "\n\n" + done.stdout + done.stderr)
        raise HotPathError(f"the compiler failed (exit {done.returncode}); its output is in {log}")
    os.replace(partial, target)


def built() -> Path:
    """The path of the built module, building it when this torch has none yet."""
    where = cache_root() / "torch-hot" / build_key()
    target = where / f"{MODULE}.so"
    if target.exists():
        return target
    where.mkdir(parents=True, exist_ok=True)
    if (where / "failed.log").exists():
        raise HotPathError(f"an earlier build failed ({where / 'failed.log'}); delete that file to retry")
    fd = _lock(where / "lock", time.monotonic() + BUILD_WAIT_S)
    try:
        if not target.exists():  # another process may have built it while this one waited
            _compile(target)
    finally:
        os.close(fd)
    return target


def _import(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(MODULE, path)
    if spec is None or spec.loader is None:
        raise HotPathError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load() -> Optional[ModuleType]:
    """The C++ half, per ``PSY_TORCH_HOT``: the module, or None (``off``, or ``auto`` when it
    could not be built or loaded: then with one warning saying why)."""
    chosen = mode()
    if chosen == "off":
        return None
    try:
        return _import(built())
    except (HotPathError, ImportError, OSError) as e:
        if chosen == "on":
            raise ImportError(f"psyne.torch: the C++ hot path (PSY_TORCH_HOT=on): {e}") from e
        warnings.warn(
            f"psyne.torch: the C++ hot path is off ({e}); blocking all_reduce takes the Python path "
            "(same results, a few microseconds more per call). PSY_TORCH_HOT=off hides this warning.",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
