"""``TreeWatch``: every watch of a process shares one inotify instance, and each sees only its own tree."""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from computer.runtime import _watch
from computer.runtime._watch import TreeWatch


@pytest.fixture(autouse=True)
def inotify() -> _watch._Inotify:
    try:
        shared = _watch._instance()
    except OSError as e:  # no inotify, or none left for this user: the mirror walks instead
        pytest.skip(f"no inotify instance: {e}")
    shared.pump()  # an empty shared queue to start with (an earlier test's releases queue events)
    return shared


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[TreeWatch, TreeWatch]]:
    """Watches of ``tmp_path/a`` and ``tmp_path/b``, closed after the test."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    watches = TreeWatch(tmp_path / "a"), TreeWatch(tmp_path / "b")
    yield watches
    for watch in watches:
        watch.close()


def queue_limit() -> int:
    """Events the kernel queues per inotify instance (``fs.inotify.max_queued_events``)."""
    return int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())


def inotify_fds() -> int:
    return sum(target == "anon_inode:inotify" for target in _open_fds().values())


def _open_fds() -> dict[str, str]:
    """The process's open descriptors and what each points to, each link read once: one another
    thread closed since the listing is left out (reading the links a second time raised
    FileNotFoundError for such a one: 3 in 3,000 counts beside a thread opening and closing a file)."""
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
    return found


def test_more_watches_than_the_kernel_allows_instances_share_one(tmp_path: Path) -> None:
    """128 instances per user is the kernel's default: 300 watches must not need 300 of them."""
    before = inotify_fds()
    watches = []
    for i in range(300):
        (tmp_path / f"m{i}/sub").mkdir(parents=True)
        watches.append(TreeWatch(tmp_path / f"m{i}"))
    assert inotify_fds() == before
    (tmp_path / "m7/sub/x").write_text("x")
    (tmp_path / "m299/y").write_text("y")
    with _watch._instance().lock:  # no other thread reads meanwhile (``pending`` would say -1)
        assert [w.pending() > 0 for w in watches].count(True) == 2
    assert watches[7].drain() == {"sub/x"}
    assert watches[299].drain() == {"y"}
    assert watches[0].drain() == set()
    for w in watches:
        w.close()


def test_a_watch_sees_its_own_tree_only_however_the_events_were_read(
    tmp_path: Path, pair: tuple[TreeWatch, TreeWatch]
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    wa, wb = pair
    (b / "f").write_text("1")
    # The lock held: the shared instance's reader thread (other tests' mirrors in the process) reading
    # at that moment made ``pending`` say -1 ("cannot tell"), which failed the full suite once (s66).
    with _watch._instance().lock:
        assert wa.pending() == 0  # reading the shared queue for a moved b's event to b
    (a / "g").write_text("2")
    assert wb.drain() == {"f"}
    assert wa.drain() == {"g"}
    with _watch._instance().lock:
        assert wa.pending() == wb.pending() == 0


def test_a_closed_or_dropped_watch_gives_its_watches_back(tmp_path: Path, inotify: _watch._Inotify) -> None:
    """Other watches of the process (other tests' mirrors) come and go meanwhile: only ours are counted."""
    (tmp_path / "t/a/b").mkdir(parents=True)
    w = TreeWatch(tmp_path / "t")
    wds = set(w._held.wds)
    assert len(wds) == 3 and all(inotify.owners[wd] is w._held for wd in wds)
    w.close()
    assert not wds & inotify.owners.keys()
    w = TreeWatch(tmp_path / "t")
    held, wds = w._held, set(w._held.wds)
    assert wds & inotify.owners.keys() == wds
    del w
    gc.collect()
    inotify.pump()  # a finalizer only queues its release (the collector may run under the lock)
    assert not wds & inotify.owners.keys() and not held.wds
    (tmp_path / "t/after").write_text("x")  # events of a released tree go nowhere
    inotify.pump()
    assert not held.events


def test_an_overflow_of_the_shared_queue_makes_every_watch_walk(
    tmp_path: Path, inotify: _watch._Inotify, pair: tuple[TreeWatch, TreeWatch]
) -> None:
    wa, wb = pair
    (tmp_path / "a/1").write_text("1")
    (tmp_path / "a/2").write_text("2")
    limit = queue_limit()
    with inotify.lock:  # the reader thread waits: the kernel's queue fills up
        for _ in range(limit // 2 + 10):  # alternating, so the kernel cannot merge them
            os.utime(tmp_path / "a/1")
            os.utime(tmp_path / "a/2")
        assert wb.drain() is None  # b lost nothing of its own, but the queue cannot tell
        assert wa.drain() is None


def test_the_reader_thread_keeps_the_shared_queue_from_overflowing(
    tmp_path: Path, pair: tuple[TreeWatch, TreeWatch]
) -> None:
    """More events than the kernel queues, in bursts a run could make: read as they come, none lost."""
    wa, wb = pair
    limit = queue_limit()
    made = 0
    while made < limit * 1.5:  # bounded: ~25,000 files
        for _ in range(2_000):
            (tmp_path / f"a/{made}").touch()
            made += 1
        time.sleep(0.05)  # what writing them through a sandbox takes anyway
    touched = wa.drain()
    assert touched is not None and len(touched) == made
    assert wb.drain() == set()


def test_a_watch_holding_too_many_events_gives_up_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pair: tuple[TreeWatch, TreeWatch]
) -> None:
    wa, wb = pair
    monkeypatch.setattr(_watch, "MAX_HELD", 5)
    for i in range(10):
        (tmp_path / f"a/{i}").write_text("x")
    assert wb.drain() == set()  # b's events were fine
    assert wa.drain() is None  # a held too many: it gives up, the pull walks


def test_a_quiet_watch_does_not_parse_another_watchs_flood(tmp_path: Path, inotify: _watch._Inotify) -> None:
    """``pending`` runs on the event loop: it reads one small chunk, and says -1 (cannot tell cheaply)
    rather than parse thousands of another mirror's events; the pull, in a thread, reads them all."""
    (tmp_path / "busy").mkdir()
    (tmp_path / "quiet").mkdir()
    busy, quiet = TreeWatch(tmp_path / "busy"), TreeWatch(tmp_path / "quiet")
    with inotify.lock:  # the reader thread waits: the flood stays in the kernel's queue
        for i in range(2_000):
            (tmp_path / f"busy/{i}").touch()
        assert quiet.pending() == -1
        assert len(busy.drain() or ()) == 2_000
        assert quiet.pending() == 0
    busy.close()
    quiet.close()


def test_watches_drained_from_several_threads_each_get_exactly_their_own_events(tmp_path: Path) -> None:
    """Pulls run in worker threads while the event loop takes cheap looks: every event read by any of
    them lands with its own watch, none is lost or delivered twice."""
    import threading

    roots = [tmp_path / f"m{i}" for i in range(4)]
    for root in roots:
        root.mkdir()
    watches = [TreeWatch(root) for root in roots]
    seen: list[set[str]] = [set() for _ in roots]
    errors: list[BaseException] = []
    stop = threading.Event()

    def pull(i: int) -> None:
        try:
            while not stop.is_set():
                touched = watches[i].drain()
                assert touched is not None
                seen[i] |= touched
        except BaseException as e:  # reported below
            errors.append(e)

    def look() -> None:
        while not stop.is_set():
            for w in watches:
                w.pending()

    threads = [threading.Thread(target=pull, args=(i,)) for i in range(len(roots))]
    threads.append(threading.Thread(target=look))
    for t in threads:
        t.start()
    try:
        for n in range(300):
            (roots[n % len(roots)] / f"f{n}").write_text("x")
            if n % 50 == 0:
                (roots[n % len(roots)] / f"d{n}").mkdir()
                (roots[n % len(roots)] / f"d{n}/inner").write_text("y")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
    assert not errors
    for i, w in enumerate(watches):
        seen[i] |= w.drain() or set()
        expected = {f"f{n}" for n in range(i, 300, len(roots))}
        expected |= {f"d{n}" for n in range(0, 300, 50) if n % len(roots) == i}
        expected |= {f"d{n}/inner" for n in range(0, 300, 50) if n % len(roots) == i}
        assert seen[i] == expected
        w.close()


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    """A directory on tmpfs (the default home of mirrors)."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    where = Path(tempfile.mkdtemp(prefix="watch-test-", dir="/dev/shm"))
    (where / "m").mkdir()
    yield where / "m"
    shutil.rmtree(where)


def test_new_empty_directories_are_watched_without_a_listing(
    shm_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``mkdir -p`` of a tree: each new directory is watched and lstat-ed (kept for the plan); only
    those whose size says they hold something are listed, and what they hold is still found."""
    (shm_dir.parent / "probe").mkdir()
    empty = os.lstat(shm_dir.parent / "probe").st_size
    (shm_dir.parent / "probe/x").mkdir()
    if os.lstat(shm_dir.parent / "probe").st_size == empty:
        pytest.skip("directory sizes on /dev/shm do not count their entries")
    listed: list[str] = []
    scandir = os.scandir

    def counting(path: str) -> object:
        listed.append(os.path.relpath(path, shm_dir))
        return scandir(path)

    watch = TreeWatch(shm_dir)
    # Counted from here: the reader thread may list them before the drain does.
    monkeypatch.setattr(_watch.os, "scandir", counting)
    try:
        for a in range(3):
            for b in range(4):
                (shm_dir / f"t/d{a}/{b}").mkdir(parents=True)
        (shm_dir / "t/d1/2/file").write_text("x")  # perhaps made before its directory is watched
        (shm_dir / "t/d2/3/sub").mkdir()
        touched = watch.drain()
        monkeypatch.undo()
        new_dirs = {"t", *(f"t/d{a}" for a in range(3)), *(f"t/d{a}/{b}" for a in range(3) for b in range(4))}
        assert touched == new_dirs | {"t/d1/2/file", "t/d2/3/sub"}
        # Listed: at most the directories that hold something; the 10 empty leaves only lstat-ed.
        assert set(listed) <= {"t", "t/d0", "t/d1", "t/d2", "t/d1/2", "t/d2/3"}
        assert set(watch.stats) == new_dirs | {"t/d2/3/sub"}
        assert all(st.st_ino == os.lstat(shm_dir / rel).st_ino for rel, st in watch.stats.items())
        # An empty leaf that was not listed is watched all the same.
        (shm_dir / "t/d0/0/later").write_text("y")
        assert watch.drain() == {"t/d0/0/later"}
    finally:
        watch.close()


def wait_watched(watch: TreeWatch, rel: str) -> None:
    """Until the reader thread has watched the new directory ``rel`` (read its creation)."""
    deadline = time.monotonic() + 10
    while rel not in watch._held.dirs.values():
        assert time.monotonic() < deadline, f"{rel} never watched"
        time.sleep(0.005)


def test_new_directories_are_watched_as_their_events_come(
    shm_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader thread watches (and lists) a new directory as it reads its creation, while the run
    goes on: the drain after the run has no directory left to watch, and still reports all."""
    watch = TreeWatch(shm_dir)
    try:
        (shm_dir / "t/a/b").mkdir(parents=True)
        (shm_dir / "t/a/b/f").write_text("x")
        wait_watched(watch, "t/a/b")

        def refused(*args: object) -> None:
            raise AssertionError("the drain watched a directory")

        monkeypatch.setattr(_watch._Inotify, "add", refused)
        assert watch.drain() == {"t", "t/a", "t/a/b", "t/a/b/f"}
        monkeypatch.undo()
        (shm_dir / "t/a/b/g").write_text("y")
        assert watch.drain() == {"t/a/b/g"}
    finally:
        watch.close()


def test_the_loops_cheap_look_never_waits_for_the_lock(shm_dir: Path, inotify: _watch._Inotify) -> None:
    """``pending`` runs on the event loop: while another thread holds the shared lock (the reader
    thread watching a tree a run made, 37,000 directories: ~0.25 s, every workspace of the process
    waited) it says -1 at once, and the pull goes to a thread that waits instead."""
    watch = TreeWatch(shm_dir)
    holding, done = threading.Event(), threading.Event()
    timed_out: list[bool] = []

    def hold() -> None:
        with inotify.lock:
            holding.set()
            timed_out.append(not done.wait(10))

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(10)
        (shm_dir / "f").touch()
        assert watch.pending() == -1
        done.set()
        holder.join(10)
        assert timed_out == [False]  # it answered while the lock was held: it did not wait
        assert watch.drain() == {"f"}
    finally:
        done.set()
        holder.join(10)
        watch.close()


def test_directories_the_loops_look_reads_of_are_watched_by_the_next_full_read(
    shm_dir: Path, inotify: _watch._Inotify, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The event loop's cheap look reads a directory's creation but does not watch it (nor list what
    it holds): it says -1, and the pull's full read, in a thread, watches and lists it before reading
    on, so nothing made in it before or after is missed."""
    watch = TreeWatch(shm_dir)
    try:
        with inotify.lock:  # the reader thread waits: the creation stays queued for the look to read
            (shm_dir / "t/a/b").mkdir(parents=True)
            (shm_dir / "t/a/b/f").write_text("x")
            added: list[str] = []
            add = _watch._Inotify.add

            def recorded(self: _watch._Inotify, held: Any, batch: list[tuple[str, str]]) -> Any:
                added.extend(rel for rel, _ in batch)
                return add(self, held, batch)

            monkeypatch.setattr(_watch._Inotify, "add", recorded)
            assert watch.pending() == -1  # read, left to a thread
            assert added == [] and watch._held.unadopted == ["t"]
            assert watch.pending() == -1  # still: a directory is waiting to be watched
        assert watch.drain() == {"t", "t/a", "t/a/b", "t/a/b/f"}
        assert set(added) == {"t", "t/a", "t/a/b"} and watch._held.unadopted == []
        (shm_dir / "t/a/b/g").write_text("y")
        assert watch.drain() == {"t/a/b/g"}  # watched
    finally:
        watch.close()


def test_a_new_directory_changed_after_it_was_watched_is_lstat_ed_again(shm_dir: Path) -> None:
    """The lstat taken as a new directory is watched is kept for the plan only while no later event
    names that directory: a run that makes a directory and then changes its mode must not have the
    old mode synced."""
    watch = TreeWatch(shm_dir)
    try:
        (shm_dir / "d").mkdir(mode=0o755)
        (shm_dir / "e").mkdir(mode=0o755)
        wait_watched(watch, "d")
        wait_watched(watch, "e")
        os.chmod(shm_dir / "d", 0o700)
        assert watch.drain() == {"d", "e"}
        assert "d" not in watch.stats  # the plan lstats it now
        assert watch.stats["e"].st_ino == os.lstat(shm_dir / "e").st_ino
    finally:
        watch.close()


def test_a_tree_past_a_watchs_share_gives_every_watch_back(
    tmp_path: Path, inotify: _watch._Inotify, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Watches are counted per user over the host: a program making 200,000 directories took every
    watch of uid 0 (other root processes got ENOSPC) for as long as its idle mirror stayed. A watch
    holds at most ``MAX_DIRS`` directories and gives them all back past that, and the process at most
    ``MAX_WATCHES`` (its other watches keep theirs)."""
    monkeypatch.setattr(_watch, "MAX_DIRS", 100)
    (tmp_path / "small/a").mkdir(parents=True)
    small = TreeWatch(tmp_path / "small")
    big_root = tmp_path / "big"
    big_root.mkdir()
    big = TreeWatch(big_root)
    for i in range(150):  # new directories adopted as their events are read: past the share
        (big_root / f"d{i}").mkdir()
    inotify.pump()
    assert big.drain() is None and big.over
    assert not big._held.wds and not big._held.wds & inotify.owners.keys()
    assert TreeWatch(big_root).over  # watched from the start: over at once too
    assert len(small._held.wds) == 2 and small.drain() == set()
    monkeypatch.setattr(_watch, "MAX_WATCHES", len(inotify.owners))  # the process is at its share
    (tmp_path / "third").mkdir()
    assert TreeWatch(tmp_path / "third").over
    assert small.drain() == set() and not small.over
    small.close()
    big.close()
