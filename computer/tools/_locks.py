"""Path locks for the mutating file tools (write, edit, delete).

A store that offers ``locks`` (a ``WorkspaceFileStore``: the owner's lock table, shared with every
process through clients) is locked there. Any other store is locked in a process-local table shared by
every store with the same ``lock_identity``, so two tool sets over one directory still serialise.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Hashable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from ..storage.paths import canonical
from ..surface import LocksSurface
from .file_store import FileStore

__all__ = ["PathLocks"]

_LOCAL_TABLES: weakref.WeakValueDictionary[Hashable, Any] = weakref.WeakValueDictionary()


def _local_table(identity: Hashable) -> LocksSurface:
    from ..storage import LockTable  # the same table type the owner uses

    table = _LOCAL_TABLES.get(identity)
    if table is None:
        table = LockTable()
        _LOCAL_TABLES[identity] = table
    return table


class PathLocks:
    """Holds canonical paths of one store for the whole read-modify-write of a tool call."""

    def __init__(self, store: FileStore) -> None:
        locks = getattr(store, "locks", None)
        if locks is None:
            identity = getattr(store, "lock_identity", None)
            # Keep a strong reference: the table lives as long as some tool over the identity does.
            locks = _local_table(identity if identity is not None else id(store))
        self._locks: LocksSurface = locks

    @asynccontextmanager
    async def hold(self, paths: Sequence[str], *, subtree: bool = False) -> AsyncIterator[None]:
        """Wait for conflicting holds, then hold ``paths`` until the block exits (also on failure)."""
        async with self._locks.hold([canonical(p) for p in paths], subtree=subtree):
            yield
