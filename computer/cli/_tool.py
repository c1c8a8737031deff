"""``computer tool NAME TOOL ARGS``: one tool call on a workspace, the result printed as JSON."""

from __future__ import annotations

import json
import sys
from typing import Any

from ._context import CliError, GlobalOptions
from ._workspaces import open_workspace

__all__ = ["TOOL_NAMES", "parse_arguments", "run_tool"]

TOOL_NAMES = ("read", "ls", "find", "grep", "write", "edit", "delete", "exec", "publish")


def parse_arguments(tool: str, raw: str) -> dict[str, Any]:
    """Check the tool name and the JSON arguments before anything starts (usage errors exit 2)."""
    if tool not in TOOL_NAMES:
        raise CliError(f"unknown tool {tool!r}; tools: {', '.join(TOOL_NAMES)}", code=2)
    try:
        args = json.loads(raw)
    except ValueError as exc:
        raise CliError(
            f'the arguments are not valid JSON ({exc}); pass one JSON object, e.g. \'{{"path": "/workspace"}}\'',
            code=2,
        ) from None
    if not isinstance(args, dict):
        raise CliError(f"the arguments must be a JSON object, not {type(args).__name__}", code=2)
    return args


async def run_tool(options: GlobalOptions, name: str, tool: str, args: dict[str, Any]) -> int:
    """Run the call; exit code 0 on success, 1 when the tool reports an error."""
    from ..tools import create_tools

    async with open_workspace(options, name) as workspace:
        tools = create_tools(workspace)
        if tool not in tools:
            raise CliError(
                f"tool {tool!r} is not available on workspace {name!r} (available: {', '.join(tools)})",
                code=2,
            )
        result = await tools[tool].run(args)
    json.dump(result, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    return 1 if "error" in result else 0
