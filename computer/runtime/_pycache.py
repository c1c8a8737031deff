"""The staged standard library's compiled files, naming the path inside the sandbox, built once per machine.

Every ``.pyc`` records the path of its source (``co_filename`` of each code object): the host's
``__pycache__`` says ``/root/.pyenv/versions/3.11.7/lib/python3.11/os.py`` to any program that reads
it (issue 17, item 7). The staged interpreter (``_staging.stage_python``) therefore never links the
host's ``__pycache__``: it links these instead, the same files with every code object's
``co_filename`` moved under :data:`~computer.runtime._staging.PYTHON_DIR`. The header (source mtime
and size) is kept, and the staged sources are hard links of the originals, so the interpreter inside
accepts them as current. Without compiled files, every import inside would compile from source.

Built once per machine, interpreter and standard library (about 1-3 s for ~2,400 files, by the first
process that stages that interpreter), in ``<tmp>/computer-pyc-<uid>-<key>``: made in a temporary
directory and renamed into place, so concurrent processes never see half of it; used only when it is
a real directory owned by this user and writable by nobody else. A half-built one that a killed
process left (``.computer-pyc-<uid>-*``) is removed by a later process once it is an hour old. The build configuration's
``_sysconfigdata`` holds the build prefix in its constants too: its compiled files are never staged
(its source is rewritten, see ``_staging``). Files of another bytecode version than this process's
are left out (an interpreter other than this one compiles from source inside).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import marshal
import os
import stat
import sys
import tempfile
import time
from pathlib import Path
from types import CodeType

from ._scratch import remove_tree

__all__ = ["compiled_stdlib", "reap_stale_builds"]

log = logging.getLogger(__name__)

_FORMAT = "1"  # bump when the layout or the rewrite changes: a new key, a new tree
_HEADER = 16  # magic, flags, source mtime, source size (PEP 552)
_built: dict[tuple[str, str], Path | None] = {}


def compiled_stdlib(stdlib: Path, prefix: str, inside: str, leave_out: tuple[str, ...] = ()) -> Path | None:
    """A tree mirroring ``stdlib``'s ``__pycache__`` directories (same relative paths) whose code
    objects name ``inside`` instead of ``prefix``, without the top-level entries ``leave_out``
    (installed packages, tests: never staged); None when it cannot be built here (then stage no
    compiled files at all)."""
    if (str(stdlib), inside) in _built:
        return _built[str(stdlib), inside]
    try:
        found = _machine_tree(stdlib, prefix, inside, leave_out)
    except OSError as exc:
        log.warning("compiled standard library not built (%s): sandboxed imports compile from source", exc)
        found = None
    _built[str(stdlib), inside] = found
    return found


def _machine_tree(stdlib: Path, prefix: str, inside: str, leave_out: tuple[str, ...]) -> Path | None:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    if not stdlib.name.endswith(version):  # another interpreter's library: our marshal cannot write it
        return None
    identity = "\0".join(
        (_FORMAT, str(stdlib), str(os.stat(stdlib).st_mtime_ns), sys.version, prefix, inside, *leave_out)
    )
    key = hashlib.sha256(identity.encode()).hexdigest()[:16]
    tree = Path(tempfile.gettempdir()) / f"computer-pyc-{os.getuid()}-{key}"
    reap_stale_builds(tree.parent)
    if _trusted(tree):
        return tree
    building = Path(tempfile.mkdtemp(prefix=f".computer-pyc-{os.getuid()}-", dir=tree.parent))
    try:
        _build(stdlib, building, prefix, inside, leave_out)
        os.chmod(building, 0o755)
        os.rename(building, tree)  # ENOTEMPTY/EEXIST: another process was first, its tree serves
    except OSError:
        pass
    finally:
        if building.exists():
            remove_tree(building)
    return tree if _trusted(tree) else None


def reap_stale_builds(parent: Path, *, older_than: float = 3600.0) -> None:
    """Remove the half-built trees (``.computer-pyc-<uid>-*``) of processes killed while building,
    once they are ``older_than`` seconds old (a build takes seconds, so none is still being made);
    only this user's. Once per process, when it first looks for its tree."""
    cutoff = time.time() - older_than
    for entry in parent.glob(f".computer-pyc-{os.getuid()}-*"):
        try:
            st = os.lstat(entry)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and st.st_mtime < cutoff:
                remove_tree(entry)
        except OSError:
            continue  # gone meanwhile, or not ours to remove: the next process tries again


def _trusted(tree: Path) -> bool:
    try:
        st = os.lstat(tree)
    except FileNotFoundError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def _build(stdlib: Path, out: Path, prefix: str, inside: str, leave_out: tuple[str, ...]) -> None:
    magic = importlib.util.MAGIC_NUMBER
    for directory, dirs, files in os.walk(stdlib):
        if directory == str(stdlib):
            dirs[:] = [d for d in dirs if d not in leave_out and not d.startswith("config-")]
        if os.path.basename(directory) != "__pycache__":
            continue
        target = out / os.path.relpath(directory, stdlib)
        for name in files:
            if not name.endswith(".pyc") or name.startswith("_sysconfigdata"):
                continue
            with open(os.path.join(directory, name), "rb") as f:
                data = f.read()
            if data[:4] != magic:
                continue
            try:
                code = marshal.loads(data[_HEADER:])
            except (EOFError, ValueError, TypeError):
                continue  # a damaged file: the interpreter inside compiles that module from source
            if not isinstance(code, CodeType):
                continue
            target.mkdir(parents=True, exist_ok=True, mode=0o755)
            path = target / name
            path.write_bytes(data[:_HEADER] + marshal.dumps(_moved(code, prefix, inside)))
            os.chmod(path, 0o644)
    for directory, _dirs, _files in os.walk(out):
        os.chmod(directory, 0o755)


def _moved(code: CodeType, prefix: str, inside: str) -> CodeType:
    consts = tuple(_moved(c, prefix, inside) if isinstance(c, CodeType) else c for c in code.co_consts)
    filename = code.co_filename
    if filename.startswith(prefix):
        filename = inside + filename[len(prefix) :]
    return code.replace(co_filename=filename, co_consts=consts)
