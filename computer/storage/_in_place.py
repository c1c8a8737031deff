"""The check of a batch's write through the node of a file of several names (``commit_batch``'s
``in_place``) against the workspace's changes since the writer's revision.

A pull writes a changed file the program wrote through (not replaced) through its node: one write,
no name re-sent. Before, the file got a new node under the written name and every other name came
again as a link, two change-log rows each (20,000 names: the owner's event loop late ~73 % of the
time for a 2-byte append every 50 ms). The write must not overwrite what the workspace wrote to the
same file meanwhile through another name: the log names the path written, and a later rename (of it
or of a directory above it) is followed to where that name is now. No index by node is needed: the
written paths are few (a sync interval's), each resolved once, and a node's names never listed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ._resolve import lookup, resolve
from ._schema import FILE
from ._state import Store
from .paths import is_within, join, split
from .types import Change, ChangeSet

__all__ = ["in_place_refused", "written_since"]


def in_place_refused(st: Store, in_place: Mapping[str, int], log: ChangeSet) -> set[str]:
    """The paths of ``in_place`` (a path -> the revision its writer last saw) whose write through the
    node would overwrite a workspace write: the workspace wrote that node (its content, mode or time)
    after the revision through another name it still has (``log``: the change log since the oldest
    of the revisions, the writer's own left out; :func:`written_since`). The path itself is not
    looked at: its writer judged it (a pull's rules follow a workspace rename of it). A log trimmed
    past the revision refuses all (the workspace wins when we cannot tell). Not seen: a write through
    a name since removed or replaced (nothing tells which node it wrote; the pull's rules cannot
    either), and a name made, moved or removed changes no content: nothing refused for it."""
    if not log.complete:
        return set(in_place)
    refused: set[str] = set()
    for p, rev in in_place.items():
        written = written_since(log.changes, rev)
        if not written:
            continue
        parent, name = split(p)
        try:
            pino, _, preal = resolve(st, parent)
        except OSError:
            continue  # nothing there yet: a new file, no other name
        node = lookup(st, pino, name)
        if node is None or node[1] != FILE:
            continue
        own = join(preal, name)
        for path in written - {own}:
            try:
                found = resolve(st, path, follow=False)[0]
            except OSError:
                continue
            if found == node[0]:
                refused.add(p)
                break
    return refused


def written_since(changes: Sequence[Change], rev: int) -> set[str]:
    """The paths the log's ``write`` entries after ``rev`` named, where they are now: moved with each
    later rename of them or of a directory above them, dropped when removed or replaced (a rename
    onto them, or onto a directory above)."""
    written: set[str] = set()
    for i, change in enumerate(changes):
        if change.rev <= rev:
            continue
        if change.op == "write":
            written.add(change.path)
        elif not written:
            continue
        elif change.op == "rename" and change.source is not None:
            src, dst = change.source, change.path
            kept = {w for w in written if not is_within(w, dst)}  # what it replaced is gone
            written = {dst + w[len(src) :] if is_within(w, src) else w for w in kept}
        elif change.op == "rm":
            after = changes[i + 1] if i + 1 < len(changes) else None
            if after is not None and after.op == "rename" and after.source == change.path:
                continue  # the rename's first row: followed with it
            written = {w for w in written if not is_within(w, change.path)}
    return written
