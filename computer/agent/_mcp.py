"""MCP servers of an agent: persisted connections (streamable HTTP URLs) and one toolset per server.

pydantic-ai's own ``MCPToolset`` needs the ``fastmcp`` package; this thin toolset speaks to a server
with the ``mcp`` SDK's ``Client`` instead. A connection is opened when a turn starts (pydantic-ai
enters every toolset for a run) and closed when it ends, so an idle agent holds no sockets.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai import RunContext, ToolFailed
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from ._store import AgentStore

__all__ = ["McpRegistry", "McpServerToolset"]

_ANY_ARGS: Any = TypeAdapter(dict[str, Any]).validator  # the server validates against its own schema


class McpServerToolset(AbstractToolset[Any]):
    """The tools of one MCP server at ``url`` (streamable HTTP)."""

    def __init__(self, server_id: str, name: str, url: str) -> None:
        self.server_id = server_id
        self.name = name
        self.url = url
        self._client: Any = None
        self._entered = 0

    @property
    def id(self) -> str | None:
        return f"mcp:{self.server_id}"

    async def __aenter__(self) -> McpServerToolset:
        if self._entered == 0:
            from mcp import Client

            client = Client(self.url)
            await client.__aenter__()
            self._client = client
        self._entered += 1
        return self

    async def __aexit__(self, *args: Any) -> bool | None:
        self._entered -= 1
        if self._entered == 0 and self._client is not None:
            client, self._client = self._client, None
            await client.__aexit__(None, None, None)
        return None

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        if self._client is None:
            raise RuntimeError(f"MCP server {self.name!r} is not connected")
        listing = await self._client.list_tools()
        return {
            t.name: ToolsetTool(
                toolset=self,
                tool_def=ToolDefinition(
                    name=t.name,
                    description=t.description or "",
                    parameters_json_schema=dict(t.input_schema or {"type": "object"}),
                    metadata={"mcp_server": self.server_id},
                ),
                max_retries=1,
                args_validator=_ANY_ARGS,
            )
            for t in listing.tools
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        result = await self._client.call_tool(name, tool_args)
        text = "\n".join(getattr(block, "text", "") for block in result.content if hasattr(block, "text"))
        if result.is_error:
            raise ToolFailed(text or f"MCP tool {name} failed")
        # Text is what the server wrote for a model; structured content alone is sent as JSON.
        if not text and result.structured_content is not None:
            return json.dumps(result.structured_content, ensure_ascii=False)
        return text


class McpRegistry:
    """The agent's MCP servers, stored in ``/.computer/agent/mcp.json`` (``[{id, name, url}]``)."""

    def __init__(self, store: AgentStore) -> None:
        self.store = store
        self._path = store.path("mcp.json")

    async def servers(self) -> list[dict[str, str]]:
        value = await self.store.read_json(self._path)
        return list(value or [])

    async def add(self, name: str, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"an MCP server URL must be http(s) (streamable HTTP), not {url!r}")
        servers = await self.servers()
        server_id = f"mcp-{secrets.token_hex(4)}"
        servers.append({"id": server_id, "name": name, "url": url})
        await self.store.write_json(self._path, servers)
        return server_id

    async def remove(self, server_id: str) -> None:
        servers = await self.servers()
        kept = [s for s in servers if s["id"] != server_id]
        if len(kept) == len(servers):
            raise LookupError(f"no MCP server with id {server_id!r}")
        await self.store.write_json(self._path, kept)

    async def toolsets(self) -> list[McpServerToolset]:
        """One toolset per server, in the order they were added (a later server wins a name clash)."""
        return [McpServerToolset(s["id"], s["name"], s["url"]) for s in await self.servers()]
