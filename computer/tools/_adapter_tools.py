"""What every adapter shares: building the core tool set and resolving tool selections.

Adapters take ``create_tools``' options unchanged (``readonly``, ``assets``, ``read``, ``write``, ``edit``,
``exec``) and add only their own; selections such as ``approve`` and ``lazy`` name tools or a group.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ..surface import WorkspaceSurface
from ._tool import Tool

__all__ = ["build_tools", "record_refused", "select_tools", "unknown_tool"]


def build_tools(workspace: WorkspaceSurface, options: Mapping[str, Any]) -> dict[str, Tool]:
    """The core tools for ``workspace`` (``create_tools(workspace, **options)``), or given tools as they are.

    ``workspace`` may also be a ``dict[str, Tool]`` (or a list of tools) already built, so an adapter can
    wrap a hand-picked or customised set.
    """
    if isinstance(workspace, Mapping):
        if options:
            raise TypeError("tool options apply only when a workspace is given, not a built tool set")
        return dict(workspace)
    if isinstance(workspace, list | tuple) and all(isinstance(t, Tool) for t in workspace):
        if options:
            raise TypeError("tool options apply only when a workspace is given, not a built tool set")
        return {t.name: t for t in workspace}
    from . import create_tools

    tools: dict[str, Tool] = create_tools(workspace, **options)
    return tools


def record_refused(tools: Mapping[str, Tool], name: str, args: Any, message: str) -> None:
    """Record a call refused before it ran: bad arguments for tool ``name``, or ``name`` unknown.

    An unknown name is recorded under that name (cut to 100 characters) through the set's audit log
    (every tool of a set records in the same workspace), so the log shows what the model asked for.
    """
    tool = tools.get(name)
    if tool is not None:
        tool.record_refused(args, message)
    elif (any_tool := next(iter(tools.values()), None)) is not None:
        any_tool.record_refused(args, message, name=name[:100])


def unknown_tool(tools: Mapping[str, Tool], name: str) -> str:
    """What every adapter answers a call to a tool the set does not have."""
    return f"Unknown tool {name!r}. Available tools: {', '.join(tools)}."


def select_tools(
    spec: str | Collection[str] | None, tools: Mapping[str, Tool], *, option: str, groups: Collection[str]
) -> frozenset[str]:
    """Resolve ``spec`` to tool names: ``None`` → none; ``"mutating"`` → the mutating tools; ``"all"`` → all.

    A name that is not in the set is a ``ValueError`` (a typo must not silently disable approval);
    ``groups`` says which of the group words the option accepts. A name of the other naming
    (``names="think"``) selects the same tool here: ``exec`` also selects ``bash`` (the shell part of
    exec), ``bash`` selects ``exec`` when there is no ``bash``, and ``ls`` and ``list`` select each other.
    """
    if spec is None:
        return frozenset()
    if isinstance(spec, str):
        if spec in groups:
            if spec == "mutating":
                return frozenset(name for name, tool in tools.items() if tool.mutating)
            if spec == "all":
                return frozenset(tools)
        spec = [spec]
    names = frozenset(spec)
    unknown = sorted(names - set(tools) - set(_OPTIONAL_TOOLS))
    if unknown:
        accepted = ", ".join([*(repr(g) for g in groups), *sorted(tools)])
        raise ValueError(f"{option}: unknown tool name(s) {', '.join(unknown)}; expected one of {accepted}")
    selected = set(names & frozenset(tools))
    for name in names:
        if name not in tools or name == "exec":
            selected.update(alias for alias in _ALIASES.get(name, ()) if alias in tools)
    return frozenset(selected)


# A name of one naming -> the tools that do its work under the other (`exec` is split into `bash`, the
# shell backend, and `exec`, the others, under names="think"; `bash` is always part of `exec`).
_ALIASES = {"exec": ("bash",), "bash": ("exec",), "ls": ("list",), "list": ("ls",)}
# Names that may be absent from a given set (no backend, no assets, read-only, optional tools off, the
# other naming) without being typos.
_OPTIONAL_TOOLS = ("write", "edit", "delete", "exec", "publish", "processes", "kill", "ls", "list", "bash")
