"""With a sandbox per call (``live=False``) the python backend keeps one guest interpreter started
ahead over each warm mirror, for the workspace's next run without ``env`` (the warm sandboxes of
``_warm``, as the shell backend's standbys and the live sandboxes started ahead)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest

import computer
from computer.runtime import PythonBackend
from computer.runtime._pychannel import Guest
from computer.runtime._warm import WarmSandboxes


@pytest.fixture
async def backend_ws() -> AsyncIterator[tuple[PythonBackend, computer.Workspace]]:
    backend = PythonBackend(live=False)
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        yield backend, ws


async def run(ws: computer.Workspace, source: str, **kwargs: object) -> computer.ExecResult:
    return await (await ws.runtime.exec(source, backend="python", **kwargs)).result()  # type: ignore[arg-type]


def standby_of(backend: PythonBackend) -> list[asyncio.Future[Any]]:
    """The guests started ahead over the backend's idle mirrors (one workspace in these tests)."""
    pending: list[asyncio.Future[Any]] = []
    for workspace in backend.mirrors.workspaces():
        for mirror in backend.mirrors.idle_mirrors(workspace):
            items = getattr(mirror.standby, "items", [])
            pending += [warm.task for warm in items]
    return pending


async def ready_guest_pid(backend: PythonBackend) -> int:
    """The pid of the guest started ahead, once it is started (bounded: 10 s)."""
    (pending,) = standby_of(backend)
    guest = await asyncio.wait_for(asyncio.shield(pending), 10)
    return int(guest.sp.proc.pid)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ")[1][0] != "Z"


async def test_the_next_run_without_env_takes_the_guest_started_ahead(backend_ws) -> None:
    backend, ws = backend_ws
    assert (await run(ws, "print(1)")).stdout == "1\n"
    pid = await ready_guest_pid(backend)
    result = await run(ws, "def main(input):\n    return input + 1", input=41)
    assert result.value == 42
    assert standby_of(backend)[0] is not None  # the next one is on its way
    for _ in range(100):  # bounded: 5 s (the guest's launcher is reaped with the run)
        if not alive(pid):
            break
        await asyncio.sleep(0.05)
    assert not alive(pid)  # that guest ran the program and ended with it


async def test_a_run_with_env_starts_its_own_guest(backend_ws) -> None:
    backend, ws = backend_ws
    await run(ws, "pass")
    pid = await ready_guest_pid(backend)
    result = await run(ws, "import os\nprint(os.environ['X'])", env={"X": "mine"})
    assert result.stdout == "mine\n"
    assert alive(pid) and await ready_guest_pid(backend) == pid  # still waiting for a run without env


async def test_runs_on_guests_started_ahead_share_nothing(backend_ws) -> None:
    backend, ws = backend_ws
    await run(ws, "open('/tmp/left', 'w').write('secret')\nimport sys\nsys.modules['os'].LEFT = 1")
    await ready_guest_pid(backend)
    result = await run(ws, "import os\nprint(os.path.exists('/tmp/left'), hasattr(os, 'LEFT'))")
    assert result.stdout == "False False\n"


async def test_a_guest_that_died_while_it_waited_is_replaced(backend_ws) -> None:
    backend, ws = backend_ws
    await run(ws, "pass")
    os.killpg(await ready_guest_pid(backend), signal.SIGKILL)
    proc = standby_of(backend)[0].result().sp.proc
    for _ in range(250):  # bounded: 5 s (the exit is seen once the child watcher reaps it)
        if proc.returncode is not None:
            break
        await asyncio.sleep(0.02)
    assert proc.returncode is not None  # the run below finds a dead guest and replaces it
    assert (await run(ws, "print('fresh')")).stdout == "fresh\n"


async def test_closing_the_workspace_ends_the_guests_started_ahead() -> None:
    backend = PythonBackend(live=False)
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await run(ws, "pass")
        pid = await ready_guest_pid(backend)
    assert standby_of(backend) == [] and not alive(pid)


async def test_no_guest_is_kept_when_warm_guests_is_zero() -> None:
    backend = PythonBackend(warm_guests=0, live=False)
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        assert (await run(ws, "print(2)")).stdout == "2\n"
        assert (await run(ws, "print(3)", cwd="/tmp")).stdout == "3\n"  # no mirror: none either
        assert standby_of(backend) == [] and backend._warm.unmirrored.items == []


async def test_a_guest_that_failed_to_start_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    async def fail() -> Guest:
        raise OSError("no interpreter at /usr/bin/python3")

    guests: WarmSandboxes[Guest] = WarmSandboxes(4)
    guests.keep(None, fail)
    with caplog.at_level(logging.WARNING, logger="computer.runtime._warm"):
        assert await guests.take(None) is None
    assert "failed to start" in caplog.text and "no interpreter" in caplog.text


async def test_a_run_without_a_mirror_takes_a_guest_started_ahead_too(backend_ws) -> None:
    """A cwd outside the mount root has no mirror: its guests started ahead are the backend's own,
    ended with the workspace like the others."""
    backend, ws = backend_ws
    assert (await run(ws, "import os\nprint(os.getcwd())", cwd="/tmp")).stdout == "/tmp\n"
    (warm,) = backend._warm.unmirrored.items
    guest = await asyncio.wait_for(asyncio.shield(warm.task), 10)
    pid = int(guest.sp.proc.pid)
    assert (await run(ws, "def main(input):\n    return input * 2", input=21, cwd="/tmp")).value == 42
    for _ in range(100):  # bounded: 5 s
        if not alive(pid):
            break
        await asyncio.sleep(0.05)
    assert not alive(pid)  # that guest ran it
    await ws.close()
    assert backend._warm.unmirrored.items == []
