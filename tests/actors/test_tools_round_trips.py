"""``create_tools(client)`` forwards each file tool call whole to the owner: one RPC per call, the same
results and model output as the tools run client-side over the fs surface, and a cancelled call leaves
no lease (nor a waiting request) behind on the owner."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import ray

import computer
from computer.actors import NAMESPACE, actor_name
from computer.config import Settings
from computer.tools import Tool, create_tools
from computer.tools._forward import FORWARDED_TOOLS


class _NoRunner:
    """The client's surface without ``run_tool``: tools built over it run client-side (the old path)."""

    def __init__(self, ws: Any) -> None:
        self.id, self.fs, self.locks, self.runtime, self.assets = (
            ws.id,
            ws.fs,
            ws.locks,
            ws.runtime,
            ws.assets,
        )

    async def close(self) -> None:
        return None


async def _rpcs(ws: Any) -> int:
    stats: dict[str, Any] = await ws.handle.stats.remote()
    return int(stats["rpcs"])


async def test_each_file_tool_call_is_one_owner_rpc(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace", recursive=True)
        tools = create_tools(ws)
        calls: list[tuple[str, dict[str, Any]]] = [
            ("write", {"path": "/workspace/a/notes.md", "content": "alpha\nbeta\n"}),
            ("read", {"path": "/workspace/a/notes.md"}),
            ("edit", {"path": "/workspace/a/notes.md", "edits": [{"oldText": "beta", "newText": "gamma"}]}),
            ("grep", {"query": "gamma"}),
            ("find", {"pattern": "**/*.md"}),
            ("ls", {"path": "/workspace/a"}),
            ("delete", {"path": "/workspace/a", "recursive": True}),
            ("read", {"path": "/workspace/a/notes.md"}),  # a failed call: one RPC as well
        ]
        for tool, args in calls:
            before = await _rpcs(ws)
            result = await tools[tool].run(args)
            assert await _rpcs(ws) - before == 1, (tool, args, result)
        # Calls that fail validation or a file-free check are answered without a round trip.
        before = await _rpcs(ws)
        assert "error" in await tools["read"].run({"path": "/x", "offset": 0})
        assert "error" in await tools["read"].run({"path": "/x", "byteOffset": 5})
        assert "error" in await tools["write"].run({"path": "relative.txt", "content": "x"})
        assert "error" in await tools["write"].run({"path": "/big", "content": "x" * (2 * 2**20 + 1)})
        assert "error" in await tools["edit"].run({"path": "/x", "edits": []})
        assert "error" in await tools["edit"].run({"path": "/x", "edits": [{"oldText": "", "newText": "y"}]})
        assert "error" in await tools["grep"].run({"query": "q", "context": 99})
        assert await _rpcs(ws) == before


async def test_tools_run_client_side_resolve_a_path_in_one_call_whatever_its_depth(
    cluster: Settings, name: str
) -> None:
    """Tools over a client surface without ``run_tool`` (a wrapper, here the agent's guard) run here:
    the path locks and the ``/.computer`` and agent-state guards each resolve a path's links with one
    ``realpath`` call, not a ``readlink`` per segment (a write 7 segments deep: 26 owner RPCs, ~53 ms;
    now as many as a write at the top, 5)."""
    from computer.agent._guard import GuardedWorkspace

    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace/a/b/c/d/e/f", recursive=True)
        await ws.fs.symlink("/workspace/a/b/c", "/workspace/c")
        tools = create_tools(GuardedWorkspace(ws))
        counts = {}
        for path in ("/workspace/x.txt", "/workspace/a/b/c/d/e/f/x.txt", "/workspace/c/d/e/f/y.txt"):
            for tool, args in [
                ("write", {"path": path, "content": "x"}),
                ("edit", {"path": path, "edits": [{"oldText": "x", "newText": "y"}]}),
                ("delete", {"path": path}),
            ]:
                before = await _rpcs(ws)
                result = await tools[tool].run(args)
                assert "error" not in result, result
                counts.setdefault(tool, set()).add(await _rpcs(ws) - before)
        assert all(len(seen) == 1 for seen in counts.values()), counts
        # the guards still see through the link to the journal
        await ws.fs.symlink("/.computer", "/workspace/a/b/c/d/sys")
        refused = await tools["write"].run({"path": "/workspace/c/d/sys/exec/x.json", "content": "{}"})
        assert "/.computer is the workspace's own" in refused["error"]


def _comparable(result: dict[str, Any]) -> dict[str, Any]:
    """Drop what differs between two workspaces by time alone (ls mtimes)."""
    result = copy.deepcopy(result)
    for entry in result.get("entries", ()):
        entry.pop("mtime", None)
    return result


SCENARIO: list[tuple[str, dict[str, Any]]] = [
    ("write", {"path": "/workspace/src/app.py", "content": "def main():\n    print(“hi”)  \n    return 1\n"}),
    ("write", {"path": "/workspace/src/util.py", "content": "x = 1\r\ny = 2\r\n"}),
    ("write", {"path": "/workspace/docs/readme.md", "content": "".join(f"line {i}\n" for i in range(50))}),
    ("read", {"path": "/workspace/src/app.py"}),
    ("read", {"path": "/workspace/docs/readme.md", "limit": 5}),
    ("read", {"path": "/workspace/docs/readme.md", "offset": 6, "byteOffset": 35, "limit": 3}),
    ("read", {"path": "/workspace/docs/readme.md", "offset": 99}),
    ("read", {"path": "/workspace/missing.txt"}),
    (
        "edit",
        {"path": "/workspace/src/app.py", "edits": [{"oldText": 'print("hi")', "newText": "print('bye')"}]},
    ),
    ("edit", {"path": "/workspace/src/util.py", "oldText": "y = 2", "newText": "y = 3"}),
    ("edit", {"path": "/workspace/src/util.py", "edits": '[{"oldText": "x = 1", "newText": "x = 0"}]'}),
    ("edit", {"path": "/workspace/docs/readme.md", "edits": [{"oldText": "line", "newText": "row"}]}),
    ("edit", {"path": "/workspace/src/app.py", "edits": [{"oldText": "absent", "newText": "z"}]}),
    ("edit", {"path": "/workspace/src/app.py", "edits": [{"oldText": "return 1", "newText": "return 1"}]}),
    ("edit", {"path": "/workspace/nope.py", "edits": [{"oldText": "a", "newText": "b"}]}),
    ("edit", {"path": "/workspace/src", "edits": [{"oldText": "a", "newText": "b"}]}),
    ("grep", {"query": "row|x", "regex": True, "context": 1, "limit": 3}),
    ("grep", {"query": "LINE 4", "ignoreCase": True, "include": "**/*.md", "offset": 2}),
    ("grep", {"query": "(", "regex": True}),
    ("find", {"pattern": "**/*.py"}),
    ("find", {"pattern": "", "exclude": "docs/**", "limit": 2}),
    ("ls", {"path": "/workspace/src"}),
    ("ls", {"path": "/workspace/nothing"}),
    ("write", {"path": "/workspace/src", "content": "x"}),
    ("delete", {"path": "/workspace/src"}),
    ("delete", {"path": "/workspace/src", "recursive": True}),
    ("delete", {"path": "/workspace/never"}),
    ("read", {"path": "/workspace/src/app.py"}),
    ("write", {"path": "relative", "content": "x"}),
    ("read", {"path": "/workspace/docs/readme.md", "byteOffset": 3}),
    ("edit", {"path": "/workspace/docs/readme.md", "edits": []}),
    ("nothing", {}),
]


async def test_forwarded_tools_match_client_side_tools(cluster: Settings, name: str) -> None:
    options: dict[str, Any] = {
        "read": {"max_lines": 20, "include_line_numbers": True},
        "edit": {"max_bytes": 4096},
    }
    async with (
        computer.get_workspace(name) as ws,
        computer.get_workspace(name + "-b") as other,
    ):
        try:
            forwarded = create_tools(ws, **options)
            local = create_tools(_NoRunner(other), **options)
            assert set(forwarded) == set(local) and FORWARDED_TOOLS <= set(forwarded)
            for key in forwarded:
                f, lo = forwarded[key], local[key]
                assert (f.name, f.description, f.parameters, f.mutating) == (
                    lo.name,
                    lo.description,
                    lo.parameters,
                    lo.mutating,
                )
            for tool, args in SCENARIO:
                if tool not in forwarded:
                    continue
                a: Tool = forwarded[tool]
                got, want = await a.run(args), await local[tool].run(args)
                assert _comparable(got) == _comparable(want), (tool, args)
                if tool != "ls":
                    assert a.to_model_output(got) == local[tool].to_model_output(want)
            # Both workspaces end with the same files and bytes.
            assert await ws.fs.find("/workspace") == await other.fs.find("/workspace")
            readme = "/workspace/docs/readme.md"
            assert await ws.fs.read_file(readme) == await other.fs.read_file(readme)
            # And the forwarded results are exactly those of the owner's own tools.
            args = {"path": readme, "limit": 2}
            assert await forwarded["read"].run(args) == await ws.run_tool(
                "read", args, options={"read": {"max_lines": 20, "include_line_numbers": True}}
            )
        finally:
            try:
                ray.kill(ray.get_actor(actor_name(name + "-b"), namespace=NAMESPACE))
            except ValueError:
                pass


async def test_a_cancelled_forwarded_edit_leaves_no_lease_behind(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/f.txt", "alpha\n")
        tools = create_tools(ws)
        async with ws.locks.hold(["/f.txt"]):
            editing = asyncio.ensure_future(
                tools["edit"].run({"path": "/f.txt", "edits": [{"oldText": "alpha", "newText": "beta"}]})
            )
            for _ in range(200):  # until the owner-side edit waits for our lease
                if (await ws.handle.stats.remote())["locks_waiting"] == 1:
                    break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError("the forwarded edit never reached the owner's lock table")
            editing.cancel()
            for _ in range(200):  # the cancel reaches the owner: its request is withdrawn
                if (await ws.handle.stats.remote())["locks_waiting"] == 0:
                    break
                await asyncio.sleep(0.02)
            stats = await ws.handle.stats.remote()
            assert (stats["locks_waiting"], stats["locks_held"]) == (0, 1)  # only our own hold
        stats = await ws.handle.stats.remote()
        assert (stats["locks_waiting"], stats["locks_held"], stats["inflight"]) == (0, 0, 0)
        assert await ws.fs.read_text("/f.txt") == "alpha\n"  # the withdrawn edit never ran
        # Cancelled at random points of a running edit (lock held on the owner): nothing stays held.
        await ws.fs.write_file("/g.txt", "x" * 500_000 + "\nend\n")
        for delay in (0.0, 0.001, 0.003, 0.006, 0.01, 0.02):
            task = asyncio.ensure_future(
                tools["edit"].run({"path": "/g.txt", "edits": [{"oldText": "end", "newText": "end"}]})
            )
            await asyncio.sleep(delay)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for _ in range(200):
            stats = await ws.handle.stats.remote()
            if (stats["locks_waiting"], stats["locks_held"], stats["inflight"]) == (0, 0, 0):
                break
            await asyncio.sleep(0.05)
        assert (stats["locks_waiting"], stats["locks_held"], stats["inflight"]) == (0, 0, 0)
        after = await tools["write"].run({"path": "/g.txt", "content": "free\n"})
        assert after == {"path": "/g.txt", "bytesWritten": 5}
