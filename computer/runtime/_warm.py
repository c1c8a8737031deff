"""Warm sandboxes: whatever a backend starts *ahead* of a run, so that a run after a pause (an agent's
model turn) finds it ready. One concept for every backend and mode (issue 24 item 1):

- :class:`Ready` is what was started: a :class:`PreparedSandbox` (a standby sandbox and its assets
  bridge directory: the shell backend, a sandbox per call), a ``Launched`` live sandbox whose init
  already runs (shell and python, live), or a python ``Guest`` (an interpreter waiting for its run:
  the python backend, a sandbox per call);
- :class:`Warm` is one of them on its way (started :data:`PREPARE_DELAY` after the run that asked for
  it, or at once when a run wants it first), taken once or ended;
- :class:`Spares` are those kept for one mirror (its ``standby``), oldest first;
- :class:`WarmSandboxes` is a backend's whole set: per mirror one (two while its runs come back to
  back), at most ``cap`` in all for the most recently used mirrors, every one ended at exit (their
  cgroups would outlive this process otherwise).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from ._assets_bridge import SANDBOX_DIR, AssetsBridge
from ._bwrap import Bind
from ._mirror import Mirror
from ._sandbox import Sandbox
from ._standby import Standby
from ._tasks import in_background, offload, run_to_completion

__all__ = [
    "PREPARE_DELAY",
    "STANDBYS_BACK_TO_BACK",
    "PreparedSandbox",
    "Ready",
    "Spares",
    "Warm",
    "WarmSandboxes",
    "prepare_sandbox",
]

log = logging.getLogger(__name__)

# Seconds between the end of a run and the start of what its mirror's next run will take.
PREPARE_DELAY = 0.002

# Kept for a mirror whose runs come back to back (one otherwise), where a second one helps.
STANDBYS_BACK_TO_BACK = 2


class Ready(Protocol):
    """Something started ahead of its run."""

    def usable(self) -> bool:
        """Still waiting for its run (alive, on this event loop)."""
        ...

    async def discard(self) -> None:
        """End it and reap it (runs to completion)."""
        ...

    def discard_now(self) -> None:
        """End it from any thread, or after its event loop is gone."""
        ...


R = TypeVar("R", bound=Ready)


class PreparedSandbox(NamedTuple):
    """A standby sandbox and the assets bridge directory bound in it."""

    standby: Standby
    bridge_dir: Path

    def usable(self) -> bool:
        return self.standby.usable()

    async def discard(self) -> None:
        await self.standby.discard()
        await offload(None, AssetsBridge.remove_directory, self.bridge_dir)

    def discard_now(self) -> None:
        self.standby.discard_now()
        AssetsBridge.remove_directory(self.bridge_dir)


async def prepare_sandbox(
    sandbox: Sandbox,
    scratch: Path,
    binds: list[Bind],
    bridge_dir: Path | None = None,
    *,
    init: bool = False,
    ids: tuple[int, int] | None = None,
) -> PreparedSandbox:
    """A standby of ``sandbox`` with ``binds`` and an assets bridge directory (fresh, in ``scratch``,
    unless given) bound at :data:`SANDBOX_DIR`; ``init``: for a live sandbox's init (its pid 1);
    ``ids``: the host ids it runs as (its mirror's, ``Mirror.owner``; default the sandbox's)."""
    ids = ids or sandbox.host_ids
    if bridge_dir is None:
        bridge_dir = await offload(None, AssetsBridge.make_directory, scratch / "run", ids)
    try:
        binds = [*binds, Bind(str(bridge_dir), SANDBOX_DIR)]
        standby = await sandbox.prepare(binds=binds, as_pid_1=init, ids=ids)
    except BaseException:
        AssetsBridge.remove_directory(bridge_dir)
        raise
    return PreparedSandbox(standby, bridge_dir)


class Warm(Generic[R]):
    """One :class:`Ready` being started in the background for one mirror's next run.

    Taken once by that run (:meth:`take`); otherwise :meth:`close` ends it, from any thread (a mirror
    may be dropped from a worker thread) and on any event loop state.
    """

    def __init__(self, task: asyncio.Future[R], go: asyncio.Future[None] | None = None) -> None:
        self.task = task
        self.go = go  # its start signal (None: it starts at once)
        self.loop = asyncio.get_running_loop()
        self.taken = False
        self.closed = False

    @classmethod
    def start(cls, make: Callable[[], Awaitable[R]], delay: float = PREPARE_DELAY) -> Warm[R]:
        """``make()`` ``delay`` seconds from now (the run that asked delivers its result first: the
        spawn's cgroup set-up and fork run on the event loop), or as soon as a run takes it."""
        loop = asyncio.get_running_loop()
        go: asyncio.Future[None] = loop.create_future()
        loop.call_later(delay, _signal, go)

        async def started() -> R:
            await go
            return await make()

        return cls(asyncio.ensure_future(started()), go)

    async def take(self) -> R | None:
        """What was started, or None (it failed, died, or belongs to another event loop)."""
        if self.closed or asyncio.get_running_loop() is not self.loop:
            self.close()
            return None
        self.taken = True
        if self.go is not None:
            _signal(self.go)  # a run is here: start it now
        try:
            ready = await asyncio.shield(self.task)
        except asyncio.CancelledError:
            self.taken = False
            self.close()
            raise
        except Exception as exc:
            # Said aloud: without it every run would silently pay a cold start.
            log.warning("a sandbox started ahead failed to start (this run starts its own): %r", exc)
            return None
        if not ready.usable():
            await run_to_completion(ready.discard())
            return None
        return ready

    def close(self) -> None:
        if self.taken or self.closed:
            return
        self.closed = True
        if self.loop.is_closed():
            self.end_now()
            return
        try:
            self.loop.call_soon_threadsafe(self._end_in_loop)
        except RuntimeError:  # the loop closed meanwhile
            self.end_now()

    async def aclose(self) -> None:
        """End it and wait until it is reaped (in its own event loop)."""
        if self.taken or self.closed:
            return
        if asyncio.get_running_loop() is not self.loop:
            self.close()
            return
        self.closed = True
        await run_to_completion(self._end())

    async def _end(self) -> None:
        if self.go is not None and not self.go.done():
            self.task.cancel()  # not started yet: never start it
        try:
            ready = await self.task
        except BaseException as exc:  # it never started (failed or cancelled): nothing to end
            log.debug("a sandbox started ahead ended before it was ready: %r", exc)
            return
        await ready.discard()

    def _end_in_loop(self) -> None:
        in_background(self._end(), "ending a sandbox started ahead")

    def end_now(self) -> None:
        """End it at once if it is ready (at exit, or once its loop is gone)."""
        self.closed = True
        if self.task.done() and not self.task.cancelled() and self.task.exception() is None:
            self.task.result().discard_now()


class Spares(Generic[R]):
    """What was started ahead for one mirror (its ``standby``), oldest first."""

    def __init__(self) -> None:
        self.items: list[Warm[R]] = []
        # The last run found one still starting: runs come back to back.
        self.busy = False

    def pop(self) -> Warm[R] | None:
        """The one for the next run: the oldest ready one, else the oldest (or None)."""
        if not self.items:
            return None
        chosen = next((w for w in self.items if w.task.done()), self.items[0])
        self.items.remove(chosen)
        # Back to back while a run finds one still starting (the one it takes, or the next).
        self.busy = not all(w.task.done() for w in (chosen, *self.items))
        return chosen

    def discard(self, warm: Warm[R]) -> None:
        with contextlib.suppress(ValueError):
            self.items.remove(warm)

    def take_all(self) -> list[Warm[R]]:
        items, self.items = self.items, []
        return items

    def close(self) -> None:
        for warm in self.take_all():
            warm.close()


class WarmSandboxes(Generic[R]):
    """A backend's warm sandboxes: per mirror ``per_mirror`` (``back_to_back`` while its runs come
    back to back), at most ``cap`` in all (the most recently used mirrors keep theirs), plus those of
    runs without a mirror (:meth:`take`/:meth:`keep` with ``mirror=None``)."""

    def __init__(self, cap: int, *, per_mirror: int = 1, back_to_back: int = STANDBYS_BACK_TO_BACK) -> None:
        self.cap = cap
        self.per_mirror = per_mirror
        self.back_to_back = max(back_to_back, per_mirror)
        self.kept: OrderedDict[Warm[R], Mirror | None] = OrderedDict()
        self.unmirrored: Spares[R] = Spares()
        _ALL.add(self)

    def _spares(self, mirror: Mirror | None) -> Spares[R] | None:
        if mirror is None:
            return self.unmirrored
        return mirror.standby if isinstance(mirror.standby, Spares) else None

    async def take(self, mirror: Mirror | None) -> R | None:
        """What was started ahead for ``mirror``'s next run (None: nothing, or it was not usable)."""
        spares = self._spares(mirror)
        warm = spares.pop() if spares is not None else None
        if warm is None:
            return None
        self.kept.pop(warm, None)  # no longer counted against the cap
        return await warm.take()

    def keep(self, mirror: Mirror | None, make: Callable[[], Awaitable[R]]) -> None:
        """Start what ``mirror``'s next run will take, in the background (see the class docstring).

        Started once a run is over (a sandbox starting next to a running program slows it down).
        """
        if self.cap <= 0 or self.per_mirror <= 0 or (mirror is not None and not mirror.directory.is_dir()):
            return
        for gone in [w for w in self.kept if w.closed or w.taken]:  # ended with their mirror
            del self.kept[gone]
        spares = self._spares(mirror)
        if spares is None:
            assert mirror is not None
            mirror.drop_standby()
            spares = Spares()
            mirror.standby = spares
        while len(spares.items) < (self.back_to_back if spares.busy else self.per_mirror):
            warm = Warm.start(make)
            spares.items.append(warm)
            self.kept[warm] = mirror
        while len(self.kept) > self.cap:
            oldest, owner = self.kept.popitem(last=False)
            spares = self._spares(owner)
            if spares is not None:
                spares.discard(oldest)
            oldest.close()

    async def close(self, mirrors: list[Mirror]) -> None:
        """End what was started ahead for ``mirrors`` (the mirrors stay) and for runs without one."""
        ends = [warm.aclose() for warm in self.unmirrored.take_all()]
        for mirror in mirrors:
            spares = mirror.take_standby()
            if isinstance(spares, Spares):
                ends += [warm.aclose() for warm in spares.take_all()]
        await asyncio.gather(*ends)

    def end_now(self) -> None:
        for warm in [*self.kept, *self.unmirrored.items]:
            if not warm.taken:
                warm.end_now()


def _signal(go: asyncio.Future[None]) -> None:
    if not go.done():
        go.set_result(None)


_ALL: weakref.WeakSet[WarmSandboxes[Any]] = weakref.WeakSet()


@atexit.register
def _end_all_now() -> None:
    """At exit they would die with this process (bubblewrap's --die-with-parent), but their cgroups
    would stay behind: end them first."""
    for warm in list(_ALL):
        warm.end_now()
