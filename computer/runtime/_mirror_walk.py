"""The full walk of a mirror (``Mirror.scan``): what a pull looks at when no watch can vouch for the
tree (none yet, an overflow, a directory moved).

With a cap (the entry cap, ``_entry_cap``: a pull whose mirror would hold more than ``cap`` entries
refuses every new one), the walk stops collecting new entries once it has found more than ``cap``:
the new ones it holds then leave what it returns, and from then on a new entry is only counted, its
name kept while it is outermost (its parent is no new directory) and :data:`KEEP_NAMES` are not
reached yet, and a new directory is not entered (what it holds is new: refused with it). So the peak
of the pull that meets a flood is bounded by the cap, not by the flood: before, it built the whole
state to be (~0.7 KiB of the host per entry) and the cap took the new entries out afterwards. What the
walk refused is in :class:`Overflow`, for ``cap_entries`` to remove from the sandbox and report.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ._entry import KIND, Entry, entry_of
from ._lifts import Lifts

__all__ = ["KEEP_NAMES", "Overflow", "walk"]

# Outermost refused names an overflowing walk keeps (~100 bytes each); past them it keeps their
# directories' counts, and ``cap_entries`` removes the rest by listing those directories again.
KEEP_NAMES = 100_000


@dataclass
class Overflow:
    """The new entries a walk refused past its cap (relative paths)."""

    refused: int = 0  # new entries found past the cap, outermost or not (new directories not entered)
    names: list[str] = field(default_factory=list)  # the first KEEP_NAMES outermost ones
    parents: dict[str, int] = field(default_factory=dict)  # every outermost one's directory -> count
    unnamed: set[str] = field(default_factory=set)  # directories holding outermost ones not in ``names``

    def refuse(self, rel: str, parent: str) -> None:
        """Refuse ``rel``, whose directory ``parent`` is no new one (an outermost refused path)."""
        self.parents[parent] = self.parents.get(parent, 0) + 1
        if len(self.names) < KEEP_NAMES:
            self.names.append(rel)
        else:
            self.unnamed.add(parent)


def walk(
    directory: Path,
    state: dict[str, Entry],
    lifts: Lifts,
    times: dict[str, int] | None = None,
    denied: list[str] | None = None,
    cap: int | None = None,
) -> tuple[dict[str, Entry], Overflow | None]:
    """Every entry below ``directory`` by relative path (and each directory's mtime in ns into
    ``times`` when given). A directory the program locked is lifted to be read (``_lifts``); one
    that still cannot be read keeps what ``state`` held below it, and is added to ``denied`` (before,
    it was taken for emptied, and the pull removed what it held from the workspace). Past ``cap``
    entries, the new ones are refused instead (the module docstring): the second value says which
    (None: the walk stayed within the cap)."""
    return _Walk(directory, state, lifts, times, cap).run(denied)


class _Walk:
    def __init__(
        self,
        directory: Path,
        state: dict[str, Entry],
        lifts: Lifts,
        times: dict[str, int] | None,
        cap: int | None,
    ) -> None:
        self.directory, self.state, self.lifts, self.times, self.cap = directory, state, lifts, times, cap
        self.out: dict[str, Entry] = {}
        self.stack = [("", os.fspath(directory))]
        self.overflow: Overflow | None = None

    def run(self, denied: list[str] | None) -> tuple[dict[str, Entry], Overflow | None]:
        out, state, stack = self.out, self.state, self.stack
        while stack:
            rel, host = stack.pop()
            listing = _listing(self.directory, self.lifts, rel, host, self)
            if listing is None:
                if denied is not None:
                    denied.append(rel)
                prefix = f"{rel}/" if rel else ""
                out.update((k, e) for k, e in state.items() if k.startswith(prefix))
                continue
            found, dirs = listing
            out.update(found)
            for child, path, mtime_ns in dirs:
                stack.append((child, path))
                if self.times is not None:
                    self.times[child] = mtime_ns
        return out, self.overflow

    def refuse(self, child: str, parent: str, parent_new: bool) -> None:
        assert self.overflow is not None
        self.overflow.refused += 1
        if not parent_new:
            self.overflow.refuse(child, parent)

    def overflowed(self, found: dict[str, Entry], dirs: list[tuple[str, str, int]]) -> None:
        """More than the cap found: every new entry held so far leaves the walk (refused), as do the
        new directories still to be entered."""
        self.overflow = Overflow()
        state = self.state
        for held in (self.out, found):
            for key in [k for k in held if k not in state]:
                del held[key]
                parent = key.rpartition("/")[0]
                self.refuse(key, parent, bool(parent) and parent not in state)
        self.stack[:] = [(child, path) for child, path in self.stack if child in state]
        dirs[:] = [d for d in dirs if d[0] in state]
        if self.times is not None:
            for key in [k for k in self.times if k not in state]:
                del self.times[key]


def _listing(
    directory: Path, lifts: Lifts, rel: str, host: str, walk: _Walk | None = None
) -> tuple[dict[str, Entry], list[tuple[str, str, int]]] | None:
    """The entries of the directory ``rel`` by relative path, and its directories (relative path, host
    path, mtime in ns), after lifting it where the program locked it; None when it still cannot be
    read, nothing when it is gone. Strings, ints and tuples of them, which the garbage collector
    untracks: with each ``lstat`` result kept (a ``stat_result``, a tuple subclass, is tracked), a
    directory of 300,000 files held 600,000 tracked objects through its walk, for every full
    collection meanwhile to go through. ``walk``: the walk with a cap it lists for (its new entries
    past the cap are refused here, never lstat-ed)."""
    state = walk.state if walk is not None else {}
    cap = walk.cap if walk is not None else None
    new_here = bool(rel) and rel not in state  # what this directory holds is new with it
    for attempt in (1, 2):
        found: dict[str, Entry] = {}
        dirs: list[tuple[str, str, int]] = []
        try:
            with os.scandir(host) as it:
                for e in it:
                    child = f"{rel}/{e.name}" if rel else e.name
                    if walk is not None and walk.overflow is not None and child not in state:
                        walk.refuse(child, rel, new_here)  # past the cap: counted, never lstat-ed
                        continue
                    try:
                        st = e.stat(follow_symlinks=False)
                    except PermissionError:
                        raise
                    except OSError:  # gone meanwhile, or too long to name
                        continue
                    found[child] = entry = entry_of(st)
                    if entry[KIND] == "d":
                        dirs.append((child, e.path, st.st_mtime_ns))
                    if cap is not None and walk is not None and walk.overflow is None:
                        if len(walk.out) + len(found) > cap:
                            walk.overflowed(found, dirs)
            return found, dirs
        except PermissionError:
            if attempt == 2 or not lifts.active or not lifts.lift(directory, rel):
                return None
        except OSError:
            return {}, []
    return None
