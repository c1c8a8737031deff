"""Neutral staging: what a sandbox needs from host directories, at paths that say nothing of the host.

``/proc/self/mountinfo`` inside a sandbox shows, for every bind, the source's path within its
filesystem: binding ``/root/.pyenv/versions/3.11.7`` or ``<package>/_pyguest.py`` tells a program
where the interpreter, the virtualenv and the package live on the host (issue 17, item 7). Staged
trees live in the process's scratch directory (``/tmp/computer-<pid>-<start>[-<uid>]/stage/<name>``,
see ``_scratch``), or for the interpreter in the user's shared directory
(``/tmp/computer-shared-<uid>/python-<digest>``, as the sandbox's ``/etc``), and are bound from
there, so a bind names only that.

Files are hard links where the filesystem allows (the same inode: no copy, a few ms for the whole
standard library), copies otherwise. A staged interpreter (:func:`stage_python`) holds only the
standard library: no ``site-packages``, no test suite, no build configuration; the one file of it
that names the build prefix (``_sysconfigdata_*.py``) is copied with the prefix rewritten.

What stays visible inside (documented, not secret): the staging path itself (the owner process's pid
and start time, the sandbox user's uid; for the shared interpreter the uid and a digest of file
identities, inode numbers included, from which no path can be read back), the device numbers,
filesystem types and mount options of the host filesystems bound (``/usr``, ``/tmp``'s filesystem,
the mirror's tmpfs and its size).
"""

from __future__ import annotations

import hashlib
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
from ._scratch import holds, process_scratch, remove_tree, shared_directory
from ._shared_copy import shared_copy

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
    in every sandbox and is used where it is. Looked up once per process, interpreter and owner.

    Shared (decision, as ``_bwrap.sandbox_etc``): one staged tree per content serves every process
    of the user, named ``python-<digest>`` by :func:`_python_key` (what the tree would hold: the
    interpreter, its libpython, the identity of every standard library file, the compiled files'
    tree) and made, held and reaped as ``_shared_copy.shared_copy`` says (a stale digest after the
    interpreter changed is reaped unused). Linking the ~3,200 files took 0.11-0.22 s per process and
    ~0.07 s again to remove them at its exit; naming the tree takes ~6 ms (a one-shot ``tool exec``
    on python: 0.72x, ~160 ms less). Where the shared directory cannot be used, the tree is the
    process's own, in its scratch directory, as before sharing."""
    exe = os.path.realpath(executable or getattr(sys, "_base_executable", None) or sys.executable)
    with _MEMO_LOCK:  # backends stage from threads (``PythonBackend._mount``): one staging at a time
        staged = _STAGED_PYTHONS.get((exe, owner))
        if staged is None or not all(_still_bound(b.source) for b in staged.binds):  # or released since
            staged = _STAGED_PYTHONS[exe, owner] = _stage_python(exe, owner)
        return staged


_STAGED_PYTHONS: dict[tuple[str, tuple[int, int] | None], StagedPython] = {}
_SHARED_TREES: set[str] = set()  # staged trees that are shared entries (held, not this process's)
_KEY_FORMAT = "1"  # bump when the staged tree's layout changes: a new name, a new tree


def _still_bound(source: str) -> bool:
    """Whether the staged tree ``source`` is still there for this process: held when it is a shared
    entry (``release_process`` lets go of it), present when it is the process's own."""
    return holds(source) if source in _SHARED_TREES else os.path.isdir(source)


def _stage_python(exe: str, owner: tuple[int, int] | None) -> StagedPython:
    prefix = os.path.dirname(os.path.dirname(exe))
    if prefix == "/usr" or prefix.startswith("/usr/"):
        return StagedPython(exe)
    version = _version_of(prefix) or f"python{sys.version_info.major}.{sys.version_info.minor}"
    stdlib = Path(prefix) / "lib" / version
    compiled = compiled_stdlib(stdlib, prefix, PYTHON_DIR, _NOT_STDLIB)

    def fill(root: Path) -> None:
        _fill_python(root, exe, prefix, version, stdlib, compiled)

    scratch = process_scratch(None, owner)  # the base's reaping, once per process
    shared = shared_directory(scratch.parent, owner)
    root = None
    if shared is not None:
        name = f"python-{_python_key(exe, prefix, stdlib, compiled)}"
        root = shared_copy(shared, name, fill, "the shared staged interpreter")
    if root is not None:
        _SHARED_TREES.add(os.fspath(root))
    else:
        with _LOCK:
            root = _fresh(f"python-{next(_STAGED)}", owner)
            fill(root)
    # The interpreter may look for libpython by its build prefix (RUNPATH): tell the loader where it is.
    return StagedPython(
        f"{PYTHON_DIR}/bin/python3",
        (Bind(os.fspath(root), PYTHON_DIR),),
        {"LD_LIBRARY_PATH": f"{PYTHON_DIR}/lib"},
    )


def _fill_python(
    root: Path, exe: str, prefix: str, version: str, stdlib: Path, compiled: Path | None
) -> None:
    """Stage the interpreter ``exe`` of ``prefix`` in the empty directory ``root``: ``bin``, its
    shared libpython, the standard library ``stdlib`` with the compiled files of ``compiled``."""
    (root / "bin").mkdir()
    (root / "lib").mkdir()
    _link_or_copy(exe, os.fspath(root / "bin" / version))
    os.symlink(version, root / "bin" / "python3")
    for entry in _libpythons(prefix):  # the shared libpython, when it is one
        _link_or_copy(entry.path, os.fspath(root / "lib" / entry.name), follow_symlinks=False)
    _link_tree(stdlib, root / "lib" / version, compiled)
    for data in stdlib.glob("_sysconfigdata*.py"):  # the one file naming the build prefix
        text = data.read_text().replace(prefix, PYTHON_DIR)
        (root / "lib" / version / data.name).write_text(text)


def _libpythons(prefix: str) -> list[os.DirEntry[str]]:
    return [e for e in os.scandir(Path(prefix) / "lib") if e.name.startswith("libpython") and not e.is_dir()]


def _python_key(exe: str, prefix: str, stdlib: Path, compiled: Path | None) -> str:
    """A digest of what :func:`_fill_python` would stage: changes when the interpreter, its
    libpython or a standard library file is replaced, added or removed (each file's inode, size and
    mtime; each ``__pycache__`` directory's inode and mtime, whose listing picks the compiled files),
    or the compiled files' tree is another. One ``scandir`` walk without the compiled files: ~6 ms for
    ~900 files and 54 directories (reading every file would be the 0.2 s this avoids)."""
    h = hashlib.sha256()

    def add(name: str, st: os.stat_result) -> None:
        h.update(f"{name}\0{st.st_mode}\0{st.st_ino}\0{st.st_dev}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())

    h.update("\0".join((_KEY_FORMAT, exe, prefix, PYTHON_DIR, str(compiled), *_NOT_STDLIB)).encode())
    add("bin", os.stat(exe))
    for entry in _libpythons(prefix):
        add(f"lib/{entry.name}", entry.stat(follow_symlinks=False))
    pending = [""]
    while pending:
        rel = pending.pop()
        with os.scandir(stdlib / rel if rel else stdlib) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                path = f"{rel}/{entry.name}" if rel else entry.name
                if not entry.is_dir(follow_symlinks=False):
                    add(path, entry.stat(follow_symlinks=False))
                elif entry.name == "__pycache__":
                    add(path, entry.stat(follow_symlinks=False))
                elif rel or (entry.name not in _NOT_STDLIB and not entry.name.startswith("config-")):
                    pending.append(path)
    return h.hexdigest()[:32]


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
