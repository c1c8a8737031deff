"""``Content-Disposition`` values with the filename encoded per RFC 6266 / RFC 5987."""

from __future__ import annotations

from urllib.parse import quote

__all__ = ["DISPOSITIONS", "content_disposition"]

DISPOSITIONS = ("inline", "attachment")


def content_disposition(disposition: str, filename: str) -> str:
    """``inline; filename="a.txt"``; a non-ASCII or unsafe name adds ``filename*=UTF-8''…``.

    The plain ``filename`` is an ASCII fallback (non-ASCII characters become ``_``) so old clients
    still get a usable name; clients that understand ``filename*`` prefer the exact one.
    """
    if disposition not in DISPOSITIONS:
        raise ValueError(f"disposition must be 'inline' or 'attachment', got {disposition!r}")
    fallback = "".join(ch if 0x20 <= ord(ch) < 0x7F else "_" for ch in filename)
    quoted = fallback.replace("\\", "\\\\").replace('"', '\\"')
    value = f'{disposition}; filename="{quoted}"'
    if fallback != filename or quoted != fallback:
        value += "; filename*=UTF-8''" + quote(filename, safe="!#$&+-.^_`|~")
    return value
