"""Elastic pools on a three-node local cluster (``_elastic_cluster.py``, run in a subprocess).

One subprocess for every phase (a cluster costs ~10 s and ~1 GiB to start): a burst grows the pool to
its maximum across nodes while the runs beyond it wait without errors, the pool shrinks back to its
minimum when idle, runs in flight on workers chosen for removal complete exactly once, and a pool
wanting more CPUs than the cluster has leaves a resource demand in Ray's autoscaler state.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).with_name("_elastic_cluster.py")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1000)]


def run_cluster(workdir: Path, *phases: str, timeout: float) -> dict[str, Any]:
    """``_elastic_cluster.py`` in a subprocess (a three-node cluster of its own) through ``phases``
    (default: burst, shrink, removal, demand); its JSON report."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(workdir / "data"), *phases],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=workdir,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["nodes"] == 3, out
    return out


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_cluster(tmp_path_factory.mktemp("elastic"), timeout=900)


def _phase(report: dict[str, Any], name: str) -> dict[str, Any]:
    assert name not in report.get("failed", {}), report["failed"][name]
    phase: dict[str, Any] = report[name]
    return phase


def test_a_burst_grows_the_pool_to_its_maximum_across_nodes_and_the_rest_queue(
    report: dict[str, Any],
) -> None:
    burst = _phase(report, "burst")
    assert burst["statuses"] == ["completed"] * 12 and burst["errors"] == [] and burst["files_ok"]
    assert burst["max"] == 4 and burst["peak_workers"] == 4, burst
    assert burst["peak_nodes"] >= 2, burst
    assert burst["peak_queued"] > 0, burst  # at its maximum the pool queued runs: no error came of it
    assert any(d.startswith("grow by") and "waiting" in d for d in burst["decisions"]), burst["decisions"]


def test_an_idle_pool_shrinks_back_to_its_minimum(report: dict[str, Any]) -> None:
    assert _phase(report, "shrink")["workers"] == 1


def test_runs_in_flight_on_workers_chosen_for_removal_complete_once(report: dict[str, Any]) -> None:
    removal = _phase(report, "removal")
    assert removal["before"] == 4 and len(removal["draining"]) == 2
    assert any(n >= 1 for n in removal["busy_when_chosen"]), removal  # chosen while running a run
    assert removal["statuses"] == ["completed"] * 4 and removal["errors"] == []
    assert removal["files"] == ["x\n"] * 4  # each appended once: no run lost, none run twice
    assert not set(removal["draining"]) & set(removal["left"])  # the drained workers are gone


def test_a_pool_wanting_more_cpus_than_exist_leaves_a_pending_demand_for_the_autoscaler(
    report: dict[str, Any],
) -> None:
    demand = _phase(report, "demand")
    assert demand["pending_workers"] >= 1
    assert any(d.get("CPU", 0) >= 1 for d in demand["demands"]), demand
    assert demand["statuses"] == ["completed"] * 10 and demand["errors"] == []
