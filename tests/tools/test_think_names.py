"""``names="think"``: the seed's Think tool names (``list``, ``bash``) in every adapter."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from computer import Workspace
from computer.runtime.types import BackendInfo, ExecResult
from computer.tools import create_tools
from computer.tools.tool_set import BASH_DESCRIPTION

SHELL = BackendInfo("shell", "command", False, "Bash with coreutils.")
PYTHON = BackendInfo("python", "module", True, "Python 3.")


class _Handle:
    id = "exec-1"

    def __init__(self, backend: str) -> None:
        self.backend = backend

    def __aiter__(self) -> Any:
        return self._none()

    async def _none(self) -> Any:
        return
        yield

    async def result(self) -> ExecResult:
        return ExecResult("completed", 0, f"ran on {self.backend}\n", "", backend=self.backend)

    async def kill(self) -> None:
        pass


class _Runtime:
    def __init__(self, infos: list[BackendInfo]) -> None:
        self.infos = infos
        self.ran: list[str] = []

    def backends(self) -> list[BackendInfo]:
        return list(self.infos)

    async def exec(self, source: str, **kwargs: Any) -> _Handle:
        self.ran.append(kwargs["backend"])
        return _Handle(kwargs["backend"])


class _Surface:
    def __init__(self, ws: Workspace, infos: list[BackendInfo]) -> None:
        self.id, self.fs, self.locks, self.assets = ws.id, ws.fs, ws.locks, None
        self.runtime = _Runtime(infos)


@pytest.fixture
async def ws() -> Any:
    async with Workspace() as workspace:
        await workspace.fs.mkdir("/workspace")
        await workspace.fs.write_file("/workspace/a.txt", "x\n")
        yield workspace


async def test_think_names_offer_list_and_bash_instead_of_ls_and_exec(ws: Workspace) -> None:
    surface = _Surface(ws, [SHELL])
    tools = create_tools(surface, names="think")
    assert list(tools) == ["read", "list", "find", "grep", "write", "edit", "delete", "bash"]
    listed = await tools["list"].run({"path": "/workspace"})
    assert [e["name"] for e in listed["entries"]] == ["a.txt"]
    assert BASH_DESCRIPTION in tools["bash"].description
    assert (await tools["bash"].run({"command": "ls"}))["stdout"] == "ran on shell\n"
    assert "backend" not in tools["bash"].parameters.get("required", [])


async def test_other_backends_stay_reachable_through_exec(ws: Workspace) -> None:
    surface = _Surface(ws, [SHELL, PYTHON])
    tools = create_tools(surface, names="think")
    assert "bash" in tools and "exec" in tools
    assert tools["bash"].parameters["properties"]["backend"]["enum"] == ["shell"]
    assert tools["exec"].parameters["properties"]["backend"]["enum"] == ["python"]
    await tools["exec"].run({"command": "print(1)"})
    await tools["bash"].run({"command": "true"})
    assert surface.runtime.ran == ["python", "shell"]


async def test_without_a_shell_backend_exec_keeps_its_name(ws: Workspace) -> None:
    tools = create_tools(_Surface(ws, [PYTHON]), names="think")
    assert "exec" in tools and "bash" not in tools and "list" in tools and "ls" not in tools


async def test_a_shell_description_given_by_the_caller_wins(ws: Workspace) -> None:
    tools = create_tools(
        _Surface(ws, [SHELL]), names="think", exec={"shell": {"description": "Use for builds."}}
    )
    assert "Use for builds." in tools["bash"].description
    assert BASH_DESCRIPTION not in tools["bash"].description


async def test_adapters_take_the_option(ws: Workspace) -> None:
    from computer.tools.openai import create_openai_tools

    declarations, execute = create_openai_tools(_Surface(ws, [SHELL]), names="think")
    assert [d["function"]["name"] for d in declarations] == [
        "read",
        "list",
        "find",
        "grep",
        "write",
        "edit",
        "delete",
        "bash",
    ]
    out = await execute({"function": {"name": "list", "arguments": '{"path": "/workspace"}'}})
    assert out["is_error"] is False
    unknown = await execute({"function": {"name": "ls", "arguments": '{"path": "/workspace"}'}})
    assert unknown["is_error"] is True and "Available tools: read, list" in unknown["content"][0]["text"]


def test_an_unknown_naming_is_an_error(ws: Workspace) -> None:
    with pytest.raises(ValueError, match="names"):
        create_tools(ws, names="seed")  # type: ignore[arg-type]


async def test_think_names_over_a_forwarding_client_still_forward_under_the_core_name(
    ws: Workspace,
) -> None:
    class Client(_Surface):
        def __init__(self, ws: Workspace, infos: list[BackendInfo]) -> None:
            super().__init__(ws, infos)
            self.forwarded: list[str] = []

        async def run_tool(self, name: str, args: dict[str, Any], *, options: Any = None) -> dict[str, Any]:
            self.forwarded.append(name)
            return {"path": args["path"], "count": 0, "entries": []}

    client = Client(ws, [SHELL])
    tools = create_tools(client, names="think")
    await tools["list"].run({"path": "/workspace"})
    assert client.forwarded == ["ls"]  # the owner's tool set knows it as ls


async def test_calls_under_think_names_are_audited_under_those_names(ws: Workspace) -> None:
    class Audit:
        def __init__(self) -> None:
            self.names: list[str] = []

        def record_tool(self, name: str, args: Any, result: Any, duration_s: float) -> None:
            self.names.append(name)

    surface = _Surface(ws, [SHELL, PYTHON])
    surface.audit = Audit()  # type: ignore[attr-defined]
    tools = create_tools(surface, names="think")
    await tools["list"].run({"path": "/workspace"})
    await tools["bash"].run({"command": "true"})
    await tools["exec"].run({"command": "print(1)"})
    assert surface.audit.names == ["list", "bash", "exec"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("infos", "names", "approve", "expected"),
    [
        ([SHELL], "think", ["exec"], {"bash"}),
        ([SHELL, PYTHON], "think", ["exec"], {"bash", "exec"}),
        ([SHELL, PYTHON], "think", ["bash"], {"bash"}),
        ([SHELL], "default", ["bash"], {"exec"}),
        ([SHELL], "think", ["ls", "write"], {"list", "write"}),
        ([SHELL], "default", ["list"], {"ls"}),
    ],
)
async def test_approval_names_of_the_other_naming_select_the_same_tool(
    ws: Workspace, infos: list[BackendInfo], names: Any, approve: list[str], expected: set[str]
) -> None:
    from computer.tools._adapter_tools import select_tools
    from computer.tools.langchain import create_langchain_tools

    surface = _Surface(ws, infos)
    tools = create_tools(surface, names=names)
    assert select_tools(approve, tools, option="approve", groups=("mutating",)) == expected
    lc = create_langchain_tools(surface, names=names, approve=approve, format="object")
    assert {name for name, tool in lc.items() if getattr(tool, "needs_approval", False)} == expected


async def test_pydantic_ai_approval_of_exec_under_think_names_wraps_bash(ws: Workspace) -> None:
    from pydantic_ai.toolsets import ApprovalRequiredToolset

    from computer.tools.pydantic_ai import create_pydantic_ai_tools

    toolset = create_pydantic_ai_tools(_Surface(ws, [SHELL]), names="think", approve=["exec"])
    assert isinstance(toolset, ApprovalRequiredToolset)
    needs = toolset.approval_required_func
    assert needs(None, SimpleNamespace(name="bash"), {}) is True  # type: ignore[arg-type]
    assert needs(None, SimpleNamespace(name="write"), {}) is False  # type: ignore[arg-type]


async def test_mcp_annotations_follow_the_tool_not_its_name(ws: Workspace) -> None:
    from computer.tools.mcp import mcp_tool

    default = {n: mcp_tool(t).annotations for n, t in create_tools(_Surface(ws, [SHELL])).items()}
    think = {
        n: mcp_tool(t).annotations for n, t in create_tools(_Surface(ws, [SHELL]), names="think").items()
    }
    assert think["list"] == default["ls"]
    assert think["bash"] == default["exec"]
    assert think["list"] is not None and think["list"].idempotent_hint is True
    assert think["bash"] is not None and think["bash"].open_world_hint is True
