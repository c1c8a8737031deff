"""The ``publish`` tool: share a workspace file as an expiring link through ``workspace.assets``."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import Field

from ._input import Number, ToolInput
from ._tool import Tool, ToolUpdate

__all__ = ["PUBLISH_OUTPUT_SCHEMA", "PublishInput", "create_publish_tool"]

log = logging.getLogger(__name__)

DEFAULT_EXPIRES_AFTER_MS = 3_600_000
MAX_EXPIRES_AFTER_MS = 7 * 24 * 3_600_000

# Success, an operational failure, and a bad call (``Tool.run``'s ``{"error"}``) all validate.
PUBLISH_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean", "description": "Whether the file was published."},
        "url": {"type": "string", "description": "The link (present when ok is true)."},
        "error": {"type": "string", "description": "Why publishing failed."},
    },
    "anyOf": [{"required": ["ok", "url"]}, {"required": ["ok", "error"]}, {"required": ["error"]}],
}

DESCRIPTION = (
    "Publish a workspace file as a link anyone with the URL can open, for example to hand a generated "
    "report, image or archive to the user. The link serves the file's bytes as they are now (later "
    "changes are not reflected) and expires after expiresAfterMs milliseconds: default one hour, at most "
    "7 days (longer values are capped). Only the file's bytes and its name are shared: the URL contains "
    "an unguessable id and the file name, never the directory path. Returns {ok: true, url} or "
    "{ok: false, error}."
)


class PublishInput(ToolInput):
    path: str = Field(description="Absolute path of the file to publish.")
    expires_after_ms: Number | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,  # Infinity was refused by the share, naming expires_after in seconds
        description=(
            f"Lifetime of the link in milliseconds (default {DEFAULT_EXPIRES_AFTER_MS}, one hour; "
            f"at most {MAX_EXPIRES_AFTER_MS}, 7 days; rounded up to whole seconds)."
        ),
    )


def create_publish_tool(workspace: Any) -> Tool:
    """The ``publish`` tool over ``workspace.assets`` (``ValueError`` when the workspace has none)."""
    if getattr(workspace, "assets", None) is None:
        raise ValueError(
            "the workspace has no assets publisher: create it with assets=True or an asset store"
        )

    async def handler(params: PublishInput, on_update: ToolUpdate | None) -> dict[str, Any]:
        assets = workspace.assets
        if assets is None:
            return {"ok": False, "error": "publishing is not configured for this workspace"}
        ms = DEFAULT_EXPIRES_AFTER_MS if params.expires_after_ms is None else params.expires_after_ms
        try:
            url = await assets.share(params.path, expires_after=ms / 1000)
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            return {"ok": False, "error": f"{reason}: {exc.filename}" if exc.filename else reason}
        except ValueError as exc:
            return {"ok": False, "error": str(exc) or "invalid request"}
        except Exception as exc:
            # A failing store (Redis down, disk full) is an operational failure the agent can report.
            log.exception("publish of %s failed", params.path)
            return {"ok": False, "error": f"publish failed: {type(exc).__name__}: {exc}"}
        return {"ok": True, "url": str(url)}

    return Tool(
        name="publish",
        description=DESCRIPTION,
        input_model=PublishInput,
        handler=handler,
        mutating=True,
        destructive=False,
        output_schema=PUBLISH_OUTPUT_SCHEMA,
    )
