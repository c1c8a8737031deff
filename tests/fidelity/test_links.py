"""Hard links the workspace makes (``fs.link``) and hard links a run undoes, through later runs, the
workspace and a reopen: a name the workspace gives a file the sandbox holds is a name of that same
file there (before: a copy, so a later write through one name left the other stale in the sandbox),
and a file whose other name a run removed is still the file the sandbox holds (before: its ctime had
changed with no event in its directory, so a workspace rename of it was not followed: a new file)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from computer.runtime import ShellBackend

from ._support import (
    ROOT,
    digest,
    hold_tick_pulls,
    ok,
    opened,
    sandbox_view,
    settle,
    started,
    until,
    workspace_view,
)

SIZES = {"small": 10, "large": 2_500_000}  # large: synced as chunks


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_name_the_workspace_links_is_the_same_file_in_the_sandbox(
    tmp_path: Path, live: bool, size: int
) -> None:
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/a", b"1" * size)
        held = (await ok(ws, "stat -c %i a")).stdout.strip()
        await ws.fs.mkdir(f"{ROOT}/d")
        await ws.fs.link(f"{ROOT}/a", f"{ROOT}/d/e")
        linked = await ok(ws, "stat -c '%i %h' a d/e")
        assert linked.stdout.split() == [held, "2", held, "2"] and linked.pushed == 0
        await ws.fs.write_file(f"{ROOT}/d/e", b"2" * size)  # through the new name: both show it
        seen = await ok(ws, "sha256sum a d/e | cut -c1-64")
        assert seen.stdout.split() == [digest(b"2" * size)] * 2
        # Every name took in the ctime the write gave the file: a rename of the other one is followed.
        await ws.fs.rename(f"{ROOT}/a", f"{ROOT}/z")
        moved = await ok(ws, "stat -c %i z && echo more >> z")
        assert moved.stdout.strip() == held and moved.pushed == 0
        grown = b"2" * size + b"more\n"
        assert await ws.fs.read_file(f"{ROOT}/d/e") == grown  # a run's append through the other name
        assert (await ws.fs.stat(f"{ROOT}/z")).ino == (await ws.fs.stat(f"{ROOT}/d/e")).ino
    async with opened(db, python=False) as ws:
        again = await ok(ws, "stat -c %h z && sha256sum z d/e | cut -c1-64")
        assert again.stdout.split() == ["2", digest(grown), digest(grown)]


RUN_UNLINKS = {
    "replaced": "echo two > tmp && mv tmp d/b",
    "removed": "rm d/b",
    "removed with its directory": "rm -r d",
}


@pytest.mark.parametrize("how", RUN_UNLINKS.values(), ids=RUN_UNLINKS.keys())
@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_file_whose_other_name_a_run_replaced_keeps_its_inode_through_a_workspace_rename(
    tmp_path: Path, live: bool, how: str
) -> None:
    """A run links ``a`` to ``d/b``, a later run replaces or removes ``d/b`` (or all of ``d``): ``a``'s
    link count and ctime change with no event in its directory, and the workspace's rename of ``a`` is
    still followed (the same file, nothing fetched). With ``d`` removed whole the pull lists ``d/b``
    among its removals too (its deletion event in ``d``, or the walk's old state), so ``a`` is read
    again as for a removal of that name alone."""
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=live), python=False) as ws:
        held = (await ok(ws, "mkdir d && echo one > a && ln a d/b && stat -c %i a")).stdout.strip()
        await ok(ws, how)
        await ws.fs.rename(f"{ROOT}/a", f"{ROOT}/c")
        moved = await ok(ws, "stat -c '%i %h' c && cat c")
        assert moved.stdout.split() == [held, "1", "one"] and moved.pushed == 0


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_file_a_run_linked_keeps_both_names_through_a_workspace_rename(
    tmp_path: Path, live: bool, size: int
) -> None:
    """``ln d/e m/c`` in one run, then the workspace renames ``d/e``: both names are still one file in
    the sandbox. Before: the link changed ``d/e``'s ctime with no event in ``d``, the mirror kept its
    stale entry, and the rename was not followed: ``d/c`` came whole, a new file apart from ``m/c``
    (found by the rename machine, randomized)."""
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        await ok(ws, f"mkdir -p d m && head -c {size} /dev/urandom > d/e")
        linked = await ok(ws, "ln d/e m/c && stat -c %i d/e")
        assert linked.skipped == [], linked.skipped_reasons
        await ws.fs.rename(f"{ROOT}/d/e", f"{ROOT}/d/c")
        seen = await ok(ws, "stat -c '%i %h' d/c m/c && sha256sum d/c | cut -c1-64")
        first, second, held = seen.stdout.split("\n")[:3]
        assert first == second == f"{linked.stdout.strip()} 2", seen.stdout
        assert seen.pushed == 0  # followed: nothing fetched
        assert digest(await ws.fs.read_file(f"{ROOT}/m/c")) == held
        assert (await ws.fs.stat(f"{ROOT}/m/c")).nlink == 2
    async with opened(db, python=False) as ws:
        again = await ok(ws, "stat -c %h m/c && sha256sum d/c m/c | cut -c1-64")
        assert again.stdout.split() == ["2", held, held]


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
@pytest.mark.parametrize("how", ["removed", "replaced", "renamed onto"])
@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_file_whose_other_name_the_workspace_removed_keeps_its_inode_through_a_rename(
    tmp_path: Path, live: bool, how: str, size: int
) -> None:
    """A run links ``m/h`` to ``f/h``; the workspace removes (or replaces, or renames another file onto)
    ``f/h``, then renames ``m/h``: the sandbox still holds the same file under the new name. Before: the
    push's removal of one name (its rename onto it, which the mirror follows) changed the other's ctime
    with no event, the mirror kept its stale entry, and the rename was not followed (a new file; found
    by the rename machine, randomized)."""
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        made = await ok(
            ws, f"mkdir -p f m && head -c {size} /dev/urandom > m/h && ln m/h f/h && stat -c %i m/h"
        )
        held = made.stdout.strip()
        if how == "renamed onto":
            await ws.fs.write_file(f"{ROOT}/f/x", b"x")
            await ok(ws, "true")  # the mirror holds f/x: its rename onto f/h is followed
            await ws.fs.rename(f"{ROOT}/f/x", f"{ROOT}/f/h", overwrite=True)
        else:
            await ws.fs.rm(f"{ROOT}/f/h")
        if how == "replaced":
            await ws.fs.write_file(f"{ROOT}/f/h", b"2" * size)
        await ok(ws, "true")  # the push of the removal (or the new f/h, or the rename)
        await ws.fs.mkdir(f"{ROOT}/d")
        await ws.fs.rename(f"{ROOT}/m/h", f"{ROOT}/d/e")
        seen = await ok(ws, "stat -c '%i %h' d/e")
        assert seen.stdout.strip() == f"{held} 1", seen.stdout
        assert seen.pushed == 0
    async with opened(db, python=False) as ws:
        assert (await ok(ws, "stat -c %h d/e")).stdout.strip() == "1"


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_file_a_run_linked_onto_its_own_other_name_keeps_its_inode_through_a_rename(
    tmp_path: Path, live: bool, size: int
) -> None:
    """``ln -f b d/e`` of two names of one file links a temporary name, renames it onto ``d/e`` (which
    does nothing) and removes it: the file's ctime changes with no event at any of its names. The
    workspace's later rename of ``d/e`` is still followed. Before: the stale entries made it a new
    file apart from ``d/c`` and ``b`` (found by the rename machine, randomized)."""
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=live), python=False) as ws:
        made = await ok(
            ws, f"mkdir d && head -c {size} /dev/urandom > d/e && ln d/e d/c && ln d/e b && stat -c %i d/e"
        )
        held = made.stdout.strip()
        relinked = await ok(ws, "ln -f b d/e && stat -c '%i %h' d/e")
        assert relinked.stdout.strip() == f"{held} 3", relinked.stdout  # the same file still
        await ws.fs.mkdir(f"{ROOT}/f")
        await ws.fs.rename(f"{ROOT}/d/e", f"{ROOT}/f/h")
        seen = await ok(ws, "stat -c '%i %h' f/h d/c b")
        assert seen.stdout.split("\n")[:3] == [f"{held} 3"] * 3, seen.stdout
        assert seen.pushed == 0


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_large_file_written_small_through_another_name_then_large_again_is_whole(
    tmp_path: Path, live: bool
) -> None:
    """The workspace writes a large file, links it, writes a few bytes into it through the other name
    and then its first content again: every run sees that content under both names. Before: the first
    name kept the chunk list of the content before the small write, so the last push took every chunk
    as held and fetched none (a 1 MiB file of zeros after its first bytes; found by the rename
    machine, randomized)."""
    big = SIZES["large"]
    content = bytes(range(256)) * (big // 256)
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=live), python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/a", content)
        await ws.fs.link(f"{ROOT}/a", f"{ROOT}/b")
        await ok(ws, "true")
        await ws.fs.write_file(f"{ROOT}/b", b"x")
        assert (await ok(ws, "cat a")).stdout == "x"
        await ws.fs.write_file(f"{ROOT}/a", content)
        seen = await ok(ws, "stat -c %h a && sha256sum a b | cut -c1-64")
        assert seen.stdout.split() == ["2", digest(content), digest(content)]


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_write_through_a_link_the_run_removed_reaches_the_workspace(
    tmp_path: Path, live: bool, size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ln f t; echo more >> t; rm t`` changes ``f`` with events at ``t`` only. Before: the change was
    never pulled (the workspace kept ``one``, every later run saw ``one more``: the two differed
    silently, and a workspace rename of ``f`` brought the old content back)."""
    db = tmp_path / "ws.sqlite"
    first = b"1" * size
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/f", first)
        held = (await ok(ws, "stat -c %i f")).stdout.strip()
        hold_tick_pulls(monkeypatch)  # one pull sees the three steps (a tick between them listed t)
        changed = await ok(ws, "ln f t && echo more >> t && rm t")
        monkeypatch.undo()
        assert changed.pulled == [f"{ROOT}/f"]
        assert await ws.fs.read_file(f"{ROOT}/f") == first + b"more\n"
        await ws.fs.rename(f"{ROOT}/f", f"{ROOT}/g")
        seen = await ok(ws, "stat -c '%i %h' g && sha256sum g | cut -c1-64")
        assert seen.stdout.split() == [held, "1", digest(first + b"more\n")]
        assert seen.pushed == 0  # followed: the same file
    async with opened(db, python=False) as ws:
        assert (await ok(ws, "sha256sum g | cut -c1-64")).stdout.strip() == digest(first + b"more\n")


THROUGH_A_SYNCED_NAME = {
    "appended, removed": ("echo more >> t && rm t", b"one\nmore\n", 0o644),
    "chmod-ed, removed": ("chmod 640 t && rm t", b"one\n", 0o640),
    "appended, replaced": ("echo more >> t && mv x t", b"one\nmore\n", 0o644),  # x: synced
}


@pytest.mark.parametrize("linker", ["run", "workspace"])
@pytest.mark.parametrize("how", THROUGH_A_SYNCED_NAME.values(), ids=THROUGH_A_SYNCED_NAME.keys())
@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_change_through_a_synced_name_the_run_then_removed_reaches_the_other_name(
    tmp_path: Path, live: bool, how: tuple[str, bytes, int], linker: str
) -> None:
    """``t`` is a name of ``f`` the sandbox already holds (an earlier run's ``ln f t``, or the
    workspace's ``fs.link``); a run writes or chmods the file through ``t`` and removes or replaces
    ``t`` (by ``x``, synced too: no name made and removed, which looks at every file): every event
    names ``t`` only. Before: ``f``'s change was never pulled, and the pull took
    in ``f``'s new state (its ctime moved with the link count), so no later run pulled it either:
    the workspace kept ``one`` while every run saw ``one more`` (s50/h7, from t7_shared)."""
    command, content, mode = how
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/f", b"one\n")
        await ws.fs.write_file(f"{ROOT}/x", b"new\n")
        if linker == "run":
            await ok(ws, "ln f t")
        else:
            await ok(ws, "true")
            await ws.fs.link(f"{ROOT}/f", f"{ROOT}/t")
        assert (await ok(ws, "stat -c %h f")).stdout.strip() == "2"
        changed = await ok(ws, command)
        assert f"{ROOT}/f" in changed.pulled
        assert await ws.fs.read_file(f"{ROOT}/f") == content
        assert (await ws.fs.stat(f"{ROOT}/f")).mode & 0o7777 == mode
        assert await sandbox_view(ws) == await workspace_view(ws)
    async with opened(db, python=False) as ws:
        seen = await ok(ws, "stat -c %a f && cat f")
        assert seen.stdout == f"{mode:o}\n".encode().decode() + content.decode()


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_file_of_one_name_a_run_linked_and_unlinked_keeps_its_inode_through_a_rename(
    tmp_path: Path, live: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ln f t; rm t`` changes only ``f``'s ctime, with no event at ``f``: it is not pulled, and the
    workspace's rename of it is followed. Before: its stale entry made the rename fetch it whole (a
    new inode). (No tick of the live sandbox between the ``ln`` and the ``rm``: one there pulls ``t``
    and ``f``, rightly, as the run changed them then; under load it came in 1 of ~600 runs.)"""
    monkeypatch.setattr("computer.runtime._live.SYNC_INTERVAL", 3600.0)
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=live), python=False) as ws:
        held = (await ok(ws, "echo one > f && stat -c %i f")).stdout.strip()
        assert (await ok(ws, "ln f t && rm t")).pulled == []
        await ws.fs.rename(f"{ROOT}/f", f"{ROOT}/g")
        seen = await ok(ws, "stat -c '%i %h' g && cat g")
        assert seen.stdout.split() == [held, "1", "one"] and seen.pushed == 0


async def test_a_background_write_through_a_removed_link_reaches_the_workspace_while_it_runs(
    tmp_path: Path,
) -> None:
    """A live sandbox's background process does the same while it runs: its tick pulls it (a tick
    looks at every file at most a tenth of the time, so it may come a tick later)."""
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=True), python=False) as ws:
        await ok(ws, "echo one > f")
        await ok(ws, "setsid sh -c 'sleep 0.2; ln f t; echo bg >> t; rm t; sleep 30' > /dev/null 2>&1 &")

        async def written() -> bool:
            return await ws.fs.read_file(f"{ROOT}/f") == b"one\nbg\n"

        await until(written, within=30)
        assert (await ws.runtime.processes()) != []


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_write_through_a_removed_link_racing_a_workspace_write_follows_the_pull_rules(
    tmp_path: Path, live: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workspace writes ``f`` while a run is about to append to it through a link it removes. Per
    call the run's mirror still held the old ``f``: its change is refused and reported in ``skipped``
    with the reason, the workspace's version kept (before the fix the change was not even seen).
    Live, the write reached the mirror first: the append lands on it and is pulled."""
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=live), python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/f", b"one\n")
        await ok(ws, "true")
        hold_tick_pulls(monkeypatch)  # (a tick between ln and rm listed t too; ticks still push)
        # Live: wait (bounded) for the write to reach the sandbox; per call it never does.
        wait = "for i in $(seq 200); do grep -q ws f && break; sleep 0.05; done" if live else "sleep 1"
        handle = await started(ws, f"echo ready; {wait}; ln f t && echo more >> t; rm -f t")
        await ws.fs.write_file(f"{ROOT}/f", b"ws\n")
        result = await settle(handle)
        assert result.status == "completed", result
        if live:
            assert result.pulled == [f"{ROOT}/f"] and result.skipped == []
            expected = b"ws\nmore\n"
        else:
            assert result.skipped == [f"{ROOT}/f"] and result.pulled == []
            assert "changed in the workspace during the run" in result.skipped_reasons[f"{ROOT}/f"]
            expected = b"ws\n"
        assert await ws.fs.read_file(f"{ROOT}/f") == expected
        assert (await ok(ws, "cat f")).stdout.encode() == expected


# The workspace links a file, then renames the file (over another, or its directory) before the next
# push: (files made and synced first, the workspace's steps, the names of the one file at the end).
LINKED_THEN_RENAMED = {
    "source renamed": (["a"], [("link", "a", "g"), ("rename", "a", "h")], ["g", "h"]),
    "source renamed over a file": (["a", "h"], [("link", "a", "g"), ("over", "a", "h")], ["g", "h"]),
    "source's directory renamed": (["d/a"], [("link", "d/a", "g"), ("rename", "d", "e")], ["g", "e/a"]),
    "linked and renamed twice": (
        ["a"],
        [("link", "a", "c"), ("rename", "a", "d"), ("link", "d", "e"), ("rename", "d", "f")],
        ["c", "e", "f"],
    ),
}


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
@pytest.mark.parametrize("shape", LINKED_THEN_RENAMED.values(), ids=LINKED_THEN_RENAMED.keys())
@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_name_linked_to_a_file_the_workspace_renames_before_the_push_is_the_same_file(
    tmp_path: Path, live: bool, shape: tuple[list[str], list[tuple[str, str, str]], list[str]], size: int
) -> None:
    """``fs.link(a, g)``, then ``fs.rename(a, h)`` before the next run: the mirror follows the rename
    and links ``g`` to the file it now holds at ``h``, so later writes through either name (the
    workspace's, a program's) show under both in the sandbox and in the workspace. Before: the link was
    made from the old name, gone once the rename was followed, so ``g`` came as a copy; the workspace's
    next write reached ``h`` only in the sandbox, and a program's append to ``g`` replaced the
    workspace's write there and split the workspace's link too, reported nowhere (s49 finding 1)."""
    made, steps, names = shape
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=live), python=False) as ws:
        for name in made:
            await ws.fs.mkdir(f"{ROOT}/{name}".rpartition("/")[0], recursive=True)
            await ws.fs.write_file(f"{ROOT}/{name}", name.encode() * size)
        held = (await ok(ws, f"stat -c %i {made[0]}")).stdout.strip()
        for op, src, dst in steps:
            if op == "link":
                await ws.fs.link(f"{ROOT}/{src}", f"{ROOT}/{dst}")
            else:
                await ws.fs.rename(f"{ROOT}/{src}", f"{ROOT}/{dst}", overwrite=op == "over")
        listed = " ".join(names)
        seen = await ok(ws, f"stat -c '%i %h' {listed}")
        assert seen.stdout.split("\n")[: len(names)] == [f"{held} {len(names)}"] * len(names)
        written = b"2" * size
        await ws.fs.write_file(f"{ROOT}/{names[-1]}", written)
        seen = await ok(ws, f"sha256sum {listed} | cut -c1-64")
        assert seen.stdout.split() == [digest(written)] * len(names)
        await ok(ws, f"echo more >> {names[0]}")
        stats = [await ws.fs.stat(f"{ROOT}/{name}") for name in names]
        assert {(st.ino, st.nlink) for st in stats} == {(stats[0].ino, len(names))}
        assert await ws.fs.read_file(f"{ROOT}/{names[-1]}") == written + b"more\n"


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
@pytest.mark.parametrize("written", ["f", "g"])
@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_link_a_run_makes_in_the_sync_window_of_a_workspace_write_is_refused_with_it(
    tmp_path: Path, live: bool, written: str, size: int
) -> None:
    """A run does ``ln f g`` while the workspace writes ``f`` (or ``g``) in the same sync window (per
    call: during the run; live: no sync in between). The written name is refused (the workspace's
    version kept) and the other name of the program's file with it, both in ``skipped`` with their
    reasons, so the sandbox and the workspace hold the same files. Before: with ``f`` written, ``g``
    was pulled as a file of its own with the old content while the mirror kept ``f`` and wrote the
    workspace's ``f`` into it, which was ``g`` there too (``cat g`` printed the workspace's ``f``, the
    workspace's ``g`` the old content; the next append through ``f`` replaced the workspace's ``g``,
    unreported: s49 finding 3); with ``g`` written, the program's ``f`` took the workspace's ``g``,
    neither side having written it, and ``f`` was not reported (S1)."""
    backend = ShellBackend(live=live)
    base, new = b"1" * size, b"2" * size
    async with opened(tmp_path / "ws.sqlite", shell=backend, python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/f", base)
        await ok(ws, "true")
        handle = await started(ws, "echo ready; sleep 0.3; ln f g; sleep 0.5")
        await _in_one_window(ws, backend, live, {written: new}, made="g")
        result = await settle(handle)
        assert result.status == "completed", result
        other = "g" if written == "f" else "f"
        assert set(result.skipped) >= {f"{ROOT}/f", f"{ROOT}/g"}, result.skipped_reasons
        assert result.skipped_reasons[f"{ROOT}/{written}"].startswith("changed in the workspace")
        assert "refused with it" in result.skipped_reasons[f"{ROOT}/{other}"]
        expected = (
            {f"{ROOT}/f": digest(new)}
            if written == "f"
            else {f"{ROOT}/f": digest(base), f"{ROOT}/g": digest(new)}
        )
        assert await workspace_view(ws) == expected
        assert await sandbox_view(ws) == expected
        assert (await ok(ws, "stat -c %h f")).stdout.strip() == "1"
        await ok(ws, "echo more >> f")  # a later change of the program's reaches the workspace as is
        assert await ws.fs.read_file(f"{ROOT}/f") == (new if written == "f" else base) + b"more\n"
        assert await sandbox_view(ws) == await workspace_view(ws)


async def test_a_link_refused_on_a_later_page_than_its_content_drops_that_name_too(tmp_path: Path) -> None:
    """The same when the pull comes in pages (1 MiB each here) and the new name's content went on an
    earlier one, committed already: the last page's refused ``f`` names it, so the mirror drops it
    too and fetches the workspace's ``g`` (the program's content) as a file of its own. Before: ``g``
    stayed ``f``'s other name in the mirror and took the workspace's ``f``."""
    base = b"1" * 3_000_000
    async with opened(
        tmp_path / "ws.sqlite", shell=ShellBackend(live=False, max_sync_bytes=1 << 20), python=False
    ) as ws:
        await ws.fs.write_file(f"{ROOT}/f", base)
        await ok(ws, "true")
        more = " && ".join(f"head -c 300000 /dev/urandom > h{i}" for i in range(4))
        handle = await started(ws, f"echo ready; sleep 0.5; ln f g && {more}")
        await ws.fs.write_file(f"{ROOT}/f", b"new\n")
        result = await settle(handle)
        assert result.status == "completed", result
        assert {f"{ROOT}/f", f"{ROOT}/g"} <= set(result.skipped), result.skipped_reasons
        assert await ws.fs.read_file(f"{ROOT}/g") == base
        assert await sandbox_view(ws) == await workspace_view(ws)
        assert (await ok(ws, "stat -c %h f g")).stdout.split() == ["1", "1"]


async def _linked(path: Path) -> bool:
    return await asyncio.to_thread(os.path.lexists, path)


async def _in_one_window(
    ws: Any, backend: ShellBackend, live: bool, writes: dict[str, bytes], made: str = "done"
) -> None:
    """The workspace's ``writes`` (name under the root -> bytes) meet the running program's link in one
    sync window: per call, while it runs; live, with the sandbox's syncs held until it made ``made``."""
    if not live:
        for name, data in writes.items():
            await ws.fs.write_file(f"{ROOT}/{name}", data)
        return
    sandbox = backend._lives._live[ws.fs.instance]
    async with sandbox.lock:  # no sync until the run linked: the two meet in one window
        for name, data in writes.items():
            await ws.fs.write_file(f"{ROOT}/{name}", data)
        await until(lambda: _linked(sandbox.mirror.directory / made), within=30)


async def _mode_is(path: Path, mode: int) -> bool:
    return await asyncio.to_thread(lambda: os.lstat(path).st_mode & 0o7777 == mode)


async def _one_file(ws: Any, names: list[str], kept_out: tuple[str, ...] = ()) -> None:
    """``names`` are one file in the workspace and in the sandbox, with the same content; the views
    agree but for ``kept_out`` (the workspace's files the mirror keeps out: protected)."""
    stats = [await ws.fs.stat(f"{ROOT}/{name}") for name in names]
    assert {(st.ino, st.nlink) for st in stats} == {(stats[0].ino, len(names))}
    seen = await ok(ws, f"stat -c '%i %h' {' '.join(names)}")
    assert len(set(seen.stdout.split("\n")[: len(names)])) == 1, seen.stdout
    assert seen.stdout.split()[1] == str(len(names))
    workspace = {path: h for path, h in (await workspace_view(ws)).items() if path not in kept_out}
    assert await sandbox_view(ws) == workspace


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_refused_directory_holding_a_name_of_a_file_linked_outside_it_keeps_the_link(
    tmp_path: Path, live: bool
) -> None:
    """``d/f`` and ``g`` are one file (the workspace's ``fs.link``); a run's ``chmod 700 d`` meets the
    workspace's rename of ``d`` away and back (and a write of ``d/x``) in one sync window: ``d`` is
    refused, and the mirror drops it and fetches it again. Before: ``d/f`` came as a new file while
    ``g`` kept the old one, two files in the sandbox where the workspace has one, and a write through
    one name never reached the other there (s50/h7, from t7_shared). (Until s55 a workspace write
    below ``d`` was enough to refuse the run's ``chmod``; it no longer refuses it.)"""
    backend = ShellBackend(live=live)
    async with opened(tmp_path / "ws.sqlite", shell=backend, python=False) as ws:
        await ws.fs.mkdir(f"{ROOT}/d")
        await ws.fs.write_file(f"{ROOT}/d/f", b"one\n")
        await ok(ws, "true")
        await ws.fs.link(f"{ROOT}/d/f", f"{ROOT}/g")
        await ok(ws, "true")
        handle = await started(ws, "echo ready; sleep 0.3; chmod 700 d; sleep 0.5")
        if live:
            sandbox = backend._lives._live[ws.fs.instance]
            async with sandbox.lock:  # no sync until the run's chmod: the two meet in one window
                await _away_and_back(ws)
                await until(lambda: _mode_is(sandbox.mirror.directory / "d", 0o700), within=30)
        else:
            await _away_and_back(ws)
        result = await settle(handle)
        assert result.status == "completed", result
        assert f"{ROOT}/d" in result.skipped, result.skipped_reasons
        await _one_file(ws, ["d/f", "g"])
        await ok(ws, "echo more >> g")
        assert await ws.fs.read_file(f"{ROOT}/d/f") == b"one\nmore\n"
        await _one_file(ws, ["d/f", "g"])


async def _away_and_back(ws: Any) -> None:
    """The workspace renames ``d`` away and back (a change of ``d`` itself) and writes ``d/x``."""
    await ws.fs.rename(f"{ROOT}/d", f"{ROOT}/away")
    await ws.fs.rename(f"{ROOT}/away", f"{ROOT}/d")
    await ws.fs.write_file(f"{ROOT}/d/x", b"host\n")


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_renamed_directory_the_mirror_cannot_follow_keeps_the_links_its_files_have_outside(
    tmp_path: Path, live: bool
) -> None:
    """``d/f`` and ``g`` are one file; ``d`` holds a workspace file the mirror keeps out (over the
    backend's ``max_file_bytes``: protected), so the mirror cannot follow the workspace's rename of
    ``d`` to ``e``: it drops ``d`` and fetches ``e`` whole. Before: ``e/f`` came as a new file while
    ``g`` kept the old one (s50/h7, from t7_shared: there a rename below the renamed directory the
    mirror could not follow left a path to fetch again in it). (Until s52 a name the workspace
    cannot hold, kept in the sandbox only, was the obstacle here; such a name now moves along.)"""
    shell = ShellBackend(live=live, max_file_bytes=1000)
    async with opened(tmp_path / "ws.sqlite", shell=shell, python=False) as ws:
        await ws.fs.mkdir(f"{ROOT}/d")
        await ws.fs.write_file(f"{ROOT}/d/f", b"one\n")
        await ws.fs.write_file(f"{ROOT}/d/big", b"x" * 2000)
        assert (await ok(ws, "true")).skipped == [f"{ROOT}/d/big"]
        await ws.fs.link(f"{ROOT}/d/f", f"{ROOT}/g")
        await ok(ws, "true")
        await ws.fs.rename(f"{ROOT}/d", f"{ROOT}/e")
        await _one_file(ws, ["e/f", "g"], (f"{ROOT}/e/big",))
        await ok(ws, "echo more >> g")
        assert await ws.fs.read_file(f"{ROOT}/e/f") == b"one\nmore\n"
        await _one_file(ws, ["e/f", "g"], (f"{ROOT}/e/big",))


REFUSED_REMOVALS = {
    "removed": "rm d/f",
    "removed with its directory": "rm -r d",
    "replaced": "echo prog > y && mv y d/f",
}


@pytest.mark.parametrize("how", REFUSED_REMOVALS.values(), ids=REFUSED_REMOVALS.keys())
@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_refused_removal_of_a_name_of_a_linked_file_keeps_it_one_file_in_the_sandbox(
    tmp_path: Path, live: bool, how: str
) -> None:
    """``d/f`` and ``g`` are one file; a run removes or replaces ``d/f`` while the workspace writes it
    (one sync window): the run's change is refused, the workspace's ``host`` kept in both names, and
    the sandbox fetches ``d/f`` again. Before: it came as a new file, and ``g`` kept the old one
    with the old content (``cat g`` printed ``one`` while the workspace's ``g`` was ``host``), as
    the push sent ``d/f`` alone (s50/h7, from t7_shared)."""
    backend = ShellBackend(live=live)
    async with opened(tmp_path / "ws.sqlite", shell=backend, python=False) as ws:
        await ws.fs.mkdir(f"{ROOT}/d")
        await ws.fs.write_file(f"{ROOT}/d/f", b"one\n")
        await ok(ws, "true")
        await ws.fs.link(f"{ROOT}/d/f", f"{ROOT}/g")
        await ok(ws, "true")
        handle = await started(ws, f"echo ready; sleep 0.3; {how} && touch done; sleep 0.5")
        if live:
            sandbox = backend._lives._live[ws.fs.instance]
            async with sandbox.lock:  # no sync until the run's change: the two meet in one window
                await ws.fs.write_file(f"{ROOT}/d/f", b"host\n")
                await until(lambda: _linked(sandbox.mirror.directory / "done"), within=30)
        else:
            await ws.fs.write_file(f"{ROOT}/d/f", b"host\n")
        result = await settle(handle)
        assert result.status == "completed", result
        assert f"{ROOT}/d/f" in result.skipped, result.skipped_reasons
        assert await ws.fs.read_file(f"{ROOT}/g") == b"host\n"
        await _one_file(ws, ["d/f", "g"])


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_directory_the_push_sends_whole_keeps_the_links_its_files_have_outside(
    tmp_path: Path, live: bool
) -> None:
    """``d/f`` and ``g`` are one file (a run's ``ln``); the workspace makes ``d/sub`` and renames
    ``d`` to ``e``, a rename the push cannot follow (``d`` changed first), so it sends ``e`` whole.
    Before: ``e/f`` came as a new file while ``g`` kept the old one, and the run's append to ``g``
    then split the workspace's file too (``e/f`` kept ``one``, ``g`` a file of its own: s50/h7)."""
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=live), python=False) as ws:
        await ws.fs.mkdir(f"{ROOT}/d")
        await ws.fs.write_file(f"{ROOT}/d/f", b"one\n")
        await ok(ws, "ln d/f g")
        await ws.fs.mkdir(f"{ROOT}/d/sub")
        await ws.fs.rename(f"{ROOT}/d", f"{ROOT}/e")
        await _one_file(ws, ["e/f", "g"])
        await ok(ws, "echo more >> g")
        assert await ws.fs.read_file(f"{ROOT}/e/f") == b"one\nmore\n"
        await _one_file(ws, ["e/f", "g"])


async def test_a_name_linked_to_a_refused_new_name_of_a_followed_rename_is_refused_with_it(
    tmp_path: Path,
) -> None:
    """A live run appends to ``g`` and links it as ``d/n`` while, in the same sync window, the
    workspace renames ``d`` to ``e`` and writes ``e/n``: the pull takes ``d/n`` to ``e/n`` (the rename
    followed), refuses it (the workspace wrote it after the rename), and refuses ``g``, its file's
    other name, with it: both in ``skipped``, and the sandbox holds what the workspace does. Before:
    ``g`` was left off the page unsaid (neither pulled nor refused), so the workspace kept ``one``
    while the sandbox's ``g`` went on as the program's file, which then took the workspace's
    ``e/n`` written into it (s50/h7)."""
    backend = ShellBackend(live=True)
    async with opened(tmp_path / "ws.sqlite", shell=backend, python=False) as ws:
        await ws.fs.mkdir(f"{ROOT}/d")
        await ws.fs.write_file(f"{ROOT}/g", b"one\n")
        await ok(ws, "true")
        handle = await started(
            ws, "echo ready; sleep 0.3; echo more >> g && ln g d/n && touch done; sleep 0.5"
        )
        sandbox = backend._lives._live[ws.fs.instance]
        async with sandbox.lock:  # no sync until the run linked: the two meet in one window
            await ws.fs.rename(f"{ROOT}/d", f"{ROOT}/e")
            await ws.fs.write_file(f"{ROOT}/e/n", b"host\n")
            await until(lambda: _linked(sandbox.mirror.directory / "done"), within=30)
        result = await settle(handle)
        assert result.status == "completed", result
        assert {f"{ROOT}/e/n", f"{ROOT}/g"} <= set(result.skipped), result.skipped_reasons
        assert "refused with it" in result.skipped_reasons[f"{ROOT}/g"]
        assert await ws.fs.read_file(f"{ROOT}/g") == b"one\n"
        assert await ws.fs.read_file(f"{ROOT}/e/n") == b"host\n"
        assert await sandbox_view(ws) == await workspace_view(ws)
        assert (await ok(ws, "stat -c %h g e/n")).stdout.split() == ["1", "1"]


WORKSPACE_UNLINKS = {"removed": "rm", "replaced": "over"}


@pytest.mark.parametrize("how", WORKSPACE_UNLINKS.values(), ids=WORKSPACE_UNLINKS.keys())
@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_workspace_write_through_a_name_it_then_removes_reaches_the_other_names(
    tmp_path: Path, live: bool, how: str
) -> None:
    """``f`` and ``t`` are one file (a run's ``ln``); the workspace writes ``t`` and then removes it
    (or renames ``x`` over it) before the next push: its change log names the write at ``t`` only.
    Before: the push removed ``t`` and sent nothing else, so the sandbox's ``f`` kept ``one`` while
    the workspace's was ``new`` (s50/h7, t7_shared seed 1 with HLN=1)."""
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=live), python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/f", b"one\n")
        await ok(ws, "ln f t && echo x > x")
        await ws.fs.write_file(f"{ROOT}/t", b"new\n")
        if how == "rm":
            await ws.fs.rm(f"{ROOT}/t")
        else:
            await ws.fs.rename(f"{ROOT}/x", f"{ROOT}/t", overwrite=True)
        assert (await ok(ws, "cat f")).stdout == "new\n"
        assert await sandbox_view(ws) == await workspace_view(ws)


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_followed_rename_onto_another_name_of_the_same_file_leaves_one_name(
    tmp_path: Path, live: bool
) -> None:
    """``f`` and ``g`` are one file (a run's ``ln``); the workspace removes ``f`` and renames ``g`` to
    ``f``, and the mirror follows the rename while it still holds ``f``, the same file: ``rename(2)``
    of two names of one file does nothing, so the mirror unlinks ``g`` itself. Before: the sandbox
    kept ``g`` (the mirror took it for gone), a name the workspace did not have (s50/h7, t7_shared
    seeds 36 and 41 with HLN=1)."""
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=live), python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/f", b"one\n")
        held = (await ok(ws, "ln f g && stat -c %i f")).stdout.strip()
        await ws.fs.rm(f"{ROOT}/f")
        await ws.fs.rename(f"{ROOT}/g", f"{ROOT}/f")
        seen = await ok(ws, "ls && stat -c '%i %h' f")
        assert seen.stdout.split() == ["f", held, "1"] and seen.pushed == 0  # followed: the same file
        assert await sandbox_view(ws) == await workspace_view(ws) == {f"{ROOT}/f": digest(b"one\n")}


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_link_groups_hold_through_a_reopen(tmp_path: Path, live: bool) -> None:
    """The hard links of the fixes above, through a close and a reopen of the same file, with the same
    backend (its warm mirror, pushed incrementally) and with a fresh one (a full push): a name the
    workspace linked to a held file whose source it then renamed (``link_sources``), a run's link
    refused with the workspace's write of its file (``LINKED``: two files), a run's link pulled, and
    a directory sent whole that holds a name of a linked file. Each is one file (or two) in the
    workspace and the sandbox alike, and a write through one name shows in the others."""
    db = tmp_path / "ws.sqlite"
    shell = ShellBackend(live=live)
    async with opened(db, shell=shell, python=False) as ws:
        await ws.fs.mkdir(f"{ROOT}/d")
        await ws.fs.write_file(f"{ROOT}/a", b"one\n")
        await ws.fs.write_file(f"{ROOT}/f", b"base\n")
        await ok(ws, "true")
        await ws.fs.link(f"{ROOT}/a", f"{ROOT}/g")
        await ws.fs.rename(f"{ROOT}/a", f"{ROOT}/h")  # g is linked from h in the mirror
        await ok(ws, "ln h d/k")
        handle = await started(ws, "echo ready; sleep 0.3; ln f e && touch done; sleep 0.5")
        await _in_one_window(ws, shell, live, {"f": b"new\n"})
        result = await settle(handle)
        assert {f"{ROOT}/e", f"{ROOT}/f"} <= set(result.skipped), result.skipped_reasons
        await ws.fs.mkdir(f"{ROOT}/d/sub")
        await ws.fs.rename(f"{ROOT}/d", f"{ROOT}/m")  # sent whole: m/k goes with g and h
        await _one_file(ws, ["g", "h", "m/k"])
    expected = b"one\n"
    for backend in (shell, None):
        async with opened(db, shell=backend, python=False) as ws:
            await _one_file(ws, ["g", "h", "m/k"])
            assert not await ws.fs.exists(f"{ROOT}/e")
            assert (await ok(ws, "stat -c %h f && cat f")).stdout.split() == ["1", "new"]
            await ok(ws, "echo more >> g")
            expected += b"more\n"
            assert await ws.fs.read_file(f"{ROOT}/m/k") == expected
            await ws.fs.write_file(f"{ROOT}/h", expected + b"ws\n")
            expected += b"ws\n"
            assert (await ok(ws, "cat m/k")).stdout.encode() == expected
            await _one_file(ws, ["g", "h", "m/k"])


PASSING_LINKS = {
    "renamed over": "ln f t && echo more >> t && mv u t",
    "a synced name removed": "rm u && ln f u && echo more >> u && rm u",
}


@pytest.mark.parametrize("how", PASSING_LINKS.values(), ids=PASSING_LINKS.keys())
@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_write_through_a_link_the_run_made_and_replaced_reaches_the_workspace(
    tmp_path: Path, live: bool, how: str
) -> None:
    """A run links ``f`` under a name, appends through it, and then replaces that name (renames the
    synced ``u`` over it) or removes it where a synced name was: every event names the link's name,
    and no name is both new and gone at the end, so nothing looked at every file again. Before:
    ``f``'s change was never pulled (the workspace kept ``one`` while the sandbox had ``one more``:
    s50/h7, t7_shared seed 18)."""
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=live), python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/f", b"one\n")
        await ws.fs.write_file(f"{ROOT}/u", b"u\n")
        await ok(ws, "true")
        changed = await ok(ws, how)
        assert f"{ROOT}/f" in changed.pulled
        assert await ws.fs.read_file(f"{ROOT}/f") == b"one\nmore\n"
        assert await sandbox_view(ws) == await workspace_view(ws)


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_two_workspace_files_a_run_linked_in_a_conflict_stay_two_files(
    tmp_path: Path, live: bool
) -> None:
    """A run's ``ln -f a b`` meets workspace writes of ``a`` and ``b`` in one sync window: both are
    refused and kept (conflicts), one file in the mirror with two names, and the push writes each
    workspace file into it. Before: the second write went into the file the first had just written,
    so the sandbox's ``a`` showed the workspace's ``b`` (s50/h7, t7_shared seed 38 with HLN=1)."""
    backend = ShellBackend(live=live)
    async with opened(tmp_path / "ws.sqlite", shell=backend, python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/a", b"a\n")
        await ws.fs.write_file(f"{ROOT}/b", b"b\n")
        await ok(ws, "true")
        handle = await started(ws, "echo ready; sleep 0.3; ln -f a b && touch done; sleep 0.5")
        await _in_one_window(ws, backend, live, {"a": b"host a\n", "b": b"host b\n"})
        result = await settle(handle)
        assert {f"{ROOT}/a", f"{ROOT}/b"} <= set(result.skipped), result.skipped_reasons
        assert (await ok(ws, "cat a b")).stdout == "host a\nhost b\n"
        assert await sandbox_view(ws) == await workspace_view(ws)
        assert (await ok(ws, "stat -c %h a b")).stdout.split() == ["1", "1"]


# (sizes of a and b, the backend's max_sync_bytes): large ones come as chunks filled in place (1 MiB
# and more); small ones on two pages, the second one's bytes in pieces in the last case.
CONFLICT_SIZES = {
    "large, same size": (3_000_000, 3_000_000, None),
    "large, sizes differ": (3_000_000, 2_000_000, None),
    "small, large": (10, 3_000_000, None),
    "large, small": (3_000_000, 10, None),
    "small, on two pages": (600_000, 600_000, 1 << 20),
    "small, the second in pieces": (600_000, 700_000, 650_000),
}


@pytest.mark.parametrize("sizes", CONFLICT_SIZES.values(), ids=CONFLICT_SIZES.keys())
@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_two_workspace_files_a_run_linked_in_a_conflict_stay_two_files_large_or_paged(
    tmp_path: Path, live: bool, sizes: tuple[int, int, int | None]
) -> None:
    """As above, with a large file among the two (written into the mirror's file in place as chunks),
    or two small ones on different pages of the push. Before: the guard covered small files of one
    page only: the second's chunks (or its bytes, on a later page) went into the file the first had
    been written into, both names one file showing one content (or a mix of both) in the sandbox for
    good, while the workspace held two."""
    first, second, page = sizes
    limits = {} if page is None else {"max_sync_bytes": page}
    backend = ShellBackend(live=live, **limits)
    a, b = b"A" * first, b"B" * second
    async with opened(tmp_path / "ws.sqlite", shell=backend, python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/a", b"a" * first)
        await ws.fs.write_file(f"{ROOT}/b", b"b" * second)
        await ok(ws, "true")
        handle = await started(ws, "echo ready; sleep 0.3; ln -f a b && touch done; sleep 0.5")
        await _in_one_window(ws, backend, live, {"a": a, "b": b})
        result = await settle(handle)
        assert {f"{ROOT}/a", f"{ROOT}/b"} <= set(result.skipped), result.skipped_reasons
        seen = await ok(ws, "sha256sum a b | cut -c1-64 && stat -c %h a b")
        assert seen.stdout.split() == [digest(a), digest(b), "1", "1"]
        assert await ws.fs.read_file(f"{ROOT}/a") == a
        assert await ws.fs.read_file(f"{ROOT}/b") == b
        assert await sandbox_view(ws) == await workspace_view(ws)


@pytest.mark.parametrize("removed", ["a", "b"])
@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_large_file_a_run_linked_the_workspace_takes_apart_is_two_files_in_the_sandbox(
    tmp_path: Path, live: bool, removed: str
) -> None:
    """A run makes a large file and a hard link to it; the workspace writes ``a``, removes one name
    and writes it anew (two files there now, both written since the sandbox's revision): the push
    writes the one still the run's file into it and makes the other a new file."""
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=live), python=False) as ws:
        await ok(ws, "head -c 3000000 /dev/urandom > a && ln a b")
        assert (await ws.fs.stat(f"{ROOT}/a")).ino == (await ws.fs.stat(f"{ROOT}/b")).ino
        a, b = b"A" * 3_000_000, b"B" * 2_500_000
        await ws.fs.write_file(f"{ROOT}/a", a)
        await ws.fs.rm(f"{ROOT}/{removed}")
        await ws.fs.write_file(f"{ROOT}/{removed}", a if removed == "a" else b)
        await ws.fs.write_file(f"{ROOT}/b", b)
        seen = await ok(ws, "sha256sum a b | cut -c1-64 && stat -c %h a b")
        assert seen.stdout.split() == [digest(a), digest(b), "1", "1"]
        assert await ws.fs.read_file(f"{ROOT}/a") == a
        assert await ws.fs.read_file(f"{ROOT}/b") == b
        assert await sandbox_view(ws) == await workspace_view(ws)


async def test_a_refused_removal_of_a_directory_the_workspace_renamed_comes_back_with_its_mode(
    tmp_path: Path,
) -> None:
    """A live run removes ``c`` (mode 0700) while, in the same sync window, the workspace renames
    ``x`` into ``c`` and ``c`` to ``e``: the pull refuses the removal and follows both renames, the
    first making ``c`` again in the mirror (with the default mode) to move ``x`` into. Before: that
    ``c`` became ``e`` with mode 0755 while the workspace's ``e`` had 0700, and only ``c`` (gone) was
    fetched again (s50/h7, t7_shared seed 39 with HLN=1)."""
    backend = ShellBackend(live=True)
    async with opened(tmp_path / "ws.sqlite", shell=backend, python=False) as ws:
        await ws.fs.mkdir(f"{ROOT}/c", mode=0o700)
        await ws.fs.write_file(f"{ROOT}/c/f", b"f\n")
        await ws.fs.write_file(f"{ROOT}/x", b"x\n")
        await ok(ws, "true")
        handle = await started(ws, "echo ready; sleep 0.3; rm -r c && touch done; sleep 0.5")
        sandbox = backend._lives._live[ws.fs.instance]
        async with sandbox.lock:  # no sync until the run removed c: the two meet in one window
            await ws.fs.rename(f"{ROOT}/x", f"{ROOT}/c/x")
            await ws.fs.rename(f"{ROOT}/c", f"{ROOT}/e")
            await until(lambda: _linked(sandbox.mirror.directory / "done"), within=30)
        result = await settle(handle)
        assert f"{ROOT}/c" in result.skipped, result.skipped_reasons
        assert (await ws.fs.stat(f"{ROOT}/e")).mode & 0o7777 == 0o700
        # (the run's removal of c/f goes to e/f, the rename followed: e keeps the workspace's x only)
        assert (await ok(ws, "stat -c %a e && ls e")).stdout.split() == ["700", "x"]
        assert await sandbox_view(ws) == await workspace_view(ws)


# A run's change of a file of several names (``f``, ``g``, ``d/h``): (its script, the groups of names
# that are one file after it, each group's content).
THROUGH_ONE_NAME = {
    "appended": ("echo b >> f", [(["f", "g", "d/h"], "a\nb\n")]),
    "appended through a new name": ("ln f n && echo b >> n", [(["f", "g", "d/h", "n"], "a\nb\n")]),
    "a new name first in order": ("ln f a0 && echo b >> f", [(["a0", "f", "g", "d/h"], "a\nb\n")]),
    "a name removed": ("rm d/h && echo b >> g", [(["f", "g"], "a\nb\n")]),
    "a name renamed": ("mv g g2 && echo b >> f", [(["f", "g2", "d/h"], "a\nb\n")]),
    "its directory renamed": ("mv d e && echo b >> e/h", [(["f", "g", "e/h"], "a\nb\n")]),
    "replaced at one name": ("sed -i s/a/z/ f", [(["f"], "z\n"), (["g", "d/h"], "a\n")]),
    "replaced and relinked": ("sed -i s/a/z/ f && ln -f f g", [(["f", "g"], "z\n"), (["d/h"], "a\n")]),
    "chmod-ed and touched": ("chmod 600 g && touch -d @1000000 d/h", [(["f", "g", "d/h"], "a\n")]),
}


@pytest.mark.parametrize("case", THROUGH_ONE_NAME.values(), ids=THROUGH_ONE_NAME.keys())
@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_change_through_one_name_of_a_linked_file_keeps_its_names_one_file(
    tmp_path: Path, live: bool, case: tuple[str, list[tuple[list[str], str]]]
) -> None:
    """A write through the file a program holds is written through the workspace's node (every name,
    ``MirrorFile.same``), no name re-sent: one change in the log for an append. Names the run made,
    removed or renamed, and a file it replaced at one name (a new file there), come out as in the
    sandbox, in the workspace and through a reopen (a fresh mirror: the link counts as before)."""
    script, groups = case
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        await ws.fs.mkdir(f"{ROOT}/d")
        await ws.fs.write_file(f"{ROOT}/f", b"a\n")
        for name in ("g", "d/h"):
            await ws.fs.link(f"{ROOT}/f", f"{ROOT}/{name}")
        await ok(ws, "true")
        before = ws.fs.rev
        result = await ok(ws, script)
        if script == "echo b >> f":
            assert [(c.path, c.op) for c in ws.fs.changes_since(before, ROOT).changes] == [
                (f"{ROOT}/f", "write")
            ]
            assert result.pulled == [f"{ROOT}/d/h", f"{ROOT}/f", f"{ROOT}/g"]  # changed, one write
        for names, text in groups:
            await _one_file(ws, names)
            assert await ws.fs.read_text(f"{ROOT}/{names[0]}") == text
        mode = (await ws.fs.stat(f"{ROOT}/f")).mode
    async with opened(db, python=False) as ws:  # a fresh backend: the mirror rebuilt from the store
        for names, text in groups:
            await _one_file(ws, names)
            assert (await ok(ws, f"cat {names[-1]}")).stdout == text
        assert (await ws.fs.stat(f"{ROOT}/f")).mode == mode
        await ok(ws, f"echo c >> {groups[0][0][-1]}")
        assert await ws.fs.read_text(f"{ROOT}/{groups[0][0][0]}") == groups[0][1] + "c\n"
        await _one_file(ws, groups[0][0])


@pytest.mark.parametrize("large", [False, True], ids=["small", "large"])
async def test_a_run_appending_through_one_name_while_the_workspace_writes_another_is_a_conflict(
    tmp_path: Path, large: bool
) -> None:
    """Per call, the workspace writes ``g`` while a run appends to ``f``, another name of the file:
    the run's write through the node would overwrite the workspace's. It is refused as a conflict
    (the pull's rules, and the store's check of every name of the node), the workspace's version
    kept under every name, in the sandbox too, and the names stay one file."""
    base = b"x" * (2_500_000 if large else 2) + b"\n"
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=False), python=False) as ws:
        await ws.fs.mkdir(f"{ROOT}/d")
        await ws.fs.write_file(f"{ROOT}/f", base)
        await ws.fs.link(f"{ROOT}/f", f"{ROOT}/d/g")
        await ok(ws, "true")
        handle = await started(ws, "echo ready; sleep 1; echo more >> f")
        await ws.fs.write_file(f"{ROOT}/d/g", b"ws\n")
        result = await settle(handle)
        assert result.status == "completed", result
        # Every name of the file is said refused, as every name is said pulled when such a write lands.
        assert sorted(result.skipped) == [f"{ROOT}/d/g", f"{ROOT}/f"], result.skipped_reasons
        assert result.pulled == [], result
        assert "changed in the workspace during the run" in result.skipped_reasons[f"{ROOT}/f"]
        assert await ws.fs.read_file(f"{ROOT}/f") == b"ws\n"
        await _one_file(ws, ["f", "d/g"])
        assert (await ok(ws, "cat f d/g")).stdout == "ws\nws\n"
        # The mirror's entries of both names are current: a workspace rename of one is followed.
        await ws.fs.rename(f"{ROOT}/d/g", f"{ROOT}/d/h")
        await _one_file(ws, ["f", "d/h"])
        await ok(ws, "echo again >> d/h")
        await _one_file(ws, ["f", "d/h"])
        assert await ws.fs.read_file(f"{ROOT}/f") == b"ws\nagain\n"


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_run_appending_through_one_name_while_the_workspace_moves_another_is_pulled(
    tmp_path: Path, live: bool
) -> None:
    """The workspace renames the directory holding another name of the file while a run appends
    through ``f``: no content of the file changed in the workspace, so the append is pulled through
    the node (the store's check follows the rename), and every name, the moved one too, reads it.
    (A name the workspace links meanwhile is a conflict by the pull's own rules: ``other_names``.)"""
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=live), python=False) as ws:
        await ws.fs.mkdir(f"{ROOT}/d")
        await ws.fs.write_file(f"{ROOT}/f", b"a\n")
        await ws.fs.link(f"{ROOT}/f", f"{ROOT}/d/g")
        await ok(ws, "true")
        handle = await started(ws, "echo ready; sleep 1; echo more >> f")
        await ws.fs.rename(f"{ROOT}/d", f"{ROOT}/e")
        result = await settle(handle)
        assert result.status == "completed" and result.skipped == [], result.skipped_reasons
        for name in ("f", "e/g"):
            assert await ws.fs.read_file(f"{ROOT}/{name}") == b"a\nmore\n"
        await _one_file(ws, ["f", "e/g"])
