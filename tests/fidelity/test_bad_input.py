"""Bad input to the sync bracket (issue 16, "Prove it"): a socket or FIFO where the workspace has a file,
a file replaced by a directory between runs (and back), names and symlink targets that are not UTF-8.
Each ends with clear ``skipped`` reasons; nothing blocks and nothing is lost."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

import computer
from computer.runtime import PythonBackend, ShellBackend
from computer.storage import _tree

from ._support import digest, ok, opened, reasons_cover_skipped, run, sandbox_view, workspace_view

SOCKET = "import socket\ns = socket.socket(socket.AF_UNIX)\ns.bind('s.new')\n"


# Made under another name and renamed over the file: with ``rm s`` first, a live sandbox's sync tick
# between the two could pull the removal (a legitimate outcome, not the case under test).
@pytest.mark.parametrize("make", ['python3 -c "$SRC"', "mkfifo s.new"])
async def test_a_socket_or_fifo_where_the_workspace_has_a_file_is_skipped_and_the_file_kept(
    db: Path, make: str
) -> None:
    async with opened(db) as ws:
        await ws.fs.write_file("/workspace/s", "data\n")
        await ws.fs.write_file("/workspace/keep.txt", "keep\n")
        result = await run(
            ws, f"{make} && mv s.new s && echo made > made.txt", env={"SRC": SOCKET}, timeout=20
        )
        assert result.status == "completed", result.stderr
        assert "/workspace/s" in result.skipped
        reasons_cover_skipped(result)
        assert await ws.fs.read_text("/workspace/s") == "data\n"
        assert await ws.fs.read_text("/workspace/made.txt") == "made\n"
        assert (await run(ws, "cat keep.txt made.txt", timeout=20)).stdout == "keep\nmade\n"
    async with opened(db) as ws:
        assert (await run(ws, "cat s keep.txt", timeout=20)).stdout == "data\nkeep\n"


async def test_a_file_replaced_by_a_directory_between_runs_and_back(db: Path) -> None:
    async with opened(db) as ws:
        await ws.fs.write_file("/workspace/x", "file\n")
        assert (await ok(ws, "cat x")).stdout == "file\n"
        await ws.fs.rm("/workspace/x")
        await ws.fs.mkdir("/workspace/x")
        await ws.fs.write_file("/workspace/x/y", "inside\n")
        assert (await ok(ws, "cat x/y")).stdout == "inside\n"
        await ok(ws, "rm -r x && echo file again > x")
        assert await ws.fs.read_text("/workspace/x") == "file again\n"
        assert await sandbox_view(ws) == await workspace_view(ws)
    async with opened(db) as ws:
        assert (await ok(ws, "cat x")).stdout == "file again\n"


async def test_a_name_that_is_not_utf8_is_skipped_with_a_reason_and_nothing_else_is_lost(db: Path) -> None:
    async with opened(db) as ws:
        result = await ok(ws, "touch $'bad\\xff.txt' && echo good > good.txt")
        assert len(result.skipped) == 1, result.skipped  # the bad name, however it is spelled
        reasons_cover_skipped(result)
        assert await ws.fs.read_text("/workspace/good.txt") == "good\n"
        assert (await ok(ws, "cat good.txt")).stdout == "good\n"


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_symlink_whose_target_is_not_utf8_is_skipped_with_a_reason_and_nothing_else_is_lost(
    db: Path, live: bool
) -> None:
    """Before, its pull failed with ``UnicodeEncodeError``: the run's every change was lost, and in a
    live sandbox every later run failed the same way."""
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        await ws.fs.write_file("/workspace/link", "a file the link replaces\n")
        result = await ok(ws, "ln -sfn $'bad\\xff' link && echo good > good.txt && ln -s good.txt fine")
        assert result.skipped == ["/workspace/link"]
        assert "not UTF-8" in result.skipped_reasons["/workspace/link"]
        assert await ws.fs.read_text("/workspace/good.txt") == "good\n"
        assert await ws.fs.readlink("/workspace/fine") == "good.txt"
        assert await ws.fs.read_text("/workspace/link") == "a file the link replaces\n"
        later = await ok(ws, "readlink link | od -An -c && echo more >> good.txt")
        assert later.stdout.split() == ["b", "a", "d", "377", "\\n"]
        assert await ws.fs.read_text("/workspace/good.txt") == "good\nmore\n"
    async with opened(db, python=False) as ws:
        assert (await ok(ws, "cat link fine")).stdout == "a file the link replaces\ngood\nmore\n"


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_workspace_symlink_no_sandbox_can_make_is_kept_and_listed_and_runs_go_on(
    db: Path, live: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A target over 4,095 bytes, as the storage accepted before it refused them (made here with that
    check off): every run's push failed ("File name too long"), so no command could run at all."""
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        with monkeypatch.context() as patched:
            patched.setattr(_tree, "target_problem", lambda target: None)  # (as imported there)
            await ws.fs.symlink("x" * 5000, "/workspace/long")
        await ws.fs.write_file("/workspace/f", "f\n")
        result = await ok(ws, "cat f && ls")
        assert result.stdout == "f\nf\n"
        assert result.skipped == ["/workspace/long"]
        assert "4,095 bytes" in result.skipped_reasons["/workspace/long"]
        await ok(ws, "rm -rf /workspace/* && echo new > g")  # the sandbox never had it: kept
        assert await ws.fs.readlink("/workspace/long") == "x" * 5000
        assert await ws.fs.read_text("/workspace/g") == "new\n"


async def test_a_run_writing_past_the_workspace_quota_skips_the_file_with_a_reason(db: Path) -> None:
    """The quota is a limit that remains (an explicit setting): what it keeps out is listed in
    ``skipped`` with its reason, the run's other changes land, nothing of the workspace is lost."""
    async with opened(db, max_bytes=8 << 20) as ws:
        await ws.fs.write_file("/workspace/old.txt", "old\n")
        result = await run(ws, "head -c 20000000 /dev/zero > big.bin && echo small > small.txt", timeout=60)
        assert result.status == "completed", (result.error, result.stderr)
        assert "/workspace/big.bin" in result.skipped
        reasons_cover_skipped(result)
        assert await ws.fs.read_text("/workspace/small.txt") == "small\n"
        assert await ws.fs.read_text("/workspace/old.txt") == "old\n"
        if await ws.fs.exists("/workspace/big.bin"):  # a live tick pulled part of it, under the quota
            kept = (await ws.fs.stat("/workspace/big.bin")).size
            assert kept < 8 << 20
            assert result.skipped_reasons["/workspace/big.bin"].endswith(
                f"the workspace keeps its version of {kept:,} bytes, which the sandbox gets back"
            )
            assert (await ok(ws, "stat -c %s big.bin")).stdout == f"{kept}\n"
        assert (await ok(ws, "cat old.txt small.txt")).stdout == "old\nsmall\n"


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_file_grown_past_the_quota_says_which_version_both_sides_keep(db: Path, live: bool) -> None:
    """A log or a database that grows past the quota: the run's write is refused, and the workspace's
    version (the sandbox gets it back) is the one left, so the reason says so, with its size; a new
    file refused is gone from both, and the reason says that. Before, both said only "could not be
    applied: no space left" (a live sandbox's tick may have pulled part of such a file: a 12 MB
    file left 8 MB in the workspace and the sandbox, and nothing said what remained)."""
    async with opened(db, shell=ShellBackend(live=live), python=False, max_bytes=8 << 20) as ws:
        await ok(ws, "head -c 5000000 /dev/zero > grows.bin")
        grown = await ok(ws, "head -c 7000000 /dev/zero >> grows.bin && head -c 9000000 /dev/zero > new.bin")
        assert sorted(grown.skipped) == ["/workspace/grows.bin", "/workspace/new.bin"], grown.skipped_reasons
        why = grown.skipped_reasons["/workspace/grows.bin"]
        assert why.startswith("could not be applied: no space left"), why
        # Per call: the version before the run. Live, a tick may have pulled part of the growth while
        # it was under the quota: that is then the version kept, and the reason names its size.
        kept = (await ws.fs.stat("/workspace/grows.bin")).size
        assert kept == 5_000_000 or (live and 5_000_000 < kept < 8 << 20), kept
        assert why.endswith(
            f"the workspace keeps its version of {kept:,} bytes, which the sandbox gets back"
        ), why
        # The new file likewise: gone from both, or (live) the part a tick pulled under the quota.
        new_why, listing = grown.skipped_reasons["/workspace/new.bin"], "grows.bin\n"
        if await ws.fs.exists("/workspace/new.bin"):
            part = (await ws.fs.stat("/workspace/new.bin")).size
            assert live and part < 9_000_000 and kept + part <= 8 << 20, (kept, part)
            assert new_why.endswith(
                f"the workspace keeps its version of {part:,} bytes, which the sandbox gets back"
            )
            listing += "new.bin\n"
        else:
            assert new_why.endswith("the workspace has no file there, and the sandbox's is removed"), new_why
        assert (await ok(ws, "stat -c %s grows.bin; ls")).stdout == f"{kept}\n{listing}"


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_small_files_past_the_quota_are_skipped_one_by_one_and_the_rest_of_the_run_lands(
    db: Path, live: bool
) -> None:
    """Files under a chunk (512 KiB) travel inside the pull's main batch: one of them past the quota
    failed that whole batch, so the run failed ("OSError: [Errno 28] no space left") and none of its
    changes landed (a removal, a small file, a file that fit): they were lost with the sandbox's
    copy. Now the batch is retried file by file and only what does not fit is skipped, with the
    reason the large files' refusals give."""
    async with opened(db, shell=ShellBackend(live=live), python=False, max_bytes=1 << 20) as ws:
        await ws.fs.write_file("/workspace/old.txt", b"o" * 200_000)
        result = await run(
            ws,
            "rm old.txt && head -c 500000 /dev/zero > a.bin && head -c 500000 /dev/zero > b.bin"
            " && head -c 400000 /dev/zero > c.bin && echo small > d.txt && ln -s d.txt e"
            " && touch -d @1600000000.0004 d.txt",
        )
        assert result.status == "completed", (result.error, result.stderr)
        reasons_cover_skipped(result)
        assert result.skipped == ["/workspace/c.bin"], result.skipped_reasons
        why = result.skipped_reasons["/workspace/c.bin"]
        assert why.startswith("could not be applied: no space left"), why
        assert not await ws.fs.exists("/workspace/old.txt")
        assert [(await ws.fs.stat(f"/workspace/{n}")).size for n in ("a.bin", "b.bin")] == [500_000] * 2
        assert await ws.fs.read_text("/workspace/d.txt") == "small\n"
        assert await ws.fs.readlink("/workspace/e") == "d.txt"
        if await ws.fs.exists("/workspace/c.bin"):  # a live tick pulled part of it, under the quota
            kept = (await ws.fs.stat("/workspace/c.bin")).size
            assert why.endswith(
                f"the workspace keeps its version of {kept:,} bytes, which the sandbox gets back"
            )
            listing = f"a.bin\nb.bin\nc.bin\nd.txt\ne\n{kept}\n"
        else:
            assert why.endswith("the workspace has no file there, and the sandbox's is removed"), why
            listing = "a.bin\nb.bin\nd.txt\ne\n0\n"
        seen = "ls; stat -c %s c.bin 2>/dev/null || echo 0"
        assert (await ok(ws, seen)).stdout == listing
    async with opened(db, shell=ShellBackend(live=live), python=False, max_bytes=1 << 20) as ws:
        assert (await ok(ws, seen)).stdout == listing
        # The file committed on its own kept its time's nanoseconds past the ms (they were dropped).
        assert (await ok(ws, "stat -c %y d.txt")).stdout.split()[1].endswith(".000400000"), "sub-ms"


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_workspace_a_run_filled_to_its_quota_still_runs_the_command_that_frees_room(
    db: Path, live: bool
) -> None:
    """A run may fill the quota (its files fit); the next run's journal record (``/.computer/exec``,
    a few hundred bytes) did not fit any more: every later run failed "cannot start: [Errno 28] no
    space left", ``rm`` included, and only ``ws.fs`` could free room. A record the quota refuses is
    now left out (the result is still returned, and kept in memory for ``get_exec``)."""
    limit = 1 << 20
    async with opened(db, shell=ShellBackend(live=live), python=False, max_bytes=limit) as ws:
        filled = await ok(ws, f"head -c {limit - 400} /dev/zero > fill.bin; echo made")
        assert filled.skipped == [], filled.skipped_reasons
        with pytest.raises(OSError) as full:
            await ws.fs.write_file("/workspace/one.txt", b"x" * 1000)
        assert full.value.errno == errno.ENOSPC
        freed = await run(ws, "rm fill.bin && echo freed")
        assert (freed.status, freed.stdout, freed.error) == ("completed", "freed\n", None)
        assert not await ws.fs.exists("/workspace/fill.bin")
        assert (await (await ws.runtime.get_exec(freed.id)).result()).stdout == "freed\n"
        assert (await ok(ws, "echo again > a.txt; ls")).stdout == "a.txt\n"
    async with opened(db, shell=ShellBackend(live=live), python=False, max_bytes=limit) as ws:
        assert (await ok(ws, "cat a.txt; ls")).stdout == "again\na.txt\n"


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_workspace_its_files_filled_keeps_its_runs_records_and_logs(db: Path, live: bool) -> None:
    """The workspace's own files fill ``max_bytes`` to the byte: its runs still get their journal
    records and their saved logs (``/.computer`` is accounted apart, up to ``BOOKKEEPING_BYTES``), and
    its own files still cannot grow. Before, our records counted against the quota: the fill itself
    could not reach the limit, and at it a run's log was "not-saved" and its record left out."""
    limit = 1 << 20
    async with opened(db, shell=ShellBackend(live=live), python=False, max_bytes=limit) as ws:
        await ok(ws, "echo warm")
        await ws.fs.write_file("/workspace/fill.bin", b"f" * (limit - 5))
        loud = await ok(ws, "printf 1234; head -c 200000 /dev/zero | tr '\\0' x")
        assert loud.skipped == [], loud.skipped_reasons
        assert (await ws.fs.stat("/workspace/fill.bin")).size == limit - 5
        cut = loud.truncated["stdout"]
        assert cut.status == "saved" and cut.path is not None, cut
        assert (await ws.fs.stat(cut.path)).size == 200004
        assert await ws.fs.exists(f"/.computer/exec/{loud.id}.json")
        over = await run(ws, "echo one byte too many >> fill.bin")
        assert over.skipped == ["/workspace/fill.bin"], over.skipped_reasons


CWDS = {
    "/workspace/out": "leads out of the mount root /workspace through a symlink",  # -> /secret
    "/workspace/up": "leads out of the mount root /workspace through a symlink",  # -> ..
    "/workspace/loop": "too many levels of symbolic links",
    "/workspace/file-link": "is not a directory in the workspace",
    "/workspace/missing": "is not a directory in the workspace",
    "/workspace/up/workspace/sub": None,  # out and back in: the sandbox's own path
    "/workspace/rel": None,  # -> sub
    "/workspace/abs": None,  # -> /workspace/sub
}


@pytest.mark.parametrize("backend", ["shell", "python"])
@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_cwd_through_a_symlink_runs_inside_the_mount_or_is_refused(
    db: Path, live: bool, backend: str
) -> None:
    """A cwd is followed as in the sandbox: one that ends out of the mount (``up -> ..``) ran in the
    sandbox's own ``/``, where nothing it wrote was synced and nothing said so; it is refused with
    its reason now. One that stays in (through relative or absolute links, or out and back) runs there."""
    made = PythonBackend(live=live) if backend == "python" else ShellBackend(live=live)
    async with computer.Workspace(str(db), backends=[made]) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.mkdir("/workspace/sub")
        await ws.fs.mkdir("/secret")
        await ws.fs.write_file("/workspace/f", b"f")
        for path, target in {
            "out": "/secret",
            "up": "..",
            "loop": "loop",
            "file-link": "f",
            "rel": "sub",
            "abs": "/workspace/sub",
        }.items():
            await ws.fs.symlink(target, f"/workspace/{path}")
        source = "open('made', 'w').write('x')" if backend == "python" else "printf x > made"
        for cwd, problem in CWDS.items():
            result = await run(ws, source, cwd=cwd, backend=backend)
            if problem is None:
                assert result.status == "completed", (cwd, result.error, result.stderr)
                assert await ws.fs.read_file("/workspace/sub/made") == b"x"
                await ws.fs.rm("/workspace/sub/made")
            else:
                assert result.status == "failed", (cwd, result.stdout)
                assert result.error is not None and result.error.startswith(f"cwd {cwd}"), result.error
                assert result.error.endswith(problem), result.error
        assert await ws.fs.readdir("/secret") == []


async def test_files_only_the_sandbox_holds_are_bounded_by_its_memory_limit_across_runs(db: Path) -> None:
    """A name that is not UTF-8 never reaches the workspace, so such files stay in the mirror (in
    ``/dev/shm``) from run to run, and a run's memory group charges only what that run wrote: 700 MB
    a run grew one workspace's mirror to 6 GB. Past the sandbox's memory limit the largest go, each
    listed in ``skipped`` with the reason."""
    backend = ShellBackend(live=False, memory_mb=64)
    async with opened(db, shell=backend, python=False) as ws:
        for i in range(1, 4):  # 25 MiB each: the third goes past 64 MiB
            made = await ok(ws, f"head -c {i}M /dev/zero > small{i}; head -c 25M /dev/zero > $'big\\xff{i}'")
        removed = [p for p, why in made.skipped_reasons.items() if why.startswith("removed from the sandbox")]
        assert removed == ["/workspace/big\\xff3"], made.skipped_reasons
        listed = await ok(ws, "du -cm big* | tail -1")
        assert listed.stdout.splitlines()[-1].split()[0] == "50", listed.stdout
        assert {e.name for e in await ws.fs.readdir("/workspace")} == {"small1", "small2", "small3"}


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_names_that_are_not_utf8_renamed_to_good_ones_or_removed_are_no_longer_listed(
    db: Path, live: bool
) -> None:
    """An archive from a Latin-1 machine unpacked, then fixed by hand (``mv`` to a UTF-8 name, ``rm``):
    the fixing run lists nothing in ``skipped`` and its tree reaches the workspace whole. Before, its
    ``skipped`` named every old path again, "it stays in the sandbox only", when the sandbox held none."""
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        made = await ok(
            ws,
            "mkdir -p $'r\\xe9sum\\xe9/sub' && echo cv > $'r\\xe9sum\\xe9/sub/cv' && echo n > $'n\\xf6tes'",
        )
        assert len(made.skipped) == 4, made.skipped_reasons
        fixed = await ok(ws, "mv $'r\\xe9sum\\xe9' resume && rm $'n\\xf6tes' && ls")
        assert fixed.stdout == "resume\n"
        assert fixed.skipped == [], fixed.skipped_reasons
        assert await ws.fs.read_text("/workspace/resume/sub/cv") == "cv\n"
        assert await sandbox_view(ws) == await workspace_view(ws)
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        assert (await ok(ws, "cat resume/sub/cv && ls")).stdout == "cv\nresume\n"


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_file_with_a_second_name_that_is_not_utf8_syncs_under_its_good_name(
    db: Path, live: bool
) -> None:
    """``ln good $'bad\\xff'`` (a Latin-1 alias, an archive's hard link): the good name reaches the
    workspace, and so does a later write through the bad one; only the bad name stays in the sandbox.
    Before, the pull sent the bad name as a link of the good one: the store refused it ("path is not
    valid UTF-8"), the run failed, and the good file was lost from the sandbox too (a sandbox per call)
    or every later run failed the same way (a live sandbox)."""
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        made = await ok(ws, "echo 1 > good && ln good $'bad\\xff'")
        assert made.skipped == ["/workspace/bad\\xff"], made.skipped_reasons
        assert await ws.fs.read_text("/workspace/good") == "1\n"
        written = await ok(ws, "echo 2 >> $'bad\\xff' && cat good && stat -c %h good")
        assert written.stdout == "1\n2\n2\n"
        assert await ws.fs.read_text("/workspace/good") == "1\n2\n"
        assert await sandbox_view(ws) == {
            **await workspace_view(ws),
            "/workspace/bad\ufffd": digest(b"1\n2\n"),
        }
        # a new name, written at once
        await ok(ws, "rm $'bad\\xff' && ln good $'new\\xfe' && echo 3 >> $'new\\xfe'")
        assert await ws.fs.read_text("/workspace/good") == "1\n2\n3\n"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        assert (await ok(ws, "cat good && ls")).stdout == "1\n2\n3\ngood\n"


@pytest.mark.parametrize("backend", ["shell", "python"])
@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_file_where_the_mount_root_is_fails_the_run_and_is_kept(
    db: Path, live: bool, backend: str
) -> None:
    """A file at ``/workspace`` (a write meant for a path below it): the run fails saying so, and the
    file is kept. Before, the run went on in an empty directory and its pull made ``/workspace`` one:
    the file was gone from the workspace with nothing in the result."""
    made = PythonBackend(live=live) if backend == "python" else ShellBackend(live=live)
    async with computer.Workspace(str(db), backends=[made]) as ws:
        await ws.fs.write_file("/workspace", "notes\n")
        source = "open('f', 'w').write('x')" if backend == "python" else "printf x > f"
        result = await run(ws, source, backend=backend)
        assert result.status == "failed", result.stdout
        assert result.error is not None and "mount root is a file" in result.error, result.error
        assert await ws.fs.read_text("/workspace") == "notes\n"
        await ws.fs.rename("/workspace", "/notes.txt")
        assert (await run(ws, source, backend=backend)).status == "completed"
        assert await ws.fs.read_text("/workspace/f") == "x"


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_directory_times_a_run_sets_beside_a_name_that_is_not_utf8_reach_the_workspace(
    db: Path, live: bool
) -> None:
    """``tar x`` again over a tree (an update) whose archive holds a Latin-1 name: the times it gives
    the directories that exist reach the workspace and a reopen. Before, a pull with any name that is
    not UTF-8 sent no directory's own time: each kept the time of its last change, unsaid."""
    times = "stat -c '%Y %n' t t/sub"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        await ok(
            ws,
            "mkdir -p t/sub && echo 1 > t/sub/f && touch $'t/sub/caf\\xe9' && touch -d @1500000000 t/sub t",
        )
        await ok(ws, "tar cf t.tar t && touch t t/sub")
        again = await ok(ws, f"tar xf t.tar && {times}")
        assert again.stdout == "1500000000 t\n1500000000 t/sub\n"
        assert again.skipped == ["/workspace/t/sub/caf\\xe9"], again.skipped_reasons
        for path in ("/workspace/t", "/workspace/t/sub"):
            assert (await ws.fs.stat(path)).mtime == 1_500_000_000_000, path
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        assert (await ok(ws, times)).stdout == "1500000000 t\n1500000000 t/sub\n"
