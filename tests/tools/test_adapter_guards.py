"""Guards of the adapters that a spelling used to slip past (s48 findings)."""

from __future__ import annotations

import pytest

from computer import Workspace


@pytest.mark.parametrize(
    "path", ["/workspace", "/", "//workspace", "/alias/workspace", "/alias//workspace/."]
)
async def test_pydantic_ai_workspace_remove_refuses_every_spelling_of_the_working_dir(
    workspace: Workspace, path: str
) -> None:
    from computer.tools.pydantic_ai_workspace import ComputerWorkspaceBackend

    backend = ComputerWorkspaceBackend(workspace)
    await backend.write_bytes("/workspace/notes.md", b"precious")
    await workspace.fs.symlink("/", "/alias")
    with pytest.raises(ValueError, match="working directory"):
        await backend.remove(path)
    assert await workspace.fs.read_file("/workspace/notes.md") == b"precious"


async def test_pydantic_ai_workspace_remove_of_a_link_to_the_working_dir_removes_the_link(
    workspace: Workspace,
) -> None:
    from computer.tools.pydantic_ai_workspace import ComputerWorkspaceBackend

    backend = ComputerWorkspaceBackend(workspace)
    await backend.write_bytes("/workspace/notes.md", b"precious")
    await workspace.fs.symlink("/workspace", "/workspace/here")
    await backend.remove("/workspace/here")
    assert not await workspace.fs.exists("/workspace/here")
    assert await workspace.fs.read_file("/workspace/notes.md") == b"precious"


@pytest.mark.parametrize("extra", ["self", "config", "run_manager", "__computer_arguments__"])
async def test_langchain_argument_names_that_clash_with_the_method_are_the_tools_own_error(
    workspace: Workspace, extra: str
) -> None:
    from langchain_core.messages import ToolMessage

    from computer.tools.langchain import create_langchain_tools

    await workspace.fs.mkdir("/workspace")
    await workspace.fs.write_file("/workspace/a.txt", "hello\n")
    lc = create_langchain_tools(workspace, format="object")
    call = {"type": "tool_call", "name": "read", "args": {"path": "/workspace/a.txt", extra: 1}, "id": "t1"}
    message = await lc["read"].ainvoke(call)
    assert isinstance(message, ToolMessage)
    assert message.status == "error"
    assert f"Unknown argument {extra!r}" in str(message.content)
    ok = await lc["read"].ainvoke({**call, "args": {"path": "/workspace/a.txt"}})
    assert ok.status == "success" and "hello" in str(ok.content)


async def test_langchain_discover_tools_takes_its_names(workspace: Workspace) -> None:
    from computer.tools.langchain import create_langchain_tools

    lc = create_langchain_tools(workspace, format="object", lazy=["grep"])
    discover = lc["discover_tools"]
    listed = await discover.ainvoke({"type": "tool_call", "name": "discover_tools", "args": {}, "id": "a"})
    assert "grep" in str(listed.content)
    call = {"type": "tool_call", "name": "discover_tools", "args": {"names": ["grep"], "self": 1}, "id": "b"}
    enabled = await discover.ainvoke(call)
    assert "Enabled: grep" in str(enabled.content)


@pytest.mark.parametrize(
    ("filename", "path"),
    [
        ("report #1.pdf", "/report #1.pdf"),
        ("q?.pdf", "/q?.pdf"),
        ("a b\tc.pdf", "/a b\tc.pdf"),
        ("100%.pdf", "/100%.pdf"),
        ("caf\u00e9.pdf", "/caf\u00e9.pdf"),
    ],
)
def test_mcp_resource_uri_of_a_read_file_is_percent_encoded(filename: str, path: str) -> None:
    from urllib.parse import unquote, urlsplit

    from computer.tools.mcp import _content_block

    block = _content_block(
        {"type": "file", "media_type": "application/pdf", "data": "JVBERg==", "filename": filename}
    )
    uri = str(block.resource.uri)  # type: ignore[union-attr]
    parts = urlsplit(uri)
    assert (parts.scheme, parts.query, parts.fragment) == ("file", "", "")
    assert unquote(parts.path) == path
    assert " " not in uri and "\t" not in uri


async def test_pydantic_ai_records_a_call_of_an_unknown_tool_name_once(workspace: Workspace) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from computer.tools.pydantic_ai import create_pydantic_ai_tools

    await workspace.fs.mkdir("/workspace")
    await workspace.fs.write_file("/workspace/a.txt", "hello\n")
    turns = [
        [ToolCallPart("raed", {"path": "/workspace/a.txt"}, tool_call_id="c1")],
        [ToolCallPart("read", {"path": "/workspace/a.txt"}, tool_call_id="c2")],
        [TextPart("done")],
    ]

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=turns.pop(0))

    result = await Agent(FunctionModel(model), toolsets=[create_pydantic_ai_tools(workspace)]).run("go")
    assert result.output == "done"
    workspace.audit.flush()
    records = await workspace.audit.query()
    assert [(r.tool, r.status, r.caller.get("adapter")) for r in records] == [
        ("raed", "error", "pydantic_ai"),
        ("read", "ok", "pydantic_ai"),
    ]
    assert "Unknown tool 'raed'" in str(records[0].error)
    assert records[0].args == {"path": "/workspace/a.txt"}


async def test_a_forwarded_write_with_a_lone_surrogate_answers_like_the_owner(workspace: Workspace) -> None:
    from typing import Any

    from computer.tools import create_tools

    class Client:
        def __init__(self, ws: Workspace) -> None:
            self.fs, self.runtime, self.locks, self.id, self.assets = ws.fs, ws.runtime, ws.locks, ws.id, None
            self.owner = create_tools(ws)
            self.forwarded: list[str] = []

        async def run_tool(self, name: str, args: dict[str, Any], *, options: Any = None) -> dict[str, Any]:
            self.forwarded.append(name)
            return await self.owner[name].run(args)

    args = {"path": "/workspace/s.txt", "content": "x\ud800"}
    owner = await create_tools(workspace)["write"].run(args)
    client = Client(workspace)
    forwarded = await create_tools(client)["write"].run(args)  # type: ignore[arg-type]
    assert forwarded == owner
    assert "content for /workspace/s.txt is not valid UTF-8 text" in owner["error"]
    assert client.forwarded == []  # answered locally, no round trip


async def test_an_openai_grep_whose_query_holds_a_lone_surrogate_names_the_argument(
    workspace: Workspace,
) -> None:
    """json.loads reads a lone surrogate escape; grep answered with the bare codec message ("'utf-8'
    codec can't encode character..."), naming neither the argument nor what to do."""
    from computer.tools.openai import create_openai_tools

    _, execute = create_openai_tools(workspace)
    await execute(
        {
            "id": "w",
            "type": "function",
            "function": {"name": "write", "arguments": '{"path": "/workspace/a.txt", "content": "smile"}'},
        }
    )
    call = {"id": "c", "type": "function", "function": {"name": "grep", "arguments": '{"query": "\\ud83d"}'}}
    outcome = await execute(call)
    assert outcome["is_error"] is True
    text = outcome["content"][0]["text"]
    assert text.startswith("Error: query for /workspace is not valid UTF-8 text: '\\ud83d' at character 0"), (
        text
    )


async def test_a_find_pattern_holding_a_lone_surrogate_is_named_never_echoed(workspace: Workspace) -> None:
    """find echoed its pattern in its result: a lone surrogate there (an OpenAI call's JSON escape)
    came back in a Responses ``function_call_output`` string that no UTF-8 encoder takes, so an agent
    loop's next request to its model failed on the tool's answer."""
    from computer.tools.openai import create_openai_tools

    _, execute = create_openai_tools(workspace, api="responses")
    item = {"type": "function_call", "call_id": "c", "name": "find", "arguments": '{"pattern": "*\\ud83d"}'}
    outcome = await execute(item)
    outcome["output"].encode("utf-8")
    assert outcome["output"].startswith("Error: pattern for /workspace is not valid UTF-8 text: '\\ud83d'")
