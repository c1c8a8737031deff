"""Stage directories of the python backend: built once, whole, by one process at a time."""

from __future__ import annotations

import stat
import threading
import time
from pathlib import Path

import pytest

from computer.runtime import _pystage


@pytest.fixture
def base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(_pystage, "_base_dir", lambda: tmp_path)
    return tmp_path


def test_concurrent_stagers_build_once_and_all_get_the_whole_stage(base: Path) -> None:
    builds = []

    def build(d: Path) -> None:
        builds.append(d)
        (d / "sub").mkdir()
        time.sleep(0.05)  # a slow build: the others must wait, not build or see it half done
        (d / "sub" / "f").write_text("x")
        (d / "run").write_text("#!/bin/sh\n")
        (d / "run").chmod(0o700)

    results: list[str] = []
    threads = [
        threading.Thread(target=lambda: results.append(_pystage._stage("k", ["a"], build))) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(builds) == 1 and len(set(results)) == 1 and len(results) == 4
    final = Path(results[0])
    assert (final / "sub" / "f").read_text() == "x"
    modes = {
        p.name: stat.S_IMODE(p.stat().st_mode)
        for p in [final, final / "sub", final / "sub" / "f", final / "run"]
    }
    assert modes == {final.name: 0o755, "sub": 0o755, "f": 0o644, "run": 0o755}
    assert sorted(p.name for p in base.iterdir()) == [
        ".lock",
        final.name,
        final.name + ".files",
    ]  # nothing else


def test_a_failed_build_leaves_nothing_and_the_next_one_builds_again(base: Path) -> None:
    def broken(d: Path) -> None:
        (d / "part").write_text("x")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        _pystage._stage("k", ["b"], broken)
    assert [p.name for p in base.iterdir()] == [".lock"]
    final = Path(_pystage._stage("k", ["b"], lambda d: (d / "ok").write_text("y") and None))
    assert (final / "ok").read_text() == "y"


def test_a_stage_missing_a_file_is_built_again(base: Path) -> None:
    def build(d: Path) -> None:
        (d / "sub").mkdir()
        (d / "sub" / "f").write_text("x")

    final = Path(_pystage._stage("k", ["c"], build))
    (final / "sub" / "f").unlink()  # what a cleaner of /var/tmp may do to a file not read for weeks
    assert Path(_pystage._stage("k", ["c"], build)) == final
    assert (final / "sub" / "f").read_text() == "x"
    assert sorted(p.name for p in base.iterdir()) == [".lock", final.name, final.name + ".files"]
