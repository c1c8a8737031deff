"""An owner process stopped (SIGSTOP) for longer than its directory lease, then continued (SIGCONT).

Before: every client call, and ``get_workspace`` of the name, waited for as long as the owner stayed
stopped (forever, for a process nobody continues). Now a call the owner leaves unanswered, with a probe
of its process unanswered too, fails with the documented error (a read: ``WorkspaceUnavailableError``;
a mutation: ``OutcomeUnknownError``). No second owner is ever made meanwhile (Ray still lists the
stopped process, and the name is its), so nothing writes the file twice; once continued, the same owner
answers with everything acknowledged before.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from owner_models import owner_process, process_pid

import computer
import computer.client._connection as connection
from computer.actors import OutcomeUnknownError, WorkspaceUnavailableError


@pytest.fixture
def quick_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connection, "PROBE_AFTER", 0.5, raising=False)
    monkeypatch.setattr(connection, "PROBE_TIMEOUT", 2.0, raising=False)


async def test_a_stopped_owner_fails_calls_clearly_and_answers_again_when_continued(
    ray_session: Any, tmp_path: Path, name: str, quick_probes: None
) -> None:
    computer.init(data_dir=tmp_path / "data", lock_lease=1.0)
    try:
        async with computer.get_workspace(name) as ws:
            await ws.fs.write_file("/kept", b"kept")
            epoch = ws._conn.epoch
            pid = await process_pid(owner_process(ws._conn.handle))
            os.kill(pid, signal.SIGSTOP)  # longer than its 1 s lease, and than any probe
            try:
                async with asyncio.timeout(30):  # a hang fails the test here, bounded
                    with pytest.raises(WorkspaceUnavailableError, match="stopped or wedged"):
                        await ws.fs.read_file("/kept")
                    with pytest.raises(OutcomeUnknownError, match="stopped or wedged"):
                        await ws.fs.write_file("/during", b"x")
                    with pytest.raises(WorkspaceUnavailableError, match="stopped or wedged"):
                        async for _ in ws.fs.stream("/kept"):
                            pass
                    with pytest.raises(WorkspaceUnavailableError, match="stopped or wedged"):
                        await computer.get_workspace(name)
            finally:
                os.kill(pid, signal.SIGCONT)
            assert await ws.fs.read_file("/kept") == b"kept"
            assert [piece async for piece in ws.fs.stream("/kept")] == [b"kept"]
            await ws.fs.write_file("/after", b"after")
            async with computer.get_workspace(name) as other:
                assert other._conn.epoch == epoch  # the same owner: none was made beside it
                assert await other.fs.read_file("/after") == b"after"
                assert await process_pid(owner_process(other._conn.handle)) == pid
    finally:
        computer.init(data_dir=tmp_path / "data")
