"""Attacks on the inotify watch every mirror of a process shares (``computer/runtime/_watch``,
session 67's review): one workspace's program making the one reader thread, or the one queue, fail the
other workspaces' watches (each then walks its whole tree at its next sync, its events lost).

Counted, not timed: whether another mirror's watch still vouches for its tree (``drain`` names what
changed, not ``None``), and how many paths the reader looked at."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from computer.runtime import _watch, _watch_moves
from computer.runtime._watch import TreeWatch


@pytest.fixture
def inotify() -> Iterator[_watch._Inotify]:
    try:
        shared = _watch._instance()
    except OSError as e:  # no inotify here: every mirror walks
        pytest.skip(f"no inotify instance: {e}")
    shared.pump()
    yield shared


def _tree(top: Path, dirs: int) -> None:
    """``dirs`` directories below ``top`` (and ``top/a``, which the storm renames)."""
    top.mkdir()
    for i in range(dirs // 100):
        branch = top / f"d{i}"
        branch.mkdir()
        for j in range(99):
            (branch / f"s{j}").mkdir()
    (top / "a").mkdir()


def test_closing_a_watch_of_more_directories_than_the_queue_holds_leaves_the_others_watched(
    tmp_path: Path, inotify: _watch._Inotify
) -> None:
    """Each watch given back queues an ``IN_IGNORED`` event; a mirror watches up to ``MAX_DIRS``
    directories (48,135 here), the queue every mirror shares holds ``QUEUE_EVENTS`` (16,384). Closing
    (or shedding) a watch of 20,000 directories overflowed the queue: every other mirror's watch of the
    process broke, its next pull a walk of its whole tree. Now given back in slices (``_watch_release``)."""
    dirs = _watch.QUEUE_EVENTS + 4000
    if _watch.MAX_DIRS < dirs + 10:
        pytest.skip(f"a watch holds at most {_watch.MAX_DIRS} directories here: no overflow to make")
    _tree(tmp_path / "big", dirs)
    (tmp_path / "other").mkdir()
    big, other = TreeWatch(tmp_path / "big"), TreeWatch(tmp_path / "other")
    try:
        assert not big.over and len(big._held.dirs) > _watch.QUEUE_EVENTS
        (tmp_path / "other" / "before").write_text("x")
        assert other.drain() == {"before"}
        big.close()
        (tmp_path / "other" / "f").write_text("x")
        assert other.drain() == {"f"}, "closing another mirror's watch broke this one (a queue overflow)"
    finally:
        big.close()
        other.close()


_STORM = """
import os, sys
os.chdir(sys.argv[1])
for _ in range(int(sys.argv[2])):
    os.rename("a", "b")
    os.rename("b", "a")
"""


def test_a_rename_storm_costs_the_shared_reader_a_bounded_look(
    tmp_path: Path, inotify: _watch._Inotify, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory's move within a watched tree re-keys every path the watch holds (``_watch_moves``),
    on the process's one reader thread with the lock every mirror's sync takes. A program's ``mv a b;
    mv b a`` loop in a tree of 20,000 directories (10,000 renames in 0.3 s) held that lock 5.6 s, and
    the queue overflowed meanwhile: every other mirror's watch broke. Now a watch's pairings look at
    ``REKEY_WORK`` paths at most between two drains; past it the watch is shed (its mirror walks)."""
    looked = [0]
    at = _watch_moves._at

    def counted(path: str, top: str) -> bool:
        looked[0] += 1
        return at(path, top)

    monkeypatch.setattr(_watch_moves, "_at", counted)
    dirs = 5000
    _tree(tmp_path / "hog", dirs)
    (tmp_path / "other").mkdir()
    hog, other = TreeWatch(tmp_path / "hog"), TreeWatch(tmp_path / "other")
    try:
        assert not hog.over and len(hog._held.dirs) > dirs
        # The storm queued whole before any read (the lock held): 3 events a rename, under the queue.
        renames = min(1000, _watch.QUEUE_EVENTS // 8)
        with inotify.lock:
            subprocess.run(
                [sys.executable, "-c", _STORM, str(tmp_path / "hog"), str(renames)], check=True, timeout=60
            )
            (tmp_path / "other" / "f").write_text("x")
        inotify.pump()
        bound = 2 * (_watch_moves.REKEY_WORK + dirs + 10)  # (two looks a path: at the new name, the old)
        assert looked[0] <= bound, f"the reader looked at {looked[0]} paths for {2 * renames} moves"
        assert hog.drain() is None and hog.shed  # its mirror walks a while
        assert other.drain() == {"f"}
    finally:
        hog.close()
        other.close()


def test_a_mapped_sparse_file_costs_its_fingerprint_only_its_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live sandbox's files mapped shared and writable are fingerprinted at each look
    (``_mapped.MappedFiles``, up to ``MAX_FILES``, the end's look unpaced). Their holes were hashed as
    zeros: a page mapped in each of 256 sparse files of 4 GiB (``RLIMIT_FSIZE``, free on the mirror's
    tmpfs) cost a look 1 TiB of hashing, ~54 s of a host core (0.21 s a file). Bytes hashed counted;
    the fingerprint still moves with the data, a hole filled too."""
    from xxhash import xxh3_128

    from computer.runtime import _mapped
    from computer.runtime._beneath import BeneathReader
    from computer.storage._chunks import CHUNK_SIZE

    hashed = [0]

    class Counted:
        def __init__(self) -> None:
            self.inner = xxh3_128()

        def update(self, data: bytes) -> None:
            hashed[0] += len(data)
            self.inner.update(data)

        def intdigest(self) -> int:
            return int(self.inner.intdigest())

    monkeypatch.setattr(_mapped, "xxh3_128", Counted)
    path = tmp_path / "big"
    with path.open("wb") as f:
        f.truncate(4 * 1024**3 - 1024)
        f.seek(5 * CHUNK_SIZE + 7)
        f.write(b"x")
    prints = []
    with BeneathReader(tmp_path) as reader:
        prints.append(_mapped._fingerprint(reader, "big"))
        assert hashed[0] <= 4 * CHUNK_SIZE, f"{hashed[0]} bytes hashed for one page of data"
        with path.open("r+b") as f:
            f.seek(5 * CHUNK_SIZE + 7)
            f.write(b"y")  # the data changed
        prints.append(_mapped._fingerprint(reader, "big"))
        with path.open("r+b") as f:
            f.seek(3000 * CHUNK_SIZE)
            f.write(b"z")  # a hole filled
        prints.append(_mapped._fingerprint(reader, "big"))
        prints.append(_mapped._fingerprint(reader, "big"))
    assert None not in prints and len(set(prints[:3])) == 3 and prints[2] == prints[3]


def test_the_mapped_files_look_reads_a_bounded_share_of_every_process_maps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``_mapped.shared_writable`` (a live sandbox's look for files written through mappings, at each
    sync and at its end) read ``MAPS_BYTES`` (1 MiB) of each process's maps: 256 processes of ~30,000
    untouched mappings each cost a look 256 MiB (one such process took ~29 ms to read here: ~7 s). Now
    ``MAPS_LOOKED`` in all, as ``read_only_held``; bytes counted."""
    from computer.runtime import _mapped

    read = [0]
    page = b"7f0000000000-7f0000001000 r--p 00000000 00:00 0\n" * (_mapped.MAPS_BYTES // 48)

    def maps(pid: int) -> bytes:
        read[0] += len(page)
        return page

    monkeypatch.setattr(_mapped, "_maps", maps)
    assert _mapped.shared_writable(range(1000, 1256), os.stat("/").st_dev) == set()
    assert read[0] <= _mapped.MAPS_LOOKED + _mapped.MAPS_BYTES, f"{read[0] >> 20} MiB of maps read"
