"""An owner wakes on the node that holds its file (a two-node cluster in its own process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_owner_wakes_on_the_node_holding_its_file(tmp_path: Path) -> None:
    script = Path(__file__).with_name("_two_nodes.py")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), (
        proc.stdout[-3000:] + proc.stderr[-5000:]
    )
