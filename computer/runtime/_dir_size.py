"""The size of an empty directory on a filesystem, where that size tells a directory is empty (a watch
then lists a new directory only when it holds something)."""

from __future__ import annotations

import contextlib
import os
import tempfile

__all__ = ["empty_size"]

_EMPTY_SIZES: dict[int, int | None] = {}


def empty_size(where: str, device: int | None = None) -> int | None:
    """The ``st_size`` of an empty directory on the filesystem of ``where``, when a directory of
    that size is always empty there, else None (probed once per filesystem, in a directory made
    and removed in ``where``). ``device``: the filesystem the answer is for (None when ``where``
    is on another one: a mirror that is a mount point of its own is listed as before).

    tmpfs (the default home of mirrors) counts 20 bytes per entry on top of 40 for an empty
    directory, btrfs the lengths of its names: a directory of the empty size holds nothing. ext4's
    directories stay 4096 bytes with a first entry: there the probe says None and every new
    directory is listed.
    """
    try:
        here = os.stat(where).st_dev
    except OSError:
        return None
    if device is None:
        device = here
    elif device != here:
        return None
    if device in _EMPTY_SIZES:
        return _EMPTY_SIZES[device]
    found: int | None = None
    try:
        probe = tempfile.mkdtemp(prefix=".size-probe-", dir=where)
    except OSError:
        return None
    try:
        empty = os.lstat(probe).st_size
        os.mkdir(f"{probe}/d")
        one = os.lstat(probe).st_size
        os.rmdir(f"{probe}/d")
        if one > empty and os.lstat(probe).st_size == empty:
            found = empty
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(f"{probe}/d")
        with contextlib.suppress(OSError):
            os.rmdir(probe)
    _EMPTY_SIZES[device] = found
    return found
