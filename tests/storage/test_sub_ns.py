"""Times finer than a millisecond (``inodes.sub_ns``, ``FileStat.sub_ns``): what an exec pull keeps of
a program's time past the ms the public API shows, so a mirror rebuilt from the store (a reopen) sets
the exact time again. The ms ``mtime`` stays as it was everywhere; the remainder never outlives the
time it belonged to."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from computer.storage import FileSystem
from computer.storage._schema import SCHEMA_VERSION

T = 1_600_000_000_000  # ms
SUB = 400_123  # ns past it


def _sub(fs: FileSystem, path: str) -> int:
    return next(e.sub_ns for e in fs.manifest("/", inodes=True) if e.path == path)


async def _timed(fs: FileSystem, path: str, kind: str) -> None:
    """``path`` made as ``kind`` with the time ``T`` and ``SUB`` past it, as a pull makes it."""
    if kind == "file":
        fs.commit_batch({path: b"x"}, mtimes={path: T}, sub_ns={path: SUB})
    elif kind == "dir":
        fs.commit_batch({}, mkdirs=[path], mtimes={path: T}, sub_ns={path: SUB})
    else:
        fs.commit_batch({}, symlinks={path: "target"}, mtimes={path: T}, sub_ns={path: SUB})
    st_sub = _sub(fs, path)
    assert st_sub == SUB, (kind, st_sub)


async def test_a_pulls_remainder_is_kept_and_read_back_beside_the_ms() -> None:
    fs = FileSystem.open(None)
    try:
        for path, kind in (("/f", "file"), ("/d", "dir"), ("/l", "symlink")):
            await _timed(fs, path, kind)
        st = await fs.stat("/f")
        assert (st.mtime, st.sub_ns) == (T, SUB)
        assert (await fs.stat("/d")).sub_ns == SUB
        assert {e.name: e.mtime for e in await fs.readdir("/")} == {"f": T, "d": T, "l": T}
        # the default manifest keeps its five fields; a time made by the store has no remainder
        assert fs.manifest("/")[0] == ("/d", "dir", 0, 0o755, T)
        await fs.write_file("/plain", b"y")
        assert (await fs.stat("/plain")).sub_ns == 0
        # existing paths take one too (``touch`` of a directory a run did not make)
        fs.commit_batch({}, mtimes={"/plain": T}, sub_ns={"/plain": 7})
        assert ((await fs.stat("/plain")).mtime, (await fs.stat("/plain")).sub_ns) == (T, 7)
    finally:
        fs.close()


async def test_a_tree_of_directories_made_in_bulk_keeps_each_ones_remainder() -> None:
    """``mkdir -p`` of many (the batch's bulk rows) with a pull's times, as ``tar x`` leaves them."""
    fs = FileSystem.open(None)
    try:
        leaves = [f"/t/{a}/{b}" for a in range(12) for b in range(12)]
        every = ["/t", *{p.rpartition("/")[0] for p in leaves}, *leaves]
        subs = {p: (i * 7919) % 1_000_000 for i, p in enumerate(every)}
        fs.commit_batch({}, mkdirs=leaves, mtimes=dict.fromkeys(every, T), sub_ns=subs)
        got = {e.path: e.sub_ns for e in fs.manifest("/", inodes=True)}
        assert got == subs
    finally:
        fs.close()


async def _write(fs: FileSystem, p: str) -> None:
    await fs.write_file(p, b"new")


async def _write_at(fs: FileSystem, p: str) -> None:
    await fs.write_file(p, b"new", mtime=T)


async def _chunks_at(fs: FileSystem, p: str) -> None:
    await fs.write_chunks(p, [b"new"], mtime=T)


async def _batch_write(fs: FileSystem, p: str) -> None:
    fs.commit_batch({p: b"new"}, mtimes={p: T})


async def _batch_time(fs: FileSystem, p: str) -> None:
    fs.commit_batch({}, mtimes={p: T})


async def _batch_other_sub(fs: FileSystem, p: str) -> None:
    fs.commit_batch({}, mtimes={p: T}, sub_ns={"/elsewhere": 5})


async def _batch_later(fs: FileSystem, p: str) -> None:
    fs.commit_batch({}, mtimes={p: T + 1})


async def _batch_symlink(fs: FileSystem, p: str) -> None:
    fs.commit_batch({}, symlinks={p: "target"}, mtimes={p: T})


async def _remade(fs: FileSystem, p: str) -> None:
    await fs.rm(p, recursive=True)
    fs.commit_batch({}, mkdirs=[p], mtimes={p: T})


async def _copied_over(fs: FileSystem, p: str) -> None:
    await fs.write_file("/src", b"s")
    await fs.copy("/src", p, overwrite=True)


RESETS: dict[str, tuple[tuple[str, ...], Callable[[FileSystem, str], Awaitable[None]]]] = {
    "write_file": (("file",), _write),
    "write_file(mtime=)": (("file",), _write_at),
    "write_chunks(mtime=)": (("file",), _chunks_at),
    "commit_batch write": (("file",), _batch_write),
    "commit_batch mtime alone": (("file", "dir"), _batch_time),
    "commit_batch sub_ns of another path": (("file", "dir"), _batch_other_sub),
    "commit_batch later ms": (("file", "dir"), _batch_later),
    "commit_batch same symlink": (("symlink",), _batch_symlink),
    "removed and made again": (("dir",), _remade),
    "copy over it": (("file",), _copied_over),
}
CASES = [
    pytest.param(kind, change, id=f"{kind}-{name}")
    for name, (kinds, change) in RESETS.items()
    for kind in kinds
]


@pytest.mark.parametrize(("kind", "change"), CASES)
async def test_a_time_set_without_a_remainder_never_keeps_the_old_one(
    kind: str, change: Callable[[FileSystem, str], Awaitable[None]]
) -> None:
    """Every write that sets the ms time without giving a remainder leaves 0: a stale one would give a
    rebuilt mirror a time the workspace never had (later than what it was told, even)."""
    fs = FileSystem.open(None)
    try:
        await _timed(fs, "/p", kind)
        await change(fs, "/p")
        assert _sub(fs, "/p") == 0
    finally:
        fs.close()


async def test_a_rename_keeps_the_remainder_a_copy_takes_its_own_time() -> None:
    """A move keeps the node (its time, remainder included); a copy is a new node at the copy's time
    (as ``cp`` without ``-p``: the store never kept a copy's source time), with none."""
    fs = FileSystem.open(None)
    try:
        await _timed(fs, "/f", "file")
        await _timed(fs, "/d", "dir")
        fs.commit_batch({"/d/in": b"1"}, mtimes={"/d/in": T}, sub_ns={"/d/in": 3})
        await fs.rename("/f", "/g")
        await fs.rename("/d", "/e")
        assert (_sub(fs, "/g"), _sub(fs, "/e"), _sub(fs, "/e/in")) == (SUB, SUB, 3)
        await fs.copy("/g", "/h")
        await fs.copy("/e", "/c")
        assert (_sub(fs, "/h"), _sub(fs, "/c"), _sub(fs, "/c/in")) == (0, 0, 0)
        assert (await fs.stat("/h")).mtime != T
    finally:
        fs.close()


@pytest.mark.parametrize("bad", [-1, 1_000_000])
async def test_a_remainder_outside_a_millisecond_is_refused_and_nothing_is_written(bad: int) -> None:
    fs = FileSystem.open(None)
    try:
        rev = fs.rev
        with pytest.raises(OSError, match="sub_ns") as raised:
            fs.commit_batch({"/f": b"x"}, mtimes={"/f": T}, sub_ns={"/f": bad})
        assert raised.value.errno == 22
        assert fs.rev == rev and not await fs.exists("/f")
    finally:
        fs.close()


def _downgrade_to_v4(path: str) -> None:
    """Rewrite a current file in the version-4 layout: no ``sub_ns`` column."""
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("ALTER TABLE inodes DROP COLUMN sub_ns")
    con.execute("UPDATE meta SET value = 4 WHERE key = 'schema_version'")
    con.close()


async def test_a_version_4_file_gains_the_column_and_every_node_has_no_remainder(tmp_path: Path) -> None:
    path = str(tmp_path / "ws.sqlite")
    fs = FileSystem.open(path)
    await fs.mkdir("/a")
    await fs.write_file("/a/f", b"hello", mtime=T)
    await fs.symlink("/a/f", "/l")
    fs.close()
    _downgrade_to_v4(path)
    with pytest.raises(OSError):  # a reader never upgrades
        FileSystem.open(path, readonly=True)
    fs = FileSystem.open(path)
    try:
        assert await fs.read_file("/a/f") == b"hello"
        assert ((await fs.stat("/a/f")).mtime, (await fs.stat("/a/f")).sub_ns) == (T, 0)
        assert {e.sub_ns for e in fs.manifest("/", inodes=True)} == {0}
        fs.commit_batch({}, mtimes={"/a/f": T}, sub_ns={"/a/f": SUB})
        assert (await fs.stat("/a/f")).sub_ns == SUB
    finally:
        fs.close()
    con = sqlite3.connect(path)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == SCHEMA_VERSION
    con.close()
    reader = FileSystem.open(path, readonly=True)
    try:
        assert (await reader.stat("/a/f")).sub_ns == SUB
    finally:
        reader.close()


async def test_a_file_downgraded_by_hand_that_kept_the_column_still_opens(tmp_path: Path) -> None:
    """Only the version says 4 (as the schema tests' downgrades leave later columns): the upgrade does
    not add the column twice (that failed the open)."""
    path = str(tmp_path / "ws.sqlite")
    fs = FileSystem.open(path)
    fs.commit_batch({"/f": b"x"}, mtimes={"/f": T}, sub_ns={"/f": SUB})
    fs.close()
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("UPDATE meta SET value = 4 WHERE key = 'schema_version'")
    con.close()
    fs = FileSystem.open(path)
    try:
        assert (await fs.stat("/f")).sub_ns == SUB
    finally:
        fs.close()
