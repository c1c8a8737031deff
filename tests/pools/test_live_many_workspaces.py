"""Many workspaces' live sandboxes through a pool, each written by a background process in its
sandbox and through ``ws.fs`` at once: every workspace ends with exactly its own files (no cross-talk
between the sandboxes a worker holds, nor between the owners a host holds)."""

from __future__ import annotations

import asyncio
import contextlib
import time

import ray

import computer
from computer.actors import NAMESPACE, actor_name
from computer.config import Settings

WORKSPACES = 12
FILES = 15
WRITER = (
    'mkdir -p bg; (for i in $(seq {files}); do echo "$OWNER $i" > bg/w_$i; sleep 0.02; done; '
    'echo "$OWNER" > bg/finished) > /dev/null 2>&1 &'
)


async def _one(name: str) -> list[object]:
    """Start the background writer, write through ``fs`` meanwhile, then compare both views."""
    async with computer.get_workspace(name) as ws:
        started = await (await ws.runtime.exec(WRITER.format(files=FILES), env={"OWNER": name})).result()
        assert started.status == "completed", started
        for i in range(FILES):
            await ws.fs.write_file(f"/workspace/f_{i}", f"{name} {i}\n")
        deadline = time.monotonic() + 60
        while not await ws.fs.exists("/workspace/bg/finished"):
            assert time.monotonic() < deadline, f"{name}: the background writer's files never arrived"
            await asyncio.sleep(0.1)
        inside = await (await ws.runtime.exec("cat f_* bg/* | cut -d' ' -f1 | sort | uniq -c")).result()
        problems: list[object] = []
        names = {e.name for e in await ws.fs.readdir("/workspace")}
        if names != {f"f_{i}" for i in range(FILES)} | {"bg"}:
            problems.append(("workspace", sorted(names)))
        written = {e.name for e in await ws.fs.readdir("/workspace/bg")}
        if written != {f"w_{i}" for i in range(1, FILES + 1)} | {"finished"}:
            problems.append(("background", sorted(written)))
        for i in range(FILES):
            if await ws.fs.read_text(f"/workspace/f_{i}") != f"{name} {i}\n":
                problems.append(("f", i))
            if await ws.fs.read_text(f"/workspace/bg/w_{i + 1}") != f"{name} {i + 1}\n":
                problems.append(("w", i + 1))
        if inside.stdout.split() != [str(2 * FILES + 1), name]:  # the sandbox's own view
            problems.append(("sandbox", inside.stdout))
        assert await ws.runtime.end_sandbox() is True
        return problems


async def test_workspaces_written_in_their_sandboxes_and_through_fs_hold_only_their_own_files(
    cluster: Settings, name: str
) -> None:
    names = [f"{name}-{k}" for k in range(WORKSPACES)]
    try:
        found = await asyncio.gather(*(_one(each) for each in names))
        assert dict(zip(names, found, strict=True)) == {each: [] for each in names}
    finally:  # owners="dedicated": one actor per name (the ``name`` fixture stops hosts and its own)
        for each in names:
            with contextlib.suppress(ValueError):
                ray.kill(ray.get_actor(actor_name(each), namespace=NAMESPACE))
