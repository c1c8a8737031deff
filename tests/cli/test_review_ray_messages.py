"""Review of issue 22: "No Ray warnings or colour codes in the CLI's or the demo's output; real errors
still show."

The demo test checks that no ``(raylet)`` line reaches its output; nothing checked the other half:
a real message of Ray's (a worker died, out of memory) still reaches the user, on stderr, as a plain
``ray: ...`` line, while the known noise is dropped and worker output is left alone. Ray calls
``ray._private.worker.print_to_stdstream`` from a background thread of the driver; here it is
called directly, without starting Ray.
"""

from __future__ import annotations

from typing import Any

import pytest
from ray._private import worker

from computer.actors.raycompat import quiet_driver_messages

NOISE = (
    "\x1b[33m(raylet)\x1b[0m WARNING: 8 PYTHON worker processes have been started on node: abc with "
    "address: 127.0.0.1. This could be a result of using a large number of actors (12x the maximum "
    "expected startup concurrency)."
)
REAL = "\x1b[31mA worker died or was killed while executing a task by an unexpected system error.\x1b[0m"


@pytest.fixture
def passed_on(monkeypatch: pytest.MonkeyPatch) -> list[tuple[dict[str, Any], bool]]:
    """What reaches Ray's own printer (restored after the test, wrapped or not)."""
    seen: list[tuple[dict[str, Any], bool]] = []
    monkeypatch.setattr(
        worker, "print_to_stdstream", lambda data, ignore_prefix: seen.append((data, ignore_prefix))
    )
    return seen


def test_a_real_raylet_message_goes_to_stderr_plain_and_the_noise_is_dropped(
    passed_on: list[tuple[dict[str, Any], bool]], capsys: pytest.CaptureFixture[str]
) -> None:
    quiet_driver_messages()
    quiet_driver_messages()  # idempotent: one wrapper, not two
    worker.print_to_stdstream({"pid": "raylet", "lines": [NOISE, REAL, ""]}, False)
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "ray: A worker died or was killed while executing a task by an unexpected system error.\n"
    assert passed_on == []  # Ray's printer (stdout, colour codes) never saw them


def test_worker_output_is_passed_to_ray_untouched(
    passed_on: list[tuple[dict[str, Any], bool]], capsys: pytest.CaptureFixture[str]
) -> None:
    quiet_driver_messages()
    data = {"pid": 4242, "ip": "127.0.0.1", "lines": ["\x1b[32mprinted by a task\x1b[0m"]}
    worker.print_to_stdstream(data, True)
    assert passed_on == [(data, True)]
    assert capsys.readouterr() == ("", "")
