"""Neutral staging: what a sandbox needs from host directories, at paths that say nothing of the host.

``/proc/self/mountinfo`` inside a sandbox shows, for every bind, the source's path within its
filesystem: binding ``/root/.pyenv/versions/3.11.7`` or ``<package>/_pyguest.py`` tells a program
where the interpreter, the virtualenv and the package live on the host (issue 17, item 7). Staged
trees live in the process's scratch directory (``/tmp/computer-<pid>-<start>[-<uid>]/stage/<name>``,
see ``_scratch``) and are bound from there, so a bind names only that.

Files are hard links where the filesystem allows (the same inode: no copy, a few ms for the whole
standard library), copies otherwise. A staged interpreter (:func:`stage_python`) holds only the
standard library: no ``site-packages``, no test suite, no build configuration; the one file of it
that names the build prefix (``_sysconfigdata_*.py``) is copied with the prefix rewritten.

What stays visible inside (documented, not secret): the staging path itself (the owner process's pid
and start time, the sandbox user's uid), the device numbers, filesystem types and mount options of
the host filesystems bound (``/usr``, ``/tmp``'s filesystem, the mirror's tmpfs and its size).
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ._bwrap import Bind
from ._pycache import compiled_stdlib
from ._scratch import process_scratch, remove_tree

__all__ = ["PYTHON_DIR", "StagedPython", "stage", "stage_python"]

PYTHON_DIR = "/opt/python"
# Top-level entries of lib/pythonX.Y never staged: installed packages, tests, GUI and build files.
_NOT_STDLIB = ("site-packages", "dist-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip")
_LOCK = threading.Lock()
_MEMO_LOCK = threading.Lock()  # the memo of staged interpreters
_STAGED = itertools.count()


@dataclass(frozen=True, slots=True)
class StagedPython:
    """A staged interpreter: bind ``binds``, run ``executable`` with ``env`` added to its environment."""

    executable: str
    binds: tuple[Bind, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


def stage(
    name: str, entries: Mapping[str, str | os.PathLike[str]], owner: tuple[int, int] | None = None
) -> Path:
    """A staged directory ``name`` holding ``entries`` (relative path inside -> host file or
    directory, directories whole), in the scratch directory reachable by ``owner`` (the sandbox's host
    user, see ``Sandbox.host_ids``). Made anew on each call: bind the returned path read-only."""
    with _LOCK:
        root = _fresh(name, owner)
        for rel, source in entries.items():
            dest = root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(dest.parent, 0o755)
            if os.path.isdir(source):
                shutil.copytree(source, dest, symlinks=True, copy_function=_link_or_copy)
                for directory in [dest, *(p for p in dest.rglob("*") if p.is_dir() and not p.is_symlink())]:
                    os.chmod(directory, 0o755)
            else:
                _link_or_copy(os.fspath(source), os.fspath(dest))
        return root


def stage_python(executable: str | None = None, owner: tuple[int, int] | None = None) -> StagedPython:
    """The interpreter ``executable`` (default: this process's base interpreter) with its standard
    library only, staged and bound at :data:`PYTHON_DIR`; an interpreter under ``/usr`` is already
    in every sandbox and is used where it is. Built once per process, interpreter and owner."""
    exe = os.path.realpath(executable or getattr(sys, "_base_executable", None) or sys.executable)
    with _MEMO_LOCK:  # backends stage from threads (``PythonBackend._mount``): one staging at a time
        staged = _STAGED_PYTHONS.get((exe, owner))
        if staged is None or not all(os.path.isdir(b.source) for b in staged.binds):  # or released since
            staged = _STAGED_PYTHONS[exe, owner] = _stage_python(exe, owner)
        return staged


_STAGED_PYTHONS: dict[tuple[str, tuple[int, int] | None], StagedPython] = {}


def _stage_python(exe: str, owner: tuple[int, int] | None) -> StagedPython:
    prefix = os.path.dirname(os.path.dirname(exe))
    if prefix == "/usr" or prefix.startswith("/usr/"):
        return StagedPython(exe)
    version = _version_of(prefix) or f"python{sys.version_info.major}.{sys.version_info.minor}"
    stdlib = Path(prefix) / "lib" / version
    with _LOCK:
        root = _fresh(f"python-{next(_STAGED)}", owner)
        (root / "bin").mkdir()
        (root / "lib").mkdir()
        _link_or_copy(exe, os.fspath(root / "bin" / version))
        os.symlink(version, root / "bin" / "python3")
        for entry in os.scandir(Path(prefix) / "lib"):  # the shared libpython, when it is one
            if entry.name.startswith("libpython") and not entry.is_dir():
                _link_or_copy(entry.path, os.fspath(root / "lib" / entry.name), follow_symlinks=False)

        _link_tree(stdlib, root / "lib" / version, compiled_stdlib(stdlib, prefix, PYTHON_DIR, _NOT_STDLIB))
        for data in stdlib.glob("_sysconfigdata*.py"):  # the one file naming the build prefix
            text = data.read_text().replace(prefix, PYTHON_DIR)
            (root / "lib" / version / data.name).write_text(text)
    # The interpreter may look for libpython by its build prefix (RUNPATH): tell the loader where it is.
    return StagedPython(
        f"{PYTHON_DIR}/bin/python3",
        (Bind(os.fspath(root), PYTHON_DIR),),
        {"LD_LIBRARY_PATH": f"{PYTHON_DIR}/lib"},
    )


def _link_tree(stdlib: Path, dest: Path, compiled: Path | None) -> None:
    """Link the standard library at ``stdlib`` into ``dest`` (directories 0755), leaving out
    :data:`_NOT_STDLIB`, the build configuration and ``_sysconfigdata`` (rewritten by the caller).
    ``__pycache__`` files come from ``compiled`` (the same files naming the path inside, see
    ``_pycache``), never from the host: none at all when it is None.
    One ``os.walk``: ``shutil.copytree`` spent twice as long on the ~3,200 entries."""
    for directory, dirs, files in os.walk(stdlib):
        rel = os.path.relpath(directory, stdlib)
        out = dest if rel == "." else dest / rel
        out.mkdir(mode=0o755)
        os.chmod(out, 0o755)
        if os.path.basename(directory) == "__pycache__":
            if compiled is not None:
                _link_compiled(compiled / rel, out, files)
            continue
        if rel == ".":
            dirs[:] = [d for d in dirs if d not in _NOT_STDLIB and not d.startswith("config-")]
            files = [f for f in files if not f.startswith("_sysconfigdata")]
        for name in [d for d in dirs if os.path.islink(os.path.join(directory, d))]:
            dirs.remove(name)
            files.append(name)
        for name in files:
            _link_or_copy(os.path.join(directory, name), os.fspath(out / name), follow_symlinks=False)


def _link_compiled(pycache: Path, out: Path, names: list[str]) -> None:
    """Link the compiled files of ``names`` that ``pycache`` holds into ``out``."""
    for name in names:
        if (pycache / name).exists():
            _link_or_copy(os.fspath(pycache / name), os.fspath(out / name))


def _version_of(prefix: str) -> str | None:
    lib = Path(prefix) / "lib"
    found = sorted(p.name for p in lib.glob("python3.*") if (p / "os.py").exists())
    return found[-1] if found else None


def _fresh(name: str, owner: tuple[int, int] | None) -> Path:
    base = process_scratch(None, owner) / "stage"
    base.mkdir(exist_ok=True)
    os.chmod(base, 0o755)
    root = base / name
    if os.path.lexists(root):
        remove_tree(root)
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    return root


def _link_or_copy(source: str, dest: str, *, follow_symlinks: bool = True) -> str:
    """Hard-link ``source`` at ``dest``, or copy it (another filesystem, or linking refused)."""
    if os.path.islink(source) and not follow_symlinks:
        os.symlink(os.readlink(source), dest)
        return dest
    try:
        os.link(source, dest, follow_symlinks=True)
    except OSError:
        shutil.copy2(source, dest)
    return dest
