"""Stop the whole Ray cluster and start a new one on the same data directory: every workspace is intact.

Each cluster runs in its own subprocess (``_cluster_restart_script.py``), bounded in time.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from child_json import child_report

SCRIPT = Path(__file__).with_name("_cluster_restart_script.py")


def _run(mode: str, data_dir: Path) -> dict[str, str]:
    env = {**os.environ, "RAY_ADDRESS": "", "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    result: dict[str, str] = child_report(
        [sys.executable, str(SCRIPT), mode, str(data_dir)], env=env, timeout=150
    )
    return result


def test_every_workspace_is_intact_after_a_full_cluster_restart(tmp_path: Path, record_property: Any) -> None:
    data_dir = tmp_path / "data"
    written = _run("write", data_dir)
    assert len(written) == 2
    read = _run("read", data_dir)
    assert read == written
    assert sorted(p.name for p in (data_dir / "workspaces").glob("*.sqlite")) == sorted(
        f"{name}.sqlite" for name in written
    )
    record_property("cluster_restarts", 1)
    record_property("workspaces_checked_after_restart", len(written))
