"""Nodes that just refused to create a workspace for lack of space, so a new name goes elsewhere.

Placement creates a new name (no node holds its file, no record) on the caller's node. A node whose
data directory is full refuses the creation (ENOSPC), and before, a caller on that node (a task, an
agent's process) placed every attempt there again, failing for good while another node had room.
An owner whose creation of a new workspace failed with ENOSPC marks its node in Ray's key-value store
(``computer:full:<8 hex of the data dir>:<node>``, the time the mark ends) for
:data:`FULL_REMEMBERED` seconds; placement of a *new* name skips a marked node while an alive
unmarked node exists (:func:`node_for_new`), and picks among those by the name's stable hash.
The refused call itself is placed again rather than failed: an owner host answers "moved" when the
refusal left nothing and another node has room (:func:`place_elsewhere`); a client whose dedicated
owner could not start for lack of space resolves the name once more (``computer/client/_connection.py``).

Only new names move: a workspace with a file or a record is placed where they say, full or not
(never made anew elsewhere), and the creation claims (``_host_placement``) still settle which node
creates a name. Why a mark and not the nodes' free space: a refusal is a fact about the node, while a
free-space figure says nothing of what a creation will need (SQLite's file, its WAL and -shm, the
reserve beside it) and would take a probe of every node for every new name; a mark costs one
key-value read per new name and one write per refusal. A mark ends on its own (the disk may have been
freed meanwhile): a full node then refuses one creation more and is marked again.

Clocks: the mark holds the marking process's wall time, so a reader whose clock is behind the
marker's saw it last longer by that skew (a node freed was skipped longer). A reader also times a
mark from its own first sight of it (monotonic): a mark lasts at most :data:`FULL_REMEMBERED` after a
process first saw it, whatever the clocks say. And a node that creates a new workspace (every node
full: it was asked anyway; a disk freed) drops its mark at once (:func:`note_created`).
"""

from __future__ import annotations

import logging
import threading
import time
import zlib

from ..config import Settings
from .naming import data_dir_key
from .raycompat import kv_del, kv_get, kv_put

__all__ = [
    "FULL_REMEMBERED",
    "node_for_new",
    "note_created",
    "note_refused",
    "place_elsewhere",
    "refused_recently",
]

log = logging.getLogger(__name__)

# How long a node that refused a creation for lack of space is skipped for new names (seconds).
FULL_REMEMBERED = 60.0
_SIGHTS_KEPT = 1024

# Marks this process has seen: key -> (the mark's value, this process's monotonic time at first sight).
_sighted: dict[bytes, tuple[bytes, float]] = {}
_sighted_lock = threading.Lock()


def _key(config: Settings, node: str) -> bytes:
    return f"computer:full:{data_dir_key(config.data_dir)}:{node}".encode()


def note_refused(config: Settings, node: str) -> None:
    """``node`` could not create a new workspace for lack of space: skip it for new names a while.
    Nothing outside Ray (a command's own process has no cluster to place names in)."""
    import ray

    if not ray.is_initialized():
        return
    try:
        # "<end by this clock> <how long>": a reader times the second from its own first sight.
        kv_put(_key(config, node), f"{time.time() + FULL_REMEMBERED!r} {FULL_REMEMBERED!r}".encode())
        log.warning("node %s has no room for a new workspace: new names go elsewhere for a while", node[:12])
    except Exception:  # a mark is a hint: its loss costs one more refusal, never the caller's error
        log.warning("could not mark node %s as full", node[:12], exc_info=True)


def note_created(config: Settings, node: str) -> None:
    """``node`` just created a new workspace: it has room, so its mark (if any) ends now."""
    import ray

    if not ray.is_initialized():
        return
    try:
        key = _key(config, node)
        if kv_get(key) is not None:
            kv_del(key)
            log.info("node %s created a new workspace: it takes new names again", node[:12])
    except Exception:  # a mark is a hint: it ends on its own
        log.warning("could not clear the full mark of node %s", node[:12], exc_info=True)


def refused_recently(config: Settings, node: str) -> bool:
    """Whether ``node`` refused a creation for lack of space within :data:`FULL_REMEMBERED`: by the
    marker's clock, and never longer than that after this process first saw the mark."""
    key = _key(config, node)
    raw = kv_get(key)
    if raw is None:
        return False
    try:
        fields = raw.decode().split()
        end = float(fields[0])
        lasts = float(fields[1]) if len(fields) > 1 else FULL_REMEMBERED
    except (ValueError, IndexError):
        return False
    if end <= time.time():
        return False
    now = time.monotonic()
    with _sighted_lock:
        seen = _sighted.get(key)
        if seen is None or seen[0] != raw:
            if len(_sighted) >= _SIGHTS_KEPT:
                _sighted.clear()
            seen = _sighted[key] = (raw, now)
    return now - seen[1] < lasts


def node_for_new(config: Settings, name: str, here: str, alive: dict[str, str]) -> str:
    """The node a new workspace ``name`` is created on: ``here`` (the caller's node) unless it
    refused a creation for lack of space lately and an alive node that did not exists; then one of
    those, by the name's stable hash (the full node's callers of the name agree)."""
    if len(alive) <= 1 or not refused_recently(config, here):
        return here
    room = sorted(node for node in alive if node != here and not refused_recently(config, node))
    if not room:
        return here  # every node is full: the creation fails here, as it would anywhere
    return room[zlib.crc32(name.encode("utf-8", "surrogatepass")) % len(room)]


def place_elsewhere(config: Settings, name: str, node: str) -> str | None:
    """The node a new ``name`` goes to instead of ``node`` when ``node`` refused a creation for lack
    of space lately and an alive node did not (an owner host on ``node`` then answers "moved" rather
    than fail: its caller places the name again); None when ``node`` is where it goes."""
    if not refused_recently(config, node):
        return None
    from ._nodes import alive_nodes

    other = node_for_new(config, name, node, alive_nodes())
    return None if other == node else other
