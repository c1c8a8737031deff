"""One client's link to an owner actor: calls, streams, and recovery when the owner went away.

Recovery rules (ARCHITECTURE, durable-object emulation):
- the owner answered "moved" (it is hibernating or was taken over and did not run the call): re-resolve
  by name and retry, until a bounded deadline;
- a call to an owner already known dead (an earlier call saw it die) first re-resolves: a client
  heals on any call, reads and writes alike;
- the owner died during the call: an idempotent call is retried after re-resolving (with backoff, for
  up to 30 s). A mutation is sent again only when it provably did not run: the owner that answers is
  the same process (the call carries an idempotency key, so a resend is answered with the first
  reply), Ray's actor table says the owner was dead before the call was sent, or the directory shows
  the owner released its lease itself (it hibernated, running nothing after), or (decided) the call
  was sent to a dedicated owner after it answered "moved" and that owner died for good since: "moved"
  comes from an owner closing (it serves nothing from then on) or fenced by a newer owner (every
  write refused with EROFS, ``exec_start`` answered "moved" unstarted), states that last until its
  process exits; a death while Ray restarts it in place is not covered (a new life could have run
  it), nor an owner host's workspace (the host opens it again in place). Otherwise
  :class:`WorkspaceUnavailableError` (EAGAIN) says "unknown outcome": it may or may not have applied.
- a managed owner that could not start for lack of space (ENOSPC, EDQUOT) is resolved once more: a
  new name then goes to a node with room, if any (``computer/actors/_full_nodes.py``).
Every EAGAIN an owner answers (an upload it lost in a restart, ...) reaches the caller as
``WorkspaceUnavailableError``. Only managed owners (created by ``workspace_actor``) are re-created; a
``WorkspaceHost`` actor of the user's is not ours to re-create.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError, RayActorError, RayError

from ..actors import (
    CONTROL_METHODS,
    STREAM_GROUP_METHODS,
    WAIT_METHODS,
    HostedHandle,
    OutcomeUnknownError,
    WorkspaceUnavailableError,
    open_directory,
    owner_process,
    workspace_actor,
)
from ..actors.raycompat import actor_death_time, actor_id, actor_process, streaming, worker_death_time
from ..actors.wire import Reply, unwrap
from ..config import Settings
from ..storage.errors import fs_error

__all__ = ["Connection", "owner_settings"]

log = logging.getLogger(__name__)

_AHEAD = 4  # stream pieces an owner may produce before the consumer takes them
_MOVED_DEADLINE = 30.0  # seconds to wait for a hibernating owner to exit and a new one to answer
# An owner that died at least this long before a call was sent certainly never received it (Ray's
# actor table records the death in milliseconds, from the GCS's clock).
_DEATH_MARGIN = 0.25
# A wall clock that moved this much more or less than the monotonic one since a call was sent was
# stepped meanwhile (NTP slews at most 0.5 ms a second; a step is ``date -s``, ``ntpdate``, a VM resumed).
# Below _DEATH_MARGIN, which absorbs a step too small to be seen; above a pause between the two reads.
_CLOCK_STEP = 0.2
_SETTINGS_KEPT = 64  # owners' settings remembered per process (one per distinct settings)
# A call still unanswered after PROBE_AFTER seconds makes the client ask whether the owner's process runs
# at all (its actor's ``__ray_ready__``: Ray runs its own ``__ray_*`` methods on the actor's task thread,
# not on the asyncio loop, so an owner whose loop is held by one long storage call answers it; a
# managed owner answers it on a concurrency group of its own, see ``_ping``); one that
# leaves a probe unanswered for PROBE_TIMEOUT (stopped with SIGSTOP, frozen, cut off) fails the call:
# before, a client waited as long as the owner stayed stopped, and so did ``get_workspace``. An owner
# being created or restarted answers no call, probes included, until its constructor ends (an open
# waiting for the file's lock, a migration, a slow process start): Ray's actor table tells it apart,
# and the call keeps waiting (Ray reports a creation that fails), for STARTING_TIMEOUT at most: a
# constructor that never ends (its process stopped with SIGSTOP while it ran, wedged) was waited for
# forever; past that bound the call fails as a silent owner's does, saying the owner never started.
PROBE_AFTER = 5.0
PROBE_TIMEOUT = 30.0
STARTING_TIMEOUT = 300.0
# Ray's states of an actor whose constructor runs (or will): it answers nothing yet, stopped or not.
_STARTING = frozenset({"DEPENDENCIES_UNREADY", "PENDING_CREATION", "RESTARTING"})
_settings_seen: OrderedDict[str, Settings] = OrderedDict()


def owner_settings(values: dict[str, Any]) -> Settings:
    """The :class:`Settings` an owner reported in ``describe`` (every field, as JSON), validated.

    Building ``Settings`` reads the whole environment and every field's sources (~1.5 ms of CPU
    idle, ~20 ms under load on the 2-core machine), and every ``get_workspace`` learns them. Every
    field is given, so the environment cannot change the outcome: the last ``_SETTINGS_KEPT``
    distinct ones are kept per process, and each caller gets its own copy (``model_copy``).
    """
    key = json.dumps(values, sort_keys=True, default=str)
    known = _settings_seen.pop(key, None)
    if known is None:
        known = Settings.model_validate(values)
        while len(_settings_seen) >= _SETTINGS_KEPT:
            _settings_seen.popitem(last=False)
    _settings_seen[key] = known
    return known.model_copy()


class Connection:
    """Calls RPC methods of one workspace's owner and unwraps their replies."""

    def __init__(self, handle: Any, *, name: str | None, managed: bool) -> None:
        self.handle = handle
        self.name = name
        self.managed = managed
        self.epoch = 0
        self.owner_id: str | None = None  # the owner process we last spoke to (from ``describe``)
        self.incarnation: int | None = None  # which life of its Ray actor that process is (``describe``)
        self.worker: str | None = None  # that process's Ray worker id (``describe``)
        self.described_at = 0.0
        self.config: Settings | None = None
        # The concurrency group the owner process answers probes on (``describe``; None: Ray's default).
        self.probe_group: str | None = None
        # The group it serves lock releases, renewals and cancels on (``describe``; None: Ray's default).
        self.control_group: str | None = None
        # The group it serves the calls that wait for others on (``describe``; None: Ray's default).
        self.wait_group: str | None = None
        # The group it serves file streams on (``describe``; None: Ray's default).
        self.stream_group: str | None = None
        self._dead: Any = None  # actor id of a handle a call saw die: re-resolve before the next call
        # Actor id of the dedicated owner that last answered "moved" (closing, or fenced by a newer
        # owner): it runs nothing it is sent after that answer (module docstring).
        self._moved_by: Any = None

    def learn(self, info: dict[str, Any]) -> None:
        """Remember who the owner is (from ``describe``)."""
        self.name = str(info["name"])
        self.managed = bool(info["managed"])
        self.epoch = int(info["epoch"])
        self.owner_id = info.get("owner")
        self.incarnation = info.get("incarnation")
        self.worker = info.get("worker")
        self.described_at = time.time()  # when that process was known alive
        self.probe_group = info.get("probe_group")
        self.control_group = info.get("control_group")
        self.wait_group = info.get("wait_group")
        self.stream_group = info.get("stream_group")
        if info.get("config") is not None:
            try:
                self.config = owner_settings(info["config"])
            except ValueError:  # an owner of another version (a setting this process lacks): keep ours
                log.warning("workspace %s: its owner's settings do not validate here", self.name)

    # -- calls -----------------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        *args: Any,
        retry_safe: bool = False,
        keyed: bool = False,
        waits: bool = False,
        on_cancel: Callable[[Any], None] | None = None,
    ) -> Any:
        """Call ``method`` on the owner and return its value (or raise its error).

        When the caller is cancelled, the owner's side is cancelled too; ``on_cancel`` then receives
        the call's ``ObjectRef`` to undo what the owner may have done before the cancel reached it.
        ``retry_safe``: running it twice changes nothing (reads). ``keyed``: the arguments carry an
        idempotency key, so the same owner process answers a resend with the first reply.
        A lock call that never waits (``CONTROL_METHODS``: a release, renewal, cancel) goes on the
        owner's control group when it has one, so calls waiting in every slot of its default group
        (lock requests) do not hold it up. ``waits``: the call may wait for others (a lock request, a
        run's result, a tool that takes a path lock or runs a command): it goes on the owner's wait
        group when the owner serves ``method`` there (``WAIT_METHODS``), so such calls never take the
        slots of ordinary ones.
        """
        deadline = time.monotonic() + _MOVED_DEADLINE
        died_once = False
        placed_again = False
        while True:
            if self._dead is not None and self.managed and actor_id(self.handle) == self._dead:
                await self._reresolve(self.handle)  # known dead: never send to it
            handle, group = self.handle, self.probe_group  # as one: a group goes only where it was said
            call = getattr(handle, method)
            if self.control_group is not None and method in CONTROL_METHODS:
                call = call.options(concurrency_group=self.control_group)
            elif waits and self.wait_group is not None and method in WAIT_METHODS:
                call = call.options(concurrency_group=self.wait_group)
            sent_at, sent_mono = time.time(), time.monotonic()
            after_moved = self._moved_by is not None and self._moved_by == actor_id(handle)
            ref = call.remote(*args)
            try:
                reply: Reply = await _answer(ref, handle, group)
            except asyncio.CancelledError:
                _cancel(ref)
                if on_cancel is not None:
                    on_cancel(ref)
                raise
            except _Silent as silent:
                _cancel(ref)
                if on_cancel is not None:  # given up as if cancelled: undo what it may yet do there
                    on_cancel(ref)
                detail = silent.detail(method)
                if retry_safe:
                    raise self._unavailable(detail) from None
                raise OutcomeUnknownError(
                    self.name or "?", f"unknown outcome: {detail}; the call may or may not have been applied"
                ) from None
            except RayActorError as exc:
                self._dead = actor_id(handle)
                if getattr(exc, "actor_init_failed", False):
                    # The owner never started (it ran nothing): say why, with the cause's errno.
                    failure = _creation_failure(self.name or "?", exc)
                    if failure.errno in (errno.ENOSPC, errno.EDQUOT) and self.managed and not placed_again:
                        # No room on its node: a new name is placed again once, elsewhere if another
                        # node has room (the failed owner marked its node, computer/actors/_full_nodes.py);
                        # a workspace with a file or a record goes back to it and fails the same way.
                        placed_again = True
                        await self._reresolve(handle)
                        continue
                    raise failure from exc
                if not self.managed:
                    raise self._unavailable(f"its owner died during {method} ({type(exc).__name__})") from exc
                # An idempotent call keeps retrying while Ray restarts the owner (a restart takes
                # longer than one retry); a mutation only when it provably did not run.
                if died_once:
                    await asyncio.sleep(0.1)
                if retry_safe:
                    if time.monotonic() > deadline:
                        raise self._unavailable(
                            f"its owner died during {method} ({type(exc).__name__})"
                        ) from exc
                    died_once = True
                    await self._reresolve(handle)
                    continue
                if after_moved and not isinstance(exc, ActorUnavailableError) and time.monotonic() < deadline:
                    # Sent to a dedicated owner after it answered "moved", and it died for good since (its
                    # exit once closed): it ran nothing (module docstring). Before, a fenced owner,
                    # which keeps no lease to release, made such a call "unknown outcome".
                    await self._reresolve_quietly(handle)
                    continue
                if not died_once and await self._did_not_run(
                    handle, sent_at, keyed=keyed, sent_mono=sent_mono
                ):
                    died_once = True
                    continue
                restarting = isinstance(exc, ActorUnavailableError) and time.monotonic() < deadline
                if keyed and (not died_once or restarting):
                    # The next owner's call journal knows this key: it answers the first reply, runs
                    # the call if it never applied, or says "unknown outcome". Send it once more, and
                    # again while Ray says the owner restarts in place: a client that has not heard of
                    # the restart yet sends to the dead process (a loaded host: seconds), and each try
                    # fails at once, well before the new owner's journal could answer it.
                    died_once = True
                    continue
                await self._reresolve_quietly(handle)
                raise OutcomeUnknownError(
                    self.name or "?",
                    f"unknown outcome: its owner died during {method} ({type(exc).__name__}); "
                    "the call may or may not have been applied",
                ) from exc
            except RayError as exc:
                # Anything else Ray can raise for a call (an object lost, the object store full, a
                # system error): a read is retried within the deadline, never a raw Ray exception.
                if retry_safe and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                    continue
                kind = WorkspaceUnavailableError if retry_safe else OutcomeUnknownError
                prefix = "" if retry_safe else "unknown outcome: "
                raise kind(
                    self.name or "?", f"{prefix}{method} failed in Ray ({type(exc).__name__})"
                ) from exc
            if reply[0] == "moved":
                self._moved(reply, deadline)
                self._moved_by = None if isinstance(handle, HostedHandle) else actor_id(handle)
                await self._reresolve(handle, backoff=True)
                continue
            return self._unwrap(reply)

    def _unwrap(self, reply: Reply) -> Any:
        """``unwrap``, with an owner's EAGAIN (a lost upload, ...) as the documented class."""
        try:
            return unwrap(reply)
        except OSError as err:
            if err.errno == errno.EAGAIN and not isinstance(err, WorkspaceUnavailableError):
                message = err.strerror or str(err)
                kind = OutcomeUnknownError if "unknown outcome" in message else WorkspaceUnavailableError
                raise kind(self.name or "?", message.removeprefix("workspace unavailable: ")) from err
            raise

    async def _did_not_run(
        self, handle: Any, sent_at: float, *, keyed: bool, sent_mono: float | None = None
    ) -> bool:
        """After a call to ``handle`` died: re-resolve, and say whether sending it again is safe.

        It is when the old owner was already dead before the call was sent, when that owner released
        its lease itself (hibernation) before dying, or, for a ``keyed`` call, when the owner that
        answers now is the same process (it remembers the key: a resend gets the first reply).

        An owner (or owner host) restarted in place by Ray is not dead in Ray's actor table, which
        gives no death time then: when the process answering now is the next life of the same actor
        (``incarnation`` one more, so no life came between), the old process's end in Ray's worker
        table (by its pid, from the owner id, and its Ray worker id, ``describe``'s ``worker``, which
        picks its row where the pid is listed more than once) is its death time. Before, such a call sent after the
        death was "unknown outcome" although it never ran.

        ``sent_at``, ``sent_mono``: the wall and monotonic clocks when the call was sent. A death time is the GCS's wall
        clock; when this machine's wall clock was stepped since the send (an NTP step back, ``date -s``),
        a death after the send can be stamped before it: no proof then (decided: a stepped clock makes
        the call "unknown outcome", a keyed one is still sent again, its key answers). Before, a clock
        stepped back 3 s while a run was under way and its owner died made the client send
        ``exec_start`` again: the command ran twice. Nodes' clocks must agree within ``_DEATH_MARGIN``
        (NTP) for a client on another node than the head's: a clock ahead there cannot be seen here.
        """
        before, lived, alive_at, worker = self.owner_id, self.incarnation, self.described_at, self.worker
        died = await asyncio.to_thread(actor_death_time, handle)
        released = await self._released_cleanly(hosted=isinstance(handle, HostedHandle))
        try:
            await self._reresolve(handle)
        except OSError as exc:
            if exc.errno == errno.EBUSY:
                # A deletion holds the workspace (its owner closed for it, then was killed): the call
                # reached an owner serving nothing (a deletion closes only an idle owner, forced: its
                # calls go with the file), so the deletion's "being deleted", not "unknown outcome".
                raise
            return False
        same_actor = actor_id(self.handle) == actor_id(handle)
        same = before is not None and self.owner_id == before and same_actor
        if keyed and same:
            self._dead = None
            return True
        if died is None and same_actor and lived is not None and self.incarnation == lived + 1:
            process = owner_process(before)
            if process is not None:
                died = await asyncio.to_thread(worker_death_time, process[1], alive_at, worker)
        if (
            sent_mono is not None
            and abs((time.time() - sent_at) - (time.monotonic() - sent_mono)) > _CLOCK_STEP
        ):
            died = None  # stepped: the death time and the send are not on one clock any more
        return released or (died is not None and died < sent_at - _DEATH_MARGIN)

    async def _reresolve_quietly(self, stale: Any) -> None:
        """Re-resolve so that the next call goes to the new owner; a failure is the next call's to report."""
        try:
            await self._reresolve(stale)
        except Exception:
            pass

    async def stream(
        self, method: str, *args: Any, retry_safe: bool = True, waits: bool = False
    ) -> AsyncIterator[Any]:
        """Iterate an owner's streaming generator; stopping early (or being cancelled) cancels it.
        ``waits``: as :meth:`request`'s (a run's snapshots, which last as long as the run). A file
        stream goes on the owner's stream group when it has one (``STREAM_GROUP_METHODS``): the owner
        waits there for as long as this consumer is slow, never in a slot of ordinary calls."""
        deadline = time.monotonic() + _MOVED_DEADLINE
        died_once = False
        started = False
        while True:
            handle, group = self.handle, self.probe_group  # as one (see ``request``)
            on = self.wait_group if waits and method in WAIT_METHODS else None
            if method in STREAM_GROUP_METHODS:
                on = self.stream_group
            # Backpressure: the owner runs at most a few pieces ahead of this consumer.
            gen = streaming(getattr(handle, method), _AHEAD, on).remote(*args)
            retry = False
            try:
                pieces = gen.__aiter__()
                while True:
                    try:  # each piece watched as a call is (``PROBE_AFTER``)
                        ref = await _answer(pieces.__anext__(), handle, group)
                    except StopAsyncIteration:
                        break
                    item = await _answer(ref, handle, group)
                    if isinstance(item, tuple):
                        if item[0] == "moved" and not started:
                            self._moved(item, deadline)
                            retry = True
                            break
                        self._unwrap(item)  # an error reply ends the stream by raising
                    started = True
                    yield item
                if not retry:
                    return
            except RayActorError as exc:
                self._dead = actor_id(handle)
                if started or died_once or not self.managed or not retry_safe:
                    raise self._unavailable(f"its owner died during {method} ({type(exc).__name__})") from exc
                died_once = True
            except RayError as exc:  # never a raw Ray exception (an object lost, a system error)
                raise self._unavailable(f"{method} failed in Ray ({type(exc).__name__})") from exc
            except _Silent as silent:
                raise self._unavailable(silent.detail(method)) from None
            finally:
                _cancel(gen)
            await self._reresolve(handle, backoff=retry)

    # -- recovery --------------------------------------------------------------------------------

    def _unavailable(self, detail: str) -> WorkspaceUnavailableError:
        return WorkspaceUnavailableError(self.name or "?", detail)

    def _moved(self, reply: Reply, deadline: float) -> None:
        info = reply[1] or {}
        self.name = self.name or info.get("name")
        if not (self.managed or info.get("managed")) or self.name is None:
            raise self._unavailable("its owner closed it")
        self.managed = True
        if time.monotonic() > deadline:
            raise self._unavailable("its owner did not come back in time")

    async def _released_cleanly(self, *, hosted: bool) -> bool:
        """Whether the owner process we last spoke to gave the workspace's lease up itself, and ran
        nothing of it after (an owner serves nothing once closing, and never closes while serving).

        A dedicated owner serves one epoch: that the epoch we learned was released is the proof. An
        owner host (``hosted``) wakes a workspace it released again in place, on the next call, under a
        new epoch we are not told of (no "moved"): the proof there is that the directory's latest epoch,
        at least the one we learned, was released and by that same host process (the owner id names the
        host and its pid), so nothing woke it there after (a wake takes a new epoch before it runs
        anything). Before, the learned epoch alone decided for hosts too: a call cut by the host's death
        was resent though it may have run under a later epoch (the learned one released long before),
        and one sent after the host released its latest epoch failed "unknown outcome" though it
        provably never ran.
        """
        if self.name is None or self.config is None or not self.epoch:
            return False
        config, name, epoch = self.config, self.name, self.epoch
        process = owner_process(self.owner_id)

        def check() -> bool:
            directory = open_directory(config)
            try:
                record = directory.get(name)
            finally:
                directory.close()
            if record is None:
                return False
            if not hosted:
                return record.released_epoch == epoch
            return (
                process is not None
                and record.released_epoch == record.epoch >= epoch
                and owner_process(record.owner) == process
            )

        return await asyncio.to_thread(check)

    async def _reresolve(self, stale: Any, *, backoff: bool = False) -> None:
        """Find (or re-create) the owner by name, then learn its epoch."""
        if self.name is None:
            raise self._unavailable("its owner is gone and its name is unknown")
        if backoff:
            # The old owner still holds the name while it finishes closing.
            await asyncio.sleep(0.02)
        name, config = self.name, self.config
        self.handle = await asyncio.to_thread(workspace_actor, name, config=config)
        self.probe_group = self.control_group = self.wait_group = self.stream_group = (
            None  # until it says (another process, another version)
        )
        if self._dead is not None and actor_id(self.handle) != self._dead:
            self._dead = None
        try:
            reply: Reply = await _answer(self.handle.describe.remote(), self.handle, None)
        except (RayActorError, _Silent):
            return  # the retried call reports it
        if reply[0] == "ok":
            self.learn(reply[1])
            self._dead = None


_ERRNO = re.compile(r"\[Errno (\d+)\] ([^\n]*)")


def _creation_failure(name: str, exc: BaseException) -> OSError:
    """The error of an owner whose constructor failed: the cause's errno (ENOSPC for a full disk…)
    with its message, else ``WorkspaceUnavailableError`` quoting the cause."""
    text = str(exc)
    found = _ERRNO.findall(text)
    if found:
        code, message = found[-1]
        if int(code) == errno.EAGAIN:  # every EAGAIN of an owner is the documented class
            detail = message.removeprefix("workspace unavailable: ").rsplit(": '", 1)[0]
            return WorkspaceUnavailableError(name, f"its owner could not start: {detail}")
        return fs_error(int(code), name, f"cannot open workspace {name}: {message}")
    last = next((line for line in reversed(text.splitlines()) if line.strip()), text)
    return WorkspaceUnavailableError(name, f"its owner could not start: {last.strip()}")


class _Silent(Exception):
    """The owner's process answered neither a call nor a probe in time (see ``PROBE_TIMEOUT``), or
    its constructor did not end within ``STARTING_TIMEOUT`` (``starting``: how long it was seen so)."""

    def __init__(self, starting: float | None = None) -> None:
        super().__init__(starting)
        self.starting = starting

    def detail(self, method: str) -> str:
        if self.starting is not None:
            return (
                f"its owner's process did not finish starting (its constructor ran {self.starting:.0f} s "
                f"and more) during {method}: stopped or wedged while it opened the workspace"
            )
        return (
            f"its owner did not answer for {PROBE_AFTER + PROBE_TIMEOUT:g} s during {method}, nor "
            "a probe (its process is stopped or wedged)"
        )


async def _answer(ref: Any, handle: Any, group: str | None) -> Any:
    """``await ref``; past ``PROBE_AFTER`` seconds a watch probes the owner's process (on its
    concurrency group ``group``, when it has one) while the call is pending, and ``_Silent`` is raised
    once a probe went unanswered for ``PROBE_TIMEOUT`` (the call itself is not cancelled here). A call
    answered in time costs one timer, nothing more."""
    loop = asyncio.get_running_loop()
    call = _future(ref)
    watch: dict[str, Any] = {"group": group}
    timer = loop.call_later(PROBE_AFTER, _start_watch, call, handle, watch)
    try:
        return await call
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if watch.get("silent") and (current is None or not current.cancelling()):
            raise _Silent(watch.get("starting")) from None  # woken by the watch, not the caller
        raise
    finally:
        timer.cancel()
        task = watch.get("task")
        if task is not None:
            task.cancel()


def _start_watch(call: asyncio.Future[Any], handle: Any, watch: dict[str, Any]) -> None:
    if not call.done():
        watch["task"] = asyncio.ensure_future(_watch(call, handle, watch))


async def _watch(call: asyncio.Future[Any], handle: Any, watch: dict[str, Any]) -> None:
    """Probe the owner's process every ``PROBE_AFTER`` while ``call`` is pending; one probe left
    unanswered ``PROBE_TIMEOUT`` by a running process marks the call silent and wakes its waiter
    (``call`` is this client's own future: cancelling it leaves the call in Ray alone). A process
    being created or restarted is waited for, its probe kept pending, ``STARTING_TIMEOUT`` at most."""
    probe: asyncio.Future[Any] | None = None
    starting_since: float | None = None
    try:
        while not call.done():
            if probe is None:
                probe = _future(_ping(handle, watch["group"]))
            done, _ = await asyncio.wait(
                {call, probe}, timeout=PROBE_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
            )
            if probe in done:
                probe.exception()  # retrieved: a dead owner is the call's to report
                probe = None
                await asyncio.wait({call}, timeout=PROBE_AFTER)
            elif not call.done():
                if await asyncio.to_thread(_starting, handle):
                    now = time.monotonic()
                    starting_since = now if starting_since is None else starting_since
                    if now - starting_since < STARTING_TIMEOUT:
                        continue
                    watch["starting"] = now - starting_since + PROBE_TIMEOUT
                watch["silent"] = True
                call.cancel()
                return
    finally:
        if probe is not None:
            probe.cancel()


def _future(ref: Any) -> asyncio.Future[Any]:
    """An asyncio future of ``ref`` (what ``await ref`` waits on), cancellable without touching the call."""
    as_future = getattr(ref, "as_future", None)
    if as_future is not None:
        future: asyncio.Future[Any] = as_future(_internal=True)
        return future
    return asyncio.ensure_future(_awaited(ref))


async def _awaited(ref: Any) -> Any:
    return await ref


def _ping(handle: Any, group: str | None) -> Any:
    """A no-op call to the process behind ``handle`` (a hosted workspace's host, or the owner actor).

    Ray runs ``__ray_ready__`` on the actor's task thread, not on its asyncio loop (an owner whose
    loop is held by one long storage call answers it), but in a slot of the method's concurrency
    group: a managed owner's (or owner host's) own ``group`` (``_owner.PROBE_GROUP``, reported by
    ``describe``) is free while calls that wait hold every slot of the default one. Only an actor
    created with ``group`` may be sent it (Ray ends a worker sent a group it lacks)."""
    process = handle.host if isinstance(handle, HostedHandle) else handle
    ready = process.__ray_ready__
    if group is not None:
        ready = ready.options(concurrency_group=group)
    return ready.remote()


def _starting(handle: Any) -> bool:
    """Whether Ray's actor table shows the process behind ``handle`` being created or restarted (its
    constructor runs: it answers nothing yet). False when it runs, or when the table cannot be read."""
    process = handle.host if isinstance(handle, HostedHandle) else handle
    try:
        found = actor_process(actor_id(process).hex())
    except Exception:  # not an actor handle Ray knows: nothing to ask
        return False
    return found is not None and found[0] in _STARTING


def _cancel(ref: Any) -> None:
    try:
        ray.cancel(ref)
    except Exception:  # already finished, or its owner is gone: nothing left to stop
        pass
