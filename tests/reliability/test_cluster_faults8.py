"""Cluster faults of closing and listing: ``close_owners`` on a dedicated owner (its clients go on at
once, through a new owner), and ``computer ls`` after a Redis restored from a dump taken before a
deletion (the listing agrees with what opening the name does)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import ray

import computer
from computer.actors import close_owners
from computer.actors.raycompat import actor_id
from computer.client._connection import Connection


async def test_a_client_of_a_dedicated_owner_closed_by_close_owners_goes_on_through_a_new_owner(
    ray_session: Any, tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``close_owners`` closes a dedicated owner: its lease released, the workspace asleep. A client
    that held it sends its next call: "moved", and it re-resolves. Before, the owner actor stayed up
    after its close (only hibernation made it exit), holding its Ray name and answering every call
    "moved": each re-resolution found that same actor again, until the client's 30 s "moved" deadline
    ended the call with ``WorkspaceUnavailableError`` ("its owner did not come back in time"). Now the
    closed owner exits, as a hibernating one does: the call is answered by a new owner actor."""
    computer.init(data_dir=tmp_path / "data", owners="dedicated")
    reresolves: list[Any] = []
    reresolve = Connection._reresolve

    async def counted(self: Connection, stale: Any, *, backoff: bool = False) -> None:
        reresolves.append(actor_id(stale))
        await reresolve(self, stale, backoff=backoff)

    monkeypatch.setattr(Connection, "_reresolve", counted)
    try:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file("/kept", b"kept")
            closed = ws.handle
            assert await close_owners([name]) == 1
            assert await ws.fs.read_file("/kept") == b"kept"  # before: unavailable after 30 s
            assert actor_id(ws.handle) != actor_id(closed)  # a new owner answered
            assert reresolves and set(reresolves) == {actor_id(closed)}  # from the closed one only
            with pytest.raises(ray.exceptions.RayActorError):  # the closed owner exited
                await closed.__ray_ready__.remote()
    finally:
        computer.init(data_dir=tmp_path / "data")
