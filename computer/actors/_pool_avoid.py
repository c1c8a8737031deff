"""What a dispatcher remembers of workers' trouble that the control loop's view may not show yet:
the workers it saw dead (skipped), and those it sends runs to only when no other is usable
(restarting, silent to a probe, draining).
"""

from __future__ import annotations

import math
import time

__all__ = ["DEAD_REMEMBERED", "DRAINING_AVOID", "RESTART_AVOID", "SILENT_AVOID", "Avoidance"]

DEAD_REMEMBERED = 60.0  # seconds a dispatcher ignores a worker it saw dead (the view may lag behind)
# Seconds a dispatcher prefers other workers to one it found restarting (``ActorUnavailableError``) when
# another is usable. Before, every retry of a run went back to the restarting worker (the warm one, then
# the same hash) and waited there, ~2 s a try: after a worker was killed under a run, the next command
# of its workspace waited 23-29 s for that worker's restart while the other worker was ready.
RESTART_AVOID = 10.0
# Seconds a dispatcher prefers other workers to one that did not answer a probe (the control loop
# shows it draining after ``SILENT_AFTER`` without a load report).
SILENT_AVOID = 60.0
# Seconds a dispatcher prefers other workers to one that handed a run back as draining. Its view's
# ``draining`` came from the control loop and replaced the worker's own answer: a worker drained
# outside the control loop's view (or before its view said so) took the run back again and again,
# and the run failed "handed back 101 times" within 5 s while another worker was free.
DRAINING_AVOID = 10.0


class Avoidance:
    """One dispatcher's record of troubled workers, by name."""

    def __init__(self) -> None:
        self._dead: dict[str, float] = {}  # -> when it was seen dead
        self._restarting: dict[str, float] = {}  # -> when a call found it restarting
        self._until: dict[str, float] = {}  # -> until when (monotonic) it is avoided: silent, draining

    def expire(self) -> None:
        """Forget what is older than it is remembered for."""
        now = time.monotonic()
        self._dead = {n: t for n, t in self._dead.items() if now - t < DEAD_REMEMBERED}
        self._restarting = {n: t for n, t in self._restarting.items() if now - t < RESTART_AVOID}
        self._until = {n: t for n, t in self._until.items() if now < t}

    def dead(self, name: str) -> bool:
        return name in self._dead

    def bury(self, name: str) -> None:
        """The worker was seen dead (the control loop replaces it)."""
        self._dead[name] = time.monotonic()

    def restarting(self, name: str) -> None:
        """A call found the worker restarting (Ray restarts it in place)."""
        self._restarting[name] = time.monotonic()

    def answered(self, name: str) -> None:
        """A run reached the worker: it is no longer restarting."""
        self._restarting.pop(name, None)

    def silent(self, name: str) -> None:
        """The worker did not answer a probe."""
        self._until[name] = time.monotonic() + SILENT_AVOID

    def draining(self, name: str) -> None:
        """The worker handed a run back as draining (the next view may not say so yet)."""
        self._until[name] = time.monotonic() + DRAINING_AVOID

    def steady(self, name: str, now: float) -> bool:
        """Whether the worker is neither restarting nor avoided at ``now`` (monotonic)."""
        return now - self._restarting.get(name, -math.inf) >= RESTART_AVOID and now >= self._until.get(
            name, -math.inf
        )
