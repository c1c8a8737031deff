"""``PoolWorker``: one exec backend in a Ray actor, shared by every owner of the cluster.

A worker holds one real backend (:class:`~computer.runtime.ShellBackend` or
:class:`~computer.runtime.PythonBackend`, default options) and runs many requests concurrently. Each
run is a Ray streaming generator: the backend's output chunks and its exit event, preceded by a
:class:`RunStarted` marker when the run needs one (see :meth:`PoolWorker.run`): the first item tells
the dispatcher that the run reached a live worker. The workspace is reached
only through :class:`~computer.actors._pool_context.OwnerExecContext`, i.e. calls back to the owner.
Cancelling the generator ends the backend's iterator, which kills the program's process tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runtime import (
    Backend,
    ExecEvent,
    ExitEvent,
    MirrorPool,
    PythonBackend,
    ShellBackend,
    release_process,
)
from ..runtime.types import BackendInfo
from ._pool_admission import Admission, LoadReport, Requeue
from ._pool_context import OwnerExecContext, RunOrder, owner_context
from ._pool_live import LiveSandboxCalls
from ._pool_moves import MoveCost, RunMeasure

__all__ = ["BACKENDS", "MIRROR_WORKSPACES", "OwnerUnknown", "PoolWorker", "Requeue", "RunStarted"]

log = logging.getLogger(__name__)


# How often a running run checks that its owner is still there, and how long it waits for the answer.
OWNER_CHECK_INTERVAL = 2.0
OWNER_CHECK_TIMEOUT = 30.0

# A run that has yielded nothing this long announces itself (``RunStarted``): from then on a worker
# death fails it instead of sending it again. Seconds.
ANNOUNCE_AFTER = 0.05

# A shell worker keeps warm mirrors of this many workspaces (least recently used ones are dropped).
MIRROR_WORKSPACES = 32


def _bounded_mirrors(base: Path, root: str) -> MirrorPool:
    return MirrorPool(base, root, max_workspaces=MIRROR_WORKSPACES)


def _pool_shell() -> ShellBackend:
    # The stock shell pool keeps mirrors of every workspace it ever saw; a shared worker must not.
    return ShellBackend(mirror_pool=_bounded_mirrors)


# The backends a pool can run, built with their default options (shell: bounded mirrors).
BACKENDS: dict[str, Callable[[], Backend]] = {"shell": _pool_shell, "python": PythonBackend}


@dataclass(frozen=True, slots=True)
class RunStarted:
    """First item of a run that needs the owner or outlasts :data:`ANNOUNCE_AFTER` before its first
    event: which worker took it, on which node, with how many runs in flight."""

    worker: str
    node_id: str
    pid: int
    load: int


@dataclass(frozen=True, slots=True)
class OwnerUnknown:
    """The only item of a run sent without its owner's handle to a worker that does not hold it
    (a new or restarted worker process): nothing ran; send it again with the handle."""


# Owner handles a worker keeps (by workspace), so that runs need not carry them: least recent go first.
OWNERS_KEPT = 256


class OwnerHandles:
    """The owners' actor handles a worker was sent, by workspace: the worker's half of "the owner's
    handle once per worker" (a run then arrives without it; see :class:`RunOrder`)."""

    def __init__(self, kept: int = OWNERS_KEPT) -> None:
        self._kept = kept
        self._owners: OrderedDict[str, tuple[str | None, Any]] = OrderedDict()
        self.received = 0  # runs that arrived with their owner's handle

    def workspaces(self) -> list[str]:
        """The workspaces whose owners sent runs here (the most recent last)."""
        return list(self._owners)

    def resolve(self, order: RunOrder) -> Any:
        """The owner handle of ``order``: the one sent (kept for later runs), else the one kept for
        that owner process (``owner_token``), else None (the worker answers :class:`OwnerUnknown`)."""
        workspace_id, token = order.workspace_id, order.owner_token
        if order.owner is not None:
            self.received += 1
            self._owners[workspace_id] = (token, order.owner)
            self._owners.move_to_end(workspace_id)
            while len(self._owners) > self._kept:
                self._owners.popitem(last=False)
            return order.owner
        kept = self._owners.get(workspace_id)
        if kept is None or kept[0] != token:
            return None
        self._owners.move_to_end(workspace_id)
        return kept[1]

    def kept(self, workspace_id: str) -> tuple[str | None, Any] | None:
        """The ``(owner_token, handle)`` of the owner that last sent a run of ``workspace_id`` here."""
        return self._owners.get(workspace_id)


class PoolWorker(LiveSandboxCalls):
    """Runs requests of any workspace on one backend; named ``computer:pool:<backend>:<i>``."""

    def __init__(
        self,
        backend: str | Backend,
        name: str,
        cpus: float = 0.0,
        target: int = 4,
        *,
        node_id: str | None = None,
    ) -> None:
        """``backend``: the name of a built-in one (:data:`BACKENDS`), or a backend (tests); ``node_id``:
        where it runs (default: asked of Ray, which must then be connected)."""
        if isinstance(backend, str):
            try:
                factory = BACKENDS[backend]
            except KeyError:
                raise ValueError(f"no built-in backend {backend!r}; known: {', '.join(BACKENDS)}") from None
            self.backend: Backend = factory()
        else:
            self.backend = backend
        self.name = name
        if node_id is None:
            import ray

            node_id = str(ray.get_runtime_context().get_node_id())
        self.node_id = node_id
        self.started_at = time.time()
        self._running: dict[str, str] = {}  # run key -> workspace id
        self._runs = 0
        self._failures = 0
        self._prefetched = 0  # runs whose push came with the request (no push call back to the owner)
        # Calls runs made back to their owners, by owner RPC (pool_sync_push, pool_sync_pull, ...).
        self._callbacks: Counter[str] = Counter()
        self.owners = OwnerHandles()
        self._announced = 0  # runs that sent a ``RunStarted`` marker
        self.cpus = cpus  # what this worker reserved from Ray; ``target`` runs at once follow from it
        self.admission = Admission(target)
        self._here: Counter[str] = Counter()  # workspace id -> its runs here (waiting or running)
        self._moved = 0  # runs sent elsewhere after their idle live sandbox here was ended (all time)
        self._moved_reported = 0
        # Runs sent movable to this full worker that waited here: the wait was shorter than a move.
        self._stayed = 0
        self._stayed_reported = 0
        self.moves = MoveCost()  # slot time and move cost, measured from the runs here
        self._since: dict[str, float] = {}  # run key -> when it took its slot (monotonic)
        self._kills: dict[str, asyncio.Event] = {}  # run key -> set by ``kill_run``
        self._orphans: asyncio.Task[None] | None = None  # ``_end_orphans``, while live sandboxes are here

    # --- elastic pools (see _pool_admission, _pool_scaler): load, drain, what pins this worker ---

    def live_sandboxes(self, workspace_id: str | None = None) -> int:
        """Live sandboxes this worker holds (of ``workspace_id``, or all): a worker holding one is
        drained, never removed, and runs of that workspace are admitted even while it drains."""
        return self.live_count(workspace_id)

    async def load(self) -> LoadReport:
        """The load since the previous call (the pool's control loop polls it)."""
        moved, self._moved_reported = self._moved - self._moved_reported, self._moved
        stayed, self._stayed_reported = self._stayed - self._stayed_reported, self._stayed
        report = self.admission.report(
            self.name,
            self.node_id,
            self.cpus,
            live_sandboxes=self.live_sandboxes(),
            mirrors_in_use=len(set(self._running.values())),
            moved=moved,
        )
        return dataclasses.replace(
            report,
            stayed=stayed,
            slot_time=self.moves.slot_time(self.admission.target, self._ages()),
            move_cost=self.moves.cost(),
        )

    def _ages(self) -> list[float]:
        """Seconds each run holding a slot has held it."""
        now = time.monotonic()
        return [now - t for t in self._since.values()]

    async def drain(self) -> LoadReport:
        """Take no new run (runs in flight finish; waiting ones go back to their dispatchers) and end
        the live sandboxes that run nothing, so that an idle worker gives its memory back now rather
        than when they end on their own (a sandbox running processes keeps the worker until it ends;
        a later run of an ended one starts afresh on another worker, about 1 ms)."""
        self.admission.drain()

        async def end_if_idle(workspace_id: str) -> None:
            with contextlib.suppress(Exception):
                # ``_here`` is read after the listing's await (a run admitted meanwhile keeps the
                # sandbox), with no await before ``live_end`` marks it dead: a run arriving from then
                # on finds no live sandbox (handed back, or started fresh once the end is over).
                if not await self.live_processes(workspace_id) and not self._here[workspace_id]:
                    await self.live_end(workspace_id)

        await asyncio.gather(
            *[
                end_if_idle(workspace_id)
                for workspace_id in self.owners.workspaces()
                if self.live_sandboxes(workspace_id) and not self._here[workspace_id]
            ]
        )
        return await self.load()

    async def undrain(self) -> None:
        """Take runs again (the pool needs this worker after all)."""
        self.admission.undrain()

    async def shed(self) -> int:
        """Hand the runs waiting in line back to their dispatchers (the pool has room elsewhere)."""
        return self.admission.shed()

    # --- end of elastic pools ---

    def __ray_shutdown__(self) -> None:
        """Ray ends this worker gracefully: remove its scratch (mirrors, staged trees) and cgroups now
        (a killed worker's are removed by the next process to start on the node: ``reap_dead``)."""
        release_process()

    async def probe(self) -> int:
        """Liveness (its pid), called on its own concurrency group (``PROBE_GROUP``): it answers while
        the worker's loop is busy, not when the process is stopped or wedged (see ``PoolBackend``)."""
        return os.getpid()

    async def info(self) -> BackendInfo:
        """What the backend says about itself (the owner shows it as its own)."""
        return self.backend.info

    async def stats(self) -> dict[str, Any]:
        """Counters for tests, benchmarks and the status command."""
        mirrors = self.backend.mirrors if isinstance(self.backend, ShellBackend) else None
        return {
            "name": self.name,
            "node_id": self.node_id,
            "pid": os.getpid(),
            "runs": self._runs,
            "failures": self._failures,
            "prefetched": self._prefetched,
            "callbacks": self._callbacks.total(),
            "callbacks_by": dict(self._callbacks),
            "owner_handles": self.owners.received,
            "announced": self._announced,
            "moved": self._moved,
            "stayed": self._stayed,
            "slot_time": self.moves.slot_time(self.admission.target, self._ages()),
            "move_cost": self.moves.cost(),
            "running": sorted(self._running),
            "mirrors": mirrors.workspaces() if mirrors is not None else [],
        }

    async def run(self, order: RunOrder) -> AsyncIterator[RunStarted | OwnerUnknown | Requeue | ExecEvent]:
        """Stream one run: output chunks, then exactly one ``ExitEvent``; :class:`RunStarted` first when
        the run announces itself.

        ``order.owner``: the owner's actor handle, or None when this worker was sent it before
        (:class:`OwnerHandles`); a worker that does not hold it answers :class:`OwnerUnknown` and
        runs nothing. With ``order.owner_token`` the run is killed when its owner dies or restarts
        (nobody would read the result, and a restarted owner no longer knows the run).
        ``order.prefetched``: the push the owner computed ahead for this worker's mirror (used when
        the mirror is at its revision). ``order.outcomes``: how the owner applied the pulls of this
        worker's earlier runs of the workspace; given (even empty), the run hands its own pull to the
        owner in its exit event (:class:`DeferringOwnerContext`).

        The first item the dispatcher sees tells it that the run reached a live worker; a worker that
        dies before that left no trace in the workspace, so the dispatcher sends the run again.
        Nothing of the run reaches the owner before a first item went out: the context holds every
        call back until then. A run that asks to call the owner, or has yielded nothing after
        :data:`ANNOUNCE_AFTER`, yields ``RunStarted`` first; a short run that needs no call (a warm
        shell run: its push comes prefetched, its pull goes in the exit event) yields only its own
        events, one Ray message less (~0.45 ms, ~0.85 ms of CPU). A backend with network access
        announces at once: sending its run again could repeat what it did outside the sandbox.

        ``order.movable``: the dispatcher has room for this run elsewhere (a worker with a free slot).
        A run pinned here by its workspace's live sandbox that finds this worker full then moves when
        its expected wait here is longer than a move costs (:class:`~computer.actors._pool_moves.MoveCost`:
        the line ahead of it times this worker's slot time, against a fresh sandbox's start plus its
        mirror pushed cold, all measured here; a run that stays is counted, ``stayed``) and it would
        lose nothing else: when no other run of the workspace is here and the sandbox holds no
        process (nothing in the background), this worker ends the sandbox (what it wrote is pulled
        first; its mirror stays warm here) and hands the run back untouched,
        ``Requeue(reason="moved")``; the dispatcher unpins the workspace and sends the run to a
        worker with room, where it starts a fresh live sandbox. A sandbox with processes of its own
        keeps its pin and the run waits in line here: moving would kill them.
        """
        owner = self.owners.resolve(order)
        if owner is None:
            yield OwnerUnknown()
            return
        workspace_id = order.workspace_id
        self._here[workspace_id] += 1
        try:
            pinned = self.live_sandboxes(workspace_id) > 0
            if pinned and order.movable and self.admission.full:
                if not self.moves.worth_moving(
                    workspace_id, self.admission.queued, self.admission.target, self._ages()
                ):
                    self._stayed += 1  # a slot here comes free sooner than a move would start it
                elif await self._sandbox_may_move(workspace_id):
                    self._moved += 1
                    yield Requeue(self.name, "moved", *self.live_notices(workspace_id))
                    return
            # Closed with the outer generator (a cancelled run must end its process tree at once).
            run = self._admitted_run(order, owner)
            async with contextlib.aclosing(run):
                async for item in run:
                    yield item
        finally:
            self._here[workspace_id] -= 1
            if self._here[workspace_id] <= 0:
                del self._here[workspace_id]

    def _watch_live_owners(self) -> None:
        """Make sure :meth:`_end_orphans` runs (a run left a live sandbox here)."""
        if self._orphans is None or self._orphans.done():
            self._orphans = asyncio.create_task(self._end_orphans())

    async def _end_orphans(self) -> None:
        """While this worker holds live sandboxes: every :data:`OWNER_CHECK_INTERVAL`, end those whose
        owner (the one that last sent a run of the workspace here) died or restarted, as a run whose
        owner is gone is killed. What they wrote and synced is kept; the final pull reaches no owner.
        Before, such a sandbox ran on unseen for up to ``live_lifetime`` (1 h), its writes synced
        nowhere: the workspace's new owner has no pin (pins live in an owner's memory), so its
        ``processes()`` said [], ``end_sandbox()`` False and ``kill_process`` "no live sandbox" while
        a background writer kept writing 23 s later."""
        while True:
            await asyncio.sleep(OWNER_CHECK_INTERVAL)
            if not self.live_sandboxes():
                return
            with contextlib.suppress(Exception):
                await asyncio.gather(
                    *[
                        self._end_if_orphan(workspace_id)
                        for workspace_id in self.owners.workspaces()
                        if self.live_sandboxes(workspace_id) and not self._here[workspace_id]
                    ]
                )

    async def _end_if_orphan(self, workspace_id: str) -> None:
        kept = self.owners.kept(workspace_id)
        if kept is None or kept[0] is None:
            return  # an owner that sent no token cannot be checked
        why = await _owner_gone(kept[1], kept[0])
        if why is None or self.owners.kept(workspace_id) is not kept or self._here[workspace_id]:
            return  # alive, or a run of its workspace came meanwhile (a new owner's adopts the sandbox)
        log.warning("%s: ending the live sandbox of %s: %s", self.name, workspace_id, why)
        await self.live_end(workspace_id)

    async def kill_run(self, workspace_id: str, run_id: str) -> bool:
        """End a run as ``kill`` does in one process: the backend ends its program, pulls what it
        wrote, and the run's stream goes on to an exit event that says what (``pulled``,
        ``skipped``). Cancelling the stream instead (what a closed one does) loses that event. False:
        no such run here (it ended already)."""
        kill = self._kills.get(f"{workspace_id}/{run_id}")
        if kill is None:
            return False
        kill.set()
        return True

    async def _sandbox_may_move(self, workspace_id: str) -> bool:
        """End the workspace's live sandbox here when it holds no process and no other run of the
        workspace is here (the run asking is the only one); whether it was ended."""
        if self._here[workspace_id] != 1:
            return False
        try:
            if await self.live_processes(workspace_id):
                return False  # background processes: moving would kill them
            if self._here[workspace_id] != 1 or not self.admission.full:
                return False  # another run of the workspace came meanwhile, or a slot came free
            return await self.live_end(workspace_id)
        except Exception:  # the sandbox could not be asked or ended: keep the pin, wait here
            log.warning("%s: live sandbox of %s could not be moved", self.name, workspace_id, exc_info=True)
            return False

    async def _admitted_run(
        self, order: RunOrder, owner: Any
    ) -> AsyncGenerator[RunStarted | Requeue | ExecEvent, None]:
        """The run once its owner is known: its admission (or hand-back), then its events."""
        request, workspace_id, owner_token = order.request, order.workspace_id, order.owner_token
        was_live = self.live_sandboxes(workspace_id) > 0
        if not await self.admission.enter(pinned=was_live):
            reason = "draining" if self.admission.draining else "shed"
            yield Requeue(self.name, reason, *self.live_notices(workspace_id))
            return
        key = f"{workspace_id}/{request.id}"
        self._running[key] = workspace_id
        self._since[key] = granted = time.monotonic()
        self._kills[key] = kill = asyncio.Event()
        self._runs += 1
        live_after: bool | None = None  # the run's exit said whether its live sandbox stays
        events = None
        ctx: OwnerExecContext | None = None
        step: asyncio.Future[ExecEvent] | None = None
        watch = None if owner_token is None else asyncio.create_task(_watch_owner(owner, owner_token))
        wanted: asyncio.Future[Any] | None = None
        killing: asyncio.Future[Any] | None = asyncio.ensure_future(kill.wait())
        try:
            ctx = owner_context(order, owner, announced=False)
            events = aiter(self.backend.run(request, ctx))
            step = asyncio.ensure_future(anext(events))
            loop = asyncio.get_running_loop()
            quiet_until = loop.time() + ANNOUNCE_AFTER
            wanted = asyncio.ensure_future(ctx.wanted.wait())
            if self.backend.info.network:
                self._announced += 1
                yield RunStarted(self.name, self.node_id, os.getpid(), len(self._running))
                ctx.announce()
            while True:
                if step is None:
                    step = asyncio.ensure_future(anext(events))
                waits: set[asyncio.Future[Any]] = {step} if watch is None else {step, watch}
                if killing is not None:
                    waits.add(killing)
                announce = False
                if not ctx.announced:
                    waits.add(wanted)
                    quiet = max(0.0, quiet_until - loop.time())
                    await asyncio.wait(waits, timeout=quiet, return_when=asyncio.FIRST_COMPLETED)
                    announce = not step.done()  # it wants the owner, or it takes a while
                elif len(waits) > 1:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if killing is not None and killing.done():
                    killing = None
                    if not step.done():  # the backend ends the program, pulls, then says what
                        step.cancel()
                if watch is not None and watch.done() and not step.done():
                    self._failures += 1
                    log.warning("%s: run %s stopped: %s", self.name, key, watch.result())
                    return  # the finally kills the program; nobody is left to tell
                if announce:
                    self._announced += 1
                    yield RunStarted(self.name, self.node_id, os.getpid(), len(self._running))
                    ctx.announce()
                    continue
                try:
                    event = await step
                except StopAsyncIteration:
                    return
                except asyncio.CancelledError:
                    current = asyncio.current_task()
                    if not kill.is_set() or (current is not None and current.cancelling()):
                        raise  # this stream was cancelled, not the run killed
                    # Killed before its program ran (or after it ended): nothing of it to say.
                    step = None
                    yield ExitEvent(None, killed=True)
                    return
                step = None
                if isinstance(event, ExitEvent):
                    live_after = event.live and event.exit_code is not None
                yield event
                ctx.announce()  # the dispatcher saw the run's first item
        except Exception as exc:  # the run failed outside the program: report it, keep serving
            self._failures += 1
            log.warning("%s: run %s failed: %s", self.name, key, exc, exc_info=True)
            yield ExitEvent(None, error=f"{self.name}: {type(exc).__name__}: {exc}")
        finally:
            held = time.monotonic() - granted
            self.admission.leave()
            for task in (watch, wanted, killing):
                if task is not None:
                    task.cancel()
            self._kills.pop(key, None)
            if step is not None and not step.done():
                step.cancel()  # ends the backend's iterator where it waits: it kills the process tree
                with contextlib.suppress(BaseException):
                    await step
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
            self._running.pop(key, None)
            self._since.pop(key, None)
            if owner_token is not None and self.live_sandboxes(workspace_id):
                self._watch_live_owners()  # also after a run killed because its owner died
            if ctx is not None:
                self._prefetched += ctx.prefetch_used
                self._callbacks.update(ctx.calls)
                self.moves.ran(
                    RunMeasure(
                        workspace_id,
                        held,
                        fresh=live_after is True and not was_live,
                        warm=live_after is True and was_live,
                        push_seconds=ctx.push_seconds,
                        push_bytes=ctx.push_bytes,
                        full_push=ctx.full_push,
                    )
                )


async def _watch_owner(owner: Any, token: str) -> str:
    """Return (with the reason) once the owner of a run is gone or is another process than ``token``."""
    while True:
        await asyncio.sleep(OWNER_CHECK_INTERVAL)
        why = await _owner_gone(owner, token)
        if why is not None:
            return why


# The one ping of each owner (by its token) this worker has out: the task awaiting its answer, and when
# it was sent (the loop's time). At most one per owner and worker: ``_owner_gone``.
_pings: dict[str, tuple[asyncio.Task[Any], float]] = {}


async def _owner_gone(owner: Any, token: str) -> str | None:
    """Why the owner ``owner`` is gone or another process than ``token`` (one ping), else None: an
    owner silent for ``OWNER_CHECK_TIMEOUT`` (stopped, wedged) is not proof that it is gone.

    At most one ping of an owner is out per worker: a check while the previous ping is unanswered
    (another run's watcher, ``_end_orphans``, the next round) waits for that one, for what is left of
    its ``OWNER_CHECK_TIMEOUT``, instead of sending another; one unanswered for that long is silence
    (None) and stays out, never cancelled, until the owner answers it (or Ray says it died: the checks
    then say so). Before, each run's watcher and each round sent its own ping and gave it up after the
    timeout (cancelled in Ray, which cannot reach a stopped process: pending there all the same): a
    stopped owner had one pending per run and per ``OWNER_CHECK_INTERVAL`` plus timeout, and ran them
    all once it went on."""
    from ray.exceptions import RayActorError

    loop = asyncio.get_running_loop()
    out = _pings.get(token)
    if out is None or out[0].done() or out[0].get_loop() is not loop:
        out = _pings[token] = (loop.create_task(_ping(owner)), loop.time())
        out[0].add_done_callback(lambda ping: _answered(token, ping))
    ping, sent = out
    left = sent + OWNER_CHECK_TIMEOUT - loop.time()
    try:
        if left <= 0:
            return None  # silent all this time: not proof that it is gone
        current = await asyncio.wait_for(asyncio.shield(ping), left)
    except RayActorError as exc:
        return f"its owner died ({type(exc).__name__})"
    except Exception:  # slow or unreachable for now: not proof that it is gone
        return None
    return "its owner restarted" if current != token else None


async def _ping(owner: Any) -> Any:
    return await owner.pool_ping.remote()


def _answered(token: str, ping: asyncio.Task[Any]) -> None:
    """``ping`` has its answer (or Ray's error): the owner's next check sends a new one."""
    if _pings.get(token, (None,))[0] is ping:
        del _pings[token]
    if not ping.cancelled():
        ping.exception()  # retrieved: its waiters may have stopped waiting
