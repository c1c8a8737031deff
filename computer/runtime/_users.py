"""The host user a sandbox runs as when this process is root (issue 17, item 1).

bubblewrap run by root with ``--unshare-user --uid 65534`` maps the sandbox user to host uid 0: a
program inside has no capabilities, but every file it creates in a bound directory is owned by host
root, so ``chmod 4755`` on a copy of a shell leaves a setuid-root program on the host, and
``RLIMIT_NPROC`` never binds. Run by an unprivileged host user instead, bubblewrap maps the sandbox
user to that user: files it creates are owned by it, and the kernel's per-user limits apply.

Which host user (decision): the ``computer-sandbox`` user when the host has one (an administrator
creates it: ``useradd --system --user-group --no-create-home --shell /usr/sbin/nologin
computer-sandbox``), otherwise the fixed uid/gid :data:`FALLBACK_ID`, 2,000,000,000: no account, above
the uids a distribution hands out and above the subordinate ranges ``useradd`` allocates (100,000 +
65,536 per user), below 2^31 so tools that keep uids in a signed 32-bit integer see it right. It is
refused when the host has an account with that uid or a subordinate range (``/etc/subuid``,
``/etc/subgid``) covering it: that owner could then reach every mirror. A backend never creates
accounts itself (changing ``/etc/passwd`` is the administrator's call).

The privileges are dropped by ``setpriv`` (util-linux) in front of bubblewrap: the process starts
with ``vfork`` + ``exec`` as before, where ``subprocess``'s ``user=``/``group=`` would make Python
``fork`` the whole (possibly large) host process on the event loop. Without bubblewrap the launcher
joins the run's cgroups as root, then ``exec``s ``setpriv``. An unprivileged sandbox without
``setpriv`` is refused (``RuntimeError``), never silently run as root.
"""

from __future__ import annotations

import functools
import os
import pwd
import shutil
from pathlib import Path

from ._limits import has_capability

__all__ = ["FALLBACK_ID", "SANDBOX_USER", "drop_privileges", "running_as_root", "sandbox_host_ids"]

SANDBOX_USER = "computer-sandbox"
FALLBACK_ID = 2_000_000_000


@functools.cache
def sandbox_host_ids(user: str = SANDBOX_USER) -> tuple[int, int]:
    """The host (uid, gid) sandboxes run as: ``user``'s, else :data:`FALLBACK_ID` (see the module).

    Raises ``PermissionError`` when the fallback uid is already someone's.
    """
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        pass
    else:
        if entry.pw_uid == 0 or entry.pw_gid == 0:
            raise PermissionError(f"the sandbox user {user} must not be root")
        return entry.pw_uid, entry.pw_gid
    try:
        taken = pwd.getpwuid(FALLBACK_ID).pw_name
    except KeyError:
        taken = None
    if taken is None:
        taken = next((f"{f}:{o}" for f in ("/etc/subuid", "/etc/subgid") for o in _covering(Path(f))), None)
    if taken is not None:
        raise PermissionError(
            f"the sandbox fallback uid {FALLBACK_ID} is in use ({taken}): create a {user} user "
            "or pass the sandbox's host ids"
        )
    return FALLBACK_ID, FALLBACK_ID


def _covering(path: Path) -> list[str]:
    """Owners of subordinate id ranges in ``path`` that cover :data:`FALLBACK_ID`."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    owners = []
    for line in lines:
        parts = line.strip().split(":")
        try:
            start, count = int(parts[1]), int(parts[2])
        except (IndexError, ValueError):
            continue
        if start <= FALLBACK_ID < start + count:
            owners.append(parts[0])
    return owners


def drop_privileges(uid: int, gid: int) -> list[str]:
    """The argv prefix that runs the rest of the command line as ``uid``/``gid`` with no
    supplementary groups (root's capabilities go with the uid change)."""
    exe = shutil.which("setpriv")
    if exe is None:
        raise RuntimeError("an unprivileged sandbox needs setpriv (util-linux) to drop root")
    return [exe, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]


_CAP_SETUID = 7


def running_as_root() -> bool:
    """Root able to run sandboxes as another host user (``CAP_SETUID``): a root without it (a
    container that dropped it) runs them as itself, as any other user does."""
    return os.geteuid() == 0 and has_capability(_CAP_SETUID)
