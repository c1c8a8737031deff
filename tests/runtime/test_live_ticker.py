"""A live sandbox's background sync (its ticker, every ``SYNC_INTERVAL``) when a look at the sandbox
fails, and its end racing a tick (SPEC section 10, "Live sandboxes")."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import computer
from computer.runtime import ShellBackend, _live
from computer.runtime._live import LiveSandbox, LiveSandboxError

from ._live_support import eventually

pytestmark = pytest.mark.skipif(not ShellBackend(live=True).live, reason="no cgroup freezer here")


async def run(ws: computer.Workspace, source: str, **kwargs: object) -> computer.ExecResult:
    return await (await ws.runtime.exec(source, **kwargs)).result()  # type: ignore[arg-type]


def _unanswered(monkeypatch: pytest.MonkeyPatch, sandbox: LiveSandbox) -> list[int]:
    """The sandbox's pids group unreadable (a host without the controller: ``busy`` asks the init for
    its processes), and the init's next ``[n]`` answers errors (n set by the caller), as when it
    could not send its listing."""
    failing, request = [0], sandbox._request

    async def answering(message: dict[str, Any]) -> dict[str, Any]:
        if message.get("op") == "ps" and failing[0] > 0:
            failing[0] -= 1
            raise LiveSandboxError("the live sandbox's init could not answer: [Errno 105] No buffer space")
        return await request(message)

    monkeypatch.setattr(sandbox, "tasks", lambda: None)
    monkeypatch.setattr(sandbox, "_request", answering)
    return failing


async def test_a_tick_whose_init_could_not_answer_leaves_the_next_tick_to_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tick whose look at the sandbox failed on the init's channel ("could not answer": a request's
    reply it could not send) leaves the sync to the next tick. Before, that error ended the ticker for
    the sandbox's life: nothing a background process wrote reached the workspace until the next run,
    and the sandbox never ended idle."""
    backend = ShellBackend(live=True, live_idle=0.5)
    async with computer.Workspace(f"{tmp_path}/ws.db", backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await run(ws, "setsid sh -c 'sleep 0.5; echo late > late.txt; sleep 1' > /dev/null 2>&1 &")
        failing = _unanswered(monkeypatch, backend._lives._live[ws.fs.instance])
        failing[0] = 3
        await eventually(lambda: ws.fs.exists("/workspace/late.txt"), within=10)
        assert failing[0] == 0  # the ticks did meet the failures
        assert await ws.fs.read_text("/workspace/late.txt") == "late\n"

        async def ended() -> bool:  # the idle end still comes once the process is gone
            return backend.live_sandboxes() == 0

        await eventually(ended, within=10)


async def test_a_sandbox_whose_init_fails_every_tick_ends_and_the_next_run_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ticks whose look fails on the init's channel ``TICK_FAILURES`` times in a row end the sandbox as
    one whose init died: its processes killed, what they wrote pulled; the workspace's next run starts
    a fresh one and says so on stderr (nothing else told the caller its server was gone)."""
    monkeypatch.setattr(_live, "TICK_FAILURES", 3)
    backend = ShellBackend(live=True)
    async with computer.Workspace(f"{tmp_path}/ws.db", backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await run(ws, "setsid sh -c 'echo late > late.txt; sleep 30' > /dev/null 2>&1 &")
        sandbox = backend._lives._live[ws.fs.instance]
        _unanswered(monkeypatch, sandbox)[0] = 10**6

        async def ended() -> bool:
            return backend.live_sandboxes() == 0

        await eventually(ended, within=10)
        await asyncio.wait_for(sandbox.ended.wait(), 30)  # its end's pull
        assert sandbox.dead is not None and "background syncs in a row" in sandbox.dead
        assert await ws.fs.read_text("/workspace/late.txt") == "late\n"
        first = await run(ws, "cat late.txt")
        assert (first.status, first.stdout) == ("completed", "late\n")
        assert "live sandbox ended while no run was in progress" in first.stderr, first.stderr
        assert "background syncs in a row" in first.stderr
        again = await run(ws, "true")
        assert (again.status, again.stderr) == ("completed", "")
        assert backend.live_sandboxes() == 1
