"""One copy per content, shared by a user's processes: :func:`shared_copy` (the sandbox's ``/etc`` in
``_bwrap``, the staged interpreter in ``_staging``).

The copy lives in the user's shared directory (``_scratch.shared_directory``) under a name that is a
digest of what it holds, so a name never stands for two contents. It is built beside its name and
renamed into place: the name never shows half of it, and of two processes building it at once one
loses the rename and removes its own. A process holds the copy while it may bind it
(``_scratch.hold_shared``); the reaper removes a copy nobody holds nor used for a day.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
from collections.abc import Callable
from pathlib import Path

from ._scratch import hold_shared, remove_tree

__all__ = ["shared_copy"]

log = logging.getLogger(__name__)


def shared_copy(shared: Path, name: str, build: Callable[[Path], None], what: str) -> Path | None:
    """The entry ``name`` of the shared directory ``shared``, held; made first when no process made it
    yet: ``build`` fills a fresh empty directory (0755) beside it, renamed into place. None when it
    could be neither made nor held (``what`` names it in the warning)."""
    root = shared / name
    if hold_shared(root):
        return root
    stage = shared / f".stage-{secrets.token_hex(6)}"
    try:
        stage.mkdir(mode=0o755)
        os.chmod(stage, 0o755)  # whatever the umask said
        build(stage)
        try:
            os.rename(stage, root)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            remove_tree(stage)  # another process made it meanwhile: the same content
    except OSError as exc:
        log.warning("%s %s not made: %s", what, root, exc)
        with contextlib.suppress(OSError):
            remove_tree(stage)
        return None
    return root if hold_shared(root) else None
