"""The runtime package stays small rooms (issue 24 item 2), its map is true, and importing it is
cheap (issue 22: names load on first use)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import computer.runtime

PACKAGE = Path(computer.runtime.__file__).parent
MAX_LINES = 500


def test_no_runtime_module_is_over_500_lines() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in PACKAGE.glob("*.py")}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def test_the_readme_map_names_every_module_and_only_those() -> None:
    readme = (PACKAGE / "README.md").read_text()
    listed = {line.split("`")[1] for line in readme.splitlines() if line.startswith("| `")}
    modules = {p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    assert modules - listed == set(), "modules missing from the README map"
    assert {name for name in listed if name.endswith(".py")} - modules == set(), "the map names gone modules"


def test_every_exported_name_is_importable_and_the_package_loads_lazily() -> None:
    """``from computer.runtime import X`` works for every name of ``__all__``, while a bare import
    (or one of the result types) loads none of the backends or the sandbox layers."""
    probe = (
        "import sys\n"
        "import computer.runtime as r\n"
        "from computer.runtime import ExecResult, JOURNAL_DIR\n"
        "heavy = [m for m in ('computer.runtime.shell', 'computer.runtime.python', "
        "'computer.runtime._sandbox', 'computer.runtime._mirror') if m in sys.modules]\n"
        "assert heavy == [], heavy\n"
        "missing = [n for n in r.__all__ if getattr(r, n, None) is None]\n"
        "assert missing == [], missing\n"
        "assert set(r.__all__) <= set(dir(r))\n"
        "try:\n"
        "    r.NotAName\n"
        "except AttributeError as exc:\n"
        "    assert 'NotAName' in str(exc)\n"
        "else:\n"
        "    raise AssertionError('no AttributeError')\n"
        "print('ok', JOURNAL_DIR)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "ok /.computer/exec\n"), done.stderr
