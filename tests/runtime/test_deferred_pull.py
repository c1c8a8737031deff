"""Deferred pulls: a context that lets the dispatcher apply a run's changes (as a pool's owner does).

The shell hands the pull over in its exit event and leaves the mirror unsettled; the next run settles
it from the pull's outcome, or, when the outcome is unknown, pushes the whole tree again.
"""

from __future__ import annotations

from typing import Any

import computer
from computer.runtime import ExecRequest, ExitEvent, OutputChunk, ShellBackend
from computer.runtime._context import LocalExecContext


class _Deferring(LocalExecContext):
    defers_pull = True

    def __init__(self, workspace: Any) -> None:
        super().__init__(workspace)
        self.outcomes: dict[str, tuple[int, list[str]]] = {}

    def pull_outcome(self, run: str) -> tuple[int, list[str]] | None:
        return self.outcomes.get(run)


async def _run(backend: ShellBackend, ctx: _Deferring, run: str, source: str) -> tuple[str, ExitEvent]:
    out, exit_event = b"", None
    async for event in backend.run(ExecRequest(id=run, backend="shell", source=source), ctx):
        if isinstance(event, OutputChunk) and event.stream == "stdout":
            out += event.data
        elif isinstance(event, ExitEvent):
            exit_event = event
    assert exit_event is not None
    return out.decode(), exit_event


async def _apply(ctx: _Deferring, run: str, event: ExitEvent, *, tell: bool) -> None:
    assert event.pending is not None
    batch = await ctx.sync_pull(event.pending.pull, event.pending.base_rev)
    if tell:
        ctx.outcomes[run] = (batch.rev, list(batch.skipped))


async def test_the_next_run_settles_the_mirror_from_the_outcome_or_pushes_it_whole() -> None:
    backend = ShellBackend(live=False)
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        ctx = _Deferring(ws)
        _, first = await _run(backend, ctx, "r1", "echo 1 > a")
        assert first.pending is not None and first.pulled == []
        assert not await ws.fs.exists("/workspace/a")  # not applied until the dispatcher does
        assert first.pending.limits["max_file_bytes"] == backend.limits.max_file_bytes
        await _apply(ctx, "r1", first, tell=True)
        assert await ws.fs.read_text("/workspace/a") == "1\n"

        out, second = await _run(backend, ctx, "r2", "cat a; echo 2 > b")
        assert (out, second.pushed) == ("1\n", 0)  # settled from r1's outcome: nothing to push
        await _apply(ctx, "r2", second, tell=False)  # applied, but the mirror never learns how

        out, third = await _run(backend, ctx, "r3", "cat a b")
        assert (out, third.pushed) == ("1\n2\n", 2)  # unknown outcome: the whole tree again
