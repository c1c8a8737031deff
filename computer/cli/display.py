"""How the command line and the dashboard write sizes, ages and callers (one wording for both), and
the command line names and command lines (plain text, whatever they hold)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

__all__ = ["ago_text", "caller_text", "plain_text", "size_text"]


def size_text(n: int) -> str:
    """``512 B``, ``1.5 KiB``, ``3.2 MiB``, ``1.1 GiB``."""
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def ago_text(seconds: float) -> str:
    """``12 s ago``, ``5 min ago``, ``2.5 h ago``, ``3.0 days ago`` (a negative age, from a clock
    that moved back, reads as now)."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s ago"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h ago"
    return f"{seconds / 86400:.1f} days ago"


def caller_text(caller: dict[str, str]) -> str:
    """An audit record's caller as ``agent via adapter (client)``, with the parts that are known."""
    text = caller.get("agent", "")
    if caller.get("adapter"):
        text = f"{text} via {caller['adapter']}" if text else caller["adapter"]
    client = caller.get("client")
    if client and client != "local":
        text = f"{text} ({client})" if text else client
    return text or caller.get("client", "")


def plain_text(text: str) -> Text:
    """``text`` (a name, a command line: anything a program or a user chose) shown as it is: no rich
    markup read in it, control characters escaped (a name's clear-screen code, or a newline making a
    fake table row)."""
    from rich.text import Text

    return Text("".join(c if c.isprintable() else repr(c)[1:-1] for c in text))
