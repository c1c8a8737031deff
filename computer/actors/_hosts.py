"""Owner hosts (``owners="hosted"``, issue 20): one Ray actor process owning many workspaces.

A host is a detached async actor named ``computer:host:<data dir>:<node>:<i>`` (see
:func:`~computer.actors.naming.host_actor_name`), pinned to its node. The node of a workspace is the
one placement chooses for a dedicated owner (the node holding its file, or the caller's for a new
name); among that node's hosts, the name's stable hash picks one, so every process agrees without
asking anyone. The number of hosts of a node is fixed by the first process that places a workspace
there (GCS key-value store), so two processes configured differently still agree.

Inside a host, each awake workspace is a :class:`HostedWorkspace` (``_hosted_workspace.py``: an
:class:`OwnerActor` object, the same per-workspace logic as a dedicated owner) with an event loop and
thread of its own: one
workspace's long operation (a 64 MiB write, a grep over a large tree, a big sync apply) blocks only
that workspace's loop, while its own calls keep the serial order of a dedicated owner. The host's
loop only dispatches. Waking a workspace on a live host opens its file and takes its lease (no
process starts); hibernation closes the file and gives the lease up; a host left with no workspace
exits. A host that dies (or is restarted by Ray) loses nothing acknowledged: its workspaces reopen on
the next call, with a new epoch that fences the dead host's writes.

Clients hold a :class:`HostedHandle` and find a host through :func:`hosted_owner`, both in
``_host_placement.py`` (re-exported here: tests and benchmarks import them from this module).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import math
import os
import sys
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from ..config import configure
from ..runtime import offload
from ._errors import WorkspaceUnavailableError
from ._full_nodes import place_elsewhere
from ._host import _rss_bytes
from ._host_placement import (
    HOST_MAX_CONCURRENCY,
    HOST_MAX_RESTARTS,
    METHODS,
    STREAM_METHODS,
    ClaimedElsewhere,
    HostedHandle,
    HostedMethod,
    claim_new_node,
    forget_claim,
    host_handles,
    hosted_owner,
    hosts_per_node,
    kill_hosts,
    release_unborn_claim,
)
from ._hosted_workspace import HostedWorkspace, construct
from ._loop_thread import LoopClosedError, LoopThread, SharedThreadPool
from ._owner import CONTROL_METHODS, STREAM_GROUP_METHODS, WAIT_METHODS, hop_stream
from ._small_calls import small_call
from .directory import Directory, LeaseRenewal, open_directory, renew_leases
from .wire import Reply, fail, moved

__all__ = [
    "HOST_MAX_CONCURRENCY",
    "HOST_MAX_RESTARTS",
    "METHODS",
    "STREAM_METHODS",
    "HostedHandle",
    "HostedMethod",
    "HostedWorkspace",
    "OwnerHost",
    "claim_new_node",
    "forget_claim",
    "host_handles",
    "hosted_owner",
    "hosts_per_node",
    "kill_hosts",
]

log = logging.getLogger(__name__)

# The interpreter hands the GIL over this often (seconds; CPython's default is 5 ms): a workspace
# busy in Python code delays a neighbour's call by at most about this much per hand-over.
SWITCH_INTERVAL = 0.0001
# Seconds a host left with no workspace stays up before it exits (at most ``hibernate_after``).
HOST_LINGER = 5.0
# Seconds without any call arriving that an idle host waits for before it exits: a call that reached
# it is served, never cut by the exit (``OwnerHost._exit``).
EXIT_QUIET = 1.0
_IO_THREADS = 16  # the host's shared pool for ``asyncio.to_thread`` of every workspace it owns

# Calls a pool worker makes about a run of an owner: they never wake a workspace (a workspace that is
# not open here has no run going here: the run's owner is gone).
_NO_WAKE = frozenset({"pool_ping", "pool_fs_call", "pool_sync_push", "pool_sync_pull", "pool_share"})


# -- the host actor ---------------------------------------------------------------------------------


class OwnerHost:
    """The owner of many workspaces of one data directory on one node (a detached async Ray actor)."""

    def __init__(
        self,
        config: dict[str, Any],
        host_name: str,
        *,
        probe_group: str | None = None,
        control_group: str | None = None,
        wait_group: str | None = None,
        stream_group: str | None = None,
    ) -> None:
        sys.setswitchinterval(SWITCH_INTERVAL)
        # The concurrency groups it was created with (``_owner.PROBE_GROUP``, ``CONTROL_GROUP``,
        # ``WAIT_GROUP``, ``STREAM_GROUP``): its workspaces' ``describe`` tells clients, which send
        # probes, lock releases, the calls that wait for others and file streams there.
        self.probe_group = probe_group
        self.control_group = control_group
        self.wait_group = wait_group
        self.stream_group = stream_group
        # The process's settings, once for every workspace it will own (building them from the
        # environment costs ~4.5 ms of CPU on the loaded 2-core machine: not at every wake).
        self.config = configure(**config)
        self.host_name = host_name
        self.loop = asyncio.get_running_loop()
        import ray

        self.handle = ray.get_runtime_context().current_actor  # the host's own ActorHandle
        self.node = str(ray.get_runtime_context().get_node_id())
        self._executor = SharedThreadPool(_IO_THREADS, thread_name_prefix="host-io")
        self._open: dict[str, HostedWorkspace] = {}
        self._opening: dict[str, asyncio.Future[None]] = {}
        self._leaving: dict[str, asyncio.Event] = {}  # closing now: calls wait, then open it afresh
        self._waiting = 0  # calls waiting for a workspace to open or to finish closing
        self._exiting = False
        self._last_call = -math.inf  # when the last call arrived (monotonic; ``_exit``)
        self._wakes = 0
        self._started = time.time()
        self.directory: Directory = open_directory(self.config)
        self._telling: set[asyncio.Task[None]] = set()
        self._renewing = self.loop.create_task(self._renew_leases())
        # Small calls of an idle workspace run right on this loop (``_small_calls.py``); False hands
        # every call to the workspace's thread (``inline_small_calls``: benchmarks compare both).
        self.inline = True

    async def _renew_leases(self) -> None:
        """Renew the lease of every workspace open here together, every third of the lease (as a
        dedicated owner renews its own): one directory write per round instead of one per workspace.
        A workspace whose lease another owner took over is told so on its own loop (it closes)."""
        interval = max(self.config.lock_lease / 3.0, 0.05)
        while True:
            await asyncio.sleep(interval)
            held = [ws for ws in self._open.values() if not (ws._left or ws._closing)]
            if not held:
                continue
            renewals = [LeaseRenewal(w.name, w.owner_id, w.epoch, w._lease_ttl, w._last_active) for w in held]
            try:
                kept = await offload(self, renew_leases, self.directory, renewals)  # the host's own lane
            except Exception:
                log.exception("renewing the leases of %d workspaces failed", len(held))
                continue
            for ws, still in zip(held, kept, strict=True):
                if not still and not ws._closing:
                    telling = self.loop.create_task(self._taken_over(ws))
                    self._telling.add(telling)  # kept until done (the loop holds tasks weakly)
                    telling.add_done_callback(self._telling.discard)

    @staticmethod
    async def _taken_over(ws: HostedWorkspace) -> None:
        with contextlib.suppress(LoopClosedError):
            await ws._thread.run(ws._taken_over())

    # -- workspaces -------------------------------------------------------------------------------

    async def _workspace(self, name: str) -> HostedWorkspace:
        """The open workspace ``name``, opened here on demand."""
        self._waiting += 1
        try:
            while True:
                ws = self._open.get(name)
                if ws is not None and not ws._left:
                    return ws
                leaving = self._leaving.get(name)
                if leaving is not None:
                    await leaving.wait()
                    continue
                opening = self._opening.get(name)
                if opening is not None:
                    await asyncio.shield(opening)  # its error is this call's too
                    continue
                return await self._wake(name)
        finally:
            self._waiting -= 1
            self._exit_if_idle()

    async def _wake(self, name: str) -> HostedWorkspace:
        future: asyncio.Future[None] = self.loop.create_future()
        self._opening[name] = future
        thread = LoopThread(name, self._executor)
        try:
            ws = await thread.run(construct(name, self.config, self, thread))
        except BaseException as exc:
            thread.stop()
            again: Exception | None = None
            if isinstance(exc, Exception):  # before other calls may open it again here (none meanwhile)
                again = await offload(None, self._release_claim, name, exc)
            del self._opening[name]
            failure = again or exc
            future.set_exception(failure if isinstance(failure, Exception) else asyncio.CancelledError())
            future.exception()  # retrieved: nobody may be waiting
            if again is not None:
                raise again from exc
            raise
        del self._opening[name]
        self._open[name] = ws
        self._wakes += 1
        future.set_result(None)
        return ws

    def _release_claim(self, name: str, exc: Exception) -> ClaimedElsewhere | None:
        """A new name whose creation failed here (a full disk) is placed anew by its next call, which
        may go to a node with room (``release_unborn_claim``); an existing workspace stays here. When
        this node had no room for it (``exc``: ENOSPC, the node is marked, ``_full_nodes``) and another
        alive node has, the error to answer instead: "moved", so this very call is placed again.
        Not after ``WorkspaceUnavailableError`` (the directory unreachable, another node's claim, a
        known workspace's file missing): no claim of a name created here to drop, and asking the
        directory again made a new name's opening with Redis down fail after 60 s instead of 30."""
        if isinstance(exc, WorkspaceUnavailableError):
            return None
        try:
            if not release_unborn_claim(self.config, self.directory, name, self.node):
                return None
            log.info("workspace %s could not be created on this node: its claim here is dropped", name)
            if getattr(exc, "errno", None) not in (errno.ENOSPC, errno.EDQUOT):
                return None
            elsewhere = place_elsewhere(self.config, name, self.node)
            if elsewhere is not None:
                return ClaimedElsewhere(
                    name, f"no room for it here; node {elsewhere[:12]} has: place it again"
                )
        except Exception:
            log.warning("workspace %s: its creation claim could not be checked", name, exc_info=True)
        return None

    def leaving(self, ws: HostedWorkspace) -> None:
        """``ws`` started closing (on its own loop): new calls for its name wait until it is gone."""
        if self._open.get(ws.name) is ws and ws.name not in self._leaving:
            self._leaving[ws.name] = asyncio.Event()

    def gone(self, ws: HostedWorkspace) -> None:
        """``ws`` closed: forget it, stop its loop, and exit when nothing is left here."""
        if self._open.get(ws.name) is ws:
            del self._open[ws.name]
            event = self._leaving.pop(ws.name, None)
            if event is not None:
                event.set()
        ws._thread.stop()
        self._exit_if_idle()

    def _idle(self) -> bool:
        return not (self._open or self._opening or self._leaving or self._waiting)

    def _exit_if_idle(self) -> None:
        if self._exiting or not self._idle():
            return
        self._exiting = True  # an exit is on its way (once)
        # Linger a little: a workspace that hibernated a moment ago, or its neighbour, often comes
        # back soon, and waking it here costs milliseconds instead of a new process. exit_actor must
        # run inside an actor task, not a callback: ask ourselves then. Calls arriving meanwhile are
        # served; the exit happens only if the host is still idle when it runs.
        linger = min(self.config.hibernate_after, HOST_LINGER)
        self.loop.call_later(linger, lambda: self.handle._exit.remote())

    def _arrived(self) -> None:
        """A call arrived (any RPC of the host, on any of its groups): an exit waits for quiet."""
        self._last_call = time.monotonic()

    async def _exit(self) -> None:
        """Exit, if the host is still idle and no call arrived for :data:`EXIT_QUIET`; otherwise stay
        (a call that opens a workspace) or look again once it is quiet. Ray fails every call the
        process received and had not answered when it exits ("The actor died unexpectedly before
        finishing this task", exit type ``INTENDED_USER_EXIT``): before, a call that reached a host
        just as its linger ended (``host_stats`` from ``computer status``, ``ws_info`` from a deletion,
        any call through a ``HostedHandle`` held from before) died with it. Calls come in bursts:
        while they arrive the host stays; one sent after a second's silence, exactly as the host exits,
        can still die (Ray has no exit that first stops taking calls), and a client resends it (the
        workspace's lease was released: ``Connection._did_not_run``)."""
        import ray

        self._exiting = False
        if not self._idle():
            return  # a call came meanwhile: stay
        quiet = time.monotonic() - self._last_call
        if quiet < EXIT_QUIET:  # calls arrive: look again once they stopped
            self._exiting = True
            self.loop.call_later(EXIT_QUIET - quiet, lambda: self.handle._exit.remote())
            return
        log.info("owner host %s holds no workspace: exiting", self.host_name)
        self._executor.close()
        ray.actor.exit_actor()  # type: ignore[no-untyped-call]

    # -- RPC ----------------------------------------------------------------------------------------

    async def ws_call(self, name: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call owner RPC ``method`` of workspace ``name``, opening it here first if it is asleep."""
        self._arrived()
        if asyncio.get_running_loop() is not self.loop:  # sent on ``CONTROL_GROUP`` or ``WAIT_GROUP``
            if method not in CONTROL_METHODS and method not in WAIT_METHODS:
                return fail(AttributeError(f"{method!r} is not served on the control or wait group"))
            served = asyncio.run_coroutine_threadsafe(self.ws_call(name, method, *args, **kwargs), self.loop)
            return await asyncio.wrap_future(served)
        if method not in METHODS or method in STREAM_METHODS:
            return fail(AttributeError(f"owners have no RPC method {method!r}"))
        if method in _NO_WAKE:
            ws = self._open.get(name)
            if ws is not None and ws._left:
                # Closing here: its own answer (served until it stops serving, then "moved", as a
                # dedicated owner's), never a wait for the close: the close ends the workspace's live
                # sandboxes, whose last syncs are these calls (a background writer's sandbox wedged
                # delete_workspace for 30 s and the name for good).
                with contextlib.suppress(LoopClosedError):
                    return await ws._thread.run(getattr(ws, method)(*args, **kwargs))
                ws = None  # its loop stopped: closed
            if ws is None:
                if method == "pool_ping":
                    return f"closed:{self.host_name}:{name}"  # not the run's owner token: it ends the run
                return fail(WorkspaceUnavailableError(name, "its owner closed it (the run's owner is gone)"))
        for _ in range(3):
            ws = self._open.get(name)  # the common case, awake here: no bookkeeping of a wait
            if ws is None or ws._left:
                try:
                    ws = await self._workspace(name)
                except ClaimedElsewhere:
                    return moved(name, True)  # not run: its caller places the new name again
                except Exception as exc:
                    return fail(exc)
            inline = None
            if self.inline:
                inline = lambda ws=ws: small_call(ws, method, args, kwargs)  # noqa: E731
            try:
                return await ws._thread.run(getattr(ws, method)(*args, **kwargs), inline=inline)
            except LoopClosedError:
                continue  # it left the host before the call ran there: open it again
        return moved(name, True)

    async def ws_stream(self, name: str, method: str, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """Stream owner RPC ``method`` (an async generator) of workspace ``name``."""
        self._arrived()
        if method not in STREAM_METHODS:
            yield fail(AttributeError(f"owners have no streaming RPC method {method!r}"))
            return
        if asyncio.get_running_loop() is not self.loop:  # ``WAIT_GROUP``, ``STREAM_GROUP``: served here
            if method not in WAIT_METHODS and method not in STREAM_GROUP_METHODS:
                yield fail(AttributeError(f"{method!r} is not served on the wait or stream group"))
                return
            hopped = hop_stream(self.ws_stream(name, method, *args, **kwargs), self.loop, moved(name, True))
            async with contextlib.aclosing(hopped):  # closed with this one, not once collected
                async for item in hopped:
                    yield item
            return
        try:
            ws = await self._workspace(name)
        except ClaimedElsewhere:
            yield moved(name, True)
            return
        except Exception as exc:
            yield fail(exc)
            return
        source = getattr(ws, method)(*args, **kwargs)
        try:
            while True:
                try:
                    item = await ws._thread.run(source.__anext__())
                except StopAsyncIteration:
                    return
                except LoopClosedError:
                    yield fail(WorkspaceUnavailableError(name, "its owner closed it during the stream"))
                    return
                yield item
        finally:
            try:
                await ws._thread.run(source.aclose())
            except Exception:
                pass  # its loop stopped (the workspace closed): nothing is left to close

    async def ws_info(self, name: str) -> dict[str, Any] | None:
        """The ``stats`` of workspace ``name`` if it is open here (never opens it)."""
        self._arrived()
        ws = self._open.get(name)
        if ws is None or ws._left:
            return None
        try:
            return await ws._thread.run(ws.stats())
        except LoopClosedError:
            return None

    async def close_workspace(self, name: str) -> bool:
        """Close workspace ``name`` if it is open here (lease released); True when it was."""
        self._arrived()
        ws = self._open.get(name)
        if ws is None:
            return False
        leaving = self._leaving.get(name)
        if leaving is None:
            with contextlib.suppress(LoopClosedError):
                await ws._thread.run(ws.close_workspace())
        leaving = self._leaving.get(name)
        if leaving is not None:
            await leaving.wait()
        return True

    async def close_for_deletion(self, name: str, force: bool, ttl: float) -> Reply | None:
        """``delete_workspace``'s check and close of workspace ``name`` on its own loop
        (``WorkspaceHost.close_for_deletion``); None when it is not open here (or leaving already)."""
        self._arrived()
        ws = self._open.get(name)
        if ws is None:
            return None
        reply: Reply | None = None
        if name not in self._leaving:  # (leaving already, hibernating: waited for, as a close is)
            with contextlib.suppress(LoopClosedError):
                reply = await ws._thread.run(ws.close_for_deletion(force, ttl))
        leaving = self._leaving.get(name)
        if leaving is not None:
            await leaving.wait()
        return reply

    async def inline_small_calls(self, enabled: bool) -> bool:
        """Whether small calls of an idle workspace run on this loop (the default) or cross to the
        workspace's thread like every other call; returns the previous choice. For benchmarks, which
        compare both paths in one process and window."""
        self._arrived()
        previous, self.inline = self.inline, bool(enabled)
        return previous

    async def host_stats(self) -> dict[str, Any]:
        """The host as a whole, for ``computer status`` and benchmarks."""
        import ray

        self._arrived()

        return {
            "host": self.host_name,
            "node": str(ray.get_runtime_context().get_node_id()),
            "pid": os.getpid(),
            "rss_bytes": _rss_bytes(),
            "workspaces": sorted(self._open),
            "opening": len(self._opening),
            "wakes": self._wakes,
            "threads": threading.active_count(),
            "inlined": sum(ws._thread.inlined for ws in self._open.values()),
            "exiting": self._exiting,
            "started": self._started,
        }
