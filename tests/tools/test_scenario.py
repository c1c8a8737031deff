"""CASE 24 end to end through one tool set, and a first read page that stays bounded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from computer.tools import Tool, create_read_tool

from .directory_store import DirectoryFileStore


async def run_case_24(tools: dict[str, Tool]) -> None:
    written = await tools["write"].run({"path": "/workspace/notes/todo.txt", "content": "one\ntwo\n"})
    assert written == {"path": "/workspace/notes/todo.txt", "bytesWritten": 8}
    listing = await tools["ls"].run({"path": "/workspace/notes"})
    assert [(e["name"], e["size"]) for e in listing["entries"]] == [("todo.txt", 8)]
    first = await tools["read"].run({"path": "/workspace/notes/todo.txt", "limit": 1})
    assert (first["content"], first["truncated"], first["nextOffset"]) == ("one", True, 2)
    edited = await tools["edit"].run(
        {"path": "/workspace/notes/todo.txt", "edits": [{"oldText": "two", "newText": "three"}]}
    )
    assert edited["firstChangedLine"] == 2
    whole = await tools["read"].run({"path": "/workspace/notes/todo.txt"})
    assert whole["content"] == "one\nthree"
    assert tools["read"].to_model_output(whole) == [{"type": "text", "text": "one\nthree"}]
    found = await tools["find"].run({"pattern": "**/*.txt"})
    assert [e["path"] for e in found["entries"]] == ["/workspace/notes/todo.txt"]
    grep = await tools["grep"].run({"query": "three"})
    assert [(m["path"], m["line"]) for m in grep["matches"]] == [("/workspace/notes/todo.txt", 2)]
    assert await tools["delete"].run({"path": "/workspace/notes", "recursive": True}) == {
        "deleted": "/workspace/notes"
    }
    assert (await tools["ls"].run({"path": "/workspace"}))["entries"] == []


async def test_case_24_through_create_tools(tools: dict[str, Tool]) -> None:
    await run_case_24(tools)


async def test_first_page_of_a_large_file_reads_a_bounded_range(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_bytes(b"0123456789abcdef\n" * 300_000)  # 5 MB
    store = DirectoryFileStore(tmp_path)
    result: dict[str, Any] = await create_read_tool(store).run({"path": "/big.txt"})
    assert result["truncated"] is True and result["endLine"] == 2000
    assert store.bytes_read <= 256 * 1024 + 2
