"""The delete tool (SPEC 8 delete, CASE 33), over both stores."""

from __future__ import annotations

from .conftest import Files


async def test_delete_file(files: Files) -> None:
    await files.put("/a/f.txt", "x")
    assert await files.delete().run({"path": "/a/f.txt"}) == {"deleted": "/a/f.txt"}
    assert not await files.exists("/a/f.txt")
    assert await files.exists("/a")


async def test_delete_missing_path_succeeds(files: Files) -> None:
    assert await files.delete().run({"path": "/no/such/thing"}) == {"deleted": "/no/such/thing"}


async def test_delete_non_empty_directory_needs_recursive(files: Files) -> None:
    await files.put("/d/x.txt", "x")
    result = await files.delete().run({"path": "/d"})
    assert "error" in result
    assert await files.get("/d/x.txt") == b"x"
    assert await files.delete().run({"path": "/d", "recursive": True}) == {"deleted": "/d"}
    assert not await files.exists("/d")


async def test_delete_recursive_leaves_prefix_siblings(files: Files) -> None:
    for path in ("/dir/a", "/dir0/b", "/dir-x/c", "/dir.txt"):
        await files.put(path, "x")
    await files.delete().run({"path": "/dir", "recursive": True})
    assert [await files.exists(p) for p in ("/dir", "/dir0/b", "/dir-x/c", "/dir.txt")] == [
        False,
        True,
        True,
        True,
    ]


async def test_delete_root_is_an_error(files: Files) -> None:
    await files.put("/keep", "x")
    result = await files.delete().run({"path": "/", "recursive": True})
    assert "error" in result
    assert await files.get("/keep") == b"x"


async def test_delete_canonicalises_the_path(files: Files) -> None:
    await files.put("/a/f", "x")
    assert await files.delete().run({"path": "/a/b/../f"}) == {"deleted": "/a/f"}
    assert not await files.exists("/a/f")


async def test_delete_unicode_name(files: Files) -> None:
    await files.put("/ü/🚀 50% [x].txt", "x")
    assert await files.delete().run({"path": "/ü/🚀 50% [x].txt"}) == {"deleted": "/ü/🚀 50% [x].txt"}
    assert not await files.exists("/ü/🚀 50% [x].txt")


async def test_a_missing_path_names_its_spelling_in_another_normal_form() -> None:
    """read, edit and delete of the NFD spelling of an NFC file name the NFC one (names are bytes:
    nothing is read, changed or removed across forms); delete still succeeds, with a note."""
    from computer import Workspace
    from computer.tools import create_tools

    nfc, nfd = "/workspace/caf\u00e9.txt", "/workspace/cafe\u0301.txt"
    async with Workspace() as ws:
        tools = create_tools(ws)
        assert "bytesWritten" in await tools["write"].run({"path": nfc, "content": "hi"})
        hint = f"{nfc} exists in another Unicode normal form (NFC"
        read = await tools["read"].run({"path": nfd})
        edit = await tools["edit"].run({"path": nfd, "edits": [{"oldText": "hi", "newText": "ho"}]})
        assert hint in read["error"] and read["error"].endswith(nfd), read
        assert edit["error"].startswith(f"File not found; {hint}"), edit
        deleted = await tools["delete"].run({"path": nfd})
        assert deleted["deleted"] == nfd and hint in deleted["note"], deleted
        assert await ws.fs.read_text(nfc) == "hi"
        assert await tools["delete"].run({"path": "/workspace/caf\u00e8.txt"}) == {
            "deleted": "/workspace/caf\u00e8.txt"
        }
        assert await tools["delete"].run({"path": nfc}) == {"deleted": nfc}
        assert not await ws.fs.exists(nfc)


async def test_errors_with_one_answer_say_what_to_do() -> None:
    """An error a tool can only get one way says what to do instead, still naming the path."""
    from computer import Workspace
    from computer.tools import create_tools

    async with Workspace() as ws:
        tools = create_tools(ws)
        await ws.fs.mkdir("/workspace/d/e", recursive=True)
        await ws.fs.write_file("/workspace/f.txt", "x\n")
        for tool, args, expected in [
            ("delete", {"path": "/workspace/d"}, "directory not empty (set recursive: true to delete it"),
            ("read", {"path": "/workspace/d"}, "Is a directory (use ls to list a directory)"),
            (
                "edit",
                {"path": "/workspace/d", "edits": [{"oldText": "a", "newText": "b"}]},
                "Is a directory (edit takes a file;",
            ),
            ("write", {"path": "/workspace/d", "content": "x"}, "Is a directory (write takes a file's path;"),
            (
                "ls",
                {"path": "/workspace/f.txt"},
                "Not a directory (ls lists a directory; use read to open a file)",
            ),
        ]:
            error = (await tools[tool].run(args))["error"]
            assert error.startswith(expected) and error.endswith(args["path"]), (tool, error)
        assert (await tools["read"].run({"path": "/workspace/f.txt", "offset": 9}))["error"] == (
            "offset 9 is past the end of /workspace/f.txt (1 line)."
        )
        assert await ws.fs.exists("/workspace/d/e")
