"""A program's directory rename through a pool worker (``PoolContext``: the pull crosses Ray to the
owner) is one rename in the workspace too (``computer/runtime/_pull_moves``): the files keep their
nodes, ``pulled`` names the two directories, the pull is not deferred to the dispatcher."""

from __future__ import annotations

import computer
from computer.config import Settings


async def test_a_programs_mv_of_a_tree_through_a_pool_is_one_rename(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace", recursive=True)
        made = await (
            await ws.runtime.exec("mkdir d && cd d && seq 1 50 | xargs touch", backend="shell")
        ).result()
        assert made.status == "completed", made
        before = (await ws.fs.stat("/workspace/d/7")).ino
        moved = await (await ws.runtime.exec("mv d e && echo x > e/new", backend="shell")).result()
        assert moved.status == "completed", moved
        assert moved.pulled == ["/workspace/d", "/workspace/e", "/workspace/e/new"]
        assert (await ws.fs.stat("/workspace/e/7")).ino == before
        assert not await ws.fs.exists("/workspace/d")
        seen = await (await ws.runtime.exec("ls e | wc -l; cat e/new", backend="shell")).result()
        assert seen.stdout == "51\nx\n"
