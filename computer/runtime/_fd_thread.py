"""One daemon thread of this process polling a changing set of descriptors (``FdThread``): what the
slirp4netns reaper (its processes' pidfds, ``_slirp``) and the slirp4netns supervisor (its seccomp
listeners, ``_slirp_guard``) each need for every sandbox with network, rather than a thread per
sandbox for its whole life, started on the event loop (a thread's start waits for the new thread's
first turn: tens of milliseconds on a loaded machine).

The thread starts with the first descriptor, and again in a forked child (the parent's descriptors
are not the child's concern: they are forgotten there). A descriptor is added from any thread; the
thread wakes through a pipe and polls it from then on. ``ready(fd, events)`` runs on the thread for
each event and says whether the descriptor is done: it is then unregistered and closed here. An
exception of ``ready`` is logged and the descriptor kept: the thread never ends, since every process
waiting on it (a supervised slirp4netns) would wait for good.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
from collections.abc import Callable

__all__ = ["FdThread"]

log = logging.getLogger(__name__)


class FdThread:
    """Descriptors polled by one daemon thread named ``name``; ``ready(fd, events) -> done``."""

    def __init__(self, name: str, ready: Callable[[int, int], bool]) -> None:
        self.name = name
        self._ready = ready
        self._lock = threading.Lock()
        self._fds: set[int] = set()
        self._wake: tuple[int, int] | None = None
        self._owner = 0  # the pid whose thread runs (a fork has none)

    def add(self, fd: int) -> None:
        """Poll ``fd`` from now on (this object closes it once ``ready`` says it is done)."""
        with self._lock:
            if self._owner != os.getpid():  # the first, or the first since a fork
                self._fds.clear()
                self._owner, self._wake = os.getpid(), os.pipe()
                os.set_blocking(self._wake[1], False)  # a wake already pending is enough
                threading.Thread(target=self._run, args=(self._wake[0],), name=self.name, daemon=True).start()
            self._fds.add(fd)
            assert self._wake is not None
            with contextlib.suppress(BlockingIOError):
                os.write(self._wake[1], b"x")

    def _run(self, wake: int) -> None:
        poller = select.poll()
        poller.register(wake, select.POLLIN)
        watched: set[int] = set()
        while True:
            with self._lock:
                fds = set(self._fds)
            for fd in fds - watched:
                poller.register(fd, select.POLLIN)
                watched.add(fd)
            for fd, events in poller.poll():
                if fd == wake:
                    os.read(wake, 4096)
                    continue
                try:
                    done = self._ready(fd, events)
                except Exception:
                    log.exception("%s", self.name)
                    continue
                if done:
                    poller.unregister(fd)
                    watched.discard(fd)
                    with self._lock:
                        self._fds.discard(fd)
                    os.close(fd)
