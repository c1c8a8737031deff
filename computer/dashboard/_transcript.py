"""An agent's transcript kept in its workspace, for the dashboard to show.

A program driving an agent may keep the conversation (the model's messages and its tool calls, in
the OpenAI chat format: ``role``, ``content``, ``tool_calls``, ``tool_call_id``) as one JSON list in
:data:`TRANSCRIPT_PATH` of the agent's workspace, rewritten as it goes; ``computer demo`` does. The
path is outside ``/workspace``, so programs run by exec never see it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ..surface import FileSystemSurface, WorkspaceSurface

__all__ = ["TRANSCRIPT_PATH", "keep_transcript", "read_transcript"]

log = logging.getLogger(__name__)

TRANSCRIPT_PATH = "/.computer/transcript.json"


async def keep_transcript(workspace: WorkspaceSurface, messages: list[dict[str, Any]]) -> None:
    """Write ``messages`` as the workspace's transcript (one write; a failure is logged, never raised)."""
    try:
        data = json.dumps(messages, ensure_ascii=False, default=str).encode()
        try:
            await workspace.fs.write_file(TRANSCRIPT_PATH, data)
        except FileNotFoundError:  # the first one: its directory is made then
            await workspace.fs.mkdir(TRANSCRIPT_PATH.rsplit("/", 1)[0], recursive=True)
            await workspace.fs.write_file(TRANSCRIPT_PATH, data)
    except Exception as exc:
        log.warning("keeping the transcript failed: %r", exc)


async def read_transcript(fs: FileSystemSurface) -> list[dict[str, Any]] | None:
    """The transcript of a workspace (``None`` when it keeps none)."""
    try:
        messages = json.loads(await fs.read_file(TRANSCRIPT_PATH))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return []
    return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
