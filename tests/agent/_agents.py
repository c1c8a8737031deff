"""Agent classes of the tests (module level, so Ray workers import them by reference)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic_ai.models import Model
from pydantic_ai.tools import Tool

from computer.agent import Agent, TurnConfig, TurnContext, tool
from computer.runtime import Backend, PythonBackend, ShellBackend

from ._scripted import scripted_model


def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def read(path: str) -> str:
    """A user tool that shadows the workspace's read."""
    return f"user read of {path}"


async def archive(key: str) -> str:
    """Archive a record; keys starting with 'important' need approval."""
    return f"archived {key}"


class ScriptedAgent(Agent):
    """Shell and python backends in-process; the scripted model; a few tools of its own."""

    def get_model(self) -> Model:
        return scripted_model()

    def get_backends(self) -> Sequence[Backend]:
        return [ShellBackend(), PythonBackend()]

    def get_tools(self) -> Sequence[Any] | Mapping[str, Any]:
        return [
            weather,
            tool(archive, needs_approval=lambda args: str(args["key"]).startswith("important")),
            tool(lambda: "wiped", name="wipe", description="Wipe everything.", needs_approval=True),
        ]


class ShadowingAgent(ScriptedAgent):
    def get_tools(self) -> Sequence[Any] | Mapping[str, Any]:
        return [*super().get_tools(), Tool(read)]


class NoBashAgent(ScriptedAgent):
    workspace_bash = False


class RestrictedAgent(ScriptedAgent):
    """Its turns may only read and ask for weather, plus a turn-only tool."""

    def before_turn(self, ctx: TurnContext) -> TurnConfig:
        def emergency() -> str:
            """Only exists during this turn."""
            return f"emergency during turn {ctx.history_length}"

        return TurnConfig(active_tools=["read", "weather"], tools=[emergency])


class CodeAgent(ScriptedAgent):
    """With ``execute`` among its tools and the extension tools for the model."""

    extension_tools = True

    def get_tools(self) -> Sequence[Any] | Mapping[str, Any]:
        return [*super().get_tools(), self.create_execute_tool()]


class QuickCodeAgent(CodeAgent):
    """``execute`` and extension runs are cut after 1.5 s."""

    execute_timeout = 1.5


class RestrictedCodeAgent(CodeAgent):
    """Its turns may only run code and ask for weather."""

    def before_turn(self, ctx: TurnContext) -> TurnConfig:
        return TurnConfig(active_tools=["execute", "weather"])


class NoMcpAgent(ScriptedAgent):
    include_mcp_tools = False


class SleepyAgent(ScriptedAgent):
    """Hibernates after half a second idle."""

    hibernate_after = 0.5


class LightAgent(Agent):
    """No backends (no sandbox start-up): what the scale test runs many of."""

    hibernate_after = 1.0

    def get_model(self) -> Model:
        return scripted_model()

    def get_backends(self) -> Sequence[Backend]:
        return []


class PoolAgent(Agent):
    """Default backends: the cluster's shell and python pools (``owner_backends``)."""

    def get_model(self) -> Model:
        return scripted_model()

    def get_tools(self) -> Sequence[Any] | Mapping[str, Any]:
        return [weather, self.create_execute_tool()]
