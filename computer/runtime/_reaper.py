"""What dead processes left on this host, removed every :data:`DEAD_PERIOD` by each process that keeps
live sandboxes (:func:`reap_periodically`, a daemon thread).

A process that dies without cleaning up (a pool worker SIGKILLed) leaves its run cgroups and its
scratch directories. The next process to probe cgroups or make a scratch directory in a base removes
them (``_cgroups.remove_stale_groups``, ``_scratch.reap_dead``), so a worker restarted in place cleans
up after its dead self. One restarted on another node, or out of restarts, did not: its siblings on the
node ran on and never looked again, and what it left stayed for good:

- a live sandbox frozen for a sync when its worker died stays frozen (its die-with-parent SIGKILL
  waits for a thaw), holding its memory (``_cgroups.sweep`` thaws it first);
- its mirrors, full copies of up to 64 workspaces, on tmpfs (``/dev/shm``) by default: memory too.

Every pass looks at each base a live backend of this process keeps its mirrors in (its ``computer-*``
entries, each judged by its name and ``.owner`` mark) and at each controller's ``computer-exec`` (one
``/proc/<pid>/stat`` read per group), and removes what belongs to dead processes.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from . import _scratch
from ._cgroups import remove_dead_groups

__all__ = ["DEAD_PERIOD", "reap_once", "reap_periodically"]

log = logging.getLogger(__name__)

# Seconds between two passes: the longest a dead sibling's frozen sandbox and mirrors hold memory while
# this process lives. A pass that finds nothing dead costs ~1 ms for 100 entries of ``/tmp`` and ~2.3
# ms for 300 run groups of live processes; removing what it finds is bounded per group
# (``remove_groups``) and per tree (``remove_tree``).
DEAD_PERIOD = 30.0

_reaper: threading.Thread | None = None  # this process's (``reap_periodically``)
_lock = threading.Lock()
_bases: set[Path] = set()  # where this process's live backends keep their scratch directories


def reap_periodically(base: Path) -> None:
    """Look at ``base`` (where a live backend keeps this process's scratch directory) from now on, and
    start this process's reaper (one per process; a call while it runs does nothing else)."""
    global _reaper
    with _lock:
        _bases.add(base)
        if _reaper is not None and _reaper.is_alive():
            return
        _reaper = threading.Thread(target=_reap, args=(DEAD_PERIOD,), name="computer-reaper", daemon=True)
        _reaper.start()


def _reap(period: float) -> None:
    me = threading.current_thread()
    while True:
        time.sleep(period)
        if _reaper is not me:  # no longer the reaper (replaced): stop
            return
        try:
            reap_once()
        except Exception as exc:  # tried again next period
            log.warning("removing what dead processes left failed: %r", exc)


def reap_once() -> None:
    """Remove dead processes' run cgroups (their sandboxes killed, a frozen one thawed first), then
    what they left in every base of :func:`reap_periodically` (mirrors those sandboxes had bound)."""
    remove_dead_groups()
    with _lock:
        bases = sorted(_bases)
    for base in bases:
        _scratch.reap_dead(base, groups=False)  # (their cgroups: removed just above)
