"""The pages a pull's removals, directories and symlinks take before its files (``MirrorPull.pages``)."""

from __future__ import annotations

import bisect
import heapq
import threading
from collections.abc import Callable, Collection, Generator

from ._backend import PAGE_CHUNKS, PAGE_DIRS, PAGE_FILES, MirrorDir, MirrorSymlink, SyncPull, fits
from ._mirror_base import PullPlan
from ._pull_rules import outermost
from ._tasks import in_thread

# Paths a pull's plan sorts in one call at most (``path_order``).
SORT_SLICE = 20_000


def path_order(paths: Collection[str]) -> list[str]:
    """``sorted(paths)``, in slices of ``SORT_SLICE`` merged: a sort is one C call that holds the
    GIL, and a plan's of 500,000 paths (a program's files in one directory) held it ~0.45-1.3 s in
    its worker thread, the owner's loop (every workspace of the process) waiting for it; slices hold
    it ~40 ms at most, the merge lets it go between its steps (~1.5x the time in all)."""
    if len(paths) <= SORT_SLICE:
        return sorted(paths)
    items = list(paths)
    slices = [sorted(items[i : i + SORT_SLICE]) for i in range(0, len(items), SORT_SLICE)]
    return list(heapq.merge(*slices))


def keys_below(ordered: list[str], rel: str) -> list[str]:
    """The paths of ``ordered`` (sorted as strings) below ``rel``, found by bisection: they are one
    run, since ``/`` sorts just before ``0`` (every ``rel/...`` lies in ``["rel/", "rel0")``). A pull
    whose program removed a tree of 1,111 directories beside 20,000 files scanned every path once per
    removed directory: 1.4-5.5 s of one plan (s64)."""
    lo = bisect.bisect_left(ordered, rel + "/")
    return ordered[lo : bisect.bisect_left(ordered, rel + "0", lo)]


def removal_pages(
    deleted: list[str], chunks: Callable[[str], int], root: str, protected: list[str], staging: str
) -> Generator[SyncPull, None, list[str]]:
    """A pull's removals past ``PAGE_FILES`` (or ``PAGE_PATHS``), or whose large files (``chunks``: a
    removed path's chunk count) hold more than ``PAGE_CHUNKS``, on pages of their own (its first: one
    of 20,000 held the owner's event loop ~0.15 s; 100 sparse 4 GB files ~0.8 s); returns the rest,
    for the page that follows. Only where the pull keeps no chunk (its first page must, before any
    removal can free them). The last paths go first (``deleted`` is sorted: a path after its
    directory), so a directory goes once what it held is gone: before, ``rm -rf`` of a tree took the
    whole tree on the first page, one transaction (100,000 files held the loop ~0.5 s). Paged by
    characters too: fewer than ``PAGE_FILES`` removals of a deep tree (a live sync's view of ``rm -rf``
    mid-way) were one page of 1.4 M characters."""
    while (count := _fit(deleted, chunks)) < len(deleted):
        yield SyncPull(root, deleted=deleted[-count:], protected=protected, staging=staging, done=False)
        deleted = deleted[:-count]
    return deleted


def _fit(deleted: list[str], chunks: Callable[[str], int]) -> int:
    """How many of the last of ``deleted`` one page takes (one at least)."""
    count = fits(reversed(deleted), PAGE_FILES)
    held = 0
    for taken, path in enumerate(reversed(deleted[-count:] if count else [])):
        held += chunks(path)
        if taken and held > PAGE_CHUNKS:
            return taken
    return count


def leading(
    plan: PullPlan, deleted: list[str], paged: bool, root: str, protected: list[str], staging: str
) -> Generator[SyncPull, None, tuple[list[MirrorDir], list[MirrorSymlink], list[str], bool]]:
    """Pages of their own for the directories past ``PAGE_DIRS`` (or ``PAGE_PATHS``), parents first
    (``dirs`` is sorted by depth), then for the symlinks past ``PAGE_FILES`` (or ``PAGE_PATHS`` of
    their paths and targets) once every directory is made; the removals ride on the first (a path
    removed after a page made a directory or a link there would take it). Returns what is left for
    the page that follows, and whether any page came. Before, every symlink of a pull was on one page,
    one transaction on the owner's loop: 27,000 a program made within a sync held every workspace of
    the process 0.6 s."""
    dirs, symlinks, came = plan.dirs, plan.symlinks, False
    if not paged:  # one page, or the first keeps chunks: nothing goes before it
        return dirs, symlinks, deleted, came
    while (count := fits((d.path for d in dirs), PAGE_DIRS)) < len(dirs):
        yield SyncPull(
            root, dirs=dirs[:count], deleted=list(deleted), protected=protected, staging=staging, done=False
        )
        dirs, deleted, came = dirs[count:], [], True
    while (count := fits((s.path + s.target for s in symlinks), PAGE_FILES)) < len(symlinks):
        yield SyncPull(
            root, dirs=list(dirs), symlinks=symlinks[:count], deleted=list(deleted), protected=protected,
            staging=staging, done=False,
        )  # fmt: skip
        symlinks, dirs, deleted, came = symlinks[count:], [], [], True
    return dirs, symlinks, deleted, came


def removals_outermost(applied: list[str], deleted: set[str]) -> list[str]:
    """``applied`` with its removals cut to the outermost ones. Removal pages go children first
    (``Mirror.removal_pages``), so the entries of a removed directory were listed by earlier pages,
    while a pull of one page lists the directory alone (its batch removes it whole): ``rm -rf`` of
    2,500 files listed the directory and 1,500 of them, of 1,000 the directory only. (Nothing but a
    removal lies below a removed directory.)"""
    removed = [p for p in applied if p in deleted]
    return [p for p in applied if p not in deleted] + outermost(removed)


class Pages:
    """A pull's pages, stepped in worker threads and closed from the loop. A pull cancelled while a
    thread is inside the generator cannot close it there ("generator already executing", which
    replaced the cancellation: a live sandbox's tick then went on as if its sync had failed); the
    close waits for that step, on a thread of its own."""

    def __init__(self, pages: Generator[SyncPull, None, None]) -> None:
        self._pages = pages
        self._stepping = threading.Lock()

    def next(self) -> SyncPull | None:
        with self._stepping:
            return next(self._pages, None)

    def close(self) -> None:
        if self._stepping.acquire(blocking=False):
            try:
                self._pages.close()
            finally:
                self._stepping.release()
        else:
            in_thread(self._close_after_step, "closing a cancelled pull's pages")

    def _close_after_step(self) -> None:
        with self._stepping:
            self._pages.close()
