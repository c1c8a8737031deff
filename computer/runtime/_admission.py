"""``Admission``: how a bubblewrap sandbox gets its cgroups and rlimits without a launcher process.

bubblewrap writes its sandbox process's pid to ``--info-fd`` right after creating it; that process
sets up the namespaces and mounts, then blocks reading ``--block-fd`` before it starts the command.
Meanwhile we move it into the run's cgroups and set its rlimits (``prlimit``), then let it go: the
command and everything it starts inherit both. This replaces a bash launcher that did the same before
``exec``ing bubblewrap (1.0-1.5 ms of CPU and ~1 ms of start-up per sandbox). A sandbox process that
was never admitted is killed before its block is lifted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from ._limits import Rlimit, set_limits
from ._tasks import in_background, offload

__all__ = ["CREATION_GRACE", "Admission", "enter"]

# How long a cancelled spawn waits for asyncio to finish creating the child before it gives up on
# it (and only sweeps its cgroups), and how long bubblewrap may take to report its sandbox process.
# Creation is a fork/exec plus connecting three pipes: it takes milliseconds, seconds on a machine
# under heavy load.
CREATION_GRACE = 20.0


class Admission:
    """The two pipes of one bubblewrap start: ``--info-fd`` (its report) and ``--block-fd`` (our go)."""

    def __init__(self) -> None:
        self.info_r: int | None
        self.info_w: int | None
        self.block_r: int | None
        self.block_w: int | None
        self.info_r, self.info_w = os.pipe()
        try:
            self.block_r, self.block_w = os.pipe()
        except BaseException:  # out of descriptors (EMFILE): the first pipe is not kept
            os.close(self.info_r)
            os.close(self.info_w)
            raise
        self._reading: asyncio.Future[int | None] | None = None

    def close_child_ends(self) -> None:
        for name in ("info_w", "block_r"):
            fd = getattr(self, name)
            if fd is not None:
                setattr(self, name, None)
                os.close(fd)

    def close(self) -> None:
        """Close every end we still hold (an unreleased block reads end-of-file: call
        :meth:`refuse` first when a sandbox process may exist)."""
        self.close_child_ends()
        for name in ("info_r", "block_w"):
            fd = getattr(self, name)
            if fd is not None:
                setattr(self, name, None)
                os.close(fd)

    async def _read_child(self) -> int | None:
        """The sandbox process's pid from bubblewrap's info (None: it ended without one); read once."""
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._read_info())
        return await asyncio.shield(self._reading)

    async def _read_info(self) -> int | None:
        self.close_child_ends()
        fd = self.info_r
        assert fd is not None
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bytes] = loop.create_future()
        data = bytearray()

        def readable() -> None:
            try:
                chunk = os.read(fd, 4096)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            data.extend(chunk)
            # One JSON object, written at once; the sandbox process may keep the pipe open.
            if (not chunk or data.rstrip().endswith(b"}")) and not done.done():
                done.set_result(bytes(data))

        os.set_blocking(fd, False)
        loop.add_reader(fd, readable)
        try:
            raw = await asyncio.wait_for(done, CREATION_GRACE)
        except TimeoutError:
            raw = b""
        finally:
            loop.remove_reader(fd)
            self.info_r = None
            os.close(fd)
        try:
            return int(json.loads(raw)["child-pid"])
        except (ValueError, KeyError, TypeError):
            return None

    async def admit(
        self,
        groups: Sequence[Path],
        limits: Sequence[Rlimit],
        attach: Callable[[int], Awaitable[None]] | None = None,
    ) -> None:
        """Put the sandbox process in ``groups`` under the rlimits ``limits``, ``attach`` it (its
        network: ``_slirp``, called with its pid while it is held), then let it start its command."""
        child = await self._read_child()
        if child is not None:  # None: bubblewrap failed before; its exit status and stderr tell why
            # In a thread: moving a process into a memory cgroup now and then waits for an RCU grace
            # period (1-2 in 100 writes here take 8-23 ms), which must not stall the event loop.
            with contextlib.suppress(ProcessLookupError):  # it died in its set-up (a bind failed…):
                await offload(None, enter, child, groups, limits)  # bubblewrap's status tells why
                if attach is not None:
                    await attach(child)
        fd, self.block_w = self.block_w, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.write(fd, b"x")
            os.close(fd)

    async def refuse(self, creation: asyncio.Task[asyncio.subprocess.Process]) -> None:
        """Kill the sandbox process (if one was created) before its block is lifted."""
        if not creation.done():  # still being created: keep it blocked until it is, then refuse
            creation.add_done_callback(self._refuse_later)
            return
        if not creation.cancelled() and creation.exception() is None:
            child = await self._read_child()
            if child is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(child, signal.SIGKILL)
        self.close()

    def _refuse_later(self, creation: asyncio.Task[asyncio.subprocess.Process]) -> None:
        in_background(self.refuse(creation), "killing a sandbox process never admitted")


def enter(pid: int, groups: Sequence[Path], limits: Sequence[Rlimit]) -> None:
    """Move ``pid`` into ``groups`` and set its rlimits."""
    for group in groups:
        try:
            (group / "cgroup.procs").write_text(str(pid))
        except OSError as exc:
            raise OSError(exc.errno, f"sandbox: cannot join the cgroup {group}: {exc.strerror}") from exc
    set_limits(pid, limits)
