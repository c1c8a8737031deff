"""``computer status``'s view of one exec pool: its limits, workers, queue, waits and recent decisions.

Built by the control loop (:meth:`~computer.actors._pool_scaler.PoolScaler.status`) from what it keeps
of a pool (``_Pool``: the workers' latest load reports, the waits and admissions of the last
:data:`~computer.actors._pool_scaler.WINDOW` seconds, the decisions).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._pool_admission import LoadReport
    from ._pool_scaler import _Pool

__all__ = ["pool_status"]


def pool_status(pool: _Pool, window: float, span: float) -> dict[str, Any]:
    """``pool``'s state; waits and runs/s over the last ``window`` seconds (``span``: of them, those
    the control loop has been running)."""
    now = time.monotonic()
    waits = sorted(w for t, w in pool.waits if now - t <= window)
    admitted = sum(n for t, n in pool.admitted if now - t <= window)
    limits = pool.limits
    reports = _reports(pool)
    return {
        "min": limits.min_workers if limits else None,
        "max": pool.max_workers,
        "max_setting": limits.max_workers if limits else None,
        "target": limits.target if limits else None,
        "worker_cpus": limits.worker_cpus if limits else None,
        "idle_after": limits.idle_after if limits else None,
        "workers": [
            {
                "name": w.name,
                "state": w.state,
                "node_id": w.node_id,
                "cpus": w.cpus,
                "target": w.target,
                "running": w.report.running if w.report else 0,
                "queued": w.report.queued if w.report else 0,
                "idle_for": w.report.idle_for if w.report else 0.0,
                "live_sandboxes": w.report.live_sandboxes if w.report else 0,
                "pinned_queued": w.report.pinned_queued if w.report else 0,
                # What a pinned run's move is weighed with here (``_pool_moves``), seconds.
                "slot_time": w.report.slot_time if w.report else 0.0,
                "move_cost": w.report.move_cost if w.report else 0.0,
            }
            for w in sorted(pool.workers.values(), key=lambda w: w.index)
        ],
        "queued": sum(r.queued for r in reports),
        # Of ``queued``: runs waiting for their worker because their live sandbox is there (it runs
        # processes, which moving would end, or no worker had a free slot: the pool grows for them then).
        "pinned_queued": sum(r.pinned_queued for r in reports),
        "moved": pool.moved,  # runs whose idle live sandbox was ended to run elsewhere
        # Runs sent movable to their full worker that waited there: a slot was due sooner than a move.
        "stayed": pool.stayed,
        "running": sum(r.running for r in reports),
        "wait_p50": _quantile(waits, 0.5),
        "wait_p99": _quantile(waits, 0.99),
        "waits_counted": len(waits),
        "runs_per_s": admitted / span,
        "decisions": list(pool.decisions)[-20:],
    }


def _reports(pool: _Pool) -> list[LoadReport]:
    return [w.report for w in pool.workers.values() if w.report is not None and w.state != "pending"]


def _quantile(ordered: Sequence[float], q: float) -> float | None:
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
