"""Keeping a training loop alive through failures, as Horovod's elastic ``State`` does.

Two ways, matching psyrun's two modes:

- ``psyrun --max-restarts N``: the whole job starts again after a failure; :func:`restart_count`
  says which attempt this is (``PSY_RESTART_COUNT``, or torchrun's ``TORCHELASTIC_RESTART_COUNT``)
  so a program knows to load its checkpoint.
- ``psyrun --on-failure continue``: the survivors go on. Keep what must survive in a
  :class:`State`, :meth:`State.commit` it at safe points (after a step), and on a
  :class:`psyne.PeerLostError` (or :class:`psyne.AbortedError`, :class:`psyne.RevokedError`) call
  :meth:`State.recover`: it revokes and shrinks the group, rolls the values back to the last
  commit and copies the new rank 0's into every survivor, and returns the new group.

``State`` holds NumPy arrays and CPU torch tensors (changed in place, so a model's parameters can
be held directly) and plain numbers (read back as attributes)::

    state = psyne.elastic.State(g, step=0, weights=w)
    while state.step < steps:
        try:
            train_step(state.group, w)
            state.step += 1
            state.commit()
        except (psyne.PeerLostError, psyne.AbortedError, psyne.RevokedError):
            state.recover()
"""

from __future__ import annotations

from typing import Any, Dict

import numpy as np

from . import Group, _native

__all__ = ["State", "restart_count"]


def restart_count() -> int:
    """Which attempt of a restarted job this process belongs to: ``PSY_RESTART_COUNT`` (psyrun),
    else ``TORCHELASTIC_RESTART_COUNT`` (torchrun), else 0 (read by the Rust library, as
    ``psyne::contract::restart_count``; a malformed value raises :class:`psyne.ConfigError`)."""
    return _native.restart_count()


def _as_array(value: Any) -> np.ndarray:
    """The NumPy view of an array or CPU tensor (sharing its memory), or None for a number."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch tensor
        return value.detach().numpy()
    raise TypeError(f"State holds arrays, CPU tensors and numbers, not {type(value).__name__}")


class State:
    """Values that must survive a failure, with the group they are trained over (see the module
    docs). Arrays and tensors are kept by reference and changed in place; numbers are attributes."""

    def __init__(self, group: Group, **values: Any) -> None:
        object.__setattr__(self, "group", group)
        object.__setattr__(self, "_arrays", {})
        object.__setattr__(self, "_numbers", {})
        object.__setattr__(self, "_saved", {})
        for name, value in values.items():
            if isinstance(value, (bool, int, float)):
                self._numbers[name] = value
            else:
                _as_array(value)
                self._arrays[name] = value
        self.commit()

    def __getattr__(self, name: str) -> Any:
        numbers = object.__getattribute__(self, "_numbers")
        arrays = object.__getattribute__(self, "_arrays")
        if name in numbers:
            return numbers[name]
        if name in arrays:
            return arrays[name]
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._numbers:
            self._numbers[name] = value
        elif name == "group":
            object.__setattr__(self, name, value)
        else:
            raise AttributeError(f"{name!r} is not a value of this State (give it to State(...))")

    def commit(self) -> None:
        """Remembers every value as it is now: what :meth:`recover` rolls back to."""
        saved: Dict[str, Any] = {n: np.copy(_as_array(a)) for n, a in self._arrays.items()}
        saved.update(self._numbers)
        object.__setattr__(self, "_saved", saved)

    def restore(self) -> None:
        """Puts back every value of the last :meth:`commit` (arrays in place)."""
        for name, array in self._arrays.items():
            np.copyto(_as_array(array), self._saved[name])
        for name in self._numbers:
            self._numbers[name] = self._saved[name]

    def sync(self) -> None:
        """Copies rank 0's values into every rank of :attr:`group` (arrays in place)."""
        for array in self._arrays.values():
            self.group.broadcast(_as_array(array), root=0)
        if self._numbers:
            names = sorted(self._numbers)
            packed = np.array([float(self._numbers[n]) for n in names], dtype=np.float64)
            self.group.broadcast(packed, root=0)
            for name, value in zip(names, packed):
                kind = type(self._saved[name])
                self._numbers[name] = kind(value)
        self.commit()

    def recover(self) -> Group:
        """After a failure: revokes the group, shrinks it to the survivors, rolls back to the last
        commit, takes the new rank 0's values, and returns (and keeps) the new group."""
        self.group.revoke()
        smaller = self.group.shrink()
        self.restore()
        object.__setattr__(self, "group", smaller)
        self.sync()
        return smaller
