"""``LocalExecContext``: the :class:`ExecContext` of an in-process workspace.

This is also the owner-side half of a remote context: a pool worker's context forwards each call to
the owner, which answers it with this class. Sync computations (what a mirror needs, applying a
run's changes) therefore happen next to the SQLite file, one round trip each.
"""

from __future__ import annotations

import dataclasses
import posixpath
from typing import Any

from ..storage.paths import canonical, is_within
from ..storage.types import BatchResult
from ._backend import MirrorDir, MirrorFile, MirrorSymlink, SyncLimits, SyncPull, SyncPush

__all__ = ["FS_OPS", "GUEST_OPS", "LocalExecContext", "to_plain"]

# What the python backend's ``workspace`` module offers, in the order its description lists them.
GUEST_OPS = (
    "read_file",
    "read_text",
    "write_file",
    "mkdir",
    "rm",
    "readdir",
    "stat",
    "exists",
    "find",
    "grep",
    "ls",
    "rename",
    "copy",
)
# The fs operations a backend may call through ``fs_call``.
FS_OPS = frozenset((*GUEST_OPS, "readlink", "symlink"))


def to_plain(value: Any) -> Any:
    """Dataclass results as dicts (recursively), so they travel as msgpack."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [to_plain(v) for v in value]
    return value


class LocalExecContext:
    """Answers a backend's workspace calls directly on ``workspace.fs`` (and ``workspace.assets``)."""

    def __init__(self, workspace: Any) -> None:
        self.workspace = workspace

    @property
    def fs(self) -> Any:
        return self.workspace.fs

    @property
    def workspace_id(self) -> str:
        return str(self.workspace.id)

    async def fs_call(self, op: str, args: dict[str, Any]) -> Any:
        if op not in FS_OPS:
            raise ValueError(f"unknown workspace operation {op!r}")
        return to_plain(await getattr(self.fs, op)(**args))

    async def share(self, path: str, expires_after: float) -> str:
        assets = getattr(self.workspace, "assets", None)
        if assets is None:
            raise RuntimeError("this workspace has no assets publisher")
        return str(await assets.share(path, expires_after=expires_after))

    # ------------------------------------------------------------------ push

    async def sync_push(self, mirror_rev: int | None, root: str, limits: SyncLimits) -> SyncPush:
        root = canonical(root)
        if mirror_rev is not None:
            changes = self.fs.changes_since(mirror_rev, root)
            paths = [c.path for c in changes.changes]
            # A change at or above the root (the root renamed or removed) needs the whole tree again.
            if changes.complete and not any(is_within(root, p) for p in paths):
                return await self._incremental(changes.rev, root, _outermost(paths), limits)
        rev = self.fs.rev  # read before the tree: anything newer is sent again next time
        files, dirs, links, protected = await self._tree(root, limits, [limits.max_sync_bytes])
        return SyncPush(rev, root, True, files, dirs, links, [], protected)

    async def _tree(
        self, root: str, limits: SyncLimits, budget: list[int]
    ) -> tuple[list[MirrorFile], list[MirrorDir], list[MirrorSymlink], list[str]]:
        """Everything below ``root``; ``budget[0]`` is the bytes this push may still carry."""
        files: list[MirrorFile] = []
        dirs: list[MirrorDir] = []
        links: list[MirrorSymlink] = []
        protected: list[str] = []
        try:
            entries = self.fs.manifest(root)
        except (FileNotFoundError, NotADirectoryError):
            return files, dirs, links, protected
        for path, kind, size, mode, mtime in entries:
            if path == root:
                continue
            if kind == "dir":
                dirs.append(MirrorDir(path, mode))
            elif kind == "symlink":
                try:
                    links.append(MirrorSymlink(path, await self.fs.readlink(path)))
                except OSError:
                    continue
            elif size > limits.max_file_bytes or size > budget[0] or len(files) >= limits.max_files:
                protected.append(path)
            else:
                try:
                    files.append(MirrorFile(path, await self.fs.read_file(path), mode, mtime))
                except FileNotFoundError:
                    continue  # removed while we walked; the next push sends the removal
                budget[0] -= len(files[-1].data)
        return files, dirs, links, protected

    async def _incremental(self, rev: int, root: str, paths: list[str], limits: SyncLimits) -> SyncPush:
        push = SyncPush(rev, root, False)
        budget = [limits.max_sync_bytes]
        for path in paths:
            try:
                target = await self.fs.readlink(path)
            except FileNotFoundError:
                push.deleted.append(path)
                continue
            except OSError:
                target = None
            if target is not None:
                push.deleted.append(path)
                push.symlinks.append(MirrorSymlink(path, target))
                continue
            try:
                st = await self.fs.stat(path)
            except (FileNotFoundError, NotADirectoryError):
                push.deleted.append(path)
                continue
            if st.is_directory:
                # The directory may be new, renamed here or recreated: send it whole, replacing it.
                push.deleted.append(path)
                push.dirs.append(MirrorDir(path, st.mode))
                files, dirs, links, protected = await self._tree(path, limits, budget)
                push.files.extend(files)
                push.dirs.extend(dirs)
                push.symlinks.extend(links)
                push.protected.extend(protected)
            elif st.size > limits.max_file_bytes or st.size > budget[0]:
                push.deleted.append(path)
                push.protected.append(path)
            else:
                try:
                    push.files.append(MirrorFile(path, await self.fs.read_file(path), st.mode, st.mtime))
                except (FileNotFoundError, IsADirectoryError):
                    push.deleted.append(path)
                    continue
                budget[0] -= len(push.files[-1].data)
        return push

    # ------------------------------------------------------------------ pull

    async def sync_pull(self, pull: SyncPull, base_rev: int) -> BatchResult:
        """Apply a run's changes in one ``commit_batch``.

        The returned ``rev`` is the revision the mirror now reflects: the batch's own revision when
        nothing else changed below the root since ``base_rev``, else ``base_rev`` (so the next push
        brings the other changes).
        """
        root = canonical(pull.root)
        protected = set(pull.protected)
        refused: set[str] = set()

        def guarded(path: str) -> bool:
            return path in protected or any(is_within(p, path) for p in protected)

        writes: dict[str, bytes | None] = {}
        modes: dict[str, int] = {}
        for f in pull.files:
            if f.path in protected:
                refused.add(f.path)
                continue
            writes[f.path] = f.data
            modes[f.path] = f.mode
        deleted = [p for p in pull.deleted if not guarded(p)]
        refused.update(p for p in pull.deleted if p in protected)
        for path in _outermost(deleted):
            writes[path] = None
        mkdirs = _needed_dirs(pull.dirs, protected, set(writes))
        for d in pull.dirs:
            if d.mode & 0o7777 != _DEFAULT_DIR_MODE:
                modes[d.path] = d.mode
        touched = [c.path for c in self.fs.changes_since(base_rev, root).changes]
        if (writes or mkdirs or pull.symlinks) and not await self.fs.exists(root):
            mkdirs.insert(0, root)
        if not writes and not mkdirs:
            batch = BatchResult(rev=self.fs.rev)
        else:
            batch = self.fs.commit_batch(writes, mkdirs=mkdirs, modes=modes, base_rev=base_rev)
        own_revs = {batch.rev}
        applied = list(batch.applied)
        # The batch cannot hold symlinks: each goes in its own small step after it, under the same rules,
        # and only when it points inside the mount root.
        for link in pull.symlinks:
            conflicted = any(is_within(link.path, t) or is_within(t, link.path) for t in touched)
            outside = not _points_within(link, root)
            if guarded(link.path) or conflicted or outside or link.path in batch.skipped:
                refused.add(link.path)
                continue
            try:
                if await self.fs.exists(link.path) or await _is_link(self.fs, link.path):
                    await self.fs.rm(link.path)
                    own_revs.add(self.fs.rev)
                await self.fs.symlink(link.target, link.path)
            except OSError:
                refused.add(link.path)
                continue
            own_revs.add(self.fs.rev)
            applied.append(link.path)
        foreign = self.fs.changes_since(base_rev, root, skip_revs=sorted(own_revs)).changes
        claim = base_rev if foreign else self.fs.rev
        return BatchResult(rev=claim, applied=sorted(applied), skipped=sorted(set(batch.skipped) | refused))


def _points_within(link: MirrorSymlink, root: str) -> bool:
    """True when the link's target names a path inside ``root``.

    Inside the sandbox a link out of the mount root points at the sandbox's own files (its /etc, its
    /tmp); in the workspace the same name would mean something else, so such links are not pulled.
    """
    parent = link.path.rsplit("/", 1)[0] or "/"
    target = link.target if link.target.startswith("/") else posixpath.join(parent, link.target)
    try:
        return is_within(canonical(target), root)
    except OSError:
        return False


async def _is_link(fs: Any, path: str) -> bool:
    try:
        await fs.readlink(path)
    except OSError:
        return False
    return True


_DEFAULT_DIR_MODE = 0o755


def _needed_dirs(dirs: list[MirrorDir], protected: set[str], written: set[str]) -> list[str]:
    """The new directories the batch must create explicitly.

    The batch creates missing parents of every path it writes (mode 0o755), so a new directory needs
    listing only when nothing new lies below it or its mode is not the default. For a ``mkdir -p`` of a
    deep tree this sends the leaves, not every level.
    """
    candidates = {d.path for d in dirs if d.path not in protected}
    if not candidates:  # a pull of removals or writes only (sorting 1,000 written paths: 0.7 ms)
        return []
    modes = {d.path: d.mode & 0o7777 for d in dirs}
    # Every proper ancestor of a new path; each walk stops at one seen already (its ancestors are in).
    # The 1,110 directories of a 10x10x10 tree: 0.36 ms, where sorting by split segments took 2.1.
    parents: set[str] = set()
    for path in candidates | written:
        parent = path.rpartition("/")[0]
        while parent and parent not in parents:
            parents.add(parent)
            parent = parent.rpartition("/")[0]
    return sorted(p for p in candidates if p not in parents or modes[p] != _DEFAULT_DIR_MODE)


def _outermost(paths: list[str]) -> list[str]:
    """Unique paths, sorted, without those below another listed path (each path's ancestors are looked
    up in a set: 1,000 paths 0.34 ms, where sorting by split segments took 0.78)."""
    unique = set(paths)
    if "/" in unique:
        return ["/"]
    out: list[str] = []
    for path in sorted(unique):
        parent = path.rpartition("/")[0]
        while parent and parent not in unique:
            parent = parent.rpartition("/")[0]
        if not parent:
            out.append(path)
    return out
