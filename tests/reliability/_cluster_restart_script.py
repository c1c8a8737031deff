"""Run in a subprocess by ``test_cluster_restart``: its own Ray cluster, started, used, stopped.

``write`` fills several workspaces and prints their digests; ``read`` (a fresh cluster on the same data
directory) prints the digests it finds. Usage: ``python _cluster_restart_script.py write|read DATA_DIR``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import tempfile

import ray

import computer

WORKSPACES = [f"restart-{i}" for i in range(2)]


async def write() -> dict[str, str]:
    digests = {}
    for n, name in enumerate(WORKSPACES):
        async with computer.get_workspace(name) as ws:
            await ws.fs.mkdir("/workspace/src", recursive=True)
            for i in range(10):
                await ws.fs.write_file(f"/workspace/src/{i}.txt", f"{name} file {i}\n" * (i + 1))
            await ws.fs.write_file("/workspace/big.bin", bytes(range(256)) * 4096 * (n + 1))  # > 1 chunk
            await ws.fs.rename("/workspace/src/0.txt", "/workspace/renamed.txt")
            await ws.fs.rm("/workspace/src/1.txt")
            await ws.fs.symlink("/workspace/renamed.txt", "/workspace/link")
            digests[name] = await digest(ws)
    return digests


async def read() -> dict[str, str]:
    digests = {}
    for name in WORKSPACES:
        async with computer.get_workspace(name) as ws:
            digests[name] = await digest(ws)
            await ws.fs.write_file("/workspace/after-restart", b"writable")  # the new owner may write
    return digests


async def digest(ws: object) -> str:
    h = hashlib.sha256()
    for path in await ws.fs.ls("/"):  # type: ignore[attr-defined]
        h.update(path.encode() + b"\0" + await ws.fs.read_file(path) + b"\0")  # type: ignore[attr-defined]
    h.update((await ws.fs.readlink("/workspace/link")).encode())  # type: ignore[attr-defined]
    return h.hexdigest()


def main() -> None:
    mode, data_dir = sys.argv[1], sys.argv[2]
    ray.init(
        include_dashboard=False,
        num_cpus=2,
        object_store_memory=128 * 1024 * 1024,
        _temp_dir=tempfile.mkdtemp(prefix="rcr-", dir="/tmp"),
        log_to_driver=False,
    )
    try:
        computer.init(data_dir=data_dir, shell_pool_size=1, python_pool_size=1)
        result = asyncio.run(write() if mode == "write" else read())
        print(json.dumps(result))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
