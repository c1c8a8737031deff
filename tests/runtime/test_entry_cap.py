"""A workspace's entry cap (``max_entries``, ``_entry_cap``): a program's flood of empty files,
directories and symlinks cost the host process ~1 KiB each while the mirror stays warm, the store a
row each, and every later full push its time, bounded only by the sandbox's memory group (~1 million
under 1024 MB). Past the cap a pull's new entries are refused, reported with the limit, and removed
from the sandbox; the real pull runs here, under a small cap, per call and live."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import computer
from computer.runtime import ShellBackend

CAP = 50


FLOOD = (
    "mkdir big && cd big && seq 200 | xargs touch && mkdir d1 d2 && ln -s 1 s1 && "
    "echo b > ../keep/a.txt && touch ../loose"
)


async def _start(ws: computer.Workspace) -> None:
    await ws.fs.mkdir("/workspace/keep", recursive=True)
    await ws.fs.write_file("/workspace/keep/a.txt", "a")
    # Within the cap: pulled as always.
    small = await (await ws.runtime.exec("mkdir few && cd few && seq 10 | xargs touch")).result()
    assert small.status == "completed", small
    assert len(await ws.fs.ls("/workspace/few")) == 10


async def test_a_flood_of_entries_past_the_cap_is_refused_and_named() -> None:
    async with computer.Workspace(backends=[ShellBackend(max_entries=CAP, live=False)]) as ws:
        await _start(ws)
        # Past the cap: files, directories and symlinks, none reaches the workspace, each named (the
        # new directory stands for what it held), with the limit and how to raise it.
        flood = await (await ws.runtime.exec(FLOOD)).result()
        assert flood.status == "completed", flood
        assert sorted(flood.skipped) == ["/workspace/big", "/workspace/loose"]
        for path in flood.skipped:
            why = flood.skipped_reasons[path]
            assert f"max_entries ({CAP})" in why and "raise" in why, why
        assert not await ws.fs.exists("/workspace/big")
        assert not await ws.fs.exists("/workspace/loose")
        # A change to an entry the workspace holds is no new entry: pulled.
        assert await ws.fs.read_file("/workspace/keep/a.txt") == b"b\n"
        assert "/workspace/keep/a.txt" in flood.pulled
        # The sandbox's copy is gone too (nothing kept that the workspace lacks), and what the
        # workspace holds is intact; the next run works within the cap again.
        after = await (await ws.runtime.exec("ls; ls few | wc -l; touch new")).result()
        assert after.status == "completed", after
        assert after.stdout.split() == ["few", "keep", "10"]
        assert await ws.fs.exists("/workspace/new")
        # Many refused in one directory the workspace holds: the run names the directory, with their
        # count (not each: a result and its journal record naming 700,000 paths).
        many = await (await ws.runtime.exec("cd few && seq 11 1200 | xargs touch")).result()
        assert many.skipped == ["/workspace/few"], many.skipped[:5]
        assert many.skipped_reasons["/workspace/few"].startswith("1190 new entries in it not synced")
        assert len(await ws.fs.ls("/workspace/few")) == 10


# Live, a tick past the cap may remove ``big`` while the flood still runs in it (its ``mkdir d1`` then
# fails: the directory it runs in is gone), so the live flood changes ``keep/a.txt`` first and goes on
# past a failed step; what it then made is refused or removed either way.
LIVE_FLOOD = "echo b > keep/a.txt; mkdir big; cd big && seq 200 | xargs touch; mkdir d1 d2; ln -s 1 s1; touch ../loose; true"


async def test_a_live_sandbox_keeps_the_workspace_within_the_cap() -> None:
    """Live, a sync tick may pull the flood's first entries while within the cap; past it, none."""
    async with computer.Workspace(backends=[ShellBackend(max_entries=CAP, live=True)]) as ws:
        await _start(ws)
        flood = await (await ws.runtime.exec(LIVE_FLOOD)).result()
        assert flood.status == "completed", flood
        assert flood.skipped
        for path in flood.skipped:
            why = flood.skipped_reasons[path]
            assert f"max_entries ({CAP})" in why and "raise" in why, why
        held = await ws.fs.find("/workspace")
        assert len(held) <= CAP, len(held)
        assert await ws.fs.read_file("/workspace/keep/a.txt") == b"b\n"
        # What the sandbox holds is what the workspace holds: the refused entries were removed.
        after = await (await ws.runtime.exec("find . -mindepth 1 \\( -type f -o -type d \\) | sort")).result()
        assert after.status == "completed", after
        listed = sorted("/workspace/" + line[2:] for line in after.stdout.split())
        assert listed == sorted(e.path for e in held), (listed, held)


async def test_no_cap_when_asked() -> None:
    backend = ShellBackend(max_entries=None, live=False)
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace", recursive=True)
        result = await (await ws.runtime.exec("seq 300 | xargs touch")).result()
        assert result.status == "completed" and not result.skipped, result
        assert len(await ws.fs.ls("/workspace")) == 300


async def test_refused_entries_stay_out_after_a_reopen_and_a_workspace_write_during_the_run_is_kept(
    tmp_path: Path,
) -> None:
    """Across separate runs and a reopen (the mirror rebuilt from the file by a fresh backend): what
    the cap refused never comes back, and a file the workspace wrote while the flooding run ran (a
    new path of its own, before or after the run's push) is kept."""
    db = str(tmp_path / "ws.sqlite")
    async with computer.Workspace(db, backends=[ShellBackend(max_entries=CAP, live=False)]) as ws:
        await _start(ws)
        handle = await ws.runtime.exec(f"sleep 0.5; {FLOOD}")
        await ws.fs.write_file("/workspace/mine.txt", "mine")
        flood = await handle.result()
        assert flood.status == "completed", flood
        assert sorted(flood.skipped) == ["/workspace/big", "/workspace/loose"]
        assert await ws.fs.read_file("/workspace/mine.txt") == b"mine"
    async with computer.Workspace(db, backends=[ShellBackend(max_entries=CAP, live=False)]) as ws:
        held = sorted(e.path for e in await ws.fs.find("/workspace"))
        assert "/workspace/big" not in held and "/workspace/mine.txt" in held
        seen = await (await ws.runtime.exec('find . -mindepth 1 | sort; echo "$(cat mine.txt)"')).result()
        assert seen.status == "completed", seen
        *listed, mine = seen.stdout.split("\n")[:-1]
        assert sorted("/workspace/" + line[2:] for line in listed) == held
        assert mine == "mine"


def test_a_walk_past_the_cap_collects_no_new_entry_and_enters_no_new_directory(tmp_path: Path) -> None:
    """The pull that meets a flood walked the whole tree into the state to be (~0.7 KiB of the host an
    entry: its peak grew with the flood, not the cap) and the cap took the new entries out after.
    Past the cap the walk keeps only entries the state held, counts the new ones and names the
    outermost, and never enters a new directory."""
    from computer.runtime._entry import entry_of
    from computer.runtime._lifts import Lifts
    from computer.runtime._mirror_walk import walk

    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "kept").write_text("k")
    for name in ("a", "b", "c"):
        (tmp_path / "old" / name).mkdir()
        for i in range(100):
            (tmp_path / "old" / name / str(i)).touch()
    (tmp_path / "loose").touch()
    state = {rel: entry_of(os.lstat(tmp_path / rel)) for rel in ("old", "old/kept")}
    now, overflow = walk(tmp_path, state, Lifts(active=False), {}, [], cap=20)
    assert set(now) == {"old", "old/kept"} and overflow is not None
    assert sorted(overflow.names) == ["loose", "old/a", "old/b", "old/c"]
    assert overflow.parents == {"": 1, "old": 3}
    assert overflow.refused < 20 + 3 * 100  # at most the directory it was in when it crossed: entered
    within, none = walk(tmp_path, state, Lifts(active=False), {}, [], cap=400)
    assert len(within) == 306 and none is None


async def test_a_walked_flood_past_the_names_kept_is_removed_and_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pull that walks (the watch cannot vouch for the tree: a queue overflow, a move in from
    outside it) past the cap keeps the names of the first ``KEEP_NAMES`` refused paths; the rest are
    removed by reading their directory again, and the run counts them all. The walk is made certain
    by the watch saying "only a walk can tell" (a directory ``mv`` inside the tree no longer walks
    since the watch follows moves: the test relied on it and, in CI, read the watched count)."""
    import computer.runtime._mirror_walk as mirror_walk
    from computer.runtime._mirror_watch import MirrorWatch

    monkeypatch.setattr(mirror_walk, "KEEP_NAMES", 3, raising=False)
    async with computer.Workspace(backends=[ShellBackend(max_entries=CAP, live=False)]) as ws:
        await _start(ws)
        walked: list[int] = []
        monkeypatch.setattr(MirrorWatch, "touched", lambda self: walked.append(1))  # None: walk
        many = await (await ws.runtime.exec("cd few && seq 11 1200 | xargs touch && mkdir m2")).result()
        assert walked, "the pull never asked its watch"
        assert many.status == "completed", many
        assert many.skipped == ["/workspace/few"], many.skipped[:5]
        why = many.skipped_reasons["/workspace/few"]
        assert why.startswith("1191 new entries in it not synced: the workspace would hold at least"), why
        assert f"max_entries ({CAP})" in why
        assert len(await ws.fs.ls("/workspace/few")) == 10
        after = await (await ws.runtime.exec("ls few | wc -l")).result()
        assert after.stdout.strip() == "10", after
