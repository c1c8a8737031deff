"""Filesystem errors: the right ``OSError`` subclass, with errno, strerror and the path.

One place builds every error so that ``except FileNotFoundError`` works the same on the owner
and on a client (errors cross Ray as ``(errno, message, path)`` and are rebuilt with :func:`fs_error`).
"""

from __future__ import annotations

import errno as _errno
import os

__all__ = [
    "FsInvalidError",
    "LockLostError",
    "QuotaError",
    "error_from_wire",
    "error_to_wire",
    "fs_error",
    "spelled_otherwise",
]


class FsInvalidError(OSError, ValueError):
    """EINVAL: a bad path or a bad option. Also a ``ValueError`` so plain validation code catches it."""


class LockLostError(OSError):
    """ENOLCK: a write made under a lock whose lease was lost (expired, or its owner restarted) was refused.

    Nothing was written. Take the lock again and re-read before writing: another holder may have
    changed what the lost lock protected.
    """


class QuotaError(OSError):
    """ENOSPC from the workspace's own limit (``max_bytes``), not from a full disk: the store works and
    takes anything that does not grow it. Built by the store only (``fs_error(ENOSPC)`` is a plain
    ``OSError``, as is this one rebuilt on a client), so the owner's runtime can tell the two apart."""


_CLASSES: dict[int, type[OSError]] = {
    _errno.ENOENT: FileNotFoundError,
    _errno.EEXIST: FileExistsError,
    _errno.ENOTDIR: NotADirectoryError,
    _errno.EISDIR: IsADirectoryError,
    _errno.EPERM: PermissionError,
    _errno.EACCES: PermissionError,
    _errno.EINVAL: FsInvalidError,
    _errno.ENOLCK: LockLostError,
}


def fs_error(code: int, path: str | None, detail: str | None = None) -> OSError:
    """Build the ``OSError`` subclass for ``code``; the message names ``path``."""
    strerror = detail or os.strerror(code)
    cls = _CLASSES.get(code, OSError)
    return cls(code, strerror, path)


# The errno of an ``OSError`` subclass raised without one (``ProcessLookupError("no such process")``),
# so that it crosses as its class: sent as EIO, ``except ProcessLookupError`` failed on a client.
# Those ``fs_error`` builds (``PermissionError``: EACCES, its last), and the other built-in ones.
_ERRNOS: dict[type[OSError], int] = {
    **{cls: code for code, cls in _CLASSES.items()},
    ProcessLookupError: _errno.ESRCH,
    TimeoutError: _errno.ETIMEDOUT,
    InterruptedError: _errno.EINTR,
    ChildProcessError: _errno.ECHILD,
    BlockingIOError: _errno.EAGAIN,
    ConnectionRefusedError: _errno.ECONNREFUSED,
    ConnectionResetError: _errno.ECONNRESET,
    ConnectionAbortedError: _errno.ECONNABORTED,
    BrokenPipeError: _errno.EPIPE,
}


def error_to_wire(exc: OSError) -> tuple[int, str, str | None]:
    """The parts of an fs error that cross a process boundary (an errno-less subclass: its errno)."""
    code = exc.errno or next((_ERRNOS[c] for c in type(exc).__mro__ if c in _ERRNOS), _errno.EIO)
    return (code, exc.strerror or str(exc), exc.filename)


def error_from_wire(parts: tuple[int, str, str | None]) -> OSError:
    """Rebuild an error sent by :func:`error_to_wire` (same class, errno and path)."""
    code, strerror, path = parts
    return fs_error(code, path, strerror)


def spelled_otherwise(existing: str, form: str, found: str, asked: str) -> str:
    """The sentence naming ``existing``, the path that is there under another Unicode normal form
    (``form``) of a name asked for: ``found`` and ``asked`` are shown escaped, as they print the same.
    One wording for the store's ENOENT (``_resolve.missing``) and the tools' (``_normal_forms``)."""
    return (
        f"{existing} exists in another Unicode normal form ({form}: {found!a}, not {asked!a}): "
        "names are compared byte for byte, use that spelling"
    )
