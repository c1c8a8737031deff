"""Cancelling a run while its sandbox starts: nothing hangs, nothing is left running, nothing leaks.

``asyncio.create_subprocess_exec`` is not cancellation-safe: the child exists before the coroutine
returns, and a cancellation delivered while it connects the pipes used to wait forever for pipes held
by a half-started bubblewrap (killed mid-setup, its inner process survives its parent). Each test
cancels at many points of start-up, in a bounded loop, and fails fast (``asyncio.wait`` guards)
instead of hanging the suite.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import computer
from computer.runtime import PythonBackend, ShellBackend
from computer.runtime._sandbox import Sandbox, SandboxProcess

TRIES = 30
GUARD = 20.0  # seconds: far above a healthy start-up and kill, far below the suite's timeout
_CGROUPS = [Path("/sys/fs/cgroup") / c / "computer-exec" for c in ("memory", "pids")]


def _token() -> str:
    return secrets.token_hex(8)


def _alive(token: str) -> list[int]:
    """Host pids (not zombies) whose environment carries ``SPAWN_TEST=<token>``."""
    needle = f"SPAWN_TEST={token}".encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ and state != "Z":
            found.append(int(pid))
    return found


async def _assert_gone(token: str) -> None:
    """Every process of the run has exited (a SIGKILLed tree may take a moment to be torn down)."""
    for _ in range(100):
        if not _alive(token):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"processes of the cancelled run still alive: {_alive(token)}")


def _our_cgroups() -> set[Path]:
    """The per-run cgroups this test process currently has (named ``run-<pid>-…``)."""
    found: set[Path] = set()
    for parent in _CGROUPS:
        with contextlib.suppress(OSError):
            found.update(parent.glob(f"run-{os.getpid()}-*"))
    return found


async def _settles(aw: Awaitable[Any], what: str) -> Any:
    """Await ``aw`` but fail (instead of hanging) when it has not settled within GUARD seconds."""
    task = asyncio.ensure_future(aw)
    done, _ = await asyncio.wait({task}, timeout=GUARD)
    if not done:
        task.cancel()
        pytest.fail(f"{what} did not settle within {GUARD:.0f} s")
    return task.result()


async def test_cancelling_a_spawn_at_any_point_kills_and_reaps_it(shell_backend: ShellBackend) -> None:
    sandbox: Sandbox = shell_backend.sandbox
    before = _our_cgroups()
    outcomes = {"cancelled": 0, "spawned": 0}
    for attempt in range(TRIES):
        token = _token()
        env = {"PATH": "/usr/bin:/bin", "SPAWN_TEST": token}
        task = asyncio.create_task(sandbox.spawn(["/bin/sh", "-c", "echo started; exec sleep 3600"], env=env))
        for _ in range(attempt % 10):  # cancel after 0..9 event-loop iterations
            await asyncio.sleep(0)
        if attempt >= 20:  # and a few later points, well into bubblewrap's own set-up
            await asyncio.sleep(0.005 * (attempt - 19))
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=GUARD)
        if not done:
            pytest.fail(f"try {attempt}: the cancelled spawn did not settle within {GUARD:.0f} s")
        if task.cancelled():
            outcomes["cancelled"] += 1
        else:  # the spawn had already finished when the cancel came: the caller owns the process
            sp: SandboxProcess = task.result()
            outcomes["spawned"] += 1
            await sp.kill_tree()
            await asyncio.to_thread(sp.cleanup)
        await _assert_gone(token)
        assert _our_cgroups() <= before, f"try {attempt}: cgroups left behind"
    assert outcomes["cancelled"] > 0


async def test_a_second_cancel_during_the_cleanup_still_kills_and_reaps(shell_backend: ShellBackend) -> None:
    """``kill()`` then ``close()``: the spawn is cancelled again while it is tearing down."""
    sandbox: Sandbox = shell_backend.sandbox
    before = _our_cgroups()
    for attempt in range(10):
        token = _token()
        env = {"PATH": "/usr/bin:/bin", "SPAWN_TEST": token}
        task = asyncio.create_task(sandbox.spawn(["/bin/sh", "-c", "exec sleep 3600"], env=env))
        for _ in range(attempt % 5):
            await asyncio.sleep(0)
        task.cancel()
        for _ in range(1 + attempt // 5):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=GUARD)
        if not done:
            pytest.fail(f"try {attempt}: the twice-cancelled spawn did not settle within {GUARD:.0f} s")
        if not task.cancelled():
            sp: SandboxProcess = task.result()
            await sp.kill_tree()
            await asyncio.to_thread(sp.cleanup)
        await _assert_gone(token)
        assert _our_cgroups() <= before, f"try {attempt}: cgroups left behind"


def _signal_spawns(monkeypatch: pytest.MonkeyPatch, sandbox: Sandbox) -> asyncio.Queue[None]:
    """A queue that gets one item each time ``sandbox.spawn`` is entered (the start-up window)."""
    entered: asyncio.Queue[None] = asyncio.Queue()
    original: Callable[..., Awaitable[SandboxProcess]] = sandbox.spawn

    async def spawn(command: Sequence[str], **kwargs: Any) -> SandboxProcess:
        entered.put_nowait(None)
        return await original(command, **kwargs)

    monkeypatch.setattr(sandbox, "spawn", spawn)
    return entered


@pytest.mark.parametrize("backend", ["shell", "python"])
async def test_kill_during_start_up_settles_the_run_as_cancelled(
    ws: computer.Workspace,
    shell_backend: ShellBackend,
    python_backend: PythonBackend,
    backend: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chosen = shell_backend if backend == "shell" else python_backend
    entered = _signal_spawns(monkeypatch, chosen.sandbox)
    source = (
        "echo started; exec sleep 3600"
        if backend == "shell"
        else "print('started')\nimport time\ntime.sleep(3600)"
    )
    before = _our_cgroups()
    for attempt in range(TRIES):
        token = _token()
        handle = await ws.runtime.exec(source, backend=backend, env={"SPAWN_TEST": token})
        if attempt % 3:  # else: kill() right after exec() returned
            await _settles(entered.get(), f"try {attempt}: reaching the spawn")
            for _ in range(attempt % 10):
                await asyncio.sleep(0)
        await _settles(handle.kill(), f"try {attempt}: kill() during start-up")
        result = await _settles(handle.result(), f"try {attempt}: the result")
        assert result.status == "cancelled", (attempt, result)
        await _assert_gone(token)
        while not entered.empty():
            entered.get_nowait()
    assert _our_cgroups() <= before
    # The workspace still works after all those kills.
    ok = await _settles(
        (
            await ws.runtime.exec("print('ok')" if backend == "python" else "echo ok", backend=backend)
        ).result(),
        "a normal run",
    )
    assert (ok.status, ok.stdout) == ("completed", "ok\n")


async def test_close_during_start_up_settles_the_run_as_cancelled(
    shell_backend: ShellBackend, python_backend: PythonBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered = _signal_spawns(monkeypatch, shell_backend.sandbox)
    before = _our_cgroups()
    for attempt in range(10):
        token = _token()
        workspace = computer.Workspace(backends=[shell_backend, python_backend])
        await workspace.fs.mkdir("/workspace", recursive=True)
        handle = await workspace.runtime.exec("echo started; exec sleep 3600", env={"SPAWN_TEST": token})
        await _settles(entered.get(), f"try {attempt}: reaching the spawn")
        for _ in range(attempt % 5):
            await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await _settles(workspace.close(), f"try {attempt}: close() during start-up")
        assert loop.time() - started < GUARD
        result = await _settles(handle.result(), f"try {attempt}: the result")
        assert result.status == "cancelled", (attempt, result)
        await _assert_gone(token)
    assert _our_cgroups() <= before
