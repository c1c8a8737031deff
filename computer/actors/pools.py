"""Exec backend pools: each backend runs as a horizontally scaled pool of Ray actors (SPEC sections 6, 9).

:class:`PoolBackend` is a :class:`~computer.runtime.Backend` living in the owner actor: its ``run``
dispatches the request to one worker of the pool (see below for which), streams the worker's events
back as they come, and cancels the worker's generator when its consumer stops (the worker then kills
the process tree). A worker that dies mid-run gives an ``ExitEvent`` with ``exit_code=None`` and
``"exec worker died: …"``; its run never reached the pull, so the workspace is unchanged, and the
worker is replaced.

:func:`owner_backends` is the hook :mod:`computer.actors._backends` calls when an owner opens its
workspace: ``shell`` then ``python`` (the first is the default backend), the pools its settings enable.

Elastic pools (issue 23): how many workers a pool has is decided by one control loop for the whole
cluster (:mod:`~computer.actors._pool_scaler`); each worker runs at most its target of runs at once,
the others wait in its line (:mod:`~computer.actors._pool_admission`). Each owner dispatches on its
own: it refreshes the loop's :class:`~computer.actors._pool_scaler.PoolView` (ready workers, their
node, target and load) at most every :data:`VIEW_TTL` seconds while the pool is busy (every
:data:`VIEW_TTL_CALM` seconds while every worker has room), in the background, and picks
(:mod:`~computer.actors._pool_pick`) the worker its workspace is *pinned* to (a live sandbox lives
there: :meth:`PoolBackend.pin`; a pinned run whose worker is full moves when its sandbox runs nothing
and its wait there is longer than a move costs: see ``PoolWorker.run`` and ``_pool_moves``), else one
with a free slot (warm mirror, own node, least load), else the least loaded.

A run whose worker dies before the dispatcher saw its first item (output, its exit, or a
``RunStarted`` marker: see ``PoolWorker.run``) left nothing in the workspace and is sent again (to a
worker Ray restarts in place: until it answers, for at most :data:`RESTART_WAIT` seconds); after that
it is failed. When that worker held the workspace's live sandbox, its background processes ended with
it: the run goes on in a fresh sandbox and says so first on its stderr (:data:`LOST_SANDBOX`). A run
handed back by its worker (:class:`~computer.actors._pool_admission.Requeue`: the worker drains, or
shed its line because capacity appeared elsewhere) had not started either and is sent to another
worker. So removing a worker loses no run and runs none twice. A worker that keeps a run (or
``end_sandbox``) waiting is probed (:mod:`~computer.actors._pool_probe`); one that does not answer
(stopped, wedged) is treated as dead for that call: a run it never started goes to another worker, a
started one fails naming it, and its live sandbox is given up (its next run says so:
:data:`SILENT_SANDBOX`). Workers check every few seconds that the owner of each run is still the same
live process, and kill runs whose owner is gone; likewise they end the live sandboxes whose owner (the
one that sent the workspace's last run there) is gone: pins live only in an owner's memory, so its
successor could not reach them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from ..config import Settings
from ..runtime import Backend, ExecContext, ExecEvent, ExecRequest, ExitEvent, OutputChunk, offload
from ..runtime.types import BackendInfo
from ._errors import first_line
from ._pool_admission import Requeue
from ._pool_avoid import DEAD_REMEMBERED, DRAINING_AVOID, RESTART_AVOID, SILENT_AVOID, Avoidance
from ._pool_callbacks import owner_token
from ._pool_notices import LOST_REMEMBERED, LOST_SANDBOX, SILENT_SANDBOX, Notices
from ._pool_pick import WorkerSlot, pick, room_elsewhere
from ._pool_pins import Pins
from ._pool_plan import enabled, limits_from
from ._pool_probe import PROBE_AFTER, PROBE_TIMEOUT, WorkerSilent, watched
from ._pool_registry import INFO_TIMEOUT, described, described_async, worker_handle
from ._pool_sandboxes import PinnedSandboxes
from ._pool_scaler import PoolView, get_scaler
from ._pool_worker import OwnerUnknown, RunStarted
from .raycompat import streaming

__all__ = [
    "DEAD_REMEMBERED",
    "DRAINING_AVOID",
    "INFO_TIMEOUT",
    "LOST_REMEMBERED",
    "LOST_SANDBOX",
    "PROBE_AFTER",
    "PROBE_TIMEOUT",
    "RESTART_AVOID",
    "SILENT_AVOID",
    "SILENT_SANDBOX",
    "PoolBackend",
    "WorkerSilent",
    "describe_pools",
    "owner_backends",
]

log = logging.getLogger(__name__)

# Events a worker may produce ahead of the owner consuming them (each at most 256 KiB of output).
STREAM_AHEAD = 16
# A run that did not reach a live worker (it was dead or being replaced) is re-dispatched this often.
DISPATCH_RETRIES = 3
# ... and while the worker it went to is being restarted by Ray (a crash, a kill), for up to this many
# seconds: a worker process starts in seconds, more on a loaded machine. Seconds.
RESTART_WAIT = 60.0
# Seconds a killed run's worker has to end it and pull what it wrote before its stream is cancelled.
KILL_WAIT = 60.0
VIEW_TTL = 1.0  # seconds a dispatcher uses the control loop's view before refreshing it (in the background)
# The same while the pool is calm: every worker had a free slot in the last view, none pending, no run of
# this owner found the workers full. A view call costs the owner and the control loop ~1-2 ms of CPU
# each: refreshed every second, it was a call per run for an agent running a command a second (the
# control loop spent 1.9 ms of CPU per run in pool_bench). A dead worker or a run handed back
# refreshes at once either way.
VIEW_TTL_CALM = 5.0
# A run with no ready worker to go to waits this long for one (a pool growing from zero, a new node the
# autoscaler adds) before it fails. Seconds.
WORKER_WAIT = 300.0
# A run handed back this many times (workers draining or shedding one after another) fails.
REQUEUES_MAX = 100
# A workspace whose run moved (its idle live sandbox ended on a full worker) is not sent movable again
# for this long (seconds). Owners see a new worker's free slots in views of the same age and move to it
# together, fill it, and moved on again: 64 agents on a 3-node local cluster moved 333 runs in 30 s,
# each a sandbox started anew and a cold mirror pushed.
MOVE_HOLD = 10.0
# Seconds the worker holding a workspace's live sandbox has to answer ``processes``/``kill_process``
# (a listing or a signal: milliseconds when it runs). A worker that is stopped (SIGSTOP) or wedged
# never answers, and Ray has no bound of its own: ``computer ps`` and the processes tool waited forever.
LIVE_CALL_TIMEOUT = 60.0

_infos: dict[str, BackendInfo] = {}  # per process: a pool describes itself once
# Per process: why the last awaited description of a pool failed (``describe_pools``), for the owner
# constructor that follows to report once, instead of asking again with a blocking call.
_undescribed: dict[str, Exception] = {}
# Per process: the latest view of each pool a dispatcher here got from the control loop (when, view).
# An owner host serves many workspaces in one process, each with its own dispatcher: a dispatcher whose
# view is stale takes a fresher one another took, instead of a call of its own. 64 agents' owners each
# asked once a second while the pool was busy: as many view calls as runs, ~1-2 ms of CPU each on the
# owner and the control loop.
_views: dict[str, tuple[float, PoolView]] = {}
_scaler: Any = None  # per process: the control loop's handle


class PoolBackend:
    """The backend ``backend`` (``"shell"``, ``"python"``) served by the cluster's elastic pool."""

    def __init__(self, backend: str, *, owner: Any = None, node: str = "") -> None:
        """``owner``: the owner actor's handle, ``node``: its node id (default: this actor's, from Ray)."""
        self.backend = backend
        self._slots: dict[str, WorkerSlot] = {}
        self._warm: list[str] = []  # workers that ran this owner's workspace, most recent first
        self._pins = Pins()  # workspace id -> worker its runs must go to (a live sandbox)
        self._notices = Notices()  # what the workspaces' next runs say: a lost sandbox, carried notes
        self._avoided = Avoidance()  # workers seen dead, restarting, silent, draining
        self._moved_at: dict[str, float] = {}  # workspace id -> when its run last moved (MOVE_HOLD)
        self._retired: frozenset[str] = frozenset()  # workers the control loop removed (PoolView.retired)
        self._owner = owner
        self._token: str | None = None
        self._node = node
        self._view_at = -math.inf
        self._refreshing: asyncio.Task[None] | None = None
        self.requeued = 0  # runs a worker handed back (draining, shedding) and this owner sent again
        self.moved = 0  # runs a full worker handed back after ending their idle live sandbox there
        self._busy = True  # the last view (or a run since) found a worker full or one pending
        self._sandboxes = PinnedSandboxes(
            backend, self._pins, self._notices, self._named_handle, self._watched, self._lost_there
        )
        self.info: BackendInfo = self._describe()

    def _describe(self) -> BackendInfo:
        info = _infos.get(self.backend)
        if info is None:
            failed = _undescribed.pop(self.backend, None)
            if failed is not None:
                raise failed
            info = _infos[self.backend] = described(self.backend, _scaler_handle)
        return info

    def _owner_handle(self) -> Any:
        if self._owner is None:
            import ray

            self._owner = ray.get_runtime_context().current_actor
            self._token = owner_token()  # only the owner's own process can vouch for itself
        if not self._node:
            import ray

            with contextlib.suppress(Exception):
                self._node = str(ray.get_runtime_context().get_node_id())
        return self._owner

    # --- affinity pins: runs of a workspace that must go to one worker (its live sandbox is there) ---

    def pin(self, workspace_id: str, worker: str) -> None:
        """Send every run of ``workspace_id`` to ``worker`` (even while it drains) until :meth:`unpin`."""
        self._pins.pin(workspace_id, worker)

    def unpin(self, workspace_id: str) -> None:
        self._pins.unpin(workspace_id)

    def pinned(self, workspace_id: str) -> str | None:
        return self._pins.get(workspace_id)

    # --- live sandboxes (issue 18): asked of the worker the workspace is pinned to ---

    async def processes(self, workspace_id: str) -> list[Any]:
        """The processes of the workspace's live sandbox, on its worker ([] without one)."""
        return await self._sandboxes.processes(workspace_id, LIVE_CALL_TIMEOUT)

    async def kill_process(self, workspace_id: str, pid: int) -> None:
        """SIGKILL ``pid`` in the workspace's live sandbox, on its worker (``ProcessLookupError`` when
        the worker died with it: :meth:`~computer.actors._pool_sandboxes.PinnedSandboxes.kill_process`)."""
        await self._sandboxes.kill_process(workspace_id, pid, LIVE_CALL_TIMEOUT)

    async def end_sandbox(self, workspace_id: str) -> bool:
        """End the workspace's live sandbox on its worker; True when it ended or was lost with its
        worker (its next run says so: :meth:`~computer.actors._pool_sandboxes.PinnedSandboxes.end`)."""
        return await self._sandboxes.end(workspace_id)

    async def _named_handle(self, name: str) -> Any:
        """The handle of the worker ``name``; None when this owner knows no such worker."""
        slot = self._slots.get(name)
        return await self._handle(slot) if slot is not None else None

    async def _watched(self, call: Any, name: str) -> Any:
        """Await ``call`` (a worker's answer), probing the worker ``name`` while it stays silent
        (:func:`~computer.actors._pool_probe.watched`); one silent to a probe is avoided a while."""
        try:
            return await watched(call, lambda: self._handle_of(name))
        except WorkerSilent:
            self._avoided.silent(name)
            raise

    def _handle_of(self, name: str) -> Any:
        slot = self._slots.get(name)
        return slot.handle if slot is not None else None

    async def close_workspace(self, workspace_id: str) -> None:
        """The workspace closes (hibernation, takeover): its live sandbox ends with it (what it wrote
        is pulled first)."""
        if self.pinned(workspace_id) is not None:
            await self.end_sandbox(workspace_id)

    def loads(self) -> dict[str, int]:
        """Runs in flight per worker, as this owner sees them."""
        return {name: slot.inflight for name, slot in self._slots.items()}

    # --- the control loop's view ---

    def _take_view(self, view: PoolView, at: float | None = None) -> None:
        """Adopt ``view`` (got from the control loop ``at``, monotonic; default now)."""
        now = time.monotonic()
        self._avoided.expire()
        listed = set()
        for w in view.workers:
            if self._avoided.dead(w.name):
                continue
            listed.add(w.name)
            slot = self._slots.get(w.name) or self._slots.setdefault(w.name, WorkerSlot(w.name))
            slot.node_id, slot.target, slot.load, slot.draining, slot.listed = (
                w.node_id,
                w.target,
                w.load,
                w.draining,
                True,
            )
        for name, slot in list(self._slots.items()):
            if name not in listed:
                slot.listed = False
                if slot.inflight == 0 and not self._pins.holds(name):
                    del self._slots[name]
                    if name in self._warm:
                        self._warm.remove(name)
        self._busy = view.pending > 0 or any(w.load >= w.target for w in view.workers if not w.draining)
        self._retired = frozenset(view.retired)
        self._view_at = now if at is None else at

    def _take_shared(self, ttl: float) -> bool:
        """Adopt the view another dispatcher of this process got, when newer than ours and younger
        than ``ttl``; whether it did."""
        latest = _views.get(self.backend)
        if latest is None or latest[0] <= self._view_at or time.monotonic() - latest[0] > ttl:
            return False
        self._take_view(latest[1], latest[0])
        return True

    async def _refresh(self, waiting: int = 0, wait: float = 0.0) -> None:
        global _scaler
        from ray.exceptions import RayActorError

        try:
            if _scaler is None:
                await offload(None, _scaler_handle)  # not the loop's pool (a host's, shared)
            view = await _scaler.view.remote(self.backend, waiting, wait)
        except RayActorError:  # the control loop is restarting (or was killed): ask again next time
            _scaler = None
            return
        except Exception:
            log.warning("%s pool: the control loop did not answer", self.backend, exc_info=True)
            return
        at = time.monotonic()
        _views[self.backend] = (at, view)
        self._take_view(view, at)

    async def _fresh(self) -> None:
        """Refresh the view in the background once it is older than :data:`VIEW_TTL` (or
        :data:`VIEW_TTL_CALM`); now, when it is empty. A fresh enough view another dispatcher of
        this process took serves instead (:data:`_views`)."""
        ttl = VIEW_TTL if self._busy else VIEW_TTL_CALM
        if time.monotonic() - self._view_at <= ttl and any(s.listed for s in self._slots.values()):
            return
        if self._take_shared(ttl) and any(s.listed for s in self._slots.values()):
            return
        if not any(s.listed for s in self._slots.values()):
            await self._refresh()
        elif self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.create_task(self._refresh())

    def _pick(self, workspace_id: str, *, spread: bool = False) -> WorkerSlot | None:
        """The worker for the workspace's next run (:func:`~computer.actors._pool_pick.pick`)."""
        slot, full = pick(
            self._slots,
            workspace_id,
            self._pins.get(workspace_id),
            self._avoided,
            self._warm,
            self._node,
            spread=spread,
        )
        self._busy = self._busy or full
        return slot

    def _movable(self, workspace_id: str, slot: WorkerSlot) -> bool:
        """Whether a run pinned to ``slot`` could go elsewhere: as this owner sees the pool, that
        worker is full and another has a free slot. Sent with the run: the worker decides (see
        ``PoolWorker.run``: only when it is full, the live sandbox runs nothing and the run's wait
        there, by the line it finds, is longer than a move costs: ``_pool_moves.MoveCost``).

        Not when the pool could merely grow: the moved run would wait in another line for a worker
        still to come, then for a cold mirror there, while its own worker frees a slot sooner for a
        short command (the 3-node pool_bench moved 223 runs in 20 s so, with 3 of 8 workers pending).
        Pinned runs that wait while no worker has a free slot make the pool grow all the same (the
        control loop's ``plan``): once the new worker is in this owner's view, the next run of an idle
        sandbox pinned to a full worker is sent movable and starts there.
        """
        if self._pins.get(workspace_id) != slot.name or slot.estimate <= slot.target:  # counts this run
            return False
        if time.monotonic() - self._moved_at.get(workspace_id, -math.inf) < MOVE_HOLD:
            return False  # it moved a moment ago: wait here rather than chase free slots with the others
        return room_elsewhere(self._slots, slot, self._avoided)

    async def _handle(self, slot: WorkerSlot) -> Any:
        if slot.handle is None:
            slot.handle = await offload(None, worker_handle, slot.name)
        return slot.handle

    def _bury(self, slot: WorkerSlot) -> None:
        """Forget a dead worker (the control loop replaces it); runs go elsewhere."""
        self._avoided.bury(slot.name)
        slot.listed = False
        slot.handle = None
        self._forget(slot)
        self._view_at = -math.inf  # the next run asks the control loop again

    async def _lost_there(self, name: str, why: str) -> str | None:
        """What a workspace's next run says of its live sandbox on ``name``, a worker found dead or
        gone: :data:`LOST_SANDBOX`, unless the control loop retired it (``PoolView.retired``: drained
        holding no run and no live sandbox, so its idle sandbox ended with the drain, what it wrote
        pulled, and nothing was lost: the run just starts a fresh one). A view that does not list it
        yet is refreshed first (a dead pinned worker is rare: one call to the control loop)."""
        if name not in self._retired:
            await self._refresh()
        return None if name in self._retired else LOST_SANDBOX.format(why=why)

    def _gone(self, name: str) -> bool:
        """Whether the worker ``name`` is known dead or no longer in the pool."""
        slot = self._slots.get(name)
        return slot is None or not slot.listed or self._avoided.dead(name)

    def _forget(self, slot: WorkerSlot) -> None:
        """Forget what the worker process held for this owner (it died or restarts)."""
        slot.memory.forget()
        if slot.name in self._warm:
            self._warm.remove(slot.name)

    async def _choose(self, workspace_id: str, *, spread: bool = False) -> WorkerSlot | None:
        """A worker for the next run: from the view, waiting (bounded) for one to be ready when none is."""
        await self._fresh()
        slot = self._pick(workspace_id, spread=spread)
        deadline = time.monotonic() + WORKER_WAIT
        while slot is None and time.monotonic() < deadline:
            await self._refresh(waiting=1, wait=min(30.0, max(0.1, deadline - time.monotonic())))
            slot = self._pick(workspace_id, spread=spread)
            if slot is None:
                await asyncio.sleep(0.2)  # bounded: the control loop answered without a ready worker
        return slot

    async def _exited(
        self, event: ExitEvent, workspace_id: str, slot: Any, request: ExecRequest, ctx: ExecContext
    ) -> ExitEvent:
        """A run's exit event from ``slot``: the workspace pinned there while its live sandbox stays,
        the run's deferred pull applied."""
        if event.live:  # later runs of the workspace go there
            self.pin(workspace_id, slot.name)
            slot.memory.ended_live(event)  # the next run's push is computed ahead
        else:
            self._pins.unpin_from(workspace_id, slot.name)
        if event.pending is not None:
            event = await slot.memory.apply(request.id, event, ctx)
        return event

    def _handed_back(self, workspace_id: str, slot: WorkerSlot, requeue: Requeue) -> bool:
        """A run ``slot`` handed back before it started: what the worker kept for the workspace's next
        run is carried, the workspace unpinned from it; whether the run moved (the worker is full)."""
        self._notices.carry(workspace_id, requeue)
        if requeue.reason == "draining":  # (the next view may not say so yet)
            slot.draining = True
            self._avoided.draining(slot.name)
        # A worker keeps a run whose live sandbox it holds: this one's has ended (on its own, or at a
        # drain), or the worker just ended it ("moved").
        self._pins.unpin_from(workspace_id, slot.name)
        if requeue.reason == "moved":  # it is full: go elsewhere
            slot.load = max(slot.load, slot.target)  # full, until the next view
            return True
        return False

    async def _kill_on(
        self, handle: Any, gen: Any, workspace_id: str, slot: Any, request: ExecRequest, ctx: ExecContext
    ) -> ExitEvent | None:
        """Kill the run on its worker and read its stream on to the exit event (what the kill's pull
        took); None when that fails within :data:`KILL_WAIT` (the caller then cancels the stream)."""
        try:
            async with asyncio.timeout(KILL_WAIT):
                if not await handle.kill_run.remote(workspace_id, request.id):
                    return None
                async for ref in gen:
                    event = await ref
                    if isinstance(event, ExitEvent):
                        return await self._exited(event, workspace_id, slot, request, ctx)
        except Exception as exc:  # a dead worker, a timeout: the stream is cancelled instead
            log.warning("pool %s: killing run %s on %s: %s", self.backend, request.id, slot.name, exc)
        return None

    async def run(self, request: ExecRequest, ctx: ExecContext) -> AsyncIterator[ExecEvent]:
        """Run ``request`` on a pool worker and yield its events as they arrive. Cancelled (``kill``),
        it asks the worker to kill the run and yields the run's exit event, which lists what the
        kill's pull took."""
        from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError, WorkerCrashedError

        workspace_id = ctx.workspace_id
        try:
            owner = self._owner_handle()
        except Exception as exc:
            yield ExitEvent(None, error=f"pool backend {self.backend!r} needs an owner actor: {exc}")
            return
        attempt = requeues = 0
        restart_deadline = 0.0  # set by the first worker found restarting
        # Why the live sandbox this run expected is gone (said once it runs; else kept for the next run).
        lost_sandbox: str | None = self._notices.take_lost(workspace_id)
        try:
            while True:
                was_pinned = self.pinned(workspace_id)
                slot = await self._choose(workspace_id, spread=requeues > 0)
                if (
                    was_pinned is not None
                    and (slot is None or slot.name != was_pinned)
                    and self._gone(was_pinned)
                    and self._pins.unpin_from(workspace_id, was_pinned)  # found dead since the last run
                ):
                    lost_sandbox = await self._lost_there(was_pinned, f"{was_pinned}: gone") or lost_sandbox
                if slot is None:
                    yield ExitEvent(
                        None,
                        error=f"no worker of the {self.backend} pool became ready within {WORKER_WAIT:g} s "
                        "(see `computer status`: pending workers wait for CPUs the cluster lacks)",
                    )
                    return
                if self.pinned(workspace_id) not in (None, slot.name):  # another run pinned it meanwhile
                    slot = self._pick(workspace_id) or slot
                self._pins.pin_ahead(workspace_id, slot.name)
                slot.inflight += 1
                handle = None
                gen = None
                started = finished = unknown = requeued = moved = silent = exited = False
                try:
                    handle = await self._handle(slot)
                    prefetched = await slot.memory.prefetch(ctx)
                    # Without a token (an owner handle given by the caller) the worker could not tell
                    # two owners of one workspace id apart: the handle is always sent then.
                    order = slot.memory.order(
                        request,
                        workspace_id,
                        owner,
                        self._token,
                        prefetched,
                        self._movable(workspace_id, slot),
                    )
                    gen = streaming(handle.run, STREAM_AHEAD).remote(order)
                    items = aiter(gen)
                    while True:
                        event = await self._watched(_next_item(items), slot.name)
                        if event is _END:
                            break
                        if isinstance(event, OwnerUnknown):  # a new worker process: nothing ran
                            slot.memory.introduced = False
                            unknown = True
                            if self._pins.unpin_from(
                                workspace_id, slot.name
                            ):  # restarted: the live sandbox is gone
                                lost_sandbox = LOST_SANDBOX.format(why=f"{slot.name}: restarted")
                            break
                        if isinstance(event, Requeue):  # handed back before it started: nothing ran
                            moved = self._handed_back(workspace_id, slot, event)
                            requeued = True
                            break
                        # Any other first item: the run reached a live worker that holds the owner handle.
                        started = slot.memory.introduced = True
                        self._avoided.answered(slot.name)
                        if lost_sandbox is not None:
                            yield OutputChunk("stderr", lost_sandbox.encode())
                            lost_sandbox = None
                        for note in self._notices.take_notes(workspace_id):
                            yield OutputChunk("stderr", note.encode())
                        if isinstance(event, RunStarted):
                            continue
                        if isinstance(event, ExitEvent):
                            finished = exited = True
                            event = self._notices.with_refusals(
                                workspace_id, await self._exited(event, workspace_id, slot, request, ctx)
                            )
                        yield event
                        if finished:
                            break  # the run is over; do not wait for the generator's own end
                except asyncio.CancelledError:
                    # ``kill``: the worker ends the program and pulls what it wrote, and the stream goes on
                    # to the exit event that says what (cancelling the stream would lose it).
                    killed = None
                    if handle is not None and gen is not None and not finished:
                        killed = await self._kill_on(handle, gen, workspace_id, slot, request, ctx)
                    if killed is None:
                        raise
                    finished = exited = True
                    yield killed
                    return
                except (RayActorError, WorkerCrashedError, ValueError) as exc:
                    if isinstance(exc, ActorUnavailableError):
                        # Ray restarts the worker in place (it crashed): same handle, a new process that
                        # holds no mirror and no owner handle.
                        self._forget(slot)
                        self._avoided.restarting(slot.name)
                    else:  # dead (or its name already gone: ValueError from the lookup)
                        self._bury(slot)
                    restarting = isinstance(exc, ActorUnavailableError)
                    if restarting and not restart_deadline:
                        restart_deadline = time.monotonic() + RESTART_WAIT
                    if not started and (
                        attempt < DISPATCH_RETRIES or (restarting and time.monotonic() < restart_deadline)
                    ):
                        attempt += 1  # no item came back: nothing reached the workspace, send it again
                        if self._pins.unpin_from(workspace_id, slot.name):  # its live sandbox died with it
                            lost_sandbox = (
                                await self._lost_there(slot.name, f"{slot.name}: {first_line(exc)}")
                                or lost_sandbox
                            )
                        if restarting:
                            await asyncio.sleep(min(0.1 * 2**attempt, 2.0))  # bounded by RESTART_WAIT
                        continue
                    finished = True
                    lost = ""
                    # Its live sandbox died with it (or with a worker an earlier attempt of this run found).
                    if self._pins.unpin_from(workspace_id, slot.name) or lost_sandbox is not None:
                        lost = "; the workspace's live sandbox (its background processes) ended with it, the next run starts a fresh one"
                        lost_sandbox = None  # said here
                    yield ExitEvent(None, error=f"exec worker died: {slot.name} ({first_line(exc)}){lost}")
                    return
                except RayTaskError as exc:
                    finished = True
                    yield ExitEvent(None, error=f"exec worker failed: {first_line(exc)}")
                    return
                except WorkerSilent as exc:
                    # Stopped or wedged: treated as dead for this run (the run is cancelled there, should
                    # it resume). A pinned workspace's live sandbox is out of reach: unpinned.
                    pinned_there = self._pins.unpin_from(workspace_id, slot.name)
                    if not started:  # no item came back: nothing reached the workspace, send it elsewhere
                        attempt += 1
                        if pinned_there:
                            lost_sandbox = SILENT_SANDBOX.format(why=f"{slot.name}: {exc}")
                        silent = True
                    else:
                        finished = True
                        lost = (
                            "; the workspace's live sandbox (its background processes) is out of reach there, "
                            "the next run starts a fresh one"
                            if pinned_there
                            else ""
                        )
                        yield ExitEvent(
                            None,
                            error=f"exec worker {slot.name} stopped answering while this run was on it ({exc}): "
                            "the run was abandoned there, not run again (what it wrote after its last sync is "
                            f"not in the workspace){lost}",
                        )
                        return
                finally:
                    slot.inflight -= 1
                    if not exited and not started:
                        # Nothing reached the workspace there (no item came back), and no exit will say
                        # whether a live sandbox stays: a pin made ahead for this run goes. (A run that
                        # started may have left one: its pin stays, and the next run finds out.)
                        self._pins.give_up_ahead(workspace_id, slot.name)
                    if gen is not None and not finished and not unknown and not requeued:
                        # The consumer stopped (closed or cancelled): the worker must kill the program.
                        with contextlib.suppress(Exception):
                            import ray

                            # (not initialized: a stream faked without Ray, whose ``cancel`` would start or
                            # join whatever cluster runs on the machine)
                            if ray.is_initialized():
                                ray.cancel(gen)
                if finished:
                    self._warm = [slot.name] + [n for n in self._warm if n != slot.name]
                    return
                if unknown:
                    continue  # sent again, with the owner's handle this time
                if silent:
                    if attempt > DISPATCH_RETRIES + REQUEUES_MAX:
                        yield ExitEvent(None, error=f"exec run found {attempt} {self.backend} workers silent")
                        return
                    continue  # to another worker (a silent one only when no other is usable)
                if moved:
                    self.moved += 1
                    self._moved_at[workspace_id] = time.monotonic()
                    continue  # this owner's view has room elsewhere: no need to ask the control loop
                if requeued:
                    self.requeued += 1
                    requeues += 1
                    if requeues > REQUEUES_MAX:
                        yield ExitEvent(
                            None, error=f"exec run handed back {requeues} times by the {self.backend} pool"
                        )
                        return
                    await self._refresh()  # the worker drains or shed its line: see where room is now
                    continue
                yield ExitEvent(None, error=f"exec worker {slot.name} sent no exit")
                return

        finally:
            if lost_sandbox is not None:  # not said: the run ended before a worker ran it
                self._notices.lose(workspace_id, lost_sandbox)


_END: Any = object()  # the end of a run's stream (``_next_item``)


async def _next_item(items: Any) -> Any:
    """The next item of a run's stream (a Ray streaming generator), or :data:`_END`."""
    try:
        ref = await anext(items)
    except StopAsyncIteration:
        return _END
    return await ref


def _scaler_handle() -> Any:
    """The control loop's handle, looked up (or started) once per process (blocking GCS calls)."""
    global _scaler
    if _scaler is None:
        _scaler = get_scaler()
    return _scaler


async def describe_pools(config: Settings) -> None:
    """Learn the descriptions of ``config``'s pools before an owner's constructor needs them (see
    :func:`owner_backends`), awaited: the first owner of a cluster asks a worker, waiting for one to
    start, and a blocking ``ray.get`` there stalled its event loop (Ray warned). An owner host awaits
    this before it opens a workspace; a constructor with no coroutine around it still blocks."""
    import ray

    if not ray.is_initialized():
        return
    for backend in ("shell", "python"):
        if backend in _infos or not enabled(limits_from(config, backend)):
            continue
        try:
            _infos[backend] = await described_async(backend, _scaler_handle)
        except Exception as exc:  # the constructor leaves the pool out and logs why
            _undescribed[backend] = exc


def owner_backends(config: Settings, name: str) -> Sequence[Backend]:
    """The pool backends of the owner of workspace ``name``: shell first (the default), then python.

    A pool with minimum and maximum 0 is left out (a minimum of 0 with a maximum above it scales from
    zero); a pool that cannot start is logged and left out, so the workspace stays usable without it.
    Outside a Ray connection there are no pools.
    """
    import ray

    if not ray.is_initialized():  # a host built outside Ray (tests, scripts): no pools to reach
        return []
    backends: list[Backend] = []
    for backend in ("shell", "python"):
        if not enabled(limits_from(config, backend)):
            continue
        try:
            backends.append(PoolBackend(backend))
        except Exception:
            log.exception("workspace %s: the %s pool is unavailable", name, backend)
    return backends
