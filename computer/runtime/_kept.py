"""Files only a sandbox holds (names the workspace cannot hold: not UTF-8, or paths too long to sync)
bounded across runs: they never reach the workspace, so nothing else bounds them, and a mirror lives
in ``/dev/shm``. A run's memory group charges only what that run wrote: 700 MB under a name that is
not UTF-8, once per run, grew one workspace's mirror to 6 GB of host memory."""

from __future__ import annotations

from ._beneath import remove_beneath
from ._entry import KIND, SIZE
from ._held_links import is_utf8
from ._mirror_base import Entry, MirrorBase

__all__ = ["trim_kept"]

MiB = 1024 * 1024
REMOVED = (
    "removed from the sandbox: the files only the sandbox holds (names the workspace cannot hold, paths "
    "too long to sync) took over {} MiB, its memory limit; the largest went first"
)


def trim_kept(mirror: MirrorBase, now: dict[str, Entry], limit: int) -> dict[str, str]:
    """Remove the largest of the files only the sandbox holds in ``now`` (the mirror's state to be,
    and the mirror's directory) until they fit ``limit``: the removed ones' workspace paths (as a
    report names them) with the reason."""
    room = mirror.room()
    held: list[tuple[int, str]] = []
    for rel, entry in now.items():
        if entry[KIND] != "f":
            continue
        if rel.isascii():
            if len(rel) > room:
                held.append((entry[SIZE], rel))
            continue
        if not is_utf8(rel):
            held.append((entry[SIZE], rel))
            continue
        if mirror.too_long(rel, room):
            held.append((entry[SIZE], rel))
    total = sum(size for size, _ in held)
    removed: dict[str, str] = {}
    for size, rel in sorted(held, reverse=True):
        if total <= limit:
            break
        remove_beneath(mirror.directory, rel)
        del now[rel]
        total -= size
        raw = rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        removed[mirror.workspace_path(raw)] = REMOVED.format(limit // MiB)
    return removed
