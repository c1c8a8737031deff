"""Runs pinned to a full worker make an elastic pool grow (issue 23), on a three-node local cluster.

``_elastic_cluster.py DATA pinned`` in a subprocess (a cluster of its own): two workspaces whose live
sandboxes share the pool's one worker (one run at a time) run together, round after round, so one run
of every round waits pinned behind the other. Only pinned runs wait: before, the control loop counted
none of them as demand, the pool stayed at one worker and every round ran one run after the other.
Now the wait grows the pool (no worker had a free slot), and a later round's run finds its worker full
and the new one free: its idle sandbox is ended and the run starts on the new worker (``moved``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .test_elastic import run_cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_runs_waiting_for_their_live_sandbox_on_a_full_pool_grow_it_and_move(tmp_path: Path) -> None:
    report: dict[str, Any] = run_cluster(tmp_path, "pinned", timeout=500)
    assert "failed" not in report, report["failed"]
    pinned = report["pinned"]
    assert pinned["workers_at_start"] == 1, pinned  # both sandboxes on the one worker
    assert set(pinned["statuses"]) == {"completed"} and pinned["files_ok"], pinned
    assert any("for their live sandbox" in d or "for its live sandbox" in d for d in pinned["decisions"]), (
        pinned
    )
    assert max(r["workers"] for r in pinned["rounds"]) == 2, pinned  # the pool grew for the pinned wait
    assert pinned["rounds"][-1]["moved"] >= 1, pinned  # and a pinned run moved to the new worker
