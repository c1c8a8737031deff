"""SPEC section 10, "Tool arguments": unknown names are rejected by every tool, naming each and listing
the valid names; option groups take the seed's camelCase keys as well as snake_case."""

from __future__ import annotations

from typing import Any

import pytest

from computer import Workspace
from computer.runtime.types import BackendInfo
from computer.tools import ReadOptions, Tool, create_read_tool, create_tools
from computer.tools.exec import create_exec_tool
from computer.tools.publish import create_publish_tool

# Arguments that pass validation for each tool (the calls may still fail on a missing file).
GOOD: dict[str, dict[str, Any]] = {
    "read": {"path": "/a.txt"},
    "ls": {"path": "/"},
    "find": {"pattern": "*"},
    "grep": {"query": "x"},
    "write": {"path": "/a.txt", "content": "x"},
    "edit": {"path": "/a.txt", "edits": [{"oldText": "x", "newText": "y"}]},
    "delete": {"path": "/nothing"},
    "exec": {"command": "true"},
    "publish": {"path": "/a.txt"},
}


class _Runtime:
    def backends(self) -> list[BackendInfo]:
        return [BackendInfo("shell", "command", False, "")]

    async def exec(self, source: str, **kwargs: Any) -> Any:
        raise AssertionError("an invalid call must not run")


class _Assets:
    async def share(self, path: str, **options: Any) -> str:
        raise AssertionError("an invalid call must not run")


class _Surface:
    runtime = _Runtime()
    assets = _Assets()


@pytest.fixture
async def every_tool(workspace: Workspace) -> dict[str, Tool]:
    tools = create_tools(workspace)
    tools["exec"] = create_exec_tool(_Surface())
    tools["publish"] = create_publish_tool(_Surface())
    assert set(tools) == set(GOOD)
    return tools


@pytest.mark.parametrize("name", list(GOOD))
async def test_unknown_argument_names_are_named_with_the_valid_ones(
    every_tool: dict[str, Tool], name: str
) -> None:
    tool = every_tool[name]
    result = await tool.run({**GOOD[name], "bogus": 1, "also_wrong": True})
    message = result["error"]
    assert "'bogus'" in message and "'also_wrong'" in message, message
    valid = list(tool.parameters["properties"])
    assert "Valid arguments: " + ", ".join(valid) in message, message
    single = await tool.run({**GOOD[name], "extraThing": 1})
    assert "Unknown argument 'extraThing'" in single["error"]


async def test_snake_case_argument_names_are_still_accepted(workspace: Workspace) -> None:
    tools = create_tools(workspace)
    await tools["write"].run({"path": "/a.txt", "content": "one\ntwo\n"})
    result = await tools["grep"].run({"query": "ONE", "ignore_case": True, "path": "/"})
    assert result["count"] == 1
    edited = await tools["edit"].run({"path": "/a.txt", "old_text": "two", "new_text": "2"})
    assert edited["editsApplied"] == 1


async def test_unknown_names_inside_an_edit_item_are_named_too(workspace: Workspace) -> None:
    tools = create_tools(workspace)
    await tools["write"].run({"path": "/a.txt", "content": "x"})
    result = await tools["edit"].run(
        {"path": "/a.txt", "edits": [{"oldText": "x", "newText": "y", "replaceAll": True}]}
    )
    assert "'replaceAll'" in result["error"] and "oldText, newText" in result["error"]


async def test_an_exec_call_with_an_unknown_name_does_not_run() -> None:
    class Recording(_Runtime):
        calls = 0

        async def exec(self, source: str, **kwargs: Any) -> Any:
            self.calls += 1
            raise AssertionError

    class Surface:
        runtime = Recording()

    tool = create_exec_tool(Surface())
    result = await tool.run({"command": "ls", "timeOut": 5})
    assert "'timeOut'" in result["error"] and "timeout" in result["error"]
    assert Surface.runtime.calls == 0


@pytest.mark.parametrize(
    ("camel", "snake"),
    [
        ({"maxLines": 1}, {"max_lines": 1}),
        ({"includeLineNumbers": True}, {"include_line_numbers": True}),
        ({"lineTruncation": {"chars": 2}}, {"line_truncation": {"chars": 2}}),
        (
            {"maxBytes": 4096, "maxModelBytes": 1024, "mediaSniffBytes": 64},
            {
                "max_bytes": 4096,
                "max_model_bytes": 1024,
                "media_sniff_bytes": 64,
            },
        ),
    ],
)
async def test_read_options_accept_camel_and_snake_case(
    workspace: Workspace, camel: dict[str, Any], snake: dict[str, Any]
) -> None:
    from computer.tools._options import coerce_options

    assert coerce_options(ReadOptions, camel) == coerce_options(ReadOptions, snake)
    await create_tools(workspace)["write"].run({"path": "/f.txt", "content": "alpha\nbeta\n"})
    by_camel = await create_tools(workspace, read=camel)["read"].run({"path": "/f.txt"})
    by_snake = await create_tools(workspace, read=snake)["read"].run({"path": "/f.txt"})
    assert by_camel == by_snake


async def test_write_and_edit_options_accept_camel_case(workspace: Workspace) -> None:
    tools = create_tools(workspace, write={"maxBytes": 3}, edit={"maxBytes": 4})
    assert "3 bytes write cap" in (await tools["write"].run({"path": "/w.txt", "content": "four"}))["error"]
    await create_tools(workspace)["write"].run({"path": "/e.txt", "content": "12345"})
    assert "cap" in (await tools["edit"].run({"path": "/e.txt", "oldText": "1", "newText": "x"}))["error"]


async def test_factory_keywords_accept_camel_case_and_a_later_override_wins(workspace: Workspace) -> None:
    from computer.tools import WorkspaceFileStore

    await create_tools(workspace)["write"].run({"path": "/f.txt", "content": "a\nb\nc\n"})
    tool = create_read_tool(WorkspaceFileStore(workspace), options={"maxLines": 1}, max_lines=2)
    result = await tool.run({"path": "/f.txt"})
    assert result["endLine"] == 2


def test_unknown_option_keys_are_errors() -> None:
    from computer.tools._options import coerce_options

    with pytest.raises(ValueError, match="maxLine"):
        coerce_options(ReadOptions, {"maxLine": 1})


@pytest.mark.parametrize(
    ("name", "args", "meant"),
    [
        ("grep", {"query": "x", "ignorecase": True}, ("ignorecase", "ignoreCase")),
        ("grep", {"query": "x", "IgnoreCase": True}, ("IgnoreCase", "ignoreCase")),
        ("grep", {"query": "x", "case_insensitive": True}, ("case_insensitive", "ignoreCase")),
        ("grep", {"pattern": "x"}, ("pattern", "query")),
        ("read", {"path": "/a.txt", "startLine": 9}, ("startLine", "offset")),
        ("read", {"file_path": "/a.txt"}, ("file_path", "path")),
        ("read", {"path": "/a.txt", "limt": 2}, ("limt", "limit")),
        ("write", {"path": "/a.txt", "file_text": "x"}, ("file_text", "content")),
        ("edit", {"path": "/a.txt", "old_string": "x", "new_string": "y"}, ("old_string", "oldText")),
        ("edit", {"path": "/a.txt", "old_str": "x", "new_str": "y"}, ("new_str", "newText")),
        ("delete", {"path": "/a.txt", "recurse": True}, ("recurse", "recursive")),
        ("exec", {"cmd": "true"}, ("cmd", "command")),
        ("find", {"glob": "*.py"}, ("glob", "pattern")),
    ],
)
async def test_an_unknown_name_suggests_the_name_it_most_likely_meant(
    every_tool: dict[str, Tool], name: str, args: dict[str, Any], meant: tuple[str, str]
) -> None:
    result = await every_tool[name].run(args)
    wrong, right = meant
    assert f"{wrong!r} (did you mean {right!r}?)" in result["error"], result


async def test_no_suggestion_when_nothing_is_close(every_tool: dict[str, Tool]) -> None:
    result = await every_tool["ls"].run({"path": "/", "zebra": 1})
    assert (
        result["error"]
        == "Invalid arguments: Unknown argument 'zebra'. Valid arguments: limit, offset, path."
    )


async def test_an_error_naming_a_huge_path_is_cut_in_the_middle_not_echoed_whole() -> None:
    """A model can send a path of 100 KB; the error named all of it, back into the model's context.
    The message keeps its start and end (the reason, the path's two ends) and says how much it left
    out; every tool's error goes through the same builder."""
    from computer.tools import ERROR_CHARS

    segment = "d" * 200
    path = "/workspace/" + "/".join(f"{segment}{i}" for i in range(500)) + "/end.txt"
    async with Workspace() as ws:
        tools = create_tools(ws)
        for name, args in {
            "read": {"path": path},
            "ls": {"path": path},
            "delete": {"path": path},
            "edit": {"path": path, "edits": [{"oldText": "x", "newText": "y"}]},
        }.items():
            result = await tools[name].run(args)
            assert list(result) == ["error"], (name, result)
            message = result["error"]
            assert len(message) <= ERROR_CHARS, (name, len(message))
            assert "characters elided" in message and message.endswith("end.txt"), name


# Boolean and numeric arguments are strict: pydantic's lax mode took {"recursive": "yes"} as true.
NOT_STRICT = [
    ("delete", {"path": "/d", "recursive": "yes"}, "recursive", "true or false"),
    ("delete", {"path": "/d", "recursive": "true"}, "recursive", "true or false"),
    ("delete", {"path": "/d", "recursive": 1}, "recursive", "true or false"),
    ("grep", {"query": "x", "path": "/", "regex": "on"}, "regex", "true or false"),
    ("grep", {"query": "x", "path": "/", "ignoreCase": "false"}, "ignoreCase", "true or false"),
    ("grep", {"query": "x", "path": "/", "context": "2"}, "context", "integer"),
    ("ls", {"path": "/", "limit": True}, "limit", "integer"),
    ("find", {"path": "/", "pattern": "*", "offset": "1"}, "offset", "integer"),
    ("read", {"path": "/a.txt", "offset": 2.0}, "offset", "integer"),
    ("read", {"path": "/a.txt", "offset": 1, "byteOffset": "0"}, "byteOffset", "integer"),
    ("exec", {"command": "true", "timeout": "30"}, "timeout", "number"),
    ("publish", {"path": "/a.txt", "expiresAfterMs": "1000"}, "expiresAfterMs", "number"),
]


@pytest.mark.parametrize(("name", "args", "field", "wanted"), NOT_STRICT)
async def test_booleans_and_numbers_are_strict_and_the_error_names_the_argument(
    every_tool: dict[str, Tool],
    workspace: Workspace,
    name: str,
    args: dict[str, Any],
    field: str,
    wanted: str,
) -> None:
    await workspace.fs.mkdir("/d/inner", recursive=True)
    result = await every_tool[name].run(args)
    assert set(result) == {"error"}, result
    assert f"{field}: " in result["error"] and wanted in result["error"], result
    assert await workspace.fs.exists("/d/inner")  # nothing was deleted


async def test_json_booleans_and_numbers_still_work(workspace: Workspace) -> None:
    tools = create_tools(workspace)
    await workspace.fs.mkdir("/d/inner", recursive=True)
    listed = await tools["ls"].run({"path": "/", "limit": 5, "offset": 0})
    assert [e["name"] for e in listed["entries"]] == ["d"], listed
    assert await tools["delete"].run({"path": "/d", "recursive": True}) == {"deleted": "/d"}
    assert not await workspace.fs.exists("/d")
