"""Ctrl-C while the command line's own modules load ends ``computer`` with 130 and no traceback, as
Ctrl-C in a command does. Before, an interrupt in the first ~0.15 s (the typer app loading for
``status``, ``demo``, ``--help``; ``_fast`` and ``_context`` for every command) printed an
import-time traceback from deep inside asyncio or importlib. The interrupt is raised by an import hook
at a chosen module, so the test does not race a timer; what is left unguarded is the interpreter's
own start (~25 ms), as for any Python program."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, cli_env

# Runs ``computer ARGS`` (the console script's own lines) with a finder that raises KeyboardInterrupt
# (what SIGINT raises) when MODULE is first imported.
_HOOKED = """
import sys
module, argv = sys.argv[1], sys.argv[2:]

class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == module:
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, Interrupt())
sys.argv = ["computer", *argv]
from computer.cli import main
sys.exit(main())
"""


@pytest.mark.parametrize(
    ("module", "args"),
    [
        ("computer.cli._app", ["status"]),  # the typer path
        ("typer", ["--help"]),
        ("computer.cli._fast", ["ls"]),  # every command's first module
        ("computer.cli._context", ["status"]),
    ],
)
def test_ctrl_c_while_the_cli_loads_exits_130_without_a_traceback(
    tmp_path: Path, module: str, args: list[str]
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _HOOKED, module, *args],
        env=cli_env(tmp_path), cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_the_hook_interrupts_for_real(tmp_path: Path) -> None:
    """The finder above does raise where it is put: a module imported outside the guards (``computer``
    itself, before the CLI) still ends in the interpreter's own traceback."""
    done = subprocess.run(
        [sys.executable, "-c", _HOOKED, "computer", "status"],
        env=cli_env(tmp_path), cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "KeyboardInterrupt" in done.stderr, done.stderr
