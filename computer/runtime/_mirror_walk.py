"""The full walk of a mirror (``Mirror.scan``): what a pull looks at when no watch can vouch for the
tree (none yet, an overflow, a directory moved)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ._lifts import Lifts
from ._mirror_base import Entry, entry_of

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
        for child, path, st in listing:
            out[child] = entry_of(st)
            if stat.S_ISDIR(st.st_mode):
                stack.append((child, path))
                if times is not None:
                    times[child] = st.st_mtime_ns
    return out


def _listing(
    directory: Path, lifts: Lifts, rel: str, host: str
) -> list[tuple[str, str, os.stat_result]] | None:
    """The entries of the directory ``rel`` (relative path, host path, lstat), after lifting it where
    the program locked it; None when it still cannot be read, [] when it is gone."""
    for attempt in (1, 2):
        found = []
        try:
            with os.scandir(host) as it:
                for e in it:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except PermissionError:
                        raise
                    except OSError:  # gone meanwhile, or too long to name
                        continue
                    found.append((f"{rel}/{e.name}" if rel else e.name, e.path, st))
            return found
        except PermissionError:
            if attempt == 2 or not lifts.active or not lifts.lift(directory, rel):
                return None
        except OSError:
            return []
    return None
