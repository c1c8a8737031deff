"""``computer dashboard``: the read-only dashboard in a browser.

No cluster named: the embedded view of the data directory (workspaces, timelines, files, journals,
links), read from the files without Ray. With ``--address``/``RAY_ADDRESS``: the same, plus the
cluster view and the live output of runs of awake workspaces (through that cluster; nothing asleep
is woken). Loopback by default; any other ``--host`` needs a token (``--token``, or
``COMPUTER_DASHBOARD_TOKEN``, else one is made and printed in the address).
"""

from __future__ import annotations

import asyncio
import os

from rich.console import Console

from ._context import CliError, GlobalOptions, check_listen, local_settings, ray_session

__all__ = ["run_dashboard"]


def run_dashboard(options: GlobalOptions, host: str, port: int, token: str | None, console: Console) -> None:
    from ..dashboard import AccessPolicy, check_origin, dashboard_url

    config = local_settings(options)
    token = token or os.environ.get("COMPUTER_DASHBOARD_TOKEN") or None
    try:
        check_origin(host, port, config.assets_url)
    except ValueError as exc:
        raise CliError(str(exc), code=2) from None
    check_listen(host, port)
    policy = AccessPolicy.for_bind(host, token)
    mode = "embedded (data directory)" if options.local else "cluster"
    console.print(f"dashboard ({mode}, read-only): {dashboard_url(host, port, policy)}", soft_wrap=True)
    console.print(f"data directory: {config.data_dir}; Ctrl-C stops", soft_wrap=True)
    asyncio.run(_serve(options, host, port, policy.token))


async def _serve(options: GlobalOptions, host: str, port: int, token: str | None) -> None:
    from ..dashboard import ClusterSource, DataDirSource, serve_dashboard

    if options.local:
        config = local_settings(options)
        await serve_dashboard(DataDirSource(config), host, port, token=token, assets_url=config.assets_url)
        return
    async with ray_session(options) as config:
        await serve_dashboard(ClusterSource(config), host, port, token=token, assets_url=config.assets_url)
