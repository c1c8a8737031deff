"""The fidelity state machines (``tests/fidelity/test_rename_machine.py``, ``test_sync_machine.py``)
through Ray: clients of named workspaces, their owner actors and the shell pool's workers (a live
sandbox pinned to one of them), the owners restarted on a reopen (new actors over the same SQLite
files). What only this path has is exercised by the same random sequences: pushes prefetched by the
dispatcher, small pulls deferred to it, renames of large files kept by reference through the owner,
workspace changes through a client while a run sleeps, overlapping runs, inode claims across owner
restarts. Run randomized (more examples, ``derandomize=False``), the rename machine found a live
sandbox walking its whole tree at every sync after a program moved a directory (fixed;
``tests/runtime/test_live.py`` pins it)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fidelity import test_rename_machine as rename_machine
from fidelity import test_sync_machine as sync_machine
from fidelity._support import ROOT
from hypothesis import strategies as st
from hypothesis.stateful import rule

import computer
from computer.config import Settings


def _stop_owner(name: str) -> None:
    import ray

    from computer.actors import NAMESPACE, actor_name

    try:
        ray.kill(ray.get_actor(actor_name(name), namespace=NAMESPACE))
    except ValueError:
        pass  # never made, or gone already


async def _opened(name: str) -> Any:
    """A client of workspace ``name`` (the same surface as a ``Workspace``) with the mount root made."""
    ws = await computer.get_workspace(name)
    if not await ws.fs.exists(ROOT):
        await ws.fs.mkdir(ROOT)
    return ws


class PoolRenameMachine(rename_machine.RenameMachine):
    def __init__(self) -> None:
        self.name = f"pools-rm-{uuid.uuid4().hex[:12]}"
        super().__init__()

    async def _open(self) -> Any:
        return await _opened(self.name)

    def _restart(self) -> None:
        _stop_owner(self.name)

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            _stop_owner(self.name)


class PoolSyncMachine(sync_machine.LiveSyncMachine):
    """The live sync machine (a pool's shell backend is live); "other" is a second named workspace,
    and a fresh reopen restarts both owners."""

    def __init__(self) -> None:
        self.name = f"pools-sm-{uuid.uuid4().hex[:12]}"
        super().__init__()

    async def _open(self) -> Any:
        return await _opened(self.name)

    async def _open_other(self) -> Any:
        return await _opened(f"{self.name}-other")

    @rule(fresh=st.booleans())
    def close_and_reopen(self, fresh: bool) -> None:
        self.call(self.ws.close())
        self.call(self.other.close())
        sync_machine.stats["reopens"] += 1
        if fresh:
            _stop_owner(self.name)
            _stop_owner(f"{self.name}-other")
            sync_machine.stats["fresh"] += 1
        self.ws = self.call(self._open())
        self.other = self.call(self._open_other())

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            _stop_owner(self.name)
            _stop_owner(f"{self.name}-other")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_pool_keeps_files_through_workspace_renames(cluster: Settings, record_property: Any) -> None:
    rename_machine.exercise(PoolRenameMachine, record_property)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_pool_syncs_like_the_embedded_live_sandbox(cluster: Settings, record_property: Any) -> None:
    """Nothing lost, nothing skipped, through Ray (the sequential model of the live machine)."""
    sync_machine.exercise(PoolSyncMachine, 6, 12, "pool_live_machine", record_property)
    stats = sync_machine.stats
    assert all(stats[k] for k in ("runs", "in_flight", "concurrent", "evictions", "reopens")), stats
