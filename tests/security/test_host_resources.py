"""What a program in one workspace's sandbox can take of what the host shares with every other
workspace: the scratch tmpfs (its memory and inodes) that warm mirrors keep after a run."""

from __future__ import annotations

from pathlib import Path

import computer
from computer.runtime import MirrorPool, ShellBackend
from computer.runtime._mirror_pool import ScratchBudget


async def test_a_warm_mirror_of_many_empty_entries_counts_against_the_scratch_budget(tmp_path: Path) -> None:
    """An empty file or directory costs no byte but a tmpfs inode and dentry on the host (~1 KB of
    kernel memory) and a row of the mirror's state: a mirror of a million of them counted 0 bytes and
    stayed warm for good. The budget now counts entries too: one alone over it is not kept."""
    budget = ScratchBudget(1 << 30)
    budget.entries = 1000
    shell = ShellBackend(live=False, mirror_pool=lambda base, root: MirrorPool(base, root, budget=budget))
    async with computer.Workspace(str(tmp_path / "ws.sqlite"), backends=[shell]) as ws:
        small = await (await ws.runtime.exec("mkdir small && touch small/a small/b")).result()
        assert small.status == "completed", small.stderr
        assert budget.held() == 0 and len(shell.mirrors.idle_mirrors(ws.runtime.context.workspace_id)) == 1
        made = await (
            await ws.runtime.exec("mkdir d && cd d && seq 3000 | xargs touch && mkdir -p x/y/z")
        ).result()
        assert made.status == "completed", made.stderr
        assert shell.mirrors.idle_mirrors(ws.runtime.context.workspace_id) == [], "3,000 empty entries kept"
        assert len(await ws.fs.readdir("/workspace/d")) == 3001
        again = await (await ws.runtime.exec("ls d | wc -l; test -d d/x/y/z && echo deep")).result()
        assert again.stdout.split() == ["3001", "deep"], again.stdout  # a full push brought it back
