"""``computer.init(address=...)`` with nothing listening there: a first user's typo, or a cluster not
started yet. ``ray.init`` waited there for minutes, logging retries to stderr, before it raised."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHILD = """
import sys
import computer

try:
    computer.init(address=sys.argv[1], data_dir=sys.argv[2])
except ConnectionError as exc:
    print("ConnectionError:", exc)
"""


def test_init_at_an_address_nobody_answers_raises_connection_error_naming_it(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a loopback port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, address, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,  # without the fix it was still waiting for the GCS when this ran out
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith(f"ConnectionError: no Ray cluster answers at {address} ("), proc.stdout
