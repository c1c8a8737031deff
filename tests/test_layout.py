"""Package boundaries (issue 24 item 4): a module never imports another package's private module.

A private module (``computer/actors/_lease.py``) may be imported by the modules of its own package
and of the packages below it (``computer/actors/directory/``); every other package goes through a
public name (``from computer.actors import awake``), so a package can rearrange its rooms freely.
"""

from __future__ import annotations

import ast
from pathlib import Path

import computer

ROOT = Path(computer.__file__).parent


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(root: Path, name: str) -> bool:
    base = root.parent.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _imported(root: Path, path: Path) -> set[str]:
    """Every module ``path`` imports, absolute (``from .x import _y`` counts ``_y`` when it is a module)."""
    package = _module_name(root, path.parent / "__init__.py")
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names if _is_module(root, f"{module}.{a.name}"))
    return {name for name in found if name == "computer" or name.startswith("computer.")}


def crossings(root: Path = ROOT) -> set[tuple[str, str]]:
    """``(importer, private module of another package)`` for every such import under ``root``."""
    bad: set[tuple[str, str]] = set()
    for path in sorted(root.rglob("*.py")):
        importer = _module_name(root, path)
        for target in _imported(root, path):
            parts = target.split(".")
            for i, part in enumerate(parts):
                if part.startswith("_") and not part.startswith("__"):
                    owner = ".".join(parts[:i])
                    if not (importer + ".").startswith(owner + "."):
                        bad.add((importer, ".".join(parts[: i + 1])))
                    break
    return bad


def test_no_package_imports_another_packages_private_module() -> None:
    assert crossings() == set(), "import a public name instead (export it from the package)"


def test_the_check_sees_every_form_of_a_crossing(tmp_path: Path) -> None:
    """The check itself: relative, absolute, a private module imported as a name, under TYPE_CHECKING
    or inside a function; its own package and a subpackage may import it."""
    pkg = tmp_path / "computer"
    for folder in ("a", "a/sub", "b"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "_private.py").write_text("X = 1\n")
    (pkg / "a" / "_sibling.py").write_text("from ._private import X\n")
    (pkg / "a" / "sub" / "_deep.py").write_text("from .._private import X\n")
    (pkg / "b" / "_rel.py").write_text("from ..a._private import X\n")
    (pkg / "b" / "_abs.py").write_text("import computer.a._private\n")
    (pkg / "b" / "_name.py").write_text("from ..a import _private\n")
    (pkg / "b" / "_lazy.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from computer.a._private import X\n"
        "def f():\n    from ..a.sub._deep import X\n"
    )
    (pkg / "b" / "_public.py").write_text("from ..a import sub\nfrom ..a.sub import X\n")
    (pkg / "top.py").write_text("from .a._private import X\n")
    assert crossings(pkg) == {
        ("computer.b._rel", "computer.a._private"),
        ("computer.b._abs", "computer.a._private"),
        ("computer.b._name", "computer.a._private"),
        ("computer.b._lazy", "computer.a._private"),
        ("computer.b._lazy", "computer.a.sub._deep"),
        ("computer.top", "computer.a._private"),
    }


def test_the_package_map_lists_every_package_and_top_level_module() -> None:
    """computer/README.md's map names every subpackage (``agent/``) and top-level module (``config.py``),
    and every package has a README saying what belongs there."""
    text = (ROOT / "README.md").read_text()
    packages = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))
    modules = sorted(p.name for p in ROOT.glob("*.py"))
    assert [f"{name}/" for name in packages if f"| `{name}/` |" not in text] == []
    assert [name for name in modules if f"| `{name}` |" not in text] == []
    assert [name for name in packages if not (ROOT / name / "README.md").is_file()] == []


def test_every_test_folder_is_a_package() -> None:
    """Test files repeat basenames across folders (``test_locks.py``): each folder below ``tests/`` is a
    package, so pytest imports them as ``storage.test_locks``, ``tools.test_locks``... and a new
    duplicate never breaks collection. (``tests/`` itself is the root on ``sys.path``: the shared
    ``exec_cases`` helper is imported by its bare name.)"""
    tests = Path(__file__).parent
    folders = {p.parent for p in tests.rglob("*.py") if "__pycache__" not in p.parts} - {tests}
    assert sorted(str(f.relative_to(tests)) for f in folders if not (f / "__init__.py").is_file()) == []


def test_no_file_holds_the_conflict_markers_of_a_merge() -> None:
    """A merge once left ``<<<<<<< HEAD`` / ``=======`` / ``>>>>>>> fix-E`` in the runtime's module
    table (computer/runtime/README.md), committed and shown to every reader."""
    repo = ROOT.parent
    markers = ("<" * 7 + " ", ">" * 7 + " ")
    found = []
    for folder in ("computer", "docs", "examples", "benchmarks", "tests"):
        for path in (repo / folder).rglob("*"):
            if path.suffix not in (".py", ".md", ".toml", ".yaml", ".txt") or not path.is_file():
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if line.startswith(markers):
                    found.append(f"{path.relative_to(repo)}:{number}")
    for path in (repo / "README.md", repo / "pyproject.toml"):
        found += [
            f"{path.name}:{n}"
            for n, line in enumerate(path.read_text().splitlines(), 1)
            if line.startswith(markers)
        ]
    assert found == []


def test_a_process_a_test_starts_from_another_directory_imports_this_checkout(tmp_path: Path) -> None:
    """The session's PYTHONPATH is absolute with this checkout first (``conftest.py``): a script run in
    a temporary cwd under a worktree's ``PYTHONPATH=.`` imported the editable install's checkout."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", "import computer; print(computer.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).resolve() == (ROOT / "__init__.py").resolve()
