"""Chunk-level sync (issue 16: a page changed inside a large file moves one chunk, not the file):
``file_chunks``, ``missing_chunks``, ``read_chunks``, ``write_chunks`` and pieces in ``commit_batch``."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import random
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from computer.storage import ChunkRef, FileSystem

from .test_sync_support import _chunk_refs_match_the_files

K = 512 * 1024


def _refs(data: bytes) -> list[ChunkRef]:
    return [
        ChunkRef(hashlib.sha256(data[i : i + K]).hexdigest(), len(data[i : i + K]))
        for i in range(0, len(data), K)
    ]


async def test_file_chunks_are_fixed_512k_pieces_by_sha256(fs: FileSystem) -> None:
    data = os.urandom(2 * K + K // 2)
    await fs.write_file("/f", data)
    await fs.symlink("/f", "/l")
    assert fs.file_chunks("/f") == fs.file_chunks("/l") == _refs(data)
    await fs.write_file("/small", b"abc")
    assert fs.file_chunks("/small") == _refs(b"abc")
    await fs.write_file("/empty", b"")
    assert fs.file_chunks("/empty") == []
    with pytest.raises(IsADirectoryError):
        fs.file_chunks("/")
    with pytest.raises(FileNotFoundError):
        fs.file_chunks("/missing")


async def test_a_page_changed_in_place_moves_one_chunk(fs: FileSystem) -> None:
    """The 100 MB SQLite case in small: a 4 KiB page changes; the receiver gets one chunk's bytes and
    references the rest, reading none of them."""
    old = bytearray(os.urandom(8 * K))
    await fs.write_file("/db", bytes(old))
    new = bytearray(old)
    new[5 * K + 4096 : 5 * K + 8192] = os.urandom(4096)
    theirs = _refs(bytes(new))
    ours = fs.file_chunks("/db")
    changed = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
    assert changed == [5]
    assert fs.missing_chunks(theirs) == [theirs[5].hash]
    before = fs.stats()
    pieces: list[bytes | ChunkRef] = [
        bytes(new[i * K : (i + 1) * K]) if i in changed else r for i, r in enumerate(theirs)
    ]
    await fs.write_chunks("/db", pieces, mtime=42)
    after = fs.stats()
    assert after["chunk_reads"] == before["chunk_reads"]  # no unchanged chunk was read
    assert after["chunks"] == before["chunks"]  # the old chunk 5 went, the new one came
    assert await fs.read_file("/db") == bytes(new)
    assert fs.file_chunks("/db") == theirs and (await fs.stat("/db")).mtime == 42
    _chunk_refs_match_the_files(fs)


async def test_read_chunks_serves_by_hash_and_leaves_out_unknown_ones(fs: FileSystem) -> None:
    data = os.urandom(K + 10)
    await fs.write_file("/f", data)
    refs = fs.file_chunks("/f")
    unknown = "00" * 32
    got = fs.read_chunks([refs[1], refs[0].hash, unknown])
    assert got == {refs[0].hash: data[:K], refs[1].hash: data[K:]}
    assert fs.missing_chunks([unknown, refs[0], unknown]) == [unknown]
    with pytest.raises(OSError) as bad:
        fs.read_chunks(["not hex"])
    assert bad.value.errno == errno.EINVAL


async def test_pieces_off_chunk_boundaries_are_recut(fs: FileSystem) -> None:
    a, b = os.urandom(K), os.urandom(1000)
    await fs.write_file("/src", a + b)
    ra, rb = fs.file_chunks("/src")
    # bytes first: the full chunk no longer starts on a boundary; a short chunk followed by more
    await fs.write_chunks("/x", [b"head", ra, rb, b"tail", rb.hash])
    assert await fs.read_file("/x") == b"head" + a + b + b"tail" + b
    assert [r.size for r in fs.file_chunks("/x")] == [K, len(b"head") + 1000 + 4 + 1000]
    await fs.write_chunks("/y", [rb])  # a short chunk as the whole file: referenced as it is
    assert fs.file_chunks("/y") == [rb]
    _chunk_refs_match_the_files(fs)


async def test_unknown_or_mismatched_chunks_are_einval_and_change_nothing(fs: FileSystem) -> None:
    await fs.write_file("/f", b"keep")
    (ref,) = fs.file_chunks("/f")
    rev = fs.rev
    with pytest.raises(OSError) as unknown:
        await fs.write_chunks("/f", [b"x", "ab" * 32])
    assert unknown.value.errno == errno.EINVAL and unknown.value.filename == "/f"
    with pytest.raises(OSError) as size:
        await fs.write_chunks("/f", [ChunkRef(ref.hash, 99)])
    assert size.value.errno == errno.EINVAL
    with pytest.raises(OSError) as kind:
        await fs.write_chunks("/f", [12])  # type: ignore[list-item]
    assert kind.value.errno == errno.EINVAL
    assert await fs.read_file("/f") == b"keep" and fs.rev == rev
    _chunk_refs_match_the_files(fs)


async def test_async_pieces_keep_their_chunks_while_the_source_waits(fs: FileSystem) -> None:
    """A streamed write pins the chunks it names: the only file holding one may go meanwhile."""
    data = os.urandom(2 * K)
    await fs.write_file("/only", data)
    refs = fs.file_chunks("/only")

    async def pieces() -> AsyncIterator[bytes | ChunkRef]:
        yield refs[0]
        await fs.rm("/only")  # chunk 0 has no reference now; chunk 1 is gone
        await asyncio.sleep(0)
        yield data[K:]

    await fs.write_chunks("/copy", pieces(), mode=0o600)
    assert await fs.read_file("/copy") == data and (await fs.stat("/copy")).mode == 0o600
    _chunk_refs_match_the_files(fs)


async def test_commit_batch_takes_pieces(fs: FileSystem) -> None:
    data = os.urandom(3 * K)
    await fs.mkdir("/w")
    await fs.write_file("/w/big", data)
    refs = fs.file_chunks("/w/big")
    changed = data[:K] + os.urandom(K) + data[2 * K :]
    result = fs.commit_batch({"/w/big": [refs[0], changed[K : 2 * K], refs[2]], "/w/new": [refs[2].hash]})
    assert result.applied == ["/w/big", "/w/new"]
    assert await fs.read_file("/w/big") == changed
    assert await fs.read_file("/w/new") == data[2 * K :]
    _chunk_refs_match_the_files(fs)


async def test_the_quota_counts_referenced_chunks() -> None:
    fs = FileSystem.open(None, max_bytes=3 * K)
    try:
        await fs.write_file("/a", os.urandom(2 * K))
        refs = fs.file_chunks("/a")
        with pytest.raises(OSError) as full:
            await fs.write_chunks("/b", [refs[0], refs[1]])
        assert full.value.errno == errno.ENOSPC
        await fs.write_chunks("/a", [refs[0]])  # shrinking in place fits
        assert (await fs.stat("/a")).size == K
    finally:
        fs.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=2 * K + 3), min_size=1, max_size=3),
    seed=st.integers(min_value=0, max_value=2**32),
    streamed=st.booleans(),
)
def test_any_mix_of_bytes_and_chunks_assembles_the_same_content(
    sizes: list[int], seed: int, streamed: bool
) -> None:
    """Sources of random sizes are cut into pieces at random points; each piece is sent as bytes or,
    where it is a whole chunk of a source, as that chunk's hash. The result is the concatenation."""
    rng = random.Random(seed)

    async def go() -> None:
        fs = FileSystem.open(None)
        try:
            sources = [rng.randbytes(n) for n in sizes]
            pieces: list[bytes | ChunkRef | str] = []
            for i, src in enumerate(sources):
                await fs.write_file(f"/s{i}", src)
                for j, ref in enumerate(fs.file_chunks(f"/s{i}")):
                    chunk = src[j * K : j * K + ref.size]
                    choice = rng.randrange(3)
                    if choice == 0:
                        pieces.append(ref)
                    elif choice == 1:
                        pieces.append(ref.hash)
                    else:
                        cut = rng.randrange(len(chunk) + 1)
                        pieces += [chunk[:cut], chunk[cut:]]
            expected = b"".join(sources)
            if streamed:

                async def source() -> AsyncIterator[bytes | ChunkRef | str]:
                    for piece in pieces:
                        yield piece

                await fs.write_chunks("/out", source())
            else:
                await fs.write_chunks("/out", pieces)
            assert await fs.read_file("/out") == expected
            assert fs.file_chunks("/out") == _refs(expected)
            _chunk_refs_match_the_files(fs)
        finally:
            fs.close()

    asyncio.run(go())
