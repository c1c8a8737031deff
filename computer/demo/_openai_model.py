"""A real chat model behind any OpenAI-compatible ``/chat/completions`` endpoint, over httpx.

Configured from the environment like the official clients: ``OPENAI_BASE_URL`` (default
``https://api.openai.com/v1``) and ``OPENAI_API_KEY``.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

__all__ = ["DEFAULT_BASE_URL", "ModelError", "OpenAIChatModel"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class ModelError(RuntimeError):
    """The endpoint refused or garbled a completion."""


class OpenAIChatModel:
    """``complete(messages, tools)`` through ``POST {base_url}/chat/completions``."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.name = model
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = client or httpx.AsyncClient(timeout=timeout, headers=headers)

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        """The assistant message answering ``messages`` (tool calls kept in OpenAI's shape)."""
        body = {"model": self.name, "messages": messages, "tools": tools, "tool_choice": "auto"}
        try:
            response = await self._client.post(f"{self.base_url}/chat/completions", json=body)
        except httpx.HTTPError as exc:
            raise ModelError(f"{self.base_url}: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise ModelError(f"{self.base_url} answered {response.status_code}: {response.text[:500]}")
        try:
            message = response.json()["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ModelError(f"{self.base_url} sent no chat completion: {response.text[:500]}") from exc
        # Echo back only what the API accepts in a request (responses carry extra fields, e.g. refusal).
        reply: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            reply["tool_calls"] = [
                {"id": c["id"], "type": "function", "function": c["function"]} for c in message["tool_calls"]
            ]
        return reply

    async def aclose(self) -> None:
        await self._client.aclose()
