"""Shared test fixtures: one Ray session and one real redis-server for the whole test session.

Both start lazily, only when a test asks for them, and only ever listen on loopback.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

# Every process a test starts (scripts, the CLI, Ray's workers) imports this checkout: relative
# entries of PYTHONPATH (a worktree's ``PYTHONPATH=.``) are made absolute, with the checkout first.
# Run from a temporary cwd, ``.`` named that directory, and ``computer`` came from the editable
# install: another checkout's code, changed under the run by a merge there (a torn import).
_REPO = str(Path(__file__).resolve().parents[1])
os.environ["PYTHONPATH"] = os.pathsep.join(
    dict.fromkeys(
        [_REPO, *(os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    )
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def session_dir() -> Iterator[Path]:
    """A short temporary directory for the whole session (Ray's socket paths must stay short)."""
    path = Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_session(session_dir: Path) -> Iterator[object]:
    """A local Ray session shared by every test that needs one; ``computer`` settings point at it."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(
            include_dashboard=False,
            _temp_dir=str(session_dir / "ray"),
            object_store_memory=256 * 1024 * 1024,
            log_to_driver=False,
            num_cpus=8,
        )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def redis_url(session_dir: Path) -> Iterator[str]:
    """A real redis-server on a free loopback port, for the whole session."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.fail("redis-server is not installed (.ci/run installs it with apt-get)")
    port = free_port()
    workdir = session_dir / f"redis-{port}"
    workdir.mkdir()
    proc = subprocess.Popen(
        [
            exe,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.05)  # a process starting: nothing to await; bounded by the deadline
    else:
        proc.kill()
        pytest.fail("redis-server did not start within 10 s")
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def cluster(ray_session: Any, tmp_path: Path) -> Iterator[Any]:
    """``computer.init`` over the shared Ray session with a fresh data directory (pools: 2 shell, 2 python)."""
    import computer

    yield computer.init(data_dir=tmp_path / "data", shell_pool_size=2, python_pool_size=2)


@pytest.fixture
def name(request: pytest.FixtureRequest, ray_session: Any) -> Iterator[str]:
    """A workspace name no other test uses (prefixed by the test's folder); its owners are stopped after.

    ``<name>-other`` is stopped too, for tests that need a second workspace.
    """
    from computer.actors import NAMESPACE, actor_name

    workspace = f"{request.path.parent.name}-{uuid.uuid4().hex[:12]}"
    yield workspace
    for each in (workspace, f"{workspace}-other"):
        try:
            ray_session.kill(ray_session.get_actor(actor_name(each), namespace=NAMESPACE))
        except ValueError:
            pass  # never created, or already gone
    from computer.actors._hosts import kill_hosts

    kill_hosts()  # owners="hosted" (COMPUTER_OWNERS): the owner hosts of the test's data directory
