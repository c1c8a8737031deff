"""Which content types a browser would run as a document with scripts: those are served sandboxed.

A share link's bytes come from the workspace, i.e. from an agent or the programs it ran, and the share
origin serves every link. A published ``.html`` or ``.svg`` shown inline would run its scripts on that
origin: it could read other links it can guess, post forms, or phish under the product's host name.
Such types get ``Content-Security-Policy: sandbox`` (a unique opaque origin, no scripts, no forms, no
popups, no plugins), always with ``X-Content-Type-Options: nosniff``. They stay viewable inline (the
point of sharing a rendered report), which is why the choice is sandboxing rather than forcing
``attachment``. Passive types (text/plain, images other than SVG, PDF, audio, video, archives) are left
alone: browsers do not run scripts in them, and a CSP sandbox would break Chrome's PDF viewer.
"""

from __future__ import annotations

__all__ = ["SANDBOX_POLICY", "is_active_type"]

SANDBOX_POLICY = "sandbox"

_ACTIVE = frozenset(
    {
        "text/html",
        "application/xhtml+xml",
        "image/svg+xml",
        "text/xml",
        "application/xml",
        "text/xsl",
        "application/xslt+xml",
        "text/javascript",
        "application/javascript",
        "application/ecmascript",
        "text/ecmascript",
        "application/x-javascript",
        "text/x-javascript",
        "application/x-shockwave-flash",
        "text/vtt",
        "multipart/x-mixed-replace",
        "application/octet-stream",  # unknown bytes: nothing to lose by sandboxing them
    }
)


def is_active_type(content_type: str) -> bool:
    """Whether ``content_type`` (parameters allowed, any case) may run as an active document.

    Every ``+xml`` type counts (XML documents can carry XHTML, SVG and XSLT), and so does a missing
    or unparsable type, and a list of types (a browser takes one of them: ``text/plain,text/html``
    ran its script; ``share`` refuses lists, this holds for any stored before).
    """
    if "," in content_type:
        return True
    essence = content_type.split(";", 1)[0].strip().lower()
    if "/" not in essence:
        return True
    return essence in _ACTIVE or essence.endswith("+xml") or essence.endswith("/xml")
