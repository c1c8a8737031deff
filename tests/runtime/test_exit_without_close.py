"""A script that runs commands through a ``Workspace`` with ``asyncio.run`` and never closes it.

Every such script ended with asyncio's "Loop ... that handles pid ... is closed" and a traceback
("Exception ignored in: BaseSubprocessTransport.__del__ ... RuntimeError: Event loop is closed")
for each sandbox process its ended loops left (the live sandbox, the standby bash, the python
interpreter): nothing a user can act on. Those processes are now ended at interpreter exit, quietly.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ._live_support import host_pids_with
from .test_live_event_loops import MARK

SCRIPT = textwrap.dedent(
    f"""
    import asyncio, sys
    from computer import Workspace
    from computer.runtime import PythonBackend, ShellBackend

    ws = Workspace(sys.argv[1], backends=[ShellBackend(), PythonBackend()])

    async def run(source, backend=None):
        return await (await ws.runtime.exec(source, backend=backend, timeout=60)).result()

    asyncio.run(ws.fs.mkdir("/workspace", recursive=True))
    print(asyncio.run(run("{MARK} & echo one")).stdout, end="")
    print(asyncio.run(run("echo two")).stdout, end="")
    print(asyncio.run(run("print('three')", backend="python")).stdout, end="")
    """
)


@pytest.mark.parametrize("close", [False, True])
def test_a_script_that_never_closes_its_workspace_ends_quietly(tmp_path: Path, close: bool) -> None:
    script = SCRIPT + ("asyncio.run(ws.close())\n" if close else "")
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "w.db")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[2],
    )
    assert (done.returncode, done.stdout) == (0, "one\ntwo\nthree\n"), done.stderr
    assert done.stderr == ""
    assert host_pids_with(MARK) == []
