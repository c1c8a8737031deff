"""``Settling``: how :class:`~computer.runtime._runtime.Runtime` ends a run (mixed into it): its
snapshots while it runs, its final result (output tails and saved logs, status), the journal's record,
the audit record."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from ._backend import ExecRequest, ExitEvent
from ._capture import StreamCapture
from ._handle import ExecRun
from ._journal import ExecJournal
from ._options import OutputOptions, prune_logs
from ._reported import reported
from .types import ExecResult, ExecSnapshot, ExecStatus, OutputTruncation, status_for_exit

__all__ = ["KILLED_EXIT_CODE", "Settling"]

log = logging.getLogger("computer.runtime._runtime")

# A killed run reports what a shell reports for a child ended by SIGKILL (the tree is SIGKILLed).
KILLED_EXIT_CODE = 137
_FINISHED_CACHE = 200


class Settling:
    """The settling half of ``Runtime`` (its state: ``_workspace``, ``_running``, ``_finished``)."""

    _workspace: Any
    _running: dict[str, ExecRun]
    _finished: OrderedDict[str, ExecResult]
    _backends: dict[str, Any]

    if TYPE_CHECKING:

        @property
        def fs(self) -> Any: ...

        @property
        def journal(self) -> ExecJournal: ...

        @property
        def context(self) -> Any: ...

        async def _held_logs(self) -> set[str] | None: ...

    def _snapshot(self, run: ExecRun, captures: dict[str, StreamCapture], seq: int) -> ExecSnapshot:
        texts, truncated = _outputs(captures, final=False)
        return ExecSnapshot(
            run.id, run.backend, "running", None, texts["stdout"], texts["stderr"], truncated, False, seq
        )

    async def _settle(
        self,
        run: ExecRun,
        request: ExecRequest,
        captures: dict[str, StreamCapture],
        exit_event: ExitEvent | None,
        error: str | None,
        options: OutputOptions,
    ) -> None:
        saved_any = False
        for capture in captures.values():
            try:
                await capture.finish()
            except Exception as exc:  # a failing store must not lose the result
                log.warning("exec %s: saving output failed: %s", run.id, exc)
            saved_any = saved_any or bool(capture.saved)
        if run.settled is not None:  # settled from another loop as this one stood still: that result
            run.finish(run.settled, run.snapshot)
            return
        result = _ended(run, captures, exit_event, error)
        try:
            await self.journal.finished(result, request.source)
            if saved_any:
                await prune_logs(self.fs, options, self._held_logs)
        except Exception as exc:
            log.warning("exec %s: journal update failed: %s", run.id, exc)
        run.finish(result, self._retain(run, result))

    def _retain(self, run: ExecRun, result: ExecResult) -> ExecSnapshot:
        """``result`` is the ended run's (``get_exec`` finds it); its final snapshot."""
        self._running.pop(run.id, None)
        self._finished[run.id] = result
        while len(self._finished) > _FINISHED_CACHE:
            self._finished.popitem(last=False)
        return ExecSnapshot(
            run.id,
            run.backend,
            result.status,
            result.exit_code,
            result.stdout,
            result.stderr,
            result.truncated,
            True,
            run.snapshot.seq + 1,
        )

    async def _end_stranded(self, run: ExecRun) -> None:
        """End a :attr:`~ExecRun.stranded` run through its backend (``ExecRun.end_stranded``: raises
        when none can) and settle it from this event loop: the result a kill gives (``_ended``), with
        the output its loop had read and what the backend's syncs pulled and refused while it ran (a
        ``RunChanges``; a ``Synced``, a sandbox per call's), in the journal and retained as any run's.
        Before, it stayed running (in ``get_exec``, the journal) until a restart called it "failed:
        owner restarted"."""
        changes = await run.end_stranded(self._backends.get(run.backend), self.context.workspace_id)
        run.killed = True  # (a close's too: ended here)
        for capture in run.captures.values():
            if capture.spool is not None:  # its log's write was a task of that loop: never committed
                capture.saved = False
        skipped = dict(changes.skipped)
        ended = ExitEvent(
            None, pulled=sorted(changes.pulled), skipped=sorted(skipped), skipped_reasons=skipped, killed=True
        )
        result = _ended(run, run.captures, ended, None)
        request = run.request
        try:
            await self.journal.finished(result, request.source if request is not None else "")
        except Exception as exc:
            log.warning("exec %s: journal update failed: %s", run.id, exc)
        run.finish_stranded(result, self._retain(run, result))
        if request is not None and run.started is not None:
            self._record_run(result, request, run.started)

    def _record_run(self, result: ExecResult | None, request: ExecRequest, started: float) -> None:
        """The run's audit record (SPEC 10) in the workspace's own file; never raises."""
        audit = getattr(self._workspace, "audit", None)
        if audit is None or result is None:
            return
        audit.record_exec(
            result,
            command=request.source,
            cwd=request.cwd,
            env=request.env,
            timeout=request.timeout,
            duration_s=time.monotonic() - started,
        )


def _ended(
    run: ExecRun, captures: dict[str, StreamCapture], exit_event: ExitEvent | None, error: str | None
) -> ExecResult:
    """The result of ``run`` ended with ``exit_event`` (None: the backend reported none) and ``error``;
    past ``REPORTED`` left-out paths, the directories they are below (``_reported``)."""
    texts, truncated = _outputs(captures)
    reasons = reported(_reasons(exit_event))
    killed = run.killed or (exit_event is not None and exit_event.killed)
    status: ExecStatus
    if exit_event is None:
        exit_code = KILLED_EXIT_CODE if run.killed else None
        status = "cancelled" if run.killed else "failed"
        error = error or ("killed" if run.killed else "the backend ended without reporting an exit status")
    else:
        exit_code = exit_event.exit_code
        if exit_code is None and run.killed and exit_event.killed:
            # ``kill``: the backend ended the program, pulled what it wrote and says what (its
            # ``pulled`` and ``skipped``), with no exit code of the program's own.
            exit_code, error = KILLED_EXIT_CODE, error or "killed"
        status = status_for_exit(exit_code, killed=killed)
        error = exit_event.error or error
        if status == "completed" and error:
            status = "failed"
    return ExecResult(
        status=status,
        exit_code=exit_code,
        stdout=texts.get("stdout", ""),
        stderr=texts.get("stderr", ""),
        value=exit_event.value if exit_event else None,
        truncated=truncated,
        pushed=exit_event.pushed if exit_event else 0,
        pulled=list(exit_event.pulled) if exit_event else [],
        skipped=list(reasons),
        skipped_reasons=reasons,
        id=run.id,
        backend=run.backend,
        error=error,
    )


def _outputs(
    captures: dict[str, StreamCapture], *, final: bool = True
) -> tuple[dict[str, str], dict[str, OutputTruncation]]:
    """Each stream's text as its tail holds it, and how it was cut (when it was)."""
    texts: dict[str, str] = {}
    truncated: dict[str, OutputTruncation] = {}
    for name, capture in captures.items():
        view = capture.view(final=final)
        texts[name] = capture.text(view)
        cut = capture.truncation(view)
        if cut is not None:
            truncated[name] = cut
    return texts, truncated


def _reasons(event: ExitEvent | None) -> dict[str, str]:
    """Why each skipped path was left out: every path of ``skipped`` gets a reason."""
    if event is None:
        return {}
    given = event.skipped_reasons
    return {path: given.get(path, "left out of the sync") for path in event.skipped}
