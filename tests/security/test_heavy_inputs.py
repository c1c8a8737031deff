"""Inputs built to exhaust: NUL and overlong names, 10k-edit batches, a 100 MB write, catastrophic
regexes, and a 300 MB stdout flood. Each ends promptly with a clear result and bounded memory."""

from __future__ import annotations

import asyncio
import errno
import os
import time
from typing import Any

import pytest

import computer
from computer.storage import filesystem
from computer.tools import Tool

MIB = 1024 * 1024


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/workspace/a\x00b", errno.EINVAL),
        ("/workspace/\x00", errno.EINVAL),
        ("/workspace/" + "n" * 256, errno.ENAMETOOLONG),
        ("/workspace/" + "é" * 128, errno.ENAMETOOLONG),  # 256 bytes in UTF-8
        ("/" + "/".join(["d" * 200] * 21), errno.ENAMETOOLONG),  # over 4096 bytes in all
    ],
)
async def test_nul_and_overlong_names_are_refused_by_storage_and_tools(
    ws: computer.Workspace, tools: dict[str, Tool], path: str, code: int
) -> None:
    with pytest.raises(OSError) as info:
        await ws.fs.write_file(path, b"x")
    assert info.value.errno == code
    for tool, args in [
        ("write", {"path": path, "content": "x"}),
        ("read", {"path": path}),
        ("ls", {"path": path}),
    ]:
        assert "error" in await tools[tool].run(args)
    assert await ws.fs.ls("/") == []


async def test_a_name_of_exactly_255_bytes_works(ws: computer.Workspace, tools: dict[str, Tool]) -> None:
    path = "/workspace/" + "n" * 255
    assert (await tools["write"].run({"path": path, "content": "ok"}))["bytesWritten"] == 2
    assert await ws.fs.read_text(path) == "ok"


async def test_a_ten_thousand_edit_batch_applies_in_bounded_time(
    ws: computer.Workspace, tools: dict[str, Tool], record_property: Any
) -> None:
    await ws.fs.write_file("/workspace/big.txt", "".join(f"line {i:05d}\n" for i in range(10_000)))
    edits = [{"oldText": f"line {i:05d}\n", "newText": f"LINE {i:05d}\n"} for i in range(10_000)]
    start = time.monotonic()
    result = await tools["edit"].run({"path": "/workspace/big.txt", "edits": edits})
    elapsed = time.monotonic() - start
    assert result["editsApplied"] == 10_000 and result["diffTruncated"] is True
    assert elapsed < 30
    assert await ws.fs.read_text("/workspace/big.txt") == "".join(f"LINE {i:05d}\n" for i in range(10_000))
    record_property("edit_10k_seconds", round(elapsed, 2))


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        ({"oldText": "missing", "newText": "x"}, "not found"),
        ({"oldText": "line", "newText": "x"}, "10000 times"),
    ],
)
async def test_a_ten_thousand_edit_batch_that_cannot_apply_fails_fast_and_changes_nothing(
    ws: computer.Workspace, tools: dict[str, Tool], edit: dict[str, str], needle: str
) -> None:
    original = "".join(f"line {i:05d}\n" for i in range(10_000))
    await ws.fs.write_file("/workspace/big.txt", original)
    start = time.monotonic()
    result = await tools["edit"].run({"path": "/workspace/big.txt", "edits": [edit] * 10_000})
    assert time.monotonic() - start < 10
    assert needle in result["error"]
    assert await ws.fs.read_text("/workspace/big.txt") == original


async def test_a_100_mb_write_through_the_tools_is_capped_and_writes_nothing(
    ws: computer.Workspace, tools: dict[str, Tool]
) -> None:
    huge = "x" * (100 * MIB)
    result = await tools["write"].run({"path": "/workspace/huge.txt", "content": huge})
    assert "100 MiB" in result["error"] and "2 MiB" in result["error"]
    await ws.fs.write_file("/workspace/small.txt", "small\n")
    edit = await tools["edit"].run(
        {"path": "/workspace/small.txt", "edits": [{"oldText": "small", "newText": huge}]}
    )
    assert "error" in edit
    assert await ws.fs.ls("/workspace") == ["/workspace/small.txt"]
    assert await ws.fs.read_text("/workspace/small.txt") == "small\n"


CATASTROPHIC = ["(a+)+$", "(a|aa)+$", "(a|a?)+$", "(.*a){20}", "^(a?){40}a{40}$", "(x+x+)+y", "((a*)*)*b$"]


async def test_catastrophic_regexes_through_grep_return_promptly(
    ws: computer.Workspace, tools: dict[str, Tool], record_property: Any
) -> None:
    await ws.fs.write_file("/workspace/evil.txt", ("a" * 60 + "!\n") * 2000)
    slowest = 0.0
    for pattern in CATASTROPHIC:
        start = time.monotonic()
        result = await tools["grep"].run({"path": "/workspace", "query": pattern, "regex": True})
        slowest = max(slowest, time.monotonic() - start)
        assert "count" in result, pattern
    assert slowest < 2.0
    # Backreferences need backtracking: RE2 refuses them with a clear error instead of running them.
    refused = await tools["grep"].run({"path": "/workspace", "query": "(a)\\1", "regex": True})
    assert refused["error"].startswith("Invalid regular expression")
    record_property("regex_slowest_seconds", round(slowest, 3))


async def test_a_300_mb_stdout_flood_is_spooled_with_bounded_caller_memory(
    ws: computer.Workspace, record_property: Any
) -> None:
    total = 300_000_000
    baseline = peak = _rss()

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, _rss())
            await asyncio.sleep(0.02)

    watcher = asyncio.create_task(watch())
    try:
        handle = await ws.runtime.exec(
            f"yes 'a line of flood output, again and again and again' | head -c {total}"
        )
        result = await handle.result()
    finally:
        watcher.cancel()
    cut = result.truncated["stdout"]
    assert result.status == "completed"
    assert len(result.stdout.encode()) <= 64 * 1024
    assert (cut.status, cut.total_bytes) == ("saved", total)
    assert cut.path is not None and (await ws.fs.stat(cut.path)).size == total
    assert peak - baseline < 100 * MIB  # the whole flood is 300 MB
    record_property("flood_bytes", total)
    record_property("flood_caller_rss_growth_mib", round((peak - baseline) / MIB, 1))


async def test_a_grep_over_a_large_workspace_gives_the_owner_loop_turns(
    ws: computer.Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A grep over a large workspace (here 32 MiB in 4,096 files) gives the owner's loop turns between
    slices of its scan (``FileSystem``'s ``SLICE_STEPS``, 1,024 steps, or 20 ms): it held every
    workspace of the process 757 ms over 200 MB before. Steps alone make the turns certain here: the
    clock's share is switched off, and 4,096 files are at least 4,096 steps (a tick per file). With
    2,048 files (two slices' worth) CI once counted 2 turns, where a slower machine's clock had added
    a third."""
    monkeypatch.setattr(filesystem, "SLICE_SECONDS", 3600.0)
    line = b"abcdefghij klmnopqrstu vwxyz 0123456789\n"
    for i in range(4096):  # 32 MiB of text in all
        await ws.fs.write_file(f"/workspace/f{i}", line * (8 * 1024 // len(line)))
    turns = 0

    async def count() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(count())
    await asyncio.sleep(0)
    try:
        before = turns
        found = await ws.fs.grep("zzz", "/workspace")
        during = turns - before
    finally:
        ticker.cancel()
    assert found == []
    assert during >= 3, f"the owner's loop had {during} turns while grep read 32 MiB"
