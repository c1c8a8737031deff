"""Helpers of the pool tests: worker stats by name, host processes by command line, an owner in the
test's process for a worker built without Ray."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import computer
from computer.actors import NAMESPACE
from computer.actors._pool_callbacks import PoolCallbacks
from computer.actors._pool_registry import WORKER_MAX_RESTARTS, named_workers
from computer.actors.wire import Reply, fail, ok

T = TypeVar("T")


class LocalOwner(PoolCallbacks):
    """The owner side of a worker's calls back (``pool_sync_push``…), over a workspace of this process;
    counts them by name."""

    def __init__(self, workspace: computer.Workspace) -> None:
        self.workspace = workspace
        self.served: list[str] = []

    async def _serve(
        self, work: Callable[[], Awaitable[Any]], *, background: bool = False, closing: bool = False
    ) -> Reply:
        try:
            return ok(await work())
        except Exception as exc:
            return fail(exc)

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("pool_"):
            object.__getattribute__(self, "served").append(name)
        return object.__getattribute__(self, name)


class InProcessHandle:
    """``handle.method.remote(*args)`` awaited in this process, as on a Ray actor handle."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def __getattr__(self, method: str) -> Any:
        call = getattr(self.target, method)

        class _Method:
            def remote(self, *args: Any) -> Any:
                return call(*args)

        return _Method()


async def worker_stats(backend: str, size: int = 0) -> list[dict[str, Any]]:
    """The stats of every live worker of a pool (elastic: ``size`` is no longer needed, nor used)."""
    import ray
    from ray.exceptions import RayActorError

    out = []
    for name, (kind, _) in sorted(named_workers().items(), key=lambda item: item[1]):
        if kind != backend:
            continue
        try:
            handle = ray.get_actor(name, namespace=NAMESPACE)
            out.append(await handle.stats.remote())
        except (ValueError, RayActorError):
            continue  # removed by the control loop meanwhile
    return out


async def workers_with_a_restart_left(backend: str, size: int) -> None:
    """Make every worker of ``backend`` one that Ray restarts in place once more when killed.

    Pool workers are named and detached, so they outlive a test, and Ray restarts an actor at most
    ``WORKER_MAX_RESTARTS`` times in its whole life: the tests that kill a worker to see it restart
    in place would, late in a session, find one that earlier tests had used up and that now dies for
    good (a CI run failed so). Such a worker is stopped here for good, and the pool's control loop
    replaces it with a fresh one (at most 60 s). ``ray._private.state`` reads the restart count from
    the GCS: the public state API needs the dashboard, which the test session does not start.
    """
    import ray
    from ray._private import state

    retired = set()
    for worker, (kind, _) in named_workers().items():
        if kind != backend:
            continue
        handle = ray.get_actor(worker, namespace=NAMESPACE)
        if state.actors(handle._actor_id.hex()).get("NumRestarts", 0) >= WORKER_MAX_RESTARTS:
            ray.kill(handle, no_restart=True)
            retired.add(worker)
    if not retired:
        return
    for _ in range(600):  # bounded: 60 s
        stats = await worker_stats(backend)
        if len(stats) >= size and not retired & {s["name"] for s in stats}:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the {backend} pool did not replace {sorted(retired)} within 60 s")


def processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker`` (sandboxed processes are visible from the host)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and "pytest" not in cmdline:
            pids.append(int(entry))
    return pids


def sleepers(marker: str) -> list[int]:
    """Host pids of the ``sleep <marker>`` process itself: its command line is exactly that. A shell
    whose command line holds it (the run's, or a child of it between fork and exec) is not one: it
    goes away while the ``sleep`` lives on, and a /proc read during an exec can fail."""
    exact = f"sleep {marker}"
    pids = []
    for pid in processes_with(exact):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().rstrip(b"\0").split(b"\0")
        except OSError:
            continue
        if b" ".join(argv).decode(errors="replace") == exact:
            pids.append(pid)
    return pids


async def found(look: Callable[[], T | None], *, within: float = 20.0, what: str = "a process") -> T:
    """What ``look`` finds (not None), asked again until then (bounded): host processes are read from
    /proc, where one can be between fork and exec or gone between two reads."""
    deadline = time.monotonic() + within
    while (seen := look()) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not found within {within} s")
        await asyncio.sleep(0.05)
    return seen


async def wait_until(condition: Callable[[], bool], *, within: float = 20.0) -> None:
    """Poll a host condition nothing can be awaited for (a process appearing or going away)."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {within} s")
        await asyncio.sleep(0.05)


def unique_sleep() -> str:
    """A ``sleep`` duration no other test uses, to find that one process on the host."""
    return f"{500 + secrets.randbelow(400)}.{secrets.randbelow(10**6):06d}"


class ScriptedWorker:
    """A worker handle: ``run.options(...).remote(order)`` streams what ``answer(order)`` gives."""

    def __init__(self, name: str, answer: Any) -> None:
        self.name, self.answer = name, answer
        self.orders: list[Any] = []
        self.run = self

    def options(self, **_: Any) -> ScriptedWorker:
        return self

    def remote(self, order: Any) -> AsyncIterator[Any]:
        self.orders.append(order)

        async def items() -> AsyncIterator[Any]:
            for item in self.answer(order):

                async def ref(item: Any = item) -> Any:
                    return item

                yield ref()

        return items()


def ancestor_in(pid: int, candidates: set[int]) -> int | None:
    """The first of ``candidates`` among host process ``pid`` and its ancestors (a sandbox's worker)."""
    for _ in range(64):  # bounded: a sandbox's process is a few levels below its worker
        if pid in candidates:
            return pid
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        if pid <= 1:
            return None
    return None


async def sandbox_worker(marker: str) -> tuple[int, Any]:
    """The pid and actor handle of the shell worker whose sandbox runs ``sleep <marker>``."""
    import ray

    stats = await worker_stats("shell")
    workers = {s["pid"] for s in stats}

    def look() -> int | None:
        return next(filter(None, (ancestor_in(pid, workers) for pid in sleepers(marker))), None)

    worker = await found(look, what=f"a shell worker above sleep {marker}")
    [named] = [s["name"] for s in stats if s["pid"] == worker]
    return worker, ray.get_actor(named, namespace=NAMESPACE)
