"""LangChain's own conformance kit (``langchain-tests``: ``ToolsUnitTests`` and ``ToolsIntegrationTests``)
run unchanged against every tool of ``create_langchain_tools``, over a real embedded ``Workspace`` with
a shell backend and an asset store, as a new user would subclass it.

One unit and one integration class per tool: ``read, ls, find, grep, write, edit, delete, exec,
publish`` and the optional ``processes``, ``kill`` and ``discover_tools`` (``processes`` is made lazy
so the set has one). The integration tests invoke each tool with a tool call and with bare arguments,
synchronously (``invoke``: the shared sync loop) and asynchronously (``ainvoke``). ``kill``'s example
names a pid that does not exist, so its failure path is what the kit checks: an error message must
still carry an artifact (``content_and_artifact``).

No kit test is skipped or overridden (the kit's ``test_no_overrides_DO_NOT_OVERRIDE`` checks it);
``test_init_from_env`` checks nothing here, as the tools take no environment variables.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("langchain_tests")

from langchain_core.tools import BaseTool
from langchain_tests.integration_tests import ToolsIntegrationTests
from langchain_tests.unit_tests import ToolsUnitTests

import computer
from computer.runtime import ShellBackend
from computer.tools.langchain import create_langchain_tools

# Arguments of each tool's example call, on the seeded workspace.
EXAMPLES: dict[str, dict[str, Any]] = {
    "read": {"path": "/workspace/a.txt"},
    "ls": {"path": "/workspace"},
    "find": {"pattern": "**/*.txt"},
    "grep": {"query": "alpha", "ignoreCase": True},
    "write": {"path": "/workspace/new.txt", "content": "é\n"},
    "edit": {"path": "/workspace/a.txt", "edits": [{"oldText": "alpha", "newText": "ALPHA"}]},
    "delete": {"path": "/workspace/a.txt"},
    "exec": {"command": "cat a.txt"},
    "publish": {"path": "/workspace/a.txt"},
    "processes": {},
    "kill": {"pid": 999_999},  # no such process: the kit checks the failure's message
    "discover_tools": {"names": ["processes"]},
}


class _OverAWorkspace:
    """The kit's ``tool`` fixture takes ``tool_constructor``: the tool named ``tool_name`` of a set over
    a fresh workspace, made (and closed) around each test by an autouse fixture."""

    tool_name = ""

    @pytest.fixture(autouse=True)
    def _workspace(self) -> Iterator[None]:
        ws = computer.Workspace(backends=[ShellBackend()], assets=True)
        asyncio.run(_seed(ws))
        self._tools = create_langchain_tools(ws, format="object", processes=True, lazy=["processes"])
        yield
        asyncio.run(ws.close())  # on a loop of its own, as a synchronous program would

    @property
    def tool_constructor(self) -> BaseTool:
        return self._tools[self.tool_name]

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return EXAMPLES[self.tool_name]


async def _seed(ws: computer.Workspace) -> None:
    await ws.fs.mkdir("/workspace", recursive=True)
    await ws.fs.write_file("/workspace/a.txt", "alpha\nbeta\n")


def _kit_classes() -> dict[str, type]:
    classes: dict[str, type] = {}
    for name in EXAMPLES:
        title = "".join(part.capitalize() for part in name.split("_"))
        for kit, kind in ((ToolsUnitTests, "Unit"), (ToolsIntegrationTests, "Integration")):
            cls_name = f"Test{title}{kind}"
            classes[cls_name] = type(cls_name, (_OverAWorkspace, kit), {"tool_name": name})
    return classes


globals().update(_kit_classes())
