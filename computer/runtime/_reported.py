"""How many left-out paths a run's result names one by one (``REPORTED``), and what it says past them.

A program chooses how many paths the sync leaves out: names the workspace cannot hold (not UTF-8, too
long), FIFOs and sockets, links it cannot store. Each was a line of the run's ``skipped`` with its
reason, in the result a tool hands the model, in the run's journal record, in an MCP reply: 20,000
files named ``bad\\xff<n>`` made a tool result of 2.7 MB and a journal record of 2.8 MB (the entry
cap lets a program make a million). Past :data:`REPORTED` paths a result names the directories they
are below instead, each with how many and why (:func:`reported`), as the entry cap does for the
entries it refuses (``_entry_cap``).
"""

from __future__ import annotations

import collections
import posixpath

__all__ = ["REPORTED", "reported"]

# The most paths a result names; past them, at most this many directories.
REPORTED = 1000
# The most different reasons a directory's line names (the others are counted).
_REASONS = 3


def reported(reasons: dict[str, str]) -> dict[str, str]:
    """``reasons`` (left-out path -> why) as a result gives it: itself up to :data:`REPORTED` paths,
    else the directories they are below, at most :data:`REPORTED`, the deepest that are few enough
    (each path's parent first, then theirs), each with the count and reasons of the paths below it
    and below no deeper one of them."""
    if len(reasons) <= REPORTED:
        return reasons
    tops = {posixpath.dirname(path) for path in reasons}
    while len(tops) > REPORTED:  # every directory one level up (the root stays): fewer each round
        tops = {posixpath.dirname(top) for top in tops}
    groups: dict[str, collections.Counter[str]] = {}
    for path, why in reasons.items():
        top = posixpath.dirname(path)
        while top not in tops:  # (one of its directories is: each went up from one)
            top = posixpath.dirname(top)
        groups.setdefault(top, collections.Counter())[why] += 1
    return {path: _line(counts) for path, counts in sorted(groups.items())}


def _line(counts: collections.Counter[str]) -> str:
    total = sum(counts.values())
    paths = "1 path" if total == 1 else f"{total} paths"
    named = counts.most_common(_REASONS)
    if len(counts) == 1:
        return f"{paths} below it left out of the sync: {named[0][0]}"
    parts = [f"{n}: {why}" for why, n in named]
    if len(counts) > _REASONS:
        parts.append(f"{total - sum(n for _, n in named)} for {len(counts) - _REASONS} other reasons")
    return f"{paths} below it left out of the sync ({'; '.join(parts)})"
