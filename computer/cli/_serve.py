"""``computer serve``: the HTTP server answering share links (no Ray)."""

from __future__ import annotations

from rich.console import Console

from ._context import GlobalOptions, check_listen, local_settings

__all__ = ["serve_assets"]


def serve_assets(options: GlobalOptions, host: str, port: int, console: Console) -> None:
    """Serve the configured asset store until interrupted."""
    from ..assets import serve

    config = local_settings(options)
    check_listen(host, port)
    store = f"Redis {config.redis_url}" if config.redis_url else str(config.assets_dir)
    console.print(
        f"serving share links from {store} on http://{host}:{port} "
        f"(links carry the base URL {config.assets_url}; Ctrl-C stops)",
        soft_wrap=True,
    )
    serve(host, port)
