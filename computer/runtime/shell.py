"""``ShellBackend``: real ``bash`` over a mirror of the workspace, in a sandbox (SPEC section 6).

Each run is one sync bracket: *push* (the mirror catches up with the workspace: only changes since its
revision travel) → *spawn* (bash under :class:`Sandbox`, the mirror bound read-write at the mount
root) → *stream* (output chunks) → *pull* (created/changed/deleted files back in one transaction,
never over protected files nor over files the workspace changed meanwhile).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import os
import secrets
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from ..storage.paths import canonical, is_within
from ._assets_bridge import SANDBOX_DIR, AssetsBridge
from ._backend import (
    ExecContext,
    ExecEvent,
    ExecRequest,
    ExitEvent,
    MirrorFile,
    PendingPull,
    PullResult,
    SyncLimits,
    SyncPush,
)
from ._context import PROTECTED
from ._mirror import Entry, Mirror, MirrorPool, PullPlan
from ._process import ProcessOutcome, stream_process
from ._sandbox import Bind, Sandbox, SandboxLimits, Standby, in_background, run_to_completion
from .types import BackendInfo

__all__ = ["ShellBackend"]

_COMMANDS = (
    "bash",
    "coreutils (ls cat cp mv rm mkdir find xargs sort uniq wc head tail cut tr tee dd du df stat touch chmod ln)",
    "grep",
    "sed",
    "awk",
    "diff",
    "tar",
    "gzip",
    "python3",
    "assets (assets publish <path> [<expiry>]: prints a share URL)",
)


def _default_scratch() -> str:
    """Where mirrors live by default: tmpfs when the machine has a writable one.

    A mirror is a cache of the workspace (the SQLite file is the durable copy), and programs create and
    delete many small files in it; on tmpfs that costs what it costs on a laptop's tmpfs, while a busy
    disk can be 20x slower. ``scratch_dir`` puts mirrors on disk instead.
    """
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return tempfile.gettempdir()


class ShellBackend:
    """Runs ``bash -c source`` in a sandbox over a synced mirror of ``mount_root``."""

    def __init__(
        self,
        *,
        id: str = "shell",
        mount_root: str = "/workspace",
        network: bool = False,
        max_file_bytes: int | None = None,
        max_files: int | None = None,
        max_sync_bytes: int = 64 * 1024 * 1024,
        memory_mb: int | None = 1024,
        max_processes: int | None = 256,
        cpu_seconds: int | None = None,
        scratch_dir: str | None = None,
        mirror_pool: Callable[[Path, str], MirrorPool] | None = None,
        warm_sandboxes: int = 4,
    ) -> None:
        self.mount_root = canonical(mount_root)
        if self.mount_root == "/":
            raise ValueError("mount_root cannot be / (the sandbox needs its own /usr, /tmp…)")
        self.limits = SyncLimits(
            max_file_bytes=max_file_bytes, max_files=max_files, max_sync_bytes=max_sync_bytes
        )
        self.sandbox = Sandbox(
            network=network,
            limits=SandboxLimits(memory_mb=memory_mb, max_processes=max_processes, cpu_seconds=cpu_seconds),
        )
        base = (
            Path(scratch_dir or _default_scratch()) / f"computer-shell-{os.getpid()}-{secrets.token_hex(3)}"
        )
        self.scratch = base
        atexit.register(shutil.rmtree, base, True)
        # ``mirror_pool(base, mount_root)`` builds the pool of warm mirrors (default: a MirrorPool
        # keeping idle mirrors of the 64 most recently used workspaces).
        self._mirrors: MirrorPool = (mirror_pool or MirrorPool)(base, self.mount_root)
        # Standby sandboxes kept for the most recently used mirrors (at most ``warm_sandboxes``).
        self.warm_sandboxes = warm_sandboxes
        self._warm: OrderedDict[_Warm, Mirror] = OrderedDict()
        # At exit the standbys would die with this process (bubblewrap's --die-with-parent), but their
        # cgroups would stay behind: end them first.
        atexit.register(_end_standbys, self._warm)
        startup = self.sandbox.probe_ms()
        self.info = BackendInfo(
            id=id,
            protocol="command",
            callable=False,
            language="bash",
            network=network,
            startup_ms=round(startup, 1),
            commands=_COMMANDS,
            isolation=self.sandbox.isolation,
            description=self._describe(startup, network),
        )

    @property
    def mirrors(self) -> MirrorPool:
        """The pool of warm workspace mirrors (read-only: pass ``mirror_pool`` to choose it)."""
        return self._mirrors

    def _limited(self) -> bool:
        return self.limits.max_file_bytes is not None or self.limits.max_files is not None

    def _describe(self, startup: float, network: bool) -> str:
        return (
            f"Runs a bash command in a sandbox. The workspace's {self.mount_root} appears at "
            f"{self.mount_root} (the default working directory); files created, changed or deleted there "
            f"are saved back to the workspace when the command ends. Anything outside {self.mount_root} "
            "(e.g. /tmp) is private to the run. File contents, modes, mtimes, symlinks, hard links and "
            "empty directories are kept; anything left out (a FIFO, a name that is not UTF-8"
            + (", a file over the backend's size or count limits" if self._limited() else "")
            + ", a file the workspace changed during the command) is listed in the result's skipped "
            "paths with the reason. Available: "
            + ", ".join(_COMMANDS)
            + f". Network: {'on' if network else 'off'}. Startup cost about {startup:.0f} ms per command "
            "plus the sync of changed files. Isolation: " + self.sandbox.isolation + "."
        )

    async def run(self, request: ExecRequest, ctx: ExecContext) -> AsyncIterator[ExecEvent]:
        """One sync bracket: push, spawn, stream, pull; yields output then one ExitEvent."""
        cwd = request.cwd or self.mount_root
        if not is_within(cwd, self.mount_root):
            yield ExitEvent(None, error=f"cwd {cwd} is outside the mount root {self.mount_root}")
            return
        workspace_id = ctx.workspace_id
        mirror = self._mirrors.acquire(workspace_id)
        self._remove_evicted()
        ready: tuple[Standby, Path] | None = None
        clean = False
        defer = bool(getattr(ctx, "defers_pull", False))
        try:
            if mirror.unsettled is not None:
                _settle_deferred(mirror, ctx)
            push, pushed = await self._push(mirror, ctx)
            if mirror.watch is not None:
                mirror.arm()  # drains what the push caused
            else:
                await asyncio.to_thread(mirror.arm)  # a new watch walks the whole tree
            host_cwd = mirror.host(cwd)
            if not host_cwd.is_dir():
                yield ExitEvent(None, pushed=pushed, error=f"cwd {cwd} is not a directory in the workspace")
                clean = True
                return
            spares = mirror.standby
            warm = spares.pop() if isinstance(spares, _Spares) else None
            if warm is not None:
                self._warm.pop(warm, None)  # no longer counted against the cap
                ready = await warm.take()
            if ready is None:
                ready = await self._prepare(mirror)
            standby, bridge_dir = ready
            async with AssetsBridge(ctx, mirror, bridge_dir) as bridge:
                command = ["/bin/bash", "-c", request.source]
                start_cwd = cwd if self.sandbox.bwrap else str(host_cwd)
                env = self._env(request, cwd, bridge_dir)
                try:
                    sp = await standby.start(command, cwd=start_cwd, env=env)
                except BrokenPipeError:  # the standby died while it waited: start a fresh sandbox
                    await standby.discard()
                    ready = await self._prepare(mirror, bridge_dir)
                    sp = await ready[0].start(command, cwd=start_cwd, env=env)
                ready = None
                outcome = ProcessOutcome()
                output = stream_process(sp, outcome, stdin=request.stdin, timeout=request.timeout)
                async with contextlib.aclosing(output):
                    async for chunk in output:
                        yield chunk
            if mirror.quiet():  # the program changed nothing: no thread hop for an empty pull
                plan, now = mirror.plan()
            else:
                plan, now = await asyncio.to_thread(mirror.plan)
            mirror.kept = set(plan.unsyncable)
            left_out = {**{p: mirror.reasons.get(p, PROTECTED) for p in mirror.protected}, **plan.unsyncable}
            if defer and plan.size() <= self.limits.max_sync_bytes:
                # The dispatcher applies the pull; a later run settles the mirror.
                pull = (
                    mirror.read_all(plan) if plan.empty() else await asyncio.to_thread(mirror.read_all, plan)
                )
                pull = dataclasses.replace(pull, own_revs=bridge.own_revs)
                mirror.unsettled = (request.id, now)
                clean = True
                yield ExitEvent(
                    outcome.exit_code,
                    pushed=pushed,
                    pulled=sorted(bridge.saved),
                    skipped=sorted(left_out),
                    skipped_reasons=left_out,
                    killed=outcome.timed_out,
                    pending=PendingPull(pull, push.rev, dataclasses.asdict(self.limits)),
                )
                return
            result = await self._pull(mirror, ctx, plan, now, push.rev, bridge.own_revs)
            skipped = {**result.reasons, **left_out}
            clean = True
            yield ExitEvent(
                outcome.exit_code,
                pushed=pushed,
                pulled=sorted(set(result.applied) | set(bridge.saved)),
                skipped=sorted(skipped),
                skipped_reasons=skipped,
                killed=outcome.timed_out,
            )
        finally:
            if ready is not None:  # prepared but never started (cwd missing, cancelled…)
                await run_to_completion(_discard(*ready))
            if clean:
                if self._mirrors.release(workspace_id, mirror):
                    self._keep_warm(mirror)
                self._remove_evicted()
            else:
                # Interrupted mid-bracket (kill): its content is unknown and a worker thread may still be
                # writing it, so it is never reused; the next run takes a fresh mirror (full push).
                mirror.invalidate()
                await asyncio.to_thread(self._mirrors.discard, mirror)

    async def _push(self, mirror: Mirror, ctx: ExecContext) -> tuple[SyncPush, int]:
        """Bring ``mirror`` to the workspace's current revision, page by page; the first page (whose
        revision the mirror then reflects) and how many files were written.

        A file larger than a page arrives in pieces of at most a page, written in place, so memory
        stays one page whatever the tree holds. A continuation page that is no longer of the same kind
        (the change log was trimmed meanwhile) starts the push over as a full one.
        """
        limits = self.limits
        first: SyncPush | None = None
        pushed = 0
        while True:
            page = await ctx.sync_push(mirror.rev, self.mount_root, limits)
            if first is not None and page.full != first.full:
                mirror.invalidate()
                first, pushed, limits = None, 0, self.limits
                continue
            starting = first is None
            if starting:
                first = page
            if _small(page):  # a thread hop costs more than applying a handful of entries
                pushed += mirror.apply(page, first=starting)
            else:
                pushed += await asyncio.to_thread(mirror.apply, page, first=starting)
            for file in list(mirror.unfilled):
                await self._fill(mirror, ctx, file)
            mirror.unfilled = []
            if not page.more:
                break
            limits = dataclasses.replace(self.limits, after=page.cursor)
        assert first is not None
        mirror.finish_push(first.rev)
        return first, pushed

    async def _fill(self, mirror: Mirror, ctx: ExecContext, file: MirrorFile) -> None:
        """Fetch a large file's bytes in pieces of at most a page, each written in place."""
        piece = max(1 << 20, self.limits.max_sync_bytes)
        offset = 0
        while offset < file.length:
            try:
                data = await ctx.fs_call("read_file", {"path": file.path, "offset": offset, "length": piece})
            except FileNotFoundError:
                return  # removed meanwhile: the next push removes it here too
            await asyncio.to_thread(mirror.fill, file, offset, bytes(data))
            if len(data) < piece:
                return
            offset += len(data)

    async def _pull(
        self,
        mirror: Mirror,
        ctx: ExecContext,
        plan: PullPlan,
        now: dict[str, Entry],
        base_rev: int,
        own_revs: list[int],
    ) -> PullResult:
        """Apply what the run changed, page by page, then settle the mirror on the outcome."""
        applied: list[str] = []
        reasons: dict[str, str] = {}
        own = list(own_revs)  # the assets bridge's saves during the run
        rev = base_rev
        # Nothing changed: the mirror still reflects ``base_rev`` exactly (no round trip needed; claiming
        # more would count a workspace change made during the run as mirrored).
        if not plan.empty():
            pages = mirror.pages(plan, self.limits.max_sync_bytes)
            try:
                while (page := await asyncio.to_thread(next, pages, None)) is not None:
                    result = await ctx.sync_pull(dataclasses.replace(page, own_revs=own), base_rev)
                    own += result.own_revs
                    applied += result.applied
                    reasons.update(result.reasons)
                    rev = result.rev
            finally:
                pages.close()
        if reasons:  # the mirror drops what the pull left alone
            await asyncio.to_thread(mirror.settle, now, rev, list(reasons))
        else:
            mirror.settle(now, rev, ())
        return PullResult(rev, applied, sorted(reasons), reasons, own)

    def _remove_evicted(self) -> None:
        """Remove the idle mirrors the pool's bound pushed out, in a worker thread (each is a tree)."""
        for mirror in self._mirrors.take_evicted():
            in_background(asyncio.to_thread(self._mirrors.discard, mirror), "removing an evicted mirror")

    async def close_workspace(self, workspace_id: str) -> None:
        """The workspace closed: end the standby sandboxes of its idle mirrors (the mirrors stay warm)."""
        ends = []
        for mirror in self._mirrors.idle_mirrors(workspace_id):
            spares = mirror.take_standby()
            if isinstance(spares, _Spares):
                ends += [warm.aclose() for warm in spares.take_all()]
        await asyncio.gather(*ends)

    async def _prepare(self, mirror: Mirror, bridge_dir: Path | None = None) -> tuple[Standby, Path]:
        """A standby sandbox over ``mirror`` (which must exist) with a fresh assets bridge directory."""
        if bridge_dir is None:
            bridge_dir = await asyncio.to_thread(AssetsBridge.make_directory, self.scratch / "run")
        binds = [
            Bind(str(mirror.directory), self.mount_root, writable=True),
            Bind(str(bridge_dir), SANDBOX_DIR),
        ]
        try:
            standby = await self.sandbox.prepare(binds=binds)
        except BaseException:
            AssetsBridge.remove_directory(bridge_dir)
            raise
        return standby, bridge_dir

    async def _prepare_soon(self, mirror: Mirror) -> tuple[Standby, Path]:
        """:meth:`_prepare`, a moment from now: the run that asked for it delivers its result first
        (the spawn's cgroup set-up and fork run on the event loop)."""
        await asyncio.sleep(PREPARE_DELAY)
        return await self._prepare(mirror)

    def _keep_warm(self, mirror: Mirror) -> None:
        """Prepare the next run's sandbox for ``mirror`` in the background (see the class docstring).

        Started once a run is over (a sandbox starting next to a running program slows it down), so a
        run that follows after a pause (an agent's model turn) finds it ready. A mirror whose last run
        found a standby still starting (runs back to back) gets a second one: each run then takes a
        standby started a whole run earlier, while the one started after it gets ready. An idle one
        costs a waiting bash and a bubblewrap process; at most ``warm_sandboxes`` are kept in all.
        """
        if self.warm_sandboxes <= 0 or not mirror.directory.is_dir():
            return
        for gone in [w for w in self._warm if w.closed or w.taken]:  # ended with their mirror
            del self._warm[gone]
        spares = mirror.standby
        if not isinstance(spares, _Spares):
            mirror.drop_standby()
            spares = mirror.standby = _Spares()
        while len(spares.items) < (STANDBYS_BACK_TO_BACK if spares.busy else 1):
            warm = _Warm(asyncio.ensure_future(self._prepare_soon(mirror)))
            spares.items.append(warm)
            self._warm[warm] = mirror
        while len(self._warm) > self.warm_sandboxes:
            oldest, owner = self._warm.popitem(last=False)
            if isinstance(owner.standby, _Spares):
                owner.standby.discard(oldest)
            oldest.close()

    def _env(self, request: ExecRequest, cwd: str, bridge: Path) -> dict[str, str]:
        tools = f"{SANDBOX_DIR}/bin" if self.sandbox.bwrap else str(bridge / "bin")
        env = {
            "PATH": f"/usr/local/bin:/usr/bin:/bin:{tools}",
            "HOME": "/tmp/home" if self.sandbox.bwrap else str(self.scratch),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "TERM": "dumb",
            "USER": "sandbox",
            "PWD": cwd,
            "WORKSPACE": self.mount_root,
            # Bytecode caches would be pulled into the workspace as __pycache__ litter, and Python's
            # (mtime-in-seconds, size) check can run stale bytecode after a same-size edit.
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        env.update(request.env)
        return env


def _small(push: SyncPush) -> bool:
    """A push worth applying without a thread hop: incremental, a few entries, a few KiB."""
    if push.full or len(push.files) + len(push.dirs) + len(push.symlinks) + len(push.deleted) > 8:
        return False
    return sum(f.length for f in push.files) <= 64 * 1024


def _settle_deferred(mirror: Mirror, ctx: ExecContext) -> None:
    """Settle a mirror whose last run deferred its pull, from that pull's outcome; unknown outcome
    (the dispatcher failed to apply it, or restarted): forget the mirror's revision (full push)."""
    assert mirror.unsettled is not None
    run, now = mirror.unsettled
    mirror.unsettled = None
    outcome_of = getattr(ctx, "pull_outcome", None)
    outcome = outcome_of(run) if outcome_of is not None else None
    if outcome is None:
        mirror.rev = None
        return
    rev, skipped = outcome
    mirror.settle(now, rev, skipped)


async def _discard(standby: Standby, bridge_dir: Path) -> None:
    await standby.discard()
    await asyncio.to_thread(AssetsBridge.remove_directory, bridge_dir)


# Seconds between the end of a run and the start of its mirror's next standby.
PREPARE_DELAY = 0.002

# Standbys kept for a mirror whose runs come back to back (one otherwise).
STANDBYS_BACK_TO_BACK = 2


class _Spares:
    """The standby sandboxes prepared for one mirror, oldest first (the mirror's ``standby``)."""

    def __init__(self) -> None:
        self.items: list[_Warm] = []
        # The last run found a standby still starting: runs come back to back.
        self.busy = False

    def pop(self) -> _Warm | None:
        """The standby for the next run: the oldest ready one, else the oldest (or None)."""
        if not self.items:
            return None
        chosen = next((w for w in self.items if w.task.done()), self.items[0])
        self.items.remove(chosen)
        # Back to back while a run finds a standby still starting (the one it takes, or the next).
        self.busy = not all(w.task.done() for w in (chosen, *self.items))
        return chosen

    def discard(self, warm: _Warm) -> None:
        with contextlib.suppress(ValueError):
            self.items.remove(warm)

    def take_all(self) -> list[_Warm]:
        items, self.items = self.items, []
        return items

    def close(self) -> None:
        for warm in self.take_all():
            warm.close()


class _Warm:
    """A standby sandbox being prepared in the background for one mirror's next run.

    Taken once by that run (:meth:`take`); otherwise :meth:`close` ends it, from any thread (a mirror
    may be dropped from a worker thread) and on any event loop state.
    """

    def __init__(self, task: asyncio.Future[tuple[Standby, Path]]) -> None:
        self.task = task
        self.loop = asyncio.get_running_loop()
        self.taken = False
        self.closed = False

    async def take(self) -> tuple[Standby, Path] | None:
        """The prepared sandbox, or None (it failed, died, or belongs to another event loop)."""
        if self.closed or asyncio.get_running_loop() is not self.loop:
            self.close()
            return None
        self.taken = True
        try:
            standby, bridge_dir = await asyncio.shield(self.task)
        except asyncio.CancelledError:
            self.taken = False
            self.close()
            raise
        except Exception:
            return None
        if not standby.usable():
            await run_to_completion(_discard(standby, bridge_dir))
            return None
        return standby, bridge_dir

    def close(self) -> None:
        if self.taken or self.closed:
            return
        self.closed = True
        if self.loop.is_closed():
            self._end_now()
            return
        try:
            self.loop.call_soon_threadsafe(self._end_in_loop)
        except RuntimeError:  # the loop closed meanwhile
            self._end_now()

    async def aclose(self) -> None:
        """End it and wait until it is reaped (in its own event loop)."""
        if self.taken or self.closed:
            return
        if asyncio.get_running_loop() is not self.loop:
            self.close()
            return
        self.closed = True
        await run_to_completion(self._end())

    async def _end(self) -> None:
        try:
            standby, bridge_dir = await self.task
        except BaseException:
            return
        await _discard(standby, bridge_dir)

    def _end_in_loop(self) -> None:
        in_background(self._end(), "ending a standby sandbox")

    def _end_now(self) -> None:
        if self.task.done() and not self.task.cancelled() and self.task.exception() is None:
            standby, bridge_dir = self.task.result()
            standby.discard_now()
            AssetsBridge.remove_directory(bridge_dir)


def _end_standbys(warm: OrderedDict[_Warm, Mirror]) -> None:
    for standby in list(warm):
        if not standby.taken:
            standby.closed = True
            standby._end_now()
