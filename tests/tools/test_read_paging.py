"""Property: paging with read's continuations returns every line exactly once, whatever the caps."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from computer.tools import create_read_tool

from .directory_store import DirectoryFileStore

lines_strategy = st.lists(
    st.text(alphabet=st.sampled_from(["a", "b", " ", "é", "😀", "\r", "\t"]), max_size=12),
    min_size=0,
    max_size=40,
)


def expected_lines(data: bytes) -> list[str]:
    if not data:
        return []
    text = data.decode("utf-8")
    return (text[:-1] if text.endswith("\n") else text).split("\n")


async def page_all(tool: Any, path: str, *, use_bytes: bool) -> tuple[list[str], int]:
    args: dict[str, Any] = {"path": path}
    seen: list[str] = []
    for _ in range(500):
        result = await tool.run(args)
        assert "error" not in result, result
        if result["content"] or result["endLine"] >= result["startLine"]:
            seen.extend(result["content"].split("\n"))
        assert result["endLine"] - result["startLine"] + 1 == (
            len(result["content"].split("\n")) if result["endLine"] >= result["startLine"] else 0
        )
        if not result["truncated"]:
            return seen, result["totalLines"]
        args = {"path": path, "offset": result["nextOffset"]}
        if use_bytes:
            args["byteOffset"] = result["nextByteOffset"]
    raise AssertionError("paging did not finish")


@settings(max_examples=120, deadline=None)
@given(
    lines=lines_strategy,
    final_newline=st.booleans(),
    max_lines=st.integers(1, 7),
    slack=st.integers(0, 30),
    numbered=st.booleans(),
    piece=st.sampled_from([1, 3, 7, 64 * 1024]),
)
async def test_paging_returns_every_line_once(
    lines: list[str], final_newline: bool, max_lines: int, slack: int, numbered: bool, piece: int
) -> None:
    data = "\n".join(lines).encode() + (b"\n" if final_newline and lines else b"")
    want = expected_lines(data)
    longest = max((len(line.encode()) for line in want), default=0)
    max_bytes = longest + (8 if numbered else 0) + slack + 1
    with tempfile.TemporaryDirectory() as root:
        (Path(root) / "f.txt").write_bytes(data)
        store = DirectoryFileStore(Path(root), piece=piece)
        tool = create_read_tool(
            store, max_lines=max_lines, max_bytes=max_bytes, include_line_numbers=numbered
        )
        for use_bytes in (True, False):
            seen, total = await page_all(tool, "/f.txt", use_bytes=use_bytes)
            if numbered:
                assert [s.split("\t", 1)[0] for s in seen] == [str(i) for i in range(1, len(want) + 1)]
                seen = [s.split("\t", 1)[1] for s in seen]
            assert seen == want
            assert total == len(want)


@settings(max_examples=80, deadline=None)
@given(
    lines=lines_strategy,
    chars=st.integers(1, 5),
    max_lines=st.integers(1, 5),
    piece=st.sampled_from([1, 5, 64 * 1024]),
)
async def test_truncated_lines_page_like_whole_lines(
    lines: list[str], chars: int, max_lines: int, piece: int
) -> None:
    data = ("\n".join(lines) + "\n").encode() if lines else b""
    want = [line[:chars] + "... (truncated)" if len(line) > chars else line for line in expected_lines(data)]
    with tempfile.TemporaryDirectory() as root:
        (Path(root) / "f.txt").write_bytes(data)
        store = DirectoryFileStore(Path(root), piece=piece)
        tool = create_read_tool(store, max_lines=max_lines, line_truncation={"chars": chars})
        seen, total = await page_all(tool, "/f.txt", use_bytes=True)
        assert seen == want and total == len(want)
