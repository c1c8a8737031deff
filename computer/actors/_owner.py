"""``OwnerActor``: the managed owner of one workspace (the durable object), with hibernation.

Created by :func:`computer.workspace_actor` as the detached named actor
``computer:ws:<data dir hash>:<name>`` (see :func:`~computer.actors.naming.actor_name`). When
nothing has used it for ``hibernate_after`` seconds (no call, stream, upload, held lock or running
execution), it stops answering (calls get MOVED, so clients re-resolve), closes its workspace, marks
itself hibernating in the directory and exits; the file stays, and the next call re-creates the owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from ..config import Settings
from ._host import WorkspaceHost
from .wire import moved

__all__ = [
    "CONTROL_GROUP",
    "CONTROL_METHODS",
    "CONTROL_SLOTS",
    "OWNER_GROUPS",
    "PROBE_GROUP",
    "STREAM_GROUP",
    "STREAM_GROUP_METHODS",
    "STREAM_SLOTS",
    "WAIT_GROUP",
    "WAIT_METHODS",
    "WAIT_SLOTS",
    "OwnerActor",
    "hop_stream",
]

log = logging.getLogger(__name__)

# The concurrency group ``workspace_actor`` gives a managed owner for its clients' probes (its own
# thread, loop and slot): a probe of the default group waits for one of the owner's
# ``max_concurrency`` slots, all of which calls that wait (lock requests, streams, runs) may hold,
# and such a busy owner looked stopped (see ``computer/client/_connection.py``).
PROBE_GROUP = "probe"
# The concurrency group for the lock calls that never wait (release, renew, cancel): a lock holder's
# release queued behind the lock requests it would wake when they held every slot of the default
# group, until its lease ran out (``tests/reliability/test_saturated_owner.py``). The calls run on the
# owner's own loop all the same (a group has a loop and thread of its own: they hop over).
CONTROL_GROUP = "control"
CONTROL_SLOTS = 64
CONTROL_METHODS = frozenset({"lock_release", "lock_renew", "lock_cancel", "lock_release_holder"})
# The concurrency group of the calls that wait for others (a lock request, a run's result or snapshots,
# a tool that takes a path lock or runs a command: the client says which, ``WAIT_METHODS`` are those
# an owner serves there): they held every slot of the default group, and an ordinary call (a read, a
# write, ``stats``, a pool worker's sync) queued behind them until a lock was released or its lease
# ran out, the owner answering its probes all the while. They run on the owner's own loop too.
WAIT_GROUP = "waits"
WAIT_SLOTS = 1_000  # a dedicated owner's (its default group has as many); an owner host's: 100,000
WAIT_METHODS = frozenset({"lock_acquire", "exec_result", "exec_snapshots", "run_tool"})
# The concurrency group of file streams (``stream``): the owner waits in one for as long as its reader
# is slow or stopped, so enough of them held every slot of the default group, and every ordinary call
# queued behind them. Not the wait group: a stream waits for its own reader only, never for another
# caller, and a lock holder reading a file must not queue behind the lock requests waiting for it
# (nor stopped readers hold up lock grants and runs' results). Each step runs on the owner's loop.
STREAM_GROUP = "streams"
STREAM_SLOTS = 1_000  # a dedicated owner's; an owner host's: 100,000
STREAM_GROUP_METHODS = frozenset({"stream"})
# Every group above: the owner's attribute naming it (a key of ``describe``) -> (group, slots). Agent
# actors have them too (``computer.agent.spawn``).
OWNER_GROUPS = {
    "probe_group": (PROBE_GROUP, 1),
    "control_group": (CONTROL_GROUP, CONTROL_SLOTS),
    "wait_group": (WAIT_GROUP, WAIT_SLOTS),
    "stream_group": (STREAM_GROUP, STREAM_SLOTS),
}
# The groups' names by keyword, as an owner's or an owner host's constructor takes them.
GROUP_NAMES = {keyword: group for keyword, (group, _) in OWNER_GROUPS.items()}

T = TypeVar("T")


class OwnerActor(WorkspaceHost):
    """A :class:`WorkspaceHost` that clients may re-create by name, and that hibernates when idle."""

    managed = True

    def __init__(
        self,
        name: str,
        config: Settings | dict[str, Any] | None = None,
        *,
        probe_group: str | None = None,
        control_group: str | None = None,
        wait_group: str | None = None,
        stream_group: str | None = None,
    ) -> None:
        super().__init__(name, config=config)
        self.probe_group = probe_group  # created with it (``PROBE_GROUP``): clients probe there
        self.control_group = control_group  # and ``CONTROL_GROUP``: clients release locks there
        self.wait_group = wait_group  # and ``WAIT_GROUP``: clients wait for locks and runs there
        self.stream_group = stream_group  # and ``STREAM_GROUP``: clients read file streams there
        self._own_loop: asyncio.AbstractEventLoop | None = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._own_loop = loop
        self._background.append(loop.create_task(self._hibernate_when_idle()))

    async def _on_own_loop(self, call: Awaitable[T], gone: Callable[[], T] | None = None) -> T:
        """Await ``call`` on the owner's loop (a call of ``CONTROL_GROUP`` arrives on that group's).
        When that loop has closed (the owner is exiting and did not run the call): ``gone()``, by
        default the wire's MOVED reply (a method whose callers expect another answer gives its own)."""
        own = self._own_loop
        if own is None or own is asyncio.get_running_loop():
            return await call
        handed = _handed(_awaited(call), own)
        if handed is None:
            close = getattr(call, "close", None)
            if close is not None:
                close()  # never awaited: no warning
            return gone() if gone is not None else moved(self.name, True)  # type: ignore[return-value]
        return await handed

    async def lock_acquire(self, holder: str, paths: Any, subtree: bool = False) -> Any:
        return await self._on_own_loop(super().lock_acquire(holder, paths, subtree))

    async def exec_result(self, exec_id: str) -> Any:
        return await self._on_own_loop(super().exec_result(exec_id))

    async def exec_snapshots(self, exec_id: str) -> AsyncIterator[Any]:
        async with contextlib.aclosing(self._hopped(super().exec_snapshots(exec_id))) as items:
            async for item in items:  # closed with this one, not once collected
                yield item

    async def stream(self, path: str, offset: int = 0, length: int | None = None) -> AsyncIterator[Any]:
        async with contextlib.aclosing(self._hopped(super().stream(path, offset, length))) as items:
            async for item in items:
                yield item

    async def _hopped(self, source: AsyncIterator[Any], gone: Any = None) -> AsyncGenerator[Any, None]:
        """``source``'s items, each step on the owner's loop (a stream of another group arrives on its own).
        ``gone``: what the stream gives when that loop had closed (see :func:`hop_stream`); MOVED by default."""
        own = self._own_loop
        if own is not None and own is not asyncio.get_running_loop():
            gone = self._moved() if gone is None else gone
            async with contextlib.aclosing(hop_stream(source, own, gone)) as hopped:
                async for item in hopped:
                    yield item
            return
        try:
            async for item in source:
                yield item
        finally:
            await _close(source)  # with this one (its stream count), not once collected

    async def run_tool(
        self,
        name: str,
        args: dict[str, Any],
        options: dict[str, Any] | None = None,
        caller: dict[str, str] | None = None,
    ) -> Any:
        return await self._on_own_loop(super().run_tool(name, args, options, caller))

    async def close_for_deletion(self, force: bool = False, ttl: float = 60.0) -> Any:
        return await self._on_own_loop(super().close_for_deletion(force, ttl))  # with its runs' starts

    async def lock_cancel(self, holder: str) -> Any:
        return await self._on_own_loop(super().lock_cancel(holder))

    async def lock_renew(self, lease_id: str) -> Any:
        return await self._on_own_loop(super().lock_renew(lease_id))

    async def lock_release(self, lease_id: str) -> Any:
        return await self._on_own_loop(super().lock_release(lease_id))

    async def lock_release_holder(self, holder: str) -> Any:
        return await self._on_own_loop(super().lock_release_holder(holder))

    async def close_workspace(self) -> None:
        """Close the workspace, release the lease and exit (``close_owners``), as hibernation does.
        Before, the actor stayed up once closed, holding its Ray name and answering every call "moved":
        each client's re-resolution found that same actor again, until the client's 30 s "moved"
        deadline failed the call ``WorkspaceUnavailableError`` (``tests/reliability/test_cluster_faults8.py``).
        Exiting frees the name: the next call re-creates the owner."""
        if not self._closing:
            await self._leave(hibernating=False)

    async def _hibernate_when_idle(self) -> None:
        after = self.config.hibernate_after
        interval = min(max(after / 4.0, 0.05), 5.0)
        while not self._closing:
            await asyncio.sleep(interval)
            # The monotonic clock: the wall clock stepped back an hour after the last call kept an idle
            # owner up that hour (tests/reliability/test_cluster_faults6.py).
            if self._busy() or time.monotonic() - self._idle_from < after:
                continue
            log.info("workspace %s idle for %.1f s: hibernating", self.name, after)
            await self._leave(hibernating=True)
            return

    async def _on_fenced(self) -> None:
        await self._leave(hibernating=False, release=False)

    async def _leave(self, *, hibernating: bool, release: bool = True) -> None:
        """Close and exit the actor process (the name becomes free for the next owner)."""
        import ray

        await self._close_quietly(hibernating=hibernating, release=release)
        # exit_actor must run inside an actor task, not a background coroutine: ask ourselves.
        ray.get_runtime_context().current_actor._exit.remote()

    async def _close_quietly(self, *, hibernating: bool, release: bool) -> None:
        """Close the workspace, releasing the lease unless fenced (a newer owner holds it); log failures."""
        try:
            if release:
                await self._shutdown(hibernating=hibernating)
            else:
                self._closing = True
                await self.workspace.close()
        except Exception:
            log.exception("closing workspace %s failed", self.name)

    async def _exit(self) -> None:
        import ray

        ray.actor.exit_actor()  # type: ignore[no-untyped-call]


async def _awaited(call: Awaitable[T]) -> T:
    return await call


async def hop_stream(
    source: AsyncIterator[T], loop: asyncio.AbstractEventLoop, gone: Any
) -> AsyncGenerator[T, None]:
    """Iterate ``source``, an async generator of ``loop``, from another loop: each step, and its close,
    run on ``loop`` (cancellation follows). ``gone`` is yielded (raised, when it is an exception) when
    ``loop`` closed before the first step (the stream never started there); one closed later ends the
    stream."""
    started = False
    try:
        while True:
            step = _handed(_step(source), loop)
            if step is None:  # its loop closed
                if not started:
                    if isinstance(gone, BaseException):
                        raise gone
                    yield gone
                return
            more, item = await step
            if not more:
                return
            started = True
            yield item
    finally:
        closing = _handed(_close(source), loop)
        if closing is not None:
            with contextlib.suppress(Exception):
                await closing


def _handed(call: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop) -> asyncio.Future[T] | None:
    """``call`` run on ``loop`` as a future of the running loop; None (``call`` closed) once ``loop`` closed."""
    try:
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call, loop))
    except RuntimeError:
        call.close()  # never awaited: no warning
        return None


async def _step(source: AsyncIterator[Any]) -> tuple[bool, Any]:
    try:
        return True, await anext(source)
    except StopAsyncIteration:  # not through a future: returned as a value
        return False, None


async def _close(source: AsyncIterator[Any]) -> None:
    close = getattr(source, "aclose", None)
    if close is not None:
        await close()
