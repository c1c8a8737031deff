"""Directories of the workspace that a run's program may read but not change (``refuse_protected_change``).

The runtime's journal (``/.computer/exec``: the records ``get_exec`` trusts after a restart) is one:
the python backend's ``workspace`` module reaches every workspace path, and a program rewrote an
earlier run's record (``failed 1`` read back as ``completed 0`` with output of its choosing). The
agent's state is another (``computer.agent``). A path is checked where it really leads (symlinks
followed, as the change would follow them), and a change to an ancestor (removing or replacing
``/.computer``, ``/``) is refused too; ``mkdir`` of an ancestor is harmless and allowed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..storage.paths import canonical, is_within, resolve_links

__all__ = ["CHANGES", "reaches_protected", "refuse_protected_change"]

# fs operation -> (argument names it changes, whether the last segment is followed, ancestors too)
CHANGES: dict[str, tuple[tuple[str, ...], bool, bool]] = {
    "write_file": (("path",), True, True),
    "mkdir": (("path",), False, False),
    "rm": (("path",), False, True),
    "rename": (("src", "dst"), False, True),
    "copy": (("dst",), True, True),
    "symlink": (("path",), False, True),
    "link": (("new",), False, True),
}


def reaches_protected(real: str, protected: str, *, ancestors: bool) -> bool:
    """True when a change at canonical ``real`` reaches the directory ``protected``."""
    return is_within(real, protected) or (ancestors and is_within(protected, real))


async def refuse_protected_change(
    fs: Any, op: str, args: dict[str, Any], protected: Mapping[str, Callable[[str], Exception]]
) -> None:
    """Raise ``protected[directory](path)`` when fs operation ``op`` with ``args`` would change one of
    the ``protected`` directories (each path's links are resolved once, for all of them)."""
    spec = CHANGES.get(op)
    if spec is None or not protected:
        return
    names, follow, ancestors = spec
    for name in names:
        path = args.get(name)
        if not isinstance(path, str):
            continue
        spelled = canonical(path)
        for directory, refuse in protected.items():
            if reaches_protected(spelled, directory, ancestors=ancestors):
                raise refuse(spelled)
        real = await resolve_links(fs.readlink, path, follow=follow)
        for directory, refuse in protected.items():
            if reaches_protected(real, directory, ancestors=ancestors):
                raise refuse(spelled)
