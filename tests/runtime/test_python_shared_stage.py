"""The staged interpreter is shared by the user's processes (issue 22, CLI speed): one tree per content
in the scratch base's shared directory, built by the first process, only named (a few ms) by the next
ones, held while a process runs, reaped once nobody holds nor used it for a day (``_staging``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import computer
from computer.runtime import PythonBackend, _scratch, _staging
from computer.runtime._scratch import SHARED_UNUSED, reap_dead

# Stages this process's interpreter with TMPDIR the test's directory; prints the staged tree, its
# inode and how many trees this process built. With "hold", waits for its stdin to close first.
_STAGE = """
import json, os, sys
from computer.runtime import _staging
built = []
link_tree = _staging._link_tree
def counting(*args, **kwargs):
    built.append(1)
    return link_tree(*args, **kwargs)
_staging._link_tree = counting
staged = _staging.stage_python()
source = staged.binds[0].source if staged.binds else ""
print(json.dumps([source, os.stat(source).st_ino if source else 0, len(built)]), flush=True)
if sys.argv[1:] == ["hold"]:
    sys.stdin.read()
"""


_HOST_PREFIX = os.path.realpath(sys.base_prefix)


def _interpreter_staged() -> None:
    exe = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    if exe.startswith("/usr/"):
        pytest.skip("the interpreter lives under /usr: nothing is staged")


def _stage_in_process(tmp: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _STAGE, *args],
        env={**os.environ, "TMPDIR": str(tmp)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _staged_by_a_process(tmp: Path) -> tuple[str, int, int]:
    proc = _stage_in_process(tmp)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    path, inode, built = json.loads(out)
    return path, inode, built


def test_processes_share_one_staged_interpreter_and_only_the_first_builds_it(tmp_path: Path) -> None:
    _interpreter_staged()
    first = _staged_by_a_process(tmp_path)
    second = _staged_by_a_process(tmp_path)
    assert first[2] == 1 and second[2] == 0  # the second process only named it
    assert first[:2] == second[:2]  # the same tree, not remade
    path = Path(first[0])
    assert path.parent == tmp_path / f"computer-shared-{os.geteuid()}"
    assert re.fullmatch(r"python-[0-9a-f]{32}", path.name)
    assert (path / "bin" / "python3").is_symlink() and (path / "lib").is_dir()
    # The processes' own scratch directories are gone; the shared tree stays for the next one.
    assert not [p for p in tmp_path.iterdir() if re.fullmatch(r"computer-\d+-\d+", p.name)]


def test_processes_staging_at_once_end_with_one_tree_and_no_leftover(tmp_path: Path) -> None:
    """Builders racing for one name: the first rename wins, the others remove their own tree."""
    _interpreter_staged()
    procs = [_stage_in_process(tmp_path) for _ in range(3)]
    outs = [json.loads(proc.communicate(timeout=120)[0]) for proc in procs]
    assert len({(path, inode) for path, inode, _ in outs}) == 1
    shared = tmp_path / f"computer-shared-{os.geteuid()}"
    assert os.listdir(shared) == [Path(outs[0][0]).name]


def test_a_held_tree_survives_the_reaper_and_an_unheld_unused_one_is_reaped(tmp_path: Path) -> None:
    _interpreter_staged()
    holder = _stage_in_process(tmp_path, "hold")
    try:
        assert holder.stdout is not None
        path, _, built = json.loads(holder.stdout.readline())
        assert built == 1
        old = time.time() - SHARED_UNUSED - 60
        os.utime(path, (old, old))  # held, though not used for more than a day
        assert reap_dead(tmp_path) == []
        assert os.path.isdir(path)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
    os.utime(path, (old, old))
    assert reap_dead(tmp_path) == [Path(path)]  # its holder ended
    assert not os.path.exists(path)
    again = _staged_by_a_process(tmp_path)
    assert again[0] == path and again[2] == 1  # the next process builds it anew, under the same name


@pytest.fixture
def own_staging(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This process staging in ``tmp_path`` (as if it were the temp directory), as a new process
    would: nothing remembered, nothing held; what it holds is let go of at the end."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(_staging, "_STAGED_PYTHONS", {})
    monkeypatch.setattr(_scratch, "_HELD", {})
    yield tmp_path
    for fd in _scratch._HELD.values():
        os.close(fd)


def _fake_interpreter(prefix: Path) -> Path:
    """An interpreter at ``prefix`` (this one's executable, linked) with a two-module standard library."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (prefix / "bin").mkdir(parents=True)
    stdlib = prefix / "lib" / version
    stdlib.mkdir(parents=True)
    exe = prefix / "bin" / version
    os.link(os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable), exe)
    (stdlib / "os.py").write_text("# os\n")
    (stdlib / "mod.py").write_text("x = 1\n")
    return exe


def test_another_standard_library_names_another_tree(own_staging: Path) -> None:
    exe = _fake_interpreter(own_staging / "prefix")
    stdlib = exe.parent.parent / "lib" / exe.name
    first = _staging.stage_python(str(exe))
    assert Path(first.binds[0].source).parent == own_staging / f"computer-shared-{os.geteuid()}"
    _staging._STAGED_PYTHONS.clear()  # a new process, nothing changed: the same tree
    assert _staging.stage_python(str(exe)) == first
    (stdlib / "mod.py").unlink()  # the file replaced (a new inode), as an installer does
    (stdlib / "mod.py").write_text("x = 2\n")
    _staging._STAGED_PYTHONS.clear()
    second = _staging.stage_python(str(exe))
    assert second.binds[0].source != first.binds[0].source
    assert (Path(second.binds[0].source) / "lib" / exe.name / "mod.py").read_text() == "x = 2\n"
    assert (Path(first.binds[0].source) / "lib" / exe.name / "mod.py").read_text() == "x = 1\n"
    (stdlib / "new.py").write_text("")  # a file added
    _staging._STAGED_PYTHONS.clear()
    third = _staging.stage_python(str(exe))
    assert third.binds[0].source not in (first.binds[0].source, second.binds[0].source)
    assert (Path(third.binds[0].source) / "lib" / exe.name / "new.py").exists()


def test_without_a_usable_shared_directory_the_tree_is_the_process_own(own_staging: Path) -> None:
    exe = _fake_interpreter(own_staging / "prefix")
    squat = own_staging / f"computer-shared-{os.geteuid()}"
    squat.mkdir(mode=0o777)
    os.chmod(squat, 0o777)  # open to others: never trusted
    staged = _staging.stage_python(str(exe))
    source = Path(staged.binds[0].source)
    assert re.fullmatch(r"computer-\d+-\d+", source.parent.parent.name) and source.parent.name == "stage"
    assert (source / "lib" / exe.name / "mod.py").read_text() == "x = 1\n"
    assert list(squat.iterdir()) == []
    os.rmdir(squat)
    _staging._STAGED_PYTHONS.clear()  # a new process, once the name is free: the shared tree
    shared = Path(_staging.stage_python(str(exe)).binds[0].source)
    assert shared.parent == squat and (shared / "lib" / exe.name / "mod.py").read_text() == "x = 1\n"


async def test_a_python_run_binds_the_shared_tree_and_names_no_host_path() -> None:
    _interpreter_staged()
    backend = PythonBackend(warm_guests=0)
    if not backend.sandbox.bwrap:
        pytest.skip("bubblewrap does not work here")
    code = "print(open('/proc/self/mountinfo').read()); import json; print(json.dumps([1]))"
    async with computer.Workspace(backends=[backend]) as ws:
        await ws.fs.mkdir("/workspace")
        result = await (await ws.runtime.exec(code, backend="python")).result()
    assert result.status == "completed", result.stderr
    assert result.stdout.endswith("[1]\n")
    line = next(line.split() for line in result.stdout.splitlines() if " /opt/python " in line)
    uid = backend.sandbox.host_ids[0] if backend.sandbox.host_ids is not None else os.geteuid()
    shared = os.path.join(tempfile.gettempdir(), f"computer-shared-{uid}")
    assert re.fullmatch(re.escape(shared) + r"/python-[0-9a-f]{32}", line[3]), line
    assert _HOST_PREFIX not in result.stdout and sys.prefix not in result.stdout


def _cli_exec(data_dir: Path, code: str) -> dict[str, object]:
    """``computer tool shared exec`` on the python backend, in a process of its own (the workspace
    reopened from its file each time)."""
    call = json.dumps({"command": code, "backend": "python"})
    proc = subprocess.run(
        [sys.executable, "-m", "computer.cli", "--data-dir", str(data_dir), "tool", "shared", "exec", call],
        env={**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def test_separate_processes_run_real_programs_on_one_shared_tree(tmp_path: Path) -> None:
    """A program's work in one process (sqlite3, json, the ``workspace`` files) is there for the next
    process's program, after the workspace was reopened and written between the calls, and both ran
    on the same shared interpreter tree."""
    _interpreter_staged()
    if not PythonBackend(warm_guests=0).sandbox.bwrap:
        pytest.skip("bubblewrap does not work here")
    mounts = "[l.split()[3] for l in open('/proc/self/mountinfo') if ' /opt/python ' in l]"
    first = _cli_exec(
        tmp_path,
        "import sqlite3, json\n"
        "db = sqlite3.connect('notes.db'); db.execute('create table t (v)')\n"
        "db.execute('insert into t values (?)', (json.dumps({'n': 1}),)); db.commit(); db.close()\n"
        f"print({mounts}[0])",
    )
    write = json.dumps({"path": "/workspace/extra.txt", "content": "between\n"})
    proc = subprocess.run(
        [sys.executable, "-m", "computer.cli", "--data-dir", str(tmp_path), "tool", "shared", "write", write],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    second = _cli_exec(
        tmp_path,
        "import sqlite3, json\n"
        "rows = sqlite3.connect('notes.db').execute('select v from t').fetchall()\n"
        "print(json.loads(rows[0][0])['n'], open('extra.txt').read().strip())\n"
        f"print({mounts}[0])",
    )
    assert first["status"] == second["status"] == "completed", (first, second)
    tree = str(first["stdout"]).strip()
    assert re.search(r"/computer-shared-\d+/python-[0-9a-f]{32}\Z", tree), first
    assert str(second["stdout"]).splitlines() == ["1 between", tree]
