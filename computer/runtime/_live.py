"""``LiveSandbox``: one long-lived sandbox per workspace and backend (SPEC section 10, "Live sandboxes").

The first run of a workspace starts it; later runs execute *inside* it: same mount, same network
namespace, same process tree. Its first program is a small init (``_live_init.py``, a child subreaper
that starts each command in its own process group with the host's pipes as its streams, over a
``SOCK_SEQPACKET`` socket). So

- a process started in the background (``setsid server &``, ``python -m http.server &``) keeps running
  after its call returns, and a later call reaches it (on loopback when the sandbox has no network);
  what it prints after the call returned goes to ``/.computer/output/<exec id>.background.log``
  (the last :data:`BACKGROUND_LOG_BYTES`, read at most at ``BACKGROUND_RATE``: a faster printer waits);
- while any process besides the init runs, the mirror and the workspace are synced both ways every
  :data:`SYNC_INTERVAL` (a write on either side is visible on the other within ~250 ms): the sandbox's
  processes are frozen (cgroup v1 ``freezer``) for the few milliseconds a sync takes, so a pull never
  reads a half-replaced tree and a push never races a program swapping a directory for a symlink. The
  pull's rules are those of a run's pull (a path the workspace changed meanwhile keeps the workspace's
  version; it is reported as skipped by the runs in progress, or with none, a background process's
  change, by the workspace's next run of this backend: ``unreported``, ``_live_parts.from_background``);
  a removal refused only because the path holds what the sandbox never had (a path too long for it:
  ``PROTECTED_BELOW``) stays removed in the sandbox until the next run's push, as per call, so a
  program's ``rm -rf`` is never undone under it (``Mirror.hold``);
- killing a run (or its timeout) kills that run's process group, as Ctrl-C does in a terminal; what it
  wrote is pulled; processes that left the group (``setsid``) keep running;
- limits (memory, processes) are the sandbox's, shared by everything running in it, not per call;
- each call has its own ``cwd`` and ``env`` (the backend's defaults plus the request's); a background
  process keeps those of the call that started it.

It ends after :attr:`idle_end` seconds with no process left besides the init, after :attr:`lifetime`
seconds in all (once no run is in progress), on ``end_sandbox``/``kill_process`` of everything, when
its workspace closes (hibernation) and when its process dies (a worker lost). Ending kills every
process, then pulls what they wrote.

This module is the sandbox (processes, syncs, ticker, end); its init's channel is ``_live_channel``,
its commands ``_live_jobs``, who runs in it ``_live_census``, its start ``_live_launch``, and a
backend's set of them with a run inside one ``_live_set``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._assets_bridge import AssetsBridge
from ._backend import ExecContext
from ._cgroups import ControlFile, freeze, thaw
from ._deliver import Delivery
from ._growing import touched_by
from ._live_census import LiveCensus
from ._live_channel import LiveChannel
from ._live_jobs import LiveJobs, LiveSandboxError, LiveStartError, background_log
from ._live_launch import Launched
from ._live_parts import (
    BackgroundLog,
    Job,
    RunChanges,
    from_background,
    has_changes,
    listed,
    waiting_pids,
)
from ._mapped import MappedFiles, read_only_held
from ._mirror import Mirror
from ._process import SandboxProcess
from ._slirp import network_exit
from ._sync import MirrorSync, Synced
from ._tasks import finish_in_thread, offload
from ._warm import Warm
from .types import ProcessInfo

__all__ = ["SYNC_INTERVAL", "LiveSandbox", "LiveSandboxError", "LiveStartError", "background_log"]

log = logging.getLogger(__name__)

# Seconds between two looks at a busy sandbox (changes on either side). A tick within this of the
# last two-way sync's look (a run's start, another tick) does not sync: it comes again when that look
# is this old (``_tick``), so no change waits longer than before. Before, a tick came at the ticker's own
# pace, at any point of a run: a run of t ms was frozen mid-run for a tick's pull of part of its work
# with a chance of ~t/100 (the live mkdir row's ~33 ms runs: about one in three).
SYNC_INTERVAL = 0.1
# Ticks in a row whose look failed on the init's channel before the sandbox is ended (its processes
# killed, what they wrote pulled; the next run starts a fresh one and says so).
TICK_FAILURES = 30
# Seconds the end waits for a tick's sync in flight before it cancels it.
END_WAIT = 5.0


class LiveSandbox(LiveCensus, LiveChannel, LiveJobs):
    """A running live sandbox of one workspace (see the module docstring). Use :meth:`start`."""

    def __init__(
        self,
        *,
        workspace_id: str,
        mirror: Mirror,
        sync: MirrorSync,
        process: SandboxProcess,
        channel: socket.socket,
        bridge_dir: Path,
        ctx: ExecContext,
        idle_end: float,
        lifetime: float,
        host_ids: tuple[int, int] | None,
    ) -> None:
        self.workspace_id = workspace_id
        self.mirror = mirror
        self.sync_ = sync
        self.process = process
        self.channel = channel
        self.bridge_dir = bridge_dir
        self.ctx = ctx  # the latest run's context (a pool worker's is tied to the owner it came from)
        self.idle_end = idle_end
        self.lifetime = lifetime
        self.host_ids = host_ids
        self.lock = asyncio.Lock()  # syncs, starts and the end, one at a time
        self.loop = asyncio.get_running_loop()
        self.created = time.monotonic()
        self.synced_at = 0.0  # when the last two-way sync looked (``_tick``)
        self.idle_since: float | None = time.monotonic()
        self.jobs: dict[str, Job] = {}
        self.taken: dict[str, Job] = {}  # jobs started ahead that served runs (``LiveJobs.output``)
        self.runs: dict[str, RunChanges] = {}
        # What syncs refused while no run was in progress (a background process's changes): the next
        # run's ``skipped`` (``open_run``), or the next sandbox's when this one ends first.
        self.unreported: dict[str, str] = {}
        self.background: dict[str, BackgroundLog] = {}
        self._requests: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._next_ref = 0
        self.dead: str | None = None  # why the sandbox cannot take runs any more
        self.unsaid: str | None = None  # why it was lost while no run was in progress
        self.kills_at_end = 0  # the memory group's out-of-memory kills when it ended
        self.ended = asyncio.Event()
        self._ending: asyncio.Task[None] | None = None
        self.bridge: AssetsBridge | None = None
        self.pushed = 0  # files the start's push wrote: counted by the first run
        groups = {g.parts[-3]: g for g in process.cgroups if len(g.parts) >= 3}
        self._freezer = groups.get("freezer")
        pids = groups.get("pids")
        self._pids_current = ControlFile(pids / "pids.current") if pids is not None else None
        self._pids_events = ControlFile(pids / "pids.events") if pids is not None else None
        self._pids_group = pids  # its processes: ``procs_of`` (read afresh each time)
        self._base_procs: frozenset[int] = frozenset()  # the init's and bubblewrap's host pids
        self._locked: set[int] = set()  # files a process was seen locking (``read_only_held``)
        memory = groups.get("memory")
        self._oom_control = ControlFile(memory / "memory.oom_control") if memory is not None else None
        self._mapped = MappedFiles(mirror)  # files its processes write through shared mappings
        mirror.readers = self._readers  # a push writes a file they only read as a new one
        mirror.delivery = self._delivery = Delivery()  # a workspace write's time: when it came (``_deliver``)
        self._baseline = 0
        self._ticker: asyncio.Task[None] | None = None
        self._tick_idle = asyncio.Event()  # clear while a tick's sync runs (``_end`` waits for it)
        self._tick_idle.set()
        self._adopted: dict[int, BackgroundLog] = {}  # background processes' pipes -> their logs
        self._stderr: asyncio.Task[None] | None = None
        # What the backend started ahead inside this sandbox (a python guest), ended with it.
        self.spare: Warm[Any] | None = None
        # Called once it ended (its backend forgets it and keeps the mirror warm).
        self.ended_callback: Callable[[LiveSandbox], None] | None = None

    # ------------------------------------------------------------------ start

    @classmethod
    async def start(cls, launched: Launched, **fields: Any) -> LiveSandbox:
        """A live sandbox over the init ``launched`` (see :func:`launch`); ``fields`` are the
        constructor's."""
        sandbox = cls(
            process=launched.process, channel=launched.channel, bridge_dir=launched.bridge_dir, **fields
        )
        sandbox._baseline, sandbox._base_procs = launched.baseline, launched.base_procs
        sandbox.loop.add_reader(launched.channel.fileno(), sandbox._readable)
        sandbox.bridge = AssetsBridge(sandbox.ctx, sandbox.mirror, launched.bridge_dir)
        await sandbox.bridge.__aenter__()
        sandbox._ticker = asyncio.create_task(sandbox._tick())
        sandbox._stderr = asyncio.create_task(sandbox._log_init_stderr())
        network = launched.process.network
        if network is not None:
            network.watch(sandbox._network_ended)
        return sandbox

    def _network_ended(self, code: int) -> None:
        """Its slirp4netns ended (from the reaper's thread): while the sandbox lives, it has lost its
        network for good, so it ends as a lost one (the run in progress, or the next, says why)."""

        def lost() -> None:
            if self.alive and code != 0:
                self._lost(f"its network ended: {network_exit(code)}")

        with contextlib.suppress(RuntimeError):  # its loop closed: nothing left to tell
            self.loop.call_soon_threadsafe(lost)

    async def _log_init_stderr(self) -> None:
        """What the init itself writes (a traceback if it ever crashes) goes to this process's log
        (read, so it never blocks on a full pipe)."""
        stream = self.process.proc.stderr
        if stream is None:
            return
        with contextlib.suppress(Exception):
            while line := await stream.readline():
                log.warning(
                    "live sandbox of %s: init: %s", self.workspace_id, line.decode(errors="replace").rstrip()
                )

    @property
    def alive(self) -> bool:
        return self.dead is None

    # ------------------------------------------------------------------ channel

    def _lost(self, why: str) -> None:
        if self.dead is None:
            self.dead = why
            if not self.runs:  # no run to say so: the workspace's next one does (``LiveSandboxes``)
                self.unsaid = why
            self.kills_at_end = self.oom_kills()  # read while the group is there (see LiveJobs.output)
        with contextlib.suppress(Exception):
            self.loop.remove_reader(self.channel.fileno())
        self._settle()
        if self._ending is None:
            self._ending = asyncio.ensure_future(self._end())

    # ------------------------------------------------------------------ processes

    async def processes(self) -> list[ProcessInfo]:
        rows, more = await self._listing()
        if more:
            log.warning("live sandbox of %s: %s processes left out of a listing", self.workspace_id, more)
        logs = {run: background_log(run) for run, logged in self.background.items() if logged.written}
        return listed(rows, [*self.taken.values(), *self.jobs.values()], logs)

    async def kill_process(self, pid: int, sig: int = signal.SIGKILL) -> None:
        """Signal one process of the sandbox (its own pid); ``ProcessLookupError`` when it has none,
        or when it is a job started ahead, which :meth:`processes` does not list (another sandbox's
        pid that was this one's waiting shell killed that shell)."""
        if int(pid) in waiting_pids(self.jobs.values()):
            raise ProcessLookupError(f"no process {pid} in this sandbox")
        await self._signal(pid, sig)

    # ------------------------------------------------------------------ runs

    def open_run(self, run: str, carried: dict[str, str] | None = None) -> RunChanges:
        """A run in progress: it lists what syncs pull and refuse from now on, and (in ``skipped``)
        the background processes' changes refused since the last run (``carried``: those of the
        workspace's previous sandbox, refused before it ended)."""
        self.idle_since = None
        refused, self.unreported = {**(carried or {}), **self.unreported}, {}
        changes = self.runs[run] = RunChanges(skipped=from_background(refused))
        return changes

    def close_run(self, run: str) -> None:
        self.runs.pop(run, None)
        if not self.runs:
            self.idle_since = time.monotonic()

    # ------------------------------------------------------------------ sync

    async def sync(self, *, push: bool = True, paced: bool = False) -> tuple[Synced | None, int]:
        """One two-way sync (pull what the sandbox changed, then push what the workspace changed),
        with the sandbox frozen while it lasts when anything runs in it. Returns the pull (or None)
        and how many files the push wrote. ``paced``: a tick's (``Mirror.look_again`` may wait)."""
        async with self.lock:
            at = time.monotonic()
            done = await self._sync_locked(push=push, paced=paced)
            if push:  # both ways: what changes after ``at`` on either side is the next one's
                self.synced_at = at
            await self._delivery.commit(self.mirror, self.ctx)  # (thawed: a store commit)
            return done

    async def _sync_locked(self, *, push: bool, paced: bool = False) -> tuple[Synced | None, int]:
        """Look first, pause only for work: a quiet watch and an empty page freeze nothing (a tick
        during ``find`` costs it two cheap looks). An empty page moves the mirror's revision up to
        its own, so later looks read the change log from there (every run's journal records are
        changes outside the root: the scan grew with each run)."""
        mirror, ctx = self.mirror, self.ctx
        at = time.time_ns()
        if not self.stirring():  # no program can have read the workspace: nothing to retime (``_deliver``)
            self._delivery.quiet(at)
        if push and not paced:  # a run's start: what a pull left removed comes back (``Mirror.hold``)
            mirror.restore_held()
        if self._mapped.due <= time.monotonic():  # (``_mapped``: a write through a mapping says nothing)
            await offload(mirror, lambda: self._mapped.look(self._procs(), paced=True))
        page = None
        if mirror.rev is not None and mirror.quiet(paced) and (paced or not mirror.setid_kept()):
            if not push:
                return None, 0
            self._delivery.reading()
            page = await ctx.sync_push(mirror.rev, self.sync_.mount_root, self.sync_.push_limits(mirror))
            if not has_changes(page, mirror):
                if page.rev > mirror.rev:
                    mirror.finish_push(page.rev)
                return None, 0
        freezer = self._freezer if self._freezer is not None and self.stirring() else None
        try:
            if freezer is not None and not await finish_in_thread(functools.partial(freeze, freezer), self):
                if paced:  # a tick's: the next one tries again (this error ended the ticker for good)
                    return None, 0
                raise LiveSandboxError("the live sandbox could not be paused for a sync")
            synced = await self._pull(paced)
            if not paced:  # a run's start or end: the set-id bits the ticks left go (``clear_setid``)
                mirror.clear_setid()
            pushed = 0
            if push:
                if page is None or synced is not None:  # none yet, or the pull moved the mirror on
                    self._delivery.reading()
                    page = await ctx.sync_push(
                        mirror.rev, self.sync_.mount_root, self.sync_.push_limits(mirror)
                    )
                if paced and touched_by(page, [mirror.workspace_path(r) for r in mirror.growing.kept]):
                    mirror.growing.whole = True  # its conflict rules see the program's version (``_growing``)
                    synced = await self._pull(paced) or synced
                    page = await ctx.sync_push(
                        mirror.rev, self.sync_.mount_root, self.sync_.push_limits(mirror)
                    )
                if has_changes(page, mirror) or mirror.rev is None:
                    _, pushed = await self.sync_.push(mirror, ctx, first=page)
            return synced, pushed
        finally:
            if freezer is not None:  # cancelled while it froze too: the freeze ran to its end
                await finish_in_thread(functools.partial(thaw, freezer), self)  # blocks while it forks

    async def _pull(self, paced: bool = False) -> Synced | None:
        """Bring what changed in the mirror to the workspace (nothing to do: None), and tell every
        run in progress (none: what it refused is the next run's, ``unreported``); the sandbox must not
        be running unfrozen (the caller's job)."""
        mirror = self.mirror
        mirror.keep_setid = paced  # a tick leaves a program's set-id bits to the run's end
        if mirror.quiet(paced) or mirror.rev is None:
            return None
        synced = await self.sync_.pull(
            mirror, self.ctx, mirror.rev, "live", self.bridge, defer=False, follow=True, paced=paced
        )
        if self.bridge is not None:  # its saves are in the workspace and the mirror now
            self.bridge.saved.clear()
            self.bridge.own_revs.clear()
        for changes in self.runs.values():
            changes.add(synced)
        if not self.runs:  # a background process's change refused: it has no result of its own
            self.unreported.update(synced.refused)
        return synced

    def _readers(self) -> set[int]:
        """The mirror's files its processes hold for reading only (``_mapped.read_only_held``)."""
        procs, dev, base = self._procs(), self._mapped.dev, self._base_procs
        return read_only_held(procs - base, dev, self._locked) if procs and dev is not None else set()

    async def _tick(self) -> None:
        """While the sandbox lives: sync while anything runs, flush background logs, end when idle."""
        failures = unanswered = 0
        wait = SYNC_INTERVAL
        while self.dead is None:
            await asyncio.sleep(wait)
            if self.dead is not None:
                return
            wait = SYNC_INTERVAL
            now = time.monotonic()
            try:
                busy = await self.busy()
                if busy or self.runs:
                    self.idle_since = None
                elif self.idle_since is None:
                    self.idle_since = now
                # A process that wrote and exited since the last look leaves the mirror changed
                # with nothing running: pull that too (pushes matter only to a running process).
                # A two-way sync looked less than an interval ago (a run's start): this tick comes
                # again when that look is an interval old, so no change waits longer than before.
                since = time.monotonic() - self.synced_at
                early = 0 <= since < SYNC_INTERVAL * 0.98
                if early:
                    wait = SYNC_INTERVAL - since
                elif (busy or not self.mirror.quiet(paced=True)) and not self.lock.locked():
                    self._tick_idle.clear()
                    try:
                        await self.sync(push=busy, paced=True)
                    finally:
                        self._tick_idle.set()
                await self.flush_logs()
                failures = unanswered = 0
            except Exception as exc:  # the workspace unreachable for a moment: try again next tick
                if self.dead is not None:  # ended meanwhile (its init lost): its end is on its way
                    return
                failures += 1
                if failures in (1, 50):
                    log.warning("live sandbox of %s: sync failed: %r", self.workspace_id, exc)
                # The init's channel failed (a reply it could not send, a full channel): tried again
                # too (this error ended the ticker for good), up to a bound: then the sandbox ends.
                unanswered = unanswered + 1 if isinstance(exc, LiveSandboxError) else 0
                if unanswered >= TICK_FAILURES:
                    self._lost(f"its init failed {unanswered} background syncs in a row ({exc})")
                    return
            if not self.runs and (
                (self.idle_since is not None and now - self.idle_since >= self.idle_end)
                or now - self.created >= self.lifetime
            ):
                self.dead = "idle" if self.idle_since is not None else "lifetime reached"
                self._ending = asyncio.ensure_future(self._end())
                return

    # ------------------------------------------------------------------ end

    async def end(self, why: str = "ended") -> None:
        """Kill every process, pull what they wrote, let the mirror go (idempotent; waits for it)."""
        if self.dead is None:
            self.dead = why
        if self._ending is None:
            self._ending = asyncio.ensure_future(self._end())
        await asyncio.shield(self._ending)

    async def _end(self) -> None:
        """The one end of a sandbox, however it comes (``end``, ``abandon``, its init lost, idle or
        lifetime): its tasks stopped, its runs told, its processes killed, then ``_wind_up``.

        From another event loop while its own one is not running (``stranded``: ``abandon``, a close
        after ``asyncio.run``) no task of that loop runs again, so nothing of it is awaited: not a
        tick's sync in flight (it never ends: the wait was ``END_WAIT`` for nothing), not the lock (a
        task of that loop holding it never lets it go: a close hung there for good). A closed loop's
        tasks and futures are left alone: nobody waits on them, and a cancel or a result there raises
        "Event loop is closed" (it stopped this end before its kill)."""
        stranded = self.loop is not asyncio.get_running_loop() and not self.loop.is_running()
        closed = self.loop.is_closed()
        ticker = self._ticker
        if ticker is not None and ticker is not asyncio.current_task():
            if not stranded:
                # A tick's sync in flight ends first (bounded): cancelled, its push went on writing the
                # mirror in its worker thread, unrecorded, and this end's pull took a file it was
                # writing for the sandbox's change (refused, listed by the next run as a background
                # one's lost).
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(END_WAIT):
                        await self._tick_idle.wait()
            if not closed:
                ticker.cancel()
        if self._stderr is not None and not closed:
            self._stderr.cancel()
        with contextlib.suppress(Exception):
            self.loop.remove_reader(self.channel.fileno())
        try:
            if not closed:  # (its runs, and listings and kills in flight: ``_settle``)
                self._settle()
            if self.spare is not None:
                self.spare.close()
                self.spare = None
            async with contextlib.nullcontext() if stranded else self.lock:
                await self.process.kill_tree()
                if stranded:  # a sync of that loop may have taken the watch's events, never to pull them
                    await offload(self.mirror, self.mirror.unwatch)  # (its lane: after that sync's step)
                await self._wind_up()
        finally:  # a failed step must not leave runs waiting for this end (``ENDING_WAIT``)
            self._told_ended()

    async def _wind_up(self) -> None:
        """``_end``'s second half, its processes dead: what they wrote pulled, then their pipes, logs,
        control files, bridge and mirror let go."""
        clean = False
        self.mirror.readers = self.mirror.delivery = None
        try:
            await offload(self.mirror, self._mapped.look, None)  # what they wrote through mappings
            await self._pull()  # the tree is dead: nothing to freeze
            self.mirror.clear_setid()
            clean = True
        except Exception as exc:
            log.warning("live sandbox of %s: the final pull failed: %r", self.workspace_id, exc)
        for fd in list(self._adopted):
            with contextlib.suppress(Exception):
                self.loop.remove_reader(fd)
            with contextlib.suppress(OSError):
                os.close(fd)
        self._adopted.clear()
        with contextlib.suppress(Exception):
            await self.flush_logs(limit=None)
        for control in (self._pids_current, self._pids_events, self._oom_control):
            if control is not None:
                control.close()
        await offload(None, self.process.cleanup)
        self.channel.close()
        if self.bridge is not None:
            with contextlib.suppress(Exception):
                await self.bridge.__aexit__(None, None, None)
        await offload(None, AssetsBridge.remove_directory, self.bridge_dir)
        with contextlib.suppress(Exception):
            await self.sync_.release(self.workspace_id, self.mirror, clean=clean)

    def _told_ended(self) -> None:
        self.ended.set()
        if self.ended_callback is not None:
            self.ended_callback(self)

    async def abandon(self, why: str) -> None:
        """End, from the running event loop, a live sandbox whose own loop has ended (``asyncio.run``
        once per call): ``end`` (a stranded one, see ``_end``), its workspace's next run told why
        (``unsaid``)."""
        self.unsaid = why
        await self.end(why)
