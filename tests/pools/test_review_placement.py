"""Review of issue 23's placement bullets, without Ray.

- "prefer the node of the workspace's owner": a run goes to a worker with a free slot on the owner's
  node even when a worker on another node is less loaded, and spills over to the other node only when
  the owner's node has no free slot (``PoolBackend._pick`` through ``PoolBackend.run``, over fake
  worker handles that record the orders they get).
- "workers request real resources (num_cpus, memory) ... spread over nodes": the options a worker
  actor is created with (``create_worker`` over a recording stand-in for the actor class).
"""

from __future__ import annotations

from typing import Any

import pytest

from computer.actors import _pool_registry, pools
from computer.actors._pool_scaler import PoolView, WorkerView
from computer.runtime import ExecRequest, ExitEvent
from computer.runtime.types import BackendInfo

from .pool_helpers import ScriptedWorker


async def _dispatch(monkeypatch: pytest.MonkeyPatch, near_load: int, runs: int = 8) -> dict[str, int]:
    """``runs`` runs of as many workspaces from an owner on node ``n``; how many each worker got."""
    monkeypatch.setattr(pools, "VIEW_TTL", 1e9)  # the view given here stays (no control loop)
    monkeypatch.setitem(pools._infos, "shell", BackendInfo(id="shell", protocol="command", callable=False))
    workers = {n: ScriptedWorker(n, lambda _: [ExitEvent(0)]) for n in ("near", "far")}
    for k in range(runs):
        # Owner and node given: nothing asks Ray. Target 4 runs at once per worker.
        backend = pools.PoolBackend("shell", owner=object(), node="n")
        backend._take_view(
            PoolView(
                "shell",
                (WorkerView("near", "n", 4, near_load, False), WorkerView("far", "m", 4, 0, False)),
                pending=0,
            )
        )
        for name, worker in workers.items():
            backend._slots[name].handle = worker

        class Ctx:
            workspace_id = f"ws-{k}"

        request = ExecRequest(id=f"r{k}", backend="shell", source="true")
        assert [e async for e in backend.run(request, Ctx())] == [ExitEvent(0)]
    return {name: len(worker.orders) for name, worker in workers.items()}


async def test_a_run_prefers_a_free_worker_on_its_owners_node_over_a_less_loaded_one_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert await _dispatch(monkeypatch, near_load=3) == {"near": 8, "far": 0}


async def test_a_run_spills_over_to_another_node_when_its_owners_node_is_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert await _dispatch(monkeypatch, near_load=4) == {"near": 0, "far": 8}


class _Recorded:
    """Stands in for the worker actor class: records ``.options(**options).remote(*args)``."""

    def __init__(self) -> None:
        self.options_seen: list[dict[str, Any]] = []

    def options(self, **options: Any) -> _Recorded:
        self.options_seen.append(options)
        return self

    def remote(self, *args: Any) -> str:
        return "handle"


@pytest.mark.parametrize(("memory", "node_id"), [(512 * 1024 * 1024, None), (64 * 1024 * 1024, "ab" * 28)])
def test_a_worker_reserves_its_cpus_and_memory_and_spreads_unless_given_a_node(
    monkeypatch: pytest.MonkeyPatch, memory: int, node_id: str | None
) -> None:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    recorded = _Recorded()
    monkeypatch.setattr(_pool_registry, "_worker_class", lambda: recorded)
    handle = _pool_registry.create_worker("shell", 3, cpus=1.5, memory=memory, target=6, node_id=node_id)
    assert handle == "handle"
    (options,) = recorded.options_seen
    assert options["num_cpus"] == 1.5 and options["memory"] == memory
    assert options["name"] == _pool_registry.worker_name("shell", 3)
    strategy = options["scheduling_strategy"]
    if node_id is None:
        assert strategy == "SPREAD"
    else:
        assert isinstance(strategy, NodeAffinitySchedulingStrategy)
        assert strategy.node_id == node_id and strategy.soft
