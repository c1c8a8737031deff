"""Many workspaces open at once in one process, under a low descriptor limit (a child process each:
limits are per process, and a lowered hard limit cannot be raised again)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from child_json import child_report

_CHILD = r"""
import asyncio, errno, json, resource, sys
import computer

soft, hard, count, data = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def main():
    opened, failure = [], None
    try:
        for i in range(count):
            ws = computer.Workspace(path=f"{data}/w{i}.sqlite")
            opened.append(ws)
            await ws.fs.write_file("/f", str(i))
    except OSError as exc:
        failure = {"errno": exc.errno, "path": exc.filename, "message": str(exc)}
    kept = [await ws.fs.read_text("/f") == str(i) for i, ws in enumerate(opened)]
    for ws in opened:
        await ws.close()
    print(json.dumps({"opened": len(opened), "kept": all(kept), "failure": failure,
                      "soft": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}))


asyncio.run(main())
"""


def _child(tmp_path: Path, soft: int, hard: int, count: int) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-c", _CHILD, str(soft), str(hard), str(count), str(tmp_path)]
    report: dict = child_report(argv, env=env, timeout=120)
    return report


def test_a_process_opens_more_workspaces_than_its_soft_descriptor_limit_allows(tmp_path: Path) -> None:
    """Each open workspace holds 3 descriptors: under a soft limit of 64 (a login shell's is 1,024:
    its 339th open failed) the 20th failed, EIO, though the hard limit allowed far more. Opening a
    file-backed workspace raises the soft limit toward the hard one, as a live sandbox does."""
    report = _child(tmp_path, 64, 4096, 60)
    assert report["failure"] is None, report
    assert (report["opened"], report["kept"]) == (60, True), report
    assert report["soft"] == 4096, report


def test_no_descriptor_left_is_emfile_naming_the_store(tmp_path: Path) -> None:
    """The hard limit reached: the next open is EMFILE naming the file, not EIO (which says the file
    is damaged); every workspace opened before keeps its bytes."""
    report = _child(tmp_path, 64, 64, 60)
    failure = report["failure"]
    assert failure is not None and failure["errno"] == 24, report  # EMFILE
    assert failure["path"] == str(tmp_path / f"w{report['opened']}.sqlite"), report
    assert "no file descriptor left" in failure["message"], report
    assert report["opened"] >= 10 and report["kept"], report
