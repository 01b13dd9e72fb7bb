"""The exceptions psyne raises: one class per kind of psyne error (``psyne::ErrorKind``).

Every class derives from :class:`psyne.Error`, and also from the built-in exception a Python
programmer would catch for that situation (``psyne.TimeoutError`` is a ``TimeoutError``,
``psyne.PeerLostError`` a ``ConnectionError``, ...). Each carries ``kind`` (the Rust kind's name,
e.g. ``"Mismatch"``) and ``peer`` (the rank found gone or silent, or None).
"""

import builtins
from typing import Optional

__all__ = [
    "Error",
    "InvalidArgumentError",
    "ConfigError",
    "BootstrapError",
    "AuthError",
    "TimeoutError",
    "MismatchError",
    "PeerLostError",
    "IoError",
    "AbortedError",
    "RevokedError",
    "UsageError",
]


class Error(Exception):
    """Base class of psyne's errors. ``kind`` names the psyne error kind; ``peer`` the rank, if any,
    that the error found gone or silent."""

    kind: str = "Error"
    peer: Optional[int] = None


class InvalidArgumentError(Error, ValueError):
    """An argument that cannot work: a bitwise op on floats, a root out of range, wrong lengths."""

    kind = "InvalidArgument"


class ConfigError(Error, ValueError):
    """The environment or a configuration value is malformed (``PSY_TIMEOUT=abc``)."""

    kind = "Config"


class BootstrapError(Error, ConnectionError):
    """Ranks could not find or reach each other while the group was being formed."""

    kind = "Bootstrap"


class AuthError(Error, PermissionError):
    """A connection failed to prove it belongs to this job."""

    kind = "Auth"


class TimeoutError(Error, builtins.TimeoutError):
    """A wait reached its deadline (``PSY_TIMEOUT``)."""

    kind = "Timeout"


class MismatchError(Error):
    """Ranks called different collectives, or the same one with different arguments."""

    kind = "Mismatch"


class PeerLostError(Error, ConnectionError):
    """A peer disconnected or died during a call."""

    kind = "PeerLost"


class IoError(Error, OSError):
    """An operating-system call failed."""

    kind = "Io"


class AbortedError(Error):
    """This group failed earlier; every later call raises this, naming the first error."""

    kind = "Aborted"


class RevokedError(Error):
    """A rank revoked the group: its pending and later calls fail on every rank until the
    survivors shrink it."""

    kind = "Revoked"


class UsageError(Error, RuntimeError):
    """The group was used in a way it cannot serve: from a process forked after it was made (the
    child must form a group of its own), or from two threads at once (use one group per thread,
    e.g. from ``split``, or serialise the calls)."""

    kind = "Usage"
