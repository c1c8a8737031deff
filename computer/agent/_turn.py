"""What a turn takes and gives: ``TurnContext`` for ``before_turn``, ``TurnConfig``, ``Reply``, ``PendingCall``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AgentMovedError", "PendingCall", "Reply", "TurnBusyError", "TurnConfig", "TurnContext"]


@dataclass(frozen=True)
class PendingCall:
    """A tool call waiting for ``approve(id)`` or ``reject(id, reason)``."""

    id: str
    tool: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """The outcome of a turn: the model's text, or the calls it is paused on (then ``text`` is None)."""

    text: str | None
    pending: tuple[PendingCall, ...] = ()

    @property
    def paused(self) -> bool:
        return bool(self.pending)

    def __str__(self) -> str:
        return (
            self.text if self.text is not None else f"(waiting for approval of {len(self.pending)} call(s))"
        )


@dataclass(frozen=True)
class TurnContext:
    """What ``before_turn`` sees: the user's message (for a resumed turn, the one that started it),
    how many messages the stored conversation holds, and whether the turn resumes after approvals."""

    message: str | None
    history_length: int
    resumed: bool = False


@dataclass
class TurnConfig:
    """What ``before_turn`` may return (a dict with the same keys works too).

    ``active_tools`` restricts which of the merged tools the model may call; ``tools`` adds tools for
    this turn only, on top of every other source (they are never filtered by ``active_tools``).
    """

    active_tools: Sequence[str] | None = None
    tools: Sequence[Any] | Mapping[str, Any] = field(default_factory=list)

    @classmethod
    def coerce(cls, value: TurnConfig | Mapping[str, Any] | None) -> TurnConfig:
        if value is None:
            return cls()
        if isinstance(value, TurnConfig):
            return value
        unknown = set(value) - {"active_tools", "tools"}
        if unknown:
            raise ValueError(f"before_turn returned unknown keys: {sorted(unknown)}")
        return cls(active_tools=value.get("active_tools"), tools=value.get("tools") or [])


class TurnBusyError(RuntimeError):
    """A new message arrived while the previous turn waits for approvals."""


class AgentMovedError(RuntimeError):
    """The agent actor is hibernating or was taken over: re-resolve it (``spawn``) and retry."""
