"""One workspace reached from several worker processes, each through its own ``get_workspace`` client:
a run started in one worker is found, awaited and killed from another; a stream keeps the version it
opened while another worker rewrites the file; writes, renames and deletes of the same paths from
several workers leave a consistent tree."""

from __future__ import annotations

import asyncio
import errno

import ray

import computer
from computer.config import Settings
from computer.tools import create_tools

SIZE = 3 * 1024 * 1024 + 7  # more than one stream piece (512 KiB) and one storage chunk


@ray.remote(num_cpus=0)
def _start(name: str, command: str) -> str:
    async def go() -> str:
        async with computer.get_workspace(name) as ws:
            run = await ws.runtime.exec(command, backend="shell")
            return run.id

    return asyncio.run(go())


@ray.remote(num_cpus=0)
def _await_or_kill(name: str, exec_id: str, kill: bool) -> tuple[str, str]:
    async def go() -> tuple[str, str]:
        async with computer.get_workspace(name) as ws:
            run = await ws.runtime.get_exec(exec_id)
            if kill:
                await ws.runtime.kill_exec(exec_id)
            result = await asyncio.wait_for(run.result(), 60)
            return result.status, result.stdout

    return asyncio.run(go())


async def test_a_run_started_in_one_worker_is_awaited_and_killed_from_another(
    cluster: Settings, name: str
) -> None:
    done = await _start.remote(name, "sleep 0.2; echo from-a > /workspace/a.txt; echo ran")
    assert await _await_or_kill.remote(name, done, False) == ("completed", "ran\n")
    long = await _start.remote(name, "sleep 60; echo never > /workspace/never.txt")
    status, _ = await _await_or_kill.remote(name, long, True)
    assert status == "cancelled"
    async with computer.get_workspace(name) as ws:
        assert (await (await ws.runtime.get_exec(long)).result()).status == "cancelled"
        assert await ws.fs.read_text("/workspace/a.txt") == "from-a\n"
        assert not await ws.fs.exists("/workspace/never.txt")


@ray.remote(num_cpus=0)
def _rewrite(name: str, path: str, byte: bytes) -> None:
    async def go() -> None:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file(path, byte * SIZE)

    asyncio.run(go())


async def test_a_stream_keeps_its_version_while_another_worker_rewrites_the_file(
    cluster: Settings, name: str
) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/big", b"A" * SIZE)
        stream = ws.fs.stream("/big")
        first = await anext(stream)
        await _rewrite.remote(name, "/big", b"B")  # done before the stream goes on
        rest = b"".join([piece async for piece in stream])
        assert first + rest == b"A" * SIZE  # never a mix of the two versions
        assert b"".join([piece async for piece in ws.fs.stream("/big")]) == b"B" * SIZE


@ray.remote(num_cpus=0)
def _churn(name: str, worker: int, rounds: int) -> list[str]:
    """Write (tool, parents made), rename the directory, edit and delete (tool) the same paths as the
    other workers; returns the errors no race explains."""

    async def go() -> list[str]:
        unexpected: list[str] = []
        async with computer.get_workspace(name) as ws:
            tools = create_tools(ws)
            for n in range(rounds):
                k = n % 2
                text = f"{worker}:{n}\n" * 50
                written = await tools["write"].run({"path": f"/w/d{k}/sub/f{worker}.txt", "content": text})
                unexpected += [f"write: {written['error']}"] if "error" in written else []
                try:
                    await ws.fs.rename(f"/w/d{k}", f"/w/e{k}", overwrite=True)
                except OSError as exc:  # gone already, or the other name holds files
                    if exc.errno not in (errno.ENOENT, errno.EEXIST, errno.ENOTEMPTY):
                        unexpected.append(f"rename: {exc!r}")
                edit = {"oldText": text, "newText": "edited\n"}
                await tools["edit"].run({"path": f"/w/e{k}/sub/f{worker}.txt", "edits": [edit]})
                deleted = await tools["delete"].run({"path": f"/w/e{k}", "recursive": True})
                unexpected += [f"delete: {deleted['error']}"] if "error" in deleted else []
        return unexpected

    return asyncio.run(go())


async def test_writes_renames_and_deletes_of_the_same_paths_from_several_workers_stay_consistent(
    cluster: Settings, name: str
) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/w")
        assert await asyncio.gather(*[_churn.remote(name, i, 10) for i in range(4)]) == [[]] * 4
        for entry in await ws.fs.find("/"):  # every entry the walk finds can be read
            if entry.type == "dir":
                await ws.fs.readdir(entry.path)
            else:
                await ws.fs.read_file(entry.path)
        for left in await ws.fs.readdir("/w"):  # what the last round left: removable whole
            await ws.fs.rm(f"/w/{left.name}", recursive=True)
        assert await ws.fs.readdir("/w") == []
        assert (await ws.handle.stats.remote())["locks_held"] == 0
