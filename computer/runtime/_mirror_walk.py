"""The full walk of a mirror (``Mirror.scan``): what a pull looks at when no watch can vouch for the
tree (none yet, an overflow, a directory moved)."""

from __future__ import annotations

import os
from pathlib import Path

from ._entry import KIND, Entry, entry_of
from ._lifts import Lifts

__all__ = ["walk"]


def walk(
    directory: Path,
    state: dict[str, Entry],
    lifts: Lifts,
    times: dict[str, int] | None = None,
    denied: list[str] | None = None,
) -> dict[str, Entry]:
    """Every entry below ``directory`` by relative path (and each directory's mtime in ns into
    ``times`` when given). A directory the program locked is lifted to be read (``_lifts``); one
    that still cannot be read keeps what ``state`` held below it, and is added to ``denied`` (before,
    it was taken for emptied, and the pull removed what it held from the workspace)."""
    out: dict[str, Entry] = {}
    stack = [("", os.fspath(directory))]
    while stack:
        rel, host = stack.pop()
        listing = _listing(directory, lifts, rel, host)
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
            if times is not None:
                times[child] = mtime_ns
    return out


def _listing(
    directory: Path, lifts: Lifts, rel: str, host: str
) -> tuple[dict[str, Entry], list[tuple[str, str, int]]] | None:
    """The entries of the directory ``rel`` by relative path, and its directories (relative path,
    host path, mtime in ns), after lifting it where the program locked it; None when it still cannot
    be read, nothing when it is gone. Strings, ints and tuples of them, which the garbage collector
    untracks: with each ``lstat`` result kept (a ``stat_result``, a tuple subclass, is tracked), a
    directory of 300,000 files held 600,000 tracked objects through its walk, for every full
    collection meanwhile to go through."""
    for attempt in (1, 2):
        found: dict[str, Entry] = {}
        dirs: list[tuple[str, str, int]] = []
        try:
            with os.scandir(host) as it:
                for e in it:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except PermissionError:
                        raise
                    except OSError:  # gone meanwhile, or too long to name
                        continue
                    child = f"{rel}/{e.name}" if rel else e.name
                    found[child] = entry = entry_of(st)
                    if entry[KIND] == "d":
                        dirs.append((child, e.path, st.st_mtime_ns))
            return found, dirs
        except PermissionError:
            if attempt == 2 or not lifts.active or not lifts.lift(directory, rel):
                return None
        except OSError:
            return {}, []
    return None
