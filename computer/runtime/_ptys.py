"""A sandbox's pseudo-terminals: a devpts instance of its own holding at most ``max_ptys``.

Pseudo-terminals are one count for the whole host: every devpts instance draws on
``kernel.pty.max`` less ``kernel.pty.reserve`` (4,096 - 1,024 by default), and bubblewrap's
``--dev`` mounts one (``newinstance``) with no ``max=``. One program opened all 3,071 (a live
sandbox's background process: for good) and every other workspace's ``/dev/ptmx`` failed ``ENOSPC``
(``script``, python's ``pty``, ``expect``, ``tmux``, ``ssh -t``).

How (decision): bubblewrap has no devpts option, and the sandbox may not mount one itself (no
capabilities, the seccomp filter refuses ``mount``). When this process is root (``CAP_SYS_ADMIN``),
the sandbox starts behind :func:`pty_prefix`: ``unshare --mount --propagation slave`` gives the
launched process a mount namespace of its own, where ``mount`` puts a devpts instance
``newinstance,max=N,ptmxmode=0666,mode=0620`` (``nosuid,noexec``) over ``/dev/pts``; then the usual
``setpriv`` and bubblewrap, which binds it on the sandbox's ``/dev/pts`` (:data:`PTS_BIND`, after its
``--dev``: ``/dev/ptmx`` is its link to ``pts/ptmx``; a device bind, not ``nodev``, so its
terminals open; a devpts instance holds nothing else). The host's mount namespace never sees it (a
slave receives the host's mounts, sends none back) and it ends with the sandbox's last process: no
mount to unmount, none left by a crash. A pty's owner is the sandbox user (no ``gid=``: the host's
``tty`` group is not mapped inside). Past ``max`` ``open("/dev/ptmx")`` fails ``ENOSPC`` in that
sandbox alone. Costs one ``unshare``, ``sh`` and ``mount`` exec per sandbox (bubblewrap's start
of ``true``, at best 7.5 ms here, became 8.7).

Where the prefix does not work (an unprivileged host process, no util-linux), probed once per
machine state as bubblewrap is (``_bwrap.bwrap_works``), sandboxes keep bubblewrap's devpts with the
host's count, and ``Sandbox.isolation`` says so.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Sequence

from ._bwrap import bwrap_works

__all__ = ["PTS_BIND", "pty_isolation", "pty_prefix"]

PTS = "/dev/pts"
# bubblewrap's options that put the prefix's instance on the sandbox's /dev/pts (after ``--dev``).
PTS_BIND = ("--dev-bind", PTS, PTS)


@functools.cache
def pty_prefix(max_ptys: int | None, drop: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The argv prefix (before ``drop``, the privilege drop, and bubblewrap) that gives the sandbox
    a devpts instance of at most ``max_ptys`` (see the module); empty when ``max_ptys`` is None or
    the prefix does not work here."""
    if max_ptys is None:
        return ()
    if max_ptys < 1:
        raise ValueError(f"max_ptys must be at least 1 (or None), not {max_ptys}")
    tools = [shutil.which(name) for name in ("unshare", "sh", "mount")]
    if None in tools:
        return ()
    unshare, sh, mount = tools
    options = f"newinstance,max={max_ptys},ptmxmode=0666,mode=0620,nosuid,noexec"
    script = f'{mount} -t devpts -o {options} devpts {PTS} && exec "$@"'
    prefix = (f"{unshare}", "--mount", "--propagation", "slave", "--", f"{sh}", "-c", script, "sh")
    return prefix if bwrap_works((*prefix, *drop)) else ()


def pty_isolation(max_ptys: int | None, capped: Sequence[str]) -> str:
    """What bounds a sandbox's pseudo-terminals, for ``Sandbox.isolation``."""
    if capped:
        return f"at most {max_ptys} pseudo-terminals (a devpts instance of its own)"
    return "pseudo-terminals from the host's count (no devpts instance of its own here)"
