"""Fixtures of the abuse tests: one shell and one python backend per session, a fresh workspace per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import computer
from computer.actors import NAMESPACE, actor_name
from computer.assets import SqliteAssetStore
from computer.config import Settings
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


@pytest.fixture
def cluster(ray_session: Any, tmp_path: Path) -> Settings:
    """``computer.init`` over the shared Ray session with a fresh data directory (pools of 2 + 2)."""
    return computer.init(data_dir=tmp_path / "data", shell_pool_size=2, python_pool_size=2)


@pytest.fixture
def name(ray_session: Any) -> Iterator[str]:
    """A workspace name no other test uses; its owner is stopped after the test."""
    workspace = f"sec-{uuid.uuid4().hex[:12]}"
    yield workspace
    for each in (workspace, f"{workspace}-other"):
        try:
            ray_session.kill(ray_session.get_actor(actor_name(each), namespace=NAMESPACE))
        except ValueError:
            pass
