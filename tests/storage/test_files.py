"""SPEC 3-4 and CASES 3-9: reading, streaming and writing files."""

from __future__ import annotations

import asyncio
import errno
import os
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from computer.storage import CHUNK_SIZE, FileSystem, FsInvalidError


async def test_empty_file_reads_empty_streams_nothing_and_has_no_chunks(fs: FileSystem) -> None:
    await fs.write_file("/empty", b"")
    assert await fs.read_file("/empty") == b""
    assert [p async for p in fs.stream("/empty")] == []
    assert (await fs.stat("/empty")).size == 0
    assert fs.stats()["chunks"] == 0


async def test_chunk_boundary_file_streams_as_two_pieces(fs: FileSystem) -> None:
    data = os.urandom(CHUNK_SIZE + 100)
    await fs.write_file("/big", data)
    pieces = [p async for p in fs.stream("/big")]
    assert [len(p) for p in pieces] == [524288, 100]
    assert b"".join(pieces) == data


async def test_range_across_chunk_boundary_is_exact(fs: FileSystem) -> None:
    data = os.urandom(CHUNK_SIZE * 2 + 10)
    await fs.write_file("/big", data)
    off, n = CHUNK_SIZE - 7, 20
    assert await fs.read_file("/big", offset=off, length=n) == data[off : off + n]
    streamed = b"".join([p async for p in fs.stream("/big", offset=off, length=n)])
    assert streamed == data[off : off + n]


async def test_stream_reads_only_overlapping_chunks(fs: FileSystem) -> None:
    data = os.urandom(CHUNK_SIZE * 3)
    await fs.write_file("/big", data)
    before = fs.stats()["chunk_reads"]
    got = b"".join([p async for p in fs.stream("/big", offset=CHUNK_SIZE * 2 + 5, length=10)])
    assert got == data[CHUNK_SIZE * 2 + 5 : CHUNK_SIZE * 2 + 15]
    assert fs.stats()["chunk_reads"] - before == 1
    before = fs.stats()["chunk_reads"]
    await fs.read_file("/big", offset=CHUNK_SIZE + 1, length=CHUNK_SIZE)
    assert fs.stats()["chunk_reads"] - before == 2


@pytest.mark.parametrize("on_disk", [False, True])
async def test_every_range_of_mixed_chunks_reads_exactly(
    fs: FileSystem, file_fs: FileSystem, on_disk: bool
) -> None:
    store = file_fs if on_disk else fs
    # raw, lz4-compressed (stored apart and inline) and short chunks: read_file copies ranges of each
    # into one buffer
    repetitive = b"".join(os.urandom(16) * 8 for _ in range(CHUNK_SIZE // 128))  # lz4: ~1/6
    data = os.urandom(CHUNK_SIZE) + repetitive + b"abcdefgh" * (CHUNK_SIZE // 8) + os.urandom(1000)
    await store.write_file("/f", data)
    kinds = set(store._store.db.conn.execute("SELECT compressed, data IS NULL FROM chunks").fetchall())
    assert {(0, 1), (1, 1), (0, 0)} <= kinds  # raw and compressed stored apart, raw inline
    ranges = [(0, None), (5, 2 * CHUNK_SIZE), (CHUNK_SIZE - 3, 10), (CHUNK_SIZE + 1, CHUNK_SIZE + 100)]
    ranges += [(2 * CHUNK_SIZE - 1, 5), (0, CHUNK_SIZE + 1), (len(data) - 1, 9), (3, CHUNK_SIZE - 6)]
    ranges += [(3 * CHUNK_SIZE - 2, 100), (2 * CHUNK_SIZE, None), (CHUNK_SIZE * 3, 1000)]
    for off, n in ranges:
        expected = data[off : None if n is None else off + n]
        got = await store.read_file("/f", offset=off, length=n)
        assert type(got) is bytes
        assert got == expected, (off, n)
        assert b"".join([p async for p in store.stream("/f", offset=off, length=n)]) == expected
    # a large read maps the file only while it runs and leaves no read transaction behind
    conn = store._store.db.conn
    mapped = conn.execute("PRAGMA mmap_size").fetchone()  # no row for an in-memory store
    assert mapped is None or mapped[0] == 0
    assert not conn.in_transaction


@pytest.mark.parametrize(
    ("offset", "length", "expected"),
    [(1, 3, b"ell"), (4, 10, b"o"), (5, None, b""), (0, 0, b""), (0, None, b"hello"), (9, 2, b"")],
)
async def test_read_ranges_on_hello(fs: FileSystem, offset: int, length: int | None, expected: bytes) -> None:
    await fs.write_file("/h", b"hello")
    assert await fs.read_file("/h", offset=offset, length=length) == expected
    assert b"".join([p async for p in fs.stream("/h", offset=offset, length=length)]) == expected


@pytest.mark.parametrize(("offset", "length"), [(-1, None), (0, -1)])
async def test_negative_range_is_einval(fs: FileSystem, offset: int, length: int | None) -> None:
    await fs.write_file("/h", b"hello")
    with pytest.raises(FsInvalidError):
        await fs.read_file("/h", offset=offset, length=length)
    with pytest.raises(FsInvalidError):
        async for _ in fs.stream("/h", offset=offset, length=length):
            pass


async def test_read_missing_and_through_missing_parent_is_enoent(fs: FileSystem) -> None:
    with pytest.raises(FileNotFoundError):
        await fs.read_file("/missing")
    with pytest.raises(FileNotFoundError):
        await fs.read_file("/no/such/file")
    with pytest.raises(FileNotFoundError):
        async for _ in fs.stream("/missing"):
            pass


async def test_read_directory_is_eisdir(fs: FileSystem) -> None:
    await fs.mkdir("/d")
    with pytest.raises(IsADirectoryError):
        await fs.read_file("/d")
    with pytest.raises(IsADirectoryError):
        await fs.read_file("/")


async def test_stream_opened_before_overwrite_yields_old_bytes(fs: FileSystem) -> None:
    old = os.urandom(CHUNK_SIZE * 2 + 3)
    await fs.write_file("/f", old)
    stream = fs.stream("/f")
    first = await stream.__anext__()
    await fs.write_file("/f", b"new content")
    await fs.rm("/f")
    rest = [p async for p in stream]
    assert first + b"".join(rest) == old
    # Once the stream is done its chunks are collected.
    assert fs.stats()["chunks"] == 0


async def test_stream_created_but_not_started_keeps_its_snapshot(fs: FileSystem) -> None:
    await fs.write_file("/f", b"old bytes")
    stream = fs.stream("/f")
    await fs.write_file("/f", b"new bytes")
    assert b"".join([p async for p in stream]) == b"old bytes"


async def test_abandoned_stream_releases_its_chunks(fs: FileSystem) -> None:
    await fs.write_file("/f", os.urandom(CHUNK_SIZE + 1))
    stream = fs.stream("/f")
    await stream.__anext__()
    await stream.aclose()  # type: ignore[attr-defined]
    await fs.rm("/f")
    assert fs.stats()["chunks"] == 0


async def test_same_content_at_two_paths_is_stored_once(fs: FileSystem) -> None:
    data = os.urandom(CHUNK_SIZE + 1000)
    await fs.write_file("/a", data)
    once = fs.stats()
    await fs.write_file("/b", data)
    twice = fs.stats()
    assert twice["chunks"] == once["chunks"] == 2
    assert twice["stored_bytes"] == once["stored_bytes"]
    assert twice["logical_bytes"] == 2 * len(data)
    await fs.rm("/a")
    assert await fs.read_file("/b") == data


async def test_compressible_chunks_are_stored_compressed(fs: FileSystem) -> None:
    await fs.write_file("/z", b"a" * CHUNK_SIZE)
    st = fs.stats()
    assert st["stored_bytes"] < CHUNK_SIZE // 10
    assert await fs.read_file("/z") == b"a" * CHUNK_SIZE


async def test_incompressible_chunks_are_stored_raw(fs: FileSystem) -> None:
    data = os.urandom(CHUNK_SIZE)
    await fs.write_file("/r", data)
    assert fs.stats()["stored_bytes"] == CHUNK_SIZE


def _odd_pieces(data: bytes) -> Iterator[bytes]:
    sizes = [1, 700 * 1024, 3, CHUNK_SIZE, 5, 123457]
    pos = 0
    i = 0
    while pos < len(data):
        n = sizes[i % len(sizes)]
        yield data[pos : pos + n]
        pos += n
        i += 1


async def test_write_from_sync_iterator_of_odd_pieces(fs: FileSystem) -> None:
    data = os.urandom(3 * CHUNK_SIZE + 777)
    await fs.write_file("/s", _odd_pieces(data))
    assert await fs.read_file("/s") == data
    assert [len(p) for p in [p async for p in fs.stream("/s")]] == [CHUNK_SIZE] * 3 + [777]


async def test_write_from_async_iterator_of_odd_pieces(fs: FileSystem) -> None:
    data = os.urandom(3 * CHUNK_SIZE + 777)

    async def source() -> AsyncIterator[bytes]:
        for piece in _odd_pieces(data):
            yield piece

    await fs.write_file("/s", source())
    assert await fs.read_file("/s") == data
    assert fs.stats()["chunks"] == 4


async def test_streamed_write_memory_stays_near_one_chunk(fs: FileSystem) -> None:
    piece = os.urandom(64 * 1024)

    async def source() -> AsyncIterator[bytes]:
        for _ in range(16 * 8):  # 8 MiB
            yield piece

    tracemalloc.start()
    try:
        await fs.write_file("/m", source())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * CHUNK_SIZE
    assert (await fs.stat("/m")).size == 8 * 1024 * 1024


async def test_failed_streamed_write_leaves_nothing_visible(fs: FileSystem) -> None:
    await fs.write_file("/f", b"original")

    async def broken() -> AsyncIterator[bytes]:
        yield os.urandom(CHUNK_SIZE * 2)
        raise RuntimeError("source died")

    with pytest.raises(RuntimeError):
        await fs.write_file("/f", broken())
    with pytest.raises(RuntimeError):
        await fs.write_file("/new", broken())
    assert await fs.read_file("/f") == b"original"
    assert not await fs.exists("/new")
    assert fs.stats()["chunks"] == 1  # the staged chunks were collected


async def test_write_str_is_utf8(fs: FileSystem) -> None:
    await fs.write_file("/t", "héllo ✓")
    assert await fs.read_text("/t") == "héllo ✓"
    assert await fs.read_file("/t") == "héllo ✓".encode()


async def test_write_missing_parent_is_enoent(fs: FileSystem) -> None:
    with pytest.raises(FileNotFoundError):
        await fs.write_file("/no/such/f", b"x")


async def test_write_under_a_file_is_enotdir(fs: FileSystem) -> None:
    await fs.write_file("/f", b"x")
    with pytest.raises(NotADirectoryError):
        await fs.write_file("/f/g", b"y")


async def test_write_onto_directory_is_eisdir(fs: FileSystem) -> None:
    await fs.mkdir("/d")
    with pytest.raises(IsADirectoryError):
        await fs.write_file("/d", b"x")
    with pytest.raises(IsADirectoryError):
        await fs.write_file("/", b"x")


async def test_overwrite_keeps_mode_and_changes_mtime_and_rev(fs: FileSystem) -> None:
    await fs.write_file("/x.sh", b"echo 1", mode=0o755)
    st1, rev1 = await fs.stat("/x.sh"), fs.rev
    await fs.write_file("/x.sh", b"echo 2")
    st2 = await fs.stat("/x.sh")
    assert st2.mode == 0o755
    assert st2.mtime > st1.mtime
    assert fs.rev == rev1 + 1
    assert await fs.read_file("/x.sh") == b"echo 2"


async def test_modes_default_to_644_for_files_and_755_for_dirs(fs: FileSystem) -> None:
    await fs.write_file("/f", b"")
    await fs.mkdir("/d")
    assert (await fs.stat("/f")).mode == 0o644
    assert (await fs.stat("/d")).mode == 0o755
    await fs.write_file("/f", b"", mode=0o600)
    assert (await fs.stat("/f")).mode == 0o600


async def test_overwrite_frees_unreferenced_chunks(fs: FileSystem) -> None:
    await fs.write_file("/f", os.urandom(CHUNK_SIZE * 2))
    await fs.write_file("/f", b"small")
    assert fs.stats()["chunks"] == 1


async def test_copy_shares_chunks(fs: FileSystem) -> None:
    data = os.urandom(CHUNK_SIZE * 4)
    await fs.write_file("/a", data)
    before = fs.stats()
    await fs.copy("/a", "/b")
    after = fs.stats()
    assert after["chunks"] == before["chunks"]
    assert after["queries"] - before["queries"] < 20
    await fs.write_file("/a", b"changed")
    assert await fs.read_file("/b") == data


async def test_read_text_rejects_invalid_utf8(fs: FileSystem) -> None:
    await fs.write_file("/b", b"\xff\xfe")
    with pytest.raises(UnicodeDecodeError):
        await fs.read_text("/b")


async def test_exists(fs: FileSystem) -> None:
    await fs.write_file("/f", b"")
    assert await fs.exists("/f")
    assert await fs.exists("/")
    assert not await fs.exists("/g")
    assert not await fs.exists("/f/g")


async def test_stat_through_a_file_parent_is_enoent(fs: FileSystem) -> None:
    await fs.write_file("/f", b"")
    with pytest.raises(FileNotFoundError) as info:
        await fs.stat("/f/x")
    assert info.value.errno == errno.ENOENT


async def test_file_backed_store_keeps_data_across_reopen(tmp_path: object) -> None:
    path = str(tmp_path) + "/ws.sqlite"  # type: ignore[operator]
    fs = FileSystem.open(path)
    ident = fs.id
    await fs.mkdir("/w")
    await fs.write_file("/w/f", b"kept")
    rev = fs.rev
    fs.close()
    again = FileSystem.open(path)
    try:
        assert again.id == ident
        assert again.rev == rev
        assert await again.read_file("/w/f") == b"kept"
    finally:
        again.close()


async def test_in_memory_stores_have_distinct_ids() -> None:
    a, b = FileSystem.open(None), FileSystem.open(None)
    try:
        assert a.id != b.id
        await a.write_file("/x", b"a")
        assert not await b.exists("/x")
    finally:
        a.close()
        b.close()


async def test_freed_small_chunks_are_collected_in_batches(fs: FileSystem) -> None:
    await fs.mkdir("/d")
    for i in range(600):
        await fs.write_file(f"/d/{i}", f"content {i}".encode())
    await fs.rm("/d", recursive=True)
    assert fs.stats()["chunks"] == 0


async def test_chunk_freed_then_restaged_by_a_streamed_write_survives_collection(fs: FileSystem) -> None:
    await fs.write_file("/a", b"same small content")
    await fs.rm("/a")

    async def source() -> AsyncIterator[bytes]:
        yield b"same small content"
        fs.stats()  # frees batched garbage while the write is staged
        yield b""

    await fs.write_file("/b", source())
    assert await fs.read_file("/b") == b"same small content"
    assert fs.stats()["chunks"] == 1


async def test_garbage_left_at_close_is_gone_after_reopen(tmp_path: object) -> None:
    path = str(tmp_path) + "/ws.sqlite"  # type: ignore[operator]
    fs = FileSystem.open(path)
    await fs.write_file("/a", b"small")
    await fs.write_file("/b", os.urandom(CHUNK_SIZE + 1))
    await fs.rm("/a")
    await fs.rm("/b")
    fs.close()
    again = FileSystem.open(path)
    try:
        assert again.stats()["chunks"] == 0
    finally:
        again.close()


async def test_storage_failure_is_eio() -> None:
    fs = FileSystem.open(None)
    await fs.write_file("/f", b"x")
    fs.close()
    with pytest.raises(OSError) as info:
        await fs.read_file("/g")
    assert info.value.errno == errno.EIO
    with pytest.raises(OSError) as info:
        await fs.write_file("/g", b"y")
    assert info.value.errno == errno.EIO
    assert info.value.filename == "/g"


def test_opening_a_non_database_is_eio(tmp_path: Path) -> None:
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(OSError) as info:
        FileSystem.open(str(path))
    assert info.value.errno == errno.EIO
    assert info.value.filename == str(path)
    with pytest.raises(FileNotFoundError) as info:  # its directory is missing: said as such
        FileSystem.open(str(tmp_path / "missing" / "dir" / "ws.sqlite"))
    assert info.value.errno == errno.ENOENT


def _rows(fs: FileSystem) -> int:
    return int(fs._store.db.one("SELECT count(*) FROM chunks")[0])


async def test_a_batch_of_small_garbage_is_freed_soon_after_not_inside_the_mutation(fs: FileSystem) -> None:
    """A pull removing 1,000 small files used to delete their chunk rows in its own transaction; with an
    event loop they go in a transaction of their own a moment later. Meanwhile the same bytes written
    again take their row back."""
    from computer.storage.filesystem import GARBAGE_DELAY

    files = {f"/g/f{i}": b"unique %d" % i for i in range(600)}
    fs.commit_batch(files)
    assert _rows(fs) == 600
    fs.commit_batch(dict.fromkeys(files))  # remove them all
    assert _rows(fs) == 600 and fs.chunks.pending == 600  # not yet: off the removal's transaction
    await fs.write_file("/again", b"unique 7")  # its row is still there: taken back
    await asyncio.sleep(GARBAGE_DELAY)  # the earliest the batch can go
    for _ in range(100):  # bounded: 5 s more (the timer runs when the event loop gets to it)
        if fs.chunks.pending == 0:
            break
        await asyncio.sleep(0.05)
    assert _rows(fs) == 1 and fs.chunks.pending == 0
    assert await fs.read_file("/again") == b"unique 7"


async def test_a_timed_collection_that_fails_is_logged_with_the_store_and_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The timer's delete failing (a disk error) is a warning naming the store's id, never an exception
    on the event loop; the batch stays and the next collection frees it."""
    import sqlite3

    from computer.storage.filesystem import GARBAGE_DELAY

    fs = FileSystem.open(str(tmp_path / "ws.sqlite"))
    try:
        files = {f"/g/f{i}": b"unique %d" % i for i in range(300)}
        fs.commit_batch(files)
        real_flush = fs.chunks.flush

        def broken() -> None:
            raise sqlite3.OperationalError("disk I/O error")

        monkeypatch.setattr(fs.chunks, "flush", broken)
        with caplog.at_level("WARNING", logger="computer.storage"):
            fs.commit_batch(dict.fromkeys(files))
            await asyncio.sleep(GARBAGE_DELAY)
            for _ in range(100):  # bounded: 5 s more, until the timer has run
                if any("freeing unreferenced chunks" in r.getMessage() for r in caplog.records):
                    break
                await asyncio.sleep(0.05)
        assert [r.getMessage() for r in caplog.records if fs.id in r.getMessage()], caplog.text
        assert fs.chunks.pending == 300 and _rows(fs) == 300  # kept for the next collection
        monkeypatch.setattr(fs.chunks, "flush", real_flush)
        fs.collect_garbage()
        assert fs.chunks.pending == 0 and _rows(fs) == 0
    finally:
        fs.close()


def test_without_an_event_loop_garbage_is_freed_inside_the_mutation(tmp_path: Path) -> None:
    fs = FileSystem.open(str(tmp_path / "ws.sqlite"))
    try:
        files = {f"/g/f{i}": b"unique %d" % i for i in range(600)}
        fs.commit_batch(files)
        fs.commit_batch(dict.fromkeys(files))
        assert _rows(fs) == 0
    finally:
        fs.close()


def test_garbage_held_when_an_event_loop_ended_is_freed_under_the_next(tmp_path: Path) -> None:
    """A timer set on a loop that ended (one ``asyncio.run`` per call) never fires: the next loop sets
    its own instead of waiting on it."""
    from computer.storage.filesystem import GARBAGE_DELAY

    fs = FileSystem.open(str(tmp_path / "ws.sqlite"))
    try:
        first = {f"/g/a{i}": b"first %d" % i for i in range(300)}
        second = {f"/g/b{i}": b"second %d" % i for i in range(300)}
        fs.commit_batch({**first, **second})

        async def remove(paths: dict[str, bytes], *, wait: bool) -> None:
            fs.commit_batch(dict.fromkeys(paths))
            if not wait:
                return  # the loop ends with its timer set
            await asyncio.sleep(GARBAGE_DELAY)
            for _ in range(100):  # bounded: 5 s more, until the timer of this loop has run
                if fs.chunks.pending == 0:
                    return
                await asyncio.sleep(0.05)

        asyncio.run(remove(first, wait=False))
        assert fs.chunks.pending == 300
        asyncio.run(remove(second, wait=True))
        assert fs.chunks.pending == 0 and _rows(fs) == 0
    finally:
        fs.close()


def test_with_garbage_timer_off_the_owner_collects_explicitly(tmp_path: Path) -> None:
    """``garbage_timer=False``: the store sets no timer on any loop; a batch of freed small chunks
    waits, reported by ``garbage_pending``, until ``collect_garbage()`` frees it in its own
    transaction (same bytes written meanwhile take their row back)."""
    from computer.storage.filesystem import GARBAGE_DELAY

    fs = FileSystem.open(str(tmp_path / "ws.sqlite"), garbage_timer=False)

    async def churn() -> None:
        files = {f"/g/f{i}": b"unique %d" % i for i in range(600)}
        fs.commit_batch(files)
        assert not fs.garbage_pending
        fs.commit_batch(dict.fromkeys(files))
        await fs.write_file("/again", b"unique 7")
        await asyncio.sleep(3 * GARBAGE_DELAY)  # a timer would have freed the batch by now
        assert fs.garbage_pending

    try:
        asyncio.run(churn())
        assert fs.garbage_pending and _rows(fs) == 600
        rev = fs.rev
        fs.collect_garbage()
        assert not fs.garbage_pending and _rows(fs) == 1 and fs.rev == rev
        fs.collect_garbage()  # nothing waits: a no-op
    finally:
        fs.close()
    fs.collect_garbage()  # closed: a no-op


def test_with_garbage_timer_off_on_garbage_tells_the_owner_a_batch_is_ready() -> None:
    """``on_garbage()`` is called once a batch of freed small chunks is ready: True leaves it for the
    owner's ``collect_garbage()``, False frees it inside the mutation."""
    calls: list[bool] = []
    answer = True

    def on_garbage() -> bool:
        calls.append(answer)
        return answer

    fs = FileSystem.open(None, garbage_timer=False, on_garbage=on_garbage)
    try:
        files = {f"/g/f{i}": b"unique %d" % i for i in range(300)}
        fs.commit_batch(files)
        assert calls == []  # nothing freed yet
        fs.commit_batch(dict.fromkeys(files))
        assert calls == [True] and fs.garbage_pending and _rows(fs) == 300
        fs.collect_garbage()
        assert not fs.garbage_pending and _rows(fs) == 0
        answer = False
        fs.commit_batch(files)
        fs.commit_batch(dict.fromkeys(files))
        assert calls == [True, False] and not fs.garbage_pending and _rows(fs) == 0
    finally:
        fs.close()


def test_with_garbage_timer_off_a_mutation_past_the_cap_frees_inline() -> None:
    from computer.storage._chunkstore import LAZY_MAX

    fs = FileSystem.open(None, garbage_timer=False)
    try:
        files = {f"/g/f{i}": b"u%d" % i for i in range(LAZY_MAX + 10)}
        fs.commit_batch(files)
        fs.commit_batch(dict.fromkeys(files))
        assert not fs.garbage_pending and _rows(fs) == 0
    finally:
        fs.close()
