"""A test's child process: a Python script whose last line of output is a JSON report (a Ray cluster of
its own, a process without root's capabilities). Imported by its bare name (``tests/`` is the root on
``sys.path``, as for ``exec_cases``)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def child_report(
    argv: Sequence[str], *, env: Mapping[str, str], timeout: float, cwd: Path | None = None
) -> Any:
    """Run ``argv`` to its end (bounded by ``timeout``), fail the test with its stderr's tail when it
    fails, and return its last output line read as JSON."""
    done = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout, env=dict(env), cwd=cwd, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
