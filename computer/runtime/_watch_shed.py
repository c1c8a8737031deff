"""Which watch gives its watches back when the inotify queue every mirror of a process shares nears
its overflow (``_watch``).

An overflow (``IN_Q_OVERFLOW``: the kernel's ``max_queued_events``, 16,384 here) loses events of
anyone's, so it breaks every watch of the process: each mirror then walks its whole tree and watches
it anew. One live sandbox's program writing two files in turn (inotify merges only an event equal to
the last one queued: ~1 million events a second from a Python loop) overflowed it 52 times in 4 s,
and another workspace's live sandbox walked its tree 38 times meanwhile. Near an overflow (half the
queue, counted at the size of the events just read), the watch with at least half the events of that
read (one watch's flood, not many at once) is the one that gives its watches back; its mirror is
walked for a while instead (``_mirror_watch.SHED_FOR``), the others keep theirs.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import TypeVar

from ._inotify_abi import EVENT

__all__ = ["flooding"]

T = TypeVar("T")


def flooding(data: bytes, owners: Mapping[int, T], queued: int, queue_events: int) -> T | None:
    """The owner (by watch descriptor in ``owners``) flooding the queue, given one full read ``data``
    of it and the bytes still ``queued`` there; None when the queue is not near its overflow or no
    one owner has half the events of ``data``."""
    half = queue_events // 2
    if queued < half * EVENT.size:
        return None  # under half even at the smallest event
    by_wd: collections.Counter[int] = collections.Counter()
    offset, head, events = 0, EVENT.size, 0
    while offset + head <= len(data):
        wd, _mask, _cookie, length = EVENT.unpack_from(data, offset)
        offset += head + length
        by_wd[wd] += 1
        events += 1
    if not events or queued * events < half * len(data):
        return None
    counts: collections.Counter[int] = collections.Counter()
    first: dict[int, T] = {}
    for wd, count in by_wd.items():
        owner = owners.get(wd)
        if owner is not None:
            counts[id(owner)] += count
            first.setdefault(id(owner), owner)
    if not counts:
        return None
    key, most = counts.most_common(1)[0]
    return first[key] if 2 * most >= events else None
