"""Filling a workspace's quota (``max_workspace_bytes``, passed by the owner to storage): a clear ENOSPC
from the client, the tools and a shell run, nothing half-written, and every earlier file intact."""

from __future__ import annotations

import errno
import uuid
from pathlib import Path
from typing import Any

import pytest
import ray
from owner_models import owner_process

import computer
from computer.tools import create_tools

QUOTA = 256 * 1024


async def test_a_full_workspace_answers_enospc_and_keeps_earlier_files(
    ray_session: Any, tmp_path: Path, record_property: Any
) -> None:
    name = f"rel-quota-{uuid.uuid4().hex[:10]}"
    computer.init(
        data_dir=tmp_path / "data", max_workspace_bytes=QUOTA, shell_pool_size=2, python_pool_size=2
    )
    try:
        async with computer.get_workspace(name) as ws:
            await ws.fs.mkdir("/workspace")
            earlier = {f"/workspace/keep{i}.txt": f"file {i}\n".encode() * 1000 for i in range(3)}
            for path, data in earlier.items():
                await ws.fs.write_file(path, data)
            used = sum(len(d) for d in earlier.values())

            with pytest.raises(OSError) as info:  # a direct write over the quota
                await ws.fs.write_file("/workspace/big.bin", b"x" * QUOTA)
            assert info.value.errno == errno.ENOSPC and info.value.filename == "/workspace/big.bin"

            with pytest.raises(OSError) as streamed:  # a streamed upload over the quota
                await ws.fs.write_file("/workspace/stream.bin", (b"y" * 65536 for _ in range(8)))
            assert streamed.value.errno == errno.ENOSPC

            tools = create_tools(ws)
            result = await tools["write"].run({"path": "/workspace/tool.txt", "content": "z" * QUOTA})
            assert "error" in result and ("space" in result["error"].lower() or "ENOSPC" in result["error"])

            run = await (
                await ws.runtime.exec(
                    "head -c 300000 /dev/zero > filler.bin; echo made > note.txt; echo made"
                )
            ).result()
            # The file past the quota is refused with its reason (SPEC 10: every path a run could not
            # apply is in ``skipped``); the run's other changes land (the whole pull was refused).
            assert (run.status, run.stdout, run.skipped) == ("completed", "made\n", ["/workspace/filler.bin"])
            assert run.skipped_reasons["/workspace/filler.bin"].startswith(
                "could not be applied: no space left"
            )
            assert not await ws.fs.exists("/workspace/filler.bin")
            assert await ws.fs.read_text("/workspace/note.txt") == "made\n"
            await ws.fs.rm("/workspace/note.txt")

            for path in ("/workspace/big.bin", "/workspace/stream.bin", "/workspace/tool.txt"):
                assert not await ws.fs.exists(path)
            for path, data in earlier.items():
                assert await ws.fs.read_file(path) == data
            # Space freed by a delete is usable again, up to the quota.
            await ws.fs.rm("/workspace/keep0.txt")
            await ws.fs.write_file("/workspace/fits.bin", b"f" * (QUOTA - used))
            assert (await ws.fs.stat("/workspace/fits.bin")).size == QUOTA - used
        record_property("quota_refusals", 4)
    finally:
        try:
            ray.kill(owner_process(computer.workspace_actor(name)))
        except Exception:
            pass
        computer.init(data_dir=tmp_path / "data")
