"""The fast paths of a pooled run, one explicit piece each (drawn in ``computer/actors/README.md``,
"A pooled run, message by message"; the owner RPCs each one saves are counted in
``tests/pools/test_round_trips.py``).

- :class:`RunOrder`: everything a dispatcher (the owner's ``PoolBackend``) sends a worker with one run.
- *The owner's handle once per worker*: ``RunOrder.owner`` is None when this owner already sent it to
  that worker (:attr:`WorkerMemory.introduced`); the worker keeps the handles it was sent
  (``PoolWorker``'s ``OwnerHandles``) and answers ``OwnerUnknown`` when it has none (a new process).
- *The prefetched push*: the dispatcher remembers where the last run left the worker's mirror
  (:attr:`WorkerMemory.synced`) and sends the push that mirror needs (:class:`Prefetched`); the
  worker's :class:`OwnerExecContext` answers the run's first ``sync_push`` with it when the mirror is
  at exactly that revision, else asks the owner.
- *Deferred pulls*: a run sent with ``RunOrder.outcomes`` gets a :class:`DeferringOwnerContext` (a
  :class:`~computer.runtime.DeferringContext`): the backend hands its pull to the dispatcher in its
  exit event (``ExitEvent.pending``) instead of calling ``sync_pull``; the dispatcher applies it next
  to the SQLite file and sends its outcome with the next runs (:attr:`WorkerMemory.outcomes`, the last
  :data:`OUTCOMES_KEPT`), from which the worker settles the mirror. Live sandboxes sync while they
  run and do not defer (their exit event says where the mirror stands: ``ExitEvent.synced_to``).
- *Calls held until the run is announced*: an ``OwnerExecContext`` made with ``announced=False``
  holds every call back to the owner until the dispatcher saw the run's first item (``RunStarted``
  or the run's own first event; see ``PoolWorker.run``), and sets :attr:`~OwnerExecContext.wanted`
  meanwhile so that the worker announces the run at once.

fs errors come back as the owner raised them (same class, errno, path).
"""

from __future__ import annotations

import asyncio
import dataclasses
import pickle
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..runtime import (
    DeferringContext,
    ExecContext,
    ExecRequest,
    ExitEvent,
    PullResult,
    SyncLimits,
    SyncPull,
    SyncPush,
    decode_sync,
    encode_sync,
    offload,
)
from .wire import Reply, unwrap

LARGE_ARGUMENT = 1 << 20  # bytes of an owner call's arguments handed to Ray off the loop (``_call``)
OUT_OF_BAND = 16 * 1024  # bytes of one argument (or piece) of such a call sent out of band (``boxed``)


def boxed(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` with each byte string of ``OUT_OF_BAND`` or more (an argument, a dict's value, a piece
    of a list) as a ``pickle.PickleBuffer``: Ray sends such a buffer out of band, and the owner gets
    it as a read-only view of the object store's memory (``unboxed``), not unpickled into new bytes:
    a guest's 60 MiB write (1,920 pieces of 32 KiB) was ~35-40 ms (90-140 under load) of the owner
    host's loop in one step, Ray copying the argument while every workspace of the host waited (now
    2-8 ms under load, a view a piece; the store reads them a MiB a turn, ``checked_call``). Ray's
    unpickling in a thread instead would not help: it holds the GIL all the while."""

    def box(value: Any) -> Any:
        if isinstance(value, bytes | bytearray) and len(value) >= OUT_OF_BAND:
            return pickle.PickleBuffer(value)
        if isinstance(value, list) and any(isinstance(v, bytes | bytearray) for v in value):
            return [box(v) for v in value]
        return value

    return tuple({k: box(v) for k, v in arg.items()} if isinstance(arg, dict) else box(arg) for arg in args)


def _payload(args: tuple[Any, ...]) -> int:
    """About the bytes an owner call carries as byte or text strings (its arguments, their dict
    values, a list of pieces: a guest's large write comes so)."""
    size = 0
    for arg in args:
        for value in arg.values() if isinstance(arg, dict) else (arg,):
            if isinstance(value, str):
                size += len(value)
            elif isinstance(value, bytes | bytearray | memoryview):
                size += value.nbytes if isinstance(value, memoryview) else len(value)
            elif isinstance(value, list | tuple) and value and isinstance(value[0], bytes | bytearray):
                size += sum(len(v) for v in value if isinstance(v, bytes | bytearray))
    return size


__all__ = [
    "OUTCOMES_KEPT",
    "DeferringOwnerContext",
    "MirrorSynced",
    "OwnerClosingError",
    "OwnerExecContext",
    "Prefetched",
    "RunOrder",
    "WorkerMemory",
    "owner_context",
]

# Outcomes of deferred pulls a dispatcher keeps per worker (sent with each run, so a mirror of any
# recent run settles).
OUTCOMES_KEPT = 8
# A prefetched push larger than this is not sent along (the worker asks for it if its mirror needs it).
PREFETCH_MAX_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class MirrorSynced:
    """Where a run left its worker's mirror: at ``rev`` of the workspace below ``root``, under ``limits``."""

    rev: int
    root: str
    limits: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Prefetched:
    """A push the owner computed ahead: what a mirror at ``mirror`` needs, encoded."""

    mirror: MirrorSynced
    push: bytes


@dataclass(frozen=True, slots=True)
class RunOrder:
    """One run as a dispatcher sends it to a pool worker (the argument of ``PoolWorker.run``)."""

    request: ExecRequest
    workspace_id: str
    # The owner's actor handle; None when this owner sent it to this worker before (a handle argument
    # costs a call about 0.3 ms). Without ``owner_token`` the handle is always sent.
    owner: Any = None
    owner_token: str | None = None  # which owner process sends the run (a restarted one has another)
    prefetched: Prefetched | None = None  # the push the worker's mirror needs, computed ahead
    # Outcomes (run id -> (rev, skipped)) of the deferred pulls of this workspace's earlier runs on
    # this worker that the owner applied; given (even empty), the run defers its own pull.
    outcomes: dict[str, tuple[int, list[str]]] | None = None
    movable: bool = False  # the dispatcher has room elsewhere: a run pinned here may move (see the worker)


@dataclass
class WorkerMemory:
    """What a dispatcher remembers of one worker for its workspace: the dispatcher's half of the fast
    paths. Forgotten (:meth:`forget`) when the worker's process dies or restarts."""

    introduced: bool = False  # the worker holds this owner's handle: runs go without it
    synced: MirrorSynced | None = None  # where the last run of the workspace left the worker's mirror
    outcomes: dict[str, tuple[int, list[str]]] = field(default_factory=dict)  # deferred pulls applied

    def forget(self) -> None:
        self.introduced = False
        self.synced = None
        self.outcomes = {}

    def order(
        self,
        request: ExecRequest,
        workspace_id: str,
        owner: Any,
        token: str | None,
        prefetched: Prefetched | None,
        movable: bool,
    ) -> RunOrder:
        sent = None if self.introduced and token is not None else owner
        return RunOrder(request, workspace_id, sent, token, prefetched, dict(self.outcomes), movable)

    async def prefetch(self, ctx: ExecContext) -> Prefetched | None:
        """The push the worker's mirror will need, computed by the owner (``ctx``: its own context)
        ahead of dispatch: it saves the run a call. Only a small incremental push: a full or large one
        is left for the worker to ask for (its mirror may have been dropped meanwhile)."""
        synced = self.synced
        if synced is None:
            return None
        try:
            push = await ctx.sync_push(synced.rev, synced.root, SyncLimits(**synced.limits))
        except Exception:
            return None
        if push.full or push.more:
            return None
        data = encode_sync(push)
        return Prefetched(synced, data) if len(data) <= PREFETCH_MAX_BYTES else None

    async def apply(self, run: str, event: ExitEvent, ctx: ExecContext) -> ExitEvent:
        """Apply ``run``'s deferred pull (``event.pending``) next to the workspace (``ctx``: the owner's
        own context); the completed exit event. Its outcome goes to the worker with the next runs."""
        pending = event.pending
        assert pending is not None
        try:
            batch = await ctx.sync_pull(pending.pull, pending.base_rev)
        except Exception as exc:
            # The worker's mirror learns no outcome for this run: its next run there pushes it whole.
            return ExitEvent(None, pushed=event.pushed, error=f"sync failed: {type(exc).__name__}: {exc}")
        self.applied(run, pending.pull.root, pending.limits, batch)
        return dataclasses.replace(
            event,
            pulled=sorted(set(event.pulled) | set(batch.applied)),
            skipped=sorted(set(event.skipped) | set(batch.skipped)),
            skipped_reasons={**event.skipped_reasons, **batch.reasons},
            pending=None,
        )

    def ended_live(self, event: ExitEvent) -> None:
        """A run left its live sandbox (and mirror) at ``event.synced_to``: prefetch the next push from it."""
        if event.synced_to is not None:
            self.synced = MirrorSynced(*event.synced_to)

    def applied(self, run: str, pending_root: str, limits: dict[str, Any], result: PullResult) -> None:
        """The owner applied ``run``'s deferred pull: the worker learns it with the next run."""
        self.outcomes[run] = (result.rev, list(result.skipped))
        while len(self.outcomes) > OUTCOMES_KEPT:
            self.outcomes.pop(next(iter(self.outcomes)))
        self.synced = MirrorSynced(result.rev, pending_root, limits)


class OwnerClosingError(RuntimeError):
    """The owner is closing (hibernating or taken over) and did not run the operation."""


class OwnerExecContext:
    """Forwards a backend's workspace calls to ``owner`` (an owner actor handle)."""

    def __init__(
        self,
        owner: Any,
        workspace_id: str,
        prefetched: Prefetched | None = None,
        *,
        announced: bool = True,
    ) -> None:
        self._owner = owner
        # Calls wait until the run was announced to the dispatcher (see ``PoolWorker.run``); a call
        # that waits sets ``wanted``, which makes the worker announce the run.
        self._announced = asyncio.Event()
        self.wanted = asyncio.Event()
        if announced:
            self._announced.set()
        self._workspace_id = workspace_id
        self._prefetched = prefetched
        self.prefetch_used = False
        self.calls: Counter[str] = Counter()  # calls made back to the owner, by owner RPC
        # The run's pushes (the worker's move cost learns from them: ``_pool_moves``): seconds in push
        # calls to the owner (not counting the wait for the announcement), bytes, whether one was whole.
        self.push_seconds = 0.0
        self.push_bytes = 0
        self.full_push = False

    @property
    def workspace_id(self) -> str:
        return self._workspace_id

    @property
    def announced(self) -> bool:
        return self._announced.is_set()

    def announce(self) -> None:
        """The dispatcher was told the run started: calls to the owner may go out now."""
        self._announced.set()

    async def _call(self, method: str, *args: Any) -> Any:
        if not self._announced.is_set():
            self.wanted.set()
            await self._announced.wait()
        self.calls[method] += 1
        began = time.perf_counter()
        remote = getattr(self._owner, method).remote
        if _payload(args) > LARGE_ARGUMENT:
            # Ray serialises the arguments in ``.remote()``: a guest's 60 MiB write held the worker's
            # loop (every sandbox of the worker) 190-470 ms in that one step; a lane's thread does it.
            # Its byte strings go out of band: the owner's loop does not copy them (``boxed``).
            reply: Reply = await (await offload(self, remote, *boxed(args)))
        else:
            reply = await remote(*args)
        if method == "pool_sync_push":
            self.push_seconds += time.perf_counter() - began
        if reply[0] == "moved":
            raise OwnerClosingError(f"the owner of workspace {reply[1]['name']} is closing")
        return unwrap(reply)

    async def fs_call(self, op: str, args: dict[str, Any]) -> Any:
        return await self._call("pool_fs_call", op, args)

    async def sync_push(self, mirror_rev: int | None, root: str, limits: SyncLimits) -> SyncPush:
        wanted = dataclasses.asdict(limits)
        ahead, self._prefetched = self._prefetched, None  # good for the first push only
        if (
            ahead is not None
            and mirror_rev is not None
            and ahead.mirror == MirrorSynced(mirror_rev, root, wanted)
        ):
            self.prefetch_used = True
            self.push_bytes += len(ahead.push)
            return decode_sync(SyncPush, ahead.push)
        data = await self._call("pool_sync_push", mirror_rev, root, wanted)
        push = decode_sync(SyncPush, data)
        self.push_bytes += len(data)
        self.full_push = self.full_push or push.full
        return push

    async def sync_pull(self, pull: SyncPull, base_rev: int) -> PullResult:
        result: PullResult = await self._call("pool_sync_pull", encode_sync(pull), base_rev)
        return result

    async def share(self, path: str, expires_after: float) -> str:
        return str(await self._call("pool_share", path, expires_after))


class DeferringOwnerContext(OwnerExecContext, DeferringContext):
    """An :class:`OwnerExecContext` whose runs hand their pull to the dispatcher in their exit event
    (:class:`~computer.runtime.DeferringContext`); ``outcomes``: how the dispatcher applied the pulls
    of this workspace's earlier runs on this worker, run id -> (rev, skipped)."""

    defers_pull = True

    def __init__(
        self,
        owner: Any,
        workspace_id: str,
        prefetched: Prefetched | None = None,
        outcomes: dict[str, tuple[int, list[str]]] | None = None,
        *,
        announced: bool = True,
    ) -> None:
        super().__init__(owner, workspace_id, prefetched, announced=announced)
        self._outcomes = dict(outcomes or {})

    def pull_outcome(self, run: str) -> tuple[int, list[str]] | None:
        return self._outcomes.get(run)


def owner_context(order: RunOrder, owner: Any, *, announced: bool = True) -> OwnerExecContext:
    """The context of one ordered run: deferring its pull when the order carries outcomes."""
    if order.outcomes is None:
        return OwnerExecContext(owner, order.workspace_id, order.prefetched, announced=announced)
    return DeferringOwnerContext(
        owner, order.workspace_id, order.prefetched, order.outcomes, announced=announced
    )
