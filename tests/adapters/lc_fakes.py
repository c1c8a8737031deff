"""A fake chat model for LangGraph agents: replays scripted AI messages and accepts ``bind_tools``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage


class ScriptedChatModel(GenericFakeChatModel):
    """Answers each turn with the next scripted message; remembers which tools each turn was bound to."""

    bound: list[list[str]] = []  # noqa: RUF012 - pydantic copies the default per instance
    seen: list[list[BaseMessage]] = []  # noqa: RUF012

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        self.bound.append([getattr(t, "name", None) or t["function"]["name"] for t in tools])
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def tool_calls_turn(*calls: tuple[str, dict[str, Any]], prefix: str = "call") -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[
            {"name": name, "args": args, "id": f"{prefix}_{i}", "type": "tool_call"}
            for i, (name, args) in enumerate(calls)
        ],
    )


def scripted(*turns: AIMessage) -> ScriptedChatModel:
    return ScriptedChatModel(messages=iter([*turns, AIMessage(content="done")]), bound=[], seen=[])
