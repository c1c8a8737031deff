"""A workspace's file copied to another name's (a template, a fork) keeps the workspace id. On a pool
worker serving both owners, each runs over its own files (s49/h1 finding 4): a worker kept live
sandboxes, warm mirrors and owner handles by workspace id alone, so the copy's runs went to the
original's sandbox (or synced against the original's owner)."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

from owner_models import owner_awake

import computer
from computer.actors.naming import workspace_file


async def _ok(ws: Any, source: str) -> str:
    result = await asyncio.wait_for((await ws.runtime.exec(source, timeout=60)).result(), 120)
    assert result.status == "completed", (source, result.stdout, result.stderr, result.error)
    return str(result.stdout)


def _copy(source: Path, copy: Path) -> None:
    for ext in ("", "-wal"):
        if os.path.exists(f"{source}{ext}"):
            shutil.copyfile(f"{source}{ext}", f"{copy}{ext}")


async def test_a_copied_workspace_file_runs_over_its_own_files_on_a_shared_worker(
    ray_session: Any, tmp_path: Path, name: str
) -> None:
    # One shell worker: both owners' runs meet on it.
    conf = computer.init(data_dir=tmp_path / "data", hibernate_after=2.0, shell_pool_size=1, shell_pool_max=1)
    other = f"{name}-other"
    try:
        async with computer.get_workspace(name) as a:
            await a.fs.mkdir("/workspace", recursive=True)
            await a.fs.write_file("/workspace/f", "base\n")
            assert await _ok(a, "cat f") == "base\n"  # the worker holds a's mirror
        deadline = asyncio.get_running_loop().time() + 60.0
        while await owner_awake(name, conf):  # hibernated: the file is closed
            assert asyncio.get_running_loop().time() < deadline, "the owner never hibernated"
            await asyncio.sleep(0.1)
        _copy(workspace_file(conf, name), workspace_file(conf, other))
        async with computer.get_workspace(name) as a, computer.get_workspace(other) as b:
            await a.fs.write_file("/workspace/f", "A\n")
            await b.fs.write_file("/workspace/f", "B\n")
            assert await _ok(a, "cat f; echo fromA > a_only") == "A\n"
            assert await _ok(b, "cat f; echo fromB > b_only") == "B\n"
            assert sorted((await _ok(b, "ls")).split()) == ["b_only", "f"]
            assert sorted((await _ok(a, "ls")).split()) == ["a_only", "f"]
            assert await a.fs.read_file("/workspace/f") == b"A\n"
            assert await b.fs.read_file("/workspace/f") == b"B\n"
            assert not await a.fs.exists("/workspace/b_only")
            assert not await b.fs.exists("/workspace/a_only")
    finally:
        computer.init(data_dir=tmp_path / "data")
