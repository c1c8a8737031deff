"""The fault-injection suite (issue 25 item 7): clients in two processes, owners, pool workers and
Redis killed at random moments, every history checked (see ``_faults.py``). Short by default;
``COMPUTER_FAULTS_SECONDS`` (or ``benchmarks/soak.py --faults``) runs it longer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import computer

from ._faults import run
from .test_redis_restart import RedisProcess

SECONDS = float(os.environ.get("COMPUTER_FAULTS_SECONDS", "25"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "exec_share",
    [pytest.param(0.0, id="fs-and-locks"), pytest.param(0.03, id="with-shell")],
)
async def test_histories_under_random_faults_are_linearizable(
    ray_session: Any, tmp_path: Path, record_property: Any, exec_share: float
) -> None:
    redis = RedisProcess(tmp_path, persistent=True)
    redis.start()
    computer.init(
        data_dir=tmp_path / "data", redis_url=redis.url, lock_lease=3.0, shell_pool_size=1, python_pool_size=1
    )
    try:
        report = await run(
            seconds=SECONDS, clients_per_process=2, every=(1.0, 3.0), redis=redis, exec_share=exec_share
        )
    finally:
        computer.init(data_dir=tmp_path / "data")
        if redis.proc is not None:
            redis.stop()
    print(report.as_dict())
    record_property("fault_injection_operations", report.operations)
    record_property("fault_injection_faults", sum(report.faults.values()))
    record_property("fault_injection_anomalies", len(report.anomalies))
    assert report.operations > 50, report.as_dict()
    assert sum(report.faults.values()) >= 3, report.as_dict()
    assert report.anomalies == [], report.as_dict()


@pytest.mark.slow
def test_the_soak_scripts_fault_run_works_as_a_user_runs_it(tmp_path: Path) -> None:
    """``benchmarks/soak.py --faults`` imports this suite's workload and Redis server; run as a user runs
    it (a fresh interpreter outside pytest, which puts the suite's shared modules on the path) it must
    find them and report. It failed with ``ModuleNotFoundError: No module named 'owner_models'``."""
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "soak.py"
    out = tmp_path / "soak.json"
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run(
        [
            sys.executable,
            str(script),
            "--faults",
            "--minutes",
            "0.01",
            "--exec-share",
            "0",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["anomalies"] == []
    assert report["counter_final"] >= report["counter_acknowledged"] > 0
