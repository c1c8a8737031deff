"""``MirrorPool``: the warm mirrors of one backend (most recently used workspaces first) and the
``ScratchBudget`` every pool of a process shares (idle mirrors evicted least recently used first)."""

from __future__ import annotations

import itertools
import os
import threading
import time
import weakref
from collections import OrderedDict
from pathlib import Path

from ..storage import CHUNK_SIZE
from ._beneath import HOLE_DIGEST
from ._entry import INO, KIND, SIZE
from ._mirror import Mirror
from ._scratch import remove_tree

__all__ = ["MirrorPool", "ScratchBudget", "process_budget"]


class MirrorPool:
    """Idle mirrors per workspace: a run takes one (or a fresh one) and gives it back.

    At most ``idle`` idle mirrors per workspace, and idle mirrors of at most ``max_workspaces``
    workspaces: a process serving many workspaces over its life (a pool worker serves the whole
    cluster, an embedded service one workspace per agent) would otherwise keep a copy of every one
    it ever ran a command for, on disk, with its watches. The least recently used workspace's idle
    mirrors go first (its next run does a full push); a mirror lent to a running command is never
    touched. Evicted mirrors are handed out by :meth:`take_evicted` so the caller can remove them off
    its event loop (a mirror is a whole directory tree).
    """

    def __init__(
        self,
        base: Path,
        root: str,
        *,
        idle: int = 2,
        max_workspaces: int = 64,
        budget: ScratchBudget | None = None,
    ) -> None:
        if max_workspaces < 1:
            raise ValueError("max_workspaces must be at least 1")
        # Every pool of the process counts against one budget of idle mirror bytes by default.
        self.budget = budget if budget is not None else process_budget()
        self.budget.register(self)
        self.base = base
        self.root = root
        self.idle = idle
        self.max_workspaces = max_workspaces
        self._free: dict[str, list[Mirror]] = {}
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._evicted: list[Mirror] = []
        self._made = itertools.count()

    def acquire(self, workspace_id: str) -> Mirror:
        self._touch(workspace_id)
        free = self._free.get(workspace_id)
        if free:
            return free.pop()
        # Named by a counter, not the workspace id: the name shows inside the sandbox (mountinfo).
        directory = self.base / f"m{next(self._made)}"
        if directory.exists():  # left by an earlier process
            remove_tree(directory)
        return Mirror(directory, self.root)

    def idle_mirrors(self, workspace_id: str) -> list[Mirror]:
        """The idle mirrors of ``workspace_id`` (still in the pool)."""
        return list(self._free.get(workspace_id, ()))

    def workspaces(self) -> list[str]:
        """Workspaces with idle mirrors, least recently used first."""
        return [w for w in self._recent if self._free.get(w)]

    def discard(self, mirror: Mirror) -> None:
        """Drop a mirror (its state is unknown, or the pool no longer keeps it)."""
        mirror.unwatch()
        mirror.drop_standby()
        try:
            remove_tree(mirror.directory)
        finally:  # its files gone: the uid its sandboxes ran as is free (``_uid_lease``)
            if mirror.lease is not None:
                mirror.lease.release()

    def release(self, workspace_id: str, mirror: Mirror) -> bool:
        """Give ``mirror`` back; False when the pool dropped it (enough idle mirrors already)."""
        free = self._free.setdefault(workspace_id, [])
        if len(free) >= self.idle:
            self.discard(mirror)
            return False
        mirror.held_bytes = held_bytes(mirror)
        mirror.held_entries = len(mirror.state)
        mirror.idle_since = time.monotonic()
        free.append(mirror)
        self._touch(workspace_id)
        self.budget.settle()
        return any(held is mirror for held in free)

    def _drop_idle(self, mirror: Mirror) -> None:
        """Take an idle mirror out of the pool (the budget evicts it)."""
        for free in self._free.values():
            for i, held in enumerate(free):
                if held is mirror:
                    del free[i]
                    return

    def take_evicted(self) -> list[Mirror]:
        """Idle mirrors the bounds pushed out since the last call, to :meth:`discard`: this pool's, and
        any pool's that the process's scratch budget evicted (removing one needs nothing of its pool)."""
        evicted, self._evicted = self._evicted, []
        return evicted + self.budget.take_evicted()

    def idle_bytes(self) -> int:
        return sum(mirror.held_bytes for free in self._free.values() for mirror in free)

    def idle_entries(self) -> int:
        return sum(mirror.held_entries for free in self._free.values() for mirror in free)

    def _touch(self, workspace_id: str) -> None:
        self._recent[workspace_id] = None
        self._recent.move_to_end(workspace_id)
        while len(self._recent) > self.max_workspaces:
            oldest, _ = self._recent.popitem(last=False)
            self._evicted += self._free.pop(oldest, [])


def held_bytes(mirror: Mirror) -> int:
    """The bytes of file data ``mirror`` holds: its files' sizes less the whole chunks of their holes
    (known by the chunk lists of its large files). Before, a sparse file counted its size: a program's
    ``truncate -s 4G`` cost the host nothing, yet its warm mirror counted 4 GB against the process's
    budget and pushed every other workspace's warm mirror out (their next runs pushed in full).
    A symlink of a target of :data:`SHORT_LINK` bytes or more counts the tmpfs page that holds it:
    before, symlinks counted nothing, and 60,000 of 4,000-byte targets held ~400 MB of the host in a
    mirror counted as 0 bytes (60 MB of entries). A file seen with several names (``Mirror.linked``)
    counts once: 1 MB under 12 names counted 12 MB and pushed another workspace's warm mirror out."""
    size = 0
    linked = mirror.linked
    counted: set[int] = set()
    again: set[str] = set()  # further names of a file counted: their holes are not subtracted again
    for rel, entry in mirror.state.items():
        kind = entry[KIND]
        if kind == "f":
            if linked and entry[INO] in linked:
                if entry[INO] in counted:
                    again.add(rel)
                    continue
                counted.add(entry[INO])
            size += entry[SIZE]
        elif kind == "l" and entry[SIZE] >= SHORT_LINK:
            size += LINK_PAGE
    holes = sum(chunks.count(HOLE_DIGEST) for rel, chunks in mirror.chunks.items() if rel not in again)
    return max(0, size - holes * CHUNK_SIZE)


class ScratchBudget:
    """File bytes the idle mirrors of every :class:`MirrorPool` of this process may hold in all.

    Mirrors live on tmpfs (host RAM) by default. While a run writes into its mirror, its memory cgroup
    bounds it; once the run is over the mirror stays warm for the next run, and this budget bounds what
    all warm mirrors of the process hold together: past it, the least recently used idle mirrors are
    evicted (their next run pushes in full), whichever backend or pool they belong to. A mirror larger
    than the whole budget is not kept at all (it goes first).

    The limit: ``COMPUTER_SCRATCH_BUDGET`` (bytes) when set, else a quarter of the machine's memory,
    at most 8 GiB.

    ``entries`` (the process's: ``COMPUTER_SCRATCH_ENTRIES``, else the byte limit over
    :data:`ENTRY_BYTES`): the entries (files, directories, links) the idle mirrors hold in all, each
    past it evicted the same way. An empty file costs no byte of its own but a tmpfs inode and dentry
    (~0.95 KB of the host's kernel memory) and its row of the mirror's state (~0.3 KB of this
    process): before, a mirror of a million empty files or directories (``seq 1000000 | xargs touch``,
    ``mkdir -p`` trees) counted 0 bytes and stayed warm for good, ~1.2 GB of host memory each, on the
    scratch every workspace of the host shares (its inodes too: ``/dev/shm`` has ~3 million here).
    """

    def __init__(self, limit: int, entries: int | None = None) -> None:
        self.limit = limit
        self.entries = entries
        self._pools: weakref.WeakSet[MirrorPool] = weakref.WeakSet()
        self._evicted: list[Mirror] = []
        self._lock = threading.Lock()

    def register(self, pool: MirrorPool) -> None:
        self._pools.add(pool)

    def held(self) -> int:
        """Bytes the idle mirrors of every pool hold now."""
        return sum(pool.idle_bytes() for pool in list(self._pools))

    def held_entries(self) -> int:
        """Entries the idle mirrors of every pool hold now."""
        return sum(pool.idle_entries() for pool in list(self._pools))

    def settle(self) -> None:
        """Evict the least recently used idle mirrors until what is left fits the limits (one alone
        over a limit first)."""
        most = self.entries if self.entries is not None else float("inf")
        with self._lock:
            idle = sorted(
                (
                    (mirror, pool)
                    for pool in list(self._pools)
                    for free in pool._free.values()
                    for mirror in free
                ),
                key=lambda item: (
                    item[0].held_bytes <= self.limit and item[0].held_entries <= most,
                    item[0].idle_since,
                ),
            )
            held = sum(mirror.held_bytes for mirror, _ in idle)
            entries = sum(mirror.held_entries for mirror, _ in idle)
            for mirror, pool in idle:
                if held <= self.limit and entries <= most:
                    break
                pool._drop_idle(mirror)
                self._evicted.append(mirror)
                held -= mirror.held_bytes
                entries -= mirror.held_entries

    def take_evicted(self) -> list[Mirror]:
        with self._lock:
            evicted, self._evicted = self._evicted, []
        return evicted


def _default_budget() -> int:
    configured = os.environ.get("COMPUTER_SCRATCH_BUDGET")
    if configured:
        return int(configured)
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        memory = 8 << 30
    return min(8 << 30, memory // 4)


# A symlink target tmpfs keeps in a page of its own from this length on (``SHORT_SYMLINK_LEN``); shorter
# ones are a small allocation beside the inode (within :data:`ENTRY_BYTES`).
SHORT_LINK = 128
LINK_PAGE = 4096

# What one entry of an idle mirror costs the host, rounded up: its tmpfs inode and dentry (~0.95 KB of
# kernel memory, ``shmem_inode_cache`` + ``dentry``) and its row of the mirror's state (~0.3 KB).
ENTRY_BYTES = 1024

_BUDGET: ScratchBudget | None = None


def process_budget() -> ScratchBudget:
    """The scratch budget every mirror pool of this process counts against (see :class:`ScratchBudget`)."""
    global _BUDGET
    if _BUDGET is None:
        limit = _default_budget()
        configured = os.environ.get("COMPUTER_SCRATCH_ENTRIES")
        _BUDGET = ScratchBudget(limit, int(configured) if configured else limit // ENTRY_BYTES)
    return _BUDGET
