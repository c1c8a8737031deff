"""Interleaved operations on one store: streamed writes, streams, overwrites and removals."""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import AsyncIterator

from computer.storage import CHUNK_SIZE, FileSystem


def _content(seed: int, size: int) -> bytes:
    block = hashlib.sha256(str(seed).encode()).digest()
    return (block * (size // len(block) + 1))[:size]


async def _pieces(data: bytes, rng: random.Random) -> AsyncIterator[bytes]:
    pos = 0
    while pos < len(data):
        n = rng.choice([1, 1000, 300_000, CHUNK_SIZE + 7])
        yield data[pos : pos + n]
        pos += n
        await asyncio.sleep(0)


async def test_interleaved_streamed_writes_reads_and_removals_stay_consistent(fs: FileSystem) -> None:
    rng = random.Random(7)
    await fs.mkdir("/w")
    final: dict[str, bytes] = {}

    async def writer(i: int) -> None:
        path = f"/w/{i % 5}"
        data = _content(i, rng.choice([0, 10, CHUNK_SIZE, 2 * CHUNK_SIZE + 3]))
        await fs.write_file(path, _pieces(data, random.Random(i)))
        final[path] = data  # the last completed write wins

    async def reader(i: int) -> None:
        path = f"/w/{i % 5}"
        try:
            stream = fs.stream(path)
            got = b"".join([p async for p in stream])
        except FileNotFoundError:
            return
        # A stream yields one whole version, never a mix.
        assert got == b"" or any(got == _content(k, len(got)) for k in range(40))

    tasks = []
    for i in range(40):
        tasks.append(writer(i))
        tasks.append(reader(i))
    await asyncio.gather(*tasks)
    for path, data in final.items():
        assert await fs.read_file(path) == data
    await fs.rm("/w", recursive=True)
    stats = fs.stats()
    assert (stats["chunks"], stats["logical_bytes"], stats["files"]) == (0, 0, 0)
