"""What the python backend mounts: the interpreter and its standard library, and the guest with
msgpack, staged as copies under neutral paths (issue 17 item 7).

Binding the host's own directories would show the sandbox the host interpreter's whole prefix
(``site-packages`` of the base interpreter among them), and host paths in ``/proc/self/mountinfo``
(a bind's source path is its ``root`` field), ``sys.prefix``, ``sys.executable``, ``sysconfig`` and
every traceback (``.pyc`` files record the path they were compiled for). So each is copied once per
machine into a stage directory named by a digest, and mounted read-only:

- ``/opt/python``: ``bin/python3``, the shared ``libpython`` when the interpreter has one (found
  through ``LD_LIBRARY_PATH``), ``lib/pythonX.Y`` without ``site-packages``, the test suites, IDLE,
  tkinter and the build's ``config-*`` directory; compiled for its path inside; the host prefix in
  ``_sysconfigdata`` replaced by ``/opt/python``. The interpreter finds its prefix from where it
  runs, so ``sys.prefix``, ``sys.path`` and ``sys.executable`` name only ``/opt/python``.
- ``/opt/computer``: ``guest.py`` and ``lib/msgpack``.

Stage directories live under ``/var/tmp/computer-python-<uid>`` (kept across reboots: staging the
standard library costs ~5 s of CPU; a later process reuses it), built by one process at a time (a
lock file) in a temporary directory and renamed into place, so no process sees half a stage; a
stage missing any file its list (``<stage>.files``) names is built again (``/var/tmp`` cleaners
remove files not read for weeks). The directory must belong to
this user and be writable by nobody else; otherwise a private one (removed at exit) is used.

Not hidden: the interpreter binary still contains its build prefix as bytes (compiled in).
"""

from __future__ import annotations

import atexit
import compileall
import contextlib
import fcntl
import functools
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["GUEST_DIR", "PYTHON_DIR", "Staged", "stage_python"]

PYTHON_DIR = "/opt/python"
GUEST_DIR = "/opt/computer"
_FORMAT = "1"  # bump when the layout of a stage changes
# Directories of the standard library a program in the sandbox never needs.
_SKIP = frozenset(
    {"site-packages", "dist-packages", "test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip"}
)
_PROBE = """
import json, sys, sysconfig
v = sysconfig.get_config_var
print(json.dumps({
    "version": f"{sys.version_info[0]}.{sys.version_info[1]}",
    "stdlib": sysconfig.get_path("stdlib"),
    "platstdlib": sysconfig.get_path("platstdlib"),
    "prefixes": sorted({sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix}),
    "shared": bool(v("Py_ENABLE_SHARED")),
    "library": [v("LIBDIR") or "", v("INSTSONAME") or v("LDLIBRARY") or ""],
}))
"""


@dataclass(frozen=True)
class Staged:
    """Stage directories and how to run the staged interpreter inside the sandbox."""

    python_stage: str  # host directory mounted at PYTHON_DIR
    guest_stage: str  # host directory mounted at GUEST_DIR
    executable: str  # the interpreter's path inside
    env: dict[str, str]  # what it needs in its environment (LD_LIBRARY_PATH for a shared libpython)
    version: str


@functools.cache
def stage_python(python: str, guest: str, msgpack_dir: str) -> Staged:
    """Stage ``python`` (a real interpreter path) and the guest; cached per process."""
    info = json.loads(
        subprocess.run([python, "-I", "-S", "-c", _PROBE], capture_output=True, check=True, text=True).stdout
    )
    st = os.stat(python)
    key = [_FORMAT, python, str(st.st_mtime_ns), str(st.st_size), json.dumps(info, sort_keys=True)]
    python_stage = _stage(f"python{info['version']}", key, lambda d: _build_python(d, python, info))
    guest_bytes = Path(guest).read_bytes()
    guest_key = [_FORMAT, info["version"], msgpack_dir, _tree_digest(msgpack_dir), guest_bytes.hex()]

    def build_guest(d: Path) -> None:
        (d / "guest.py").write_bytes(guest_bytes)
        _copy_tree(Path(msgpack_dir), d / "lib" / "msgpack")
        _compile(d / "lib", f"{GUEST_DIR}/lib", python)

    guest_stage = _stage("guest", guest_key, build_guest)
    env = {"LD_LIBRARY_PATH": f"{PYTHON_DIR}/lib"} if info["shared"] else {}
    return Staged(python_stage, guest_stage, f"{PYTHON_DIR}/bin/python3", env, info["version"])


def _build_python(root: Path, python: str, info: dict[str, Any]) -> None:
    version = str(info["version"])
    lib = root / "lib" / f"python{version}"
    stdlib = Path(str(info["stdlib"]))
    _copy_tree(stdlib, lib)
    platstdlib = Path(str(info["platstdlib"]))
    if platstdlib != stdlib and (platstdlib / "lib-dynload").is_dir() and not (lib / "lib-dynload").exists():
        _copy_tree(platstdlib / "lib-dynload", lib / "lib-dynload")
    (root / "bin").mkdir()
    shutil.copy2(python, root / "bin" / "python3")
    libdir, soname = (str(x) for x in info["library"])
    if info["shared"] and soname and os.path.exists(os.path.join(libdir, soname)):
        shutil.copy2(os.path.join(libdir, soname), root / "lib" / soname)
    prefixes = sorted({*info["prefixes"], *(os.path.realpath(p) for p in info["prefixes"])}, key=len)
    for data in lib.glob("_sysconfigdata*.py"):
        text = data.read_text()
        for prefix in reversed(prefixes):  # longest first: a venv inside the prefix keeps no tail
            if prefix not in ("", "/", "/usr", "/usr/local"):  # neutral: nothing to hide
                text = text.replace(prefix, PYTHON_DIR)
        data.write_text(text)
    _compile(lib, f"{PYTHON_DIR}/lib/python{version}", python)


def _copy_tree(source: Path, dest: Path) -> None:
    def ignore(directory: str, names: list[str]) -> list[str]:
        return [
            n
            for n in names
            if n in _SKIP or n == "__pycache__" or n.startswith("config-") or n.endswith(".pyc")
        ]

    shutil.copytree(source, dest, ignore=ignore, symlinks=False, ignore_dangling_symlinks=True)


def _compile(directory: Path, inside: str, python: str) -> None:
    """Compile ``.py`` files for their path inside the sandbox (tracebacks and ``co_filename``)."""
    if os.path.realpath(python) != os.path.realpath(_base_python()):
        # Another interpreter's bytecode differs: it compiles its own, in a process of its own.
        script = "import compileall, sys; compileall.compile_dir(sys.argv[1], ddir=sys.argv[2], quiet=2)"
        subprocess.run(
            [python, "-I", "-S", "-W", "ignore", "-c", script, str(directory), inside],
            check=True,
            capture_output=True,
        )
        return
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stderr(io.StringIO()),
        contextlib.redirect_stdout(io.StringIO()),
    ):
        warnings.simplefilter("ignore")
        compileall.compile_dir(str(directory), ddir=inside, quiet=2, workers=1)


def _base_python() -> str:
    import sys

    return getattr(sys, "_base_executable", None) or sys.executable


def _tree_digest(directory: str) -> str:
    h = hashlib.sha256()
    for path in sorted(Path(directory).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            st = path.stat()
            h.update(f"{path.relative_to(directory)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _stage(kind: str, key: list[str], build: Callable[[Path], None]) -> str:
    """The stage directory for ``key``, built by ``build(dir)`` unless it exists whole (every file
    its list names, ``<stage>.files``, is there: a cleaner of ``/var/tmp`` may have removed some)."""
    digest = hashlib.sha256("\0".join(key).encode()).hexdigest()[:20]
    base = _base_dir()
    final = base / f"{kind}-{digest}"
    if _whole(final):
        return str(final)
    # One builder at a time (pool workers start together): the others wait, then find it built.
    with open(base / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _whole(final):
            _build(base, kind, final, build)
    return str(final)


def _whole(final: Path) -> bool:
    try:
        names = json.loads(final.with_name(final.name + ".files").read_text())
    except (OSError, ValueError):
        return False
    return all(os.path.lexists(final / name) for name in names)


def _build(base: Path, kind: str, final: Path, build: Callable[[Path], None]) -> None:
    work = Path(tempfile.mkdtemp(prefix=f".{kind}-", dir=base))
    try:
        build(work)
        names = []
        for path in [work, *work.rglob("*")]:  # readable by the sandbox user, writable by nobody else
            if not path.is_symlink():
                mode = path.stat().st_mode
                path.chmod(0o755 if stat.S_ISDIR(mode) or mode & 0o100 else 0o644)
            if path != work:
                names.append(str(path.relative_to(work)))
        if final.exists():  # an incomplete stage: set aside (sandboxes may still have it mounted)
            final.rename(base / f".old-{final.name}-{os.getpid()}")
            shutil.rmtree(base / f".old-{final.name}-{os.getpid()}", ignore_errors=True)
        work.rename(final)
        final.with_name(final.name + ".files").write_text(json.dumps(names))
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


@functools.cache
def _base_dir() -> Path:
    uid = os.getuid()
    for parent in ("/var/tmp", tempfile.gettempdir()):
        base = Path(parent) / f"computer-python-{uid}"
        with contextlib.suppress(OSError):
            base.mkdir(mode=0o755, exist_ok=True)
            st = base.lstat()
            if stat.S_ISDIR(st.st_mode) and st.st_uid == uid and not st.st_mode & 0o022:
                return base
    private = Path(tempfile.mkdtemp(prefix=f"computer-python-{uid}-"))
    private.chmod(0o755)
    atexit.register(shutil.rmtree, private, True)
    return private
