"""create_tools (SPEC 8, CASE 23): which tools appear, their schemas, flags and descriptions."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from computer import Workspace
from computer.runtime.types import BackendInfo
from computer.tools import EditOptions, ReadOptions, Tool, create_tools

FILE_TOOLS = {"read", "ls", "find", "grep", "write", "edit", "delete"}


class QuietBackend:
    """The smallest real backend: exits 0 without output."""

    def __init__(self, backend_id: str = "shell") -> None:
        self.info = BackendInfo(backend_id, "command", False, description="Runs nothing.")

    async def run(self, request: Any, ctx: Any) -> AsyncIterator[Any]:
        from computer.runtime import ExitEvent

        yield ExitEvent(exit_code=0)


class StaticAssets:
    async def share(self, path: str, **options: Any) -> str:
        return "http://127.0.0.1:1/x"


@pytest.fixture
async def with_backend() -> AsyncIterator[Workspace]:
    ws = Workspace(backends=[QuietBackend()])
    yield ws
    await ws.close()


async def test_default_names(tools: dict[str, Tool]) -> None:
    assert set(tools) == FILE_TOOLS


async def test_readonly_leaves_the_search_tools(workspace: Workspace) -> None:
    assert set(create_tools(workspace, readonly=True)) == {"read", "ls", "find", "grep"}


async def test_exec_appears_only_with_a_backend(workspace: Workspace, with_backend: Workspace) -> None:
    assert "exec" not in create_tools(workspace)
    assert set(create_tools(with_backend)) == FILE_TOOLS | {"exec"}


async def test_exec_empty_dict_removes_the_tool(with_backend: Workspace) -> None:
    assert "exec" not in create_tools(with_backend, exec={})


async def test_exec_selection_of_an_unknown_backend_is_an_error(
    workspace: Workspace, with_backend: Workspace
) -> None:
    with pytest.raises(ValueError, match="shell"):
        create_tools(with_backend, exec={"python": {}})
    with pytest.raises(ValueError):
        create_tools(workspace, exec={"shell": {}})


async def test_exec_selection_adds_the_callers_description(with_backend: Workspace) -> None:
    tool = create_tools(with_backend, exec={"shell": {"description": "Use for builds."}})["exec"]
    assert "Use for builds." in tool.description


async def test_readonly_drops_exec_even_with_backends(with_backend: Workspace) -> None:
    assert set(create_tools(with_backend, readonly=True)) == {"read", "ls", "find", "grep"}


async def test_publish_only_with_assets_and_not_when_disabled(workspace: Workspace) -> None:
    ws = Workspace(assets=StaticAssets())
    try:
        assert set(create_tools(ws)) == FILE_TOOLS | {"publish"}
        assert "publish" not in create_tools(ws, assets=False)
        assert "publish" not in create_tools(ws, readonly=True)
    finally:
        await ws.close()
    assert "publish" not in create_tools(workspace)


async def test_mutating_and_destructive_flags(tools: dict[str, Tool]) -> None:
    assert {n for n, t in tools.items() if t.mutating} == {"write", "edit", "delete"}
    assert not any(tools[n].mutating for n in ("read", "ls", "find", "grep"))


async def test_schemas_use_the_seed_camel_case_names(tools: dict[str, Tool]) -> None:
    props = {name: set(tool.parameters["properties"]) for name, tool in tools.items()}
    assert props["read"] == {"path", "offset", "byteOffset", "limit"}
    assert props["write"] == {"path", "content"}
    assert props["edit"] == {"path", "edits"}
    assert props["ls"] == {"path", "limit", "offset"}
    assert props["find"] == {"path", "pattern", "exclude", "limit", "offset"}
    assert props["grep"] == {
        "path", "query", "include", "exclude", "regex", "ignoreCase", "context", "limit", "offset",
    }  # fmt: skip
    assert props["delete"] == {"path", "recursive"}
    item = tools["edit"].parameters["$defs"]["EditItem"]
    assert set(item["properties"]) == {"oldText", "newText"}
    assert set(item["required"]) == {"oldText", "newText"}


def _bounds(schema: dict[str, Any], field: str) -> dict[str, Any]:
    spec = schema["properties"][field]
    merged = dict(spec)
    for option in spec.get("anyOf", []):
        merged.update(option)
    return merged


async def test_schemas_carry_the_limits(tools: dict[str, Tool]) -> None:
    for name in ("ls", "find", "grep"):
        limit = _bounds(tools[name].parameters, "limit")
        assert (limit["minimum"], limit["maximum"], limit["default"]) == (1, 1000, 200)
        assert _bounds(tools[name].parameters, "offset")["minimum"] == 0
    context = _bounds(tools["grep"].parameters, "context")
    assert (context["minimum"], context["maximum"]) == (0, 10)
    assert _bounds(tools["read"].parameters, "offset")["minimum"] == 1
    assert _bounds(tools["read"].parameters, "limit")["minimum"] == 1
    assert _bounds(tools["read"].parameters, "byteOffset")["minimum"] == 0
    assert tools["find"].parameters["properties"]["path"]["default"] == "/workspace"
    assert tools["grep"].parameters["properties"]["path"]["default"] == "/workspace"
    assert set(tools["grep"].parameters["required"]) == {"query"}


async def test_descriptions_tell_the_model_how_to_use_the_tools(tools: dict[str, Tool]) -> None:
    assert "each edit batch applies against the original content" in tools["edit"].description.lower()
    assert "nextByteOffset" in tools["read"].description
    for tool in tools.values():
        assert len(tool.description) > 80


async def test_option_groups_accept_models_and_dicts(workspace: Workspace) -> None:
    await workspace.fs.write_file("/f.txt", "a\nb\nc\n")
    by_dict = create_tools(workspace, read={"max_lines": 1, "include_line_numbers": True})
    by_model = create_tools(workspace, read=ReadOptions(max_lines=1, include_line_numbers=True))
    for tools in (by_dict, by_model):
        assert (await tools["read"].run({"path": "/f.txt"}))["content"] == "1\ta"
    small_edit = create_tools(workspace, edit=EditOptions(max_bytes=3), write={"max_bytes": 3})
    assert "error" in await small_edit["edit"].run({"path": "/f.txt", "oldText": "a", "newText": "b"})
    assert "error" in await small_edit["write"].run({"path": "/g.txt", "content": "abcd"})


async def test_unknown_option_is_rejected(workspace: Workspace) -> None:
    with pytest.raises(ValueError, match="max_line"):
        create_tools(workspace, read={"max_line": 3})


async def test_run_never_raises_on_garbage(tools: dict[str, Tool]) -> None:
    for tool in tools.values():
        for args in (None, [], "x", {"path": 5}, {"path": "rel"}, {"path": "/\x00"}):
            result = await tool.run(args)  # type: ignore[arg-type]
            assert isinstance(result, dict) and "error" in result


def test_importing_tools_imports_no_agent_library_or_ray() -> None:
    code = (
        "import sys, computer.tools; "
        "bad = [m for m in ('ray', 'pydantic_ai', 'openai', 'langchain_core', 'mcp') if m in sys.modules]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
