"""What a python run's interpreter takes from the run: the ``PYTHON*`` variables of its ``env`` (the
guest runs ``-I``, which ignores them), and no bytecode written into the workspace by the processes
its ``multiprocessing`` starts. One-off and live sandboxes alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import computer
from computer.runtime.types import ExecResult

from ._support import PYTHON_MODES, ROOT, python_mode, run


async def py(ws: computer.Workspace, source: str, **options: Any) -> ExecResult:
    result = await run(ws, source, backend="python", timeout=30.0, **options)
    assert result.status == "completed", (result.stdout, result.stderr, result.error)
    return result


SPAWNED_IMPORTS = """
import multiprocessing as mp
import helper
def main(input):
    out = {}
    for method in ("spawn", "forkserver"):
        with mp.get_context(method).Pool(1) as pool:
            out[method] = pool.apply(helper.twice, (21,))
    return out
"""


@pytest.mark.parametrize("live", PYTHON_MODES)
async def test_multiprocessing_children_write_no_bytecode_into_the_workspace(
    tmp_path: Path, live: bool
) -> None:
    """s53: the guest writes no ``__pycache__`` (``sys.dont_write_bytecode``), but the children its
    ``multiprocessing`` spawned (spawn, forkserver) started without ``-B`` and wrote one for every
    workspace module they imported, pulled into the workspace. They get ``-B`` now."""
    async with python_mode(tmp_path / "ws.sqlite", live) as ws:
        await ws.fs.write_file(f"{ROOT}/helper.py", b"def twice(n):\n    return 2 * n\n")
        result = await py(ws, SPAWNED_IMPORTS)
        assert result.value == {"spawn": 42, "forkserver": 42}
        assert not await ws.fs.exists(f"{ROOT}/__pycache__")
        again = await py(ws, "import os\ndef main(input):\n    return os.path.exists('__pycache__')\n")
        assert again.value is False


WARNINGS = """
import warnings
def main(input):
    try:
        warnings.warn("careful")
    except UserWarning as exc:
        return f"raised {exc}"
    return "warned"
"""


@pytest.mark.parametrize("live", PYTHON_MODES)
async def test_pythonwarnings_in_env_is_applied(tmp_path: Path, live: bool) -> None:
    """s53: ``env={"PYTHONWARNINGS": "error"}`` made no warning an error (``-I``)."""
    async with python_mode(tmp_path / "ws.sqlite", live) as ws:
        assert (await py(ws, WARNINGS, env={"PYTHONWARNINGS": "error"})).value == "raised careful"
        assert (await py(ws, WARNINGS)).value == "warned"
        ignored = await py(ws, WARNINGS, env={"PYTHONWARNINGS": "ignore,error::DeprecationWarning"})
        assert ignored.value == "warned"


STREAMS = """
import sys
print("price: \\u20ac")
def main(input):
    return [sys.stdout.encoding, sys.stdout.errors, sys.stderr.encoding, sys.stderr.errors,
            sys.stdout.write_through, sys.flags.utf8_mode]
"""


@pytest.mark.parametrize("live", PYTHON_MODES)
async def test_pythonioencoding_unbuffered_and_utf8_in_env_are_applied(tmp_path: Path, live: bool) -> None:
    """s53: ``PYTHONIOENCODING`` and ``PYTHONUTF8`` in a run's env were ignored (``-I``). The streams
    are reconfigured (stderr's errors stay ``backslashreplace``, as python has them), UTF-8 mode is
    the interpreter's ``-X utf8``; ``PYTHONUNBUFFERED`` holds anyway (the guest runs ``-u``)."""
    async with python_mode(tmp_path / "ws.sqlite", live) as ws:
        latin = await py(ws, STREAMS, env={"PYTHONIOENCODING": "latin-1:replace"})
        assert latin.value[:4] == ["latin-1", "replace", "latin-1", "backslashreplace"]
        assert latin.stdout == "price: ?\n"
        errors_only = await py(ws, STREAMS, env={"PYTHONIOENCODING": ":replace"})
        assert errors_only.value[0].lower().replace("-", "") == "utf8" and errors_only.value[1] == "replace"
        unbuffered = await py(ws, STREAMS, env={"PYTHONUNBUFFERED": "1"})
        assert unbuffered.value[4] is True
        utf8 = await py(ws, STREAMS, env={"PYTHONUTF8": "1"})
        assert utf8.value[5] == 1 and utf8.stdout == "price: \u20ac\n"
        unknown = await run(ws, STREAMS, backend="python", timeout=30.0, env={"PYTHONIOENCODING": "nonesuch"})
        assert unknown.exit_code == 1 and "PYTHONIOENCODING" in unknown.stderr, unknown


HASHES = """
import os, sys, warnings
def main(input):
    try:
        warnings.warn("careful")
        warned = "warned"
    except UserWarning:
        warned = "raised"
    return [hash("workspace"), sys.flags.hash_randomization, os.environ.get("PYTHONWARNINGS"), warned,
            os.environ.get("PYTHONHASHSEED")]
"""


@pytest.mark.parametrize("live", PYTHON_MODES)
async def test_pythonhashseed_in_env_gives_the_interpreter_its_seed(tmp_path: Path, live: bool) -> None:
    """s53: ``PYTHONHASHSEED`` in a run's env was ignored (``-I``): the seed is fixed as the interpreter
    starts, so such a run's interpreter reads it there (never a guest started ahead); the run's other
    ``PYTHON*`` variables are kept from that start and put back into ``os.environ`` (applied too)."""
    async with python_mode(tmp_path / "ws.sqlite", live) as ws:
        env = {"PYTHONHASHSEED": "0", "PYTHONWARNINGS": "error"}
        first = await py(ws, HASHES, env=env)
        second = await py(ws, HASHES, env=env)
        assert first.value == second.value
        assert first.value[1:] == [0, "error", "raised", "0"]
        other = await py(ws, HASHES, env={"PYTHONHASHSEED": "1"})
        assert other.value[0] != first.value[0] and other.value[1] == 1
