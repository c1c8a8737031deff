"""What the shared inotify instance (``_watch._Inotify``) delivered to one watch, and what it watches
(moved out of ``_watch.py`` at its 500 lines)."""

from __future__ import annotations

import os

__all__ = ["Event", "_Held"]

Event = tuple[int, int, bytes]  # (watch descriptor, mask, name)


class _Held:
    """What the shared instance delivered to one watch: its events, whether it can still vouch, and
    the directories it watches (the reader thread adds new ones: :meth:`_Inotify.adopt`)."""

    __slots__ = (
        "adopted",
        "adopting",
        "broken",
        "dirs",
        "empty",
        "events",
        "lent",
        "over",
        "rekeyed",
        "root",
        "shed",
        "stats",
        "unadopted",
        "walked",
        "wds",
    )

    def __init__(self, root: str = "", empty: int | None = None) -> None:
        self.events: list[Event] = []
        self.broken = False
        self.over = (
            False  # past ``MAX_DIRS`` (the process past ``MAX_WATCHES``, the user out of watches): holds none
        )
        self.wds: set[int] = set()
        self.shed = False  # its watches given back near an overflow (``_Inotify._shed``)
        self.root = root
        self.empty = empty  # the size of an empty directory there, when sizes tell (``empty_size``)
        self.dirs: dict[int, str] = {}  # watch descriptor -> directory relative to root ("" is root)
        # What the new directories watched since the last take held (relative paths), and the lstat
        # of each new directory, taken once it was watched (the pull's plan would take it anyway).
        self.walked: set[str] = set()
        self.stats: dict[str, os.stat_result] = {}
        # New directories a cheap look (``count``, on the loop) read of: the next full read adopts
        # them first (37,000 of a ``mkdir -p`` adopted on the loop held it ~150 ms).
        self.unadopted: list[str] = []
        self.lent = False  # ``dirs`` handed to a drain (``take``): a move re-keys a copy (``_watch_moves``)
        self.adopting, self.adopted = 0, False  # adding directories (or not read past it): pairs no move
        self.rekeyed = 0  # paths its pairings looked at since the last take (``_watch_moves.REKEY_WORK``)
