"""``Standby``: a sandbox started ahead of its program (see :meth:`Sandbox.prepare`).

A standby sandbox runs a stub bash line: it reads its program's command line as a script from a
control pipe (until the host closes it) and sources it; the script ``exec``s the program. Closing the
pipe without writing ends the standby cleanly (an empty script).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from ._process import SandboxProcess, drop_transport
from ._tasks import offload

__all__ = ["PYTHON", "STANDBY_STUB", "Standby", "write_all"]

STANDBY_STUB = ". /dev/fd/{fd}"
# The stub starts with an empty environment; bash itself exports these. The script unsets them and
# hands the program its environment as assignments on ``exec`` (one exec, where ``env -i`` costs a
# second one: 0.4 ms). bash adds SHLVL=0, which the program's bash turns into 1 as it does
# when SHLVL is unset. Names bash refuses or rewrites there (read-only variables, SHLVL, ``_``) and
# names that are not shell identifiers go through ``env -i`` instead.
_STUB_EXPORTS = "PWD OLDPWD SHLVL _"
_NOT_ON_EXEC = frozenset({"BASHOPTS", "BASH_VERSINFO", "EUID", "PPID", "SHELLOPTS", "UID", "SHLVL", "_"})
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# The host's interpreter, which every sandbox has under the host's /usr (a live sandbox's init runs on it).
PYTHON = "/usr/bin/python3"
# An environment of more variables goes to the program through :data:`_HELPER` on ``PYTHON`` (one exec
# more, ~25-50 ms) instead of assignments: bash builds a program's environment in time that grows with
# the square of its variables (``vlist_add`` looks for each one in the list made so far), 1.8 s for
# 20,000 in the stub, before the program's own bash paid the same again; ``env -i`` (glibc's
# ``setenv`` looks through the environment for each name) 0.55 s. Measured: the assignments cost about
# what the helper does at ~3,000 variables.
_HELPER_FROM = 4096
# Reads the environment (JSON on fd 3, a heredoc of the script), enters the cwd and execs the program
# with exactly that environment; exits 125 (cwd), 126 or 127 (the program) as the script would.
_HELPER = r"""import json, os, sys
with open(3, "rb") as f:
    env = {k.encode(): v.encode() for k, v in json.load(f).items()}
try:
    os.chdir(sys.argv[1])
except OSError as e:
    sys.stderr.write(f"cd: {sys.argv[1]}: {e.strerror}\n")
    sys.exit(125)
try:
    os.execvpe(sys.argv[2], sys.argv[2:], env)
except OSError as e:
    sys.stderr.write(f"{sys.argv[2]}: {e.strerror}\n")
    sys.exit(127 if isinstance(e, FileNotFoundError) else 126)
"""
_END = "__COMPUTER_ENV__"  # the heredoc's end: never a line of JSON (which starts with "{")
# A script this small always fits an empty pipe (64 KiB on Linux): it is written without a thread.
_DIRECT_WRITE = 32 * 1024


@dataclass
class Standby:
    """A sandbox started ahead of its program: namespaces, binds, cgroups and rlimits are in place and
    a stub bash waits for the command line.

    :meth:`start` hands it the program; it then behaves exactly like :meth:`Sandbox.spawn`'s process.
    A standby is single-use and bound to the event loop that made it.
    """

    process: SandboxProcess
    control: int | None  # write end of the stub's control pipe
    stub_fd: int  # the read end's number in the stub (closed before the program starts)
    loop: asyncio.AbstractEventLoop

    def usable(self) -> bool:
        """Still waiting for its program, on this event loop."""
        try:
            same_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            same_loop = False
        return same_loop and self.control is not None and self.process.proc.returncode is None

    async def start(
        self, command: Sequence[str], *, cwd: str, env: dict[str, str], after: str | None = None
    ) -> SandboxProcess:
        """Run ``command`` in ``cwd`` with exactly ``env`` (raises ``BrokenPipeError`` when the stub
        is gone; the standby is then spent and should be discarded).

        ``after``: shell lines the stub runs once the command ended (it runs the command as its child
        then, not ``exec``-ed: ``_leftovers.epilogue``), the stub's exit status the command's; there,
        fd 3 is the run's stderr (the stub's own stderr goes nowhere: bash's "Segmentation fault" for
        its child), and the signals a command sends its parent are caught (``kill $PPID``)."""
        if self.control is None:
            raise BrokenPipeError("this standby sandbox was already used or closed")
        program = " ".join(shlex.quote(w) for w in command)
        if len(env) > _HELPER_FROM and os.access(PYTHON, os.X_OK):
            words = [PYTHON, "-I", "-S", "-c", _HELPER, cwd]
            blob = json.dumps(env)
            body = f"exec {' '.join(shlex.quote(w) for w in words)} {program} 3<<'{_END}'\n{blob}\n{_END}"
        elif all(_IDENTIFIER.match(key) and key not in _NOT_ON_EXEC for key in env):
            assigned = " ".join(f"{key}={shlex.quote(value)}" for key, value in env.items())
            body = (
                f"cd -P -- {shlex.quote(cwd)} || exit 125\nunset {_STUB_EXPORTS}\n{assigned} exec {program}"
            )
        else:
            words = ["/usr/bin/env", "-i", "-C", cwd, "--", *(f"{k}={v}" for k, v in env.items())]
            body = "exec " + " ".join(shlex.quote(w) for w in words) + f" {program}"
        if after is not None:  # a subshell (a fork, no program started: ``env -i`` cost ~1.5 ms) execs it
            body = (
                "exec 3>&2 2>/dev/null\ntrap : HUP INT QUIT TERM USR1 USR2\n"
                f"(\n{body}\n) 2>&3 3>&-\nrc=$?\n{after}exit $rc"
            )
        script = f"exec {self.stub_fd}<&-\n{body}\n".encode("utf-8", "surrogateescape")
        fd, self.control = self.control, None
        if len(script) <= _DIRECT_WRITE:
            write_all(fd, script)
        else:  # the stub reads while we write: do not block the event loop on a full pipe
            await offload(None, write_all, fd, script)
        return self.process

    def close(self) -> None:
        """Let the stub end (it reads an empty script); thread-safe, idempotent. Reaping is
        :meth:`discard`'s job, or the caller's."""
        drop_transport(self.process.proc)  # (only if its event loop has ended: before the stub can end)
        fd, self.control = self.control, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    async def discard(self) -> None:
        """End the standby, reap it and remove its cgroups."""
        self.close()
        await self.process.discard()

    def discard_now(self) -> None:
        """End the standby from any thread or after its loop is gone: kill, then remove its cgroups."""
        self.close()
        self.process.kill_now()


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to the blocking descriptor ``fd``, then close it."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
