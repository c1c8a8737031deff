"""A program cannot fill the host's disk through share links (``computer/runtime/_share_budget.py``).

Each link stores a copy of the file in the asset store until it expires: a sparse 512 MiB file,
which costs the workspace nothing, published 6 times from the sandbox wrote 3.1 GB to the host's disk
in 15 s. The links a workspace's programs make now hold a bounded number of bytes and links.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

import computer
from computer.runtime._share_budget import ShareBudget

MIB = 1 << 20


def _stored(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and p.suffix != ".sqlite")


async def test_a_program_publishing_a_sparse_file_again_and_again_stops_at_the_budget(
    ws: computer.Workspace, tmp_path: Path
) -> None:
    ws.runtime.context.shares = ShareBudget(max_bytes=48 * MIB)
    result = await (
        await ws.runtime.exec(
            "truncate -s 16M f; for i in 1 2 3 4 5; do assets publish f >/dev/null 2>>err || echo refused; done; "
            "cat err",
            timeout=120,
        )
    ).result()
    assert result.status == "completed", result.stderr
    assert result.stdout.count("refused") == 2, result.stdout  # before: all five published, 80 MiB stored
    assert "would go over" in result.stdout, result.stdout
    assert _stored(tmp_path / "assets" / "blobs") <= 48 * MIB
    assert ws.runtime.context.shares.held() == (48 * MIB, 3)
    # The agent's own shares are not the programs': they go on.
    assert await ws.assets.share("/workspace/f", expires_after=60)


def test_links_are_let_go_as_they_expire_and_none_before_the_least_hold() -> None:
    now = [0.0]
    budget = ShareBudget(max_bytes=100, max_links=3, min_hold=10.0, clock=lambda: now[0])
    with budget.hold("/a", 60, 1.0):  # a 1 s link is held 10 s: its blob waits for a sweep
        pass
    with budget.hold("/b", 40, 30.0):
        pass
    with pytest.raises(OSError) as refused:
        with budget.hold("/c", 1, 5.0):
            pass
    assert (refused.value.errno, refused.value.filename) == (errno.EDQUOT, "/c")
    now[0] = 9.0
    assert budget.held() == (100, 2)
    now[0] = 10.0
    assert budget.held() == (40, 1)
    with pytest.raises(RuntimeError), budget.hold("/d", 50, 5.0):  # a share that fails holds nothing
        raise RuntimeError("the store failed")
    assert budget.held() == (40, 1)
    for name in ("/e", "/f"):
        with budget.hold(name, 0, 100.0):
            pass
    with pytest.raises(OSError, match="3 links"), budget.hold("/g", 0, 1.0):  # at most max_links
        pass
    now[0] = 40.0
    assert budget.held() == (0, 2)
