"""The library's node listings on a cluster whose GCS stops answering (SIGSTOP): each is bounded
(``_nodes.NODES_TIMEOUT``) and fails with ``ClusterSilentError`` naming the cluster and the wait, or
falls back where that is safe (decided per caller: ``computer/actors/_nodes.py``). Before, ``ray.nodes()``
waited for as long as the GCS was stopped (measured > 100 s, no end), and so did placement, the head
directory and the pools' control loop. Against a Ray head of the test's own (``tests/ray_heads.py``),
driven by ``_silent_gcs.py`` in a subprocess."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from ray_heads import Head, gcs_pids, own_head

pytestmark = pytest.mark.slow  # starts a head of its own

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("_silent_gcs.py")
# Far above what the script's calls take with the fix (2 s each, ~20 s in all on a loaded machine);
# before, its first listing was still waiting when this ran out.
BOUND = 120.0


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "COMPUTER_REDIS_URL")}
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


@pytest.fixture(scope="module")
def head() -> Iterator[Head]:
    with own_head(_env(), REPO) as started:
        yield started


def _wait_for(mark: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + BOUND
    while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # bounded by the deadline
    assert mark.exists(), f"{mark.name} never came (exit {proc.poll()})"


def _lines(stream: IO[str], into: queue.Queue[str | None]) -> None:
    for line in stream:
        if line.startswith("{"):
            into.put(line)
    into.put(None)


def test_node_listings_of_a_cluster_whose_gcs_is_stopped_end_within_their_wait(
    head: Head, tmp_path: Path
) -> None:
    gcs = gcs_pids(head)
    assert len(gcs) == 1, gcs
    marks = tmp_path / "marks"
    marks.mkdir()
    errors = tmp_path / "stderr"
    with errors.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), head.address, str(marks)], env=_env(), cwd=REPO,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, text=True,
        )  # fmt: skip
    assert proc.stdout is not None
    arriving: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_lines, args=(proc.stdout, arriving), daemon=True)
    reader.start()
    lines: list[dict[str, Any]] = []
    stopped = False
    try:
        _wait_for(marks / "joined", proc)
        os.kill(gcs[0], signal.SIGSTOP)
        stopped = True
        (marks / "stopped").touch()
        deadline = time.monotonic() + BOUND
        while not lines or lines[-1]["call"] != "stopped calls done":
            try:  # each line comes within its call's wait (2 s); before, the first never came
                line = arriving.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"the calls still waited after {BOUND:g} s with the GCS stopped: {lines}")
            if line is None:
                break  # the script ended
            lines.append(json.loads(line))
        os.kill(gcs[0], signal.SIGCONT)
        stopped = False
        (marks / "continued").touch()
        reader.join(BOUND)
        while not arriving.empty():
            line = arriving.get()
            if line is not None:
                lines.append(json.loads(line))
        proc.wait(timeout=BOUND)
    finally:
        if stopped:
            os.kill(gcs[0], signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (lines, errors.read_text())
    said = {line["call"]: line for line in lines}
    silent = f"the Ray cluster at {head.address} did not list its nodes within 2 s: its GCS does not answer"
    for call in ("alive_nodes", "alive_nodes again", "alive_nodes a third time", "head_node_id", "node cpus"):
        assert said[call]["raised"] == "ClusterSilentError", said[call]
        assert said[call]["message"].startswith(silent), said[call]
    # The dashboard's cluster view says so instead of holding an executor thread per view forever.
    assert said["dashboard cluster"]["value"].startswith(silent), said["dashboard cluster"]
    # One listing under way for every caller (before: no caller came back to start another).
    assert said["listing threads"] == {"call": "listing threads", "before": 1, "after": 1}, said
    # Falls back where safe: this machine as Ray would name it, "Ray cannot tell", the last answer.
    assert said["current_host"]["value"].endswith("/127.0.0.1"), said["current_host"]
    assert said["ray_owner_gone"]["value"] is False, said["ray_owner_gone"]
    assert said["scaler before"]["value"] == said["before"]["nodes"], said
    assert said["scaler"]["value"] == said["before"]["nodes"], said
    assert said["scaler first round"]["raised"] == "ClusterSilentError", said["scaler first round"]
    assert "did not give the pools' settings and nodes within 2 s" in said["scaler first round"]["message"]
    # Continued, the GCS answers again: the listing under way ends, new ones are answered.
    assert said["alive_nodes continued"]["value"] == said["before"]["nodes"], said
    assert said["head_node_id continued"]["value"] in said["before"]["nodes"], said
