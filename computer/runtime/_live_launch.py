"""Starting a live sandbox's init (see ``_live``): ahead of need, like a standby sandbox, or on demand.

``launch`` hands a prepared standby the init (``_live_init.py``), waits until it connects to the
host's ``SOCK_SEQPACKET`` socket in the assets bridge directory, and protects it (and bubblewrap)
from the kernel's out-of-memory killer; ``Launched`` is the result, bound to a workspace later.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

from ._assets_bridge import AssetsBridge
from ._cgroups import procs_of
from ._process import SandboxProcess
from ._standby import PYTHON as INIT_PYTHON
from ._standby import Standby
from ._tasks import offload, run_to_completion

__all__ = ["INIT_PYTHON", "Launched", "launch", "tasks_in"]

INIT_SCRIPT = Path(__file__).with_name("_live_init.py")
INIT_LISTING = Path(__file__).with_name("_live_ps.py")  # the init imports it from beside its own copy
SOCKET_NAME = "live.sock"
_START_TIMEOUT = 10.0


@dataclass
class Launched:
    """A sandbox whose init runs and reported in, not yet bound to a workspace's run (it can be
    started ahead, like a standby sandbox: see the shell backend's warm sandboxes)."""

    process: SandboxProcess
    channel: socket.socket
    bridge_dir: Path
    baseline: int  # tasks in its pids group with only the init (and bubblewrap) running
    base_procs: frozenset[int] = frozenset()  # the host pids of those processes (``cgroup.procs``)

    def usable(self) -> bool:
        """Its init still waits: alive, channel open, nothing said (it speaks only when asked).
        Asked with ``poll``: ``select`` refuses a descriptor past 1023 (ValueError), which a host of
        ~70 live sandboxes holds, and every run that took a sandbox started ahead failed."""
        if self.process.proc.returncode is not None or self.channel.fileno() < 0:
            return False
        poller = select.poll()
        poller.register(self.channel, select.POLLIN)
        return not poller.poll(0)

    async def discard(self) -> None:
        self.channel.close()
        await self.process.discard()
        await offload(None, AssetsBridge.remove_directory, self.bridge_dir)

    def discard_now(self) -> None:
        self.channel.close()
        self.process.kill_now()
        AssetsBridge.remove_directory(self.bridge_dir)


async def launch(
    standby: Standby, bridge_dir: Path, *, inside_dir: str, host_ids: tuple[int, int] | None
) -> Launched:
    """Start the init in ``standby`` (whose binds hold ``bridge_dir`` at ``inside_dir``) and wait
    until it reports in."""
    loop = asyncio.get_running_loop()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_NONBLOCK)
    try:
        path = bridge_dir / SOCKET_NAME
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        listener.bind(str(path))
        if host_ids is not None:
            os.chown(path, *host_ids)
        listener.listen(1)
        script = bridge_dir / "live_init.py"
        shutil.copyfile(INIT_SCRIPT, script)
        script.chmod(0o644)
        listing = bridge_dir / INIT_LISTING.name
        shutil.copyfile(INIT_LISTING, listing)
        listing.chmod(0o644)
        process = await standby.start(
            [INIT_PYTHON, "-I", "-S", f"{inside_dir}/live_init.py", f"{inside_dir}/{SOCKET_NAME}"],
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        )
        try:
            channel, _ = await asyncio.wait_for(loop.sock_accept(listener), _START_TIMEOUT)
        except BaseException:
            await run_to_completion(process.discard())
            raise
    finally:
        listener.close()
    channel.setblocking(False)
    await offload(None, _protect_init, process)
    group = _pids_group(process)
    procs = procs_of(group) if group is not None else None
    return Launched(process, channel, bridge_dir, tasks_in(process) or 0, frozenset(procs or ()))


def _pids_group(process: SandboxProcess) -> Path | None:
    return next((g for g in process.cgroups if "pids" in g.parts), None)


def tasks_in(process: SandboxProcess) -> int | None:
    group = _pids_group(process)
    if group is None:
        return None
    try:
        return int((group / "pids.current").read_text())
    except (OSError, ValueError):
        return None


def _protect_init(process: SandboxProcess) -> None:
    """Out of memory, the kernel kills a command, never the init or bubblewrap (which would end the
    sandbox): their ``oom_score_adj`` is -1000, or, without CAP_SYS_RESOURCE (a Ray worker, whose own
    is 1000 and inherited), 0, the lowest such a process may set; commands set theirs to 500."""
    for group in process.cgroups:
        for pid in procs_of(group) or ():
            for value in ("-1000", "0"):
                try:
                    Path(f"/proc/{pid}/oom_score_adj").write_text(value)
                    break
                except OSError:
                    continue
        return
