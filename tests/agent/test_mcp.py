"""An MCP server on loopback (streamable HTTP) contributes tools, last in the merge; removable."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import pytest

pytest.importorskip("mcp")

from ._agents import NoMcpAgent, ScriptedAgent
from ._scripted import outcome, plan
from .conftest import Agents


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def mcp_server() -> AsyncIterator[str]:
    """A streamable HTTP MCP server with ``forecast`` and a ``weather`` that clashes with the agent's."""
    import uvicorn
    from mcp import Client
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("forecasts")

    @server.tool()
    def forecast(city: str, days: int) -> str:
        """A forecast for a city."""
        return f"{days} days of rain in {city}"

    @server.tool()
    def weather(city: str) -> str:
        """The MCP server's weather."""
        return f"mcp weather for {city}"

    port = _free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    app = server.streamable_http_app(host="127.0.0.1")
    http = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(http.serve())
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while not http.started:  # uvicorn exposes no awaitable for "listening"
            if task.done() or loop.time() > deadline:
                raise RuntimeError("the MCP server did not start")
            await asyncio.sleep(0.05)
        async with Client(url) as client:
            assert {t.name for t in (await client.list_tools()).tools} == {"forecast", "weather"}
        yield url
    finally:
        http.should_exit = True
        await asyncio.wait_for(task, 20)


async def test_mcp_server_tools_join_the_merge_and_win_clashes(agents: Agents) -> None:
    agent = agents.spawn(ScriptedAgent)
    async with mcp_server() as url:
        server_id = await agent.add_mcp_server.remote("forecasts", url)
        assert await agent.mcp_servers.remote() == [{"id": server_id, "name": "forecasts", "url": url}]
        message = plan(("forecast", {"city": "Bergen", "days": 3}), ("weather", {"city": "Bergen"}))
        answer = outcome((await agent.chat.remote(message)).text)
    assert {"forecast", "weather", "read", "bash"} <= set(answer["tools"])
    assert answer["results"] == [
        {"tool": "forecast", "content": "3 days of rain in Bergen"},
        {"tool": "weather", "content": "mcp weather for Bergen"},  # MCP comes after get_tools()
    ]
    assert answer["descriptions"]["weather"] == "The MCP server's weather."


async def test_removed_mcp_server_contributes_nothing(agents: Agents) -> None:
    agent = agents.spawn(ScriptedAgent)
    async with mcp_server() as url:
        server_id = await agent.add_mcp_server.remote("forecasts", url)
        await agent.remove_mcp_server.remote(server_id)
        answer = outcome((await agent.chat.remote(plan(("weather", {"city": "Oslo"})))).text)
    assert "forecast" not in answer["tools"]
    assert answer["results"] == [{"tool": "weather", "content": "sunny in Oslo"}]
    with pytest.raises(LookupError):
        await agent.remove_mcp_server.remote(server_id)


async def test_include_mcp_tools_false_keeps_them_out_but_the_connection_stored(agents: Agents) -> None:
    agent = agents.spawn(NoMcpAgent)
    async with mcp_server() as url:
        await agent.add_mcp_server.remote("forecasts", url)
        answer = outcome((await agent.chat.remote(plan())).text)
    assert "forecast" not in answer["tools"]
    assert len(await agent.mcp_servers.remote()) == 1
