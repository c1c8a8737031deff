"""The entry cap of a workspace's mirror (``max_entries``): how many files, directories and symlinks a
run may leave in the workspace through a pull.

Without it a program's empty files, directories or symlinks (``seq 300000 | xargs touch``, a loop of
``os.mkdir``) were bounded only by the sandbox's memory group (~1 KiB each in its tmpfs: ~1 million
under the default 1024 MB), and each one cost the host process that serves every workspace ~1 KiB of
memory for as long as the mirror stays warm (its state), ~100 bytes of the store, and every later full
push (a reopen) ~0.14 ms: 300,000 made the process 290 MB larger and a reopen's first run 42 s. Past
the cap, a pull's new paths are refused, all of them (a half-synced ``node_modules`` is worth less
than none), with a reason that names the limit and how to raise it, and removed from the sandbox's
copy, as the store's quota refuses a file (ENOSPC): nothing is dropped silently, and the warm mirror,
the store and what later calls walk stay within the cap. A walk past the cap stops collecting the new
entries itself (``_mirror_walk.Overflow``): the pull that meets a flood holds the cap, not the flood."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ._beneath import open_beneath, remove_beneath
from ._forget import forget
from ._mirror_base import Entry, MirrorBase, PullPlan
from ._pull_rules import outermost
from ._reported import REPORTED

__all__ = ["MAX_ENTRIES", "OVER_ENTRIES", "REPORTED", "cap_entries"]

# The default cap: above issue 16's trees of 1,000,000 entries (which a workspace must mirror whole,
# ``tests/fidelity/test_regressions.py``) with room for a build's outputs; a large monorepo with its
# dependencies holds far fewer (the Linux tree ~90,000, a big ``node_modules`` 100,000-300,000). At
# ~1 KiB of host memory each while warm. Under the default ``memory_mb`` (1024) the sandbox's memory
# group stops a flood near 1 million first; the cap bounds the host where that limit was raised.
MAX_ENTRIES = 1_500_000

OVER_ENTRIES = (
    "not synced: the workspace would hold {} files, directories and symlinks, over the backend's "
    "max_entries ({}); the run's new entries were removed from the sandbox (raise the limit with "
    "the backend's max_entries=..., or None for no limit)"
)
# Past ``REPORTED`` refused paths a run names the directories they were made in, with their count: a
# live sandbox's tick that found 713,000 new files in a directory an earlier tick pulled named each,
# and the run's result and journal record held them all (every left-out path so since s64: ``_reported``).


def cap_entries(mirror: MirrorBase, plan: PullPlan, now: dict[str, Entry], cap: int) -> dict[str, str]:
    """When ``now`` (the mirror's state to be) holds more than ``cap`` entries, or the walk that made
    it stopped collecting past the cap (``plan.overflow``, ``_mirror_walk``), take the paths the
    mirror's state did not hold (the run's new entries) out of ``plan`` and out of ``now``, and any
    further name of a file among them, and remove them from the mirror: the outermost of them
    (workspace paths) with the reason, or past :data:`REPORTED` of them the directories they were
    made in. Removed here rather than refused by the store: the workspace never had them, so there is
    nothing to fetch again (``settle`` would ask for each: a push of 713,000 paths took 129 s)."""
    overflow = plan.overflow
    if len(now) <= cap and overflow is None:
        return {}
    state = mirror.state
    rel = mirror.rel
    refused: list[str] = []  # workspace paths

    def kept(items: list[Any], rel_of: Callable[[Any], str], path_of: Callable[[Any], str]) -> list[Any]:
        """The items of a path the mirror held; the others' workspace paths go to ``refused``."""
        held = []
        for item in items:
            if rel_of(item) in state:
                held.append(item)
            else:
                refused.append(path_of(item))
        return held

    plan.files = kept(plan.files, lambda f: f[0], lambda f: mirror.workspace_path(f[0]))
    gone = set(refused)
    kept_links = []
    for name, first in plan.links:  # a further name of a refused file is refused with it
        if name in state and first not in gone:
            kept_links.append((name, first))
        else:
            refused.append(mirror.workspace_path(name))
    plan.links = kept_links
    plan.dirs = kept(plan.dirs, lambda d: rel(d.path), lambda d: d.path)
    plan.symlinks = kept(plan.symlinks, lambda s: rel(s.path), lambda s: s.path)
    for path in refused:  # a refused directory's time is nothing to set either
        plan.dir_times.pop(path, None)
        plan.dir_sub_ns.pop(path, None)
    if overflow is None:
        reason = OVER_ENTRIES.format(len(now), cap)
    else:  # the walk counted what it met, never entering a new directory past the cap
        reason = OVER_ENTRIES.format(f"at least {len(now) + overflow.refused}", cap)
        refused.extend(mirror.workspace_path(name) for name in overflow.names)
    tops = outermost(refused)
    rels = [rel(path) for path in tops]
    for name in rels:
        remove_beneath(mirror.directory, name)
    forget(now, (), rels)
    counts: dict[str, int] = {}
    if overflow is not None and overflow.unnamed:
        counts = {mirror.workspace_path(parent): n for parent, n in overflow.parents.items()}
        walked = set(overflow.names)
        named: dict[str, int] = {}
        for name in walked:
            parent = name.rpartition("/")[0]
            named[parent] = named.get(parent, 0) + 1
        for parent in overflow.unnamed:  # past the names it kept: what is new there now goes, counted
            removed = named.get(parent, 0) + _remove_new_in(mirror, parent, now)
            path = mirror.workspace_path(parent)
            counts[path] = max(counts[path], removed)  # (with what a live program made since the walk)
        for path in tops:  # the plan's own new paths (the walk held none of them)
            if rel(path) not in walked:
                parent = path.rpartition("/")[0] or "/"
                counts[parent] = counts.get(parent, 0) + 1
    if not counts and len(tops) <= REPORTED:
        return dict.fromkeys(tops, reason)
    for path in [] if counts else tops:
        parent = path.rpartition("/")[0] or "/"
        counts[parent] = counts.get(parent, 0) + 1
    return {parent: f"{n} new entries in it {reason}" for parent, n in counts.items()}


def _remove_new_in(mirror: MirrorBase, parent: str, now: dict[str, Entry]) -> int:
    """Remove from the mirror's directory ``parent`` (relative) every entry ``now`` does not hold: the
    new entries of an overflowing walk whose names it did not keep (``_mirror_walk.KEEP_NAMES``), and
    any new one a live program made there since, as refused as they are; returns how many. As the
    directory is read (no list of a flood's names), no link followed; read again while a pass removed
    something (a removal during a read may hide a name from it), at most ``_PASSES`` times."""
    prefix = f"{parent}/" if parent else ""
    total = 0
    for _ in range(_PASSES):
        removed = 0
        try:
            fd = open_beneath(mirror.directory, parent)
        except OSError:
            return total  # gone, or a link planted in its place: nothing of the mirror there
        try:
            with os.scandir(fd) as it:
                for e in it:
                    if prefix + e.name not in now:
                        remove_beneath(mirror.directory, prefix + e.name)
                        removed += 1
        except OSError:
            return total + removed
        finally:
            os.close(fd)
        total += removed
        if not removed:
            break
    return total


_PASSES = 3
