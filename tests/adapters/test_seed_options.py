"""The seed's documented option spelling works in every adapter factory, nested keys included."""

from __future__ import annotations

import json
from typing import Any

import pytest

import computer
from computer.tools.langchain import create_langchain_tools
from computer.tools.mcp import create_mcp_server
from computer.tools.openai import create_openai_tools
from computer.tools.pydantic_ai import create_pydantic_ai_tools

SEED_READ = {"maxBytes": 4096, "includeLineNumbers": True, "lineTruncation": {"chars": 4}}


@pytest.mark.parametrize(
    "factory", [create_openai_tools, create_langchain_tools, create_mcp_server, create_pydantic_ai_tools]
)
async def test_seed_spelled_options_are_accepted_by_every_adapter(factory: Any) -> None:
    async with computer.Workspace() as ws:
        factory(ws, read=SEED_READ, write={"maxBytes": 10}, edit={"maxBytes": 10})
        with pytest.raises(ValueError, match="includeLineNumber"):
            factory(ws, read={"includeLineNumber": True})


async def test_seed_spelled_read_options_shape_what_the_model_reads() -> None:
    async with computer.Workspace() as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/a.txt", "alphabet\nbe\n")
        _, execute = create_openai_tools(ws, read=SEED_READ)
        out = await execute(
            {"function": {"name": "read", "arguments": json.dumps({"path": "/workspace/a.txt"})}}
        )
    assert out["content"][0]["text"] == "1\talph... (truncated)\n2\tbe"
