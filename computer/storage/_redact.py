"""Redaction and truncation of what the audit log keeps: secret-looking values go, long values are cut.

One place for the policy, applied to every record (arguments, details, errors, callers) whatever its
kind. A value under a secret-looking key (``password``, ``api_key``, ``Authorization``…) is replaced
whole; inside any text, known token shapes (OpenAI/Anthropic ``sk-…``, GitHub, Slack, AWS, Google,
JWTs, PEM private keys) and the value of ``NAME=value``, ``--name value``, ``Bearer x`` with a
secret-looking name are replaced by ``[redacted]``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_ERROR_CHARS", "MAX_VALUE_CHARS", "REDACTED", "cut", "payload_size", "redact", "scrub"]

MAX_VALUE_CHARS = 256  # a string value longer than this is cut (arguments, details)
MAX_ERROR_CHARS = 2048
MAX_ITEMS = 32  # list items and object keys kept per level
MAX_DEPTH = 6
REDACTED = "[redacted]"

# Keys whose values are secrets whatever they look like.
_SECRET_KEY = re.compile(
    r"(pass(word|wd|phrase)?(?![a-z])|secret|token|api[-_]?key|apikey|auth(orization)?(?![a-z])|"
    r"credential|cookie|private[-_]?key|session[-_]?(id|key)|access[-_]?key)",
    re.IGNORECASE,
)
# Values that look like secrets wherever they appear (inside commands, file content, errors).
_SECRET_VALUE = re.compile(
    r"(sk-(ant-|proj-)?[A-Za-z0-9_-]{16,}"  # OpenAI, Anthropic
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|xox[abpors]-[A-Za-z0-9-]{10,}"  # Slack
    r"|AKIA[0-9A-Z]{16}"  # AWS access key id
    r"|AIza[0-9A-Za-z_-]{30,}"  # Google API key
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWT
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$))"
)
# ``Bearer <x>``, ``Basic <x>`` and ``NAME=value`` / ``--name value`` / ``"name": "value"`` with a
# secret-looking NAME: the value part goes, the name stays (so the record still says what was set).
_SECRET_SCHEME = re.compile(r"\b(?P<head>(?:Bearer|Basic)\s+)(?P<value>[^\s\"'&;,]{4,})")
# The name is a word or a --flag; prose ("the token budget") keeps its words: a bare space separates
# a value only after a --flag.
_NAME = r"[A-Za-z0-9_.-]*" + _SECRET_KEY.pattern + r"[A-Za-z0-9_.-]*"
_SECRET_ASSIGNMENT = re.compile(
    r"(?P<head>(?:" + _NAME + r"[\"']?\s*[=:]\s*[\"']?|--" + _NAME + r"(?:\s+|=)))"
    r"(?P<value>[^\s\"'&;,]{4,})",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """``text`` with every secret-looking value replaced by ``[redacted]``."""
    if not text:
        return text
    text = _SECRET_VALUE.sub(REDACTED, text)
    text = _SECRET_SCHEME.sub(lambda m: m.group("head") + REDACTED, text)
    return _SECRET_ASSIGNMENT.sub(lambda m: m.group("head") + REDACTED, text)


def cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} chars)"


def scrub(value: Any, *, limit: int = MAX_VALUE_CHARS, _depth: int = 0) -> Any:
    """A JSON-ready copy of ``value``: secrets redacted, strings cut at ``limit``, lists and objects cut.

    A value under a secret-looking key is replaced whole; bytes become their length.
    """
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        # Redact a window a little longer than what is kept, so a secret on the cut is still found.
        if len(value) <= limit:
            return redact(value)
        return f"{redact(value[: limit + 64])[:limit]}… ({len(value)} chars)"
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(value)} bytes>"
    if _depth >= MAX_DEPTH:
        return "…"
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for i, (key, item) in enumerate(value.items()):
            if i >= MAX_ITEMS:
                out["…"] = f"{len(value) - MAX_ITEMS} more"
                break
            name = str(key)
            if _SECRET_KEY.search(name) and isinstance(item, str | bytes | Mapping | list) and item:
                out[name] = REDACTED
            else:
                out[name] = scrub(item, limit=limit, _depth=_depth + 1)
        return out
    if isinstance(value, list | tuple | set | frozenset):
        items = list(value)
        kept = [scrub(item, limit=limit, _depth=_depth + 1) for item in items[:MAX_ITEMS]]
        if len(items) > MAX_ITEMS:
            kept.append(f"… {len(items) - MAX_ITEMS} more")
        return kept
    return scrub(repr(value), limit=limit, _depth=_depth)


def payload_size(value: Any) -> int:
    """About how many bytes ``value`` carries: UTF-8 bytes of its text and bytes, summed (cheap)."""
    if isinstance(value, str):
        return len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    if isinstance(value, Mapping):
        return sum(len(str(k)) + payload_size(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return sum(payload_size(v) for v in value)
    if value is None or isinstance(value, bool):
        return 0
    return len(str(value))
