"""Path locks for the mutating file tools (write, edit, delete).

A store that offers ``locks`` (a ``WorkspaceFileStore``: the owner's lock table, shared with every
process through clients) is locked there. Any other store is locked in a process-local table shared by
every store with the same ``lock_identity``, so two tool sets over one directory still serialise.

A path is locked as spelled *and* as the file it reaches: when the store offers ``realpath`` or
``readlink`` (a ``WorkspaceFileStore`` offers both), every symlink on the way is resolved first (by
``realpath`` in one call when there is one: through a client, one owner round trip a path), so an edit of ``/w/link`` and
a write of ``/w/f.txt`` (``link -> f.txt``), or of ``/alias/f.txt`` with ``/alias -> /w``, take the same
lock. ``follow=False`` keeps the last segment as spelled (delete removes a link, not its target).
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Hashable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from ..storage.paths import canonical, real_path, resolve_links
from ..surface import LocksSurface
from .file_store import FileStore

__all__ = ["PathLocks", "resolve_links"]

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
        self._store: Any = store if hasattr(store, "realpath") or hasattr(store, "readlink") else None

    async def _targets(self, paths: Sequence[str], follow: bool) -> list[str]:
        spelled = [canonical(p) for p in paths]
        if self._store is None:
            return spelled
        real = [await real_path(self._store, p, follow=follow) for p in spelled]
        return list(dict.fromkeys([*spelled, *real]))

    @asynccontextmanager
    async def hold(
        self, paths: Sequence[str], *, subtree: bool = False, follow: bool = True
    ) -> AsyncIterator[None]:
        """Wait for conflicting holds, then hold ``paths`` (as spelled and resolved) until the block exits.

        ``follow=False``: the last segment of each path is not followed (the call acts on a link itself).
        """
        async with self._locks.hold(await self._targets(paths, follow), subtree=subtree):
            yield
