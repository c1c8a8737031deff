"""Owner hosts (``owners="hosted"``, issue 20): one Ray actor process owning many workspaces.

A host is a detached async actor named ``computer:host:<data dir>:<node>:<i>`` (see
:func:`~computer.actors.naming.host_actor_name`), pinned to its node. The node of a workspace is the
one placement chooses for a dedicated owner (the node holding its file, or the caller's for a new
name); among that node's hosts, the name's stable hash picks one, so every process agrees without
asking anyone. The number of hosts of a node is fixed by the first process that places a workspace
there (GCS key-value store), so two processes configured differently still agree.

Inside a host, each awake workspace is a :class:`HostedWorkspace` (an :class:`OwnerActor` object, the
same per-workspace logic as a dedicated owner) with an event loop and thread of its own: one
workspace's long operation (a 64 MiB write, a grep over a large tree, a big sync apply) blocks only
that workspace's loop, while its own calls keep the serial order of a dedicated owner. The host's
loop only dispatches. Waking a workspace on a live host opens its file and takes its lease (no
process starts); hibernation closes the file and gives the lease up; a host left with no workspace
exits. A host that dies (or is restarted by Ray) loses nothing acknowledged: its workspaces reopen on
the next call, with a new epoch that fences the dead host's writes.

Clients hold a :class:`HostedHandle` (what :func:`~computer.actors.workspace_actor` returns in this
model): its attributes are the owner's RPC methods with ``.remote(*args)`` and ``.options(...)``,
sent as ``ws_call(name, method, *args)`` (``ws_stream`` for the streaming ones), so the client's
connection, pool workers calling back and tests reading ``handle.stats`` work as with an actor
handle; ``raycompat.actor_id`` of it is the host's (the recovery rules reason per owner process).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from ..config import Settings
from ._errors import WorkspaceUnavailableError
from ._host import _rss_bytes
from ._loop_thread import LoopClosedError, LoopThread
from ._owner import OwnerActor
from ._pool_callbacks import owner_token
from .directory import Directory, LeaseRenewal, open_directory, renew_leases
from .naming import HOST_PREFIX, NAMESPACE, data_dir_key, host_actor_name, host_index
from .raycompat import kv_get, kv_put_new
from .wire import fail, moved

__all__ = [
    "HOST_MAX_CONCURRENCY",
    "HostedHandle",
    "HostedWorkspace",
    "OwnerHost",
    "host_handles",
    "hosted_owner",
    "hosts_per_node",
]

log = logging.getLogger(__name__)

# Lock waits and exec streams park calls inside a host, for every workspace it owns.
HOST_MAX_CONCURRENCY = 100_000
# A crashing host is restarted a few times (its workspaces reopen on their next call), then left dead.
HOST_MAX_RESTARTS = 3
# The interpreter hands the GIL over this often (seconds; CPython's default is 5 ms): a workspace
# busy in Python code delays a neighbour's call by at most about this much per hand-over.
SWITCH_INTERVAL = 0.0001
# Seconds a host left with no workspace stays up before it exits (at most ``hibernate_after``).
HOST_LINGER = 5.0
_IO_THREADS = 16  # the host's shared pool for ``asyncio.to_thread`` of every workspace it owns

# The owner RPC methods a host dispatches (public coroutine methods of a managed owner), and those of
# them that stream (async generators).
_METHODS = frozenset(
    n
    for n, f in inspect.getmembers(OwnerActor)
    if not n.startswith("_") and (inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f))
)
STREAM_METHODS = frozenset(n for n in _METHODS if inspect.isasyncgenfunction(getattr(OwnerActor, n)))
# Calls a pool worker makes about a run of an owner: they never wake a workspace (a workspace that is
# not open here has no run going here: the run's owner is gone).
_NO_WAKE = frozenset({"pool_ping", "pool_fs_call", "pool_sync_push", "pool_sync_pull", "pool_share"})


# -- the handle clients hold ------------------------------------------------------------------------


class HostedMethod:
    """One owner RPC method of a hosted workspace: ``.remote(*args)`` and ``.options(**ray_options)``."""

    def __init__(self, host: Any, name: str, method: str, options: dict[str, Any] | None = None) -> None:
        self._host = host
        self._name = name
        self._method = method
        self._options = options or {}

    def options(self, **options: Any) -> HostedMethod:
        return HostedMethod(self._host, self._name, self._method, {**self._options, **options})

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        target = self._host.ws_stream if self._method in STREAM_METHODS else self._host.ws_call
        if self._options:
            target = target.options(**self._options)
        return target.remote(self._name, self._method, *args, **kwargs)


class HostedHandle:
    """The owner of workspace ``name`` inside the owner host ``host`` (an ``ActorHandle``); picklable.

    ``handle.<method>.remote(*args)`` calls the workspace's owner RPC ``method``, as on the handle of a
    dedicated owner actor. ``_actor_id`` is the host's: the process the recovery rules reason about.
    """

    def __init__(self, host: Any, name: str, host_name: str) -> None:
        self._host = host
        self._name = name
        self._host_name = host_name

    @property
    def host(self) -> Any:
        """The owner host's ``ActorHandle`` (``ray.kill(handle.host)`` kills every workspace it owns)."""
        return self._host

    @property
    def name(self) -> str:
        return self._name

    @property
    def host_name(self) -> str:
        return self._host_name

    @property
    def _actor_id(self) -> Any:
        return self._host._actor_id

    def __getattr__(self, method: str) -> HostedMethod:
        if method.startswith("_"):
            raise AttributeError(method)
        return HostedMethod(self._host, self._name, method)

    def __repr__(self) -> str:
        return f"HostedHandle({self._name!r} on {self._host_name})"


# -- one workspace inside a host --------------------------------------------------------------------


class HostedWorkspace(OwnerActor):
    """A managed owner living inside an :class:`OwnerHost` (constructed on its own loop thread)."""

    managed = True
    renews_own_lease = False  # the host renews every lease it holds in one write per round

    def __init__(self, name: str, config: Settings, host: OwnerHost, thread: LoopThread) -> None:
        self._host_obj = host
        self._thread = thread
        self._left = False
        super().__init__(name, config)

    def _open_directory(self) -> Directory:
        return self._host_obj.directory  # one connection per host, not one per workspace (thread-safe)

    def _backends(self) -> Sequence[Any]:
        # Pool workers call the owner back through the handle a run carries: this workspace's
        # HostedHandle, not the host's actor handle (``current_actor``, what a pool backend assumes).
        backends = super()._backends()
        handle = HostedHandle(self._host_obj.handle, self.name, self._host_obj.host_name)
        for backend in backends:
            if getattr(backend, "_owner", False) is None:  # a PoolBackend that has not met its owner
                backend._owner = handle
                backend._token = owner_token()
        return backends

    def _new_owner_id(self) -> str:
        # The lease says which host holds it (``computer ls`` shows it): "<host name>#<pid>/<uuid>".
        return f"{self._host_obj.host_name}#{os.getpid()}/{uuid.uuid4().hex}"

    async def close_workspace(self) -> None:
        """Close the workspace, release the lease and leave the host (the next call opens it again)."""
        await self._leave(hibernating=False)

    async def _leave(self, *, hibernating: bool, release: bool = True) -> None:
        """Close (hibernation, fenced, closed on request) and tell the host, which forgets this object."""
        if self._left:
            return
        self._left = True
        host = self._host_obj
        host.loop.call_soon_threadsafe(host.leaving, self)
        try:
            await self._close_quietly(hibernating=hibernating, release=release)
        finally:
            host.loop.call_soon_threadsafe(host.gone, self)


async def _construct(name: str, config: Settings, host: OwnerHost, thread: LoopThread) -> HostedWorkspace:
    """Open a workspace (on its own loop: the constructor's background tasks belong to that loop)."""
    return HostedWorkspace(name, config, host, thread)


# -- the host actor ---------------------------------------------------------------------------------


class OwnerHost:
    """The owner of many workspaces of one data directory on one node (a detached async Ray actor)."""

    def __init__(self, config: dict[str, Any], host_name: str) -> None:
        sys.setswitchinterval(SWITCH_INTERVAL)
        self.config = Settings(**config)
        self.host_name = host_name
        self.loop = asyncio.get_running_loop()
        import ray

        self.handle = ray.get_runtime_context().current_actor  # the host's own ActorHandle
        self._executor = concurrent.futures.ThreadPoolExecutor(_IO_THREADS, thread_name_prefix="host-io")
        self._open: dict[str, HostedWorkspace] = {}
        self._opening: dict[str, asyncio.Future[None]] = {}
        self._leaving: dict[str, asyncio.Event] = {}  # closing now: calls wait, then open it afresh
        self._waiting = 0  # calls waiting for a workspace to open or to finish closing
        self._exiting = False
        self._wakes = 0
        self._started = time.time()
        self.directory: Directory = open_directory(self.config)
        self._telling: set[asyncio.Task[None]] = set()
        self._renewing = self.loop.create_task(self._renew_leases())

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
                kept = await self.loop.run_in_executor(self._executor, renew_leases, self.directory, renewals)
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
            ws = await thread.run(_construct(name, self.config, self, thread))
        except BaseException as exc:
            thread.stop()
            del self._opening[name]
            future.set_exception(exc if isinstance(exc, Exception) else asyncio.CancelledError())
            future.exception()  # retrieved: nobody may be waiting
            raise
        del self._opening[name]
        self._open[name] = ws
        self._wakes += 1
        future.set_result(None)
        return ws

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

    async def _exit(self) -> None:
        import ray

        self._exiting = False
        if not self._idle():
            return  # a call came meanwhile: stay
        log.info("owner host %s holds no workspace: exiting", self.host_name)
        self._executor.shutdown(wait=False)
        ray.actor.exit_actor()  # type: ignore[no-untyped-call]

    # -- RPC ----------------------------------------------------------------------------------------

    async def ws_call(self, name: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call owner RPC ``method`` of workspace ``name``, opening it here first if it is asleep."""
        if method not in _METHODS or method in STREAM_METHODS:
            return fail(AttributeError(f"owners have no RPC method {method!r}"))
        if method in _NO_WAKE and name not in self._open:
            if method == "pool_ping":
                return f"closed:{self.host_name}:{name}"  # not the run's owner token: it ends the run
            return fail(WorkspaceUnavailableError(name, "its owner closed it (the run's owner is gone)"))
        for _ in range(3):
            ws = self._open.get(name)  # the common case, awake here: no bookkeeping of a wait
            if ws is None or ws._left:
                try:
                    ws = await self._workspace(name)
                except Exception as exc:
                    return fail(exc)
            try:
                return await ws._thread.run(getattr(ws, method)(*args, **kwargs))
            except LoopClosedError:
                continue  # it left the host before the call ran there: open it again
        return moved(name, True)

    async def ws_stream(self, name: str, method: str, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """Stream owner RPC ``method`` (an async generator) of workspace ``name``."""
        if method not in STREAM_METHODS:
            yield fail(AttributeError(f"owners have no streaming RPC method {method!r}"))
            return
        try:
            ws = await self._workspace(name)
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
        ws = self._open.get(name)
        if ws is None or ws._left:
            return None
        try:
            return await ws._thread.run(ws.stats())
        except LoopClosedError:
            return None

    async def close_workspace(self, name: str) -> bool:
        """Close workspace ``name`` if it is open here (lease released); True when it was."""
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

    async def host_stats(self) -> dict[str, Any]:
        """The host as a whole, for ``computer status`` and benchmarks."""
        import ray

        return {
            "host": self.host_name,
            "node": str(ray.get_runtime_context().get_node_id()),
            "pid": os.getpid(),
            "rss_bytes": _rss_bytes(),
            "workspaces": sorted(self._open),
            "opening": len(self._opening),
            "wakes": self._wakes,
            "threads": threading.active_count(),
            "exiting": self._exiting,
            "started": self._started,
        }


# -- placement --------------------------------------------------------------------------------------

_remote_class: Any = None
_hosts_of: dict[tuple[str, str], int] = {}  # (data dir key, node) -> hosts of that node (fixed)


def _host_class() -> Any:
    global _remote_class
    if _remote_class is None:
        import ray

        _remote_class = ray.remote(OwnerHost)
    return _remote_class


def _node_cpus(node: str) -> int:
    import ray

    for info in ray.nodes():  # type: ignore[no-untyped-call]
        if info.get("NodeID") == node:
            return max(1, int(info.get("Resources", {}).get("CPU", 1)))
    return 1


def hosts_per_node(config: Settings, node: str) -> int:
    """How many owner hosts ``node`` has for ``config``'s data directory (decided once per session)."""
    key = (data_dir_key(config.data_dir), node)
    known = _hosts_of.get(key)
    if known is not None:
        return known
    wanted = config.owner_hosts_per_node or _node_cpus(node)
    kv_key = f"computer:hosts:{key[0]}:{node}".encode()
    if kv_put_new(kv_key, str(wanted).encode()):
        count = wanted
    else:
        raw = kv_get(kv_key)
        count = int(raw) if raw else wanted
    _hosts_of[key] = count
    return count


def _owner_node(config: Settings, name: str) -> str:
    """The node a hosted owner of ``name`` goes to: where placement puts a dedicated one."""
    import ray

    from ._placement import _scheduling

    strategy = _scheduling(config, name)
    if strategy is not None:
        return str(strategy.node_id)
    here = str(ray.get_runtime_context().get_node_id())
    if config.shared_data_dir:
        # Any node may open the file: the one whose owner holds the lease, else the name's claimant
        # (racing first calls from two nodes must agree), else the caller's.
        from ._nodes import alive_nodes
        from ._placement import directory_record

        record = directory_record(config, name)
        alive = alive_nodes()
        if record is not None and record.node in alive and record.lease_live():
            return record.node
        if len(alive) > 1:
            return claim_new_node(config, name, here, alive)
    return here


def hosted_owner(name: str, config: Settings) -> HostedHandle:
    """The :class:`HostedHandle` of workspace ``name``: its node's host for the name, created if needed."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = _owner_node(config, name)
    host_name = host_actor_name(config, node, host_index(name, hosts_per_node(config, node)))
    try:
        return HostedHandle(ray.get_actor(host_name, namespace=NAMESPACE), name, host_name)
    except ValueError:
        pass
    deadline = time.monotonic() + 30.0
    while True:
        try:
            host = (
                _host_class()
                .options(
                    name=host_name,
                    namespace=NAMESPACE,
                    get_if_exists=True,
                    lifetime="detached",
                    max_restarts=HOST_MAX_RESTARTS,
                    max_concurrency=HOST_MAX_CONCURRENCY,
                    num_cpus=0,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
                )
                .remote(config.model_dump(mode="json"), host_name)
            )
            return HostedHandle(host, name, host_name)
        except ValueError:
            # Another process registered the name between our lookup and our creation.
            try:
                return HostedHandle(ray.get_actor(host_name, namespace=NAMESPACE), name, host_name)
            except ValueError:
                if time.monotonic() > deadline:
                    raise WorkspaceUnavailableError(name, "could not create its owner host") from None
                time.sleep(0.05)  # an exiting host still holds the name: back off, then retry


def host_handles(config: Settings) -> dict[str, Any]:
    """Every live owner host of ``config``'s data directory in the cluster: Ray name -> handle."""
    import ray

    prefix = f"{HOST_PREFIX}{data_dir_key(config.data_dir)}:"
    found: dict[str, Any] = {}
    for actor in ray.util.list_named_actors(all_namespaces=True):
        name = str(actor.get("name", "")) if isinstance(actor, dict) else str(actor)
        if name.startswith(prefix):
            try:
                found[name] = ray.get_actor(name, namespace=NAMESPACE)
            except ValueError:
                continue  # exited meanwhile
    return found


def _claim_key(config: Settings, name: str) -> bytes:
    return f"computer:new:{data_dir_key(config.data_dir)}:{name}".encode("utf-8", "surrogatepass")


def claim_new_node(config: Settings, name: str, here: str, alive: dict[str, str]) -> str:
    """The node a new workspace ``name`` is created on when no node holds its file: the first
    claimant's (this caller's node unless another process claimed the name first, on a node still
    alive). Dedicated owners need no claim: their actor name is unique in the cluster; hosts are
    named per node, so two callers on two nodes would otherwise each create the workspace."""
    from .raycompat import kv_put

    key = _claim_key(config, name)
    if kv_put_new(key, here.encode()):
        return here
    raw = kv_get(key)
    claimed = raw.decode() if raw else None
    if claimed in alive:
        return str(claimed)
    kv_put(key, here.encode())  # the claimant's node is gone: its claim made nothing that lives
    return here


def forget_claim(config: Settings, name: str) -> None:
    """Drop the creation claim of ``name`` (its workspace was deleted: a new one goes anywhere)."""
    from .raycompat import kv_del

    kv_del(_claim_key(config, name))


def kill_hosts(config: Settings | None = None) -> int:
    """Kill every owner host of ``config``'s data directory (default: the cluster's settings), as
    tests do after each test; their workspaces reopen on the next call. The number killed."""
    import ray

    from ._init import cluster_settings

    killed = 0
    for handle in host_handles(config or cluster_settings()).values():
        ray.kill(handle, no_restart=True)
        killed += 1
    return killed
