"""Each adapter imports only its own library; ``computer`` and ``computer.tools`` import none of them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

LIBRARIES = ("pydantic_ai", "langchain_core", "langgraph", "mcp", "openai", "anthropic")


def loaded_after(statement: str) -> set[str]:
    code = (
        f"import sys, json\n{statement}\n"
        f"print(json.dumps([m for m in {list(LIBRARIES)!r} if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_importing_computer_and_its_tools_loads_no_agent_library() -> None:
    stmt = "import computer, computer.tools, computer.tools.exec; from computer.tools import create_tools"
    assert loaded_after(stmt) == set()


@pytest.mark.parametrize(
    ("module", "allowed"),
    [
        ("computer.tools.openai", set()),
        ("computer.tools.pydantic_ai", {"pydantic_ai"}),
        ("computer.tools.langchain", {"langchain_core"}),
        ("computer.tools.mcp", {"mcp"}),
    ],
)
def test_each_adapter_imports_only_its_own_library(module: str, allowed: set[str]) -> None:
    loaded = loaded_after(f"import {module}")
    assert loaded <= allowed, f"{module} loaded {sorted(loaded - allowed)}"
    assert allowed <= loaded
