"""Workspace names: validation, the owner actor's Ray name and namespace, the file path.

An owner's Ray name is scoped by its data directory (``computer:ws:<8 hex of the data dir>:<name>``):
two drivers with different data directories on one cluster get different owners (each with its own
file and settings) for the same workspace name.
"""

from __future__ import annotations

import errno
import hashlib
import unicodedata
from pathlib import Path

from ..config import Settings
from ..storage.errors import fs_error

__all__ = [
    "HOST_PREFIX",
    "NAMESPACE",
    "OWNER_PREFIX",
    "actor_name",
    "check_name",
    "check_new_name",
    "data_dir_key",
    "host_actor_name",
    "host_index",
    "workspace_file",
]

# Every owner actor lives in this one Ray namespace, whatever namespace the caller's job uses, so a
# name resolves to the same owner from every driver, task and actor of the cluster.
NAMESPACE = "computer"
# Every owner actor's Ray name starts with this.
OWNER_PREFIX = "computer:ws:"
# Every owner host's Ray name (``owners="hosted"``) starts with this.
HOST_PREFIX = "computer:host:"

_MAX_NAME_BYTES = 200  # leaves room for the ".sqlite" suffix and SQLite's "-wal"/"-shm" files


def check_name(name: str) -> str:
    """Return ``name`` if it can name a workspace (it becomes a file name); EINVAL otherwise.

    A lone surrogate (``"a\\ud800"``, or argv's ``"\\udcff"`` for a byte that is not UTF-8) is EINVAL
    here: it passed, and opening the workspace raised ``UnicodeEncodeError`` from the directory or the
    file's path, not an ``OSError``."""
    if not isinstance(name, str) or not name:
        raise fs_error(errno.EINVAL, repr(name), "workspace name must be a non-empty string")
    if "/" in name or "\x00" in name or name in (".", ".."):
        raise fs_error(errno.EINVAL, name, "workspace name must not contain '/' or NUL, nor be '.' or '..'")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no file, directory row or Ray name can hold it
        raise fs_error(errno.EINVAL, repr(name), "workspace name is not valid UTF-8") from None
    if len(name.encode("utf-8", "surrogatepass")) > _MAX_NAME_BYTES:
        raise fs_error(errno.ENAMETOOLONG, name, f"workspace name longer than {_MAX_NAME_BYTES} bytes")
    return name


def check_new_name(name: str, stored: bool) -> str:
    """Return ``name`` if a workspace may be opened by it; ``stored``: one is already stored under
    exactly this spelling (a directory record or its file).

    Names are compared as spelled (UTF-8 bytes, like paths), so ``"café"`` with U+00E9 (NFC) and with
    ``e`` + U+0301 (NFD) were two workspaces, two files and two owners of what a user sees as one name
    (and on a filesystem that normalises file names, macOS's, two owners of one file). A *new*
    workspace's name must be in Unicode NFC: another spelling is EINVAL naming the NFC form to use. A
    workspace already stored under a non-NFC name (made before this rule) keeps opening by that exact
    spelling: nothing is renamed or normalised behind its owner's back, nothing is lost; its NFC
    spelling remains another name, as it was."""
    composed = unicodedata.normalize("NFC", check_name(name))
    if composed != name and not stored:
        raise fs_error(
            errno.EINVAL,
            name,
            f"workspace name is not in Unicode NFC (composed) form: use {composed!r} "
            f"(UTF-8 {composed.encode('utf-8').hex(' ')}), the same name composed; two spellings "
            "would be two workspaces",
        )
    return name


def data_dir_key(data_dir: str | Path) -> str:
    """8 hex digits naming a data directory (of its resolved path) in owner actor names."""
    resolved = str(Path(data_dir).expanduser().resolve())
    return hashlib.sha256(resolved.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def actor_name(name: str, config: Settings | None = None) -> str:
    """The Ray actor name of the owner of workspace ``name`` in ``config``'s data directory.

    ``config`` defaults to this process's settings if it called ``computer.init``, else the ones the
    cluster's last ``init`` published.
    """
    check_name(name)
    if config is None:
        from ._init import cluster_settings

        config = cluster_settings()
    return f"{OWNER_PREFIX}{data_dir_key(config.data_dir)}:{name}"


def host_actor_name(config: Settings, node: str, index: int) -> str:
    """The Ray name of owner host ``index`` of ``node`` for ``config``'s data directory:
    ``computer:host:<8 hex of the data dir>:<12 hex of the node id>:<index>``."""
    return f"{HOST_PREFIX}{data_dir_key(config.data_dir)}:{node[:12]}:{index}"


def host_index(name: str, hosts: int) -> int:
    """Which of a node's ``hosts`` owner hosts serves workspace ``name``: a stable hash of the name,
    the same in every process and Ray session."""
    digest = hashlib.sha256(check_name(name).encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % max(1, hosts)


def workspace_file(config: Settings, name: str) -> Path:
    """Where the SQLite file of workspace ``name`` lives."""
    return config.workspaces_dir / f"{check_name(name)}.sqlite"
