"""Large data crosses Ray in pieces: streamed reads and chunked uploads."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator, Iterator

import pytest

import computer
from computer.client import WorkspaceClient
from computer.config import Settings

MiB = 1024 * 1024


async def _owner_streams(ws: WorkspaceClient) -> int:
    stats = await ws.handle.stats.remote()
    return int(stats["streams"])


async def _stopped_streams(ws: WorkspaceClient) -> int:
    stats = await ws.handle.stats.remote()
    return int(stats["streams_stopped"])


async def test_five_megabytes_stream_back_in_pieces_of_at_most_512_kib(cluster: Settings, name: str) -> None:
    data = os.urandom(5 * MiB + 123)
    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/big.bin", data)
        pieces = [piece async for piece in ws.fs.stream("/big.bin")]
        assert b"".join(pieces) == data
        assert await _stopped_streams(ws) == 0
        assert max(len(p) for p in pieces) <= 512 * 1024
        assert len(pieces) >= 11


async def test_stream_range_returns_exactly_the_requested_bytes(cluster: Settings, name: str) -> None:
    data = os.urandom(2 * MiB)
    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/r.bin", data)
        offset, length = 512 * 1024 - 10, 700 * 1024
        got = b"".join([p async for p in ws.fs.stream("/r.bin", offset=offset, length=length)])
        assert got == data[offset : offset + length]


async def test_stream_of_a_missing_file_raises_file_not_found(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        with pytest.raises(FileNotFoundError) as info:
            async for _ in ws.fs.stream("/missing"):
                pass
        assert info.value.filename == "/missing"


async def test_stopping_a_stream_early_cancels_it_on_the_owner(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/big.bin", os.urandom(24 * MiB))
        stream = ws.fs.stream("/big.bin")
        first = await anext(stream)
        assert len(first) == 512 * 1024
        assert await _owner_streams(ws) == 1  # held back by backpressure, not finished
        await stream.aclose()  # type: ignore[attr-defined]
        for _ in range(200):
            if await _owner_streams(ws) == 0:
                break
            await asyncio.sleep(0.05)
        assert await _owner_streams(ws) == 0
        assert await _stopped_streams(ws) == 1


async def test_breaking_out_of_a_stream_loop_cancels_it(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/big.bin", os.urandom(24 * MiB))
        async for _ in ws.fs.stream("/big.bin"):
            break
        for _ in range(200):
            if await _owner_streams(ws) == 0:
                break
            await asyncio.sleep(0.05)
        assert await _owner_streams(ws) == 0
        assert await _stopped_streams(ws) == 1


async def test_iterable_of_odd_pieces_uploads_whole(cluster: Settings, name: str) -> None:
    pieces = [b"a", os.urandom(700 * 1024), b"bcd", os.urandom(600 * 1024), b"", b"z"]

    def gen() -> Iterator[bytes]:
        yield from pieces

    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/up.bin", gen(), mode=0o600)
        assert await ws.fs.read_file("/up.bin") == b"".join(pieces)
        assert (await ws.fs.stat("/up.bin")).mode & 0o777 == 0o600


async def test_async_iterable_upload_and_digest(cluster: Settings, name: str) -> None:
    chunk = os.urandom(300 * 1024)

    async def agen() -> AsyncIterator[bytes]:
        for _ in range(7):
            yield chunk

    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/a.bin", agen())
        got = hashlib.sha256()
        async for piece in ws.fs.stream("/a.bin"):
            got.update(piece)
        assert got.hexdigest() == hashlib.sha256(chunk * 7).hexdigest()


async def test_failed_upload_raises_the_owner_error_and_leaves_nothing(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        with pytest.raises(FileNotFoundError):
            await ws.fs.write_file("/no/parent.bin", iter([os.urandom(600 * 1024), b"x"]))
        assert not await ws.fs.exists("/no")
        stats = await ws.handle.stats.remote()
        assert stats["uploads"] == 0


async def test_upload_aborted_by_a_failing_source_commits_nothing(cluster: Settings, name: str) -> None:
    def broken() -> Iterator[bytes]:
        yield os.urandom(600 * 1024)
        raise RuntimeError("source failed")

    async with computer.get_workspace(name) as ws:
        await ws.fs.write_file("/f.bin", b"old")
        with pytest.raises(RuntimeError, match="source failed"):
            await ws.fs.write_file("/f.bin", broken())
        assert await ws.fs.read_file("/f.bin") == b"old"
