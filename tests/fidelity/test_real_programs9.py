"""Where real users break the exec layer (session 67, fid10): real programs across separate calls, per
call and live, after reopens; each a regression test of a defect found so.

- A run that moves a directory into another one and then moves that one (``mv e d/s/e && mv d dd``:
  a build staging its output, ``git worktree``/``rsync`` temp trees renamed into place) moved
  ``dd/s``'s time in the sandbox (a name arrived in it), but the pull never sent it: the parents of a
  rename pair were read at the names they had at that rename, ``d/s``, gone once ``d`` became ``dd``.
  The store took the time of the pull's commit instead (its rename of ``e`` moves the parent's time,
  ``storage/_parent_time``): ``stat dd/s`` said 9-15 ms later after a reopen than the run had seen.
  Each pair's parents are followed through the later pairs now (``runtime/_pull_moves.py``,
  ``rename_parents``).
- A directory moved aside and back in one sync (``mv d/s/t x && mv x d/s/t``: a build parking its
  output, a script's backup restored) moved ``d/s``'s time in the sandbox; a kept watch
  drops such a move (no rename is left to send) and with it every trace of ``d/s``, whose time
  stayed the store's (a year-2001 ``touch -d`` here) until a reopen put it back under the
  sandbox. The parents of every move the watch saw are read at the pull now
  (``runtime/_mirror_pull.py``, ``plan``).
- A directory moved into one the run made, which it then moves (``mkdir n && mv d n/d && mv n m``: a
  release script staging a tree under a new name, ``mktemp -d`` + ``mv``) reached the workspace as
  ``n/d``, a rename to a name gone by then, plus ``m`` and ``m/d`` made anew: the workspace held
  ``n/d/s`` and an empty ``m/d``, the sandbox ``m/d/s`` and no ``n``; after a reopen the sandbox showed
  the workspace's. A kept watch's pairing skipped the move of ``n`` (new since the last pull: its
  entries are events) though it carried a pair's new name; such a move has the pull walk the tree now
  and pair there (``runtime/_pull_moves.py``, ``watched_renames``).
- Two trees moved one into the other below a new directory (``mkdir n && mv d n/d && mv e n/e && mv
  n/d n/e/d && mv n m``) failed the run, ``FileExistsError: /workspace/m/e`` (per call: reported
  failed, nothing of it kept; live: "sync failed" logged, then a full sync, so the test fails per call
  only): the walk's pairing sent ``d -> m/e/d`` first, whose parents the owner made, then ``e ->
  m/e``, onto them. A pair whose new name an earlier pair's parents hold is sent as before now, a
  removal and the new tree (``runtime/_pull_moves.py``, ``find_renames``).
- A tree moved into a new directory that the run then removes (``mkdir n && mv d n/d && rm -rf n``: a
  staging directory discarded) left an empty ``n`` in the workspace, absent from the sandbox until a
  reopen showed it there too: the pair ``d -> n/d`` was sent, the owner made ``n`` for it, and ``n``,
  made and removed in the run, was never sent as removed. A pair whose new name is gone by the pull has
  it walk now (``runtime/_pull_moves.py``, ``watched_renames``).
- A tree moved into a new directory that then takes the tree's old name (``cd w && mkdir n && mv d n/d
  && mv n d``: a tool wrapping its output one level down) is walked (the watch's pairing cannot follow
  it), and a walk of a watched tree had no baseline of directories' times: ``w`` kept its older time
  in the store (the 2001 of a ``touch -d`` here) and a reopen showed it. The directories the events
  named, their parents and the moves' parents take their times now (``runtime/_mirror_watch.py``,
  ``moved_times``).
- A directory made in the run that a directory made in it then leaves (``mkdir -p x/y/z; sleep; mv
  x/y/z q``: a build's scratch tree moved into place) kept the time its watch read as it appeared: the
  move's event names ``z`` alone, so nothing had ``x/y`` read again, and the store (and a reopen) showed
  ``x/y`` older than the run left it. The moves' parents are lstat-ed at the pull now
  (``runtime/_pull_moves.py``, ``moved_parents``).
- ``rm -rf build && mkdir build`` (every clean build) moved the time of the directory around ``build``
  in the sandbox, never in the store: a directory's entry is its mode alone, so ``build`` made again
  compared equal, and only its own time was read. After a reopen ``stat .`` showed the time before the
  run (here a 2001 ``touch -d``). A directory an event names has its parent's time read too now
  (``runtime/_mirror_pull.py``, ``_plan``; a time the store has already is no change: nothing logged).
- A watched tree whose watch broke during the run (a move while it added a new directory: the test
  above failed so now and then under load) was walked with no baseline of directories' times: a name
  made and removed, or a directory removed and made again, moved no time in the store. Such a walk
  sends the times of the directories whose ctime moved since the watch was armed now
  (``runtime/_mirror_watch.py``, ``recent_dirs``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from computer.runtime import _watch

from ._support import KINDS, ROOT, ok, opened, sandbox_view, shell, workspace_view

LIST = "find . -mindepth 1 -printf '%y %p\\n' | sort"


async def _store_times(ws: object, names: list[str]) -> str:
    lines = []
    for name in names:
        st = await ws.fs.stat(ROOT if name == "." else f"{ROOT}/{name}")  # type: ignore[attr-defined]
        ns = st.mtime * 1_000_000 + st.sub_ns
        lines.append(f"{name} {ns // 10**9}.{ns % 10**9:09d}")
    return "\n".join(lines) + "\n"


async def _kept_times(db: Path, live: bool, setup: str, program: str, names: list[str]) -> str:
    """``program``'s directories' times (``stat`` of ``names`` at its end) as the store and, after a
    reopen, a new sandbox show them: the same."""
    times = "stat -c '%n %.9Y' " + " ".join(names)
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(ws, setup)
        seen = (await ok(ws, f"{program} && {times}")).stdout
        assert await _store_times(ws, names) == seen
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, times)).stdout == seen
    return seen


@pytest.mark.parametrize("live", KINDS)
async def test_a_directory_moved_into_one_then_moved_keeps_its_new_parent_s_time(
    db: Path, live: bool
) -> None:
    setup = "mkdir -p d/s e && echo 1 > e/f && touch -d @1000000000 d d/s e"
    names = ["dd", "dd/s", "dd/s/e", "dd/s/e/f"]
    seen = await _kept_times(db, live, setup, "mv e d/s/e && mv d dd", names)  # was: dd/s ms later
    assert not seen.splitlines()[1].endswith(" 1000000000.000000000"), seen  # (``s`` took ``e``)


@pytest.mark.parametrize("live", KINDS)
async def test_a_directory_moved_away_and_back_moves_its_parents_times(db: Path, live: bool) -> None:
    setup = "mkdir -p d/s/t && echo 1 > d/s/t/f && touch -d @1000000000 d d/s d/s/t"
    names = [".", "d", "d/s", "d/s/t", "d/s/t/f"]
    seen = await _kept_times(db, live, setup, "mv d/s/t x && mv x d/s/t", names)  # was: d/s in 2001
    old = [line.endswith(" 1000000000.000000000") for line in seen.splitlines()]
    assert old == [False, True, False, True, False], seen  # (``.``: ``x`` came and went)


async def _listing(ws: object) -> str:
    rows = ws.fs.manifest(ROOT)  # type: ignore[attr-defined]
    kinds = {"file": "f", "dir": "d", "symlink": "l"}
    return "".join(sorted(f"{kinds[r.kind]} ./{r.path[len(ROOT) + 1 :]}\n" for r in rows if r.path != ROOT))


async def _kept_listing(db: Path, live: bool, setup: str, program: str, expected: str) -> None:
    """After ``program`` the sandbox lists ``expected``, and so do the workspace and, after a reopen, a
    new sandbox; every file's bytes the same on both sides."""
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(ws, setup)
        assert (await ok(ws, f"{program} && {LIST}")).stdout == expected
        assert await _listing(ws) == expected
        assert await workspace_view(ws) == await sandbox_view(ws)
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, LIST)).stdout == expected


@pytest.mark.parametrize("live", KINDS)
async def test_a_tree_moved_into_a_new_directory_that_moves_next_lands_whole(db: Path, live: bool) -> None:
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(ws, "mkdir -p d/s e && echo 1 > d/s/f && ln -s s/f d/l")
        before = (await ws.fs.stat(f"{ROOT}/d/s/f")).ino
        seen = (await ok(ws, f"mkdir n && mv d n/d && mv n m && {LIST}")).stdout
        assert seen == "d ./e\nd ./m\nd ./m/d\nd ./m/d/s\nf ./m/d/s/f\nl ./m/d/l\n"
        assert await _listing(ws) == seen  # was: n, n/d, n/d/s, n/d/s/f, n/d/l and an empty m/d
        assert await ws.fs.read_text(f"{ROOT}/m/d/s/f") == "1\n"
        assert await ws.fs.readlink(f"{ROOT}/m/d/l") == "s/f"
        assert (await ws.fs.stat(f"{ROOT}/m/d/s/f")).ino == before  # (paired by the walk: a rename)
        assert (await ok(ws, LIST)).stdout == seen
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, LIST)).stdout == seen


@pytest.mark.parametrize("live", KINDS)
async def test_two_trees_moved_one_into_the_other_below_a_new_directory(db: Path, live: bool) -> None:
    setup = "mkdir -p d/s e/u && echo 1 > e/f && echo 2 > d/s/g"
    moves = "mkdir n && mv d n/d && mv e n/e && mv n/d n/e/d && mv n m"  # was: FileExistsError, run failed
    expected = "d ./m\nd ./m/e\nd ./m/e/d\nd ./m/e/d/s\nd ./m/e/u\nf ./m/e/d/s/g\nf ./m/e/f\n"
    await _kept_listing(db, live, setup, moves, expected)


@pytest.mark.parametrize("live", KINDS)
async def test_a_tree_moved_into_a_new_directory_then_removed_leaves_nothing(db: Path, live: bool) -> None:
    setup = "mkdir -p d/s e && echo 1 > d/s/f"
    await _kept_listing(db, live, setup, "mkdir n && mv d n/d && rm -rf n", "d ./e\n")  # was: an empty n too


@pytest.mark.parametrize("live", KINDS)
async def test_a_tree_wrapped_one_level_down_under_its_own_name_keeps_times(db: Path, live: bool) -> None:
    setup = "mkdir -p w/d/s && echo 1 > w/d/s/f && touch -d @1000000000 w w/d w/d/s"
    program = "(cd w && mkdir n && mv d n/d && mv n d)"
    seen = await _kept_times(db, live, setup, program, ["w", "w/d", "w/d/d", "w/d/d/s"])  # was: w in 2001
    assert [line.endswith(" 1000000000.000000000") for line in seen.splitlines()] == [
        False,
        False,
        True,
        True,
    ]


@pytest.mark.parametrize("live", KINDS)
async def test_a_new_directory_a_new_one_leaves_keeps_its_later_time(db: Path, live: bool) -> None:
    program = "mkdir -p x/y/z && sleep 0.2 && mv x/y/z q"
    await _kept_times(db, live, "true", program, ["x", "x/y", "q"])  # was: x/y 0.2 s older


@pytest.mark.parametrize("live", KINDS)
async def test_a_directory_removed_and_made_again_moves_its_parent_s_time(db: Path, live: bool) -> None:
    times = "stat -c '%n %.9Y' w w/build"
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(ws, "mkdir -p w/build/obj && echo 1 > w/build/obj/o && touch -d @1000000000 w w/build")
        seen = (await ok(ws, f"rm -rf w/build && mkdir w/build && {times}")).stdout
        assert " 1000000000.000000000" not in seen, seen
        assert await _store_times(ws, ["w", "w/build"]) == seen  # was: w in 2001
        rev = ws.fs.rev
        assert (
            await ok(ws, "touch -d @1000000000 w/build && stat -c %.9Y w/build")
        ).stdout == "1000000000.000000000\n"
        assert [(c.op, c.path) for c in ws.fs.changes_since(rev, ROOT).changes] == [
            ("touch", f"{ROOT}/w/build")
        ]
        seen = (await ok(ws, times)).stdout
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, times)).stdout == seen


@pytest.mark.parametrize("live", KINDS)
async def test_a_broken_watch_s_walk_keeps_the_times_the_run_moved(
    db: Path, live: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    times = "stat -c '%n %.9Y' w w/build u"
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(ws, "mkdir -p w/build u && touch -d @1000000000 w w/build u")
        monkeypatch.setattr(_watch.TreeWatch, "drain", lambda self: None)  # broken: every pull walks
        seen = (await ok(ws, f"rm -rf w/build && mkdir w/build && touch u/tmp && rm u/tmp && {times}")).stdout
        assert " 1000000000.000000000" not in seen, seen
        assert await _store_times(ws, ["w", "w/build", "u"]) == seen  # was: w and u in 2001
        monkeypatch.undo()
    async with opened(db, shell=shell(live), python=False) as ws:
        assert (await ok(ws, times)).stdout == seen
