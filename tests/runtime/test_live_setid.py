"""Set-id bits a program sets in a live sandbox (SPEC: the workspace never holds setuid/setgid): the
program sees its own ``chmod`` for the whole run, whatever the background syncs do meanwhile; the
workspace gets the mode without them, and the mirror loses them by the run's end."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

import computer
from computer.runtime import PythonBackend, ShellBackend

pytestmark = pytest.mark.skipif(not ShellBackend(live=True).live, reason="no cgroup freezer here")


async def run(ws: computer.Workspace, source: str, **kwargs: object) -> computer.ExecResult:
    return await (await ws.runtime.exec(source, **kwargs)).result()  # type: ignore[arg-type]


async def test_a_tick_between_chmod_and_stat_leaves_the_programs_setuid_bit(tmp_path: Path) -> None:
    """``chmod 4755 f``, then several syncs (a sleep of a few ticks: each pulls ``f``), then ``stat``:
    the program sees 4755. Before, a tick's pull took the bit off in the mirror itself, so the program
    saw its own chmod undone at a random moment (755)."""
    backend = ShellBackend(live=True)
    async with computer.Workspace(f"{tmp_path}/ws.db", backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/f", b"#!/bin/sh\n")
        result = await run(ws, "chmod 4755 f; chmod 2755 .; sleep 0.6; stat -c %a f .")
        assert result.exit_code == 0, result.stderr
        assert result.stdout.split() == ["4755", "2755"]  # the top (the mirror's root) too
        assert (await ws.fs.stat("/workspace/f")).mode & 0o7777 == 0o755  # never setuid in the workspace
        assert (await ws.fs.stat("/workspace")).mode & 0o7777 == 0o755
        mirror = backend._lives._live[ws.fs.instance].mirror
        assert os.lstat(mirror.directory / "f").st_mode & 0o7777 == 0o755  # gone by the run's end
        assert os.lstat(mirror.directory).st_mode & 0o7777 == 0o755
        again = await run(ws, "stat -c %a f .")
        assert again.stdout.split() == ["755", "755"]


async def test_a_background_chmod_is_cleared_by_the_next_run(tmp_path: Path) -> None:
    """A background process's set-id bit, set after the run that started it ended, stays while ticks
    pass and is gone by the next run's end (its start's sync clears it: the run sees the workspace's
    mode)."""
    backend = ShellBackend(live=True)
    async with computer.Workspace(f"{tmp_path}/ws.db", backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/f", b"#!/bin/sh\n")
        # The program chmods once the run that started it ended (``go``, from the workspace): the end
        # of that run clears the bits as any run's end does, and a chmod that raced it was undone there.
        script = "while [ ! -e go ]; do sleep 0.02; done; chmod 6755 f; sleep 0.6; stat -c %a f > seen"
        await run(ws, f"({script}; sleep 30) > /dev/null 2>&1 &")
        await ws.fs.write_file("/workspace/go", b"")
        # The next run's start clears the bit too: it starts once the program looked (a tick brought
        # ``seen``), not after a fixed second.
        async with asyncio.timeout(30):
            while not await ws.fs.exists("/workspace/seen"):  # noqa: ASYNC110 (a workspace file, no event)
                await asyncio.sleep(0.05)
        result = await run(ws, "cat seen; stat -c %a f")
        assert result.stdout.split()[0] == "6755"  # the background program saw its own chmod
        mirror = backend._lives._live[ws.fs.instance].mirror
        assert os.lstat(mirror.directory / "f").st_mode & 0o7777 == 0o755
        assert (await ws.fs.stat("/workspace/f")).mode & 0o7777 == 0o755


async def test_a_python_programs_chmod_holds_through_the_ticks_too(tmp_path: Path) -> None:
    """The python backend's live sandbox: the same rule (its guest's ``os.chmod``, then ticks)."""
    backend = PythonBackend(live=True)
    async with computer.Workspace(f"{tmp_path}/ws.db", backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/f", b"x")
        source = "import os, time\nos.chmod('f', 0o2755)\ntime.sleep(0.6)\nprint(oct(os.stat('f').st_mode & 0o7777))\n"
        result = await run(ws, source, backend="python")
        assert result.stdout.strip() == "0o2755", result.stderr
        assert (await ws.fs.stat("/workspace/f")).mode & 0o7777 == 0o755
        mirror = backend._lives._live[ws.fs.instance].mirror
        assert os.lstat(mirror.directory / "f").st_mode & 0o7777 == 0o755
