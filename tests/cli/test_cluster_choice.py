"""Which cluster a command joins, and how: against a Ray head of the test's own (``ray start --head``
on loopback, its own temporary directory, stopped by its pid at the end), never the shared session's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ray_heads import Head, gcs_pids, own_head

from .conftest import COMPUTER, REPO, cli_env

pytestmark = pytest.mark.slow  # each starts Ray processes; the module starts a head of its own


@pytest.fixture(scope="module")
def head() -> Iterator[Head]:
    with own_head(cli_env(), REPO) as started:
        yield started


_GUARD = """
import os, sys
import ray._private.services as services

resolve = services.canonicalize_bootstrap_address

def guarded(address, temp_dir=None):
    found = resolve(address, temp_dir)
    host = (found or "").rpartition(":")[0].strip("[]")
    if found and not (host.startswith("127.") or host == "::1"):
        print(f"would dial {found} for {address}", file=sys.stderr, flush=True)
        os._exit(97)  # before anything is dialled
    return found

services.canonicalize_bootstrap_address = guarded
sys.argv = ["computer", *sys.argv[1:]]
from computer.cli import main
main()
"""


def test_a_loopback_address_is_dialled_on_loopback(head: Head, tmp_path: Path) -> None:
    """``--address 127.0.0.1:P``: Ray rewrote it to this machine's outward IP before dialling (eth0's
    address, not loopback). The guard ends the command before such a dial (exit 97). On a machine
    with no route out, Ray keeps loopback by itself and this passes either way."""
    env = cli_env(tmp_path / "data")
    del env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"]  # as a user's shell has it: Ray's default
    done = subprocess.run(
        [sys.executable, "-c", _GUARD, "--address", head.address, "status"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"Ray cluster at {head.address}: 1 node(s)" in done.stdout, done.stdout


def test_status_with_no_cluster_named_joins_none_and_names_the_one_here(head: Head, tmp_path: Path) -> None:
    """No --address, no RAY_ADDRESS: status used Ray's ``auto`` and showed whatever cluster it found
    on this machine (here the test's head, which the recorded ``ray_current_cluster`` points to;
    elsewhere any ``gcs_server`` running, another user's or project's) as if it were this CLI's."""
    env = cli_env(tmp_path / "data", RAY_TMPDIR=str(head.ray_tmpdir))  # where `ray start` recorded it
    done = subprocess.run(
        [*COMPUTER, "status"], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "node(s)" not in done.stdout, done.stdout  # no cluster's table: none joined
    assert "no cluster named (--address, RAY_ADDRESS), none joined" in done.stdout, done.stdout
    assert f"`ray start` recorded a cluster on this machine at {head.address} (not joined)" in done.stdout
    named = subprocess.run(
        [*COMPUTER, "--address", "auto", "status"], env=env, cwd=REPO, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert named.returncode == 0, named.stderr  # named, it joins: the table says which cluster it is
    assert f"Ray cluster at {head.address} (auto):" in named.stdout, named.stdout  # the title may wrap


_PAUSE_AFTER_JOIN = """
import os, sys, time
from pathlib import Path

marks = Path(sys.argv[1])
module, attribute = sys.argv[2].rsplit(".", 1)
import importlib

owner = importlib.import_module(module)
real = getattr(owner, attribute)

def paused(*args, **kwargs):
    (marks / "joined").touch()  # the test now stops the cluster's GCS
    deadline = time.monotonic() + 60
    while not (marks / "stopped").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return real(*args, **kwargs)

setattr(owner, attribute, paused)
sys.argv = ["computer", *sys.argv[3:]]
from computer.cli import main
main()
"""


_STOPPED = "stopped answering: its GCS gave no answer for 20 s"
_SILENT = "its GCS does not answer (stopped, wedged or overloaded; `ray status` on its head tells more)"


@pytest.mark.parametrize(
    ("pause", "args", "said"),
    [
        ("ray.nodes", ["status"], f"did not list its nodes within 10 s: {_SILENT}"),
        ("ray.util.list_named_actors", ["status"], f"did not list its named actors within 10 s: {_SILENT}"),
        ("computer.actors.adopt", ["tool", "w", "ls"], f"{_STOPPED} (`ray status` on its head tells more)"),
    ],
    ids=["status", "status named actors", "tool through ray_session"],
)
def test_a_cluster_that_stops_answering_after_the_join_ends_the_command(
    head: Head, tmp_path: Path, pause: str, args: list[str], said: str
) -> None:
    """The GCS of the test's head is stopped (SIGSTOP) right after the command joined: ``ray.nodes()``
    then waited forever (``status``), and a command through ``ray_session`` waited on the owner's
    creation. ``status`` asks the GCS through the library's bounded calls, half the watcher's wait
    each, and names the call that went unanswered; before, it called ``ray.nodes()`` (no end) and
    ``list_named_actors`` (60 s) directly, and only the watcher's generic line ended it. Last in this
    module: the head is continued after, but may not outlive the stop."""
    gcs = gcs_pids(head)
    assert len(gcs) == 1, gcs
    marks = tmp_path / "marks"
    marks.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", _PAUSE_AFTER_JOIN, str(marks), pause, "--address", head.address, *args],
        env=cli_env(tmp_path / "data"), cwd=REPO, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    stopped = False
    try:
        deadline = time.monotonic() + 90
        while not (marks / "joined").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # the command joining: bounded by the deadline
        assert (marks / "joined").exists(), proc.communicate(timeout=30)
        os.kill(gcs[0], signal.SIGSTOP)
        stopped = True
        (marks / "stopped").touch()
        # Far above the CLI's bound (``_context.ANSWER_TIMEOUT``, 20 s) for a loaded machine; before,
        # the command was still waiting when this ran out.
        _, err = proc.communicate(timeout=90)
    finally:
        if stopped:
            os.kill(gcs[0], signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, err
    lines = err.strip().splitlines()
    assert lines[-1] == f"error: the Ray cluster at {head.address} {said}", err
    assert "Traceback" not in err, err
