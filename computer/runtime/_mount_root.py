"""Which workspace directory a sandbox can mirror (``mount_root``), checked when a backend is built.

The mirror is bound at ``mount_root`` inside a sandbox that mounts its own system first (``_bwrap``:
``/usr`` and the ``/bin``/``/lib`` tops read-only, ``/etc``, ``/proc``, ``/dev``) and binds of its
backend after (``/run/computer``, the assets socket; the python backend's ``/opt/python`` and
``/opt/computer``). Before, any root was taken and the trouble came at run time, or never said:

- below a read-only mount (``/usr/src/app``, the usual container WORKDIR, ``/etc/x``, ``/lib/x``), below
  ``/proc`` or ``/dev``: every run failed, "bwrap: Can't mkdir /usr/src/app: Read-only file system",
  or a bare ``BrokenPipeError`` (a live sandbox: "the sandbox could not start");
- at or below a bind made after the mirror's (``/run/computer``): the run completed over the bind's
  directory, the workspace's files unseen and nothing the program wrote kept, without a word;
  ``/opt/python`` for the python backend: its interpreter hidden, every run failed;
- above one (``/run``, ``/opt`` for python): an empty directory (``computer``) the sandbox made for its
  bind appeared in the workspace, or the interpreter was hidden;
- at or below the workspace's own ``/.computer``: a program read and rewrote the execution journal
  and the agent's state through its files, which the pull took in (the guard of ``_protected`` is on
  the ``workspace`` calls only).

Decision: such a root is a ``ValueError`` naming the mount in the way; ``/`` stays refused. ``/tmp``
and below are allowed (the mirror is bound over the sandbox's own ``/tmp``, which a program then
shares with the workspace, as asked).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..storage.paths import is_within
from ._assets_bridge import SANDBOX_DIR
from ._protected import SYSTEM_DIR

__all__ = ["SYSTEM_MOUNTS", "check_mount_root"]

# What every sandbox mounts of its own, before the binds (``_bwrap.bwrap_command``).
SYSTEM_MOUNTS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/dev")


def check_mount_root(root: str, binds: Iterable[str] = ()) -> str:
    """``root`` (canonical) when a sandbox can mirror the workspace there, else a ``ValueError``:
    ``/``, a root at or below one of :data:`SYSTEM_MOUNTS`, at, below or above ``binds`` (the
    backend's own binds) or :data:`~._assets_bridge.SANDBOX_DIR`, or at or below the workspace's
    system directory."""
    if root == "/":
        raise ValueError("mount_root cannot be / (the sandbox needs its own /usr, /tmp…)")
    for mount in SYSTEM_MOUNTS:
        if is_within(root, mount):
            raise ValueError(f"mount_root {root} is inside {mount}, which the sandbox mounts of its own")
    for mount in (SANDBOX_DIR, *binds):
        if is_within(root, mount) or is_within(mount, root):
            raise ValueError(f"mount_root {root} overlaps {mount}, which the sandbox binds for itself")
    if is_within(root, SYSTEM_DIR):
        raise ValueError(
            f"mount_root {root} is inside {SYSTEM_DIR}, the workspace's own directory (its execution "
            "journal and state), which programs may not change"
        )
    return root
