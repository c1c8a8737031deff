"""How the owner commits one page of a pull (the half of :meth:`LocalExecContext.sync_pull` that writes).

A page is committed in a few ``commit_batch`` transactions, each counted as the run's own revision:
the staging of the page's new chunks (and of the chunks it keeps, below), the main batch (files,
removals, directories, modes, symlinks, hard links), each large file from its chunks, then the hard
links to those large files.

Kept chunks (``SyncPull.keep``): a large file a program renamed (or linked, then removed the old name)
reaches the pull under a name the mirror has no chunk list for. The mirror reads it against the list
of the name it had (its fast fingerprints), so the unchanged chunks travel as their hash, not as
bytes. Those chunks belong to the old name, which the same pull removes (its main batch, or an earlier
page): the first page therefore stages them by reference (a one-chunk file each, under the pull's
staging directory, removed with it by the last page), so they outlive the removal. A kept chunk the
store no longer holds (the workspace removed the old name meanwhile) fails the whole page before it
commits anything (:class:`KeptChunksGone`); the mirror then sends the pull again without keeping.

A pull that never reaches its last page (cancelled between pages, its worker lost) leaves its staging
directory behind: a later pull's first page removes those untouched for an hour (``STALE_STAGING``).
That age is the store's, the wall clock's; the owner also keeps, by the monotonic clock, when each of
its pulls in progress last staged (``live_staging``), and never removes one of those within the hour.
Before (s66), a wall-clock step forward of more than an hour (NTP after a suspend, a migrated VM)
between two pages of a pull let another pull's first page (another mirror of the workspace: the
other backend's, a concurrent call's) remove its staging, and its last page's large file was refused
("unknown chunk"): the sandbox's file removed, the workspace's kept, the program's bytes lost. A
pull's own later pages never sweep (its directory is there). A step back only delays the removal.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import time
from time import monotonic
from typing import Any

from ._backend import MirrorFile, SyncPull
from ._pull_rules import CONFLICT, LINKED, UNAPPLIED

__all__ = ["SAFE_BITS", "STAGING", "STALE_STAGING", "KeptChunksGone", "PullCommits"]

# Where a pull stages the new chunks of large files until a page names them.
STAGING = "/.computer/sync"
# A staging directory untouched this long (seconds) belongs to a pull that will never finish.
STALE_STAGING = 3600.0
# Bits a synced mode may carry: never setuid or setgid.
SAFE_BITS = 0o1777


class KeptChunksGone(Exception):
    """Chunks a page keeps (``SyncPull.keep``) that the store does not hold; nothing was committed."""

    def __init__(self, missing: list[str]) -> None:
        super().__init__(f"{len(missing)} kept chunks are gone from the store")
        self.missing = missing


class PullCommits:
    """The commits of a pull's page; mixed into :class:`LocalExecContext` (``self.fs``)."""

    fs: Any
    delivery_revs: dict[int, None]  # (``LocalExecContext``: delivery commits, no change of a file's bytes)
    # This process's pulls in progress: the monotonic time each last staged (``_sweep_stale``).
    live_staging: dict[str, float]

    async def _commit_main(
        self,
        writes: dict[str, bytes | None],
        applied: list[str],
        reasons: dict[str, str],
        own: set[int],
        *,
        modes: dict[str, int],
        mtimes: dict[str, int],
        links: dict[str, str],
        **options: Any,
    ) -> None:
        """The page's main batch (its small files inline, removals, directories, symlinks, links).

        Past the workspace's quota (ENOSPC) the batch is all or nothing: one small file that did not
        fit failed the whole page, so the run failed and none of its changes landed. It is then
        committed again in parts: everything but the files first (removals free room), then each file
        in a batch of its own, a file past the quota refused with the reason a large file gets
        (:meth:`_left`), then the links to this page's files (one to a refused file refused with it).
        """
        try:
            self._commit(writes, applied, reasons, own, modes=modes, mtimes=mtimes, links=links, **options)
            return
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        files = {path: data for path, data in writes.items() if data is not None}
        later = {path: first for path, first in links.items() if first in files}
        self._commit(
            {path: None for path, data in writes.items() if data is None},
            applied,
            reasons,
            own,
            modes={path: mode for path, mode in modes.items() if path not in files},
            mtimes={path: mtime for path, mtime in mtimes.items() if path not in files},
            links={path: first for path, first in links.items() if path not in later},
            **options,
        )
        sub_ns: dict[str, int] = options.get("sub_ns") or {}
        for path, data in files.items():
            await asyncio.sleep(0)  # (a page may hold thousands of small files)
            try:
                self._commit(
                    {path: data},
                    applied,
                    reasons,
                    own,
                    modes={path: modes[path]},
                    mtimes={path: mtimes[path]},
                    sub_ns={path: sub_ns[path]} if path in sub_ns else None,
                    in_place=_only(options.get("in_place"), path),
                )
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                reasons[path] = f"could not be applied: {exc.strerror or exc}{await self._left(path)}"
        if later:
            self._commit_links(later, applied, reasons, own)

    async def _stage_page(self, pull: SyncPull, own: set[int]) -> str | None:
        """:meth:`_stage`; a pull's first page (its staging directory not made yet) first removes the
        staging directories of pulls that never finished (cancelled between pages, their worker lost):
        untouched for :data:`STALE_STAGING` seconds, they only held chunks (and quota) forever."""
        if pull.staging is not None and (pull.stage or pull.keep):
            if not await self.fs.exists(f"{STAGING}/{pull.staging}"):
                await self._sweep_stale()
            if not pull.done:  # (its last page removes the directory: ``sync_pull``)
                self.live_staging[pull.staging] = monotonic()
        return self._stage(pull, own)

    async def _sweep_stale(self) -> None:
        """Remove the staging directories untouched for :data:`STALE_STAGING` by the wall clock, but
        none of a pull of this process that staged within that time by the monotonic clock."""
        fs, started = self.fs, monotonic()
        try:
            entries = await fs.readdir(STAGING)
        except OSError:
            return
        live = self.live_staging
        listed = {entry.name for entry in entries}
        for name in [n for n, at in live.items() if n not in listed and at < started]:
            del live[name]  # (finished: its last page removed the directory)
        cutoff = (time.time() - STALE_STAGING) * 1000
        for entry in entries:
            if not entry.is_directory or entry.mtime >= cutoff:
                continue
            if (at := live.get(entry.name)) is not None and started - at < STALE_STAGING:
                continue  # a pull in progress here: the wall clock stepped, not the pull
            where = f"{STAGING}/{entry.name}"
            with contextlib.suppress(OSError):
                if all(inner.mtime < cutoff for inner in await fs.readdir(where)):
                    await fs.rm(where, recursive=True, force=True)
                    live.pop(entry.name, None)

    def _stage(self, pull: SyncPull, own: set[int]) -> str | None:
        """Store the page's new chunks, and reference the chunks it keeps, under the pull's staging
        directory (one file each, so each is one chunk of the store) until a page names them; that
        directory, if the pull has one. Raises :class:`KeptChunksGone` (before any commit) when a kept
        chunk is gone."""
        if pull.staging is None:
            return None
        if not all(c.isalnum() or c in "-_" for c in pull.staging):
            raise ValueError(f"bad staging name {pull.staging!r}")
        staged = f"{STAGING}/{pull.staging}"
        writes: dict[str, Any] = {}
        if pull.keep:
            missing = self.fs.missing_chunks(pull.keep)
            if missing:
                raise KeptChunksGone(missing)
            writes.update({f"{staged}/{digest}": [digest] for digest in pull.keep})
        digests = pull.stage_digests
        if len(digests) != len(pull.stage):  # (a pull that named none: an assets bridge's)
            digests = [hashlib.sha256(data).hexdigest() for data in pull.stage]
        writes.update({f"{staged}/{digest}": data for digest, data in zip(digests, pull.stage, strict=True)})
        if writes:
            before = self.fs.rev
            batch = self.fs.commit_batch(writes)
            if batch.rev != before:
                own.add(batch.rev)
        return staged

    def _commit_links(
        self, links: dict[str, str], applied: list[str], reasons: dict[str, str], own: set[int]
    ) -> None:
        """Hard links (one batch) whose file is written only now; one whose file failed fails with it."""
        for path, first in list(links.items()):
            if first in reasons:
                reasons[path] = reasons[first]
                del links[path]
        if links:
            self._commit({}, applied, reasons, own, links=links)

    def _commit(
        self,
        writes: dict[str, Any],
        applied: list[str],
        reasons: dict[str, str],
        own: set[int],
        **options: Any,
    ) -> None:
        """One ``commit_batch`` of a pull (no ``base_rev``): its revision is the run's own, what it
        applied is listed, what it could not make refused. A write through a file's node
        (``in_place``) the store refused because the workspace wrote the file through another name
        is a conflict (the mirror keeps the file and gets the workspace's version written into it),
        and a link to it is refused with it (:data:`LINKED`)."""
        in_place = options.get("in_place")
        if in_place:
            options["in_place"] = {path: rev for path, rev in in_place.items() if path in writes}
            options["own_revs"] = sorted(own.union(self.delivery_revs))  # (a delivery: a time alone)
        before = self.fs.rev
        batch = self.fs.commit_batch(writes, **options)
        if batch.rev != before:
            own.add(batch.rev)
        applied += batch.applied
        links = options.get("links") or {}
        for path in batch.skipped:
            if in_place and path in in_place:
                reasons.setdefault(path, CONFLICT)
            elif in_place and links.get(path) in in_place and links[path] in batch.skipped:
                reasons.setdefault(path, LINKED)
            reasons.setdefault(path, UNAPPLIED)

    async def _write_chunks(
        self,
        f: MirrorFile,
        applied: list[str],
        reasons: dict[str, str],
        own: set[int],
        in_place: dict[str, int] | None = None,
    ) -> None:
        """Write one large file from its chunks, in a batch of its own: as a batch's write, a name of a
        file with several names gets a new file (the program replaced it; names that still share the
        file come as links, after it), where ``write_chunks`` would write into the shared file; one
        the program wrote through (``in_place``, ``MirrorFile.same``) is written through its node. The
        loop gets a turn first: a page's large files were committed in one step (100 sparse 4 GB
        files, 8,192 chunks each: ~0.8 s of CPU, every workspace of the process held)."""
        assert f.chunks is not None
        await asyncio.sleep(0)
        try:
            self._commit(
                {f.path: list(f.chunks)},
                applied,
                reasons,
                own,
                modes={f.path: f.mode & SAFE_BITS},
                mtimes={f.path: f.mtime},
                sub_ns={f.path: f.sub_ns},
                in_place=_only(in_place, f.path),
            )
        except OSError as exc:
            reasons[f.path] = f"could not be applied: {exc.strerror or exc}{await self._left(f.path)}"

    async def _left(self, path: str) -> str:
        """What a large file's refused write leaves at ``path``, for its reason: the workspace's version,
        which the sandbox gets back (a live sandbox's tick may have pulled a part of the file: a log past
        the quota kept 8 of its 12 MB, said only "could not be applied"), or none."""
        try:
            st = await self.fs.stat(path)
        except OSError:
            return "; the workspace has no file there, and the sandbox's is removed"
        kept = f"its version of {st.size:,} bytes" if st.is_file else "what it has there"
        return f"; the workspace keeps {kept}, which the sandbox gets back"


def _only(in_place: dict[str, int] | None, path: str) -> dict[str, int] | None:
    """``in_place``'s entry for ``path`` alone (a batch of that one file), or None."""
    return {path: in_place[path]} if in_place and path in in_place else None
