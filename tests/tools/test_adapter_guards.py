"""Guards of the adapters that a spelling used to slip past (s48 findings)."""

from __future__ import annotations

import pytest

from computer import Workspace


@pytest.mark.parametrize(
    "path", ["/workspace", "/", "//workspace", "/alias/workspace", "/alias//workspace/."]
)
async def test_pydantic_ai_workspace_remove_refuses_every_spelling_of_the_working_dir(
    workspace: Workspace, path: str
) -> None:
    from computer.tools.pydantic_ai_workspace import ComputerWorkspaceBackend

    backend = ComputerWorkspaceBackend(workspace)
    await backend.write_bytes("/workspace/notes.md", b"precious")
    await workspace.fs.symlink("/", "/alias")
    with pytest.raises(ValueError, match="working directory"):
        await backend.remove(path)
    assert await workspace.fs.read_file("/workspace/notes.md") == b"precious"


async def test_pydantic_ai_workspace_remove_of_a_link_to_the_working_dir_removes_the_link(
    workspace: Workspace,
) -> None:
    from computer.tools.pydantic_ai_workspace import ComputerWorkspaceBackend

    backend = ComputerWorkspaceBackend(workspace)
    await backend.write_bytes("/workspace/notes.md", b"precious")
    await workspace.fs.symlink("/workspace", "/workspace/here")
    await backend.remove("/workspace/here")
    assert not await workspace.fs.exists("/workspace/here")
    assert await workspace.fs.read_file("/workspace/notes.md") == b"precious"
