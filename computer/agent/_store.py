"""``AgentStore``: the agent's durable state, as files under ``/.computer/agent`` in its workspace.

``state.json`` holds the conversation (pydantic-ai messages) and the paused turn in one file, so a
turn commits with one write (one SQLite transaction). MCP servers, extensions and execution records
are files of their own. In-memory copies are caches; a new actor reads everything back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from ..surface import FileSystemSurface
from ._turn import PendingCall, Reply

__all__ = ["REPLAY_TURNS", "STATE_DIR", "AgentState", "AgentStateError", "AgentStore", "PausedTurn"]

STATE_DIR = "/.computer/agent"


class AgentStateError(RuntimeError):
    """The agent's ``state.json`` cannot be read back (damaged by hand or by a bug); names the file."""


@dataclass
class PausedTurn:
    """A turn stopped on approvals; ``decisions`` maps a call id to True (approved) or a reject reason."""

    message: str | None
    calls: list[PendingCall]
    decisions: dict[str, bool | str] = field(default_factory=dict)

    def undecided(self) -> list[PendingCall]:
        return [c for c in self.calls if c.id not in self.decisions]

    def to_json(self) -> dict[str, Any]:
        calls = [{"id": c.id, "tool": c.tool, "args": c.args} for c in self.calls]
        return {"message": self.message, "calls": calls, "decisions": self.decisions}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> PausedTurn:
        calls = [PendingCall(c["id"], c["tool"], dict(c["args"])) for c in raw["calls"]]
        return cls(raw.get("message"), calls, dict(raw.get("decisions") or {}))


REPLAY_TURNS = 64  # committed turns whose request keys and replies are remembered for retries


@dataclass
class AgentState:
    """``recent`` holds the replies of the last :data:`REPLAY_TURNS` committed turns, each with the
    request keys that produced it (a chat's ``turn_id``, the call ids an approval resumed), so a
    retried request gets its reply again even when other turns committed in between. (Older files
    kept only the last one, as ``last``; it is read back and still written.)"""

    messages: list[ModelMessage] = field(default_factory=list)
    paused: PausedTurn | None = None
    recent: list[dict[str, Any]] = field(default_factory=list)

    @property
    def last(self) -> dict[str, Any] | None:
        return self.recent[-1] if self.recent else None

    def replay(self, key: str | None) -> Reply | None:
        """The stored reply of the remembered turn that ``key`` produced, if any."""
        if key is None:
            return None
        for entry in reversed(self.recent):
            if key in entry["keys"]:
                pending = tuple(PendingCall(c["id"], c["tool"], dict(c["args"])) for c in entry["pending"])
                return Reply(entry["text"], pending)
        return None

    def remember(self, keys: list[str], reply: Reply) -> None:
        if not keys:
            return  # nothing could ask for it again
        pending = [{"id": c.id, "tool": c.tool, "args": c.args} for c in reply.pending]
        self.recent.append({"keys": keys, "text": reply.text, "pending": pending})
        del self.recent[:-REPLAY_TURNS]


class AgentStore:
    """Reads and writes the agent's files through ``workspace.fs`` (the owner's, in-process)."""

    def __init__(self, fs: FileSystemSurface, root: str = STATE_DIR) -> None:
        self.fs = fs
        self.root = root

    def path(self, *parts: str) -> str:
        return "/".join((self.root, *parts))

    async def read_json(self, path: str) -> Any:
        try:
            return json.loads(await self.fs.read_file(path))
        except FileNotFoundError:
            return None

    async def write_json(self, path: str, value: Any) -> None:
        parent = path.rsplit("/", 1)[0]
        await self.fs.mkdir(parent, recursive=True)
        await self.fs.write_file(path, json.dumps(value, ensure_ascii=False).encode())

    async def load_state(self) -> AgentState:
        """The stored state (empty when there is none); ``AgentStateError`` naming the file if damaged."""
        path = self.path("state.json")
        try:
            raw = await self.read_json(path)
        except (ValueError, UnicodeDecodeError, IsADirectoryError) as exc:
            raise AgentStateError(f"the agent's state file {path} is damaged: not JSON ({exc})") from exc
        if raw is None:
            return AgentState()
        try:
            if not isinstance(raw, dict) or "messages" not in raw:
                raise ValueError("not an object with 'messages'")
            messages = ModelMessagesTypeAdapter.validate_python(raw["messages"])
            paused = PausedTurn.from_json(raw["paused"]) if raw.get("paused") else None
            recent = raw.get("recent")
            if recent is None:  # written before the last turns were kept: only the last one
                recent = [raw["last"]] if raw.get("last") else []
            return AgentState(list(messages), paused, [dict(r) for r in recent])
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise AgentStateError(
                f"the agent's state file {path} is damaged ({type(exc).__name__}: {exc}); "
                "restore it, or remove it to start a new conversation"
            ) from exc

    async def save_state(self, state: AgentState) -> None:
        value = {
            "version": 1,
            "messages": ModelMessagesTypeAdapter.dump_python(state.messages, mode="json"),
            "paused": state.paused.to_json() if state.paused else None,
            "recent": state.recent,
            "last": state.last,  # what older code reads
        }
        await self.write_json(self.path("state.json"), value)

    async def list_json(self, directory: str) -> list[dict[str, Any]]:
        """Every JSON record in ``directory`` (name order); a missing directory is empty."""
        try:
            entries = await self.fs.readdir(self.path(directory))
        except FileNotFoundError:
            return []
        records = []
        for entry in entries:
            if entry.is_file and entry.name.endswith(".json"):
                value = await self.read_json(self.path(directory, entry.name))
                if isinstance(value, dict):
                    records.append(value)
        return records
