"""Durable agents: an ``Agent`` actor owns one workspace and runs a pydantic-ai loop per turn.

::

    @ray.remote
    class Helper(computer.agent.Agent):
        def get_model(self): return OpenAIChatModel("gpt-5")
        def get_tools(self): return [lookup_order]

    helper = computer.agent.spawn(Helper, "agent-7")
    reply = await helper.chat.remote("Where is order 12?")
"""

from __future__ import annotations

from ._agent import Agent
from ._client import AgentClient
from ._extensions import ExtensionManifest
from ._spawn import agent_actor_name, spawn
from ._store import AgentStateError
from ._tools import AgentTool, tool
from ._turn import AgentMovedError, PendingCall, Reply, TurnBusyError, TurnConfig, TurnContext

__all__ = [
    "Agent",
    "AgentClient",
    "AgentMovedError",
    "AgentStateError",
    "AgentTool",
    "ExtensionManifest",
    "PendingCall",
    "Reply",
    "TurnBusyError",
    "TurnConfig",
    "TurnContext",
    "agent_actor_name",
    "spawn",
    "tool",
]
