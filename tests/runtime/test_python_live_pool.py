"""The python backend's live sandbox through a Ray pool (issue 18): the workspace is pinned to the
python worker holding its sandbox, so a server a run started is reached by the next run, and a client
lists and kills its processes and ends the sandbox."""

from __future__ import annotations

import asyncio
import time

import computer
from computer.config import Settings

from .test_python_live import CLIENT, SERVER


async def test_a_python_server_outlives_its_pooled_run_and_the_client_reaches_its_processes(
    cluster: Settings, name: str
) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        started = await (await ws.runtime.exec(SERVER, backend="python")).result()
        assert started.status == "completed", (started.stderr, started.error)
        pid, port = started.value
        answer = await (await ws.runtime.exec(CLIENT, backend="python", input=port)).result()
        assert answer.value == f"hello from {pid}", (answer.stderr, answer.error)
        listed = await ws.runtime.processes(backend="python")
        assert [p.exec_id for p in listed if p.pid == pid] == [started.id]
        assert await ws.runtime.processes(backend="shell") == []  # the shell's sandbox is another one
        await ws.runtime.kill_process(pid, backend="python")
        deadline = time.monotonic() + 15
        while any(p.pid == pid for p in await ws.runtime.processes(backend="python")):
            assert time.monotonic() < deadline, "the killed server is still listed"
            await asyncio.sleep(0.1)
        assert await ws.runtime.end_sandbox(backend="python") is True
        assert await ws.runtime.end_sandbox(backend="python") is False
        again = await (await ws.runtime.exec("print(open('port.txt').read())", backend="python")).result()
        assert again.stdout == f"{port}\n"  # what the server wrote was kept
