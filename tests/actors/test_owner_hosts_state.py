"""Hypothesis state machine over one owner host (``owners="hosted"``): three neighbour workspaces,
random writes and reads through clients, random closes of one workspace inside the host (a
hibernation in place), kills of the host (restarted in place by Ray, or for good). Checked against a
model: no acknowledged write lost, a write cut by a kill either landed or not, and the neighbours
always share one host process."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
import ray
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import computer
from computer.actors import WorkspaceUnavailableError
from computer.actors._hosts import HostedHandle, kill_hosts
from computer.config import Settings

T = TypeVar("T")
WORKSPACES = st.sampled_from([0, 1, 2])
PATHS = st.sampled_from(["/a", "/b"])
TEXT = st.text(alphabet="xyz", min_size=1, max_size=12)

stats = {"kills": 0, "closes": 0, "unknown": 0, "steps": 0}


class HostMachine(RuleBasedStateMachine):
    prefix = ""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clients: list[Any] = []
        self.model: dict[tuple[int, str], set[str | None]] = {}

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    @initialize()
    def open(self) -> None:
        run = uuid.uuid4().hex[:6]
        for i in range(3):
            client = self.run(computer.get_workspace(f"{HostMachine.prefix}-{run}-{i}"))
            assert isinstance(client.handle, HostedHandle)
            self.clients.append(client)

    @rule(ws=WORKSPACES, path=PATHS, text=TEXT)
    def write(self, ws: int, path: str, text: str) -> None:
        stats["steps"] += 1
        try:
            self.run(self.clients[ws].fs.write_file(path, text))
        except WorkspaceUnavailableError:  # cut by a kill: landed or not
            stats["unknown"] += 1
            self.model[(ws, path)] = self.model.get((ws, path), {None}) | {text}
            return
        self.model[(ws, path)] = {text}

    @rule(ws=WORKSPACES, path=PATHS)
    def read(self, ws: int, path: str) -> None:
        stats["steps"] += 1
        fs = self.clients[ws].fs
        actual = self.run(fs.read_text(path)) if self.run(fs.exists(path)) else None
        allowed = self.model.get((ws, path), {None})
        assert actual in allowed, (ws, path, actual, allowed)
        self.model[(ws, path)] = {actual}

    @rule(ws=WORKSPACES)
    def close_in_host(self, ws: int) -> None:
        handle = self.clients[ws].handle
        try:
            self.run(handle.host.close_workspace.remote(handle.name))
            stats["closes"] += 1
        except ray.exceptions.RayActorError:
            pass  # the host was killed: nothing open to close

    @rule(restart=st.booleans())
    def kill_host(self, restart: bool) -> None:
        ray.kill(self.clients[0].handle.host, no_restart=not restart)
        stats["kills"] += 1

    @invariant()
    def neighbours_share_one_host_process(self) -> None:
        if not self.clients:
            return
        seen = []
        for _ in range(3):  # a host ending (idle, or killed) between two clients' answers: ask again
            pids = set()
            for client in self.clients:
                for _ in range(3):  # a stats call cut by a kill: ask again (the client re-resolved)
                    try:
                        self.run(client.fs.exists("/"))  # heals a handle a kill made stale
                        pids.add(int(self.run(client.handle.stats.remote())["pid"]))
                        break
                    except (ray.exceptions.RayActorError, WorkspaceUnavailableError, TypeError):
                        continue
            if len(pids) <= 1:
                return
            seen.append(pids)
            self.run(asyncio.sleep(0.5))
        raise AssertionError(f"neighbours answered from several host processes three times: {seen}")

    def teardown(self) -> None:
        for client in self.clients:
            self.run(client.close())
        self.loop.close()


def test_neighbours_on_a_host_lose_no_acknowledged_write_across_closes_and_kills(
    ray_session: Any, tmp_path: Any, record_property: Any
) -> None:
    config: Settings = computer.init(
        data_dir=tmp_path / "data",
        owners="hosted",
        owner_hosts_per_node=1,
        shell_pool_size=0,
        python_pool_size=0,
    )
    HostMachine.prefix = f"hsm-{uuid.uuid4().hex[:8]}"
    try:
        runner = settings(
            max_examples=4,
            stateful_step_count=12,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
            derandomize=True,  # the same examples every run: the kills and closes below always happen
        )(HostMachine)
        runner.TestCase().runTest()
    finally:
        kill_hosts(config)
        computer.init(data_dir=config.data_dir)
    for key, value in stats.items():
        record_property(f"host_machine_{key}", value)
    assert stats["kills"] > 0 and stats["closes"] > 0, stats


pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
