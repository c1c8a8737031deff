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

A host uid per sandbox (decision, s63): the kernel counts several resources per host uid, whatever
the user namespace (``user_struct``/``ucounts``: inotify instances and watches, pipe buffers
(``fs.pipe-user-pages-soft``), descriptors in flight over unix sockets, and, against the namespace
creator's rlimits, queued signals and POSIX message queue bytes), so one program run as the one
sandbox uid of the host starved every other workspace. Each mirror (the sandbox over it, per call
or live, shell or python, embedded or in a pool worker) now runs as a uid of its own, leased from
:func:`sandbox_id_range` (``_uid_lease``). The range:

- no ``computer-sandbox`` user: :data:`FALLBACK_ID` + 1 .. :data:`FALLBACK_ID` + :data:`FALLBACK_COUNT`
  (65,535 uids; :data:`FALLBACK_ID` itself is the base, never leased); refused when an account or a
  subordinate range covers any id of FALLBACK_ID .. FALLBACK_ID + 65,535;
- with that user: its subordinate uid range (``/etc/subuid``, by name or uid) when it has one,
  refused when an account or another owner's subordinate range overlaps it; else its single uid,
  every sandbox sharing it and its per-uid counters (``IdRange.shared``, said in ``isolation``).

The group (decision): every leased uid runs with the base's gid (``computer-sandbox``'s primary
group, else :data:`FALLBACK_ID`), the sandbox group: the directories every sandbox must search (the
process's and backends' scratch directories, 0710; the shared ``/etc`` and staged trees, 0750 or
0755) are that group's, and no sandbox uid owns them. The kernel's per-user counters are keyed by
uid alone, so a shared gid shares none of them. The subordinate gid range is not used.
"""

from __future__ import annotations

import functools
import os
import pwd
import shutil
from dataclasses import dataclass
from pathlib import Path

from ._limits import has_capability

__all__ = [
    "FALLBACK_COUNT",
    "FALLBACK_ID",
    "SANDBOX_USER",
    "IdRange",
    "drop_privileges",
    "running_as_root",
    "sandbox_host_ids",
    "sandbox_id_range",
]

SANDBOX_USER = "computer-sandbox"
FALLBACK_ID = 2_000_000_000
FALLBACK_COUNT = 65_535  # leased uids above FALLBACK_ID (one user namespace's worth, 65,536 with it)


@dataclass(frozen=True)
class IdRange:
    """The host ids sandboxes run as: ``base`` (uid, gid: the owner of the sandboxes' shared
    directories and the ids of a ``Sandbox`` used without a lease, never leased itself) and the uids
    ``first`` .. ``first + count - 1`` leased one per mirror, each with the base's gid."""

    base: tuple[int, int]
    first: int
    count: int

    @property
    def shared(self) -> bool:
        """No range to lease from: every sandbox runs as ``base`` (its per-uid counters shared)."""
        return self.count == 0

    def __str__(self) -> str:
        return f"{self.first}-{self.first + self.count - 1}" if self.count else f"{self.base[0]} (shared)"


@functools.cache
def sandbox_host_ids(user: str = SANDBOX_USER) -> tuple[int, int]:
    """The host (uid, gid) of the sandboxes' base (:attr:`IdRange.base`, see the module).

    Raises ``PermissionError`` when the fallback range is already someone's.
    """
    return sandbox_id_range(user).base


@functools.cache
def sandbox_id_range(user: str = SANDBOX_USER) -> IdRange:
    """The ids sandboxes run as and lease from (see the module). Raises ``PermissionError`` when
    an account or someone else's subordinate range overlaps them: that owner could reach every
    mirror."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        pass
    else:
        if entry.pw_uid == 0 or entry.pw_gid == 0:
            raise PermissionError(f"the sandbox user {user} must not be root")
        ranges = [r for r in _ranges(Path("/etc/subuid")) if r[0] in (user, str(entry.pw_uid))]
        if not ranges:
            return IdRange((entry.pw_uid, entry.pw_gid), entry.pw_uid, 0)
        _, first, count = ranges[0]
        taken = _taken(first, count, owner=(user, str(entry.pw_uid)))
        if taken is not None:
            raise PermissionError(
                f"the subordinate uid range {first}-{first + count - 1} of {user} is in use ({taken})"
            )
        return IdRange((entry.pw_uid, entry.pw_gid), first, count)
    taken = _taken(FALLBACK_ID, FALLBACK_COUNT + 1)
    if taken is not None:
        raise PermissionError(
            f"the sandbox fallback uids {FALLBACK_ID}-{FALLBACK_ID + FALLBACK_COUNT} are in use ({taken}):"
            f" create a {user} user or pass the sandbox's host ids"
        )
    return IdRange((FALLBACK_ID, FALLBACK_ID), FALLBACK_ID + 1, FALLBACK_COUNT)


def _taken(first: int, count: int, owner: tuple[str, ...] = ()) -> str | None:
    """Who else has an id of ``first`` .. ``first + count - 1``: an account with that uid, or a
    subordinate range (``/etc/subuid``, ``/etc/subgid``) of an owner not in ``owner``; None: nobody."""
    for account in pwd.getpwall():
        if first <= account.pw_uid < first + count:
            return f"uid {account.pw_uid} is {account.pw_name}"
    for f in ("/etc/subuid", "/etc/subgid"):
        for name, start, length in _ranges(Path(f)):
            if name not in owner and start < first + count and first < start + length:
                return f"{f}:{name}"
    return None


def _ranges(path: Path) -> list[tuple[str, int, int]]:
    """The subordinate id ranges of ``path``: (owner, first id, count), malformed lines left out."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    ranges = []
    for line in lines:
        parts = line.strip().split(":")
        try:
            ranges.append((parts[0], int(parts[1]), int(parts[2])))
        except (IndexError, ValueError):
            continue
    return ranges


def drop_privileges(uid: int, gid: int) -> list[str]:
    """The argv prefix that runs the rest of the command line as ``uid``/``gid`` with no
    supplementary groups (root's capabilities go with the uid change)."""
    exe = _setpriv()
    if exe is None:
        raise RuntimeError("an unprivileged sandbox needs setpriv (util-linux) to drop root")
    return [exe, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]


@functools.cache
def _setpriv() -> str | None:
    return shutil.which("setpriv")


_CAP_SETUID = 7


def running_as_root() -> bool:
    """Root able to run sandboxes as another host user (``CAP_SETUID``): a root without it (a
    container that dropped it) runs them as itself, as any other user does."""
    return os.geteuid() == 0 and has_capability(_CAP_SETUID)
