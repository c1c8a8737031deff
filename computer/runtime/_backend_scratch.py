"""Each backend's scratch directory: where its mirrors and run directories live (tmpfs by default),
in this process's scratch directory, reachable by the sandbox's user, and removed with the backend."""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
import threading
import weakref
from pathlib import Path

from ._scratch import blocking_ancestor, process_scratch, remove_tree

__all__ = ["backend_scratch"]


def _check_reachable(directory: str, owner: tuple[int, int]) -> None:
    """The sandbox's user must be able to reach ``directory`` (bubblewrap, running as that user, binds
    a mirror from below it): every existing ancestor must be searchable by that user."""
    ancestor = blocking_ancestor(directory, owner)
    if ancestor is not None:
        raise ValueError(
            f"scratch_dir {directory}: the sandbox's user (host uid {owner[0]}) cannot reach it, as "
            f"{ancestor} is not searchable by it; choose a directory others may search (e.g. one "
            "made with mode 0o711), or pass unprivileged=False"
        )


def _default_scratch() -> str:
    """Where mirrors live by default: tmpfs when the machine has a writable one.

    A mirror is a cache of the workspace (the SQLite file is the durable copy), and programs create and
    delete many small files in it; on tmpfs that costs what it costs on a laptop's tmpfs, while a busy
    disk can be 20x slower. ``scratch_dir`` puts mirrors on disk instead.
    """
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return tempfile.gettempdir()


def backend_scratch(
    scratch_dir: str | None, owner: tuple[int, int] | None, kind: str, backend: object = None
) -> Path:
    """A fresh directory for one backend's mirrors and run directories, in this process's scratch
    directory (0700; 0710 of the sandbox group where sandboxes run as leased uids, ``_scratch``; removed at exit, and by any later process if this one dies),
    and once ``backend`` is garbage collected (in a thread of its own: a mirror is a whole tree).
    Before, a backend made per agent (``Workspace(backends=[ShellBackend()])``) left its warm
    mirrors' files until the process ended: 60 agents of 200 KB each held 12 MB of tmpfs.
    ``scratch_dir``: where (default: tmpfs when the machine has a writable one)."""
    where = scratch_dir or _default_scratch()
    if owner is not None:
        _check_reachable(where, owner)
    base = process_scratch(where, owner) / f"{kind}-{secrets.token_hex(3)}"
    base.mkdir(mode=0o700)
    if owner is not None:  # every mirror's leased uid (the sandbox group) searches it, none lists it
        os.chown(base, *owner)
        os.chmod(base, 0o710)
    if backend is not None:
        weakref.finalize(backend, _remove_in_thread, base).atexit = False  # (the exit removes it all)
    return base


def _remove_in_thread(base: Path) -> None:
    def remove() -> None:
        with contextlib.suppress(OSError):
            remove_tree(base)

    threading.Thread(target=remove, name="computer-scratch-removal", daemon=True).start()
