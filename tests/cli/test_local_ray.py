"""``computer tool`` twice in a row, each command starting (and stopping) its own local Ray."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import cli_env, run_cli


@pytest.mark.slow
def test_a_second_command_with_its_own_local_ray_reads_what_the_first_wrote(tmp_path: Path) -> None:
    base = ["--data-dir", str(tmp_path / "data"), "tool", "notes"]
    wrote = run_cli([*base, "write", json.dumps({"path": "/workspace/a.txt", "content": "kept\n"})],
                    env=cli_env(), timeout=180)  # fmt: skip
    assert wrote.returncode == 0, wrote.stderr[-3000:]
    read = run_cli([*base, "read", json.dumps({"path": "/workspace/a.txt"})], env=cli_env(), timeout=180)
    assert read.returncode == 0, read.stderr[-3000:]
    assert json.loads(read.stdout)["content"].startswith("kept")
