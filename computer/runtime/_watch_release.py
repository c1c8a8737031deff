"""A watch's inotify watches given back (``_watch._Inotify._forget``) without overflowing the queue
every mirror of the process shares.

Each ``inotify_rm_watch`` queues an ``IN_IGNORED`` event for the watch removed. A watch holds up to
``MAX_DIRS`` directories (48,135 here, from ``max_user_watches``), more than the shared queue holds
(``max_queued_events``, 16,384): before (s67), closing a mirror of 20,000 directories, or shedding one
(a flood, a rename storm: ``_watch_shed``, ``_watch_moves``), or one grown past ``MAX_DIRS``, queued
20,000 events at once; the queue overflowed, and every other mirror's watch of the process broke and
walked its whole tree (``tests/security/test_attacks10``). Now the watches go in slices of a quarter
of the queue, the queue read in between when the next slice might not fit: its other events go to
their owners as a cheap look's do (new directories left to the next full read), the ``IN_IGNORED``
ones to no one (the owner table no longer names those watches).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ._inotify_abi import EVENT

__all__ = ["give_back"]

# Bytes a read between slices takes, and reads at most (a full queue of events with long names).
READ_SIZE = 1 << 16
READS = 128


class _Instance(Protocol):
    fd: int

    def pump(self, size: int = ..., reads: int | None = ...) -> None: ...

    def _queued(self) -> int: ...


def give_back(
    instance: _Instance, wds: list[int], queue_events: int, rm_watch: Callable[[int, int], int]
) -> None:
    """``inotify_rm_watch`` each of ``wds`` (already out of the owner table), a slice at a time."""
    step = max(1, queue_events // 4)
    for start in range(0, len(wds), step):
        part = wds[start : start + step]
        if len(part) > 64 and instance._queued() // EVENT.size + len(part) > queue_events * 3 // 4:
            instance.pump(READ_SIZE, reads=READS)  # room first: the queue may hold others' events
        for wd in part:
            rm_watch(instance.fd, wd)  # EINVAL when the kernel dropped it: fine
