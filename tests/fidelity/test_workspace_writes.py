"""A workspace write reaches the sandbox as a write does on any machine: into the same file when the
workspace wrote the file it had (a program holding it open sees the new content and goes on writing
into it; every name of a hard-linked file shows it), as a new file when the workspace replaced it
(removed and wrote again: the file's other names keep the old content). Real programs across calls,
checked through ``ws.fs``, later runs and a reopen."""

from __future__ import annotations

from pathlib import Path

import pytest

from computer.runtime import ShellBackend

from ._support import ROOT, ok, opened, until

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


@pytest.mark.parametrize("live", [False, True], ids=["per-call", "live"])
async def test_a_file_the_workspace_writes_keeps_its_inode(tmp_path: Path, live: bool) -> None:
    async with opened(tmp_path / "ws.sqlite", shell=ShellBackend(live=live), python=False) as ws:
        before = (await ok(ws, "echo v1 > f && stat -c %i f")).stdout
        await ws.fs.write_file(f"{ROOT}/f", "v2, longer than before\n")
        assert (await ok(ws, "stat -c %i f && cat f")).stdout == before + "v2, longer than before\n"
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
