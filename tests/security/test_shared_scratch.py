"""What processes share in the scratch base: the sandbox's /etc (one copy per content) and bubblewrap's
probe results (successes only), reaped when nobody holds nor used them (``_scratch``, ``_bwrap``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from computer.runtime import _bwrap
from computer.runtime._scratch import SHARED_UNUSED, hold_shared, reap_dead, shared_directory

_ETC = """
import json, os, sys
from computer.runtime._bwrap import sandbox_etc
path = sandbox_etc(sys.argv[1] == "net")
print(json.dumps([str(path), os.stat(path).st_ino]))
"""


def _etc_in_process(tmp: Path, network: str = "") -> tuple[str, int]:
    env = {**os.environ, "TMPDIR": str(tmp)}
    out = subprocess.run(
        [sys.executable, "-c", _ETC, network],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    path, inode = json.loads(out.stdout)
    return path, inode


def test_processes_share_one_etc_copy_per_content_and_it_outlives_them(tmp_path: Path) -> None:
    first = _etc_in_process(tmp_path)
    second = _etc_in_process(tmp_path)
    assert first == second  # the same directory, not remade
    path = Path(first[0])
    assert path.parent == tmp_path / f"computer-shared-{os.geteuid()}"
    assert (path / "passwd").read_text().startswith("root:x:0:0:")
    assert os.stat(path.parent).st_mode & 0o777 == 0o700 and os.stat(path).st_mode & 0o777 == 0o755
    networked = _etc_in_process(tmp_path, "net")
    assert networked[0] != first[0]  # another content (the network's mount points), another copy
    assert [p.name for p in tmp_path.iterdir()] == [path.parent.name]  # the processes' own scratch is gone


def test_a_directory_of_another_owner_or_open_to_others_is_not_used(tmp_path: Path) -> None:
    squat = tmp_path / f"computer-shared-{os.geteuid()}"
    squat.mkdir(mode=0o777)
    os.chmod(squat, 0o777)
    assert shared_directory(tmp_path) is None
    path, _ = _etc_in_process(tmp_path)
    assert not path.startswith(str(squat))  # the process's own copy, in its scratch directory
    assert list(squat.iterdir()) == []


_HOLD = """
import sys
from computer.runtime._scratch import hold_shared
assert hold_shared(sys.argv[1])
print("held", flush=True)
sys.stdin.read()
"""


def test_the_reaper_removes_only_entries_nobody_holds_nor_used_lately(tmp_path: Path) -> None:
    shared = shared_directory(tmp_path)
    assert shared is not None
    old = time.time() - SHARED_UNUSED - 60
    entries = {name: shared / name for name in ("etc-stale", "etc-held", "etc-recent", ".stage-abc")}
    for entry in entries.values():
        (entry / "sub").mkdir(parents=True)
        (entry / "sub" / "file").write_text("x")
    (shared / "probe-old").write_text("true")
    for name in ("etc-stale", "etc-held", ".stage-abc", "probe-old"):
        os.utime(shared / name, (old, old))
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(entries["etc-held"])], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        os.utime(entries["etc-held"], (old, old))  # held since long ago
        removed = reap_dead(tmp_path)
        assert sorted(p.name for p in removed) == [".stage-abc", "etc-stale", "probe-old"]
        assert sorted(os.listdir(shared)) == ["etc-held", "etc-recent"]
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
    os.utime(entries["etc-held"], (old, old))
    assert [p.name for p in reap_dead(tmp_path)] == ["etc-held"]  # its holder ended


def test_holding_marks_an_entry_used_and_fails_for_a_missing_one(tmp_path: Path) -> None:
    shared = shared_directory(tmp_path)
    assert shared is not None
    assert not hold_shared(shared / "etc-never-made")
    entry = shared / "etc-x"
    entry.mkdir()
    os.utime(entry, (1, 1))
    assert hold_shared(entry)
    assert os.stat(entry).st_mtime > time.time() - 60
    assert reap_dead(tmp_path) == []


@pytest.fixture
def probes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """bubblewrap's probe results remembered in ``tmp_path`` (as if it were the temp directory)."""
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    _bwrap.bwrap_works.cache_clear()
    yield tmp_path / f"computer-shared-{os.geteuid()}"
    _bwrap.bwrap_works.cache_clear()


def _probe_returns(monkeypatch: pytest.MonkeyPatch, code: int) -> list[list[str]]:
    runs: list[list[str]] = []

    def run(argv: list[str], **_: object) -> subprocess.CompletedProcess[bytes]:
        runs.append(argv)
        return subprocess.CompletedProcess(argv, code, b"", b"")

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/true")
    return runs


def test_a_successful_probe_is_remembered_for_the_next_process(
    probes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = _probe_returns(monkeypatch, 0)
    assert _bwrap.bwrap_works() is True
    assert len(runs) == 1 and len(list(probes.glob("probe-*"))) == 1
    _bwrap.bwrap_works.cache_clear()  # a new process
    assert _bwrap.bwrap_works() is True and len(runs) == 1
    assert _bwrap.bwrap_works(("/usr/bin/setpriv", "--reuid=5")) is True and len(runs) == 2  # another probe


def test_a_failed_probe_is_never_remembered(probes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A remembered failure would run every later program without namespaces."""
    runs = _probe_returns(monkeypatch, 1)
    assert _bwrap.bwrap_works() is False
    _bwrap.bwrap_works.cache_clear()
    assert _bwrap.bwrap_works() is False and len(runs) == 2
    assert not list(probes.glob("probe-*"))


def test_a_probe_remembered_by_a_process_with_more_capabilities_is_not_reused() -> None:
    """A success remembered by root (``unshare --mount`` of the pseudo-terminal prefix works) was
    reused by a root process without ``CAP_SYS_ADMIN`` (run under ``setpriv``), where that prefix
    fails: every run then failed with a bare ``BrokenPipeError``. The key holds the capability sets."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv (util-linux)")
    show = ["-c", "from computer.runtime import _bwrap; print(_bwrap._probe_key(['/bin/true']))"]
    caps = "-all,+setfcap"
    keys = [
        subprocess.run(
            [*prefix, sys.executable, *show], capture_output=True, text=True, check=True, timeout=60
        ).stdout
        for prefix in ([], [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}", "--"])
    ]
    assert keys[0].startswith("probe-") and keys[1].startswith("probe-")
    assert keys[0] != keys[1]
