"""A name the workspace makes, removes or renames moves its directory's time, as on a local disk
(``storage/_parent_time``): each call's parents take the time of the call, logged ``"touch"`` in the
call's own revision after its entries; an overwrite changes no entry and moves nothing; a time given
to the directory after wins; a pull's ``commit_batch`` keeps the times it is given."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from computer.storage import FileSystem

OLD = 1_500_000_000_000  # ms: every directory's time before the call


def _now() -> int:
    return time.time_ns() // 1_000_000


async def _setup(fs: FileSystem) -> None:
    for d in ("/a", "/b", "/a/sub"):
        await fs.mkdir(d)
    await fs.write_file("/a/f", b"x")
    await fs.write_file("/a/sub/g", b"y")
    fs.commit_batch({}, mtimes=dict.fromkeys(("/", "/a", "/b", "/a/sub"), OLD))


# (the call, the directories whose time it moves, the change log of its revision)
CALLS: dict[str, tuple[Callable[[FileSystem], Awaitable[None]], set[str], list[tuple[str, str]]]] = {
    "write a new file": (
        lambda fs: fs.write_file("/a/new", b"n"),
        {"/a"},
        [("/a/new", "write"), ("/a", "touch")],
    ),
    "write_chunks of a new file": (
        lambda fs: fs.write_chunks("/a/new", [b"n"]),
        {"/a"},
        [("/a/new", "write"), ("/a", "touch")],
    ),
    "a streamed write of a new file": (
        lambda fs: fs.write_file("/a/new", _pieces(b"n", b"m")),
        {"/a"},
        [("/a/new", "write"), ("/a", "touch")],
    ),
    "mkdir": (lambda fs: fs.mkdir("/b/d"), {"/b"}, [("/b/d", "mkdir"), ("/b", "touch")]),
    "mkdir -p": (
        lambda fs: fs.mkdir("/b/d/e/f", recursive=True),
        {"/b"},  # the directory of the first level made; the new ones have the call's time anyway
        [("/b/d", "mkdir"), ("/b/d/e", "mkdir"), ("/b/d/e/f", "mkdir"), ("/b", "touch")],
    ),
    "rm": (lambda fs: fs.rm("/a/f"), {"/a"}, [("/a/f", "rm"), ("/a", "touch")]),
    "rm -r": (lambda fs: fs.rm("/a/sub", recursive=True), {"/a"}, [("/a/sub", "rm"), ("/a", "touch")]),
    "symlink": (lambda fs: fs.symlink("f", "/b/l"), {"/b"}, [("/b/l", "symlink"), ("/b", "touch")]),
    "link": (lambda fs: fs.link("/a/f", "/b/h"), {"/b"}, [("/b/h", "link"), ("/b", "touch")]),
    "rename across directories": (
        lambda fs: fs.rename("/a/f", "/b/f"),
        {"/a", "/b"},
        [("/a/f", "rm"), ("/b/f", "rename"), ("/a", "touch"), ("/b", "touch")],
    ),
    "rename within one": (
        lambda fs: fs.rename("/a/f", "/a/g"),
        {"/a"},
        [("/a/f", "rm"), ("/a/g", "rename"), ("/a", "touch")],
    ),
    "rename over a file": (
        lambda fs: fs.rename("/a/sub/g", "/a/f", overwrite=True),
        {"/a", "/a/sub"},
        [("/a/sub/g", "rm"), ("/a/f", "rename"), ("/a/sub", "touch"), ("/a", "touch")],
    ),
    "copy": (lambda fs: fs.copy("/a/f", "/b/c"), {"/b"}, [("/b/c", "write"), ("/b", "touch")]),
}


async def _pieces(*pieces: bytes):  # type: ignore[no-untyped-def]
    for piece in pieces:
        yield piece


@pytest.mark.parametrize("call", list(CALLS))
async def test_each_call_moves_the_time_of_the_directories_whose_names_it_changed(
    fs: FileSystem, call: str
) -> None:
    await _setup(fs)
    run, moved, logged = CALLS[call]
    rev = fs.rev
    before = _now()
    await run(fs)
    after = _now()
    times = {d: (await fs.stat(d)).mtime for d in ("/", "/a", "/b", "/a/sub") if await fs.exists(d)}
    assert {d for d, t in times.items() if t != OLD} == moved
    assert all(before <= times[d] <= after for d in moved), times
    assert all(e.sub_ns == 0 for e in fs.manifest("/", inodes=True) if e.path in moved)
    changes = fs.changes_since(rev).changes
    assert [(c.path, c.op) for c in changes] == logged
    assert {c.rev for c in changes} == {fs.rev} == {rev + 1}  # one call, one revision


async def test_an_overwrite_or_a_files_own_time_moves_no_directory(fs: FileSystem) -> None:
    """Writing into an existing name changes no entry (``open(O_TRUNC)``); a time given to the file
    is its own: its directory still takes the call's time when the name is new."""
    await _setup(fs)
    rev = fs.rev
    await fs.write_file("/a/f", b"overwritten")
    await fs.write_chunks("/a/f", [b"again"])
    assert (await fs.stat("/a")).mtime == OLD
    assert [(c.path, c.op) for c in fs.changes_since(rev).changes] == [("/a/f", "write")] * 2
    before = _now()
    await fs.write_file("/a/old", b"o", mtime=1_000)
    assert (await fs.stat("/a/old")).mtime == 1_000
    assert (await fs.stat("/a")).mtime >= before


async def test_a_time_given_to_the_directory_after_wins(fs: FileSystem) -> None:
    """As ``touch -d`` after a create: the explicit time stays, to the nanosecond."""
    await _setup(fs)
    await fs.write_file("/a/new", b"n")
    fs.commit_batch({}, mtimes={"/a": 1_234}, sub_ns={"/a": 5})
    st = await fs.stat("/a")
    assert (st.mtime, st.sub_ns) == (1_234, 5)


async def test_a_pulls_batch_keeps_the_times_it_is_given(fs: FileSystem) -> None:
    """A pull sends the program's own directory times (``SyncPull.dir_times``): its writes, removals,
    directories, symlinks and links move none of them."""
    await _setup(fs)
    fs.commit_batch(
        {"/a/new": b"n", "/a/f": None, "/b/x/y": b"y"},
        mkdirs=["/b/m"],
        symlinks={"/b/l": "f"},
        links={"/b/h": "/a/sub/g"},
    )
    assert {d: (await fs.stat(d)).mtime for d in ("/", "/a", "/b", "/a/sub")} == dict.fromkeys(
        ("/", "/a", "/b", "/a/sub"), OLD
    )


async def test_a_moved_time_is_kept_across_a_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "ws.sqlite")
    fs = FileSystem.open(path)
    try:
        await _setup(fs)
        await fs.write_file("/a/new", b"n")
        moved = (await fs.stat("/a")).mtime
        rev = fs.rev
    finally:
        fs.close()
    again = FileSystem.open(path)
    try:
        assert moved > OLD and (await again.stat("/a")).mtime == moved
        assert [(c.path, c.op) for c in again.changes_since(rev - 1).changes] == [
            ("/a/new", "write"),
            ("/a", "touch"),
        ]
    finally:
        again.close()
