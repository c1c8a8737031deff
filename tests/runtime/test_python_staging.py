"""The python backend stages its interpreter lazily (issue 22, CLI speed): building one stages and
probes nothing (a workspace that never runs python, such as a one-shot shell exec on the command
line, used to pay ~0.3 s for the standard library's links); the first run or warm-up stages, in a
thread, so the event loop never stalls on it. A killed process's half-built compiled tree does not
stay in the temp directory (issue 22, item 7)."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import computer
from computer.runtime import PythonBackend
from computer.runtime import python as python_module
from computer.runtime._pycache import reap_stale_builds


def test_building_the_backend_stages_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("staged while the backend was built")

    monkeypatch.setattr(python_module, "stage_python", refuse)
    monkeypatch.setattr(python_module, "stage_guest", refuse)
    for live in (True, False):
        backend = PythonBackend(live=live)
        assert backend.info.startup_ms is not None and backend.info.startup_ms > 0
        stated = re.search(r"Startup cost about (\d+) ms", backend.info.description)
        assert stated is not None and abs(int(stated[1]) - backend.info.startup_ms) <= 1


@pytest.mark.parametrize("live", [True, False])
async def test_the_first_run_stages_in_a_thread(monkeypatch: pytest.MonkeyPatch, live: bool) -> None:
    staged_in: list[threading.Thread] = []
    stage_python = python_module.stage_python

    def recording(*args: Any, **kwargs: Any) -> Any:
        staged_in.append(threading.current_thread())
        return stage_python(*args, **kwargs)

    monkeypatch.setattr(python_module, "stage_python", recording)
    backend = PythonBackend(live=live, warm_guests=0)
    assert staged_in == []
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        result = await (await ws.runtime.exec("print(sum(range(5)))", backend="python")).result()
    assert (result.status, result.stdout) == ("completed", "10\n")
    assert staged_in and all(thread is not threading.main_thread() for thread in staged_in)


def test_half_built_compiled_trees_of_killed_processes_are_reaped_once_stale(tmp_path: Path) -> None:
    stale, fresh = (
        tmp_path / f".computer-pyc-{os.getuid()}-stale",
        tmp_path / f".computer-pyc-{os.getuid()}-new",
    )
    other = tmp_path / f".computer-pyc-{os.getuid() + 1}-stale"
    for tree in (stale, fresh, other):
        (tree / "encodings" / "__pycache__").mkdir(parents=True)
        (tree / "encodings" / "__pycache__" / "x.pyc").write_bytes(b"half")
    hours_ago = time.time() - 7200
    for tree in (stale, other):
        os.utime(tree, (hours_ago, hours_ago))
    reap_stale_builds(tmp_path)
    assert not stale.exists() and fresh.exists() and other.exists()
