"""First-hour problems of the CLI (found by a new user's session): each test is one of them."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from .conftest import COMPUTER, REPO, cli_env, run_cli


def _write(data_dir: Path, name: str, path: str = "/workspace/a", content: str = "a") -> None:
    done = run_cli(
        ["tool", name, "write", f'{{"path": "{path}", "content": "{content}"}}'], env=cli_env(data_dir)
    )
    assert done.returncode == 0, done.stderr


def test_log_follow_ends_with_a_message_when_the_workspace_is_deleted(tmp_path: Path) -> None:
    _write(tmp_path, "c1")
    follower = subprocess.Popen(
        [*COMPUTER, "log", "c1", "-f", "-n", "0"], env=cli_env(tmp_path), cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(2)  # the follower has opened the file
        done = run_cli(["rm", "c1", "--yes"], env=cli_env(tmp_path))
        assert done.returncode == 0, done.stderr
        _, err = follower.communicate(timeout=30)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert follower.returncode == 1, err
    assert "workspace 'c1' was deleted" in err
    assert "Traceback" not in err
