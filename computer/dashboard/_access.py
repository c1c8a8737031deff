"""Who may read the dashboard: loopback by default; any other bind needs a token.

- Bound to a loopback address (``127.0.0.0/8``, ``::1``, ``localhost``) the dashboard needs no token,
  but answers only requests whose ``Host`` header names a loopback host (a web page elsewhere cannot
  reach it through DNS rebinding).
- Bound to any other address it needs a token (one is made when none is given): a request shows it
  once as ``?token=…`` (the answer sets an HttpOnly, SameSite=Strict cookie) or sends it as
  ``Authorization: Bearer …``; anything else gets 401.
- It never shares an origin with share links: binding the host and port of ``assets_url`` is refused,
  so a published HTML file can never script the dashboard.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["COOKIE", "AccessPolicy", "TokenGate", "check_origin", "is_loopback"]

COOKIE = "computer_dashboard"


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is a loopback address."""
    name = host.strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_origin(host: str, port: int, assets_url: str) -> None:
    """``ValueError`` when ``host:port`` is the share links' origin (``assets_url``)."""
    link = urlsplit(assets_url)
    link_port = link.port or (443 if link.scheme == "https" else 80)
    same_host = (link.hostname or "") == host.strip("[]").lower() or (
        is_loopback(host) and is_loopback(link.hostname or "")
    )
    if same_host and link_port == port:
        raise ValueError(
            f"the dashboard must not share an origin with share links ({assets_url}): choose another port"
        )


@dataclass(frozen=True)
class AccessPolicy:
    """What :class:`TokenGate` enforces for a dashboard bound to ``host``."""

    host: str
    token: str | None

    @classmethod
    def for_bind(cls, host: str, token: str | None) -> AccessPolicy:
        """Loopback: the token given, if any; any other address: the token given or a new one."""
        if not token and not is_loopback(host):
            token = secrets.token_urlsafe(24)
        return cls(host, token or None)

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    def allows(self, request: Request) -> bool:
        if self.loopback and not self.token:
            return is_loopback(request.url.hostname or "")
        if self.token is None:
            return False
        given = request.query_params.get("token") or request.cookies.get(COOKIE)
        auth = request.headers.get("authorization", "")
        if not given and auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        # As bytes: ``compare_digest`` raises TypeError for a str with non-ASCII characters, so
        # ``?token=%C3%A9`` was a 500 with a traceback for anyone who could reach the port.
        return bool(given) and hmac.compare_digest(
            str(given).encode("utf-8", "surrogateescape"), self.token.encode("utf-8", "surrogateescape")
        )


class TokenGate:
    """ASGI middleware applying an :class:`AccessPolicy` to every HTTP request."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        if not self.policy.allows(request):
            response: Response = PlainTextResponse(
                "401: this dashboard needs its token (open the address `computer dashboard` printed)\n",
                status_code=401,
                headers={"Cache-Control": "no-store", "WWW-Authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        if self.policy.token and request.query_params.get("token"):
            # Remember the token for the pages and event streams that follow (never in a URL again).
            async def send_with_cookie(message: MutableMapping[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    headers = list(message.get("headers", []))
                    cookie = f"{COOKIE}={self.policy.token}; Path=/; HttpOnly; SameSite=Strict"
                    headers.append((b"set-cookie", cookie.encode()))
                    message = {**message, "headers": headers}
                await send(message)

            await self.app(scope, receive, send_with_cookie)
            return
        await self.app(scope, receive, send)
