"""Tools built from clients share the owner's lock table: concurrent read-then-edit loses no update."""

from __future__ import annotations

import asyncio

import ray

import computer
from computer.config import Settings
from computer.tools import create_tools


@ray.remote(num_cpus=0)
def _edit_increments(name: str, times: int) -> tuple[int, int]:
    """Increment ``count=N`` ``times`` times through the read and edit tools; returns (done, conflicts)."""

    async def go() -> tuple[int, int]:
        done = conflicts = 0
        async with computer.get_workspace(name) as ws:
            tools = create_tools(ws)
            while done < times:
                read = await tools["read"].run({"path": "/counter.txt"})
                line = read["content"].strip()
                value = int(line.split("=")[1])
                edit = await tools["edit"].run(
                    {
                        "path": "/counter.txt",
                        "edits": [{"oldText": f"{line}\n", "newText": f"count={value + 1}\n"}],
                    }
                )
                if "error" in edit:
                    conflicts += 1  # another worker edited in between: read again
                else:
                    done += 1
        return done, conflicts

    return asyncio.run(go())


async def test_three_workers_editing_through_tools_lose_no_update(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        tools = create_tools(ws)
        assert "error" not in await tools["write"].run({"path": "/counter.txt", "content": "count=0\n"})
        results = await asyncio.gather(*[_edit_increments.remote(name, 10) for _ in range(3)])
        assert [done for done, _ in results] == [10, 10, 10]
        assert await ws.fs.read_text("/counter.txt") == "count=30\n"


async def test_client_tools_match_owner_tool_names(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        tools = create_tools(ws)
        assert {"read", "ls", "find", "grep", "write", "edit", "delete", "publish"} <= set(tools)
        assert ("exec" in tools) == bool(ws.runtime.backends())


async def test_run_tool_pushes_a_whole_tool_call_to_the_owner(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        written = await ws.run_tool("write", {"path": "/workspace/notes/todo.txt", "content": "one\ntwo\n"})
        assert written == {"path": "/workspace/notes/todo.txt", "bytesWritten": 8}
        edited = await ws.run_tool(
            "edit", {"path": "/workspace/notes/todo.txt", "edits": [{"oldText": "two", "newText": "three"}]}
        )
        assert edited["editsApplied"] == 1
        assert await ws.fs.read_text("/workspace/notes/todo.txt") == "one\nthree\n"
        page = await ws.run_tool(
            "read", {"path": "/workspace/notes/todo.txt", "limit": 1}, options={"read": {"max_lines": 5}}
        )
        assert page["content"] == "one" and page["nextOffset"] == 2
        assert "error" in await ws.run_tool("read", {"path": "/missing"})
        assert await ws.run_tool("nope", {}) == {"error": "unknown tool 'nope'"}


async def test_run_tool_and_client_tools_share_one_lock_table(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/f.txt", "a\n")
        async with ws.locks.hold(["/f.txt"]):
            pushed = asyncio.ensure_future(ws.run_tool("write", {"path": "/f.txt", "content": "b\n"}))
            done, _ = await asyncio.wait({pushed}, timeout=0.3)
            assert not done  # the owner-side write waits for the client's lease
        assert await asyncio.wait_for(pushed, 10) == {"path": "/f.txt", "bytesWritten": 2}
        assert await ws.fs.read_text("/f.txt") == "b\n"
