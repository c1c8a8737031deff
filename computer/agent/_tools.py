"""Tool sources of a turn: the workspace tools (with ``list`` and ``bash``) and the user's own tools.

``tool(fn, needs_approval=...)`` marks a user tool whose calls pause the turn for approval;
``needs_approval`` is a bool or a function of the call's arguments (``lambda args: ...``).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Literal

from pydantic_ai import RunContext
from pydantic_ai.tools import Tool, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ApprovalRequiredToolset, FunctionToolset

from ..tools import create_tools
from ..tools.pydantic_ai import WorkspaceToolset

__all__ = ["AgentTool", "NeedsApproval", "tool", "user_toolset", "workspace_toolset"]

NeedsApproval = bool | Callable[[dict[str, Any]], bool]

BASH_DESCRIPTION = (
    "Run a bash script in a sandbox over the workspace files (no network). Files it creates, changes "
    "or deletes under /workspace are written back. Use it for shell workflows that combine several "
    "file operations; prefer read, write and edit for simple ones."
)


class AgentTool(Tool[Any]):
    """A pydantic-ai ``Tool`` with ``needs_approval``: a bool, or a function of the call's arguments."""

    def __init__(self, function: Callable[..., Any], *, needs_approval: NeedsApproval = False, **kwargs: Any):
        super().__init__(function, **kwargs)
        self.needs_approval: NeedsApproval = needs_approval


def tool(
    function: Callable[..., Any] | None = None,
    *,
    needs_approval: NeedsApproval = False,
    **kwargs: Any,
) -> Any:
    """Make a user tool (also usable as ``@tool(needs_approval=...)``); ``kwargs`` go to pydantic-ai's ``Tool``."""

    def wrap(fn: Callable[..., Any]) -> AgentTool:
        return AgentTool(fn, needs_approval=needs_approval, **kwargs)

    return wrap if function is None else wrap(function)


def as_tools(tools: Sequence[Any] | Mapping[str, Any]) -> list[Tool[Any]]:
    """pydantic-ai ``Tool`` objects from a list (or a name → tool mapping) of tools and functions."""
    items: list[tuple[str | None, Any]]
    if isinstance(tools, Mapping):
        items = list(tools.items())
    else:
        items = [(None, t) for t in tools]
    out: list[Tool[Any]] = []
    for name, value in items:
        if isinstance(value, Tool):
            made = copy.copy(value)
        elif callable(value):
            made = Tool(value)
        else:
            raise TypeError(f"a tool must be a pydantic-ai Tool or a function, not {type(value).__name__}")
        if name is not None and made.name != name:
            made.name = name
        out.append(made)
    return out


def user_toolset(tools: Sequence[Tool[Any]], *, id: str) -> AbstractToolset[Any] | None:
    """The tools as one toolset; ``needs_approval`` tools pause the turn (pydantic-ai deferred approval)."""
    if not tools:
        return None
    rules = {t.name: t.needs_approval for t in tools if isinstance(t, AgentTool) and t.needs_approval}
    toolset: AbstractToolset[Any] = FunctionToolset(list(tools), id=id)
    if rules:
        toolset = ApprovalRequiredToolset(toolset, _approval_rule(rules))
    return toolset


def _approval_rule(
    rules: Mapping[str, NeedsApproval],
) -> Callable[[RunContext[Any], ToolDefinition, dict[str, Any]], bool]:
    def needs(ctx: RunContext[Any], tool_def: ToolDefinition, args: dict[str, Any]) -> bool:
        rule = rules.get(tool_def.name, False)
        if callable(rule):
            verdict = rule(dict(args))
            if inspect.isawaitable(verdict):
                raise TypeError(f"needs_approval of {tool_def.name!r} must be a plain (not async) function")
            return bool(verdict)
        return bool(rule)

    return needs


def workspace_toolset(
    workspace: Any,
    *,
    bash: bool,
    approve: Literal["mutating"] | Collection[str] | None = None,
) -> AbstractToolset[Any]:
    """read, write, edit, ls (also as ``list``), find, grep, delete, and ``bash`` over the shell backend."""
    tools = create_tools(workspace, exec={}, assets=False)
    tools["list"] = dataclasses.replace(tools["ls"], name="list")
    if bash and any(info.id == "shell" for info in workspace.runtime.backends()):
        from ..tools.exec import create_exec_tool

        shell = create_exec_tool(workspace, backends={"shell": {"description": BASH_DESCRIPTION}})
        tools["bash"] = dataclasses.replace(shell, name="bash")
    toolset: AbstractToolset[Any] = WorkspaceToolset(tools, toolset_id="workspace")
    if approve == "mutating":
        names = {name for name, t in tools.items() if t.mutating}
    else:
        names = set(approve or ())
    if names:
        toolset = ApprovalRequiredToolset(toolset, lambda ctx, tool_def, args: tool_def.name in names)
    return toolset
