"""The write tool (SPEC 8 write, CASE 24), over both stores."""

from __future__ import annotations

import pytest

from computer import Workspace
from computer.tools import WriteOptions, create_tools, create_write_tool

from .conftest import Files


async def test_write_creates_parent_directories(files: Files) -> None:
    result = await files.write().run({"path": "/workspace/notes/todo.txt", "content": "one\ntwo\n"})
    assert result == {"path": "/workspace/notes/todo.txt", "bytesWritten": 8}
    assert await files.get("/workspace/notes/todo.txt") == b"one\ntwo\n"


async def test_write_reports_utf8_bytes(files: Files) -> None:
    result = await files.write().run({"path": "/f.txt", "content": "é😀"})
    assert result["bytesWritten"] == 6


async def test_write_canonicalises_the_path(files: Files) -> None:
    result = await files.write().run({"path": "/a/./b/../f.txt", "content": "x"})
    assert result["path"] == "/a/f.txt"
    assert await files.get("/a/f.txt") == b"x"


async def test_write_overwrites_and_keeps_the_mode(files: Files) -> None:
    await files.put("/run.sh", "old", mode=0o755)
    await files.write().run({"path": "/run.sh", "content": "new"})
    assert await files.get("/run.sh") == b"new"
    assert await files.mode("/run.sh") == 0o755


async def test_write_over_cap_is_an_error_suggesting_edit_or_split(files: Files) -> None:
    tool = create_write_tool(files.store, options=WriteOptions(max_bytes=10))
    result = await tool.run({"path": "/f.txt", "content": "x" * 11})
    assert "edit" in result["error"] and "split" in result["error"]
    assert not await files.exists("/f.txt")


async def test_write_cap_counts_utf8_bytes_not_characters(files: Files) -> None:
    tool = files.write(max_bytes=4)
    result = await tool.run({"path": "/f.txt", "content": "ééé"})  # 3 characters, 6 bytes
    assert "error" in result


async def test_write_onto_a_directory_is_an_error(files: Files) -> None:
    await files.put("/d/x", "x")
    result = await files.write().run({"path": "/d", "content": "y"})
    assert "error" in result
    assert await files.get("/d/x") == b"x"


async def test_write_below_a_file_is_an_error_and_creates_nothing(files: Files) -> None:
    await files.put("/file", "x")
    result = await files.write().run({"path": "/file/sub/f.txt", "content": "y"})
    assert "error" in result
    assert await files.get("/file") == b"x"


async def test_write_relative_path_is_an_error(files: Files) -> None:
    result = await files.write().run({"path": "notes.txt", "content": "y"})
    assert result == {"error": "path must be absolute (did you mean /workspace/notes.txt?): notes.txt"}


async def test_write_unicode_file_name(files: Files) -> None:
    path = "/dir 50%/ü 🚀 [x]*?.txt"
    result = await files.write().run({"path": path, "content": "ok"})
    assert result["path"] == path
    assert await files.get(path) == b"ok"


async def test_content_that_is_not_utf8_is_an_error_naming_the_argument_and_the_path(files: Files) -> None:
    """A lone surrogate gave a bare codec message naming neither."""
    result = await files.write().run({"path": "/workspace/s.txt", "content": "ok \ud800"})
    assert result["error"].startswith("content for /workspace/s.txt is not valid UTF-8 text: '\\ud800'"), (
        result
    )
    assert not await files.exists("/workspace/s.txt")


@pytest.mark.parametrize(
    "path", ["/workspace/src/", "/workspace/src//", "/workspace/src/.", "/workspace/src/x/.."]
)
async def test_a_path_ending_in_a_slash_names_a_directory_and_write_refuses_it(
    workspace: Workspace, path: str
) -> None:
    """``write {"path": "/workspace/src/"}`` (a model making a directory) made a file named ``src``:
    the canonical form drops the ending. EISDIR now, as ``open("src/", O_CREAT)``; nothing made."""
    result = await create_tools(workspace)["write"].run({"path": path, "content": "x"})
    assert set(result) == {"error"} and "names a directory" in result["error"], result
    assert path in result["error"]
    assert not await workspace.fs.exists("/workspace/src")
    ok = await create_tools(workspace)["write"].run({"path": "/workspace//src/./a.txt", "content": "x"})
    assert ok == {"path": "/workspace/src/a.txt", "bytesWritten": 1}
