"""A live sandbox's delivery times: a file the workspace wrote gets, in the mirror and in the store, the
time the sandbox was given it (``Delivery``).

A workspace write's mtime is its commit's time in the store, but a live sandbox sees the new content only
at its next sync (``_live.SYNC_INTERVAL`` later at most, plus the sync). A program running meanwhile still
reads the old content, and what it writes from it (``make``'s output) is newer than the input: ``make``
then calls it up to date, in the sandbox and after a reopen (4 of 30 rounds of an agent-like pattern;
on a local disk this cannot happen, the write and its time being one step).

Decision: a file a push writes into a live mirror whose store time is later than the last moment a
program of the sandbox could have read the workspace (``since``: its start, when its last push read its
first page, or a sync that found nothing but the init running) and not in the future gets the delivery time (when the push
wrote it, the sandbox frozen or nothing started yet) in the mirror, and the same time is committed to
the store as the workspace's own (``SyncPull.delivered``: only ``dir_times`` entries, under the pull's
conflict rules, never in a run's ``pulled``; a path the workspace changed again since keeps that
change). The mirror's revision moves past that commit, so no push follows it. A time older than
``since`` (``touch -d``, ``utime`` through ``ws.fs``, a file the workspace renamed) keeps its own. At most
``DELIVER_FILES`` files a push are retimed (a large tree written while a program runs keeps the
store's times past that: a utime and a store stat each, on the owner's loop for the store's part).
The other choice, freezing the live sandbox across the store's commit and the push, would put a sandbox
freeze and a push (several ms, more with many processes) into every workspace write, and a write by a
process holding no live sandbox (a pool's owner while its worker holds it) could not freeze it at all.

Two live mirrors of one workspace (the shell's and the python backend's): the second is given the first
one's delivery time by its push and takes its own delivery time in its mirror, but the store keeps the
first one's: the owner refuses a delivery over a time that is itself a delivery (``LocalExecContext.
delivered``), else each mirror's delivery would be a change for the other, pushes and commits without
end. So the second sandbox's programs see the right order while it lives; after a reopen, an output one
of them wrote between the two deliveries from the old content is newer than the input (left as is).

A delivery is a time alone, never content: its commit refuses no program's change (``without_deliveries``:
the owner leaves the revisions of its delivery commits, ``delivery_revs``, out of a pull's conflict
rules). Before (s64), a file one live sandbox's program wrote, pulled and then delivered into the other
live sandbox (the shell's idle, a ``sleep`` in it: the python backend's program writing) was a
workspace change for the writer's next pull: the program's next version of the file in that interval
was refused ("the workspace's version was kept"), and its mirror was given the older version back:
its last writes lost, in 2 of 3 rounds of 60 writes. The store's check of a write through a file's node
(``in_place``) leaves them out too (``_pull_commit``): a delivery under a file's other name refused a
program's append to it. A retimed file of several names has every name take the new time in (before, the
others kept the old one, and a run's look at every file took it for its program's change).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._backend import ExecContext, SyncPull, SyncPush, mirror_ns, store_time
from ._entry import INO, Entry
from ._mirror_base import entry_of
from ._tasks import offload

if TYPE_CHECKING:
    from ..storage import ChangeSet
    from ._mirror import Mirror

# At most this many files of one push are retimed (the rest keep the store's time): each is a
# ``utime`` and an ``lstat`` in the mirror, a ``stat`` and an mtime in the store's commit.
DELIVER_FILES = 1_000
INLINE = 64  # past this many, the mirror's part runs in a worker thread

__all__ = [
    "DELIVERED_PATHS",
    "DELIVER_FILES",
    "Delivery",
    "deliverable",
    "record_delivered",
    "record_delivery_revs",
    "without_deliveries",
]


@dataclass
class Delivery:
    """One live mirror's delivery times: ``note`` each page a push applied, ``retime`` before the push
    arms the watch (its own ``utime`` is then no program's change), ``commit`` once the push is in."""

    # ns (wall clock): the sandbox's start (its mirror pushed, no program of it started yet), then the
    # end of each push and each tick that found nothing but the init running. None: nothing is retimed.
    since: int | None = field(default_factory=time.time_ns)
    found: dict[str, int] = field(default_factory=dict)  # workspace path -> its store time (ns)
    retimed: dict[str, int] = field(default_factory=dict)  # workspace path -> its delivery time (ns)
    read_at: int | None = None  # when the push's first page was read (ns)

    def quiet(self, at: int) -> None:
        """Nothing but the init ran at ``at`` (ns): no program could read the workspace then."""
        if self.since is not None:
            self.since = max(self.since, at)

    def note(self, page: SyncPush) -> None:
        """The files of an applied push page the workspace timed after ``since``."""
        since = self.since
        if since is None:
            return
        for f in page.files:
            if f.link is None:  # a further name: the same file, retimed by its first
                ns = mirror_ns(f.mtime, f.sub_ns)
                if ns > since:
                    self.found[f.path] = ns

    def reading(self) -> None:
        """A push's first page is about to be read: what the workspace writes from now on is not in it."""
        self.read_at = time.time_ns()

    async def retime(self, mirror: Mirror) -> None:
        """Give what ``note`` found its delivery time in the mirror, at most ``DELIVER_FILES`` (in a
        worker thread past ``INLINE``), then the next ``since`` is when the push's first page was read."""
        if len(self.found) > INLINE:
            await offload(mirror, self._retime, mirror)
        else:
            self._retime(mirror)
        self.found.clear()
        if self.since is not None:
            self.since = max(self.since, self.read_at or time.time_ns())
        self.read_at = None

    def _retime(self, mirror: Mirror) -> None:
        """(A time in the future keeps its own; a file gone or changed meanwhile is left alone; the
        mirror's state takes the new time in, so the next pull sees no change.)"""
        now = time.time_ns()
        linked: dict[int, Entry] = {}  # a file of several names: every name takes the new time in
        for path, ns in itertools.islice(self.found.items(), DELIVER_FILES):
            rel = mirror.rel(path)
            old = mirror.state.get(rel)
            if ns > now or old is None or old[0] != "f" or old[3] != ns:
                continue
            host = mirror.host(path)
            try:  # (no program runs: the sandbox is frozen or holds none)
                os.utime(host, ns=(now, now), follow_symlinks=False)
                st = os.lstat(host)
            except OSError:  # (below a directory locked to this process)
                continue
            mirror.state[rel] = entry = entry_of(st)
            if st.st_nlink > 1:
                linked[entry[INO]] = entry
            self.retimed[path] = now
        if linked:  # (before, s64: its other names kept the old time, a program's change at the next look)
            mirror.take_in(linked)

    async def commit(self, mirror: Mirror, ctx: ExecContext) -> None:
        """The delivery times into the store as the workspace's (``SyncPull.delivered``); the mirror's
        revision moves past the commit when nothing else changed meanwhile (else its revision is one the
        next push leaves out)."""
        retimed, self.retimed = self.retimed, {}
        if not retimed or mirror.rev is None:
            return
        times, subs = {}, {}
        for path, ns in retimed.items():
            times[path], sub = store_time(ns)
            if sub:
                subs[path] = sub
        pull = SyncPull(
            mirror.root, protected=sorted(mirror.protected), dir_times=times, dir_sub_ns=subs, delivered=True
        )
        base = mirror.rev
        result = await ctx.sync_pull(pull, base)
        if mirror.rev != base:  # (moved on meanwhile: the result says nothing of it)
            return
        mirror.own_revs = sorted({*mirror.own_revs, *(r for r in result.own_revs if r > base)})
        if result.rev > base:
            mirror.rev = result.rev
            mirror.own_revs = mirror.own_since(result.rev)


# The delivery times an owner committed, at most this many paths (the oldest forgotten first: a
# forgotten one may be delivered once more by another mirror, a commit more, no loop).
DELIVERED_PATHS = 10_000


async def deliverable(fs: Any, pull: SyncPull, delivered: dict[str, tuple[int, int]]) -> SyncPull:
    """``pull`` (``SyncPull.delivered``) less the paths that are no file in the store or whose time
    there is a delivery already (``delivered``, the owner's): another mirror's delivery, which this
    one's must not replace (each would be a change for the other, without end)."""
    times, subs = {}, {}
    for path, ms in pull.dir_times.items():
        try:
            st = await fs.stat(path)
        except OSError:
            continue
        if not st.is_file or delivered.get(path) == (st.mtime, getattr(st, "sub_ns", 0)):
            continue
        times[path] = ms
        if sub := pull.dir_sub_ns.get(path):
            subs[path] = sub
    return dataclasses.replace(pull, dir_times=times, dir_sub_ns=subs)


def record_delivered(pull: SyncPull, skipped: set[str], delivered: dict[str, tuple[int, int]]) -> None:
    """Keep the times ``pull`` committed (all but ``skipped``) as deliveries, bounded."""
    for path, ms in pull.dir_times.items():
        if path not in skipped:
            delivered.pop(path, None)
            delivered[path] = (ms, pull.dir_sub_ns.get(path, 0))
    while len(delivered) > DELIVERED_PATHS:
        del delivered[next(iter(delivered))]


def record_delivery_revs(revs: Iterable[int], delivery_revs: dict[int, None]) -> None:
    """Keep ``revs``, the revisions a delivery's commit made, in ``delivery_revs`` (the owner's), at most
    :data:`DELIVERED_PATHS` (the oldest forgotten first: a forgotten one counts as a change again)."""
    for rev in revs:
        delivery_revs[rev] = None
    while len(delivery_revs) > DELIVERED_PATHS:
        del delivery_revs[next(iter(delivery_revs))]


def without_deliveries(since: ChangeSet, delivery_revs: dict[int, None]) -> ChangeSet:
    """``since`` less the entries of delivery commits: a file's delivery time is no change of its
    content, so no conflict for a pull that changes it (see the module's docstring)."""
    if not delivery_revs:
        return since
    kept = [c for c in since.changes if c.rev not in delivery_revs]
    return since if len(kept) == len(since.changes) else dataclasses.replace(since, changes=kept)
