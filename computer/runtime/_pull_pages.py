"""The pages a pull's directories and symlinks take before its files (``MirrorPull.pages``)."""

from __future__ import annotations

from collections.abc import Generator

from ._backend import PAGE_DIRS, PAGE_FILES, MirrorDir, MirrorSymlink, SyncPull, fits
from ._mirror_base import PullPlan


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
