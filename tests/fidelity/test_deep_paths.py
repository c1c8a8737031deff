"""Deep trees (hostile input to the sync bracket): a tree over 1,000 levels deep made, changed and read
back across runs and a reopen; paths a run makes past what the workspace can hold (a program can
``cd`` down past ``PATH_MAX``); a workspace path too long for the sandbox's directory on the host.
Each case is run per call and in a live sandbox.

Before: a pull of a file 1,300 levels down failed the run (``RecursionError`` while opening its
parents) and lost the program's change; a tree past the limit was cut silently (nothing in
``skipped``); a workspace path of 4,092 bytes failed every run ("the sandbox could not start: File name
too long").
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from computer.runtime import ShellBackend
from computer.runtime._pull_rules import PROTECTED_BELOW
from computer.runtime._reported import REPORTED

from ._support import ROOT, ok, opened, reasons_cover_skipped

LIVE = pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])


def _chain(levels: int, name: str = "d") -> str:
    return "/".join([name] * levels)


def _down(levels: int, name: str) -> str:
    """``cd`` down ``levels`` levels 500 at a time (a shell's ``cd`` takes paths up to ``PATH_MAX``)."""
    return " && ".join(f"cd {_chain(min(500, levels - i), name)}" for i in range(0, levels, 500))


@LIVE
async def test_a_tree_1300_levels_deep_round_trips_through_runs_and_a_reopen(
    tmp_path: Path, live: bool
) -> None:
    db = tmp_path / "ws.sqlite"
    deep = _chain(1300)
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        made = await ok(ws, f"mkdir -p {deep} && cd {deep} && echo one > f && echo made")
        assert f"{ROOT}/{deep}/f" in made.pulled
        assert await ws.fs.read_text(f"{ROOT}/{deep}/f") == "one\n"
        changed = await ok(ws, f"cd {deep} && echo two >> f && mkdir e && echo three > e/g")
        assert changed.skipped == [], changed.skipped_reasons
        assert await ws.fs.read_text(f"{ROOT}/{deep}/f") == "one\ntwo\n"
        await ws.fs.write_file(f"{ROOT}/{deep}/e/g", "four\n")
        assert (await ok(ws, f"cat {deep}/e/g")).stdout == "four\n"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:  # a rebuilt mirror
        assert (await ok(ws, f"cd {deep} && cat f e/g")).stdout == "one\ntwo\nfour\n"
        await ok(ws, f"mv {_chain(650)} top")
        moved = f"{ROOT}/top/{_chain(650)}/f"
        assert await ws.fs.read_text(moved) == "one\ntwo\n"
        assert not await ws.fs.exists(f"{ROOT}/{deep}")
        await ok(ws, "rm -rf top d")
        assert await ws.fs.readdir(ROOT) == []


@LIVE
async def test_paths_a_run_makes_past_the_limit_are_skipped_with_a_reason(tmp_path: Path, live: bool) -> None:
    db = tmp_path / "ws.sqlite"
    deep = _chain(1500, "dd")  # 4,499 bytes: past the workspace's 4,096 and the host's PATH_MAX
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/keep.txt", "keep\n")
        result = await ok(
            ws, f"mkdir -p {deep} && {_down(1500, 'dd')} && echo deep > f && cd / && find {ROOT} | wc -l"
        )
        assert result.stdout == "1503\n"  # the root, keep.txt, 1,500 levels, f
        reasons_cover_skipped(result)
        assert result.skipped, "the part past the limit is reported"
        for path in result.skipped:
            assert "path too long" in result.skipped_reasons[path]
            assert path.startswith(f"{ROOT}/dd/dd/")
            assert len(path) > 4000
        # The workspace holds the tree down to the limit, every level of it.
        found = await ws.fs.find(ROOT)
        levels = len(found) - 1  # every level of the chain and keep.txt
        assert 1300 < levels < 1500
        chain = {f"{ROOT}/{_chain(n, 'dd')}" for n in range(1, levels + 1)}
        assert {e.path for e in found} == {*chain, f"{ROOT}/keep.txt"}
        assert max(len(path) for path in chain) <= 4096
        assert await ws.fs.read_text(f"{ROOT}/keep.txt") == "keep\n"
        # The sandbox keeps the rest (its mirror is not rebuilt), and later runs sync as before.
        later = await ok(ws, f"{_down(1500, 'dd')} && cat f && cd / && echo more > {ROOT}/later.txt")
        assert later.stdout == "deep\n"
        assert await ws.fs.read_text(f"{ROOT}/later.txt") == "more\n"
        assert f"{ROOT}/later.txt" in later.pulled
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        assert (await ok(ws, f"find {ROOT} -type d | wc -l")).stdout == f"{levels + 1}\n"


@LIVE
async def test_a_workspace_path_too_long_for_the_sandbox_is_kept_and_reported(
    tmp_path: Path, live: bool
) -> None:
    db = tmp_path / "ws.sqlite"
    deep = f"{ROOT}/{_chain(1359, 'dd')}"  # 4,087 bytes (the file: 4,089): the workspace holds it
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        await ws.fs.mkdir(deep, recursive=True)
        await ws.fs.write_file(f"{deep}/f", "kept\n")
        await ws.fs.write_file(f"{ROOT}/near.txt", "near\n")
        result = await ok(ws, "cat near.txt && echo new > new.txt")
        assert result.stdout == "near\n"
        reasons_cover_skipped(result)
        assert f"{deep}/f" in result.skipped
        assert "path too long" in result.skipped_reasons[f"{deep}/f"]
        assert await ws.fs.read_text(f"{ROOT}/new.txt") == "new\n"
        # Removing the tree in the sandbox leaves what it never had alone.
        await ok(ws, "rm -rf dd")
        assert await ws.fs.read_text(f"{deep}/f") == "kept\n"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        again = await ok(ws, "cat new.txt")
        assert again.stdout == "new\n"
        assert f"{deep}/f" in again.skipped
        # Renamed by the workspace to a path that fits: the sandbox gets it, and it is no longer listed
        # (the directories past the limit still are).
        await ws.fs.rename(f"{deep}/f", f"{ROOT}/short.txt")
        moved = await ok(ws, "cat short.txt")
        assert moved.stdout == "kept\n"
        assert f"{deep}/f" not in moved.skipped
        assert all(is_dir.startswith(f"{ROOT}/dd/") and len(is_dir) > 4000 for is_dir in moved.skipped)


async def _until_printed(handle: Any, marker: str, seconds: float = 60) -> None:
    async def printed() -> None:
        async for snapshot in handle:
            if marker in snapshot.stdout or snapshot.done:
                return

    await asyncio.wait_for(printed(), seconds)


@LIVE
async def test_a_removal_of_what_holds_a_path_too_long_is_not_undone_under_the_program(
    tmp_path: Path, live: bool
) -> None:
    """A program removing the directories that hold a workspace path too long for the sandbox: the
    workspace refuses those removals (it keeps the file and its parents, listed in ``skipped``), and
    the sandbox gets them back at the next run, not under the program still removing the tree.

    Before (live): a sync while ``rm -rf dd`` ran (a tick every 100 ms; a 1,345-level chain takes
    ~50 ms, seconds under load) pulled the removals so far, the workspace refused them, and the same
    sync's push made those directories again below the ``rm``, which failed ("Directory not empty").
    Here the program removes the deepest level, waits until two workspace writes reached it (so a
    whole sync ran after the removal: its pull and its push), then removes the rest."""
    db = tmp_path / "ws.sqlite"
    deep = f"{ROOT}/{_chain(1359, 'dd')}"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        await ws.fs.mkdir(deep, recursive=True)
        await ws.fs.write_file(f"{deep}/f", "kept\n")
        levels = int((await ok(ws, "find dd -type d | wc -l")).stdout)
        assert 1300 < levels < 1359
        wait = "for i in $(seq 1200); do [ -e {} ] && break; sleep 0.05; done; echo seen {}; "
        handle = await ws.runtime.exec(
            'd=$(find dd -depth -type d | head -1) && rmdir "$d" && echo removed; '
            + (wait.format("go1", "go1") + wait.format("go2", "go2") if live else "")
            + '[ -e "$d" ] && echo back; rmdir "${d%/*}" && rm -rf dd && echo gone',
            timeout=120,
        )
        await _until_printed(handle, "removed")
        await ws.fs.write_file(f"{ROOT}/go1", "")
        if live:
            await _until_printed(handle, "seen go1")
        await ws.fs.write_file(f"{ROOT}/go2", "")
        result = await asyncio.wait_for(handle.result(), 240)
        assert result.status == "completed", (result.stdout, result.stderr[-300:])
        assert result.stdout.endswith("gone\n") and "back" not in result.stdout, result.stdout
        reasons_cover_skipped(result)
        # Every level the sandbox held: its removal refused, with the reason. They are more than a
        # result names one by one (``_reported.REPORTED``): it names directories, each with how many
        # paths below it were left out and why; the deepest line's include the file's own.
        reasons = result.skipped_reasons
        assert levels > REPORTED >= len(reasons)
        assert all(PROTECTED_BELOW in why for why in reasons.values()), reasons
        # Every level of the workspace's chain (those too long for the sandbox too) and ``f``:
        assert sum(int(why.split()[0]) for why in reasons.values()) == 1359 + 1
        assert "path too long" in reasons[max(reasons, key=len)], reasons
        assert await ws.fs.read_text(f"{deep}/f") == "kept\n"
        # The next run has them again (the mirror and the workspace agree), and removes them again.
        assert (await ok(ws, "find dd -type d | wc -l")).stdout == f"{levels}\n"
        again = await ok(ws, "rm -rf dd && find . | sort")
        assert again.stdout == ".\n./go1\n./go2\n"
        assert await ws.fs.read_text(f"{deep}/f") == "kept\n"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:  # a rebuilt mirror
        assert (await ok(ws, "find dd -type d | wc -l")).stdout == f"{levels}\n"


@LIVE
async def test_a_workspace_write_racing_a_run_1300_levels_down_follows_the_pull_rules(
    tmp_path: Path, live: bool
) -> None:
    """Per call the run's change is refused (in ``skipped`` with its reason) and the workspace's
    version kept; live, the write reached the sandbox first and the run's append onto it is pulled."""
    deep = _chain(1300)
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=live), python=False) as ws:
        await ok(ws, f"mkdir -p {deep} && cd {deep} && echo one > f")
        wait = (
            f"for i in $(seq 600); do grep -q ws {deep}/f && break; sleep 0.05; done" if live else "sleep 1"
        )
        handle = await ws.runtime.exec(f"echo ready; {wait}; cd {deep} && echo run >> f", timeout=60)

        async def ready() -> None:
            async for snapshot in handle:
                if "ready" in snapshot.stdout or snapshot.done:
                    return

        await asyncio.wait_for(ready(), 60)
        await ws.fs.write_file(f"{ROOT}/{deep}/f", "ws\n")
        result = await asyncio.wait_for(handle.result(), 120)
        assert result.status == "completed", result.stderr
        if live:
            assert result.pulled == [f"{ROOT}/{deep}/f"] and result.skipped == []
            assert await ws.fs.read_text(f"{ROOT}/{deep}/f") == "ws\nrun\n"
        else:
            assert result.skipped == [f"{ROOT}/{deep}/f"] and result.skipped_reasons[f"{ROOT}/{deep}/f"]
            assert await ws.fs.read_text(f"{ROOT}/{deep}/f") == "ws\n"
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=live), python=False) as ws:
        expected = "ws\nrun\n" if live else "ws\n"
        assert (await ok(ws, f"cat {deep}/f")).stdout == expected
