"""``CallJournal``: the idempotency keys of an owner's mutating calls, kept beside the workspace file.

A client gives every mutation a key. Before running one, the owner appends ``pending`` (the key, the
revision it starts from, the paths it names); after, ``done`` with its reply. The journal outlives the
owner's process (one ``write`` per line; a process crash keeps what the kernel was given), so when a
client sends a call again after its owner died, the next owner answers:

- ``done``: the first reply, without running it again;
- ``pending`` and no change to its paths since its revision: it never applied; it runs now;
- ``pending`` and a change there (ours or another's, or the change log no longer reaches back):
  "unknown outcome";
- unknown key: it never reached an owner; it runs now.

An OS crash or power loss may lose the journal's last lines while the workspace kept the write (they
are not fsynced together): the guarantee is for process deaths, which is what owners suffer.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

__all__ = ["CallJournal"]

_KEEP = 4096  # keys remembered
_ROTATE_BYTES = 2 * 1024 * 1024  # the file is rewritten with the last _KEEP keys beyond this size


class CallJournal:
    """Append-only JSON lines at ``path``: ``{"k", "p": [rev, paths]}`` then ``{"k", "d": reply}``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._load()
        self._fd: int | None = None
        with contextlib.suppress(OSError):
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                lines = f.read().splitlines()
        except OSError:
            return
        for line in lines:
            try:
                entry = json.loads(line)
                key = str(entry["k"])
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by the crash
            known = self._entries.pop(key, {})
            known.update({k: v for k, v in entry.items() if k != "k"})
            self._entries[key] = known
        while len(self._entries) > _KEEP:
            self._entries.popitem(last=False)

    def lookup(self, key: str) -> dict[str, Any] | None:
        """``{"d": reply}`` when the call finished, ``{"p": [rev, paths]}`` when it started only."""
        return self._entries.get(key)

    def begin(self, key: str, rev: int, paths: list[str]) -> None:
        self._append(key, {"p": [rev, paths]})

    def done(self, key: str, reply: tuple[str, Any]) -> None:
        kind, value = reply
        if (kind == "ok" and value is None) or kind == "os":
            self._append(key, {"d": [kind, list(value) if kind == "os" else None]})
        else:  # a reply that does not travel as JSON: a resend cannot be answered with it
            self._entries.pop(key, None)

    def _append(self, key: str, fields: dict[str, Any]) -> None:
        entry = self._entries.pop(key, {})
        entry.update(fields)
        self._entries[key] = entry
        while len(self._entries) > _KEEP:
            self._entries.popitem(last=False)
        if self._fd is None:
            return
        try:
            os.write(self._fd, json.dumps({"k": key, **fields}).encode() + b"\n")
            if os.fstat(self._fd).st_size > _ROTATE_BYTES:
                self._rotate()
        except OSError:  # a full disk: the call still runs, only a resend cannot be answered
            pass

    def _rotate(self) -> None:
        fresh = self.path.with_name(self.path.name + ".new")
        with open(fresh, "wb") as f:
            for key, entry in self._entries.items():
                f.write(json.dumps({"k": key, **entry}).encode() + b"\n")
        os.replace(fresh, self.path)
        if self._fd is not None:
            os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
