"""``MergedToolset``: tool sources in order, where a later source's tool replaces an earlier one's.

pydantic-ai's ``CombinedToolset`` refuses name clashes; the seed's merge order wants the later source
to win (a ``get_tools()`` tool named ``read`` replaces the workspace's ``read``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.toolsets import AbstractToolset, CombinedToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

__all__ = ["MergedToolset"]


@dataclass(kw_only=True)
class _SourcedTool(ToolsetTool[Any]):
    """A merged tool that remembers which source toolset (and which of its tools) answers it."""

    source: AbstractToolset[Any]
    original: ToolsetTool[Any]


_COPIED = [f.name for f in dataclasses.fields(ToolsetTool) if f.init]


@dataclass
class MergedToolset(CombinedToolset[Any]):
    """``toolsets`` in merge order; on a name clash the later toolset's tool wins."""

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        merged: dict[str, ToolsetTool[Any]] = {}
        for source in self.toolsets:
            for name, tool in (await source.get_tools(ctx)).items():
                fields = {f: getattr(tool, f) for f in _COPIED}
                merged[name] = _SourcedTool(**fields, source=source, original=tool)
        return merged

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        assert isinstance(tool, _SourcedTool)
        # A wrapper around this toolset may have changed the definition since get_tools: pass it on.
        original = dataclasses.replace(tool.original, tool_def=tool.tool_def)
        return await tool.source.call_tool(name, tool_args, ctx, original)
