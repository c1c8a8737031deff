"""Which process a name left on the host belongs to, and whether that process still runs.

A pid alone is reused; a pid with its start time (clock ticks since boot, ``/proc/<pid>/stat`` field
22) names one process for the life of the machine. Scratch directories and run cgroups carry
:func:`process_tag`, so whoever starts later removes exactly those of processes that are gone.
"""

from __future__ import annotations

import functools
import os

__all__ = ["is_alive", "process_tag"]


@functools.cache
def _own_tag(pid: int) -> str:
    start = start_time(pid)
    assert start is not None  # this process runs
    return f"{pid}-{start}"


def process_tag() -> str:
    """``<pid>-<start time>`` of this process (after a fork, of the child)."""
    return _own_tag(os.getpid())


def start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot); None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[19])  # field 22 of the line; pid and (comm) are cut off
    except (OSError, IndexError, ValueError):
        return None


def is_alive(pid: int, start: int | None) -> bool:
    """Whether process ``pid`` started at ``start`` still runs (``start=None``: any process ``pid``,
    for names of earlier versions that carry no start time)."""
    if start is not None:
        return start_time(pid) == start
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
