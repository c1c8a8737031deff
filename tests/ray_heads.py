"""A Ray head of a test's own (``ray start --head`` on loopback, its own temporary directory, stopped by
its pid at the end), never the shared session's, and its GCS process: tests stop it (SIGSTOP) to see
what waits on a cluster that does not answer (``tests/cli/test_cluster_choice.py``,
``tests/actors/test_silent_gcs.py``)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Head:
    address: str  # 127.0.0.1:PORT
    pid: int  # the `ray start --block` process; the cluster's processes are its children
    ray_tmpdir: Path  # RAY_TMPDIR of a command whose `auto` is to find this head (`ray_current_cluster`)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def own_head(env: dict[str, str], cwd: Path) -> Iterator[Head]:
    """A head of one CPU started with ``env`` (quiet Ray, loopback, no inherited address) in ``cwd``,
    for the block; stopped after (SIGTERM, then its process group killed) and its directory removed."""
    port = _free_port()
    root = Path(tempfile.mkdtemp(prefix="rc-h", dir="/tmp"))  # short: Ray's socket paths
    temp_dir = root / "ray"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", "--port", str(port),
         "--node-ip-address", "127.0.0.1", "--temp-dir", str(temp_dir), "--num-cpus", "1",
         "--include-dashboard", "false", "--disable-usage-stats"],
        env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        recorded = temp_dir / "ray_current_cluster"  # written once the head runs
        deadline = time.monotonic() + 90
        while not recorded.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)  # a cluster starting: bounded by the deadline
        if not recorded.exists():
            pytest.fail(f"the test's Ray head did not start (exit {proc.poll()})")
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            pass
        yield Head(f"127.0.0.1:{port}", proc.pid, root)
    finally:
        proc.send_signal(signal.SIGTERM)  # `ray start --block` stops the processes it started
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: the head's processes only
            proc.wait()
        subprocess.run(["rm", "-rf", str(root)], check=False)


def gcs_pids(head: Head) -> list[int]:
    """The head's ``gcs_server`` (a child of the test's ``ray start``), from /proc."""
    return gcs_children(head.pid)


def gcs_children(parent: int) -> list[int]:
    """The ``gcs_server`` processes whose parent is ``parent`` (a ``ray start``, or a process whose
    ``ray.init`` started a session), from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        if name == "gcs_server" and int(rest[1]) == parent:
            found.append(int(entry.name))
    return found
