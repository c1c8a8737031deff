"""``computer demo``: run the many-agents demo and print its summary."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING

from rich.console import Console

from ._context import CliError, GlobalOptions, check_reachable, join_bounded, prepare_data_dir

if TYPE_CHECKING:
    from ..demo import DemoSummary

__all__ = ["run_demo_command"]


def run_demo_command(
    options: GlobalOptions, *, agents: int, model: str | None, hibernate_after: float, console: Console
) -> int:
    """0 when every agent finished green and the persistence check passed, else 1."""
    from ..demo import DemoError, ModelError, OpenAIChatModel, print_summary, run_demo

    if model and not (os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")):
        raise CliError(
            "--model needs an OpenAI-compatible endpoint: set OPENAI_API_KEY (and OPENAI_BASE_URL for "
            "another provider or a local server); without --model the demo uses its scripted model",
            code=2,
        )
    if not options.local:
        address = options.address or os.environ.get("RAY_ADDRESS")
        check_reachable(address, alone="the demo then starts a Ray of its own")
        from ..actors import ensure_ray

        # Joined here, bounded (``join_bounded``); ``computer.init`` then finds Ray connected.
        join_bounded(address, lambda: ensure_ray(options.address))
    from ..config import Settings

    Settings()  # a bad COMPUTER_* value fails here, as a usage error, not as "Ray did not start"
    if options.data_dir is not None:  # before Ray starts: it is not Ray's failure (nor retried)
        prepare_data_dir(options.data_dir.expanduser())

    async def demo() -> DemoSummary:
        chat = OpenAIChatModel(model) if model else None
        try:
            return await run_demo(
                agents=agents,
                address=options.address,
                data_dir=options.data_dir,
                model=chat,
                hibernate_after=hibernate_after,
                console=console,
            )
        except (SystemExit, BrokenPipeError):
            # stdout is a closed pipe (`computer demo | head`): the command ends, exit 141
            # (``_output.closed_pipe``). The demo's dashboard server may still run: asyncio.run cancels it, and
            # uvicorn logs that cancellation as an error with three tracebacks. Nobody reads on.
            logging.getLogger("uvicorn.error").disabled = True
            raise

    since = time.time()
    try:
        summary = asyncio.run(demo())
    except (DemoError, ModelError) as exc:
        raise CliError(str(exc)) from None
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()  # a Ray started here stops with it; a joined cluster is only left
        if options.local:
            from ..runtime import reap_settled

            # The Ray workers of a Ray started here exit after the shutdown without their exit
            # handlers: their scratch directories would stay in the temp directory until the next
            # process reaps them.
            reap_settled(since)
    print_summary(summary, console)
    return 0 if summary.ok else 1
