"""The rename machine (``tests/fidelity/test_rename_machine.py``) through Ray: a client of a named
workspace, its owner actor and the shell pool's workers (a live sandbox pinned to one of them), the
owner restarted on a reopen (a new actor over the same SQLite file). What only this path has is
exercised by the same random sequences: pushes prefetched by the dispatcher, small pulls deferred to
it, renames of large files kept by reference through the owner, inode claims across owner restarts.
Run randomized (more examples, ``derandomize=False``), it found a live sandbox walking its whole tree
at every sync after a program moved a directory (fixed; ``tests/runtime/test_live.py`` pins it)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fidelity._support import ROOT
from fidelity.test_rename_machine import RenameMachine, exercise

import computer
from computer.config import Settings


class PoolRenameMachine(RenameMachine):
    def __init__(self) -> None:
        self.name = f"pools-rm-{uuid.uuid4().hex[:12]}"
        super().__init__()

    async def _open(self) -> Any:  # a WorkspaceClient: the same surface
        ws = await computer.get_workspace(self.name)
        if not await ws.fs.exists(ROOT):
            await ws.fs.mkdir(ROOT)
        return ws

    def _restart(self) -> None:
        self._stop_owner()

    def _stop_owner(self) -> None:
        import ray

        from computer.actors import NAMESPACE, actor_name

        try:
            ray.kill(ray.get_actor(actor_name(self.name), namespace=NAMESPACE))
        except ValueError:
            pass  # never made, or gone already

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            self._stop_owner()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_pool_keeps_files_through_workspace_renames(cluster: Settings, record_property: Any) -> None:
    exercise(PoolRenameMachine, record_property)
