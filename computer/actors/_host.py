"""``WorkspaceHost``: the owner side of the durable-object emulation, as a base for Ray actor classes.

A host opens ``<data_dir>/workspaces/<name>.sqlite`` under a directory lease (its fencing epoch is
passed to storage, so a zombie host can never commit after a newer one opened the file) and serves
the RPC methods that :func:`computer.get_workspace` clients call. Every RPC carries a whole operation
and answers with a :mod:`~computer.actors.wire` reply, never an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import time
import unicodedata
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from ..config import Settings, configure
from ..runtime import offload
from ..storage import TOUCH, FileSystem, audit_caller
from ..workspace import Workspace
from ._backends import owner_backends
from ._calls import CallJournal
from ._delete import hand_to_deletion, in_use
from ._errors import UploadLostError, WorkspaceUnavailableError
from ._full_nodes import note_created, note_refused
from ._init import cluster_settings
from ._lease import forget_failed_creation, holder_gone, owner_file, owner_id
from ._lock_requests import LockRequests
from ._nodes import current_host
from ._pool_callbacks import PoolCallbacks
from ._reserve import DiskReserve
from ._restore import restore_lost_lease
from ._upload import Upload
from .directory import Directory, open_directory
from .naming import check_name, check_new_name, workspace_file
from .raycompat import process_incarnation, process_worker
from .wire import STREAM_CHUNK, Reply, fail, moved, ok

__all__ = ["STREAM_CHUNK", "WorkspaceHost"]

log = logging.getLogger(__name__)

_TOOL_SETS = 16  # run_tool's tool sets kept per owner (one per distinct options)
_REPLIES_KEPT = 4096  # idempotency keys of mutating calls remembered per owner
_REPLIES_TTL = 600.0  # seconds one is remembered

# The fs operations a client may run through ``call``; the read-only ones may be retried after an
# owner restart because running them twice changes nothing.
READ_OPS = frozenset(
    {"read_file", "read_text", "readdir", "stat", "exists", "find", "grep", "ls", "readlink", "realpath"}
)
WRITE_OPS = frozenset({"write_file", "mkdir", "rm", "rename", "copy", "symlink", "link"})


def _actor_id() -> str:
    """This process's Ray actor id (hex), empty outside an actor."""
    import ray

    if not ray.is_initialized():
        return ""
    return str(ray.get_runtime_context().get_actor_id() or "")


def _node_id() -> str:
    import ray

    if ray.is_initialized():
        return str(ray.get_runtime_context().get_node_id())
    return "local"


class WorkspaceHost(PoolCallbacks):
    """Owns workspace ``name``; subclass it in your own ``@ray.remote`` class to serve ``get_workspace``.

    ``self.workspace`` is the owner :class:`~computer.Workspace`. ``config`` defaults to the settings
    of the cluster's last ``computer.init`` (or this process's own); owners created by
    :func:`computer.workspace_actor` receive the caller's explicitly.
    """

    #: Owners created by ``workspace_actor`` are "managed": clients may re-create them by name.
    managed = False
    #: The actor's concurrency group for clients' liveness probes, when it was created with one.
    probe_group: str | None = None
    #: The concurrency group of the lock calls that never wait (``_owner.CONTROL_GROUP``), when it has one.
    control_group: str | None = None
    #: The concurrency group of the calls that wait for others (``_owner.WAIT_GROUP``), when it has one.
    wait_group: str | None = None
    #: The concurrency group of file streams (``_owner.STREAM_GROUP``), when it has one.
    stream_group: str | None = None

    def __init__(self, name: str, *, config: Settings | dict[str, Any] | None = None) -> None:
        if isinstance(config, dict):
            config = Settings(**config)
        elif config is None:
            config = cluster_settings()
        self.config: Settings = self._configure(config)
        self.name = check_name(name)
        self.owner_id = self._new_owner_id()
        self.node_id = _node_id()
        self.host = current_host(self.node_id)
        self._directory: Directory = self._open_directory()
        self._lease_ttl = self.config.lock_lease
        path = workspace_file(self.config, self.name)
        new = not path.exists()
        if new and not unicodedata.is_normalized("NFC", self.name):  # a new workspace's name is NFC
            check_new_name(self.name, self._directory.get(self.name) is not None)  # (naming.py)
        try:
            # A known workspace whose file is not here is an error, never a new empty one (issue 25).
            owner_file(self._directory, self.name, path, host=self.host)
            self._reserve = DiskReserve(path.with_name(path.name + "-reserve"))
            try:
                self._open_store(path)
            except OSError as exc:
                # A full disk: the reserve the last owner kept beside the file is what opening needs (a
                # lease, the fencing epoch, a checkpoint). Before, a workspace whose owner restarted on a
                # full disk could not be opened at all, not even to remove files and free space.
                if exc.errno != errno.ENOSPC or not self._reserve.release():
                    raise
                log.warning(
                    "workspace %s: the disk is full; its reserve was given back to open it", self.name
                )
                self._open_store(path)
        except OSError as exc:
            if new:  # nothing of it was written: leave neither its file nor its record
                forget_failed_creation(self._directory, self.name, self.owner_id, path)
            if new and exc.errno in (errno.ENOSPC, errno.EDQUOT) and not self.config.shared_data_dir:
                # No room here for a new workspace: placement sends new names elsewhere for a while.
                note_refused(self.config, self.node_id)
            raise
        if new and not self.config.shared_data_dir:
            note_created(self.config, self.node_id)  # room here after all: new names may come again
        # Lock tokens carry this owner's epoch: a token is never handed out twice, even across restarts.
        self.workspace.locks.epoch = self.epoch
        self.workspace.locks.gone = holder_gone  # a request whose client died while waiting is dropped
        self._reserve.keep()
        self._closing = False  # set once: every later call is answered MOVED
        self._inflight = 0
        self._rpcs = 0  # RPCs served (calls and streams; not ``stats``), for tests counting round trips
        self._streams = 0
        self._streams_stopped = 0  # streams ended before their last piece (cancelled by the client)
        self._last_active = time.time()  # shown and written to the directory, never decided on
        self._idle_from = (
            time.monotonic()
        )  # what ``hibernate_after`` counts from: a stepped clock moves it not
        self._uploads: dict[str, Upload] = {}
        self._tool_sets: dict[str, dict[str, Any]] = {}  # run_tool's tools, per options
        self._lock_requests = LockRequests()  # lock requests waiting, and those withdrawn
        # Replies of recent mutating calls by idempotency key (a future while the call still runs).
        self._replies: OrderedDict[str, tuple[float, asyncio.Future[Reply]]] = OrderedDict()
        self._background: list[asyncio.Task[Any]] = []
        self._fence_noticed = False  # a refused call found a newer owner: stopping (``_refused_read_only``)
        self._deletion_ttl: float | None = None  # closing for a deletion: its lease's length
        self._deletion_lease: tuple[str, int] | None = None  # and the lease handed to it
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not inside an async actor: nothing to renew in the background
            return
        self._background.append(loop.create_task(self._keep_lease()))

    def _open_store(self, path: Path) -> None:
        """Take the lease and open the workspace file under its epoch (the constructor's main step)."""
        self.epoch = self._directory.acquire_lease(
            self.name, self.node_id, self.owner_id, self._lease_ttl, host=self.host
        )
        calls: CallJournal | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            calls = CallJournal(path.with_name(path.name + "-calls"))
            # A directory that lost its records (a Redis restarted empty) counts epochs from 1 again, but
            # the file keeps the highest it saw and would refuse every write: take leases until ours is higher.
            stored = FileSystem.stored_epoch(str(path))
            while self.epoch <= stored:
                self.owner_id = self._new_owner_id()
                self.epoch = self._directory.acquire_lease(
                    self.name, self.node_id, self.owner_id, self._lease_ttl, host=self.host
                )
            self.workspace = Workspace(
                str(path),
                backends=self._backends(),
                assets=True,
                fence=self.epoch,
                max_bytes=self.config.max_workspace_bytes,
            )
            self._calls = calls
        except BaseException:
            if calls is not None:
                with contextlib.suppress(Exception):
                    calls.close()
            if not path.exists():  # removed meanwhile (a deletion): leave no record naming it
                with contextlib.suppress(Exception):
                    self._directory.remove(self.name, self.owner_id)
            raise

    # -- bookkeeping ------------------------------------------------------------------------------

    def _backends(self) -> Sequence[Any]:
        """The workspace's exec backends (the cluster's pools, when configured)."""
        return owner_backends(self.config, self.name)

    def _configure(self, config: Settings) -> Settings:
        """Make ``config`` the process's settings (the owner's process, and the assets store its
        Workspace opens, must see them): built again from the environment plus ``config``."""
        return configure(**config.model_dump())

    def _open_directory(self) -> Directory:
        """The directory this owner takes, renews and releases its lease in (its own connection)."""
        return open_directory(self.config)

    def _new_owner_id(self) -> str:
        """The id this owner holds the directory lease under (a new one for every lease taken):
        ``<actor id>#<pid>~<place>/<uuid>`` (``_lease.owner_id``), so that ``computer ls`` and
        ``delete_workspace`` can tell this owner's process died (``_lease.owner_process``) instead of
        waiting its lease out."""
        return owner_id(_actor_id())

    @contextlib.contextmanager
    def _activity(self, *, background: bool = False) -> Iterator[None]:
        """One call in progress: the owner does not close under it, and its end counts as use
        (``_last_active``, and ``_idle_from``, what ``hibernate_after`` counts from).

        ``background``: a call a live sandbox makes on its own, the continuous sync that carries its
        processes' writes while no run is in progress. It keeps the owner open while it runs but is
        not use: a workspace whose only activity is a background process (a dev server nobody calls)
        hibernates after ``hibernate_after``, which ends its live sandbox and the process (what it
        wrote is pulled first). The same sync during a run counts, as the run does.
        """
        self._inflight += 1
        try:
            yield
        finally:
            self._inflight -= 1
            if not background or self.workspace.runtime.active() > 0:
                self._last_active, self._idle_from = time.time(), time.monotonic()

    def _busy(self) -> bool:
        """Whether closing now would break something a client is using."""
        if self._inflight or self._streams or self._uploads:
            return True
        if self.workspace.locks.held():
            return True
        # A run without a watching client still counts.
        return self.workspace.runtime.active() > 0

    #: Whether :meth:`_keep_lease` renews the lease; an owner host renews those of all its workspaces
    #: together (one directory write per round) and calls :meth:`_taken_over` for the ones lost.
    renews_own_lease = True

    async def _keep_lease(self) -> None:
        """Renew the directory lease; stop serving once another owner took the workspace over."""
        interval = max(self._lease_ttl / 3.0, 0.05)
        while not self._closing:
            await asyncio.sleep(interval)
            await self._drop_stale_uploads()
            self._reserve.keep()  # made again once space came back after a removal used it
            if not self.renews_own_lease:
                continue
            try:
                kept = await offload(
                    None,
                    self._directory.renew_lease,
                    self.name,
                    self.owner_id,
                    self.epoch,
                    self._lease_ttl,
                    last_active=self._last_active,
                )
            except Exception:
                log.exception("renewing the lease of workspace %s failed", self.name)
                continue
            if not kept and not self._closing and not await self._taken_over():
                return

    async def _taken_over(self) -> bool:
        """The lease renewal failed: another owner holds the workspace now (a higher epoch), unless the
        record was lost (``_restore.py``): then it is written back, and True (the owner serves on)."""
        if self._closing:
            return False  # it released the lease itself meanwhile (hibernation, a close)
        restored = partial(
            restore_lost_lease,
            self._directory,
            self.name,
            workspace_file(self.config, self.name),
            node=self.node_id,
            host=self.host,
            owner_id=self.owner_id,
            epoch=self.epoch,
            ttl=self._lease_ttl,
            last_active=self._last_active,
        )
        try:
            if await offload(None, restored):  # a record lost (Redis emptied), not a takeover
                return True
        except Exception:
            log.exception("restoring the lease of workspace %s failed", self.name)
        if not self._closing:
            log.warning("workspace %s was taken over (epoch %d is stale)", self.name, self.epoch)
            await self._on_fenced()
        return False

    async def _on_fenced(self) -> None:
        """A newer owner holds the lease. A plain host keeps running (storage rejects its writes)."""

    async def _drop_stale_uploads(self) -> None:
        """Abort uploads whose client stopped sending (it died or gave up) long ago."""
        limit = time.monotonic() - 2 * self._lease_ttl
        for upload_id, upload in list(self._uploads.items()):
            if upload.touched < limit:
                del self._uploads[upload_id]
                await upload.abort()

    async def _shutdown(self, *, hibernating: bool) -> None:
        """Stop serving, close the workspace and give the lease up."""
        self._closing = True
        for task in self._background:
            if task is not asyncio.current_task():
                task.cancel()
        for upload in list(self._uploads.values()):
            await upload.abort()
        self._uploads.clear()
        try:
            await self.workspace.close()
            self._calls.close()
        finally:
            if self._deletion_ttl is not None:  # handed to the deletion, never released in between
                self._deletion_lease = await offload(
                    None, hand_to_deletion, self._directory, self.name, self.config, self._deletion_ttl
                )
            else:
                await offload(  # never the loop's pool: in an owner host every workspace's (_hosts.py)
                    None,
                    self._directory.release_lease,
                    self.name,
                    self.owner_id,
                    self.epoch,
                    hibernating=hibernating,
                )

    async def close_workspace(self) -> None:
        """Close the workspace and release the lease (the host then answers every call as moved)."""
        if not self._closing:
            await self._shutdown(hibernating=False)

    async def close_for_deletion(self, force: bool = False, ttl: float = 60.0) -> Reply:
        """``delete_workspace``'s check and close, one step on the owner's loop: ``{"busy": reasons}``
        when a live client holds the workspace (unless ``force``), the owner left open and nothing
        touched; else the owner stops serving in the same step (every later call, a run's start too,
        is answered "moved", never started here), closes, and hands its lease to the deletion (node
        ``deleting``, ``ttl`` seconds, epoch above the file's) instead of releasing it, so no owner can
        open the workspace between this close and the removal: ``{"lease": (owner id, epoch)}``, or
        ``{"lease": None}`` when that failed (the deletion takes it itself). "Moved" when the owner
        was closing already (hibernation, a takeover). Decided in ``computer/actors/README.md``."""
        if self._closing:
            return self._moved()
        reasons = in_use(self._usage())
        if reasons and not force:
            return ok({"busy": reasons})
        self._deletion_ttl = ttl
        self._closing = True  # no await since the check: nothing can have started in between
        await self._close_for_deletion()
        return ok({"lease": self._deletion_lease})

    async def _close_for_deletion(self) -> None:
        await self._shutdown(hibernating=False)

    def _moved(self) -> Reply:
        return moved(self.name, self.managed)

    async def _serve(
        self, work: Callable[[], Awaitable[Any]], *, background: bool = False, closing: bool = False
    ) -> Reply:
        """Run one whole operation as an RPC: moved once closing (``closing``: served until the file
        is closed, then its error), counted as activity (see :meth:`_activity` for ``background``),
        errors as replies."""
        if self._closing and not closing:
            return self._moved()
        self._rpcs += 1
        with self._activity(background=background):
            try:
                return ok(await work())
            except Exception as exc:
                fenced = isinstance(exc, OSError) and exc.errno == errno.EROFS and self._refused_read_only()
                # A client's call to a managed owner, which clients re-resolve (a pool worker's call
                # and a user's ``WorkspaceHost``, never re-created, keep the EROFS).
                if fenced and not closing and self.managed:
                    return self._moved()  # refused by the fence: nothing applied, the next owner runs it
                return fail(exc)

    def _refused_read_only(self) -> bool:
        """A call refused with EROFS: when a newer owner holds the file (a takeover, a deletion), stop
        serving now (later calls get MOVED and re-resolve), not at the next lease renewal; until then
        every write a client sent here was refused with EROFS (seconds under load, after a deletion).
        True when so: the refused call itself is answered "moved" too (before, it failed with EROFS,
        "workspace is owned by a newer owner", a write racing a deletion or a takeover lost)."""
        if self._fence_noticed:
            return True
        if self._closing:
            return False
        try:
            fenced = self.workspace.fs.fenced
        except Exception:  # the store is gone or broken: the lease renewal tells
            return False
        if fenced:
            self._fence_noticed = True
            self._background.append(asyncio.get_running_loop().create_task(self._taken_over()))
        return fenced

    # -- RPC: description ---------------------------------------------------------------------------

    async def describe(self) -> Reply:
        """What a client snapshots at creation: id, backends, assets, and who to re-resolve."""

        async def info() -> dict[str, Any]:
            incarnation = process_incarnation(blocking=False) if self.managed else None
            if incarnation is None and self.managed:  # a restarted process, once: asks the GCS
                incarnation = await asyncio.to_thread(process_incarnation)
            return {
                "id": self.workspace.id,
                "name": self.name,
                "epoch": self.epoch,
                "owner": self.owner_id,
                # Which life of its Ray actor this process is (restarts in place): a client tells a call
                # cut by a restart from one sent after the death (``Connection._did_not_run``).
                "incarnation": incarnation,
                # Its Ray worker id: picks its row in Ray's worker table, where a pid can be listed more
                # than once (``raycompat.death_among``).
                "worker": process_worker() if self.managed else None,
                "managed": self.managed,
                "backends": list(self.workspace.runtime.backends()),
                "has_assets": self.workspace.assets is not None,
                "probe_group": self.probe_group,  # where a client probes this process (None: default)
                "control_group": self.control_group,  # where it sends lock releases (None: default)
                "wait_group": self.wait_group,  # where it waits for locks and runs (None: default)
                "stream_group": self.stream_group,  # where it streams files (None: default)
                # Clients re-create a managed owner with the owner's own settings, not theirs.
                "config": self.config.model_dump(mode="json"),
            }

        return await self._serve(info)

    def _usage(self) -> dict[str, int]:
        """What a live client holds (``_delete.in_use`` reads it: ``delete_workspace`` asks)."""
        return {
            "inflight": self._inflight,
            "streams": self._streams,
            "uploads": len(self._uploads),
            "locks_held": len(self.workspace.locks.held()),
            "runs": self.workspace.runtime.active(),  # executions going
        }

    async def stats(self) -> dict[str, Any]:
        """Internal counters, for tests and the status command."""
        return {
            **self._usage(),
            "name": self.name,
            "epoch": self.epoch,
            "node": self.node_id,
            "host": self.host,
            "rpcs": self._rpcs,
            "locks_waiting": len(getattr(self.workspace.locks, "_waiting", ())),
            "streams_stopped": self._streams_stopped,
            "closing": self._closing,
            "last_active": self._last_active,
            "pid": os.getpid(),
            "rss_bytes": _rss_bytes(),
            # Audit records not written (refused, or a row SQLite refused), each logged when it happened.
            "audit_dropped": self.workspace.audit.dropped,
        }

    # -- RPC: filesystem ----------------------------------------------------------------------------

    async def call(
        self,
        op: str,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        fence: Sequence[Any] = (),
        key: str | None = None,
    ) -> Reply:
        """Run one filesystem operation ``fs.<op>(*args, **kwargs)``.

        ``fence``: the fencing tokens of the locks the caller holds (``(token, paths)``); a mutation is
        refused with ``LockLostError`` (ENOLCK) when one of those leases is gone. ``key``: the
        caller's idempotency key; a call sent again with the same key is answered with the first
        call's reply instead of running twice (see :meth:`_once`).
        """
        if op not in READ_OPS and op not in WRITE_OPS:
            return fail(ValueError(f"unknown filesystem operation {op!r}"))

        async def run() -> Any:
            if op in WRITE_OPS:
                self.workspace.locks.check(fence, _first_path(args))
            method = getattr(self.workspace.fs, op)
            try:
                try:
                    return await method(*args, **(kwargs or {}))
                except OSError as exc:
                    # Freeing space must always be possible: a removal that found the disk full
                    # gets the space held in reserve for it, once.
                    if exc.errno != errno.ENOSPC or op != "rm" or not self._reserve.release():
                        raise
                    return await method(*args, **(kwargs or {}))
            except OSError as exc:
                if exc.filename is None:  # every fs error names its path (a full disk's ENOSPC too)
                    exc.filename = _first_path(args)
                raise

        if key is None or op in READ_OPS:
            return await self._serve(run)
        return await self._once(key, lambda: self._serve(run), _mutated_paths(op, args))

    async def _once(self, key: str, serve: Callable[[], Awaitable[Reply]], paths: list[str]) -> Reply:
        """Run a keyed mutation at most once.

        In this process: a resend (its reply was lost on the way back) gets the first reply, or waits
        for the first attempt still running (the last ``_REPLIES_KEPT`` keys, ``_REPLIES_TTL``
        seconds). Across owner restarts: the call journal beside the file (see
        :class:`~computer.actors._calls.CallJournal`) answers a call resent after its owner died with
        its first reply, runs it if it provably never applied, or says "unknown outcome" (EAGAIN).
        """
        now = time.monotonic()
        while self._replies:
            oldest = next(iter(self._replies.values()))
            if len(self._replies) < _REPLIES_KEPT and oldest[0] > now - _REPLIES_TTL:
                break
            self._replies.popitem(last=False)
        known = self._replies.get(key)
        if known is not None:
            return await asyncio.shield(known[1])
        if self._closing:
            # Not run here: "moved" before it is journalled as started. Before, the next owner found
            # the resend started and, its path written meanwhile by another worker, answered
            # "unknown outcome" for a call that provably never ran.
            return self._moved()
        earlier = self._calls.lookup(key)
        if earlier is not None:
            if "d" in earlier:  # it ran under an earlier owner: its first reply
                kind, value = earlier["d"]
                return (str(kind), tuple(value) if kind == "os" else None)
            rev, started_paths = earlier["p"]
            if self._changed_since(int(rev), list(started_paths)):
                return fail(
                    WorkspaceUnavailableError(
                        self.name,
                        "unknown outcome: this call was running when its owner died and "
                        f"{', '.join(started_paths)} changed since; it may or may not have applied",
                    )
                )
            # It started under an earlier owner and nothing it names changed: it never applied.
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._replies[key] = (now, future)
        self._calls.begin(key, self.workspace.fs.rev, paths)
        try:
            reply = await serve()
        except BaseException as exc:
            # Cancelled (the caller gave up): a resend runs again, as it may not have applied.
            self._replies.pop(key, None)
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody resent
            raise
        if reply[0] != "moved":
            self._calls.done(key, reply)
        if reply[0] == "moved":  # did not run: a resend (to the next owner) must run it
            self._replies.pop(key, None)
        future.set_result(reply)
        return reply

    async def stream(self, path: str, offset: int = 0, length: int | None = None) -> AsyncIterator[Any]:
        """Stream a file as pieces of at most 512 KiB; a failure ends the stream as a reply tuple."""
        if self._closing:
            yield self._moved()
            return
        self._rpcs += 1
        self._streams += 1
        finished = False
        try:
            with self._activity():
                source = self.workspace.fs.stream(path, offset=offset, length=length)
                try:
                    async for piece in source:
                        for start in range(0, len(piece), STREAM_CHUNK):
                            yield bytes(piece[start : start + STREAM_CHUNK])
                except Exception as exc:
                    yield fail(exc)
                finally:
                    aclose = getattr(source, "aclose", None)
                    if aclose is not None:
                        await aclose()
            finished = True
        finally:
            self._streams -= 1
            if not finished:
                self._streams_stopped += 1

    async def upload_begin(self, path: str, mode: int | None = None, fence: Sequence[Any] = ()) -> Reply:
        """Start a chunked write of ``path``; returns the upload id.

        ``fence`` as for :meth:`call`: checked now and again when the upload commits.
        """

        async def begin() -> str:
            self.workspace.locks.check(fence, path)
            upload_id = uuid.uuid4().hex
            self._uploads[upload_id] = Upload(self.workspace.fs, path, mode, fence=list(fence))
            return upload_id

        return await self._serve(begin)

    async def upload_put(self, upload_id: str, piece: bytes) -> Reply:
        """Add one piece; a failed write ends the upload (its error is the reply)."""

        async def put() -> None:
            try:
                await self._upload(upload_id).put(piece)
            except BaseException:
                self._uploads.pop(upload_id, None)
                raise

        return await self._serve(put)

    async def upload_commit(self, upload_id: str) -> Reply:
        """Commit the upload's write (one transaction)."""

        async def commit() -> None:
            upload = self._upload(upload_id)
            del self._uploads[upload_id]
            try:
                self.workspace.locks.check(upload.fence, upload.path)
            except OSError:
                await upload.abort()
                raise
            await upload.commit()

        return await self._serve(commit)

    async def upload_abort(self, upload_id: str) -> Reply:
        async def abort() -> None:
            upload = self._uploads.pop(upload_id, None)
            if upload is not None:
                await upload.abort()

        return await self._serve(abort)

    def _changed_since(self, rev: int, paths: list[str]) -> bool:
        """Whether any of ``paths`` (or an ancestor) changed after ``rev``, or the log cannot tell."""
        for path in paths:
            try:
                changes = self.workspace.fs.changes_since(rev, path)
            except OSError:
                return True
            if not changes.complete or any(c.op != TOUCH for c in changes.changes):
                return True
        return False

    def _upload(self, upload_id: str) -> Upload:
        upload = self._uploads.get(upload_id)
        if upload is None:
            # This owner never began it: a restarted owner (uploads live in memory) or one dropped as
            # stale. Nothing of it was written; EAGAIN, so the client restarts or reports it.
            raise UploadLostError(self.name, f"upload {upload_id} is unknown to this owner (restarted?)")
        return upload

    # -- RPC: locks ---------------------------------------------------------------------------------

    async def lock_acquire(self, holder: str, paths: Sequence[str], subtree: bool = False) -> Reply:
        """Wait for and take a lease on ``paths`` for ``holder``; returns ``(lease_id, ttl, token)``.

        A client gives every acquire its own holder (``<client>#<request>``) so that
        :meth:`lock_cancel` can withdraw exactly that request, waiting or already granted; a resend of
        the request gets its first grant, and one that comes after its withdrawal is refused
        (``_lock_requests.py``).
        """

        async def acquire() -> tuple[str, float, int]:
            return await self._lock_requests.acquire(
                self.workspace.locks, holder, list(paths), subtree, self._lease_ttl
            )

        return await self._serve(acquire)

    async def lock_cancel(self, holder: str) -> Reply:
        """Withdraw the acquire of ``holder``: stop its wait, or release the lease it was granted; an
        acquire of it that comes later (it was still on its way) is refused."""

        async def cancel() -> int:
            return self._lock_requests.withdraw(self.workspace.locks, holder)

        return await self._serve(cancel)

    async def lock_renew(self, lease_id: str) -> Reply:
        return await self._serve(_now(lambda: self.workspace.locks.renew(lease_id, self._lease_ttl)))

    async def lock_release(self, lease_id: str) -> Reply:
        return await self._serve(_now(lambda: self.workspace.locks.release(lease_id)))

    async def lock_release_holder(self, holder: str) -> Reply:
        """Release every lease (and stop every wait) of client ``holder`` and of its requests."""

        async def release() -> int:
            return self._lock_requests.release_client(self.workspace.locks, holder)

        return await self._serve(release)

    # -- RPC: runtime -------------------------------------------------------------------------------

    async def exec_start(
        self, source: str, kwargs: dict[str, Any], wait: float = 0.0, caller: dict[str, str] | None = None
    ) -> Reply:
        """Start an execution; returns ``(id, backend, result)``.

        ``result`` is the :class:`~computer.runtime.ExecResult` when the run ended within ``wait``
        seconds (a short command: the caller's ``result()`` then needs no second round trip), else None.
        ``caller`` names the client in the run's audit record (its task inherits the context).

        On a managed owner's store a newer owner fenced (a takeover; a deletion racing another
        worker's runs) the run is not started and the answer is "moved": the client goes to the newer
        owner. Before, the run failed "cannot start: workspace is owned by a newer owner" (its
        journal's start record refused with EROFS inside the runtime, so the owner did not notice),
        and so did every run sent here until the next lease renewal (``lock_lease`` / 3, 10 s).
        """

        async def start() -> tuple[str, str, Any] | None:
            if self.managed and (self._fence_noticed or self.workspace.fs.fenced):  # a SELECT of the epoch
                self._refused_read_only()
                return None
            with audit_caller(**(caller or {})):
                handle = await self.workspace.runtime.exec(source, **kwargs)
            result = None
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    result = await asyncio.wait_for(asyncio.shield(handle.result()), wait)
            if result is not None and result.status == "failed" and self._refused_read_only():
                # Fenced since the check above (``runtime.exec`` awaits before its journal's start
                # record): a run whose record was refused started nothing (``Runtime.exec``).
                if self.managed and (result.error or "").startswith("cannot start: "):
                    return None
            return handle.id, handle.backend, result

        reply = await self._serve(start)
        return self._moved() if reply == ok(None) else reply

    async def exec_snapshots(self, exec_id: str) -> AsyncIterator[Any]:
        """Stream the snapshots of an execution (the final one last)."""
        if self._closing:
            yield self._moved()
            return
        self._rpcs += 1
        self._streams += 1
        try:
            with self._activity():
                try:
                    handle = await self.workspace.runtime.get_exec(exec_id)
                    async for snapshot in handle:
                        yield snapshot
                except Exception as exc:
                    yield fail(exc)
        finally:
            self._streams -= 1

    async def exec_result(self, exec_id: str) -> Reply:
        async def result() -> Any:
            return await (await self.workspace.runtime.get_exec(exec_id)).result()

        return await self._serve(result)

    async def get_exec(self, exec_id: str) -> Reply:
        async def find() -> tuple[str, str]:
            handle = await self.workspace.runtime.get_exec(exec_id)
            return handle.id, handle.backend

        return await self._serve(find)

    async def kill_exec(self, exec_id: str) -> Reply:
        return await self._serve(lambda: self.workspace.runtime.kill_exec(exec_id))

    async def dispose_exec(self, exec_id: str) -> Reply:
        return await self._serve(lambda: self.workspace.runtime.dispose_exec(exec_id))

    # -- RPC: live sandboxes (SPEC section 10) ----------------------------------------------------

    async def live_processes(self, backend: str | None = None) -> Reply:
        return await self._serve(lambda: self.workspace.runtime.processes(backend=backend))

    async def kill_process(self, pid: int, backend: str | None = None) -> Reply:
        return await self._serve(lambda: self.workspace.runtime.kill_process(pid, backend=backend))

    async def end_sandbox(self, backend: str | None = None) -> Reply:
        return await self._serve(lambda: self.workspace.runtime.end_sandbox(backend=backend))

    # -- RPC: tools ----------------------------------------------------------------------------------

    async def run_tool(
        self,
        name: str,
        args: dict[str, Any],
        options: dict[str, Any] | None = None,
        caller: dict[str, str] | None = None,
    ) -> Reply:
        """Run one agent tool whole, next to the file: one round trip for the caller.

        ``options`` are :func:`computer.tools.create_tools` keywords; the result is the tool's result
        dict (a failed call is ``{"error": ...}``, as from any tool). ``caller`` (client, agent,
        adapter) goes into the call's audit record, written here.
        """

        async def run() -> dict[str, Any]:
            tool = self._tools(options).get(name)
            if tool is None:
                return {"error": f"unknown tool {name!r}"}
            with audit_caller(**(caller or {})):
                result: dict[str, Any] = await tool.run(args)
            return result

        return await self._serve(run)

    def _tools(self, options: dict[str, Any] | None) -> dict[str, Any]:
        from ..tools import create_tools

        # Building a tool set costs ~3 ms (schemas), more than a round trip: keep one per options,
        # the most recently used few (clients send plain dicts, ``None`` for all defaults).
        key = json.dumps(options or {}, sort_keys=True, default=repr)
        tools = self._tool_sets.pop(key, None)
        if tools is None:
            owner: Any = self.workspace  # the owner object serves the same surface as a client
            tools = create_tools(owner, **(options or {}))
            while len(self._tool_sets) >= _TOOL_SETS:
                del self._tool_sets[next(iter(self._tool_sets))]
        self._tool_sets[key] = tools
        return tools

    # -- RPC: audit log (SPEC 10) ---------------------------------------------------------------------
    # Reading the log is not activity: a watched idle workspace still hibernates.

    async def _read_audit(self, read: Callable[[], Any]) -> Reply:
        if self._closing:
            return self._moved()
        try:
            return ok(read())
        except Exception as exc:
            return fail(exc)

    async def audit_query(self, filters: dict[str, Any]) -> Reply:
        """``workspace.audit.query(**filters)`` as JSON-ready dicts."""
        return await self._read_audit(lambda: [r.to_json() for r in self.workspace.audit.read(**filters)])

    async def audit_top(self) -> Reply:
        """The id of the newest audit record (where a client's ``follow`` starts)."""
        return await self._read_audit(self.workspace.audit.top)

    async def audit_page(self, filters: dict[str, Any]) -> Reply:
        """One page of a client's ``follow``: ``{"records": [...], "top": id to resume after}``."""

        def page() -> dict[str, Any]:
            records, top = self.workspace.audit.page(**filters)
            return {"records": [r.to_json() for r in records], "top": top}

        return await self._read_audit(page)

    async def audit_record(self, entry: dict[str, Any]) -> Reply:
        """Record a tool call a client ran itself (exec, publish, a call rejected before any I/O)."""
        return await self._read_audit(lambda: self.workspace.audit.record(**entry))

    # -- RPC: assets --------------------------------------------------------------------------------

    async def assets_share(
        self, path: str, kwargs: dict[str, Any], caller: dict[str, str] | None = None
    ) -> Reply:
        async def share() -> str:
            if self.workspace.assets is None:
                raise LookupError(f"workspace {self.name} has no assets publisher")
            with audit_caller(**(caller or {})):  # the link's audit record names the client
                return await self.workspace.assets.share(path, **kwargs)

        return await self._serve(share)


def _mutated_paths(op: str, args: Sequence[Any]) -> list[str]:
    """The paths a mutation changes (a symlink's target and a hard link's existing name are not)."""
    named = [a for a in args[:2] if isinstance(a, str)]
    if op in ("rename", "copy"):
        return named[:2]
    if op in ("symlink", "link"):
        return named[1:2]
    return named[:1]


def _first_path(args: Sequence[Any]) -> str | None:
    """The path a mutation names first (for the error of a refused write)."""
    return args[0] if args and isinstance(args[0], str) else None


def _now(fn: Callable[[], Any]) -> Callable[[], Awaitable[Any]]:
    """Wrap a synchronous operation for :meth:`WorkspaceHost._serve`."""

    async def run() -> Any:
        return fn()

    return run


def _rss_bytes() -> int | None:
    """Resident memory of this process (Linux), for the status command and benchmarks."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
