"""Hypothesis state machine: random tool calls through a client, with random kills of the owner in
between, checked against a model. No acknowledged write may be lost; a call cut by a kill may have
landed or not (either is accepted, then pinned by the next read), never anything else."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
import ray
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from owner_models import awake_owner, kill_owner_now

import computer
from computer.actors import WorkspaceUnavailableError
from computer.config import Settings
from computer.tools import create_tools

T = TypeVar("T")
PATHS = st.sampled_from([f"/m/{name}.txt" for name in ("a", "b", "c", "d")])
TEXT = st.text(alphabet="xyz \n", min_size=1, max_size=40).map(lambda s: s + "!")

stats = {"kills": 0, "steps": 0, "unknown_outcomes": 0, "lost": 0}


async def _open(name: str) -> Any:
    return await computer.get_workspace(name)


class KillMachine(RuleBasedStateMachine):
    """Model: path -> set of contents the workspace may hold (one element once the outcome is known)."""

    name = ""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.model: dict[str, set[str | None]] = {}
        self.ws: Any = None
        self.tools: dict[str, Any] = {}

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    @initialize()
    def open(self) -> None:
        self.ws = self.run(_open(KillMachine.name))
        self.tools = create_tools(self.ws)
        self.run(self.ws.fs.rm("/m", recursive=True, force=True))
        self.run(self.ws.fs.mkdir("/m"))

    def _mutated(self, path: str, result: dict[str, Any], new: str | None) -> None:
        stats["steps"] += 1
        if "error" not in result:
            self.model[path] = {new}
        elif "unavailable" in result["error"]:
            stats["unknown_outcomes"] += 1
            self.model[path] = self.model.get(path, {None}) | {new}

    @rule(path=PATHS, text=TEXT)
    def write(self, path: str, text: str) -> None:
        self._mutated(path, self.run(self.tools["write"].run({"path": path, "content": text})), text)

    @rule(path=PATHS, text=TEXT)
    def fs_write(self, path: str, text: str) -> None:
        """A raw client write (no lock call first to absorb the owner's death): EAGAIN is possible."""
        try:
            self.run(self.ws.fs.write_file(path, text))
            self._mutated(path, {}, text)
        except WorkspaceUnavailableError:
            self._mutated(path, {"error": "workspace unavailable"}, text)

    @precondition(lambda self: any(len(v) == 1 and None not in v for v in self.model.values()))
    @rule(data=st.data())
    def edit(self, data: st.DataObject) -> None:
        known = sorted(p for p, v in self.model.items() if len(v) == 1 and None not in v)
        path = data.draw(st.sampled_from(known))
        old = next(iter(self.model[path]))
        assert old is not None
        new = old + "+"
        args = {"path": path, "edits": [{"oldText": old, "newText": new}]}
        self._mutated(path, self.run(self.tools["edit"].run(args)), new)

    @rule(path=PATHS)
    def delete(self, path: str) -> None:
        self._mutated(path, self.run(self.tools["delete"].run({"path": path})), None)

    @rule(path=PATHS)
    def read(self, path: str) -> None:
        stats["steps"] += 1
        exists = self.run(self.ws.fs.exists(path))  # reads ride through kills
        actual = self.run(self.ws.fs.read_text(path)) if exists else None
        allowed = self.model.get(path, {None})
        if actual not in allowed:
            stats["lost"] += 1
        assert actual in allowed, (path, actual, allowed)
        self.model[path] = {actual}

    @rule()
    def kill_owner(self) -> None:
        kill_owner_now(self.ws.handle)  # its host, or its dedicated actor
        stats["kills"] += 1

    @invariant()
    def listing_matches_the_model(self) -> None:
        if self.ws is None:
            return
        listed = set(self.run(self.ws.fs.ls("/m")))
        for path, allowed in self.model.items():
            if len(allowed) == 1:
                assert (path in listed) == (None not in allowed), (path, listed, allowed)

    def teardown(self) -> None:
        if self.ws is not None:
            self.run(self.ws.close())
        self.loop.close()


def test_no_acknowledged_write_is_lost_across_random_owner_kills(
    ray_session: Any, tmp_path: Any, record_property: Any
) -> None:
    config: Settings = computer.init(data_dir=tmp_path / "data", shell_pool_size=0, python_pool_size=0)
    KillMachine.name = f"rel-sm-{uuid.uuid4().hex[:10]}"
    try:
        runner = settings(
            max_examples=8,
            stateful_step_count=12,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        )(KillMachine)
        runner.TestCase().runTest()
    finally:
        owner = asyncio.run(awake_owner(KillMachine.name, config))
        if owner is not None:
            ray.kill(owner)
        computer.init(data_dir=config.data_dir)
    assert stats["lost"] == 0
    assert stats["kills"] > 0
    for key, value in stats.items():
        record_property(f"state_machine_{key}", value)


pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
