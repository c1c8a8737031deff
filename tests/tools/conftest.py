"""Fixtures for the tool tests: a workspace, its tool set, and the file stores the file tools run over.

``files`` is parametrised: every test that takes it runs once over a ``WorkspaceFileStore`` and once
over ``DirectoryFileStore`` (a custom store over a host directory), through the same tool factories.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from computer import Workspace
from computer.storage.paths import canonical, split
from computer.tools import (
    FileStore,
    Tool,
    WorkspaceFileStore,
    create_delete_tool,
    create_edit_tool,
    create_read_tool,
    create_tools,
    create_write_tool,
)

from .directory_store import DirectoryFileStore


@pytest.fixture
async def workspace() -> AsyncIterator[Workspace]:
    ws = Workspace()
    yield ws
    await ws.close()


@pytest.fixture
def tools(workspace: Workspace) -> dict[str, Tool]:
    return create_tools(workspace)


async def put(workspace: Workspace, path: str, data: bytes | str, mode: int | None = None) -> None:
    """Write a file straight through the fs (parents created)."""
    parent, _ = split(canonical(path))
    await workspace.fs.mkdir(parent, recursive=True)
    await workspace.fs.write_file(path, data, mode=mode)


@dataclass
class Files:
    """One file store under test, with direct access to its files (bypassing the tools)."""

    kind: str
    store: FileStore
    workspace: Workspace | None = None
    root: Path | None = None

    async def put(self, path: str, data: bytes | str, mode: int | None = None) -> None:
        raw = data.encode() if isinstance(data, str) else data
        if self.workspace is not None:
            await put(self.workspace, path, raw, mode)
            return
        assert self.root is not None
        host = self.root / canonical(path).lstrip("/")
        host.parent.mkdir(parents=True, exist_ok=True)
        host.write_bytes(raw)
        if mode is not None:
            os.chmod(host, mode)

    async def get(self, path: str) -> bytes:
        if self.workspace is not None:
            return await self.workspace.fs.read_file(path)
        assert self.root is not None
        return (self.root / canonical(path).lstrip("/")).read_bytes()

    async def mode(self, path: str) -> int:
        stat = await self.store.stat(path)
        assert stat is not None and stat.mode is not None
        return stat.mode

    async def exists(self, path: str) -> bool:
        return await self.store.stat(path) is not None

    def read(self, **options: Any) -> Tool:
        return create_read_tool(self.store, **options)

    def write(self, **options: Any) -> Tool:
        return create_write_tool(self.store, **options)

    def edit(self, **options: Any) -> Tool:
        return create_edit_tool(self.store, **options)

    def delete(self) -> Tool:
        return create_delete_tool(self.store)


@pytest.fixture(params=["workspace", "directory"])
async def files(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Files]:
    if request.param == "workspace":
        ws = Workspace()
        yield Files("workspace", WorkspaceFileStore(ws), workspace=ws)
        await ws.close()
    else:
        yield Files("directory", DirectoryFileStore(tmp_path), root=tmp_path)
