"""The mirror's change detection: the inotify path finds exactly what a full walk finds."""

from __future__ import annotations

import gc
import os
import shutil
from pathlib import Path

import pytest

from computer.runtime import MirrorDir, MirrorFile, SyncPush
from computer.runtime._beneath import chmod_beneath, read_beneath, readlink_beneath, write_sparse
from computer.runtime._entry import SIZE
from computer.runtime._mirror import Mirror

from ._live_support import settles


def seeded(tmp_path: Path) -> Mirror:
    mirror = Mirror(tmp_path / "m", "/workspace")
    files = [MirrorFile(f"/workspace/d{i % 3}/f{i}.txt", b"%03d" % i, 0o644, 1_000) for i in range(30)]
    dirs = [MirrorDir(f"/workspace/d{i}") for i in range(3)] + [MirrorDir("/workspace/d0/sub")]
    files.append(MirrorFile("/workspace/d0/sub/deep.txt", b"deep"))
    mirror.apply(SyncPush(5, "/workspace", True, files, dirs))
    mirror.arm()
    assert mirror.watch is not None  # these tests compare the watched path with a full walk
    return mirror


def expected_pull(mirror: Mirror) -> tuple[set[str], set[str], set[str], dict[str, object]]:
    now = mirror.scan()
    pull = mirror._diff(now, set(now) | set(mirror.state))
    return {f.path for f in pull.files}, {d.path for d in pull.dirs}, set(pull.deleted), dict(now)


def edit_files(root: Path) -> None:
    (root / "d0/new.txt").write_text("new")
    (root / "d1/f1.txt").write_bytes(b"XXX")  # same size as before
    os.chmod(root / "d2/f2.txt", 0o755)
    (root / "d0/f3.txt").unlink()
    os.utime(root / "d1/f4.txt", ns=(1_000_000_000, 1_000_000_000))  # contents same, touched back in time
    (root / "d1/f4.txt").write_bytes(b"004")
    os.utime(root / "d1/f4.txt", ns=(1_000_000_000, 1_000_000_000))
    (root / "n/e/w").mkdir(parents=True)
    (root / "n/e/w/file").write_text("x")
    (root / "n/empty").mkdir()
    shutil.rmtree(root / "d0/sub")
    (root / "d2/f5.txt").unlink()
    (root / "d2/f5.txt").mkdir()
    (root / "d2/f5.txt/inside").write_text("i")
    os.rename(root / "d1/f7.txt", root / "d1/renamed.txt")


def move_a_directory(root: Path) -> None:
    os.rename(root / "d1", root / "moved")
    (root / "moved/after.txt").write_text("a")


@pytest.mark.parametrize("change", [edit_files, move_a_directory])
def test_watched_collect_matches_a_full_walk(tmp_path: Path, change: object) -> None:
    mirror = seeded(tmp_path)
    change(mirror.directory)  # type: ignore[operator]
    files, dirs, deleted, now = expected_pull(mirror)
    pull, watched_now = mirror.collect()
    assert watched_now == now
    if change is move_a_directory:  # a rename (``_pull_moves``): the state re-keyed, only the new file
        assert pull.renames == [("/workspace/d1", "/workspace/moved")]
        assert [f.path for f in pull.files] == ["/workspace/moved/after.txt"] and not pull.deleted
        assert "moved/f1.txt" in mirror.state and "d1/f1.txt" not in mirror.state
        mirror.unrename()  # refused by the owner: the state put back, the pull planned again without
        assert "d1/f1.txt" in mirror.state
        pull, watched_now = mirror.collect()
        assert watched_now == now and not pull.renames
    assert {f.path for f in pull.files} == files
    assert {d.path for d in pull.dirs} == dirs
    assert set(pull.deleted) == deleted
    assert files  # the scenario changed something


def test_a_pull_that_had_to_walk_watches_again_for_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory moved in from outside the tree makes the watch unable to vouch (one moved within
    it keeps the watch: ``test_watch_moves``): that pull walks the tree and sets a new watch, so the
    next pull looks only at what changed since. Before: only a push armed a watch, and a live sandbox
    (no push while the workspace does not change) walked its tree on every sync."""
    mirror = seeded(tmp_path)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside/after.txt").write_text("a")
    os.rename(tmp_path / "outside", mirror.directory / "moved")
    walks = []
    scan = mirror.scan
    monkeypatch.setattr(mirror, "scan", lambda *times: walks.append(1) or scan(*times))
    _, now = mirror.collect()
    mirror.settle(now, 6, ())
    assert len(walks) == 1 and mirror.watch is not None
    (mirror.directory / "moved/later.txt").write_text("l")  # after the walk: the new watch sees it
    pull, now = mirror.collect()
    assert [f.path for f in pull.files] == ["/workspace/moved/later.txt"] and len(walks) == 1
    mirror.settle(now, 7, ())
    assert mirror.plan()[0].empty() and len(walks) == 1


def test_an_untouched_mirror_pulls_nothing(tmp_path: Path) -> None:
    mirror = seeded(tmp_path)
    pull, now = mirror.collect()
    assert (pull.files, pull.dirs, pull.deleted) == ([], [], [])
    assert now == mirror.state


def test_host_writes_of_the_push_are_not_reported_as_run_changes(tmp_path: Path) -> None:
    mirror = seeded(tmp_path)
    mirror.collect()
    mirror.apply(SyncPush(6, "/workspace", False, [MirrorFile("/workspace/d0/f0.txt", b"pushed")]))
    mirror.arm()
    pull, _ = mirror.collect()
    assert (pull.files, pull.deleted) == ([], [])


def test_a_symlink_left_by_a_run_is_never_written_through(tmp_path: Path) -> None:
    mirror = seeded(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(mirror.directory / "d2")
    os.symlink(outside, mirror.directory / "d2")
    mirror.apply(SyncPush(7, "/workspace", False, [MirrorFile("/workspace/d2/x.txt", b"x")]))
    assert list(outside.iterdir()) == []
    assert (mirror.directory / "d2/x.txt").read_bytes() == b"x"


def test_reads_never_follow_a_link_swapped_in_for_a_file_or_a_directory(tmp_path: Path) -> None:
    mirror = seeded(tmp_path)
    secret = tmp_path / "host-secret"
    secret.write_text("host only")
    (mirror.directory / "d1/f1.txt").unlink()
    os.symlink(secret, mirror.directory / "d1/f1.txt")
    shutil.rmtree(mirror.directory / "d2")
    os.symlink(tmp_path, mirror.directory / "d2")
    with pytest.raises(OSError):
        read_beneath(mirror.directory, "d1/f1.txt")
    with pytest.raises(OSError):
        read_beneath(mirror.directory, "d2/host-secret")
    assert read_beneath(mirror.directory, "d0/f0.txt") == b"000"


def test_the_plans_chmod_and_readlink_never_follow_a_parent_swapped_for_a_link(tmp_path: Path) -> None:
    """A pull strips set-id bits (chmod) and reads symlinks' targets: by path, a parent a running
    program swapped for a link to a host directory made the host chmod a host file (to a mode the
    program chose) and read the host process's ``/proc/self`` links into the workspace."""
    mirror = seeded(tmp_path)
    host = tmp_path / "host"
    host.mkdir()
    (host / "shadow").write_text("host only")
    os.chmod(host / "shadow", 0o4600)
    os.symlink("/etc", host / "link")
    shutil.rmtree(mirror.directory / "d2")
    os.symlink(host, mirror.directory / "d2")
    with pytest.raises(OSError):
        chmod_beneath(mirror.directory, "d2/shadow", 0o777)
    assert os.stat(host / "shadow").st_mode & 0o7777 == 0o4600
    with pytest.raises(OSError):
        readlink_beneath(mirror.directory, "d2/link")
    # Below real directories both work, a file without read permission too; a link is never chmod-ed.
    target = mirror.directory / "d0/f0.txt"
    os.chmod(target, 0o4000)
    assert chmod_beneath(mirror.directory, "d0/f0.txt", 0o644).st_mode & 0o7777 == 0o644
    os.symlink("../d1", mirror.directory / "d0/up")
    assert readlink_beneath(mirror.directory, "d0/up") == "../d1"
    with pytest.raises(OSError):
        chmod_beneath(mirror.directory, "d0/up", 0o700)
    assert os.stat(mirror.directory / "d1").st_mode & 0o777 != 0o700


def _open() -> set[tuple[str, str]]:
    """The process's open descriptors, each with what it points to."""
    got = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            got.add((fd, os.readlink(f"/proc/self/fd/{fd}")))
        except OSError:  # closed since it was listed (the listing's own)
            pass
    return got


def test_a_pull_over_many_directories_reads_every_file_and_closes_what_it_opened(tmp_path: Path) -> None:
    """The pull reads files through one descriptor per directory, at most a few dozen open at once."""
    mirror = seeded(tmp_path)
    for i in range(150):  # more directories than a reader keeps open
        (mirror.directory / f"n{i}/deep").mkdir(parents=True)
        (mirror.directory / f"n{i}/a.txt").write_bytes(b"a%d" % i)
        (mirror.directory / f"n{i}/deep/b.txt").write_bytes(b"b" * (i * 100))
    (mirror.directory / "d0/f0.txt").write_bytes(b"changed")
    assert mirror.watch is not None
    # The inotify reader thread lists new directories as it reads their events, under this lock:
    # held, no descriptor of it comes or goes while they are counted.
    # Garbage collected during the pull, an earlier test's objects closed their descriptors (12 fewer
    # after than before, in a full suite): collected first, and only descriptors new after are counted.
    # Another thread of the process (an earlier test's runtime, Ray's) may open one meanwhile (fd 20,
    # once in a folder run): only descriptors of the mirror's tree are the pull's to close. Compared
    # as (number, target): listing them took a number the pull may reuse.
    gc.collect()
    gc.disable()
    try:
        with mirror.watch._inotify.lock:
            open_before = _open()
            pull, _ = mirror.collect()
            left = _open() - open_before
            assert [t for _, t in left if t.startswith(str(tmp_path))] == [], left
    finally:
        gc.enable()
    got = {f.path: f.data for f in pull.files}
    assert got["/workspace/d0/f0.txt"] == b"changed"
    for i in range(150):
        assert got[f"/workspace/n{i}/a.txt"] == b"a%d" % i
        assert got[f"/workspace/n{i}/deep/b.txt"] == b"b" * (i * 100)
    assert len(got) == 301


def test_paths_removed_then_made_again_below_a_new_directory_are_pulled(tmp_path: Path) -> None:
    """The pull skips looking at paths whose last event removed them, but not ones a new directory
    brought back (their creation raised no event: the new directory was not watched yet)."""
    mirror = seeded(tmp_path)
    shutil.rmtree(mirror.directory / "d0")
    (mirror.directory / "d0").mkdir()
    (mirror.directory / "d0/f0.txt").write_bytes(b"again")
    (mirror.directory / "d1/f1.txt").unlink()
    files, dirs, deleted, walked = expected_pull(mirror)  # what a full walk finds
    pull, now = mirror.collect()
    assert {f.path: f.data for f in pull.files} == {"/workspace/d0/f0.txt": b"again"}
    assert "/workspace/d1/f1.txt" in pull.deleted
    assert ({f.path for f in pull.files}, {d.path for d in pull.dirs}, set(pull.deleted)) == (
        files,
        dirs,
        deleted,
    )
    assert now == walked


def test_a_write_through_a_link_the_run_removed_is_found_and_a_paced_look_waits(tmp_path: Path) -> None:
    """``ln f t; echo >> t; rm t`` names only ``t``: every file is looked at again (``look_again``). A
    paced pull (a live sandbox's tick) leaves the look for later while its last one's tenth of the time
    has not passed, and the mirror is not quiet meanwhile; an unpaced one (a run's end) always looks."""
    mirror = seeded(tmp_path)
    root = mirror.directory
    os.link(root / "d1/f1.txt", root / "t")
    with open(root / "t", "ab") as f:
        f.write(b"more")
    os.unlink(root / "t")
    mirror.look_next = float("inf")  # the last look's tenth of the time has not passed
    plan, _ = mirror.plan(paced=True)
    assert plan.files == [] and mirror.look_owed
    assert not settles(mirror, within=0.3) and settles(mirror, paced=True)
    plan, now = mirror.plan(paced=False)
    assert [rel for rel, _ in plan.files] == ["d1/f1.txt"] and not mirror.look_owed
    assert now["d1/f1.txt"][SIZE] == 7 and settles(mirror)


def test_a_pulls_state_leaves_the_garbage_collector_nothing_per_path(tmp_path: Path) -> None:
    """Attack pass finding: a mirror's state holds one entry per path, and a ``NamedTuple`` entry
    stays tracked by the garbage collector for good (only exact tuples of atomic values are
    untracked), so a sandbox of 300,000 files gave every full collection 300,000 more objects to walk
    (263-590 ms each, in worker threads holding the GIL: a 304 ms step of the event loop). Now an
    entry is an exact tuple: once the collector has looked at them, the state adds next to nothing."""
    mirror = seeded(tmp_path)
    count = 5_000
    big = mirror.directory / "big"
    big.mkdir()
    for i in range(count):
        (big / f"e{i}").touch()
    gc.collect()
    before = len(gc.get_objects())
    pull, now = mirror.collect()
    assert len(pull.files) == count
    mirror.settle(now, 6, ())
    del pull, now
    gc.collect()
    assert len(mirror.state) > count
    tracked = [rel for rel, entry in mirror.state.items() if gc.is_tracked(entry)]
    assert len(tracked) < count // 100, tracked[:5]
    assert len(gc.get_objects()) - before < count // 10


def test_a_walks_listing_of_a_big_directory_leaves_the_garbage_collector_nothing_per_file(
    tmp_path: Path,
) -> None:
    """A full walk lists a directory whole before it reads its entries: with each ``lstat`` result
    kept (a ``stat_result``, a tuple subclass, tracked for good), a directory of 300,000 files held
    600,000 tracked objects through the walk, for each full collection meanwhile to go through. Now
    the listing holds each file's entry (an exact tuple, untracked once the collector looked)."""
    from computer.runtime._lifts import Lifts
    from computer.runtime._mirror_walk import _listing

    mirror = seeded(tmp_path)
    big = mirror.directory / "big"
    big.mkdir()
    for i in range(2_000):
        (big / f"e{i}").touch()
    listing = _listing(mirror.directory, Lifts(), "big", os.fspath(big))
    assert listing is not None
    gc.collect()
    tracked, seen, todo = [], 0, [listing]
    while todo:  # every tuple (and what else) the listing holds, below its dicts and lists
        item = todo.pop()
        if isinstance(item, dict | list | tuple):
            todo.extend(item.values() if isinstance(item, dict) else item)
        if isinstance(item, tuple | os.stat_result):
            seen += 1
            if gc.is_tracked(item):
                tracked.append(item)
    assert seen >= 2_000 and len(tracked) < 20, tracked[:3]


def test_write_sparse_leaves_holes_and_writes_zeros_over_data(tmp_path: Path) -> None:
    """A push's write (``write_sparse``): blocks of zeros where the file has a hole stay holes (a new
    file, the part past its end), zeros where it holds data replace that data, and a piece ending in
    zeros still makes the file its full length."""
    block = 4096
    piece = b"a" * block + bytes(15 * block) + b"b" * block + bytes(100)
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        write_sparse(fd, piece, 0)
        assert os.fstat(fd).st_size == len(piece)
        assert os.lseek(fd, 0, os.SEEK_HOLE) == block  # the zeros are a hole, not written out
        assert os.lseek(fd, block, os.SEEK_DATA) == 16 * block
        assert os.fstat(fd).st_blocks * 512 <= 3 * block
        # Zeros over the data: written (the "a" block is gone), the hole stays one.
        write_sparse(fd, bytes(2 * block) + b"c", 0)
        assert os.pread(fd, len(piece) + 1, 0) == bytes(2 * block) + b"c" + piece[2 * block + 1 :]
        assert os.lseek(fd, block, os.SEEK_HOLE) < 16 * block
        # A piece of zeros only, past the end: no data, the file grows to hold it.
        write_sparse(fd, bytes(3 * block), 32 * block)
        assert os.fstat(fd).st_size == 35 * block
        assert os.pread(fd, 3 * block, 32 * block) == bytes(3 * block)
    finally:
        os.close(fd)
