"""bubblewrap: the command line of one sandbox, whether bubblewrap works here, the synthetic ``/etc``.

A sandbox gets new user (uid/gid 65534, no capabilities), pid, mount, ipc, uts and network namespaces
(network shared only when asked), read-only system directories, a synthetic ``/etc``, fresh ``/proc``,
``/dev`` and ``/tmp``, and only the binds a backend asks for. bubblewrap mounts every bind ``nosuid``
and ``nodev`` (``/proc/self/mountinfo`` inside shows it).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ._scratch import process_scratch, remove_tree

__all__ = ["SANDBOX_UID", "Bind", "bwrap_argv", "bwrap_works", "python_prefixes", "sandbox_etc"]

log = logging.getLogger(__name__)

SANDBOX_UID = 65534
# /etc files a shell needs; nothing secret (no shadow, no keys).
_ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "alternatives",
    "bash.bashrc",
    "inputrc",
    "profile",
    "mime.types",
    "protocols",
    "services",
    "magic",
    "magic.mime",
)
NETWORK_ETC = ("resolv.conf", "ssl", "ca-certificates", "ca-certificates.conf", "gai.conf", "host.conf")


@dataclass(frozen=True, slots=True)
class Bind:
    source: str
    dest: str
    writable: bool = False


def bwrap_argv(
    command: Sequence[str], *, binds: Sequence[Bind], cwd: str, network: bool, etc: Path
) -> list[str]:
    """bubblewrap's full command line for ``command`` (options, ``--``, the command)."""
    args = ["bwrap", "--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    if network:
        args.append("--share-net")
    args += ["--cap-drop", "ALL", "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    args += ["--ro-bind", "/usr", "/usr"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / top
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), f"/{top}"]
        elif host.is_dir():
            args += ["--ro-bind", str(host), f"/{top}"]
    # One bind for all of /etc (18 single-file binds cost bubblewrap 2.4 ms of its 8 ms start).
    args += ["--ro-bind", str(etc), "/etc"]
    for name in NETWORK_ETC if network else ():
        if os.path.lexists(f"/etc/{name}") and os.path.lexists(etc / name):
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]  # live: DNS and CAs change
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/tmp/home"]
    for bind in binds:
        args += ["--bind" if bind.writable else "--ro-bind", bind.source, bind.dest]
    args += ["--chdir", cwd, "--"]
    return args + list(command)


@functools.cache
def bwrap_works(prefix: tuple[str, ...] = ()) -> bool:
    """Whether bubblewrap can make a sandbox here, started behind ``prefix`` (the privilege drop of
    an unprivileged sandbox); probed once per process and prefix."""
    exe = shutil.which("bwrap")
    if exe is None:
        return False
    probe = [
        *prefix,
        exe,
        "--unshare-all",
        "--unshare-user",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_UID),
    ]
    probe += ["--cap-drop", "ALL", "--die-with-parent", "--ro-bind", "/", "/", "--", "/bin/true"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=10, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


_ETC_DIRS: dict[tuple[bool, tuple[int, int] | None], Path] = {}


def sandbox_etc(network: bool, owner: tuple[int, int] | None = None) -> Path:
    """The sandbox's /etc, built once per process (network setting and sandbox user) in the
    process's scratch directory of the temp directory (see ``_scratch``; ``owner``: the sandbox's
    host user, who must be able to reach it): who uid 65534 is, its hostname, loopback hosts, copies
    of the host's :data:`_ETC_FILES` (links kept as links), and for ``network`` empty mount points for
    :data:`NETWORK_ETC`, bound live over them.

    Copies, not binds: bubblewrap spends ~0.13 ms per bind, and a copy of these small files costs
    a few ms once. A host file changed later (an ``ld.so.cache`` after installing a library) is seen
    by the next process; the dynamic loader falls back to the default library paths meanwhile.
    """
    key = (network, owner)
    if key in _ETC_DIRS and _ETC_DIRS[key].is_dir():
        return _ETC_DIRS[key]
    root = process_scratch(None, owner) / ("etc-net" if network else "etc")
    if root.exists():
        remove_tree(root)
    root.mkdir()
    _fill_etc(root, network)
    _ETC_DIRS[key] = root
    return root


def _fill_etc(root: Path, network: bool) -> None:
    files = {
        "passwd": f"root:x:0:0:root:/root:/bin/bash\nsandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:/tmp/home:/bin/bash\n",
        "group": f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\n",
        "hostname": "sandbox\n",
        "hosts": "127.0.0.1 localhost sandbox\n::1 localhost\n",
    }
    for name, text in files.items():
        (root / name).write_text(text)
    for name in _ETC_FILES:
        source, dest = Path("/etc") / name, root / name
        try:
            if source.is_symlink():
                dest.symlink_to(os.readlink(source))
            elif source.is_dir():
                shutil.copytree(source, dest, symlinks=True)
            elif source.is_file():
                shutil.copyfile(source, dest)
        except OSError as exc:  # unreadable or vanished: the sandbox goes without it
            log.debug("sandbox /etc: %s not copied: %s", source, exc)
    for name in NETWORK_ETC if network else ():
        source, dest = Path("/etc") / name, root / name
        if source.is_dir():
            dest.mkdir()
        elif source.exists():
            dest.touch()
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)


def python_prefixes() -> list[str]:
    """Host directories the current interpreter needs, when they are outside /usr."""
    out: list[str] = []
    for prefix in {sys.base_prefix, sys.base_exec_prefix}:
        real = os.path.realpath(prefix)
        if not real.startswith("/usr/") and real not in out:
            out.append(real)
    return out
