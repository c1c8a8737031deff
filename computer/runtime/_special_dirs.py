"""A directory a program replaced by a FIFO, socket or device node stays whole in the workspace.

The workspace holds no special files (``SPECIAL``): a file a program replaced by one is kept as it was
and the path listed in ``skipped``, the special file left in the sandbox's mirror alone. A directory
replaced so (``rm -r d; mkfifo d``) is the same decision: the workspace keeps the directory with
everything below it, which the removal of its contents must not take (before, s64: the workspace kept
an empty directory, its files removed). A rebuilt mirror (a reopen) shows it whole again, and so does
the warm one once the workspace writes below it (the push fetches the directory whole where it has to
replace the special file: ``MirrorPush._parent``). The program's
removal stands where the special file goes too: removed in the same run (nothing at the path), or in a
later one (the program removed what it saw there), or replaced by a directory or file of its own."""

from __future__ import annotations

from collections.abc import Collection

__all__ = ["spare_below"]


def spare_below(deleted: list[str], replaced: Collection[str]) -> list[str]:
    """``deleted`` (workspace paths) without those strictly below one of ``replaced``: directories of
    the workspace the program replaced by a special file, kept whole (each path's ancestors looked up:
    ``O(depth)`` a removal, only when there is such a directory)."""
    if not replaced:
        return deleted
    spared = set(replaced)

    def under(path: str) -> bool:
        while (path := path.rpartition("/")[0]) and path not in spared:
            pass
        return bool(path)

    return [path for path in deleted if not under(path)]
