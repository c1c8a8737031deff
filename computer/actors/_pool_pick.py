"""Which worker a dispatcher sends a run to: its view of each worker (:class:`WorkerSlot`) and the
rule over them (:func:`pick`), pure: no Ray, no clock but the one :class:`~._pool_avoid.Avoidance`
reads.

The order: the worker the workspace is *pinned* to (its live sandbox is there); else among the
usable workers with a free slot (its estimate: the load reported plus this owner's runs there) the
one with this workspace's warm mirror (most recent first), then one on the owner's own node (the
file is there: less data on the wire), then the least loaded, then a workspace-specific order
(rendezvous hashing, stable while workers come and go); with no free slot anywhere, the least loaded
(the run waits in that worker's line, which makes the pool grow). Workers found restarting, silent or
draining are used only when no other is.
"""

from __future__ import annotations

import dataclasses
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._pool_avoid import Avoidance
from ._pool_context import WorkerMemory

__all__ = ["WorkerSlot", "pick", "room_elsewhere", "usable"]


@dataclass
class WorkerSlot:
    """This owner's view of one worker: what the control loop reported, the runs this owner sent."""

    name: str
    handle: Any = None
    node_id: str = ""
    target: int = 1
    load: int = 0  # running + waiting at the control loop's last poll (all owners)
    draining: bool = False
    listed: bool = True  # in the latest view (an unlisted slot is kept only while runs use it)
    inflight: int = 0
    # What this owner knows of the worker's state for its workspace (the fast paths: see _pool_context)
    memory: WorkerMemory = dataclasses.field(default_factory=WorkerMemory)

    @property
    def estimate(self) -> int:
        return self.load + self.inflight


def usable(slot: WorkerSlot, avoided: Avoidance) -> bool:
    """Whether new runs may go to the worker: in the view, not draining, not seen dead."""
    return slot.listed and not slot.draining and not avoided.dead(slot.name)


def pick(
    slots: Mapping[str, WorkerSlot],
    workspace_id: str,
    pinned: str | None,
    avoided: Avoidance,
    warm: Sequence[str],
    node: str,
    *,
    spread: bool = False,
) -> tuple[WorkerSlot | None, bool]:
    """The worker for the workspace's next run (None when none is usable), and whether it found the
    pool full (the pinned worker full, or no free slot anywhere).

    ``pinned``: the worker the workspace is pinned to; ``warm``: the workers that ran this owner's
    workspace, most recent first; ``node``: the owner's node. ``spread``: the run was handed back from
    a worker's line (capacity appeared elsewhere): the same node is not preferred. Owners on one node
    re-dispatching at once from views of the same age all chose the one free worker of their node,
    and queued there again (the elastic test's removal phase: three shed runs landed on one new
    worker, one after another).
    """
    if pinned is not None:
        slot = slots.get(pinned)
        if slot is not None and slot.listed and not avoided.dead(pinned):
            return slot, slot.estimate >= slot.target
    candidates = [s for s in slots.values() if usable(s, avoided)]
    if not candidates:
        return None, False
    now = time.monotonic()
    steady = [s for s in candidates if avoided.steady(s.name, now)]
    candidates = steady or candidates  # a restarting or silent worker only when no other is usable
    ranks = {name: rank for rank, name in enumerate(warm)}
    order = {s.name: zlib.crc32(f"{workspace_id}/{s.name}".encode()) for s in candidates}
    free = [s for s in candidates if s.estimate < s.target]
    if free:
        chosen = min(
            free,
            key=lambda s: (
                ranks.get(s.name, len(ranks)),
                not spread and s.node_id != node,
                s.estimate,
                order[s.name],
            ),
        )
        return chosen, False
    chosen = min(
        candidates,
        key=lambda s: (s.estimate / max(1, s.target), ranks.get(s.name, len(ranks)), order[s.name]),
    )
    return chosen, True


def room_elsewhere(slots: Mapping[str, WorkerSlot], slot: WorkerSlot, avoided: Avoidance) -> bool:
    """Whether a usable worker other than ``slot`` has a free slot."""
    return any(s is not slot and usable(s, avoided) and s.estimate < s.target for s in slots.values())
