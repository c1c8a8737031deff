"""A shell started ahead inside a live sandbox: the next run's ``bash``, already running and waiting for
its command, so that a run skips the spawn and bash's own start (~2-2.5 ms of a ~4 ms ``echo``).

The shell is a job of the sandbox's init like any other (its own process group, the run's pipes), started
as ``/bin/bash -c BOOT`` in the last run's directory with the last run's environment, a moment after that
run's result is out. It waits on descriptor 3 (a pipe) for its command; :meth:`AheadShell.hand` writes
``unset …; export COMPUTER_EXEC_ID=<run>; SECONDS=0; <source>`` there and the shell ``eval``-s it, so the
source runs as with ``bash -c source``: the same ``$0``, ``$-``, ``$LINENO`` and ``$?``, the run's
environment, its stdin, the variable the wait used unset, ``$SECONDS`` from the run's start. What
differs (the README's shell backend says so): a syntax error's message says ``bash: eval: line N`` where
``bash -c`` says ``bash: -c: line N``, ``$BASH_EXECUTION_STRING`` is the wait, and the shell's own
``/proc/<pid>/cmdline`` (``ps`` inside the sandbox) is the wait (the processes API shows the run's,
for its subshells too, also after the run: ``LiveJobs.taken``). A partial write of the command, or
a shell gone meanwhile, runs nothing: the wait's ``read`` sees no NUL and exits.

A command longer than :data:`MAX_SOURCE` bytes (bash reads a pipe a byte at a time: ~0.2 ms a KiB)
goes in a file of the sandbox's bridge directory (read-only inside) instead, and the pipe carries its
path: the shell reads it with ``mapfile`` (~0.3 ms for 88 KB, where ``read -d ""`` took 1.8) and
``eval``-s it the same way, so the run is the same (the differential tests run every script padded
past the limit too). A heredoc writing a file is the usual long command; it spawned its own shell.

A run takes it only when everything it would start with is the same (:meth:`AheadShell.fits`): the
argv is ``bash -c source`` (a source of at most ``bash -c``'s own limit, no NUL), the same directory,
still the same one on the host (a push that removed and made it again, or a rename, leaves the shell
in a directory that is gone), and the same environment but for ``COMPUTER_EXEC_ID``. Otherwise the run
starts its own shell and this one is ended. A shell killed while it waited (``pkill bash`` from a
background process) is not taken.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._live_parts import Job, feed
from ._tasks import in_thread

if TYPE_CHECKING:
    from ._live import LiveSandbox

__all__ = ["BOOT", "EXEC_ID", "MAX_SOURCE", "AheadShell", "start_shell"]

# The variable the wait reads into, unset by the command's first statement.
_VAR = "__computer_run"
# A closed pipe (the shell discarded) ends it without running anything; a path instead of the command
# names the file that holds it (a long one), read whole.
BOOT = (
    f'IFS= read -r -d "" -u 3 {_VAR} || exit 0; exec 3<&-; '
    f'[ "${{{_VAR}:0:1}}" != / ] || mapfile -d "" {_VAR} < "${_VAR}" || exit 126; eval "${_VAR}"'
)
# Commands longer than this (bytes) go through a file (see the module).
MAX_SOURCE = 2048
EXEC_ID = "COMPUTER_EXEC_ID"
_BASH = "/bin/bash"


def _where(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


@dataclass
class AheadShell:
    """A ``bash`` waiting inside ``sandbox`` (its job ``job``, ``waiting``) for the command its run
    writes to ``script`` (our end of its descriptor 3)."""

    sandbox: LiveSandbox
    job: Job
    script: int
    cwd: str  # where it waits (the path the init started it in)
    env: dict[str, str]  # its environment, ``COMPUTER_EXEC_ID`` aside
    host_cwd: str  # that directory on the host (the mirror's)
    where: tuple[int, int] | None  # that directory's (device, inode) when it started
    files: tuple[str, str]  # where a long command goes: the bridge directory on the host, inside

    def usable(self) -> bool:
        return self.sandbox.alive and self.job.waiting and not self.job.exited.done() and self.script >= 0

    def fits(self, argv: list[str], env: dict[str, str], cwd: str) -> bool:
        """Whether a run of ``argv`` with ``env`` in ``cwd`` can be this shell's (see the module)."""
        if len(argv) != 3 or argv[0] != _BASH or argv[1] != "-c" or cwd != self.cwd or not self.usable():
            return False
        if "\0" in argv[2]:
            return False
        if {k: v for k, v in env.items() if k != EXEC_ID} != self.env:
            return False
        return self.where is not None and _where(self.host_cwd) == self.where

    def hand(self, source: str, exec_id: str, stdin: bytes | None, command: str) -> Job:
        """Give the shell its run's command (and ``stdin``); the job is the run's from now on. Raises
        ``OSError`` when the shell is gone already (its pipe closed): the caller starts its own."""
        payload = f"unset {_VAR}; export {EXEC_ID}={shlex.quote(exec_id)}; SECONDS=0; {source}"
        data = payload.encode("utf-8", "surrogateescape")
        try:
            if len(data) > MAX_SOURCE:  # through a file, its path down the pipe (removed after the run)
                name = source_name(exec_id)
                flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
                self.job.source_file = os.path.join(self.files[0], name)
                fd = os.open(self.job.source_file, flags, 0o644)
                try:
                    os.fchmod(fd, 0o644)  # the sandbox's user reads it, whatever this process's umask
                    written = os.write(fd, data)
                    if written != len(data):
                        raise OSError(errno.ENOSPC, "a long command's file took part of it")
                finally:
                    os.close(fd)
                data = f"{self.files[1]}/{name}".encode("utf-8", "surrogateescape")
            data += b"\0"
            try:
                written = os.write(self.script, data)  # an empty pipe takes it whole (<= 64 KiB)
                if written != len(data):
                    raise BlockingIOError("the shell's pipe took part of its command")
            finally:
                os.close(self.script)
                self.script = -1
        except BaseException:
            # The run spawns its own shell: the file goes now, not when the sandbox ends (the run's
            # end removes only the file of a job it took; it stayed in the bridge directory).
            if self.job.source_file is not None:
                with contextlib.suppress(OSError):
                    os.unlink(self.job.source_file)
                self.job.source_file = None
            raise
        job = self.job
        job.command = command
        held, job.stdin = job.stdin, None
        if held is not None:
            if stdin:
                in_thread(lambda: feed(held, stdin), "feeding a run's stdin", daemon=True)
            else:
                os.close(held)
        return job

    async def discard(self) -> None:
        self.discard_now()

    def discard_now(self) -> None:
        """End it (its pipe closed: it exits without running anything; killed as well while the sandbox
        runs), close our ends; from any thread."""
        if self.script >= 0:
            with contextlib.suppress(OSError):
                os.close(self.script)
            self.script = -1
        job = self.job
        if self.sandbox.jobs.pop(job.id, None) is not None and not job.exited.done():
            self.sandbox.signal_job(job)
        for fd in [*job.fds, *([job.stdin] if job.stdin is not None else [])]:
            with contextlib.suppress(OSError):
                os.close(fd)
        job.fds.clear()
        job.stdin = None


def source_name(exec_id: str) -> str:
    """The file of the bridge directory a long command of run ``exec_id`` goes in (``Job.source_file``)."""
    return f"source-{exec_id}.sh"


async def start_shell(
    sandbox: LiveSandbox, name: str, cwd: str, host_cwd: str, env: dict[str, str], files: tuple[str, str]
) -> AheadShell:
    """Start a shell in ``sandbox`` waiting for the next run's command, in ``cwd`` (as the init names
    it; ``host_cwd`` on the host) with ``env`` (``COMPUTER_EXEC_ID`` aside: ``name`` meanwhile); a long
    command comes through a file of ``files`` (the bridge directory on the host, inside)."""
    plain = {k: v for k, v in env.items() if k != EXEC_ID}
    where = _where(host_cwd)
    script_r, script_w = os.pipe()
    os.set_blocking(script_w, False)
    try:
        job = await sandbox.start_job(
            name,
            [_BASH, "-c", BOOT],
            cwd=cwd,
            env={**plain, EXEC_ID: name},
            stdin=None,
            fds=[script_r],
            hold_stdin=True,
            ahead=True,
        )
    except BaseException:
        os.close(script_w)
        raise
    job.waiting = True
    return AheadShell(sandbox, job, script_w, cwd, plain, host_cwd, where, files)
