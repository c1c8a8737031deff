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


def _drive(head: Head, tmp_path: Path, mode: str) -> dict[str, dict[str, Any]]:
    """Run ``_silent_gcs.py`` in ``mode`` against ``head``, stopping its GCS while the script asks its
    calls: what each answered or raised, by call (the script's exit asserted 0)."""
    gcs = gcs_pids(head)
    assert len(gcs) == 1, gcs
    marks = tmp_path / "marks"
    marks.mkdir()
    errors = tmp_path / "stderr"
    with errors.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), head.address, str(marks), mode], env=_env(), cwd=REPO,
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
    return {line["call"]: line for line in lines}


def test_node_listings_of_a_cluster_whose_gcs_is_stopped_end_within_their_wait(
    head: Head, tmp_path: Path
) -> None:
    said = _drive(head, tmp_path, "nodes")
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


def test_user_facing_gcs_calls_of_a_cluster_whose_gcs_is_stopped_end_within_their_wait(
    head: Head, tmp_path: Path
) -> None:
    """Opening a workspace (the published settings, the owner's lookup), a handle's workspace
    (``managed_name``, the actor table), a pool's handles, the dashboard's pools, deletion: each ends
    within its wait with ``ClusterSilentError`` or its degraded answer. Before, the key-value store and
    the actor table waited for as long as the GCS was stopped (the first call here never came back),
    ``get_actor`` 60 s."""
    said = _drive(head, tmp_path, "paths")
    silent = f"the Ray cluster at {head.address} did not "

    def raised(call: str, what: str) -> None:
        assert said[call].get("raised") == "ClusterSilentError", said[call]
        assert said[call]["message"].startswith(silent + what), said[call]
        assert "within 2 s: its GCS does not answer" in said[call]["message"], said[call]

    raised("get_workspace", "read b'computer:")  # the cluster's settings, before any placement
    raised("workspace_actor dedicated", "find its actor 'computer:ws:")
    raised("get_scaler", "find its actor 'computer:pools'")
    raised("worker_handle", "find its actor 'computer:pool:x:0'")
    raised("host_handles", "list its named actors")
    raised("claim_new_node", "store a new b'computer:new:")
    raised("delete_workspace", "remove b'computer:new:")  # its creation claim, before the owner is asked
    # Degraded answers, as documented: "Ray cannot tell" (the caller keeps its own error), no
    # published description (asked of a worker later), no pools shown.
    assert said["managed_name"] == {"call": "managed_name", "value": None}, said["managed_name"]
    assert said["actor_death_time"] == {"call": "actor_death_time", "value": None}, said
    assert said["published_info"] == {"call": "published_info", "value": None}, said
    assert said["pool control status"]["value"] == [[], {}], said["pool control status"]
    # Past MAX_UNANSWERED calls left waiting, a new one is not started: raised at once, no thread.
    for i in range(5):
        assert said[f"lookup new {i}"].get("raised") == "ClusterSilentError", said
        assert "(not asked: " in said[f"lookup new {i}"]["message"], said
    threads = said["unanswered threads"]
    assert threads["after"] == threads["before"], threads
    # A name that does not exist is still ValueError, as Ray says it; continued, all calls ended.
    for when in ("before", "continued"):
        assert said[f"lookup missing {when}"]["raised"] == "ValueError", said
    assert said["threads continued"]["value"] == 0, said
    assert said["lookup continued"]["value"] == "ActorHandle", said


@pytest.mark.parametrize("owners", ["hosted", "dedicated"])
def test_a_workspace_runs_hibernates_and_wakes_with_the_gcs_stopped_and_loses_nothing(
    head: Head, tmp_path: Path, owners: str
) -> None:
    """Exec through a pool, writes, hibernation and the next call after it, with the GCS stopped: each
    ends (answered, or a bounded error), and once the GCS answers again every acknowledged file is
    there: the workspace is never recreated empty."""
    said = _drive(head, tmp_path, "work" if owners == "hosted" else "work dedicated")
    assert said["exec before"]["value"] == ["completed", "before"], said
    # A dispatcher with its worker's handle and view runs without the GCS.
    assert said["exec stopped"].get("value") == ["completed", "before"], said["exec stopped"]
    assert "value" in said["write stopped"], said["write stopped"]
    assert said["read stopped"].get("value") == "ran\n", said["read stopped"]
    assert said["hibernated"]["value"] is True, said
    # Waking needs the GCS once the owner's process exited (a new host or owner: the node listing, the
    # owner's lookup): ClusterSilentError within its wait. A host still lingering answers instead.
    for call, value in (
        ("read after hibernation", "during"),
        ("exec after hibernation", ["completed", "during"]),
    ):
        answer = said[call]
        assert answer.get("raised") == "ClusterSilentError" or answer.get("value") == value, answer
    expected = {"before": "before", "ran-before": "ran\n", "ran-stopped": "ran\n", "during": "during"}
    assert said["files continued"].get("value") == expected, said["files continued"]
    assert said["exec continued"].get("value", [""])[0] == "completed", said["exec continued"]
    assert sorted(said["files of a new client"]["value"]) == sorted(f"/workspace/{n}" for n in expected), said
