"""A client used from synchronous code, one ``asyncio.run`` per call (a script, a sync web handler).

``asyncio.run(computer.get_workspace(name))`` raised "ValueError: a coroutine was expected, got
<WorkspaceOpening ...>": what ``get_workspace`` returns was only awaitable. It is a coroutine now, so
``asyncio.run`` and ``asyncio.create_task`` take it, and the client it gives serves later loops.
"""

from __future__ import annotations

import asyncio
import json

import computer
from computer.config import Settings
from computer.tools.openai import create_openai_tools


def test_asyncio_run_of_get_workspace_gives_a_client_later_loops_use(cluster: Settings, name: str) -> None:
    ws = asyncio.run(computer.get_workspace(name))
    try:
        asyncio.run(ws.fs.mkdir("/workspace", recursive=True))
        asyncio.run(ws.fs.write_file("/workspace/a.txt", "one\n"))
        assert asyncio.run(ws.fs.read_text("/workspace/a.txt")) == "one\n"
        _, execute = create_openai_tools(ws)
        for n in range(2):
            arguments = json.dumps({"command": f"echo {n} >> a.txt; cat a.txt"})
            call = {"id": f"c{n}", "type": "function", "function": {"name": "exec", "arguments": arguments}}
            outcome = asyncio.run(execute(call))
            assert not outcome["is_error"], outcome
        assert asyncio.run(ws.fs.read_text("/workspace/a.txt")) == "one\n0\n1\n"
        handle = asyncio.run(ws.runtime.exec("echo later"))  # a run started in one loop ...
        assert asyncio.run(handle.result()).stdout == "later\n"  # ... awaited in the next
    finally:
        asyncio.run(ws.close())


async def test_get_workspace_is_a_task_and_an_unused_opening_leaves_nothing(
    cluster: Settings, name: str
) -> None:
    opening = computer.get_workspace(name)
    opening.close()  # never started: a no-op, no "coroutine was never awaited"
    ws = await asyncio.create_task(computer.get_workspace(name))
    try:
        await ws.fs.mkdir("/workspace", recursive=True)
        assert await ws.fs.exists("/workspace")
    finally:
        await ws.close()
