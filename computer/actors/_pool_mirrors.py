"""``BoundedMirrorPool``: a pool worker's shell mirrors, kept for the most recently used workspaces only.

A pool worker serves every workspace of the cluster, so the plain per-workspace pool of the shell
backend would grow with the number of workspaces that ever ran a command there. This one forgets the
idle mirrors of the least-recently-used workspaces beyond ``max_workspaces`` (their next run does a
full push); mirrors lent to a running command are never touched.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from ..runtime._mirror import Mirror, MirrorPool

__all__ = ["BoundedMirrorPool"]


class BoundedMirrorPool(MirrorPool):
    """A :class:`MirrorPool` holding idle mirrors of at most ``max_workspaces`` workspaces."""

    def __init__(self, base: Path, root: str, *, max_workspaces: int, idle: int = 2) -> None:
        super().__init__(base, root, idle=idle)
        if max_workspaces < 1:
            raise ValueError("max_workspaces must be at least 1")
        self.max_workspaces = max_workspaces
        self._recent: OrderedDict[str, None] = OrderedDict()

    def acquire(self, workspace_id: str) -> Mirror:
        self._touch(workspace_id)
        return super().acquire(workspace_id)

    def release(self, workspace_id: str, mirror: Mirror) -> bool:
        kept = super().release(workspace_id, mirror)
        self._touch(workspace_id)
        return kept and any(m is mirror for m in self._free.get(workspace_id, []))

    def workspaces(self) -> list[str]:
        """Workspaces with idle mirrors, least recently used first."""
        return [w for w in self._recent if self._free.get(w)]

    def _touch(self, workspace_id: str) -> None:
        self._recent[workspace_id] = None
        self._recent.move_to_end(workspace_id)
        while len(self._recent) > self.max_workspaces:
            oldest, _ = self._recent.popitem(last=False)
            for mirror in self._free.pop(oldest, []):
                self.discard(mirror)
