"""The directories of a sync batch (``commit_batch``'s ``mkdirs``): a tree of new directories in three
``executemany`` statements (below a directory the batch made nothing can exist yet, so no lookups)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from ._resolve import lookup, resolve
from ._schema import DIR
from ._state import CACHE_LIMIT, JSON_ROWS, Mutation, Store, now_ms
from ._tree import ensure_dirs
from .paths import join

__all__ = ["make_dirs"]


def make_dirs(
    st: Store,
    dirs: Sequence[str],
    modes: Mapping[str, int],
    mtimes: Mapping[str, int],
    m: Mutation,
    sub_ns: Mapping[str, int] | None = None,
) -> set[str]:
    """Ensure the directories ``dirs`` (canonical, distinct) and their missing parents: each of ``dirs``
    made with its mode in ``modes`` (cleaned already: ``clean_mode``) and its mtime in ``mtimes`` (else
    0o755 and now), a parent made here likewise (else 0o755 and now); returns those of ``dirs`` it
    made and the parents it made with a mode or mtime given (nothing more to set on them). ``sub_ns``:
    the nanoseconds past the ms of a path's mtime (``inodes.sub_ns``; 0 when missing), in the rows
    themselves (a pull's directories have them, ``tar -x``'s and ``mkdir``'s alike; a tree top made
    by :func:`ensure_dirs` takes its own after).

    Parents come first (the paths sorted, ancestors added). A directory whose parent this call made
    cannot exist yet: it is made without a lookup, and all such rows go in three ``executemany``
    statements (inodes, with ids allocated past the largest as SQLite itself would; entries; the
    change log) instead of four statements each (a pull of ``mkdir -p`` of 1,110 directories made
    ~4,450: ~57 ms of a live sandbox's mkdir row). Below a directory that was there, one probe
    finds the name (a directory: kept; missing: made as above). Anything else (the top of a tree, a
    link or a file in the way) goes through :func:`ensure_dirs` (links followed, files replaced)
    after the rows held so far are written.
    """
    wanted = set(dirs)
    order = list(dirs)  # with the missing parents, sorted below: parents first
    seen = set(wanted)
    last = ""
    for p in dirs:
        parent = p.rpartition("/")[0] or "/"
        if parent == last:
            continue  # a sibling of the path before: its parents are in ``seen`` already
        last = parent
        while parent not in seen and parent != "/":
            seen.add(parent)
            order.append(parent)
            parent = parent.rpartition("/")[0] or "/"
    order.sort()  # the paths given sorted and their parents after them: two runs, merged
    # Parents made here take theirs too when given (a pull's ``mkdir -p`` names only the leaves).
    # Looked up by directory (files' entries, never made here, are never asked for; no filtered copy).
    dir_modes, dir_mtimes = modes, mtimes  # modes clean already (``clean_mode``)
    given = bool(dir_modes or dir_mtimes)  # else every directory 0o755 and now
    fresh: dict[str, tuple[int, str]] = {}  # made here: path -> (inode, real path)
    known: dict[str, tuple[int, str]] = {}  # there before: path -> (inode, real path)
    # The rows held for one flush, as columns: inode ids run from ``first`` (consecutive).
    first = 0
    new_modes: list[int] = []
    new_mtimes: list[int] = []
    entries: list[tuple[int, str, int]] = []
    logs: list[str] = []
    next_id = 0
    new_subs: list[int] = []  # the nanoseconds past each mtime, when the batch gives any (``sub_ns``)
    sub_ns = sub_ns or {}

    def flush() -> None:
        nonlocal next_id
        if new_modes:
            mtime, mode = new_mtimes[0], new_modes[0]
            many = len(new_modes) >= JSON_ROWS
            subs = new_subs if any(new_subs) else None  # a pull's directories have them; ``mkdir`` none
            if many and subs is None and new_mtimes.count(mtime) == len(new_mtimes):
                # Ids are consecutive and often one mtime for all (made here, now): the modes as one
                # JSON array (1,000 rows ~0.5 ms, a row at a time ~1.3).
                st.db.execute(
                    "INSERT INTO inodes (id, kind, mode, mtime, size) SELECT ? + key, ?, value, ?, 0 "
                    "FROM json_each(?)",
                    (first, DIR, mtime, json.dumps(new_modes)),
                )
            elif many and subs is None and new_modes.count(mode) == len(new_modes):
                # ... or one mode (a pull sends the program's times): the mtimes as the array.
                st.db.execute(
                    "INSERT INTO inodes (id, kind, mode, mtime, size) SELECT ? + key, ?, ?, value, 0 "
                    "FROM json_each(?)",
                    (first, DIR, mode, json.dumps(new_mtimes)),
                )
            elif many and subs is None:  # [mode, mtime] pairs
                st.db.execute(
                    "INSERT INTO inodes (id, kind, mode, mtime, size) "
                    "SELECT ? + key, ?, value ->> 0, value ->> 1, 0 FROM json_each(?)",
                    (first, DIR, json.dumps(list(zip(new_modes, new_mtimes, strict=True)))),
                )
            elif many and new_modes.count(mode) == len(new_modes):  # a pull's: [mtime, sub_ns] pairs
                st.db.execute(
                    "INSERT INTO inodes (id, kind, mode, mtime, size, sub_ns) "
                    "SELECT ? + key, ?, ?, value ->> 0, 0, value ->> 1 FROM json_each(?)",
                    (first, DIR, mode, json.dumps(list(zip(new_mtimes, new_subs, strict=True)))),
                )
            elif many:  # [mode, mtime, sub_ns] triples (in the same statement: no second pass)
                st.db.execute(
                    "INSERT INTO inodes (id, kind, mode, mtime, size, sub_ns) "
                    "SELECT ? + key, ?, value ->> 0, value ->> 1, 0, value ->> 2 FROM json_each(?)",
                    (first, DIR, json.dumps(list(zip(new_modes, new_mtimes, new_subs, strict=True)))),
                )
            else:
                st.db.executemany(
                    "INSERT INTO inodes (id, kind, mode, mtime, size, sub_ns) VALUES (?, ?, ?, ?, 0, ?)",
                    [
                        (first + i, DIR, mode, t, subs[i] if subs else 0)
                        for i, (mode, t) in enumerate(zip(new_modes, new_mtimes, strict=True))
                    ],
                )
            st.db.executemany("INSERT INTO dirents (parent, name, child) VALUES (?, ?, ?)", entries)
            m.log_op(logs, "mkdir")
            new_modes.clear()
            new_mtimes.clear()
            new_subs.clear()
            entries.clear()
            logs.clear()
        next_id = 0

    now = now_ms()  # one transaction: one time for the directories it makes without an mtime
    cache = st.cache  # written below as ``Store.remember`` does, without a call a directory
    push_mode, push_mtime, push_entry, push_log = (
        new_modes.append,
        new_mtimes.append,
        entries.append,
        logs.append,
    )
    for p in order:
        parent, _, name = p.rpartition("/")
        parent = parent or "/"
        above = fresh.get(parent)
        mode, mtime = (dir_modes.get(p, 0o755), dir_mtimes.get(p)) if given else (0o755, None)
        if above is None and p != "/" and (there := known.get(parent)) is not None:
            # Below a directory that was there: one probe (not a walk from the root: in a tree 1,500
            # deep, every ancestor walked from the root was ~1M lookups per pull).
            node = lookup(st, there[0], name)
            if node is not None and node[1] == DIR:
                known[p] = (node[0], join(there[1], name))
                continue
            if node is None:
                above = there  # missing: made below it like below a directory made here
        if above is None or p == "/":
            flush()
            before = m.logged
            ino = ensure_dirs(st, p, mode, m, replace_files=True, mtime=mtime)
            if m.logged != before:  # it made ``p``: nothing can be below it yet
                fresh[p] = (ino, resolve(st, p)[2])
                if sub_ns and mtime is not None and (sub := sub_ns.get(p)):
                    st.db.execute("UPDATE inodes SET sub_ns = ? WHERE id = ?", (sub, ino))  # (the tops)
            else:
                known[p] = (ino, resolve(st, p)[2])
            continue
        if not next_id:
            first = next_id = int(st.db.one("SELECT coalesce(max(id), 0) + 1 FROM inodes")[0])
        ino = next_id
        next_id += 1
        above_real = above[1]
        real = "/" + name if above_real == "/" else above_real + "/" + name  # ``join``
        push_mode(mode)
        push_mtime(now if mtime is None else mtime)
        if sub_ns:
            new_subs.append(0 if mtime is None else sub_ns.get(p, 0))
        push_entry((above[0], name, ino))
        push_log(real)
        if len(cache) >= CACHE_LIMIT:
            cache.clear()
        cache[real] = (ino, DIR)
        fresh[p] = (ino, real)
    flush()
    made = wanted.intersection(fresh)
    if given:
        made.update(fresh.keys() & (dir_modes.keys() | dir_mtimes.keys()))
    return made
