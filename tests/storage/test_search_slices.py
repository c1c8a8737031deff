"""A large find or grep gives the owner's event loop away in slices (``FileSystem``, ``_search``): a
grep through 3 million matches held it for 12 s, every other call of the workspace waiting. The
order in which calls finish is asserted, never a duration."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from computer.storage import FileSystem

# Well over one slice of work (``filesystem.SLICE_STEPS``, 1024 steps) in every search below.
STEPS = 4096


async def _finish_order(**calls: Awaitable[Any]) -> tuple[list[str], dict[str, Any]]:
    """Start ``calls`` in the order given; the order they finished in, and their results."""
    order: list[str] = []
    tasks = {}
    for name, call in calls.items():
        task = asyncio.ensure_future(call)
        task.add_done_callback(lambda _, name=name: order.append(name))
        tasks[name] = task
    async with asyncio.timeout(120):
        results = await asyncio.gather(*tasks.values())
    return order, dict(zip(tasks, results, strict=True))


async def test_a_large_grep_lets_a_stat_and_a_write_through_and_keeps_what_it_began_with(
    fs: FileSystem,
) -> None:
    lines = STEPS
    await fs.mkdir("/w")
    await fs.write_file("/w/a.txt", b"x\n" * lines)
    order, results = await _finish_order(
        grep=fs.grep("x", "/w", offset=lines - 2, limit=5),
        stat=fs.stat("/w/a.txt"),
        write=fs.write_file("/w/a.txt", b"y\n"),
    )
    assert order == ["stat", "write", "grep"]
    assert [(m.path, m.line, m.text) for m in results["grep"]] == [
        ("/w/a.txt", lines - 1, "x"),
        ("/w/a.txt", lines, "x"),
    ]
    assert await fs.read_file("/w/a.txt") == b"y\n"


async def test_a_grep_through_many_files_lets_other_calls_through(fs: FileSystem) -> None:
    await fs.mkdir("/w")
    files = STEPS // 2
    for i in range(files):
        await fs.write_file(f"/w/{i:05}.txt", b"needle\n")
    order, results = await _finish_order(
        grep=fs.grep("needle", "/w", regex=True, offset=files - 1),
        exists=fs.exists("/w/00000.txt"),
    )
    assert order == ["exists", "grep"]
    assert [m.path for m in results["grep"]] == [f"/w/{files - 1:05}.txt"]


async def test_a_large_find_lets_other_calls_through(fs: FileSystem) -> None:
    await fs.mkdir("/w")
    entries = STEPS // 2
    for i in range(entries):
        await fs.mkdir(f"/w/{i:05}")
    order, results = await _finish_order(
        find=fs.find("/w", "*", offset=entries - 2),
        readdir=fs.readdir("/", limit=1),
    )
    assert order == ["readdir", "find"]
    assert [(e.path, e.type) for e in results["find"]] == [
        (f"/w/{entries - 2:05}", "dir"),
        (f"/w/{entries - 1:05}", "dir"),
    ]


async def test_a_search_that_finishes_in_one_slice_gives_the_same_results(fs: FileSystem) -> None:
    await fs.mkdir("/w/sub", recursive=True)
    await fs.write_file("/w/sub/a.txt", b"one\ntwo\none\n")
    await fs.write_file("/w/b.txt", b"one\n")
    found = await fs.grep("one", "/w", context=1)
    assert [(m.path, m.line, [c.line for c in m.context or []]) for m in found] == [
        ("/w/b.txt", 1, [1]),
        ("/w/sub/a.txt", 1, [1, 2]),
        ("/w/sub/a.txt", 3, [2, 3]),
    ]


async def test_a_case_insensitive_grep_through_a_chunk_of_matching_lines_is_linear(fs: FileSystem) -> None:
    """RE2 was handed the decoded block at every match and mapped the start position back: quadratic
    in the block (a 512 KiB chunk of one-letter lines, all matching, took minutes with ignore_case; it
    takes about a second). The deadline is a bound on the wait, ~20 times what it takes now."""
    lines = 256 * 1024
    await fs.mkdir("/w")
    await fs.write_file("/w/a.txt", b"X\n" * lines)
    async with asyncio.timeout(30):
        found = await fs.grep("x", "/w", ignore_case=True, offset=lines - 2)
        regex = await fs.grep("^X$", "/w", regex=True, offset=lines - 1)
    assert [(m.line, m.text) for m in found] == [(lines - 1, "X"), (lines, "X")]
    assert [(m.line, m.text) for m in regex] == [(lines, "X")]


async def test_a_regex_grep_of_a_block_that_is_not_utf8_matches_its_decoded_lines(fs: FileSystem) -> None:
    """A block with invalid UTF-8 is matched line by line on its decoded text (U+FFFD for a bad byte)."""
    await fs.mkdir("/w")
    await fs.write_file("/w/a.txt", b"caf\xe9\nplain\n\xff\xfe?\nnaive\n")
    assert [(m.line, m.text) for m in await fs.grep("\ufffd", "/w", ignore_case=True)] == [
        (1, "caf\ufffd"),
        (3, "\ufffd\ufffd?"),
    ]
    assert [m.line for m in await fs.grep("^.{4}$", "/w", regex=True)] == [1]
    assert [m.line for m in await fs.grep("NAIVE|PLAIN", "/w", regex=True, ignore_case=True)] == [2, 4]
