"""A program's ``mv`` of a directory reaches the workspace as one rename (``computer/runtime/_pull_moves``):
the change log has the rename, not two rows per file, and every file below keeps its workspace node
(``stat().ino``); ``pulled`` names the two directories. Where the rename cannot be taken as one (the
workspace changed something at either name in the same sync, a FIFO or a name that is not UTF-8 below
it) it is sent as a removal and the new tree, as before, and nothing is lost. Real programs, per call
and live, checked through ``ws.fs``, the change log, later runs and a reopen."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from computer.runtime import ShellBackend, SyncPull, _context
from computer.runtime._codec import decode_sync, encode_sync
from computer.runtime._context import LocalExecContext

from ._support import ROOT, hold_tick_pulls, ok, opened, sandbox_view, shell, workspace_view

MAKE = "mkdir -p d/sub && (cd d && seq 1 300 | xargs touch && echo x > sub/x && echo a > a && ln a b)"


async def _inos(ws: Any, paths: list[str]) -> dict[str, int]:
    return {path: (await ws.fs.stat(f"{ROOT}/{path}")).ino for path in paths}


def _ops(ws: Any, rev: int) -> list[tuple[str, str]]:
    return [(c.op, c.path) for c in ws.fs.changes_since(rev, ROOT).changes if c.op != "touch"]


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_programs_mv_of_a_tree_is_one_rename_in_the_workspace(tmp_path: Path, live: bool) -> None:
    """Before: 303 files made again (608 change-log rows), each a new node."""
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=shell(live), python=False) as ws:
        await ok(ws, MAKE + " && echo out > outside && ln d/sub/x outside_link")
        before = await _inos(ws, ["d/1", "d/300", "d/sub/x", "d/a", "outside_link"])
        rev = ws.fs.rev
        result = await ok(ws, "mv d e")
        assert result.pulled == [f"{ROOT}/d", f"{ROOT}/e"]
        assert _ops(ws, rev) == [("rm", f"{ROOT}/d"), ("rename", f"{ROOT}/e")]
        after = await _inos(ws, ["e/1", "e/300", "e/sub/x", "e/a", "e/b", "outside_link"])
        assert [after[p] for p in ("e/1", "e/300", "e/sub/x", "e/a")] == [
            before[p] for p in ("d/1", "d/300", "d/sub/x", "d/a")
        ]
        assert after["e/a"] == after["e/b"] and after["e/sub/x"] == after["outside_link"]  # links stay links
        # Changed after the rename, in the same run: sent as usual at the new names, below a new parent.
        rev = ws.fs.rev
        moved = await ok(ws, "mkdir -p p/q && mv e p/q/e2 && echo more >> p/q/e2/sub/x && rm p/q/e2/2")
        assert moved.pulled == [
            f"{ROOT}/e",
            f"{ROOT}/outside_link",  # (the file's other name: written through, it changed too)
            f"{ROOT}/p",
            f"{ROOT}/p/q",
            f"{ROOT}/p/q/e2",
            f"{ROOT}/p/q/e2/2",
            f"{ROOT}/p/q/e2/sub/x",
        ]
        assert ("rename", f"{ROOT}/p/q/e2") in _ops(ws, rev) and len(_ops(ws, rev)) < 10
        assert (await ws.fs.stat(f"{ROOT}/p/q/e2/1")).ino == before["d/1"]
        assert await ws.fs.read_text(f"{ROOT}/outside_link") == "x\nmore\n"
        view = await workspace_view(ws)
        assert len(view) == 302 + 2 and view == await sandbox_view(ws)
    async with opened(db, python=False) as ws:
        assert await workspace_view(ws) == view == await sandbox_view(ws)
        assert (await ok(ws, "stat -c %h p/q/e2/a outside; cat outside_link")).stdout == "2\n1\nx\nmore\n"


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_renames_there_and_back_and_nested(
    tmp_path: Path, live: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A there-and-back in one pull is nothing to send. A live sandbox's tick pulls while the run goes
    on: one landing between the two ``mv`` sent both (``pulled`` named ``d`` and ``e`` too, on a loaded
    machine; reproduced with a ``sleep 1`` between them), so the ticks pull nothing during that run
    (their look is held quiet) and the run's end pulls it whole, as a per-call run does."""
    async with opened(tmp_path / "ws.sqlite", shell=shell(live), python=False) as ws:
        await ok(ws, MAKE)
        before = await _inos(ws, ["d/1", "d/sub/x"])
        rev = ws.fs.rev
        hold_tick_pulls(monkeypatch)
        assert (await ok(ws, "mv d e && mv e d && echo new > d/new")).pulled == [f"{ROOT}/d/new"]
        monkeypatch.undo()
        assert _ops(ws, rev) == [("write", f"{ROOT}/d/new")]
        rev = ws.fs.rev
        assert (await ok(ws, "mv d e")).pulled == [f"{ROOT}/d", f"{ROOT}/e"]
        assert (await ok(ws, "mv e d")).pulled == [f"{ROOT}/d", f"{ROOT}/e"]
        assert [op for op, _ in _ops(ws, rev)] == ["rm", "rename", "rm", "rename"]
        rev = ws.fs.rev
        nested = await ok(ws, "mv d e && mv e/sub f")
        assert nested.pulled == [f"{ROOT}/d", f"{ROOT}/e", f"{ROOT}/e/sub", f"{ROOT}/f"]
        assert [op for op, _ in _ops(ws, rev)] == ["rm", "rename", "rm", "rename"]
        assert await _inos(ws, ["e/1", "f/x"]) == {"e/1": before["d/1"], "f/x": before["d/sub/x"]}
        assert await workspace_view(ws) == await sandbox_view(ws)


@pytest.mark.parametrize("where", ["old", "new"])
@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_workspace_write_at_either_name_in_the_same_sync_falls_back_losing_nothing(
    tmp_path: Path, live: bool, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workspace writes below the old name (or makes the new one) after the run's push, just before
    the pull that carries the rename: the owner refuses the rename with nothing committed, the pull is
    sent again as a removal and the new tree, under the usual conflict rule."""
    refused: list[bool] = []
    original = LocalExecContext.sync_pull
    written = f"{ROOT}/{'d' if where == 'old' else 'e'}/ws.txt"

    async def sync_pull(self: Any, pull: SyncPull, base_rev: int) -> Any:
        if pull.renames and not refused:
            await self.fs.mkdir(written.rpartition("/")[0], recursive=True)
            await self.fs.write_file(written, b"workspace\n")
        result = await original(self, pull, base_rev)
        if pull.renames:
            refused.append(result.unrenamed)
        return result

    async with opened(tmp_path / "ws.sqlite", shell=shell(live), python=False) as ws:
        await ok(ws, MAKE)
        monkeypatch.setattr(LocalExecContext, "sync_pull", sync_pull)
        result = await ok(ws, "mv d e && echo prog > e/sub/y")
        monkeypatch.undo()
        assert refused == [True]
        assert await ws.fs.read_text(written) == "workspace\n"
        assert await ws.fs.read_text(f"{ROOT}/e/sub/y") == "prog\n"
        assert len(await ws.fs.readdir(f"{ROOT}/e")) == 303 + (where == "new")
        if where == "old":  # the removal of d conflicts: it stays with the workspace's file (as before)
            assert result.skipped == [f"{ROOT}/d"]
            assert [e.name for e in await ws.fs.readdir(f"{ROOT}/d")] == ["ws.txt"]
        else:
            assert result.skipped == [] and not await ws.fs.exists(f"{ROOT}/d")
        assert await workspace_view(ws) == await sandbox_view(ws)


async def test_a_tree_holding_a_fifo_or_a_name_not_utf8_is_sent_as_before(tmp_path: Path) -> None:
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=False), python=False) as ws:
        await ok(ws, "mkdir f u && echo 1 > f/1 && echo 2 > u/2 && mkfifo f/pipe && touch u/$'\\xff'")
        rev = ws.fs.rev
        result = await ok(ws, "mv f f2 && mv u u2")
        assert "rename" not in [op for op, _ in _ops(ws, rev)]
        assert set(result.skipped) == {f"{ROOT}/f2/pipe", f"{ROOT}/u2/\\xff"}, result.skipped
        assert (
            await ws.fs.read_text(f"{ROOT}/f2/1") == "1\n" and await ws.fs.read_text(f"{ROOT}/u2/2") == "2\n"
        )
        assert not await ws.fs.exists(f"{ROOT}/f") and not await ws.fs.exists(f"{ROOT}/u")
        assert (await ok(ws, "find f2 u2 -mindepth 1 | wc -l")).stdout.strip() == "4"


def test_renames_travel_through_the_codec() -> None:
    pull = SyncPull("/w", renames=[("/w/a", "/w/b"), ("/w/b/c", "/w/d")], pull_id="ab12")
    assert decode_sync(SyncPull, encode_sync(pull)) == pull
    asks = SyncPull("/w", asks="ab12")  # (``_pull_lost``: a pool worker's mirror asks its owner)
    assert decode_sync(SyncPull, encode_sync(asks)) == asks


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_pull_that_fails_after_pairing_is_sent_again_whole(
    tmp_path: Path, live: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner fails the page that carries the rename (the owner gone, a full disk): the mirror puts
    its state back, so a live sandbox's next sync sends the program's rename again (as a removal and the
    new tree); kept re-keyed, it took the workspace for holding the new names already and sent nothing."""
    original = LocalExecContext.sync_pull

    async def sync_pull(self: Any, pull: SyncPull, base_rev: int) -> Any:
        if pull.renames:
            raise OSError(28, "No space left on device")
        return await original(self, pull, base_rev)

    async with opened(tmp_path / "ws.sqlite", shell=shell(live), python=False) as ws:
        await ok(ws, MAKE)
        monkeypatch.setattr(LocalExecContext, "sync_pull", sync_pull)
        hold_tick_pulls(monkeypatch)  # a tick's pull carried the rename: the run itself then completed
        failed = await (await ws.runtime.exec("mv d e", timeout=60)).result()
        monkeypatch.undo()
        assert failed.status != "completed" or failed.error, failed
        await ok(ws, "true")
        # Live, the sandbox goes on: the next sync sends it. Per call, a run whose pull failed is
        # reported failed and its sandbox dropped (the workspace's tree stays as it was, whole).
        kept, gone = ("e", "d") if live else ("d", "e")
        assert not await ws.fs.exists(f"{ROOT}/{gone}")
        assert len(await ws.fs.readdir(f"{ROOT}/{kept}")) == 303
        assert await workspace_view(ws) == await sandbox_view(ws)


async def test_a_rename_rides_on_the_first_page_of_a_paged_pull(tmp_path: Path) -> None:
    """Pages of 64 KiB: what the run wrote below the new name after the rename takes several pages,
    the rename goes first, on the first of them."""
    pages: list[SyncPull] = []
    original = LocalExecContext.sync_pull

    async def sync_pull(self: Any, pull: SyncPull, base_rev: int) -> Any:
        pages.append(pull)
        return await original(self, pull, base_rev)

    backend = ShellBackend(live=False, max_sync_bytes=64 * 1024)
    async with opened(tmp_path / "ws.sqlite", shell=backend, python=False) as ws:
        await ok(ws, MAKE)
        before = (await ws.fs.stat(f"{ROOT}/d/7")).ino
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(LocalExecContext, "sync_pull", sync_pull)
            await ok(ws, "mv d e && for i in 1 2 3 4; do head -c 40000 /dev/urandom > e/sub/r$i; done")
        assert len(pages) > 2 and [bool(p.renames) for p in pages] == [True] + [False] * (len(pages) - 1)
        assert (await ws.fs.stat(f"{ROOT}/e/7")).ino == before
        assert await workspace_view(ws) == await sandbox_view(ws)


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_refused_rename_keeps_the_tops_touch_of_the_same_run(
    tmp_path: Path, live: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner refuses the rename (the workspace wrote below the old name), the pull is planned again
    without it: the top's ``touch -d`` of the same run still reaches the workspace. Before, the refused
    plan had taken the top's new time as sent, and the plan sent again found it unchanged: the
    workspace's top kept the run's earlier time."""
    refused: list[bool] = []
    original = LocalExecContext.sync_pull

    async def sync_pull(self: Any, pull: SyncPull, base_rev: int) -> Any:
        if pull.renames and not refused:
            await self.fs.write_file(f"{ROOT}/p/d/ws.txt", b"workspace\n")
        result = await original(self, pull, base_rev)
        if pull.renames:
            refused.append(result.unrenamed)
        return result

    async with opened(tmp_path / "ws.sqlite", shell=shell(live), python=False) as ws:
        await ok(ws, "mkdir -p p/d && seq 1 20 | (cd p/d && xargs touch)")
        monkeypatch.setattr(LocalExecContext, "sync_pull", sync_pull)
        await ok(ws, "mv p/d p/e && touch -d '2001-01-01 00:00:00 UTC' .")
        monkeypatch.undo()
        assert refused == [True]
        assert (await ws.fs.stat(ROOT)).mtime == 978_307_200_000
        assert await ws.fs.read_text(f"{ROOT}/p/d/ws.txt") == "workspace\n"
        assert len(await ws.fs.readdir(f"{ROOT}/p/e")) == 20


async def test_a_live_pull_failing_after_its_renames_were_committed_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages of 64 KiB, the second fails (a full disk for a moment; a cancelled tick likewise): the
    first committed the rename and the first file. The next sync sends the other files below the new
    name. Before, the mirror put its state back to the old names with the committed revisions not its
    own: the next sync took the workspace's rename for a change of its own below both names, refused
    every file below ``e`` as a conflict and dropped them from the sandbox (3 of 4 files lost)."""
    pages: list[SyncPull] = []
    original = LocalExecContext.sync_pull

    async def sync_pull(self: Any, pull: SyncPull, base_rev: int) -> Any:
        pages.append(pull)
        if len(pages) == 2:
            raise OSError(28, "No space left on device")
        return await original(self, pull, base_rev)

    backend = ShellBackend(live=True, max_sync_bytes=64 * 1024)
    if not backend.live:
        pytest.skip("no cgroup freezer here")
    async with opened(tmp_path / "ws.sqlite", shell=backend, python=False) as ws:
        await ok(ws, MAKE)
        monkeypatch.setattr(LocalExecContext, "sync_pull", sync_pull)
        source = "mv d e && for i in 1 2 3 4; do head -c 40000 /dev/urandom > e/sub/r$i; done"
        await (await ws.runtime.exec(source, timeout=60)).result()
        monkeypatch.undo()
        assert len(pages) >= 2 and pages[0].renames
        await ok(ws, "true")
        assert not await ws.fs.exists(f"{ROOT}/d")
        sizes = [(await ws.fs.stat(f"{ROOT}/e/sub/r{i}")).size for i in (1, 2, 3, 4)]
        assert sizes == [40000] * 4
        assert len(await ws.fs.readdir(f"{ROOT}/e")) == 303
        assert await workspace_view(ws) == await sandbox_view(ws)


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_directory_time_set_below_a_renamed_one_in_an_unwatched_tree_is_kept(
    tmp_path: Path, live: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tree walked, not watched (``_watch.MAX_DIRS`` cut to 50): the run renames ``d`` and sets the
    time of the directory below it. Before, the walk compared ``e/sub``'s time with a baseline that
    knew it as ``d/sub`` only: the time was never sent, the rename kept the older one."""
    from computer.runtime import _watch

    monkeypatch.setattr(_watch, "MAX_DIRS", 50)
    async with opened(tmp_path / "ws.sqlite", shell=shell(live), python=False) as ws:
        await ok(ws, "mkdir -p t/d{0..79} d/sub && echo x > d/f && echo y > d/sub/y")
        rev = ws.fs.rev
        await ok(ws, "mv d e && touch -d @1000000000 e/sub")
        assert ("rename", f"{ROOT}/e") in _ops(ws, rev)
        assert (await ws.fs.stat(f"{ROOT}/e/sub")).mtime == 1_000_000_000_000


@pytest.mark.parametrize("lost", ["answer", "page", "cancelled"])
async def test_a_pull_whose_first_page_is_lost_after_its_renames_were_committed_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lost: str
) -> None:
    """Pages of 64 KiB, the first (the rename's) fails on the mirror's side once the owner committed
    (``answer``: the whole page, its answer lost; ``page``: the renames alone, the page cut short;
    ``cancelled``: the call cancelled while the page goes on at the owner, as a pool's owner serves
    it): the mirror cannot know whether the rename was committed. It asks the owner before it syncs
    again (``SyncPull.asks``; the owner waits for the page still running), which says what that pull
    committed: the files below the new name are all sent, none refused. Before, the mirror put back
    the old names and the next sync took the committed rename for the workspace's: every file below
    ``e`` refused as a conflict, the 4 files the program wrote there after the rename dropped from the
    sandbox."""
    pages: list[SyncPull] = []
    background: list[asyncio.Future[Any]] = []
    committed = asyncio.Event()
    original = LocalExecContext.sync_pull
    original_renames = _context.rename_dirs

    async def rename_dirs(*args: Any) -> Any:
        done = await original_renames(*args)
        committed.set()
        if lost == "page":
            raise OSError(5, "Input/output error")  # (the page cut short once the renames are in)
        if lost == "cancelled":
            await asyncio.sleep(0.5)  # (the page goes on at the owner after its caller gave up)
        return done

    async def sync_pull(self: Any, pull: SyncPull, base_rev: int) -> Any:
        pages.append(pull)
        if not pull.renames or committed.is_set():
            return await original(self, pull, base_rev)
        if lost == "cancelled":
            background.append(asyncio.ensure_future(original(self, pull, base_rev)))
            await asyncio.wait_for(committed.wait(), 30)
            raise asyncio.CancelledError
        result = await original(self, pull, base_rev)
        raise OSError(104, "Connection reset by peer")  # (the answer lost)
        return result

    backend = ShellBackend(live=True, max_sync_bytes=64 * 1024)
    if not backend.live:
        pytest.skip("no cgroup freezer here")
    async with opened(tmp_path / "ws.sqlite", shell=backend, python=False) as ws:
        await ok(ws, MAKE)
        before = (await ws.fs.stat(f"{ROOT}/d/7")).ino
        monkeypatch.setattr(LocalExecContext, "sync_pull", sync_pull)
        monkeypatch.setattr(_context, "rename_dirs", rename_dirs)
        source = "mv d e && for i in 1 2 3 4; do head -c 40000 /dev/urandom > e/sub/r$i; done"
        await (await ws.runtime.exec(source, timeout=60)).result()
        # A workspace write before the next sync: the revisions the answer makes the mirror's own are
        # that pull's alone, so this one still reaches the sandbox (and is no conflict).
        await ws.fs.write_file(f"{ROOT}/e/sub/from-ws", b"workspace\n")
        after = await ok(ws, "cat e/sub/from-ws")
        monkeypatch.undo()
        assert after.stdout == "workspace\n"
        assert pages[0].renames and committed.is_set()
        assert not after.skipped, after.reasons
        assert not await ws.fs.exists(f"{ROOT}/d")
        sizes = [(await ws.fs.stat(f"{ROOT}/e/sub/r{i}")).size for i in (1, 2, 3, 4)]
        assert sizes == [40000] * 4
        assert len(await ws.fs.readdir(f"{ROOT}/e")) == 303
        assert (await ws.fs.stat(f"{ROOT}/e/7")).ino == before  # (the rename kept: not made again)
        assert await workspace_view(ws) == await sandbox_view(ws)
        assert all(task.done() for task in background)
        assert any(p.asks == pages[0].pull_id for p in pages)
    async with opened(tmp_path / "ws.sqlite", shell=backend, python=False) as ws:  # a reopen: a new mirror
        listed = await ok(ws, "ls e/sub | wc -l; wc -c < e/sub/r4; cat e/sub/from-ws")
        assert listed.stdout.split() == [str(len(await ws.fs.readdir(f"{ROOT}/e/sub"))), "40000", "workspace"]
        assert await workspace_view(ws) == await sandbox_view(ws)
