"""Which calls of a hosted workspace run inline on its host's loop (issue 20).

A call handed to a workspace's loop thread costs two thread wake-ups (there and back) on top of the
host's own loop: ~0.3 ms on the loaded 2-core machine, on every small operation through a client.
A call named *small* here runs instead on the host's loop, when the workspace has nothing else going
(see :meth:`~computer.actors._loop_thread.LoopThread.run`): a short, bounded piece of work that never
waits (storage runs inline, SQLite answers it from one file). Everything else, including every call
whose cost depends on data (a big read or write, a tree walk, a sync apply, anything unknown), still
runs on the workspace's own thread, so it delays no other workspace of the host.

:func:`small_call` is asked holding the workspace's gate, so it may look into the workspace (the size
of a file about to be read).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["SMALL_BYTES", "small_call"]

# A read or a write of at most this many bytes is small (~0.1 ms of hashing and SQLite work).
SMALL_BYTES = 64 * 1024

# Filesystem operations bounded whatever the workspace holds: one path resolved, one row or a few.
_SMALL_OPS = frozenset({"stat", "exists", "readlink", "realpath", "symlink", "link"})
# Owner RPC methods bounded the same way (no filesystem operation at all, or a lock table's entry).
_SMALL_METHODS = frozenset({"describe", "stats", "lock_renew", "lock_release", "audit_top"})


def small_call(ws: Any, method: str, args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    """Whether owner RPC ``method(*args, **kwargs)`` of workspace ``ws`` (a ``WorkspaceHost``) is
    small: bounded work that never waits. Unknown shapes are not small."""
    if ws._closing:
        return False  # closing: it answers "moved" on its own thread, as it always did
    if method in _SMALL_METHODS:
        return True
    if method != "call" or kwargs or not args:
        return False
    op = args[0]
    fs_args: Sequence[Any] = args[1] if len(args) > 1 else ()
    fs_kwargs: dict[str, Any] = (args[2] if len(args) > 2 else None) or {}
    if not isinstance(fs_args, (list, tuple)) or not isinstance(fs_kwargs, dict) or not fs_args:
        return False
    if op in _SMALL_OPS:
        return True
    if op == "mkdir":
        return not fs_kwargs.get("recursive")  # one directory, not a chain of them
    if op == "rm":
        return not fs_kwargs.get("recursive")  # a file, a link or an empty directory
    if op == "write_file":
        data = fs_args[1] if len(fs_args) > 1 else fs_kwargs.get("data")
        return isinstance(data, (bytes, str)) and len(data) <= SMALL_BYTES
    if op in ("read_file", "read_text"):
        length = fs_kwargs.get("length")
        if isinstance(length, int) and 0 <= length <= SMALL_BYTES:
            return True
        return _small_file(ws, fs_args[0])
    return False


def _small_file(ws: Any, path: Any) -> bool:
    """Whether the file at ``path`` holds at most ``SMALL_BYTES`` (one small query: its chunks)."""
    if not isinstance(path, str):
        return False
    try:
        chunks = ws.workspace.fs.file_chunks(path)
    except OSError:
        return True  # the read fails the same way at once (missing, a directory)
    return bool(sum(c.size for c in chunks) <= SMALL_BYTES)
