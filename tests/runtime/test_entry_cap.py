"""A workspace's entry cap (``max_entries``, ``_entry_cap``): a program's flood of empty files,
directories and symlinks cost the host process ~1 KiB each while the mirror stays warm, the store a
row each, and every later full push its time, bounded only by the sandbox's memory group (~1 million
under 1024 MB). Past the cap a pull's new entries are refused, reported with the limit, and removed
from the sandbox; the real pull runs here, under a small cap, per call and live."""

from __future__ import annotations

from pathlib import Path

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


async def test_a_live_sandbox_keeps_the_workspace_within_the_cap() -> None:
    """Live, a sync tick may pull the flood's first entries while within the cap; past it, none."""
    async with computer.Workspace(backends=[ShellBackend(max_entries=CAP, live=True)]) as ws:
        await _start(ws)
        flood = await (await ws.runtime.exec(FLOOD)).result()
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
