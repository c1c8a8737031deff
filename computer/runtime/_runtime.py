"""``Runtime``: the exec router of one workspace (SPEC section 6).

It selects a backend, hands it an :class:`ExecRequest` and an :class:`ExecContext`, and does the
rest centrally for every backend: output tails and saved logs, coalesced snapshots, statuses, the
journal, kill and timeout backstops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from ..storage import QuotaError
from ..storage.paths import canonical
from ._backend import Backend, ExecContext, ExecRequest, ExitEvent, LiveBackend, OutputChunk
from ._capture import StreamCapture
from ._context import LocalExecContext
from ._handle import LOOP_ENDED, ExecHandle, ExecRun
from ._journal import ExecJournal, result_from_record
from ._options import OutputOptions, check_env, check_input, check_source
from ._settle import Settling
from .types import BackendInfo, ExecResult, ExecSnapshot, ProcessInfo

__all__ = ["Runtime"]

log = logging.getLogger(__name__)

SNAPSHOT_INTERVAL = 0.1  # seconds: at most one snapshot per interval while output flows
# A backend that does not honour its timeout is cut this long after it.
TIMEOUT_GRACE = 10.0
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class Runtime(Settling):
    """Routes executions of one workspace to its backends. ``output`` is the default output policy."""

    def __init__(
        self,
        workspace: Any,
        backends: Sequence[Backend],
        *,
        output: Any = None,
        context: ExecContext | None = None,
    ) -> None:
        self._workspace = workspace
        self._backends: dict[str, Backend] = {}
        for b in backends:
            if b.info.id in self._backends:
                raise ValueError(f"two backends share the id {b.info.id!r}")
            self._backends[b.info.id] = b
        self._output = OutputOptions.resolve(output)
        self._context = context
        self._owner = secrets.token_hex(8)
        self._journal: ExecJournal | None = None
        self._running: dict[str, ExecRun] = {}
        self._finished: OrderedDict[str, ExecResult] = OrderedDict()
        self._closed = False

    @property
    def fs(self) -> Any:
        return self._workspace.fs

    @property
    def context(self) -> ExecContext:
        """The context handed to backends (a :class:`LocalExecContext` unless one was given)."""
        if self._context is None:
            self._context = LocalExecContext(self._workspace)
        return self._context

    @property
    def journal(self) -> ExecJournal:
        if self._journal is None:
            self._journal = ExecJournal(self.fs, self._owner, running=lambda: self._running.keys())
        return self._journal

    def active(self) -> int:
        """How many executions are running now (watched by a client or not)."""
        return len(self._running)

    def backends(self) -> list[BackendInfo]:
        """What each configured backend says about itself, in configuration order."""
        return [b.info for b in self._backends.values()]

    def _select(self, backend: str | None) -> Backend:
        if not self._backends:
            raise ValueError(
                "this workspace has no exec backends configured; give it some when it is made, e.g. "
                "Workspace(path, backends=[ShellBackend(), PythonBackend()]) "
                "with `from computer.runtime import PythonBackend, ShellBackend`"
            )
        if backend is None:
            return next(iter(self._backends.values()))
        try:
            return self._backends[backend]
        except KeyError:
            raise ValueError(
                f"unknown backend {backend!r}; configured backends: {', '.join(self._backends)}"
            ) from None

    async def exec(
        self,
        source: str,
        *,
        backend: str | None = None,
        id: str | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        input: Any = None,
        stdin: str | bytes | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the program's deadline (SPEC), not this call's
        output: Any = None,
    ) -> ExecHandle:
        """Start ``source`` on a backend and return its handle at once."""
        if self._closed:
            raise RuntimeError("the runtime is closed")
        chosen = self._select(backend)
        info = chosen.info
        if input is not None and not info.callable:
            raise ValueError(f"backend {info.id!r} is not callable: it does not accept input")
        check_input(input)
        if not isinstance(source, str):
            raise TypeError("source must be a str")
        check_source(source, info.protocol, cwd if isinstance(cwd, str) else None)
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)):
            raise TypeError(f"timeout must be a number of seconds, not {type(timeout).__name__}")
        if timeout is not None and not 0 < timeout < math.inf:  # NaN too
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        check_env(env)
        options = OutputOptions.resolve(output, self._output)
        exec_id = self._new_id(id)
        request = ExecRequest(
            id=exec_id,
            backend=info.id,
            source=source,
            cwd=canonical(cwd) if cwd is not None else None,
            env=dict(env or {}),
            input=input,
            stdin=stdin.encode() if isinstance(stdin, str) else stdin,
            timeout=timeout,
        )
        run = ExecRun(exec_id, info.id)
        self._running[exec_id] = run
        self._finished.pop(exec_id, None)
        try:
            await self.journal.started(exec_id, info.id, source)
        except QuotaError as exc:
            # The workspace's own limit refused the record (a run filled it): the run goes on without
            # one, so a command can free room (``rm``); its result is kept in memory, and its record
            # written at its end if there is room then (a full disk still fails it, below).
            log.warning("exec %s: started without its journal record: %s", exec_id, exc)
        except OSError as exc:
            # Issue 25 (faults on a cluster): a journal the workspace cannot write (a full disk is
            # ENOSPC) fails the run with its cause instead of raising out of exec().
            self._running.pop(exec_id, None)
            failed = ExecResult(
                "failed", None, "", f"{exc}\n", id=exec_id, backend=info.id, error=f"cannot start: {exc}"
            )
            run.finish(failed, ExecSnapshot(exec_id, info.id, "failed", None, "", failed.stderr, {}, True, 1))
            self._finished[exec_id] = failed
            return self._handle(run)
        except BaseException:
            self._running.pop(exec_id, None)
            raise
        run.task = asyncio.create_task(self._drive(run, chosen, request, options), name=f"exec {exec_id}")
        return self._handle(run)

    def _new_id(self, given: str | None) -> str:
        if given is None:
            while True:
                candidate = f"exec-{secrets.token_hex(4)}"
                if candidate not in self._running:
                    return candidate
        if not _ID_RE.match(given):
            raise ValueError(f"invalid exec id {given!r}: use letters, digits, '.', '_' or '-' (max 128)")
        if given in self._running:
            raise ValueError(f"an execution with id {given!r} is already running")
        return given

    def _handle(self, run: ExecRun) -> ExecHandle:
        return ExecHandle(run.id, run.backend, run=run, kill=lambda: self._kill(run))

    async def _drive(
        self, run: ExecRun, backend: Backend, request: ExecRequest, options: OutputOptions
    ) -> None:
        """Consume the backend's events in a child task (kill cancels it), then settle the result."""
        started = time.monotonic()
        prefix = f"{options.dir.rstrip('/')}/{request.backend}.{request.id}"
        captures = {
            "stdout": StreamCapture(self.fs, options, f"{prefix}.stdout.log"),
            "stderr": StreamCapture(self.fs, options, f"{prefix}.stderr.log"),
        }
        run.request, run.started, run.captures = request, started, captures
        exit_event: list[ExitEvent] = []
        ticker = asyncio.create_task(self._tick(run, captures))
        run.consumer = asyncio.create_task(self._consume(run, backend, request, captures, exit_event))
        if run.killed:  # killed before this task got to start the backend
            run.consumer.cancel()
        error: str | None = None
        ended = False  # this task was cancelled: its event loop is ending (asyncio.run returned)
        try:
            if request.timeout is not None:
                done, _ = await asyncio.wait({run.consumer}, timeout=request.timeout + TIMEOUT_GRACE)
                if not done:
                    run.killed = True
                    error = "the backend did not stop at its timeout"
                    run.consumer.cancel()
            await asyncio.wait({run.consumer})
            if run.consumer.done() and not run.consumer.cancelled():
                exc = run.consumer.exception()
                if exc is not None:
                    error = error or f"{type(exc).__name__}: {exc}"
        except asyncio.CancelledError:  # settled all the same: a handle awaited later gets a result
            ended, run.killed, error = True, True, LOOP_ENDED
        finally:
            ticker.cancel()
            if not run.consumer.done():
                # The runtime itself is being cancelled (close): stop the backend too.
                run.killed = True
                run.consumer.cancel()
                with contextlib.suppress(BaseException):  # cancelled just above: only its end matters
                    await run.consumer
        try:
            await self._settle(run, request, captures, exit_event[0] if exit_event else None, error, options)
            if run.settled is None:  # (else recorded as it was settled from another loop)
                self._record_run(self._finished.get(run.id), request, started)
        except Exception as exc:  # never leave a caller waiting on a result that will not come
            log.exception("exec %s: settling failed", run.id)
            failed = ExecResult(
                "failed", None, "", "", id=run.id, backend=run.backend, error=f"runtime error: {exc}"
            )
            self._running.pop(run.id, None)
            snapshot = ExecSnapshot(
                run.id, run.backend, "failed", None, "", "", {}, True, run.snapshot.seq + 1
            )
            run.finish(failed, snapshot)
            self._record_run(failed, request, started)
        if ended:
            raise asyncio.CancelledError

    async def _consume(
        self,
        run: ExecRun,
        backend: Backend,
        request: ExecRequest,
        captures: dict[str, StreamCapture],
        exit_event: list[ExitEvent],
    ) -> None:
        events = backend.run(request, self.context)
        try:
            async for event in events:
                if isinstance(event, OutputChunk):
                    await captures[event.stream].feed(event.data)
                    run.dirty = True
                elif isinstance(event, ExitEvent):
                    exit_event.append(event)
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _tick(self, run: ExecRun, captures: dict[str, StreamCapture]) -> None:
        """Publish a snapshot at most once per interval, only when output arrived."""
        while True:
            await asyncio.sleep(SNAPSHOT_INTERVAL)
            if run.dirty:
                run.publish(self._snapshot(run, captures, run.snapshot.seq + 1))

    async def _held_logs(self) -> set[str] | None:
        """The background logs the running processes of the workspace's live sandboxes name (never
        pruned while they run); None when a listing failed."""
        held: set[str] = set()
        for backend in self._backends.values():
            if isinstance(backend, LiveBackend):
                try:
                    held.update(p.log for p in await backend.processes(self.context.workspace_id) if p.log)
                except Exception:
                    return None
        return held

    async def _kill(self, run: ExecRun) -> None:
        if not run.done:
            run.killed = True
            if run.stranded:  # its loop has ended: its tasks never run again (see ``ExecRun``)
                return await self._end_stranded(run)
            if run.consumer is not None:
                run.consumer.cancel()
        await run.result()

    async def get_exec(self, id: str) -> ExecHandle:
        """Reattach to a running execution, or get a handle on its retained result."""
        run = self._running.get(id)
        if run is not None:
            return self._handle(run)
        result = self._finished.get(id)
        if result is None:
            record = await self.journal.get(id) if _ID_RE.match(id) else None
            if record is None:
                raise LookupError(f"no execution with id {id!r}")
            try:
                result = result_from_record(record)
            except (TypeError, ValueError) as exc:
                raise LookupError(f"the record of execution {id!r} is damaged: {exc}") from None
        return ExecHandle(id, result.backend, result=result)

    async def kill_exec(self, id: str) -> None:
        """Kill a running execution (and its process tree); a finished one is left as it is."""
        run = self._running.get(id)
        if run is not None:
            await self._kill(run)
            return
        await self.get_exec(id)  # LookupError when unknown

    async def dispose_exec(self, id: str) -> None:
        """Forget a finished execution's retained record (its saved logs stay, under ``keep``)."""
        if id in self._running:
            raise ValueError(f"execution {id!r} is still running; kill it first")
        cached = self._finished.pop(id, None) is not None
        removed = await self.journal.dispose(id) if _ID_RE.match(id) else False
        if not cached and not removed:
            raise LookupError(f"no execution with id {id!r}")

    # ------------------------------------------------------------------ live sandboxes

    def _live(self, backend: str | None) -> LiveBackend | None:
        chosen = self._select(backend)
        return chosen if isinstance(chosen, LiveBackend) else None

    async def processes(self, backend: str | None = None) -> list[ProcessInfo]:
        """The processes running in the workspace's live sandbox of ``backend`` (default: the first
        backend); empty when it has none (never started, ended, or a backend without live sandboxes)."""
        live = self._live(backend)
        return [] if live is None else await live.processes(self.context.workspace_id)

    async def kill_process(self, pid: int, backend: str | None = None) -> None:
        """SIGKILL the process ``pid`` (as :meth:`processes` lists it) of the live sandbox;
        ``ProcessLookupError`` when the sandbox has no such process."""
        if isinstance(pid, bool) or not isinstance(pid, int):
            raise TypeError("pid must be an int")
        live = self._live(backend)
        if live is None:
            raise ProcessLookupError(f"no process {pid}: backend {backend or 'default'} has no live sandbox")
        await live.kill_process(self.context.workspace_id, pid)

    async def end_sandbox(self, backend: str | None = None) -> bool:
        """Kill everything in the workspace's live sandbox of ``backend``, keep what it wrote (pulled
        after the kill) and drop it; the next run starts a fresh one. False when there was none."""
        live = self._live(backend)
        return False if live is None else await live.end_sandbox(self.context.workspace_id)

    async def close(self) -> None:
        """Kill running executions and wait for them to settle. Idempotent."""
        self._closed = True
        runs = list(self._running.values())
        for run in runs:
            run.killed = True
            # (a task of a loop closed under its run: nothing runs there, and a cancel raised there)
            if run.consumer is not None and not run.consumer.get_loop().is_closed():
                run.consumer.cancel()
        started = time.monotonic()
        for run in runs:
            if run.task is not None:
                try:
                    await asyncio.wait_for(
                        asyncio.shield(run.task), timeout=max(0.1, 30 - (time.monotonic() - started))
                    )
                except TimeoutError:
                    log.warning("exec %s: still settling 30 s after its workspace began to close", run.id)
                except BaseException:  # a run's failure is its own result (_drive logs it): close goes on
                    pass
        # Backends may keep things ready for this workspace (the shell's standby sandboxes): let go.
        for name, backend in self._backends.items():
            close_workspace = getattr(backend, "close_workspace", None)
            if close_workspace is not None:
                try:
                    await close_workspace(self.context.workspace_id)
                except Exception as exc:  # one backend's failure must not keep the others' going
                    log.warning(
                        "closing backend %s for workspace %s failed: %r", name, self._workspace.id, exc
                    )
        for run in runs:  # of a loop that has ended, ended with its live sandbox: killed (``_kill``)
            if not run.done and run.stranded:
                try:
                    await self._end_stranded(run)
                except Exception as exc:  # (``STRANDED``: its backend cannot reach it, it runs on)
                    log.warning("exec %s: left running as its workspace closed: %s", run.id, exc)
