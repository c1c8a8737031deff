"""Redaction and truncation of what the audit log keeps: secret-looking values go, long values are cut.

One place for the policy, applied to every record (arguments, details, errors, callers) whatever its
kind. A value under a secret-looking key (``password``, ``api_key``, ``Authorization``…) is replaced
whole; inside any text, known token shapes (OpenAI/Anthropic ``sk-…``, GitHub, Slack, AWS, Google,
GitLab, JWTs, PEM private keys) and the value of ``NAME=value``, ``--name value``, ``Bearer x`` with
a secret-looking name, a whole ``Authorization:`` header value (any scheme), the password of a URL's
``user:password@``, of ``curl -u user:password`` and of ``mysql -ppassword`` are replaced by
``[redacted]``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MAX_ERROR_CHARS",
    "MAX_VALUE_CHARS",
    "REDACTED",
    "cut",
    "payload_size",
    "redact",
    "scrub",
    "scrub_args",
    "sound_text",
]

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
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
    r"|xox[abpors]-[A-Za-z0-9-]{10,}"  # Slack
    r"|AKIA[0-9A-Z]{16}"  # AWS access key id
    r"|AIza[0-9A-Za-z_-]{30,}"  # Google API key
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWT
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$))"
)
# ``Bearer <x>``, ``Basic <x>`` and ``NAME=value`` / ``--name value`` / ``"name": "value"`` with a
# secret-looking NAME: the value part goes, the name stays (so the record still says what was set).
_SECRET_SCHEME = re.compile(r"\b(?P<head>(?:Bearer|Basic)\s+)(?P<value>[^\s\"'&;,]{4,})")
# Credentials in a fixed place, whatever their name: an ``Authorization:`` header's whole value (its
# scheme may be ``token``, ``Digest``...), the password in a URL (``scheme://user:password@host``),
# ``curl -u user:password`` (``--user``), and a MySQL/MariaDB client's ``-ppassword``.
_SECRET_PLACE = re.compile(
    r"(?P<head>\bAuthorization\s*[:=]\s*)(?P<value>Digest\s[^\r\n']+|[^\r\n\"']+)"
    r"|(?P<head2>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/:@]+:)(?P<value2>[^\s/@]+)(?=@)"
    r"|(?P<head3>(?:^|\s)(?:-u|--user)(?:\s+|=)?[^\s:]+:)(?P<value3>[^\s\"'&;]+)"
    r"|(?P<head4>\b(?:mysql|mysqldump|mysqladmin|mariadb)\b[^\n;|&]*?\s-p)(?P<value4>[^\s\"'&;]+)",
    re.IGNORECASE,
)
# The name is a word or a --flag; prose ("the token budget") keeps its words: a bare space separates
# a value only after a --flag.
_NAME = r"[A-Za-z0-9_.-]*" + _SECRET_KEY.pattern + r"[A-Za-z0-9_.-]*"
_SECRET_ASSIGNMENT = re.compile(
    r"(?P<head>(?:" + _NAME + r"[\"']?\s*[=:]\s*[\"']?|--" + _NAME + r"(?:\s+|=)))"
    r"(?P<value>[^\s\"'&;,]{4,})",
    re.IGNORECASE,
)


# Whatever any pattern above can match contains one of these (lowercased): a few substring tests tell
# that most text (paths, names) needs none of the three substitutions, far faster than any regex.
_TRIGGERS = (
    "sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xox", "akia", "aiza", "eyj", "-----begin",
    "bearer", "basic", "pass", "secret", "token", "key", "auth", "credential", "cookie", "session",
    "glpat-", "://", "-u", "--user", "mysql", "mariadb",
)  # fmt: skip


_FLOAT_NAMES = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def redact(text: str) -> str:
    """``text`` with every secret-looking value replaced by ``[redacted]``."""
    if not text:
        return text
    lowered = text.lower()
    if not any(trigger in lowered for trigger in _TRIGGERS):
        return text
    text = _SECRET_VALUE.sub(REDACTED, text)
    text = _SECRET_PLACE.sub(_keep_head, text)
    text = _SECRET_SCHEME.sub(lambda m: m.group("head") + REDACTED, text)
    return _SECRET_ASSIGNMENT.sub(lambda m: m.group("head") + REDACTED, text)


def _keep_head(match: re.Match[str]) -> str:
    """The matched place's head (whichever alternative matched) followed by ``[redacted]``."""
    head = next(h for h in match.group("head", "head2", "head3", "head4") if h is not None)
    return head + REDACTED


def cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} chars)"


def scrub(value: Any, *, limit: int = MAX_VALUE_CHARS, _depth: int = 0) -> Any:
    """A JSON-ready copy of ``value``: secrets redacted, strings cut at ``limit``, lists and objects cut.

    A value under a secret-looking key is replaced whole; bytes become their length; a float that is
    not finite its name (``"NaN"``, ``"Infinity"``, ``"-Infinity"``: not JSON, the dashboard's JSON
    answer refused a page holding one).
    """
    kind = type(value)
    if value is None or kind is bool or kind is int:
        return value
    if kind is float:  # NaN and the infinities are not JSON: their JSON5 names as strings
        return value if math.isfinite(value) else _FLOAT_NAMES[repr(value)]
    if kind is str or isinstance(value, str):
        # Redact a window a little longer than what is kept, so a secret on the cut is still found.
        if len(value) <= limit:
            return redact(value)
        return f"{redact(value[: limit + 64])[:limit]}… ({len(value)} chars)"
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(value)} bytes>"
    if _depth >= MAX_DEPTH:
        return "…"
    if kind is dict or isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for i, (key, item) in enumerate(value.items()):
            if i >= MAX_ITEMS:
                out["…"] = f"{len(value) - MAX_ITEMS} more"
                break
            name = key if type(key) is str else str(key)
            if item and _SECRET_KEY.search(name) and isinstance(item, str | bytes | Mapping | list):
                out[name] = REDACTED
            else:
                out[name] = scrub(item, limit=limit, _depth=_depth + 1)
        return out
    if kind is list or isinstance(value, list | tuple | set | frozenset):
        items = list(value)
        kept = [scrub(item, limit=limit, _depth=_depth + 1) for item in items[:MAX_ITEMS]]
        if len(items) > MAX_ITEMS:
            kept.append(f"… {len(items) - MAX_ITEMS} more")
        return kept
    return scrub(repr(value), limit=limit, _depth=_depth)


def scrub_args(args: Mapping[str, Any] | None) -> Any:
    """A call's arguments as the audit log keeps them: :func:`scrub`, an ``env`` mapping (the exec
    tool's environment variables) as its sorted names only, as a run's own record keeps them.

    Decision (s61): env values are where secrets live and a name rarely says so (``DB_URL`` holds a
    password, ``MYVAR`` anything): the exec tool's record kept every value whose name did not look
    secret, beside the run's record, which kept the names alone."""
    if not args:
        return {}
    env = args.get("env")
    if isinstance(env, Mapping):
        args = {**args, "env": sorted(str(name) for name in env)}
    return scrub(dict(args))


def payload_size(value: Any, *, budget: int = 10_000) -> int:
    """About how many bytes ``value`` carries: UTF-8 bytes of its text and bytes, 8 per number, key
    names, summed. Exact types only and at most ``budget`` values visited (then an estimate): it runs
    on every audited call."""
    total = 0
    stack = [value]
    while stack and budget > 0:
        budget -= 1
        item = stack.pop()
        kind = type(item)
        if kind is str:
            total += len(item) if item.isascii() else len(item.encode("utf-8", "surrogatepass"))
        elif kind is dict:
            total += sum(len(key) if type(key) is str else 8 for key in item)
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif kind is bytes or kind is bytearray or kind is memoryview:
            total += len(item)
        elif kind is int or kind is float:
            total += 8
        elif item is not None and kind is not bool:
            total += len(str(item))
    return total


def sound_text(text: str) -> str:
    """``text``, its lone surrogates (a model's broken emoji escape ``"\\ud83d"``, which ``json.loads``
    accepts) written as ``\\udXXX`` escapes: SQLite takes only UTF-8, and one such string in an audit
    record failed the insert of its whole batch. In a JSON field the escape is valid JSON for the same
    string."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
