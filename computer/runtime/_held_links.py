"""Hard links as a mirror's state holds them (``Mirror.state``: relative path -> :class:`Entry`, and
``Mirror.linked``: the inodes of files seen with several names): which of them lie at or below a
path, which lost a name in a pull, and which names of them lie elsewhere. Pure look-ups over the state,
shared by the push and the pull sides."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ._entry import INO, KIND, entry_of

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from ._mirror_base import Entry, PullPlan

__all__ = [
    "is_utf8",
    "linked_at",
    "lost_names",
    "names_elsewhere",
    "rename_at",
    "share_names",
    "unheld_names",
]


def linked_at(state: Mapping[str, Entry], linked: set[int], rel: str) -> set[int]:
    """Inodes of files seen with several names (``linked``) held at or below ``rel``."""
    if not linked:
        return set()
    entry = state.get(rel)
    if entry is not None and entry[KIND] != "d":
        return {entry[INO]} & linked if entry[KIND] == "f" else set()
    prefix = rel + "/"
    return {e[INO] for k, e in state.items() if e[KIND] == "f" and e[INO] in linked and k.startswith(prefix)}


def lost_names(
    state: Mapping[str, Entry], now: Mapping[str, Entry], candidates: Iterable[str], linked: set[int]
) -> set[int]:
    """Linked files (inodes) that lost a name among ``candidates``: the state held it, ``now`` has
    nothing there or another node."""
    lost = set()
    for rel in candidates:
        old = state.get(rel)
        if old is not None and old[0] == "f" and old[1] in linked:
            entry = now.get(rel)
            if entry is None or entry[0] != "f" or entry[1] != old[1]:
                lost.add(old[1])
    return lost


def names_elsewhere(state: Mapping[str, Entry], inodes: set[int], rel: str) -> list[str]:
    """The names of ``inodes`` the state holds neither at nor below ``rel``."""
    if not inodes:
        return []
    prefix = rel + "/"
    return [
        k
        for k, e in state.items()
        if e[KIND] == "f" and e[INO] in inodes and k != rel and not (rel == "" or k.startswith(prefix))
    ]


def rename_at(src: str, dst: str, src_fd: int, dst_fd: int) -> os.stat_result:
    """``rename(2)`` of ``src`` (in the directory ``src_fd``) to ``dst`` (in ``dst_fd``), the ``lstat``
    of ``dst`` after it. Where both were names of one file, ``rename(2)`` does nothing and leaves both;
    the workspace's rename leaves ``dst`` only, so ``src`` is unlinked (before, the mirror kept it and
    took it for gone: a name the sandbox had and the workspace did not, s50/h7)."""
    os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
    moved = os.lstat(dst, dir_fd=dst_fd)
    if moved.st_nlink > 1:
        try:
            left = os.lstat(src, dir_fd=src_fd)
        except FileNotFoundError:
            return moved
        if left.st_ino == moved.st_ino and left.st_dev == moved.st_dev:
            os.unlink(src, dir_fd=src_fd)
            moved = os.lstat(dst, dir_fd=dst_fd)
    return moved


def unheld_names(now: Mapping[str, Entry], candidates: Iterable[str]) -> list[str]:
    """The names (UTF-8) not among ``candidates`` of the files among them named in a way the workspace
    cannot hold (not UTF-8): a write through such a name changes the file under every name, and no
    event names the others. Before, ``ln good $'bad\\xff'; echo x >> $'bad\\xff'`` left ``good``'s old
    content in the workspace (and, after a reopen, in the sandbox)."""
    candidates = set(candidates)
    inodes = {
        now[rel][INO] for rel in candidates if rel in now and now[rel][KIND] == "f" and not is_utf8(rel)
    }
    if not inodes:
        return []
    return [
        k
        for k, e in now.items()
        if e[KIND] == "f" and e[INO] in inodes and k not in candidates and is_utf8(k)
    ]


def is_utf8(rel: str) -> bool:
    """Whether the workspace can hold the name ``rel`` (a mirror's names are ``os.fsdecode``-d: bytes
    that are not UTF-8 come as surrogates), a symlink's target too."""
    if rel.isascii():
        return True
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def share_names(
    plan: PullPlan,
    state: Mapping[str, Entry],
    now: dict[str, Entry],
    first_name: Mapping[int, str],
    directory: Path,
    workspace_path: Callable[[str], str],
) -> set[int]:
    """The other names of the files ``plan`` writes that have several (a write through one hard link
    changes them all); the inodes of those files (``Mirror.linked``).

    A file the program wrote through, not replaced (the state had that inode at that name), is
    written through its node in the workspace (``plan.same``, ``MirrorFile.same``: every name there,
    checked by the store against the workspace's changes), so its other names are not sent: they take
    its entry (the same inode's), as a ``touch`` of any name gives them all. Before, every other name
    went in the pull as a link of it: an append to a file of 20,000 names cost 20,000 link commits
    (two change-log rows each) on the owner's loop every sync. A file the program replaced at that
    name (``sed -i``) and linked again is sent as before: a new file, its other names as links (their
    entries read again: ``ln d/e m/c`` changes ``d/e``'s ctime with no event in ``d``, and its stale
    entry failed a later workspace rename of it, fetched whole, apart from ``m/c``)."""
    shared = []
    for rel, _ in plan.files:
        try:
            if os.lstat(directory / rel).st_nlink > 1:
                shared.append(rel)
        except OSError:
            pass
    if not shared:
        return set()
    by_ino: dict[int, list[str]] = {}
    for rel, entry in now.items():
        if entry[KIND] == "f":
            by_ino.setdefault(entry[INO], []).append(rel)
    listed = {rel for rel, _ in plan.links}
    for rel in shared:
        entry = now[rel]
        ino = entry[INO]
        old = state.get(rel)
        same = old is not None and old[KIND] == "f" and old[INO] == ino
        if same:
            plan.same.add(rel)
        for other in by_ino.get(ino, ()):
            if other != rel and other not in listed and first_name.get(ino) != workspace_path(other):
                if not is_utf8(other):
                    continue  # not UTF-8: the mirror's alone, as the plan left it (the store refused it)
                if same:
                    now[other] = entry
                    plan.shared.setdefault(workspace_path(rel), []).append(workspace_path(other))
                    continue
                plan.links.append((other, first_name[ino]))
                listed.add(other)
                try:
                    now[other] = entry_of(os.lstat(directory / other))
                except OSError:
                    pass
    return {now[rel][INO] for rel in shared}
