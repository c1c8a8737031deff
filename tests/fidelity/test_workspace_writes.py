"""A workspace write reaches the sandbox as a write does on any machine: into the same file when the
workspace wrote the file it had (a program holding it open sees the new content and goes on writing
into it; every name of a hard-linked file shows it), as a new file when the workspace replaced it
(removed and wrote again: the file's other names keep the old content). Real programs across calls,
checked through ``ws.fs``, later runs and a reopen."""

from __future__ import annotations

import asyncio
import shlex
import threading
from pathlib import Path
from typing import Any

import pytest

from computer.runtime import ShellBackend
from computer.tools import create_tools, edit

from ._support import ROOT, digest, ok, opened, settle, started, until

LIVE = ShellBackend(live=True).live


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_name_the_workspace_replaced_leaves_the_files_other_names_alone(
    tmp_path: Path, live: bool
) -> None:
    """Before: the push wrote the new ``a`` into the file ``a`` and ``c`` shared, so the sandbox showed
    ``c`` = "new" while the workspace kept "one"."""
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        await ok(ws, "echo one > a && ln a c && echo keep > k && ln k l")
        await ws.fs.rm(f"{ROOT}/a")
        await ws.fs.write_file(f"{ROOT}/a", "new\n")
        await ws.fs.write_file(f"{ROOT}/k", "kept, both names\n")  # written, not replaced
        seen = await ok(ws, "cat a c k l; stat -c %h c k")
        assert seen.stdout == "new\none\nkept, both names\nkept, both names\n1\n2\n"
        assert await ws.fs.read_text(f"{ROOT}/c") == "one\n"
        assert await ws.fs.read_text(f"{ROOT}/l") == "kept, both names\n"
    async with opened(db, python=False) as ws:
        assert (await ok(ws, "cat a c l")).stdout == "new\none\nkept, both names\n"


@pytest.mark.parametrize("pieces", [False, True], ids=["whole", "in-pieces"])
@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_file_the_workspace_writes_keeps_its_inode(tmp_path: Path, live: bool, pieces: bool) -> None:
    """``pieces``: pages of 64 KiB, so a 200 KB write does not fit one and is fetched in pieces (before:
    such a file was made anew, so whether a write kept the file depended on where a page ended)."""
    shell = ShellBackend(live=live, max_sync_bytes=64 * 1024) if pieces else ShellBackend(live=live)
    text = "v2, longer than before\n" * (9000 if pieces else 1)
    async with opened(tmp_path / "ws.sqlite", shell=shell, python=False) as ws:
        before = (await ok(ws, "echo v1 > f && stat -c %i f")).stdout
        await ws.fs.write_file(f"{ROOT}/f", text)
        seen = await ok(ws, "stat -c %i f && sha256sum f | cut -c1-64")
        assert seen.stdout == before + digest(text.encode()) + "\n"
        await ws.fs.write_file(f"{ROOT}/f", "")
        assert (await ok(ws, "stat -c '%i %s' f")).stdout == before.strip() + " 0\n"


@pytest.mark.skipif(not LIVE, reason="no cgroup freezer here")
async def test_a_program_appending_to_a_file_the_workspace_rewrites_goes_on_after_the_new_content(
    tmp_path: Path,
) -> None:
    """A background program appends one line per go-file the workspace writes (``exec 3>>log``); the
    workspace rewrites the log between two lines: the program's next lines follow the new content in
    the same file (before: the rewrite made a new file, and the program wrote into the removed one)."""
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=True), python=False) as ws:
        fs = ws.fs
        await ok(
            ws,
            "(exec 3>>log; for i in 1 2 3 4; do while [ ! -e go$i ]; do sleep 0.01; done; echo $i >&3; done)"
            " >/dev/null 2>&1 &",
        )

        async def log_is(text: str) -> bool:
            return await fs.exists(f"{ROOT}/log") and await fs.read_text(f"{ROOT}/log") == text

        await fs.write_file(f"{ROOT}/go1", "")
        await until(lambda: log_is("1\n"))
        await fs.write_file(f"{ROOT}/log", "rotated\n")
        assert (await ok(ws, "cat log")).stdout == "rotated\n"  # a run's start pushes it
        for i in (2, 3, 4):
            await fs.write_file(f"{ROOT}/go{i}", "")
        await until(lambda: log_is("rotated\n2\n3\n4\n"))
        assert (await ok(ws, "cat log")).stdout == "rotated\n2\n3\n4\n"


@pytest.mark.skipif(not LIVE, reason="no cgroup freezer here")
async def test_a_program_appending_all_the_time_goes_on_after_a_workspace_rewrite(tmp_path: Path) -> None:
    """The same while the program appends every few ms: the lines it wrote since the last sync meet the
    workspace's rewrite (a conflict: the workspace's version is kept), and the mirror writes that
    version into the program's file rather than making a new one, so every later line follows it
    (before: the refused file was removed and made again, and the program's later lines were lost)."""
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=True), python=False) as ws:
        fs = ws.fs
        await ok(
            ws, "(exec 3>>log; for i in $(seq 1 300); do echo $i >&3; sleep 0.005; done) >/dev/null 2>&1 &"
        )

        async def lines() -> list[str]:
            return (await fs.read_text(f"{ROOT}/log")).splitlines() if await fs.exists(f"{ROOT}/log") else []

        async def past(n: int) -> bool:
            return len(await lines()) >= n

        await until(lambda: past(40))
        await fs.write_file(f"{ROOT}/log", "rotated\n")

        async def ended() -> bool:
            return (await lines())[-1:] == ["300"]

        await until(ended)
        after = await lines()
        assert after[0] == "rotated", after[:5]
        numbers = [int(n) for n in after[1:]]
        assert numbers == list(range(numbers[0], 301)), after  # every line after the rotation, in order
        assert numbers[0] < 300 and (await ok(ws, "cat log")).stdout == "".join(f"{n}\n" for n in after)


BIG = 3 * 1024 * 1024 + 7  # over 1 MiB: sent both ways as chunks, fetched and written one by one


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_large_file_keeps_its_names_and_its_identity(tmp_path: Path, live: bool) -> None:
    """The same rules for a file sent as chunks. Before: a run's hard link to a large file was applied
    in the workspace before the file it names was written, so the link was refused and lost on both
    sides; a large file the workspace wrote was made anew in the sandbox (a program holding it lost
    it), and a large hard-linked name the workspace replaced was written in place when the mirror
    knew its chunks (its other names showed the new content)."""
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        made = await ok(
            ws,
            f"head -c {BIG} /dev/urandom > a && ln a c && head -c {BIG} /dev/urandom > k && ln k l"
            " && sha256sum a | cut -c1-64 && stat -c %i k",
        )
        assert made.skipped == [], made.skipped_reasons
        old_a, ino_k = made.stdout.split()
        for name in ("a", "c", "k", "l"):
            assert (await ws.fs.stat(f"{ROOT}/{name}")).nlink == 2
        assert digest(await ws.fs.read_file(f"{ROOT}/c")) == old_a
        await ws.fs.rm(f"{ROOT}/a")
        await ws.fs.write_file(f"{ROOT}/a", b"n" * BIG)  # replaced: a new file
        await ws.fs.write_file(f"{ROOT}/k", b"w" * BIG)  # written: the same file, both names
        seen = await ok(ws, "sha256sum a c k l | cut -c1-64 && stat -c %h c k && stat -c %i k")
        new_a, new_k = digest(b"n" * BIG), digest(b"w" * BIG)
        assert seen.stdout.split() == [new_a, old_a, new_k, new_k, "1", "2", ino_k]
        assert digest(await ws.fs.read_file(f"{ROOT}/c")) == old_a
        assert digest(await ws.fs.read_file(f"{ROOT}/l")) == new_k
    async with opened(db, python=False) as ws:
        again = await ok(ws, "sha256sum a c k l | cut -c1-64 && stat -c %h c k")
        assert again.stdout.split() == [new_a, old_a, new_k, new_k, "1", "2"]


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_directory_the_workspace_copies_reaches_the_sandbox_whole(tmp_path: Path, live: bool) -> None:
    """``fs.copy`` of a tree (a template an agent copies, with a subdirectory, a hard link, a symlink
    and a file over 1 MiB) while the sandbox holds the source: the next run sees the copy whole, also
    while a background process runs (live) and after a reopen. Before: the copy was logged as one
    "mkdir" of its top, which a push takes for a directory only made, so the sandbox got it empty."""
    db = tmp_path / "ws.sqlite"
    big = "x" * (1024 * 1024 + 7)
    listing = "1\n2\n" + f"{len(big)}\n" + "2 2\nx\n"
    check = "cat copy/x copy/s/y && wc -c < copy/s/big && stat -c %h copy/x copy/s/hl | paste -sd' ' && readlink copy/s/l"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        await ws.fs.mkdir(f"{ROOT}/template/s", recursive=True)
        await ws.fs.write_file(f"{ROOT}/template/s/big", big)
        await ok(ws, "cd template && echo 1 > x && echo 2 > s/y && ln x s/hl && ln -s x s/l")
        if live:
            await ok(ws, "(sleep 30 &)")
        await ws.fs.copy(f"{ROOT}/template", f"{ROOT}/copy")
        assert (await ok(ws, check)).stdout == listing
        await ws.fs.copy(f"{ROOT}/template/s", f"{ROOT}/copy/s2")
        assert (await ok(ws, "ls copy/s2")).stdout == "big\nhl\nl\ny\n"
    async with opened(db, python=False) as ws:
        assert (await ok(ws, check)).stdout == listing


@pytest.mark.parametrize("chmod", [False, True], ids=["made", "made-and-chmod"])
async def test_files_a_run_writes_in_a_directory_the_workspace_made_meanwhile_are_kept(
    tmp_path: Path, chmod: bool
) -> None:
    """The run and the workspace both make ``out/logs`` (``mkdir -p``) and each writes its own files
    there during the run: both sets are in the workspace and in the sandbox afterwards, the run's
    file keeps its inode, nothing is skipped but the workspace's own file the run wrote too
    (``out/both.txt``: the workspace's version kept); the workspace's mode of ``out`` stays when the
    run chmod-ed it too. Before: the directories conflicted, every file the run wrote below them was
    refused and dropped from the sandbox, in the workspace nowhere."""
    db = tmp_path / "ws.sqlite"
    mode = "chmod 700 out && " if chmod else ""
    source = (
        "echo ready; sleep 1; mkdir -p out/logs && echo prog > out/logs/prog.txt && echo p > out/both.txt"
        f" && {mode}stat -c %i out/logs/prog.txt"
    )
    async with opened(db, shell=ShellBackend(live=False), python=False) as ws:
        handle = await started(ws, source)
        await ws.fs.mkdir(f"{ROOT}/out/logs", recursive=True)
        await ws.fs.write_file(f"{ROOT}/out/logs/ws.txt", "ws\n")
        await ws.fs.write_file(f"{ROOT}/out/both.txt", "workspace\n")
        result = await settle(handle)
        assert result.status == "completed", result.stderr
        assert result.skipped == [f"{ROOT}/out/both.txt"], result.skipped_reasons
        inode = result.stdout.split()[-1]
        assert await ws.fs.read_text(f"{ROOT}/out/logs/prog.txt") == "prog\n"
        seen = await ok(
            ws, "cat out/logs/prog.txt out/logs/ws.txt out/both.txt && stat -c '%i %a' out/logs/prog.txt out"
        )
        lines = seen.stdout.splitlines()
        assert lines[:4] == ["prog", "ws", "workspace", f"{inode} 644"]
        assert lines[4].split()[1] == "755"  # out: the workspace's mode
        assert (await ws.fs.stat(f"{ROOT}/out")).mode & 0o777 == 0o755
    async with opened(db, python=False) as ws:
        again = await ok(ws, "cat out/logs/prog.txt out/logs/ws.txt out/both.txt && ls out/logs")
        assert again.stdout == "prog\nws\nworkspace\nprog.txt\nws.txt\n"


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_file_the_workspace_copies_over_one_name_of_a_linked_file_leaves_the_others(
    tmp_path: Path, live: bool
) -> None:
    """``fs.copy(c, a, overwrite=True)`` where a run made ``a`` and ``b`` one file: the workspace's
    ``a`` is a new file and ``b`` keeps "one", in the sandbox too. Before: the copy was logged as a
    write of ``a``, which a push writes into the file the mirror holds, so the sandbox showed ``b`` =
    "new" while the workspace kept "one"."""
    db = tmp_path / "ws.sqlite"
    async with opened(db, shell=ShellBackend(live=live), python=False) as ws:
        await ok(ws, "echo one > a && ln a b && echo new > c")
        await ws.fs.copy(f"{ROOT}/c", f"{ROOT}/a", overwrite=True)
        assert await ws.fs.read_text(f"{ROOT}/b") == "one\n"
        assert (await ok(ws, "cat a b && stat -c %h a b")).stdout == "new\none\n1\n1\n"
    async with opened(db, python=False) as ws:
        assert (await ok(ws, "cat a b && stat -c %h a b")).stdout == "new\none\n1\n1\n"


# Appends one line to big.txt once ``go`` exists, then says so (``appended``).
APPEND_ONCE = (
    "until [ -e go ]; do sleep 0.01; done; echo 'bg line' >> big.txt; touch appended; "
    "until [ -e stop ]; do sleep 0.01; done"
)


@pytest.mark.skipif(not LIVE, reason="no live sandboxes here (cgroup freezer)")
async def test_an_edit_keeps_a_background_change_pulled_while_the_edit_was_computed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``edit`` tool on a 100 KB file (matched in a worker thread) while a background program's
    append to it is pulled: the edit applies to the file with the program's line. Before, it wrote its
    splice of the content it read first: the pulled line was gone from the workspace and, with the
    next push, from the sandbox, with nothing in any ``skipped``."""
    splice, pulled = edit._splice, threading.Event()

    def slow_splice(*args: Any) -> Any:
        pulled.wait(30)  # the program's line is in the workspace by now (the first time)
        return splice(*args)

    monkeypatch.setattr(edit, "_splice", slow_splice)
    db = tmp_path / "ws.sqlite"
    body = "head 0\n" + "".join(f"line {i}\n" for i in range(10_000))
    async with opened(db, python=False) as ws:
        await ws.fs.write_file(f"{ROOT}/big.txt", body)
        await ok(ws, f"setsid bash -c {shlex.quote(APPEND_ONCE)} > /dev/null 2>&1 &")
        tools = create_tools(ws)
        editing = asyncio.ensure_future(
            tools["edit"].run(
                {"path": f"{ROOT}/big.txt", "edits": [{"old_text": "head 0", "new_text": "head 1"}]}
            )
        )
        await ws.fs.write_file(f"{ROOT}/go", "")
        await until(lambda: ws.fs.exists(f"{ROOT}/appended"))
        pulled.set()
        assert "error" not in await asyncio.wait_for(editing, 60), "the edit failed"
        expected = "head 1\n" + body[len("head 0\n") :] + "bg line\n"
        assert await ws.fs.read_text(f"{ROOT}/big.txt") == expected
        await ws.fs.write_file(f"{ROOT}/stop", "")
        seen = await ok(ws, "sha256sum < big.txt | cut -c1-64")
        assert seen.skipped == [], seen.skipped_reasons
        assert seen.stdout.strip() == digest(expected.encode())
    async with opened(db, python=False) as ws:
        assert await ws.fs.read_text(f"{ROOT}/big.txt") == expected


@pytest.mark.skipif(not LIVE, reason="no cgroup freezer here")
@pytest.mark.parametrize("size", [BIG, 200_000], ids=["chunks", "small"])
async def test_a_reader_in_the_middle_of_a_file_the_workspace_rewrites_reads_one_version_whole(
    tmp_path: Path, size: int
) -> None:
    """A background reader reads a file (3 MiB, sent as chunks; 200 KB, sent whole) in two parts over
    one descriptor, the workspace
    rewriting the file between them (three rounds, each gated by files, so the rewrite always falls
    inside a read): each read is one version whole, and a read after it sees the new one. Before: the
    push wrote the new version into the file being read, and the reader got old bytes, then new ones
    (2 of 695 reads of a reader loop were torn so)."""
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=True), python=False) as ws:
        fs = ws.fs

        async def read_back(name: str) -> bool:
            return await fs.exists(f"{ROOT}/{name}") and (await fs.stat(f"{ROOT}/{name}")).size > 0

        await fs.write_file(f"{ROOT}/f", b"0" * size)
        await ok(
            ws,
            f"(for i in 1 2 3; do {{ dd bs={size // 2} count=1 status=none; : > half$i;"
            " while [ ! -e go$i ]; do sleep 0.01; done; cat; } < f | tr -s 0123 > seen$i; done)"
            " >/dev/null 2>&1 &",
        )
        for i in (1, 2, 3):
            await until(lambda i=i: fs.exists(f"{ROOT}/half{i}"))
            await fs.write_file(f"{ROOT}/f", str(i).encode() * size)
            await fs.write_file(f"{ROOT}/go{i}", "")
            await until(lambda i=i: read_back(f"seen{i}"))
            assert await fs.read_text(f"{ROOT}/seen{i}") == str(i - 1), i  # the old version, whole
        assert (await ok(ws, "tr -s 0123 < f")).stdout == "3"
        assert digest(await fs.read_file(f"{ROOT}/f")) == digest(b"3" * size)
