"""``kill`` of a program that prints steadily. The output loops waited with ``asyncio.wait_for``,
which on Python 3.11 drops a cancellation that comes as the awaited event is set (gh-86296): a program
printing every 0.5 ms was often not killed at all (it ran on to its timeout, or forever), on every
backend, live or not."""

from __future__ import annotations

import asyncio

import pytest

import computer
from computer.runtime import PythonBackend, ShellBackend

_SHELL = "i=0; while true; do i=$((i+1)); echo line $i xxxxxxxxxxxxxxxxxxxxxxxx; sleep 0.0005; done"
_PYTHON = (
    "import time\ni = 0\nwhile True:\n    i += 1\n    print('line', i, 'x' * 40, flush=True)\n"
    "    time.sleep(0.0005)\n"
)


@pytest.mark.parametrize("live", [True, False], ids=["live", "per-call"])
@pytest.mark.parametrize("backend", ["shell", "python"])
async def test_kill_ends_a_program_that_prints_steadily(backend: str, live: bool) -> None:
    made = ShellBackend(live=live) if backend == "shell" else PythonBackend(live=live)
    if live and not made.live:
        pytest.skip("no live sandboxes here")
    async with computer.Workspace(backends=[made]) as ws:
        await ws.fs.mkdir("/workspace")
        for _ in range(5):  # the race is frequent, not certain
            handle = await ws.runtime.exec(_SHELL if backend == "shell" else _PYTHON, timeout=120)
            async for snapshot in handle:  # well into its printing
                if "line 200 " in snapshot.stdout:
                    break
            await handle.kill()
            result = await asyncio.wait_for(handle.result(), 30)  # it ran on to its timeout (120 s)
            assert (result.status, result.exit_code) == ("cancelled", 137), result
