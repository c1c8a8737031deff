"""Workspace renames a mirror follows by moving what it holds (owner side).

A rename in the workspace used to reach a mirror as a removal and a new path sent whole: the mirror
made the file again. On a real machine a rename keeps the file itself, and programs rely on it: one
that holds the file open (a log it appends to, a database) goes on writing into it under its new
name, a hard link stays a link, a process whose working directory is renamed stays in it. So a push
carries the renames it can (:class:`~computer.runtime._backend.SyncPush` ``moves``) and the mirror
renames its own node (``Mirror.move``); a live sandbox's pull also takes what a program wrote below
a renamed path since the last sync to the new name (``SyncPull.follow_moves``).

A rename can be followed when the mirror holds the old path as it was before it: no earlier change
since the mirror's revision touched it (itself, an ancestor, a descendant) other than a rename
followed before it, and the mirror does not lack anything there (a path it must fetch again).
Both names are strictly below the mirror's root. Anything else is sent as before (removed, then
sent whole), which is always correct; following is only ever a better way to the same tree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..storage import TOUCH
from ..storage.paths import is_within
from ..storage.types import Change
from ._backend import MirrorFile, SyncPull
from ._pull_rules import Conflicts

__all__ = ["Followed", "Move", "carried", "follow", "followable", "moved_names", "translate"]


@dataclass(frozen=True, slots=True)
class Move:
    """One workspace rename a mirror follows: ``src`` moved to ``dst`` in revision ``rev``."""

    src: str
    dst: str
    rev: int
    # The workspace's changes below ``src`` before the rename, at their new names (:func:`carried`):
    # a pull's mirror fetches them again once it followed the rename (the next push leaves the
    # rename's revision out, and names them at their old paths).
    carried: tuple[str, ...] = ()


# Earlier entries a push's :func:`carried` may look at again in all (each rename it carries looks at
# every one before it): 10,000 directories each written below, then renamed, stay linear past it.
CARRY_WORK = 200_000


def followable(
    changes: Sequence[Change], root: str, lacking: Iterable[str] = ()
) -> tuple[list[Move], set[int]]:
    """The renames among ``changes`` (in log order) a mirror can follow, and the indexes of the
    entries they account for: the removal of the old name, the new name, and earlier changes at or
    below the new name (the rename replaced what they made); a push leaves those out. ``lacking``:
    paths the mirror does not hold as the workspace did (it fetches them again): a rename of them is
    not followed."""
    moves, followed, _ = _followable(changes, root, lacking, carry=False)
    return moves, followed


def carried(
    changes: Sequence[Change], root: str, lacking: Iterable[str] = ()
) -> tuple[list[Move], set[int], list[Change]]:
    """:func:`followable` for a push and a live pull, which also follow a rename of a directory the workspace wrote
    below before (``write d/x``, then ``mv d e``): the mirror moves the directory and the push sends
    those earlier changes at their new names (the log returned, each such entry's path translated).
    Before, such a directory was removed and sent whole: a background process working in it (its
    working directory, a log it holds open) went on in a removed directory, and everything it wrote
    from then on was lost, unreported. Not when one of them names a source (a link, a rename not
    followed) or the mirror lacks something there: sent as before."""
    return _followable(changes, root, lacking, carry=True)


def _followable(
    changes: Sequence[Change], root: str, lacking: Iterable[str], *, carry: bool
) -> tuple[list[Move], set[int], list[Change]]:
    lacking = list(lacking)
    missing = Conflicts(lacking)  # the mirror lacks these: no rename at, above or below them
    touched = Conflicts(lacking)  # ... and the paths of the earlier changes not followed
    sourced = Conflicts([])  # the paths of those that name a source (a link, a rename not followed)
    timed = Conflicts([])  # directories whose time alone changed (``"touch"``): never in a rename's way
    times: list[int] = []  # ... their entries, carried to a followed rename's new name (within the budget)
    log = list(changes)
    budget = CARRY_WORK  # entries looked at again to carry them: past it, renames are not carried
    moves: list[Move] = []
    followed: set[int] = set()
    earlier: list[int] = []  # entries not followed so far
    i, count = 0, len(log)
    while i < count:
        change = log[i]
        if change.op == TOUCH:  # a name made or removed in it: nothing below it changed
            timed.add(change.path)
            times.append(i)
            i += 1
            continue
        after = log[i + 1] if i + 1 < count else None
        if (
            change.op == "rm"
            and after is not None
            and after.op == "rename"
            and after.source == change.path
            and after.rev == change.rev
            and _strictly_below(change.path, root)
            and _strictly_below(after.path, root)
            and not is_within(after.path, change.path)
            and not (
                touched.hit(change.path)
                and not (
                    carry and len(earlier) <= budget and _carries(change.path, touched, sourced, missing)
                )
            )
        ):
            src, dst = change.path, after.path
            followed.update((i, i + 1))
            if dst in touched.touched or dst in touched.above:
                # Earlier changes at or below the new name are superseded: the rename replaced them
                # (not those below the old name, carried along: ``mv d/sub d`` keeps d/sub's).
                followed.update(
                    j for j in earlier if is_within(log[j].path, dst) and not is_within(log[j].path, src)
                )
            moved: list[str] = []
            if carry and src in touched.above:  # the mirror holds them at the new name from now on
                budget -= len(earlier)
                for j in earlier:
                    if j not in followed and is_within(log[j].path, src):
                        log[j] = dataclasses.replace(log[j], path=dst + log[j].path[len(src) :])
                        touched.add(log[j].path)  # (the old paths stay: only ever more cautious)
                        moved.append(log[j].path)
            if carry and (src in timed.touched or src in timed.above) and len(times) <= budget:
                budget -= len(times)  # its directories' times go with it (no refetch: ``moved``)
                for j in times:
                    if is_within(log[j].path, src):
                        log[j] = dataclasses.replace(log[j], path=dst + log[j].path[len(src) :])
            moves.append(Move(src, dst, change.rev, tuple(dict.fromkeys(moved))))
            i += 2
            continue
        touched.add(change.path)
        if change.source is not None:
            sourced.add(change.path)
        earlier.append(i)
        i += 1
    return moves, followed, log


def _carries(src: str, touched: Conflicts, sourced: Conflicts, missing: Conflicts) -> bool:
    """Whether a push can follow a rename of ``src`` that earlier changes below it touched, carrying
    them to the new name: none is at or above it, none below it names a source, and the mirror lacks
    nothing at, above or below it."""
    if missing.hit(src) or src in sourced.touched or src in sourced.above:
        return False
    path = src
    while path:
        if path in touched.touched:
            return False
        path = path.rpartition("/")[0]
    return True


def translate(path: str, moves: Sequence[Move]) -> tuple[str, list[int]]:
    """Where ``path`` (as the mirror held it before ``moves``) is after them, and the indexes of the
    moves that took it there (none: it did not move)."""
    chain: list[int] = []
    for index, move in enumerate(moves):
        if is_within(path, move.src):
            path = move.dst + path[len(move.src) :]
            chain.append(index)
    return path, chain


def moved_names(paths: Iterable[str], moves: Sequence[tuple[str, str, int]]) -> list[str]:
    """Where each of ``paths`` that ``moves`` (``(old, new, rev)``, in order) took elsewhere is now: a
    live pull's refused path the workspace then renamed (``rm -r c0`` refused while the workspace
    renamed ``c0`` to ``e0``) is fetched again there too (before: only ``c0``, gone, while the mirror
    kept what it made at ``c0`` for an earlier rename into it, with its own mode, as ``e0``: s50/h7)."""
    steps = [Move(src, dst, rev) for src, dst, rev in moves]
    return [moved for path in paths if (moved := translate(path, steps)[0]) != path]


@dataclass
class Followed:
    """A pull page with what the program changed below renamed paths taken to the new names."""

    pull: SyncPull
    moves: list[Move]
    translated: set[str]  # new names of the page that were translated and may be applied
    refused: list[str]  # translated paths the workspace changed after the rename (conflicts)


def follow(pull: SyncPull, changes: Sequence[Change], root: str) -> Followed:
    """Translate a live pull's page through the workspace's followable renames since its base.

    The program's changes since the last sync are taken to have come before the rename (a program
    holding a file open writes into it under its new name on any machine), so each goes to the path's
    new name, unless the workspace changed that name after the rename (itself, an ancestor or a
    descendant: another rename over it, a write, a removal), which is a conflict as in any pull. A
    removal of the renamed path itself is not translated (the rename and the removal cannot both
    have happened: the pull's ordinary conflict rule keeps the workspace's rename)."""
    moves, followed, log = carried(changes, root, pull.protected)
    if not moves:
        return Followed(pull, [], set(), [])
    later = Conflicts([c.path for i, c in enumerate(log) if i not in followed and c.op != TOUCH])
    translated: set[str] = set()
    refused: list[str] = []

    def new_name(path: str, *, removal: bool = False) -> str | None:
        """The path's new name (itself when no rename took it), or None when refused."""
        moved, chain = translate(path, moves)
        if not chain:
            return path
        if removal and any(translate(path, moves[:j])[0] == moves[j].src for j in chain):
            return path  # left to the ordinary rule (a conflict)
        others = (m for j, m in enumerate(moves) if j not in chain)
        if later.hit(moved) or any(_touches(moved, m) for m in others):
            refused.append(moved)
            return None
        translated.add(moved)
        return moved

    files: list[MirrorFile] = []
    for f in pull.files:
        path = new_name(f.path)
        link = f.link if f.link is None else new_name(f.link)
        if path is not None and f.link is not None and link is None:
            # Its file's name refused: it stays on the page, as a link of that name's new name, so
            # the pull refuses it with it (``refused_files``: LINKED). Before, it was dropped unsaid:
            # neither pulled nor refused, the mirror took it as synced (s50/h7).
            link = translate(f.link, moves)[0]
        if path is not None:
            files.append(dataclasses.replace(f, path=path, link=link))
    dirs = [dataclasses.replace(d, path=p) for d in pull.dirs if (p := new_name(d.path)) is not None]
    symlinks = [dataclasses.replace(s, path=p) for s in pull.symlinks if (p := new_name(s.path)) is not None]
    deleted = [p for path in pull.deleted if (p := new_name(path, removal=True)) is not None]
    page = dataclasses.replace(pull, files=files, dirs=dirs, symlinks=symlinks, deleted=deleted)
    return Followed(page, moves, translated, refused)


def _touches(path: str, move: Move) -> bool:
    return any(is_within(path, p) or is_within(p, path) for p in (move.src, move.dst))


def _strictly_below(path: str, root: str) -> bool:
    return path != root and is_within(path, root)
