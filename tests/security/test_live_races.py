"""A live sandbox's processes run while the host syncs its mirror (issue 18): a program swapping a
directory for a symlink to a host directory, over and over, must never make the host (root) write
or read through it. The sandbox is frozen for each sync; reads and writes never follow links."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import computer
from computer.runtime import ShellBackend

pytestmark = pytest.mark.skipif(not ShellBackend().live, reason="no live sandboxes here (cgroup freezer)")


@pytest.fixture
def target() -> Iterator[Path]:
    """A host directory (root's) the sandbox names in its symlinks."""
    made = Path(f"/tmp/computer-race-{secrets.token_hex(4)}")
    made.mkdir(mode=0o755)
    (made / "secret.txt").write_text("host secret\n")
    yield made
    shutil.rmtree(made, ignore_errors=True)


async def test_a_directory_swapped_for_a_symlink_during_syncs_never_leads_the_host_outside(
    target: Path,
) -> None:
    if True:  # (one block: the workspace and its sandbox end before the host directory is checked)
        async with computer.Workspace(backends=[ShellBackend()]) as ws:
            await ws.fs.mkdir("/workspace/d", recursive=True)
            swapper = (
                f"setsid sh -c 'end=$(($(date +%s) + 8)); while [ $(date +%s) -lt $end ]; do "
                f"rm -rf d; ln -s {target} d; rm -f d; mkdir d; echo x > d/from-sandbox; "
                "ln -sfn ../../../../../../../.. d/up; done' > /dev/null 2>&1 &"
            )
            started = await (await ws.runtime.exec(swapper)).result()
            assert started.status == "completed"
            deadline = time.monotonic() + 6
            i = 0
            while time.monotonic() < deadline:  # workspace writes below d: pushes while it swaps
                i += 1
                try:
                    await ws.fs.write_file(f"/workspace/d/pwn{i}", b"from the workspace\n")
                except OSError:
                    pass  # d is a symlink in the workspace right now (pulled): the write is refused
                await asyncio.sleep(0.01)
            await ws.runtime.end_sandbox()
            assert sorted(os.listdir(target)) == ["secret.txt"], "the host wrote through the symlink"
            # Nothing of the host directory was read into the workspace through the link.
            for entry in await ws.fs.find("/workspace", "**"):
                if entry.type == "file":
                    assert await ws.fs.read_file(entry.path) != b"host secret\n"
            assert i > 50
