"""Fixtures of the abuse tests: one shell and one python backend per session, a fresh workspace per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import computer
from computer.assets import SqliteAssetStore
from computer.runtime import PythonBackend, ShellBackend
from computer.tools import Tool, create_tools


@pytest.fixture(scope="session")
def shell() -> ShellBackend:
    return ShellBackend()


@pytest.fixture(scope="session")
def python() -> PythonBackend:
    return PythonBackend()


@pytest.fixture
async def ws(shell: ShellBackend, python: PythonBackend, tmp_path: Path) -> AsyncIterator[computer.Workspace]:
    """A file-backed workspace (a flood must not live in this process's memory), both backends, assets."""
    workspace = computer.Workspace(
        str(tmp_path / "ws.sqlite"), backends=[shell, python], assets=SqliteAssetStore(tmp_path / "assets")
    )
    await workspace.fs.mkdir("/workspace", recursive=True)
    yield workspace
    await workspace.close()


@pytest.fixture
def tools(ws: computer.Workspace) -> dict[str, Tool]:
    owner: Any = ws  # the owner serves the workspace surface the tools expect
    return create_tools(owner)
