"""A pull's page whose answer the mirror lost: what the owner committed of it, asked for again.

A page sent to the owner (``ExecContext.sync_pull``) may fail on the mirror's side after the owner
committed all or part of it: the call cancelled (a live sandbox's end cancels its tick, a run timed
out), the connection to a pool's owner lost, the owner's page cut short by an error once its renames
were in. The mirror cannot tell. Before (s66), it put its state back to the old names of the page's
directory renames (``_pull_moves``) with the committed revisions not its own, and the next sync took
the committed rename for the workspace's: every file below the new name refused as a conflict, and
what the program changed there after the rename dropped from the sandbox (a program's ``mv d e`` and
4 files it wrote below ``e``: 3 or all 4 of them lost, ``tests/fidelity/test_program_dir_renames``).

Now every page of a pull carries the pull's id (``SyncPull.pull_id``); the owner keeps, for its last
:data:`KEPT` pulls (:class:`PullRecords`), the revisions each committed and the renames it did, as
they are committed (a page cut short leaves what it did). A mirror whose page failed at the owner
keeps that id and the page's renames (``PullRenames.lost``) and, before its next push or pull, asks
(:func:`ask_lost`: an empty page with ``SyncPull.asks``). The owner waits for a page of that pull still
running (a pool's owner goes on with a page its caller gave up), closes the id (a page of it that
comes later commits nothing) and answers with those revisions (``PullResult.own_revs``) and renames
(``PullResult.renamed``, in order: a prefix of the page's). The mirror re-keys its state to the renames
done and counts the revisions as its own, so the next pull sends what differs at the new names, and
nothing is a conflict. An owner that does not know the id (another process since) answers nothing
committed: the sync goes as before.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ._backend import PullResult, SyncPull

__all__ = ["KEPT", "PullRecords", "ask_lost", "sent"]

# Pulls whose record an owner keeps (the oldest not running dropped past it).
KEPT = 256
# Seconds an answer waits at most for a page of the asked pull still running.
WAIT = 120.0


@dataclass(slots=True)
class _Record:
    """What the pages of one pull committed: each page's ``own`` set as it grows, less the revisions
    it was given; the renames done, in order; the pages running; whether a mirror asked already."""

    pages: list[tuple[set[int], frozenset[int]]] = field(default_factory=list)
    renamed: list[tuple[str, str]] = field(default_factory=list)
    running: int = 0
    idle: asyncio.Event = field(default_factory=lambda: _set_event())
    closed: bool = False

    def committed(self) -> list[int]:
        return sorted({rev for own, given in self.pages for rev in own - given})


class PullRecords:
    """The owner's records of its recent pulls, by ``SyncPull.pull_id``."""

    def __init__(self) -> None:
        self._pulls: dict[str, _Record] = {}

    def start(self, pull: SyncPull, own: set[int]) -> _Record | None:
        """The record a page of ``pull`` adds to (``own``: its set of revisions, which it grows as it
        commits), or None when a mirror asked about that pull already (the page commits nothing)."""
        record = self._record(pull.pull_id)
        if record.closed:
            return None
        record.pages.append((own, frozenset(pull.own_revs)))
        record.running += 1
        record.idle.clear()
        return record

    @staticmethod
    def end(record: _Record) -> None:
        record.running -= 1
        if not record.running:
            record.idle.set()

    async def answer(self, pull: SyncPull, base_rev: int) -> PullResult:
        """What the pull ``pull.asks`` names committed (none of it commits anything after this)."""
        record = self._record(pull.asks)
        record.closed = True
        if record.running:
            await asyncio.wait_for(record.idle.wait(), WAIT)
        return PullResult(rev=base_rev, own_revs=record.committed(), renamed=list(record.renamed))

    def _record(self, pull_id: str) -> _Record:
        record = self._pulls.pop(pull_id, None) or _Record()
        self._pulls[pull_id] = record  # (the newest last)
        if len(self._pulls) > KEPT:
            for old in [key for key, r in self._pulls.items() if not r.running][: len(self._pulls) - KEPT]:
                del self._pulls[old]
        return record


def _set_event() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


async def sent(mirror: Any, ctx: Any, page: SyncPull, base_rev: int) -> PullResult:
    """``ctx.sync_pull(page)``; when it fails, the mirror keeps the pull's id and the page's renames
    (the state's relative pairs) to ask about before it syncs again (:func:`ask_lost`)."""
    try:
        return await ctx.sync_pull(page, base_rev)  # type: ignore[no-any-return]
    except BaseException:
        mirror.lost = (page.pull_id, list(mirror.renaming) if page.renames else [])
        raise


async def ask_lost(mirror: Any, ctx: Any) -> None:
    """Ask the owner what the pull whose answer the mirror lost committed: the state re-keyed to the
    renames it did and its revisions the mirror's own (a failed question: asked again next time)."""
    pull_id, renaming = mirror.lost
    base = mirror.rev if mirror.rev is not None else 0
    answer = await ctx.sync_pull(SyncPull(mirror.root, asks=pull_id), base)
    mirror.lost = None
    if mirror.rev is None:  # (a full push next: nothing of the state holds)
        return
    done = renaming[: len(answer.renamed)]
    if done:
        mirror.rekey(done)
    mirror.own_revs = sorted({*mirror.own_revs, *answer.own_revs})
