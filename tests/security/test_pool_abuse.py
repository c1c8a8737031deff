"""Issue 17 through a pool worker: one workspace's attacks (a FIFO where the workspace then writes a
file, a setuid program, a tree deeper than ``rmtree`` survives) on the only shell worker, while
another workspace's runs go on there (the pool is held at one worker: elastic, it would grow)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from exec_cases import setuid_root_files

import computer


async def _run(ws: Any, source: str, limit: float = 30) -> computer.ExecResult:
    """Run ``source`` with a timeout of ``limit`` seconds; the result must come within a minute more."""
    handle = await ws.runtime.exec(source, timeout=limit)
    return await asyncio.wait_for(handle.result(), limit + 60)


async def test_one_workspaces_attacks_on_a_pool_worker_leave_anothers_runs_alone(
    ray_session: Any, tmp_path: Path, name: str
) -> None:
    computer.init(
        data_dir=tmp_path / "data", shell_pool_size=1, shell_pool_max=1, python_pool_size=1, python_pool_max=1
    )
    start = time.time()
    async with computer.get_workspace(name) as attacker, computer.get_workspace(f"{name}-other") as victim:
        await attacker.fs.mkdir("/workspace")
        await victim.fs.mkdir("/workspace")
        made = await _run(
            attacker,
            "mkfifo f && cp /usr/bin/id x && chmod 4755 x && mkdir -p deep && cd deep &&"
            # 1,500 levels, 100 per mkdir -p: one `mkdir d && cd d` per level costs bash's cd a walk
            # of the whole path each time (74 s on this machine, 240 s with cd -P), this ~1 s.
            " p=$(printf 'd/%.0s' $(seq 100)); for i in $(seq 15); do mkdir -p $p && cd $p || exit 1; done;"
            " echo made",
            limit=120,
        )
        assert made.stdout == "made\n", made.stderr
        assert made.skipped == ["/workspace/f"] and "FIFO" in made.skipped_reasons["/workspace/f"]
        # The next push must write a file where the attacker left a FIFO: it used to block the
        # worker's event loop forever (every workspace's runs on it hung, timeouts never fired).
        await attacker.fs.write_file("/workspace/f", "over the fifo\n")
        attack = asyncio.ensure_future(_run(attacker, "cat f; sleep 60", limit=5))
        for i in range(5):
            result = await _run(victim, f"echo {i}")
            assert (result.status, result.stdout) == ("completed", f"{i}\n")
        hit = await attack
        assert hit.status == "cancelled" and hit.exit_code == 124  # ended by its timeout
        assert hit.stdout == "over the fifo\n"
        assert (await attacker.fs.stat("/workspace/x")).mode & 0o6000 == 0
        assert (await _run(attacker, "find deep -type d | wc -l")).stdout == "1501\n"
    assert setuid_root_files(["/dev/shm"], start) == []
