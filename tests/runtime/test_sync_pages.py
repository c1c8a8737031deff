"""A pull's pages. A pull cancelled while a worker thread is inside its pages generator (the race
behind a live sandbox's "sync failed: ValueError('generator already executing')" under load): closing
the pages neither raises nor cuts the step short; the generator is closed once the step is out. A pull
of many small files is cut in pages by their count too, with the event loop free between them."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import threading
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

import computer
from computer.runtime import ShellBackend, _pull_pages, _push_ops, _push_pages, _sync
from computer.runtime._backend import PAGE_FILES
from computer.runtime._context import LocalExecContext
from computer.runtime._sync import _Pages


class _Turns:
    """A task counting its turns of the event loop while the block runs: whether the loop ran other
    work between two points."""

    def __init__(self, pause: float = 0.0) -> None:
        self.count = 0
        self.pause = pause  # a spin (0) starves threads that read pages
        self._task: asyncio.Future[None] | None = None

    async def __aenter__(self) -> _Turns:
        self._task = asyncio.ensure_future(self._turn())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()

    async def _turn(self) -> None:
        while True:
            self.count += 1
            await asyncio.sleep(self.pause)


async def test_closing_pages_while_a_thread_steps_them_waits_for_the_step() -> None:
    inside, go_on, closed = threading.Event(), threading.Event(), threading.Event()

    def pages() -> Generator[Any, None, None]:
        try:
            inside.set()
            go_on.wait(10)  # a slow read of a file
            yield "page 1"
            yield "page 2"
        finally:
            closed.set()

    stepped = _Pages(pages())
    step = asyncio.ensure_future(asyncio.to_thread(stepped.next))
    assert await asyncio.to_thread(inside.wait, 10)
    step.cancel()  # the pull is cancelled: the thread stays inside the generator
    stepped.close()  # a plain generator's close() raised "generator already executing" here
    assert not closed.is_set()
    go_on.set()
    assert await asyncio.to_thread(closed.wait, 10)  # closed after the step, on a thread of its own


async def test_pages_not_being_stepped_close_at_once() -> None:
    closed = threading.Event()

    def pages() -> Generator[Any, None, None]:
        try:
            yield "page 1"
        finally:
            closed.set()

    stepped = _Pages(pages())
    assert stepped.next() == "page 1"
    stepped.close()
    assert closed.is_set()
    assert stepped.next() is None


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_pull_of_many_small_files_is_committed_in_pages_with_the_loop_free_between(
    monkeypatch: pytest.MonkeyPatch, live: bool
) -> None:
    """A run that writes 2,500 small files is pulled in pages of at most ``PAGE_FILES`` files, and the
    event loop runs other tasks between them: one page of 20,000 files held the loop (every workspace
    of the process) 0.68 s."""
    pages: list[tuple[int, int]] = []  # (files on the page, the other task's count when it came)
    turns = _Turns(0.0005)
    sync_pull = LocalExecContext.sync_pull

    async def recorded(self: LocalExecContext, pull: Any, base_rev: int) -> Any:
        pages.append((len(pull.files), turns.count))
        return await sync_pull(self, pull, base_rev)

    monkeypatch.setattr(LocalExecContext, "sync_pull", recorded)
    async with computer.Workspace(backends=[ShellBackend(live=live)]) as ws:
        await ws.fs.mkdir("/workspace")
        await (await ws.runtime.exec("true")).result()
        pages.clear()
        async with turns:
            result = await (
                await ws.runtime.exec("for i in $(seq 2500); do echo $i > f$i; done", timeout=60)
            ).result()
        assert result.status == "completed", result.stderr
        assert len(result.pulled) == 2500 and result.skipped == []
        assert sum(files for files, _ in pages) >= 2500  # (a live tick may pull a file twice)
        assert max(files for files, _ in pages) <= PAGE_FILES < 2500
        counts = [seen for _, seen in pages]
        assert counts == sorted(set(counts)), "the loop ran other tasks between every two pages"
        assert await ws.fs.read_text("/workspace/f1777") == "1777\n"
        assert len(await ws.fs.readdir("/workspace")) == 2500


async def test_every_directory_a_run_made_is_listed_however_the_pull_is_paged() -> None:
    """``mkdir -p a/b/c`` listed ``a/b/c`` only while the parents of a written file were listed; and a
    directory made on a first page with its files on later ones (``t``) was not listed at all."""
    async with computer.Workspace(backends=[ShellBackend(live=False)]) as ws:
        await ws.fs.mkdir("/workspace")
        source = "mkdir -p a/b/c && mkdir t && for d in 1 2 3; do mkdir t/$d; for i in $(seq 1000); do echo > t/$d/f$i; done; done"
        result = await (await ws.runtime.exec(source, timeout=60)).result()
        assert result.status == "completed", result.stderr
        made = {"a", "a/b", "a/b/c", "t", "t/1", "t/2", "t/3"}
        assert {f"/workspace/{d}" for d in made} <= set(result.pulled)
        assert len(result.pulled) == len(made) + 3000


async def test_removals_past_a_page_go_on_pages_of_their_own_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """2,500 files removed one by one (not ``rm -rf`` of their directory, which is one path): the
    removals come on pages of at most ``PAGE_FILES``, and the event loop runs other tasks between them
    (a pull that reads no file has no thread hop to give it the loop)."""
    pages: list[tuple[int, int]] = []  # (removals, files) of each page
    seen: list[tuple[int, int]] = []  # the other task's count as each page came and was done
    turns = _Turns()
    sync_pull = LocalExecContext.sync_pull

    async def recorded(self: LocalExecContext, pull: Any, base_rev: int) -> Any:
        pages.append((len(pull.deleted), len(pull.files)))
        came = turns.count
        result = await sync_pull(self, pull, base_rev)
        seen.append((came, turns.count))
        return result

    monkeypatch.setattr(LocalExecContext, "sync_pull", recorded)
    async with computer.Workspace(backends=[ShellBackend(live=False)]) as ws:
        ws.fs.commit_batch({f"/workspace/d/f{i}": b"x" for i in range(2500)}, mkdirs=["/workspace"])
        await ws.fs.write_file("/workspace/keep", "keep\n")
        await (await ws.runtime.exec("true")).result()
        pages.clear()
        seen.clear()
        async with turns:
            result = await (await ws.runtime.exec("find d -name 'f*' -delete", timeout=60)).result()
        assert result.status == "completed", result.stderr
        assert len(result.pulled) == 2500 and result.skipped == []
        assert sum(removals for removals, _ in pages) == 2500
        assert all(removals <= PAGE_FILES for removals, _ in pages) and len(pages) >= 3
        assert all(files == 0 for _, files in pages)
        # Between one page's end and the next one's start, whatever the page itself awaits.
        assert all(later[0] > done for (_, done), later in itertools.pairwise(seen)), seen
        assert await ws.fs.readdir("/workspace/d") == []
        assert await ws.fs.read_text("/workspace/keep") == "keep\n"


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_directories_past_a_page_go_on_pages_of_their_own_parents_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, live: bool
) -> None:
    """A run that makes a tree of directories: they come on pages of at most ``PAGE_DIRS`` (all on one
    page, 37,000 of a ``mkdir -p`` held the owner's loop ~0.26 s), parents first, with the loop free
    between pages. The file the tree replaces is removed on the first page (on a later one it would
    take the directories made before it); modes and times arrive; all is there after a reopen. The
    pages are one pull's, the run's end: a live sandbox's ticks pull nothing meanwhile (a tick inside
    the ``mkdir -p`` sent part of the tree, and the pages of the two pulls together were not parents
    first: found with the tick at 20 ms)."""
    from computer.runtime._mirror_watch import MirrorWatch

    quiet = MirrorWatch.quiet
    monkeypatch.setattr(MirrorWatch, "quiet", lambda self, paced=False: paced or quiet(self, paced))
    monkeypatch.setattr(_pull_pages, "PAGE_DIRS", 100)
    monkeypatch.setattr(_sync, "PAGE_DIRS", 100)
    pages: list[tuple[list[str], list[str]]] = []  # (directories, removals) of each page
    pulls: list[str] = []  # the pull each page belongs to
    seen: list[tuple[int, int]] = []
    turns = _Turns()
    sync_pull = LocalExecContext.sync_pull

    async def recorded(self: LocalExecContext, pull: Any, base_rev: int) -> Any:
        pages.append(([d.path for d in pull.dirs], list(pull.deleted)))
        pulls.append(pull.pull_id)
        came = turns.count
        result = await sync_pull(self, pull, base_rev)
        seen.append((came, turns.count))
        return result

    monkeypatch.setattr(LocalExecContext, "sync_pull", recorded)
    db = tmp_path / "ws.db"
    source = (
        "rm x old/f && mkdir -p x/d{0..9}/{0..29} && chmod 700 x/d3/7 && touch -d @1000000000 x/d5/29"
        " && echo z > x/d9/29/z"
    )
    async with computer.Workspace(str(db), backends=[ShellBackend(live=live)]) as ws:
        ws.fs.commit_batch({"/workspace/x": b"a file", "/workspace/old/f": b"f"}, mkdirs=["/workspace"])
        await (await ws.runtime.exec("true")).result()
        pages.clear()
        async with turns:
            result = await (await ws.runtime.exec(source, timeout=60)).result()
        assert result.status == "completed", result.stderr
        made = {"x", *(f"x/d{a}" for a in range(10)), *(f"x/d{a}/{b}" for a in range(10) for b in range(30))}
        assert set(result.pulled) == {f"/workspace/{p}" for p in made | {"old/f", "x/d9/29/z"}}
        assert result.skipped == []
        assert len(pages) >= 4 and all(len(dirs) <= 100 for dirs, _ in pages)
        assert pages[0][1] == ["/workspace/old/f", "/workspace/x"]  # removals on the first page
        assert all(removed == [] for _, removed in pages[1:])
        # Parents first within each pull (the ticks are held: one pull, the run's end).
        for pull_id in dict.fromkeys(pulls):
            order = [d for (dirs, _), of in zip(pages, pulls, strict=True) if of == pull_id for d in dirs]
            assert order == sorted(order, key=lambda d: d.count("/")), pull_id
        assert all(later[0] > done for (_, done), later in itertools.pairwise(seen)), seen
    async with computer.Workspace(str(db), backends=[ShellBackend(live=live)]) as ws:
        assert (await ws.fs.stat("/workspace/x/d3/7")).mode & 0o777 == 0o700
        assert (await ws.fs.stat("/workspace/x/d5/29")).mtime == 1_000_000_000_000  # ms
        assert await ws.fs.read_text("/workspace/x/d9/29/z") == "z\n"
        assert await ws.fs.readdir("/workspace/old") == []
        listed = await (await ws.runtime.exec("find x -type d | wc -l; stat -c %a x/d3/7")).result()
        assert listed.stdout == f"{len(made)}\n700\n"


@pytest.mark.parametrize("page_dirs", [100, 100_000], ids=["paged", "one-page"])
async def test_a_workspace_write_into_a_tree_a_run_makes_is_kept_however_its_directories_are_paged(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, page_dirs: int
) -> None:
    """The workspace makes ``x/d5`` and writes into it while a run makes ``x/d{0..9}/{0..29}``: on pages
    of directories or on one, the same way, everything the run made is pulled but ``x/d5`` itself,
    which both made (neither pulled nor skipped: the workspace's mode and time stay); after a reopen
    the sandbox sees both sides' entries in ``x/d5``. (Until s52 ``x/d5`` and everything the run made
    below it were refused, the workspace having made the directory.)"""
    monkeypatch.setattr(_pull_pages, "PAGE_DIRS", page_dirs)
    monkeypatch.setattr(_sync, "PAGE_DIRS", page_dirs)
    db = tmp_path / "ws.db"
    async with computer.Workspace(str(db), backends=[ShellBackend(live=False)]) as ws:
        await ws.fs.mkdir("/workspace/x", recursive=True)
        handle = await ws.runtime.exec("mkdir -p x/d{0..9}/{0..29} && echo made && sleep 2", timeout=60)
        async for snapshot in handle:  # the tree is made: the workspace writes into it (2 s to do so)
            if "made" in snapshot.stdout:
                break
        await ws.fs.mkdir("/workspace/x/d5")
        await ws.fs.write_file("/workspace/x/d5/ws.txt", "from the workspace\n")
        result = await handle.result()
        assert result.status == "completed", result.stderr
        made = {*(f"x/d{a}" for a in range(10)), *(f"x/d{a}/{b}" for a in range(10) for b in range(30))}
        assert set(result.pulled) == {f"/workspace/{p}" for p in made - {"x/d5"}}, result
        assert result.skipped == [], result
    async with computer.Workspace(str(db), backends=[ShellBackend(live=False)]) as ws:
        assert await ws.fs.read_text("/workspace/x/d5/ws.txt") == "from the workspace\n"
        listed = await (await ws.runtime.exec("find x -type d | wc -l; ls x/d5 | wc -l")).result()
        assert listed.stdout == f"{1 + len(made)}\n31\n", listed


async def test_rm_rf_of_a_tree_past_a_page_goes_children_first_and_lists_the_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``rm -rf d`` of 2,500 files: removal pages take the last paths first, so the directory goes on
    the last page, once what it held is gone (before, the first page took the whole tree in one
    transaction: 100,000 files held the owner's loop ~0.5 s), and ``pulled`` names the directory
    alone, as a pull of one page does (before: the directory and the 1,500 files of the later pages).
    Each page reads the change log past the pull's own earlier pages, never through them."""
    pages: list[list[str]] = []
    sync_pull = LocalExecContext.sync_pull

    async def recorded(self: LocalExecContext, pull: Any, base_rev: int) -> Any:
        pages.append(list(pull.deleted))
        return await sync_pull(self, pull, base_rev)

    monkeypatch.setattr(LocalExecContext, "sync_pull", recorded)
    db = tmp_path / "ws.db"
    async with computer.Workspace(str(db), backends=[ShellBackend(live=False)]) as ws:
        ws.fs.commit_batch({f"/workspace/d/e/f{i:04}": b"x" for i in range(2500)}, mkdirs=["/workspace"])
        await ws.fs.write_file("/workspace/keep", "keep\n")
        await (await ws.runtime.exec("true")).result()
        pages.clear()
        result = await (await ws.runtime.exec("rm -rf d", timeout=60)).result()
        assert result.status == "completed", result.stderr
        assert result.pulled == ["/workspace/d"] and result.skipped == []
        assert all(len(page) <= PAGE_FILES for page in pages) and len(pages) >= 3
        assert pages[0][-1] == "/workspace/d/e/f2499"  # the last paths first
        assert "/workspace/d" in pages[-1] and "/workspace/d/e" in pages[-1]
        assert sum(len(page) for page in pages) == 2502
        assert not await ws.fs.exists("/workspace/d")
    async with computer.Workspace(str(db), backends=[ShellBackend(live=False)]) as ws:
        assert [e.name for e in await ws.fs.readdir("/workspace")] == ["keep"]
        assert (await (await ws.runtime.exec("ls")).result()).stdout == "keep\n"


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_workspace_write_during_a_run_pulled_in_pages_is_kept_on_its_page(live: bool) -> None:
    """The workspace writes one of the 2,500 files a run is about to write. Per call that path is
    refused (listed in ``skipped`` with its reason, the workspace's bytes kept) whichever page carries
    it, and every other file of every page lands; live, the write reaches the sandbox first (the
    continuous sync) and the program's later write of it is pulled like the rest."""
    async with computer.Workspace(backends=[ShellBackend(live=live)]) as ws:
        await ws.fs.mkdir("/workspace")
        await (await ws.runtime.exec("true")).result()
        # Live: until the workspace's write is in the sandbox (bounded); per call it never comes.
        wait = "for i in $(seq 600); do [ -e f1777 ] && break; sleep 0.05; done" if live else "sleep 1"
        handle = await ws.runtime.exec(
            f"echo ready; {wait}; for i in $(seq 2500); do echo run > f$i; done", timeout=60
        )

        async def ready() -> None:
            async for snapshot in handle:
                if "ready" in snapshot.stdout or snapshot.done:
                    return

        await asyncio.wait_for(ready(), 60)
        await ws.fs.write_file("/workspace/f1777", "workspace\n")
        result = await asyncio.wait_for(handle.result(), 120)
        assert result.status == "completed", result.stderr
        kept = "run\n" if live else "workspace\n"
        if live:
            assert result.skipped == [] and len(result.pulled) == 2500
        else:
            assert result.skipped == ["/workspace/f1777"] and result.skipped_reasons["/workspace/f1777"]
            assert len(result.pulled) == 2499
        assert await ws.fs.read_text("/workspace/f1777") == kept
        assert await ws.fs.read_text("/workspace/f2500") == "run\n"
        assert len(await ws.fs.readdir("/workspace")) == 2500
        assert (await (await ws.runtime.exec("cat f1777 f1")).result()).stdout == kept + "run\n"


async def test_a_full_push_reads_the_tree_a_slice_at_a_time_in_small_pages(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A new mirror's push walks the manifest a slice at a time with the loop free between slices and
    sends small pages (one read and sort of 100,000 entries, and one page of them, held the owner's
    loop 0.85 s). Everything arrives: files, empty directories, symlinks, a large file, and hard links
    whose first name went on an earlier page; after a reopen (a new mirror) too."""
    monkeypatch.setattr(_push_pages, "_PAGE_ENTRIES", 97)
    monkeypatch.setattr(_push_pages, "_WALK_SLICE", 41)
    pages: list[int] = []
    sync_push = LocalExecContext.sync_push
    turns = _Turns()
    manifest_calls: list[int] = []

    async def recorded(self: LocalExecContext, *args: Any, **kwargs: Any) -> Any:
        page = await sync_push(self, *args, **kwargs)
        pages.append(len(page.files) + len(page.dirs) + len(page.symlinks))
        return page

    monkeypatch.setattr(LocalExecContext, "sync_push", recorded)
    db = tmp_path / "ws.db"
    files = {f"/workspace/t/{i % 7}/f{i:03}": f"{i}\n".encode() for i in range(600)}
    expected = "".join(f"t/{i % 7}/f{i:03} {i}\n" for i in sorted(range(600), key=lambda i: (i % 7, i)))
    async with computer.Workspace(str(db)) as ws:
        ws.fs.commit_batch(files, mkdirs=["/workspace/empty/deeper", "/workspace/t", "/workspace/z"])
        await ws.fs.write_file("/workspace/z/big", bytes(range(256)) * 8192)  # 2 MiB: as chunks
        await ws.fs.link("/workspace/t/0/f000", "/workspace/z/link")  # its first name pages earlier
        await ws.fs.symlink("t/1", "/workspace/z/sym")
    for _ in range(2):  # the second time: a reopen, a new mirror again
        async with computer.Workspace(str(db), backends=[ShellBackend(live=False)]) as ws:
            pages.clear()

            def counted(*args: Any, manifest: Any = ws.fs.manifest, **kwargs: Any) -> Any:
                manifest_calls.append(1)
                return manifest(*args, **kwargs)

            monkeypatch.setattr(ws.fs, "manifest", counted)
            turns.count = 0
            async with turns:
                result = await (
                    await ws.runtime.exec(
                        "for f in t/*/*; do printf '%s %s' $f \"$(cat $f)\"; echo; done; "
                        "ls -d empty/deeper; stat -c %h t/0/f000 z/link; readlink z/sym; md5sum < z/big",
                        timeout=60,
                    )
                ).result()
            assert result.status == "completed", result.stderr
            big = hashlib.md5(bytes(range(256)) * 8192).hexdigest()
            assert result.stdout == f"{expected}empty/deeper\n2\n2\nt/1\n{big}  -\n"
            assert len(pages) >= 7 and max(pages) <= 97, pages
            assert len(manifest_calls) >= 15  # a slice at a time
            assert turns.count >= len(manifest_calls)  # the other task ran between them
            manifest_calls.clear()


@pytest.mark.parametrize("offload", [False, True], ids=["on-the-loop", "in-a-thread"])
@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_an_incremental_push_in_many_pages_computes_what_it_sends_once(
    monkeypatch: pytest.MonkeyPatch, live: bool, offload: bool
) -> None:
    """600 files the workspace wrote since the mirror's revision, with a rename, a removal and a new
    link among them, go in pages of 97 entries; the change log is read once for the whole push (each
    page read it again and walked the changed tree anew: 100,000 files held the loop 1.6 s a page).
    Offloaded (as a push over ``OFFLOAD`` paths is), the plan, the ops below the changed directory
    and their order are computed in a worker thread, with the same result."""
    monkeypatch.setattr(_push_pages, "_PAGE_ENTRIES", 97)
    threads: set[str] = set()
    if offload:
        monkeypatch.setattr(_push_ops, "OFFLOAD", -1)
        for name in ("plan_changes", "ops_below", "sorted_ops"):
            pure_fn = getattr(_push_pages, name)

            def in_thread(*args: Any, _fn: Any = pure_fn, _name: str = name) -> Any:
                threads.add(f"{_name}:{threading.current_thread() is threading.main_thread()}")
                return _fn(*args)

            monkeypatch.setattr(_push_pages, name, in_thread)
    reads: list[object] = []  # the mirror revision of each read of the change log
    async with computer.Workspace(backends=[ShellBackend(live=live)]) as ws:
        ws.fs.commit_batch({"/workspace/old": b"old\n", "/workspace/gone": b"x"}, mkdirs=["/workspace"])
        await (await ws.runtime.exec("true")).result()
        ws.fs.commit_batch({f"/workspace/t/{i % 5}/f{i:03}": f"{i}\n".encode() for i in range(600)})
        await ws.fs.rename("/workspace/old", "/workspace/t/renamed")
        await ws.fs.rm("/workspace/gone")
        await ws.fs.link("/workspace/t/0/f000", "/workspace/linked")
        changes_since = ws.fs.changes_since

        def counted(*args: Any, **kwargs: Any) -> Any:
            reads.append(args[0])
            return changes_since(*args, **kwargs)

        monkeypatch.setattr(ws.fs, "changes_since", counted)
        result = await (
            await ws.runtime.exec(
                "cat t/*/* | wc -l; cat t/renamed linked; ls gone 2>&1 | wc -l; stat -c %h linked", timeout=60
            )
        ).result()
        assert result.status == "completed", result.stderr
        assert result.stdout == "600\nold\n0\n1\n2\n"
        # Once per push (a live sandbox's tick may push the workspace's writes before the run does).
        assert reads and len(reads) == len(set(reads)) <= 2, reads
    if offload:  # each computed once, never on the loop's thread
        assert threads == {"plan_changes:False", "ops_below:False", "sorted_ops:False"}


async def test_a_workspace_write_into_a_tree_a_run_removes_in_pages_keeps_the_directory(
    tmp_path: Path,
) -> None:
    """The workspace writes ``d/new`` while a run removes ``d`` (2,500 files, so removal pages go
    children first): the files go, ``d`` itself is refused (the workspace changed something below it),
    listed in ``skipped`` with its reason, and keeps the workspace's file; after a reopen too."""
    db = tmp_path / "ws.db"
    async with computer.Workspace(str(db), backends=[ShellBackend(live=False)]) as ws:
        ws.fs.commit_batch({f"/workspace/d/e/f{i:04}": b"x" for i in range(2500)}, mkdirs=["/workspace"])
        await (await ws.runtime.exec("true")).result()
        handle = await ws.runtime.exec("echo ready; sleep 1; rm -rf d", timeout=60)
        async for snapshot in handle:
            if "ready" in snapshot.stdout or snapshot.done:
                break
        await ws.fs.write_file("/workspace/d/new", b"from the workspace")
        result = await asyncio.wait_for(handle.result(), 120)
        assert result.status == "completed", result.stderr
        assert result.skipped == ["/workspace/d"] and result.skipped_reasons["/workspace/d"]
        assert "/workspace/d/e" in result.pulled
    async with computer.Workspace(str(db), backends=[ShellBackend(live=False)]) as ws:
        assert [e.name for e in await ws.fs.readdir("/workspace/d")] == ["new"]
        after = await (await ws.runtime.exec("ls d; cat d/new")).result()
        assert after.stdout == "new\nfrom the workspace"


async def test_a_push_after_nothing_changed_below_the_root_makes_no_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A live run's start after runs that changed nothing (the change log holds only the journal's
    records, outside the mount root) sends an empty page without planning one (``_changed``: ~40 µs
    of every such run); a workspace write below the root is still planned and reaches the run."""
    planned: list[int] = []
    plan_changes = _push_pages.plan_changes

    def counted(changes: Any, *args: Any) -> Any:
        planned.append(len(changes))
        return plan_changes(changes, *args)

    monkeypatch.setattr(_push_pages, "plan_changes", counted)
    async with computer.Workspace(backends=[ShellBackend(live=True)]) as ws:
        await ws.fs.mkdir("/workspace")
        assert (await (await ws.runtime.exec("echo a > a.txt")).result()).status == "completed"
        planned.clear()
        for _ in range(3):
            assert (await (await ws.runtime.exec("cat a.txt")).result()).stdout == "a\n"
        assert planned == []
        await ws.fs.write_file("/workspace/a.txt", b"b\n")
        assert (await (await ws.runtime.exec("cat a.txt")).result()).stdout == "b\n"
        assert planned and planned[-1] >= 1, planned
