"""Exec backend pools: each backend runs as a horizontally scaled pool of Ray actors (SPEC sections 6, 9).

:class:`PoolBackend` is a :class:`~computer.runtime.Backend` living in the owner actor: its ``run``
dispatches the request to one worker of the pool (least loaded; the worker that holds this
workspace's warm mirror wins ties), streams the worker's events back as they come, and cancels the
worker's generator when its consumer stops (the worker then kills the process tree). A worker that
dies mid-run gives an ``ExitEvent`` with ``exit_code=None`` and ``"exec worker died: …"``; its run
never reached the pull, so the workspace is unchanged, and the worker is replaced.

:func:`owner_backends` is the hook :mod:`computer.actors._backends` calls when an owner opens its
workspace: ``shell`` then ``python`` (the first is the default backend), sized by the owner's settings.

Decisions: there is no registry actor. Workers have deterministic names (see ``_pool_registry``), and
each owner dispatches on its own view of the load (the runs it has in flight per worker), breaking ties
towards the worker that last ran this workspace (its shell mirror is warm), then towards a "home"
worker hashed from the workspace id, so different workspaces spread over the pool. A run whose worker
dies before the dispatcher saw its first item (output, its exit, or a ``RunStarted`` marker: see
``PoolWorker.run``) left nothing in the workspace and is sent again; after that it is failed.
Workers check every few seconds that the owner of each run is still the same live process, and kill
runs whose owner is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import zlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import Settings
from ..runtime import Backend, ExecContext, ExecEvent, ExecRequest, ExitEvent, SyncLimits, encode_sync
from ..runtime.types import BackendInfo
from ._pool_callbacks import owner_token
from ._pool_context import MirrorSynced, Prefetched
from ._pool_registry import get_worker, worker_name
from ._pool_worker import OwnerUnknown, RunStarted
from .raycompat import actor_id, kv_get, kv_put, streaming

__all__ = ["PoolBackend", "owner_backends"]

log = logging.getLogger(__name__)

# Events a worker may produce ahead of the owner consuming them (each at most 256 KiB of output).
STREAM_AHEAD = 16
# Outcomes of deferred pulls kept per worker (sent with each run, so a mirror of any recent run settles).
OUTCOMES_KEPT = 8
# A prefetched push larger than this is not sent along (the worker asks for it if its mirror needs it).
PREFETCH_MAX_BYTES = 256 * 1024
# A run that did not reach a live worker (it was dead or being replaced) is re-dispatched this often.
DISPATCH_RETRIES = 3
INFO_TIMEOUT = 120.0  # seconds for a new pool's first worker to start and describe itself

_infos: dict[str, BackendInfo] = {}  # per process: a pool describes itself once


@dataclass
class _Slot:
    """This owner's view of one worker: its handle (``None`` until used) and the runs sent to it."""

    index: int
    handle: Any = None
    inflight: int = 0
    dead_id: Any = None  # actor id of the last handle seen dead, so a lookup does not return it again
    introduced: bool = False  # the worker holds this owner's handle (runs are sent without it)
    synced: MirrorSynced | None = None  # where the last run of this workspace left the worker's mirror
    # run id -> (rev, skipped) of the deferred pulls this owner applied for runs on this worker
    outcomes: dict[str, tuple[int, list[str]]] = dataclasses.field(default_factory=dict)


class PoolBackend:
    """The backend ``backend`` (``"shell"``, ``"python"``) served by ``size`` pool workers."""

    def __init__(self, backend: str, size: int, *, owner: Any = None) -> None:
        if size < 1:
            raise ValueError("a pool needs at least one worker")
        self.backend = backend
        self._slots = [_Slot(i) for i in range(size)]
        self._warm: list[int] = []  # workers that ran this owner's workspace, most recent first
        self._owner = owner
        self._token: str | None = None
        self.info: BackendInfo = self._describe()

    @property
    def size(self) -> int:
        return len(self._slots)

    def _describe(self) -> BackendInfo:
        info = _infos.get(self.backend) or _published_info(self.backend)
        if info is not None:
            _infos[self.backend] = info
            return info
        import ray
        from ray.exceptions import RayActorError

        slot = self._slots[0]
        for attempt in range(DISPATCH_RETRIES + 1):
            slot.handle = get_worker(self.backend, 0, not_id=slot.dead_id)
            try:
                # Blocking, once per process: Runtime needs ``info`` when the owner opens its workspace.
                info = ray.get(slot.handle.info.remote(), timeout=INFO_TIMEOUT)
                break
            except RayActorError:  # a worker that just died (its name not yet freed): replace it
                self._bury(slot, slot.handle)
                if attempt == DISPATCH_RETRIES:
                    raise
        assert isinstance(info, BackendInfo)
        _infos[self.backend] = info
        _publish_info(info)
        return info

    def _owner_handle(self) -> Any:
        if self._owner is None:
            import ray

            self._owner = ray.get_runtime_context().current_actor
            self._token = owner_token()  # only the owner's own process can vouch for itself
        return self._owner

    def loads(self) -> list[int]:
        """Runs in flight per worker, as this owner sees them."""
        return [slot.inflight for slot in self._slots]

    def _pick(self, workspace_id: str) -> _Slot:
        """The least-loaded worker; ties go to warm workers, then to the workspace's home worker."""
        n = len(self._slots)
        home = zlib.crc32(workspace_id.encode()) % n
        order = [i for i in self._warm if i < n] + [(home + k) % n for k in range(n)]
        return min((self._slots[i] for i in dict.fromkeys(order)), key=lambda s: s.inflight)

    async def _handle(self, slot: _Slot) -> Any:
        if slot.handle is None:
            slot.handle = await asyncio.to_thread(get_worker, self.backend, slot.index, not_id=slot.dead_id)
        return slot.handle

    def _bury(self, slot: _Slot, handle: Any) -> None:
        """Forget a dead worker; the next dispatch to this slot gets (or creates) its replacement."""
        if slot.handle is handle:
            slot.handle = None
            slot.dead_id = actor_id(handle)
        self._forget(slot)

    def _forget(self, slot: _Slot) -> None:
        """Forget what the worker process held for this owner (it died or restarts)."""
        slot.introduced = False
        slot.synced = None
        slot.outcomes = {}
        if slot.index in self._warm:
            self._warm.remove(slot.index)

    async def _prefetch(self, slot: _Slot, ctx: ExecContext) -> Prefetched | None:
        """The push the worker's mirror will need, computed here ahead of dispatch (saves it a call).

        Only for a small incremental push: a full or large one is left for the worker to ask for, since
        its mirror may have been dropped meanwhile and the bytes would travel for nothing.
        """
        synced = slot.synced
        if synced is None:
            return None
        try:
            push = await ctx.sync_push(synced.rev, synced.root, SyncLimits(**synced.limits))
        except Exception:
            return None
        if push.full or push.more:
            return None
        data = encode_sync(push)
        if len(data) > PREFETCH_MAX_BYTES:
            return None
        return Prefetched(synced, data)

    async def run(self, request: ExecRequest, ctx: ExecContext) -> AsyncIterator[ExecEvent]:
        """Run ``request`` on a pool worker and yield its events as they arrive."""
        from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError, WorkerCrashedError

        workspace_id = ctx.workspace_id
        try:
            owner = self._owner_handle()
        except Exception as exc:
            yield ExitEvent(None, error=f"pool backend {self.backend!r} needs an owner actor: {exc}")
            return
        attempt = 0
        while True:
            slot = self._pick(workspace_id)
            slot.inflight += 1
            handle = None
            gen = None
            started = finished = unknown = False
            try:
                handle = await self._handle(slot)
                prefetched = await self._prefetch(slot, ctx)
                # Without a token (an owner handle given by the caller) the worker could not tell
                # two owners of one workspace id apart: always send the handle then.
                sent = None if slot.introduced and self._token is not None else owner
                gen = streaming(handle.run, STREAM_AHEAD).remote(
                    request, sent, workspace_id, self._token, prefetched, slot.outcomes
                )
                async for ref in gen:
                    event = await ref
                    if isinstance(event, OwnerUnknown):  # a new worker process: nothing ran
                        slot.introduced = False
                        unknown = True
                        break
                    # Any other first item: the run reached a live worker that holds the owner handle.
                    started = slot.introduced = True
                    if isinstance(event, RunStarted):
                        continue
                    if isinstance(event, ExitEvent):
                        finished = True
                        if event.pending is not None:
                            event = await self._apply(slot, request.id, event, ctx)
                    yield event
                    if finished:
                        break  # the run is over; do not wait for the generator's own end
            except (RayActorError, WorkerCrashedError) as exc:
                if isinstance(exc, ActorUnavailableError):
                    # Ray restarts the worker in place (it crashed): same handle, a new process that
                    # holds no mirror and no owner handle.
                    self._forget(slot)
                elif handle is not None:
                    self._bury(slot, handle)
                if not started and attempt < DISPATCH_RETRIES:
                    attempt += 1  # no item came back: nothing reached the workspace, send it again
                    if isinstance(exc, ActorUnavailableError):
                        await asyncio.sleep(0.1 * 2**attempt)  # bounded: 0.2 + 0.4 + 0.8 s
                    continue
                name = worker_name(self.backend, slot.index)
                finished = True
                yield ExitEvent(None, error=f"exec worker died: {name} ({_first_line(exc)})")
                return
            except RayTaskError as exc:
                finished = True
                yield ExitEvent(None, error=f"exec worker failed: {_first_line(exc)}")
                return
            finally:
                slot.inflight -= 1
                if gen is not None and not finished and not unknown:
                    # The consumer stopped (closed or cancelled): the worker must kill the program.
                    with contextlib.suppress(Exception):
                        import ray

                        ray.cancel(gen)
            if finished:
                self._warm = [slot.index] + [i for i in self._warm if i != slot.index]
                return
            if unknown:
                continue  # sent again, with the owner's handle this time
            yield ExitEvent(None, error=f"exec worker {worker_name(self.backend, slot.index)} sent no exit")
            return

    async def _apply(self, slot: _Slot, run: str, event: ExitEvent, ctx: ExecContext) -> ExitEvent:
        """Apply a run's deferred pull here, next to the workspace; the completed exit event."""
        pending = event.pending
        assert pending is not None
        try:
            batch = await ctx.sync_pull(pending.pull, pending.base_rev)
        except Exception as exc:
            # The worker's mirror learns no outcome for this run: its next run there pushes it whole.
            return ExitEvent(None, pushed=event.pushed, error=f"sync failed: {type(exc).__name__}: {exc}")
        slot.outcomes[run] = (batch.rev, list(batch.skipped))
        while len(slot.outcomes) > OUTCOMES_KEPT:
            slot.outcomes.pop(next(iter(slot.outcomes)))
        slot.synced = MirrorSynced(batch.rev, pending.pull.root, pending.limits)
        return dataclasses.replace(
            event,
            pulled=sorted(set(event.pulled) | set(batch.applied)),
            skipped=sorted(set(event.skipped) | set(batch.skipped)),
            skipped_reasons={**event.skipped_reasons, **batch.reasons},
            pending=None,
        )


def _info_key(backend: str) -> bytes:
    return f"computer:pool:info:{backend}".encode()


def _published_info(backend: str) -> BackendInfo | None:
    """The description a pool published in the cluster's key-value store (a GCS read, no actor call).

    Owners read it when they open their workspace: blocking on an actor call there would stall the
    new owner's event loop (and Ray warns about it), so only the very first owner asks a worker.
    """
    try:
        raw = kv_get(_info_key(backend))
    except Exception:
        return None
    if not raw:
        return None
    fields = json.loads(raw)
    fields["commands"] = tuple(fields.get("commands", ()))
    fields["modules"] = tuple(fields.get("modules", ()))
    return BackendInfo(**fields)


def _publish_info(info: BackendInfo) -> None:
    with contextlib.suppress(Exception):
        kv_put(_info_key(info.id), json.dumps(dataclasses.asdict(info)).encode())


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def owner_backends(config: Settings, name: str) -> Sequence[Backend]:
    """The pool backends of the owner of workspace ``name``: shell first (the default), then python.

    A pool whose size is 0 is left out; a pool that cannot start is logged and left out, so the
    workspace stays usable without it. Outside a Ray connection there are no pools.
    """
    import ray

    if not ray.is_initialized():  # a host built outside Ray (tests, scripts): no pools to reach
        return []
    backends: list[Backend] = []
    for backend, size in (("shell", config.shell_pool_size), ("python", config.python_pool_size)):
        if size <= 0:
            continue
        try:
            backends.append(PoolBackend(backend, size))
        except Exception:
            log.exception("workspace %s: the %s pool is unavailable", name, backend)
    return backends
