"""Running the dashboard: checks of the bind (share-link origin, token), then uvicorn."""

from __future__ import annotations

from urllib.parse import quote

from ._access import AccessPolicy, check_origin
from ._app import create_app
from ._source import DataDirSource

__all__ = ["dashboard_url", "serve_dashboard"]


def dashboard_url(host: str, port: int, policy: AccessPolicy) -> str:
    """The address to open (with the token when one is needed)."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    url = f"http://{shown}:{port}/"
    return f"{url}?token={quote(policy.token)}" if policy.token else url


async def serve_dashboard(
    source: DataDirSource,
    host: str,
    port: int,
    *,
    token: str | None = None,
    assets_url: str,
    head_timeout: float | None = None,
) -> None:
    """Serve until cancelled. ``ValueError`` when ``host:port`` is the share links' origin.

    A connection whose request head is not whole ``head_timeout`` seconds (default: the share-link
    server's, 15) after the server began waiting for it is closed, as the share-link server does
    (``computer.assets.HeadDeadline``): a dashboard bound beyond loopback (with its token) is reachable
    by anyone, and a client trickling a head held its socket for good."""
    import uvicorn

    from ..assets import HEAD_TIMEOUT, head_deadline

    check_origin(host, port, assets_url)
    policy = AccessPolicy.for_bind(host, token)
    app = create_app(source, policy)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        http=head_deadline(HEAD_TIMEOUT if head_timeout is None else head_timeout),
    )
    await uvicorn.Server(config).serve()
