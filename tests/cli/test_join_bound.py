"""A command that joins a cluster ends within ``JOIN_TIMEOUT`` when the address accepts TCP but no
GCS answers there (a stale ``auto``, another service): one line naming the address, exit 1, no Ray
C++ warnings. Before, ``ray.init`` retried it for ~10 minutes, a warning every few seconds."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import cli_env, run_cli


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A loopback TCP server that accepts connections and never says anything: ``host:port``."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    server.settimeout(0.2)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for connection in accepted:
            connection.close()
        server.close()


@pytest.mark.parametrize(
    ("args", "via_env"),
    [(["status"], False), (["shell", "w", "-c", "pwd"], True)],
    ids=["status --address", "shell with RAY_ADDRESS"],
)
def test_a_join_that_gets_no_answer_fails_with_one_line(
    silent_server: str, tmp_path: Path, args: list[str], via_env: bool
) -> None:
    env = cli_env(tmp_path / "data", **({"RAY_ADDRESS": silent_server} if via_env else {}))
    given = [] if via_env else ["--address", silent_server]
    # The bound here is far above the CLI's (``_context.JOIN_TIMEOUT``, 20 s) for a loaded machine,
    # far below Ray's ~10 minutes.
    result = run_cli([*given, *args], env=env, timeout=80)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr  # no Ray C++ warnings ("Failed to connect to GCS ...")
    assert lines[0].startswith("error: no Ray cluster answered at " + silent_server)
    assert "--address" in lines[0]
