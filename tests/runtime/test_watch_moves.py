"""A program's ``mv`` of a directory inside a mirror keeps its watch (``_watch_moves``): the watch's
paths follow the move, the pull re-keys its state to it (``_pull_moves.watched_renames``) and sends
what changed, and no pull walks the whole tree for it (walks counted, not timed). A half of a move
without its pair (moved in from outside the tree or out of it, a cookie split across reads waits one read
for its pair), a queue
overflow, or a move while directories are being added still walks, as before."""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from computer.runtime import MirrorDir, MirrorFile, SyncPush, _mirror_watch, _watch
from computer.runtime._inotify_abi import (
    EVENT,
    IN_CREATE,
    IN_ISDIR,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_Q_OVERFLOW,
)
from computer.runtime._mirror import Mirror
from computer.runtime._mirror_base import Entry, PullPlan
from computer.runtime._watch import TreeWatch

ROOT = "/workspace"
_libc = ctypes.CDLL(None, use_errno=True)


@pytest.fixture(autouse=True)
def inotify() -> _watch._Inotify:
    try:
        shared = _watch._instance()
    except OSError as e:  # no inotify here: the mirror walks instead
        pytest.skip(f"no inotify instance: {e}")
    shared.pump()
    return shared


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts the mirror's whole-tree walks (``Mirror.scan``'s ``walk``)."""
    count = [0]
    real = _mirror_watch.walk

    def counted(*args: object, **kwargs: object) -> object:
        count[0] += 1
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_mirror_watch, "walk", counted)
    yield count


def seeded(base: Path) -> Mirror:
    """A mirror holding ``d/`` (20 files, ``d/sub/deep``, ``d/sub/inner/x``), ``k/`` and ``top``."""
    mirror = Mirror(base / "m", ROOT)
    names = [f"d/f{i}" for i in range(20)] + ["d/sub/deep", "d/sub/inner/x", "k/one", "top"]
    files = [MirrorFile(f"{ROOT}/{n}", n.encode(), 0o644, 1_000) for n in names]
    dirs = [MirrorDir(f"{ROOT}/{d}") for d in ("d", "d/sub", "d/sub/inner", "k")]
    mirror.apply(SyncPush(1, ROOT, True, files, dirs))
    mirror.arm()
    assert mirror.watch is not None
    return mirror


def _rel(path: str) -> str:
    return path[len(ROOT) + 1 :] if path != ROOT else ""


def pulled_tree(old: dict[str, Entry], plan: PullPlan, now: dict[str, Entry]) -> dict[str, Entry]:
    """The workspace's tree after ``plan``: ``old`` with the plan's renames done, its removals, and
    every entry it sends taken from ``now`` (what is not sent stays as the old state had it)."""
    tree = dict(old)
    for src, dst in plan.renames:
        s, d = _rel(src), _rel(dst)
        for key in [k for k in tree if k == s or k.startswith(s + "/")]:
            tree[d + key[len(s) :]] = tree.pop(key)
    for path in plan.deleted:
        r = _rel(path)
        for key in [k for k in tree if k == r or k.startswith(r + "/")]:
            del tree[key]
    sent = [r for r, _ in plan.files] + [r for r, _ in plan.links]
    sent += [_rel(d.path) for d in plan.dirs] + [_rel(s.path) for s in plan.symlinks]
    for r in sent:
        tree[r] = now[r]
    tree.pop("", None)
    return tree


def pull_matches_walk(mirror: Mirror) -> PullPlan:
    """Plan a pull; check the workspace it leaves is the mirror's tree as a walk finds it; adopt it."""
    old = dict(mirror.state)
    plan, now = mirror.plan()
    walked = mirror.scan()  # (after the plan: a walk of the test's own, not the pull's)
    assert now == walked
    expected = {k: v for k, v in walked.items() if k}
    assert pulled_tree(old, plan, now) == expected
    mirror.settle(now, 2, [], plan)
    return plan


def test_a_programs_mv_keeps_the_watch_and_the_pull_walks_nothing(tmp_path: Path, walks: list[int]) -> None:
    mirror = seeded(tmp_path)
    root = mirror.directory
    walks[0] = 0
    os.rename(root / "d", root / "e")
    (root / "e/sub/deep").write_text("changed after the move")
    plan = pull_matches_walk(mirror)
    assert walks[0] == 1  # the test's own check only: the pull walked nothing
    assert plan.renames == [(f"{ROOT}/d", f"{ROOT}/e")]
    assert [r for r, _ in plan.files] == ["e/sub/deep"] and not plan.deleted
    # The watch kept its paths: a later change below the moved tree is seen where it is now.
    walks[0] = 0
    (root / "e/sub/inner/new").write_text("new")
    os.rename(root / "e/sub/inner", root / "e/inner2")  # nested: a directory below a moved one
    (root / "e/inner2/x").write_text("x2")
    plan = pull_matches_walk(mirror)
    assert walks[0] == 1
    assert plan.renames == [(f"{ROOT}/e/sub/inner", f"{ROOT}/e/inner2")]
    assert sorted(r for r, _ in plan.files) == ["e/inner2/new", "e/inner2/x"]
    mirror.unwatch()


def test_moves_renamed_back_nested_and_chained_in_one_pull(tmp_path: Path, walks: list[int]) -> None:
    mirror = seeded(tmp_path)
    root = mirror.directory
    walks[0] = 0
    os.rename(root / "d", root / "x")
    os.rename(root / "x", root / "d")  # renamed back: nothing to rename
    plan = pull_matches_walk(mirror)
    assert walks[0] == 1 and plan.renames == [] and not plan.files and not plan.deleted
    walks[0] = 0
    prev = "d"
    for name in ("x", "y", "d", "z"):  # a chain: one rename (a background ``mv`` loop)
        os.rename(root / prev, root / name)
        prev = name
    plan = pull_matches_walk(mirror)
    assert walks[0] == 1 and plan.renames == [(f"{ROOT}/d", f"{ROOT}/z")]
    os.rename(root / "z", root / "d")
    pull_matches_walk(mirror)
    walks[0] = 0
    os.rename(root / "d/sub", root / "k/sub")  # into another directory
    os.rename(root / "k", root / "k2")  # its new parent moved too
    os.rename(root / "d", root / "k2/sub/d")  # then the old parent below the moved one
    (root / "k2/sub/d/f3").write_text("three")
    plan = pull_matches_walk(mirror)
    assert walks[0] == 1
    assert plan.renames == [
        (f"{ROOT}/d/sub", f"{ROOT}/k/sub"),
        (f"{ROOT}/k", f"{ROOT}/k2"),
        (f"{ROOT}/d", f"{ROOT}/k2/sub/d"),
    ]
    assert [r for r, _ in plan.files] == ["k2/sub/d/f3"]
    mirror.unwatch()


def test_a_forced_file_below_a_moved_directory_is_read_at_its_new_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write through a shared mapping raises no event and moves no time (``Mirror.force``): the
    forced name is the old one, the pull looks at the new (before: the old name failed its lstat, and
    the file waited for a look at every file, not due at a live tick)."""
    mirror = seeded(tmp_path)
    root = mirror.directory
    st = os.lstat(root / "d/f1")
    (root / "d/f1").write_bytes(b"D/F1")  # same size, the time put back: as a mapping's write
    os.utime(root / "d/f1", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert mirror.watch is not None and mirror.watch.drain()  # (its events: as if none came)
    assert mirror.force("d/f1") == 1
    os.rename(root / "d", root / "e")
    monkeypatch.setattr(mirror, "look_due", lambda paced=False: False)  # a tick, no full look due
    plan, _ = mirror.plan(paced=True)
    assert plan.renames == [(f"{ROOT}/d", f"{ROOT}/e")]
    assert [r for r, _ in plan.files] == ["e/f1"]
    mirror.unwatch()


@pytest.mark.parametrize("where", ["out", "in"])
def test_a_move_out_of_or_into_the_tree_walks_as_before(tmp_path: Path, walks: list[int], where: str) -> None:
    mirror = seeded(tmp_path)
    root, outside = mirror.directory, tmp_path / "outside"
    if where == "out":
        os.rename(root / "d", outside)
    else:
        (outside / "deeper").mkdir(parents=True)
        (outside / "deeper/f").write_text("f")
        os.rename(outside, root / "came")
    walks[0] = 0
    plan = pull_matches_walk(mirror)
    assert walks[0] == 2  # the pull's walk, and the test's
    if where == "in":
        assert "came/deeper/f" in {r for r, _ in plan.files}
    mirror.unwatch()


def _event(wd: int, mask: int, cookie: int, name: bytes) -> bytes:
    padded = name + b"\0" * (16 - len(name) % 16)
    return EVENT.pack(wd, mask, cookie, len(padded)) + padded


# One event a read: a read's buffer fits one event whose name is at most 16 bytes (the kernel never
# splits an event), so a move's two halves always come in two reads.
ONE_EVENT = EVENT.size + 16


@pytest.mark.parametrize("reads", [None, 1], ids=["full", "quick-look"])
def test_a_cookie_split_across_reads_keeps_the_watch(
    tmp_path: Path, inotify: _watch._Inotify, reads: int | None
) -> None:
    """The move's two halves in two reads (a read may end between them: 64 KiB, or the event loop's
    quick look of 4 KiB): the half waits for the next read. Before (s67), it broke the watch and the
    pull walked the whole tree. A limited read (the event loop's quick look) leaves the half waiting:
    the next read pairs it."""
    (tmp_path / "t/d/sub").mkdir(parents=True)
    watch = TreeWatch(tmp_path / "t")
    with inotify.lock:  # (the reader thread waits)
        os.rename(tmp_path / "t/d", tmp_path / "t/e")
        inotify.pump(ONE_EVENT, reads=reads)
        if reads is not None:
            assert inotify.halves.holds(watch._held)  # (``count`` says -1 then: a thread reads)
    assert watch.drain() == {"e"} and watch.moves == [("d", "e")]
    os.rename(tmp_path / "t/e/sub", tmp_path / "t/sub2")
    with inotify.lock:
        inotify.pump(ONE_EVENT)
    assert watch.drain() == {"sub2"} and watch.moves == [("e/sub", "sub2")]
    watch.close()


def test_a_half_unpaired_in_the_next_read_or_an_overflow_walks(
    tmp_path: Path, inotify: _watch._Inotify
) -> None:
    (tmp_path / "t/d/sub").mkdir(parents=True)
    watch = TreeWatch(tmp_path / "t")
    top = next(wd for wd, rel in watch._held.dirs.items() if rel == "")
    with inotify.lock:  # (the reader thread waits)
        inotify._dispatch(_event(top, IN_MOVED_FROM | IN_ISDIR, 7, b"d"), {})
        inotify._dispatch(_event(top, IN_CREATE, 0, b"x"), {})
        inotify._dispatch(_event(top, IN_MOVED_TO | IN_ISDIR, 7, b"e"), {})
    assert watch.drain() is None
    watch.close()
    watch = TreeWatch(tmp_path / "t")
    with inotify.lock:
        os.rename(tmp_path / "t/d", tmp_path / "t/e")
        inotify._dispatch(_event(-1, IN_Q_OVERFLOW, 0, b""), {})
    assert watch.drain() is None
    watch.close()


def test_a_move_while_directories_are_added_walks(tmp_path: Path, inotify: _watch._Inotify) -> None:
    """A listing that raced with the move may have named what it found under the old name."""
    (tmp_path / "t/d/sub").mkdir(parents=True)
    watch = TreeWatch(tmp_path / "t")
    with inotify.lock:
        watch._held.adopting += 1  # as an ``adopt`` in another thread does
        os.rename(tmp_path / "t/d", tmp_path / "t/e")
        inotify.pump()
        watch._held.adopting -= 1
    assert watch.drain() is None
    watch.close()
    watch = TreeWatch(tmp_path / "t")  # settled (its queue read empty since): moves pair again
    os.rename(tmp_path / "t/e", tmp_path / "t/d")
    assert watch.drain() == {"d"} and watch.moves == [("e", "d")]
    watch.close()


def exchange(one: Path, two: Path) -> None:
    """``renameat2(RENAME_EXCHANGE)`` (``mv --exchange``): inotify says one -> two, then two -> one."""
    if _libc.renameat2(-100, os.fsencode(one), -100, os.fsencode(two), 2) != 0:
        raise OSError(ctypes.get_errno(), "renameat2", str(one))


def test_two_directories_exchanged_walk(tmp_path: Path, walks: list[int]) -> None:
    """Both are watched at both names at once: the watch cannot tell them apart by path (before the
    check, both watches went to one name and a later write in ``k`` was taken for one in ``d``)."""
    mirror = seeded(tmp_path)
    root = mirror.directory
    exchange(root / "d", root / "k")
    walks[0] = 0
    pull_matches_walk(mirror)
    assert walks[0] == 2  # the pull's walk, and the test's
    (root / "k/sub/deep").write_text("after")
    (root / "d/one").write_text("after too")
    pull_matches_walk(mirror)
    mirror.unwatch()


NAMES = st.sampled_from(["d", "d/sub", "d/sub/inner", "k", "e", "k/e", "x", "OUT"])
OPS = st.lists(
    st.tuples(
        st.sampled_from(["mv", "mv", "mv", "exchange", "write", "mkdir", "rmtree", "pull", "peek", "split"]),
        NAMES,
        NAMES,
    ),
    max_size=14,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_any_history_of_moves_pulls_to_what_a_walk_finds(ops: list[tuple[str, str, str]]) -> None:
    """Moves within the tree, out of it (``OUT``) and back in, renamed back, over other names, exchanged, with
    writes, directories made and removed, and pulls between, the queue read one event at a time now and
    then (a move's halves in two reads): every pull leaves the workspace as the mirror's tree is."""
    with tempfile.TemporaryDirectory() as tmp:
        mirror = seeded(Path(tmp))
        root = mirror.directory
        place = {name: (Path(tmp) / "out" if name == "OUT" else root / name) for name in NAMES.elements}  # type: ignore[attr-defined]
        for op, one, two in ops:
            try:
                if op == "mv":
                    os.rename(place[one], place[two])
                elif op == "exchange":
                    exchange(place[one], place[two])
                elif op == "write":
                    (place[one] / "w").write_text(two)
                elif op == "mkdir":
                    place[one].mkdir()
                elif op == "rmtree":
                    shutil.rmtree(place[one])
                elif op == "peek":  # a quick look's one read, a move's half left waiting at its end
                    _watch._instance().pump(ONE_EVENT, reads=1)
                elif op == "split":  # the pull's reads, each ending between a move's two halves
                    _watch._instance().pump(ONE_EVENT)
                    pull_matches_walk(mirror)
                else:
                    pull_matches_walk(mirror)
            except OSError:
                pass  # not applicable to the tree's shape now: still a valid history
        pull_matches_walk(mirror)
        mirror.unwatch()
