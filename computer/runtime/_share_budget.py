"""``ShareBudget``: how much of the asset store the programs of one workspace may hold at once.

A share link stores a copy of the file's bytes (``computer.assets``: its blob on the host's disk, as
large as the file, written whole: a hole is written as zeros) until the link expires, up to 7 days.
A program reaches ``share`` through the sandbox's ``assets`` command at no cost of its own: a sparse
512 MiB file, which costs the workspace nothing, published 6 times wrote 3.1 GB to the host's disk in
15 s, every workspace's and the host's disk (72 GB free here: minutes to fill). Decision: the links
programs of one workspace made (``ExecContext.share``, owner-side, so a pool's workers count together)
hold at most ``max_bytes`` (1 GiB) and ``max_links`` (10,000) until they expire, each for at least
``min_hold`` (10 min: a store removes an expired link's blob at its next sweep, up to a minute
later for the SQLite store, so links of 1 s published in a loop would still fill the disk); past that a
share is refused (``EDQUOT``, saying what is held and until when) and stores nothing. The agent's own shares
(``workspace.assets.share``, the tools) are not counted. Kept in the owner's memory: a restart of the
owner forgets what its programs held (they cannot restart it).
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import itertools
import time
from collections.abc import Callable, Iterator

__all__ = ["ShareBudget"]


class ShareBudget:
    """The links the programs of one workspace hold (expiry, size), bounded (see the module)."""

    def __init__(
        self,
        max_bytes: int = 1 << 30,
        max_links: int = 10_000,
        min_hold: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_bytes = max_bytes
        self.max_links = max_links
        self.min_hold = min_hold
        self._clock = clock
        self._held: list[tuple[float, int, int]] = []  # a heap of (expires, order, size)
        self._order = itertools.count()
        self._bytes = 0  # of ``_held`` and of the shares in progress
        self._links = 0

    def held(self) -> tuple[int, int]:
        """(bytes, links) held now, expired links let go."""
        self._expire()
        return self._bytes, self._links

    @contextlib.contextmanager
    def hold(self, path: str, size: int, lifetime: float) -> Iterator[None]:
        """Reserve ``size`` bytes for a link of ``lifetime`` seconds to ``path`` while the share is
        made, kept until it expires (``min_hold`` at least) if it succeeds; ``OSError(EDQUOT)`` past
        the budget."""
        self._expire()
        if self._bytes + size > self.max_bytes or self._links + 1 > self.max_links:
            until = max((expires for expires, _, _ in self._held), default=self._clock()) - self._clock()
            raise OSError(
                errno.EDQUOT,
                f"the share links this workspace's programs made hold {self._bytes} bytes in {self._links} "
                f"links (the most: {self.max_bytes} bytes, {self.max_links} links) until they expire (the "
                f"last in {max(0, round(until))} s); this one of {size} bytes would go over: publish it again "
                "once they expired, or share it from the agent (workspace.assets.share)",
                path,
            )
        self._bytes += size
        self._links += 1
        try:
            yield
        except BaseException:
            self._bytes -= size
            self._links -= 1
            raise
        held = max(lifetime, self.min_hold)
        heapq.heappush(self._held, (self._clock() + held, next(self._order), size))

    def _expire(self) -> None:
        now = self._clock()
        while self._held and self._held[0][0] <= now:
            _, _, size = heapq.heappop(self._held)
            self._bytes -= size
            self._links -= 1
