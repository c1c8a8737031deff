"""The ``edit`` tool: atomic batches of targeted replacements, returning a unified patch.

Matching (exact, then fuzzy) is in ``_edit_match``; this module adds the file round trip under the
path lock: stat, read, splice, write with the old mode, all while no other write can land.

The CPU-heavy steps (matching and splicing, then the diff) run in a worker thread (``asyncio.to_thread``)
once the file or the edits pass ``THREAD_BYTES``, so a large edit never stalls the event loop that serves
other tools and workspaces; small edits stay inline, where a thread hop would cost more than the work.
The diff itself is work-bounded (``_diff``), so one call finishes in bounded time whatever the file holds.
"""

from __future__ import annotations

import asyncio
import errno
import json
import posixpath
from typing import Any, ClassVar

from pydantic import Field, model_validator

from ..storage.errors import fs_error
from ..storage.paths import canonical
from ._diff import CONTEXT_LINES, FileDiff, diff_texts
from ._edit_match import Edit, EditOutcome, apply_edits, check_edits
from ._input import ToolInput, utf8_of
from ._locks import PathLocks
from ._normal_forms import other_form
from ._options import EditOptions, coerce_options
from ._sizes import human_bytes
from ._tool import Tool, ToolUpdate
from .file_store import FileStore, FileStoreStat

__all__ = ["THREAD_BYTES", "EditInput", "EditItem", "create_edit_tool"]

THREAD_BYTES = 64 * 1024  # file + edit text size from which matching and diffing leave the event loop
# Edits x file bytes one call may search (each edit is found with whole-file searches, under the path
# lock): 10,000 edits of a 110 KB file fit (~2 s), 4,000 of a 1.7 MB file (18 s) do not.
EDIT_SCAN_BUDGET = 1_200_000_000
# Times an edit is computed again when its file changed meanwhile (a live sandbox's pull) before it fails.
EDIT_ATTEMPTS = 5

EDIT_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "editsApplied": {"type": "integer"},
        "diff": {"type": "string"},
        "patch": {"type": "string"},
        "firstChangedLine": {"type": ["integer", "null"]},
        "diffTruncated": {"type": "boolean"},
        "error": {"type": "string"},
    },
}


class EditItem(ToolInput):
    old_text: str = Field(
        description="Text to replace, copied exactly from the file (whitespace and indentation included). "
        "It must occur exactly once in the original content."
    )
    new_text: str = Field(description="The text that replaces oldText.")


class EditInput(ToolInput):
    extra_argument_names: ClassVar[tuple[str, ...]] = ("oldText", "newText", "old_text", "new_text")

    path: str = Field(description="Absolute path of the file to edit.")
    edits: list[EditItem] = Field(
        description="Replacements applied together, atomically. Each edit batch applies against the "
        "original content: every oldText is matched in the file as it was before this call, not after "
        "earlier edits of the batch, and the edits must not overlap."
    )

    @model_validator(mode="before")
    @classmethod
    def _accept_shorthands(cls, data: Any) -> Any:
        """``edits`` sent as a JSON string is parsed; top-level ``oldText``/``newText`` is one edit."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        edits = data.get("edits")
        if isinstance(edits, str):
            try:
                data["edits"] = edits = json.loads(edits)
            except ValueError as exc:
                raise ValueError(f"edits is a string but not valid JSON: {exc}") from exc
        old = data.pop("oldText", data.pop("old_text", None))
        new = data.pop("newText", data.pop("new_text", None))
        if old is not None or new is not None:
            single = {"oldText": old, "newText": new}  # a missing half is reported by validation
            if edits is None:
                data["edits"] = [single]
            elif isinstance(edits, list):
                data["edits"] = [*edits, single]
        return data


def _viewable(text: str) -> str:
    """Undecodable bytes (kept as surrogates for a byte-exact write) shown as U+FFFD in diffs."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return text


def _splice(data: bytes, edits: list[Edit], path: str) -> tuple[EditOutcome, bytes]:
    outcome = apply_edits(data.decode("utf-8", "surrogateescape"), edits, path)
    return outcome, utf8_of(outcome.content, "the edited text", path, "surrogateescape")


def _diff(outcome: EditOutcome, path: str) -> FileDiff:
    old_view, new_view = _viewable(outcome.old_view), _viewable(outcome.new_view)
    # Replacement characters keep lengths, so the changed region still holds after _viewable.
    return diff_texts(old_view, new_view, path, changed=outcome.changed)


def create_edit_tool(store: FileStore, **edit_options: Any) -> Tool:
    """The ``edit`` tool over ``store``; keyword options are :class:`EditOptions` fields."""
    options = coerce_options(EditOptions, edit_options.pop("options", None), **edit_options)
    locks = PathLocks(store)
    cap = human_bytes(options.max_bytes)

    def over_cap(path: str, size: int, what: str) -> ValueError:
        return ValueError(
            f"{path} {what} {size} bytes, over the {cap} edit cap. Use write to replace the whole file, "
            "or exec for large mechanical changes."
        )

    async def not_found(path: str) -> OSError:
        """ENOENT for ``path``, naming its spelling in another Unicode normal form when one exists."""
        other = await other_form(store, path)
        if other is not None:
            return fs_error(errno.ENOENT, path, f"File not found; {other}")
        # A file where a directory of the path belongs: write would fail too, so do not suggest it.
        parent = posixpath.dirname(path)
        while parent not in ("/", ""):
            above = await store.stat(parent)
            if above is not None:
                if not above.is_directory:
                    return fs_error(errno.ENOTDIR, path, f"Not a directory: {parent} is a file")
                break
            parent = posixpath.dirname(parent)
        return fs_error(errno.ENOENT, path, "File not found (use write to create it)")

    async def computed(path: str, edits: list[Edit]) -> tuple[FileStoreStat, EditOutcome, bytes, bool]:
        """The file's stat as read, the edits' outcome on its content, the new bytes, whether heavy."""
        stat = await store.stat(path)
        if stat is None:
            raise await not_found(path)
        if stat.is_directory:
            raise fs_error(errno.EISDIR, path)
        if stat.size > options.max_bytes:
            raise over_cap(path, stat.size, "is")
        data = await store.read_all(path)
        if data is None:
            raise await not_found(path)
        if len(data) > options.max_bytes:
            raise over_cap(path, len(data), "is")
        if len(edits) * len(data) > EDIT_SCAN_BUDGET:  # each edit is searched in the whole file
            most = max(1, EDIT_SCAN_BUDGET // max(1, len(data)))
            raise ValueError(
                f"{len(edits)} edits of a {len(data)}-byte file are over what one call may search "
                f"(edits x file bytes <= {EDIT_SCAN_BUDGET:,}): send at most {most} edits per call "
                "for this file, or use write to replace the whole file."
            )
        heavy = len(data) + sum(len(e.old_text) + len(e.new_text) for e in edits) >= THREAD_BYTES
        if heavy:
            outcome, new_data = await asyncio.to_thread(_splice, data, edits, path)
        else:
            outcome, new_data = _splice(data, edits, path)
        if len(new_data) > options.max_bytes:
            raise over_cap(path, len(new_data), "would become")
        return stat, outcome, new_data, heavy

    async def handler(params: EditInput, on_update: ToolUpdate | None) -> dict[str, Any]:
        path = canonical(params.path)
        edits = [Edit(item.old_text, item.new_text) for item in params.edits]
        check_edits(edits)
        if len(edits) > options.max_edits:
            raise ValueError(
                f"edits has {len(edits)} items, over the cap of {options.max_edits} edits per call "
                "(max_edits). Split them over several edit calls, or use write to replace the whole file."
            )
        for index, edit in enumerate(edits):
            # Only the file's own undecodable bytes go back through surrogateescape: a lone surrogate
            # sent in newText would otherwise be written as a raw byte (invalid UTF-8), as write refuses.
            utf8_of(edit.new_text, f"edits[{index}].newText", path)
        async with locks.hold([path]):
            for _ in range(EDIT_ATTEMPTS):
                stat, outcome, new_data, heavy = await computed(path, edits)
                # Only tool writes take the path lock: a live sandbox's pull (a background program's
                # change) may land while the splice ran in a thread (or over a client's round trips).
                # Writing then dropped that change unreported: the splice is made again on it instead.
                if await store.stat(path) == stat:
                    break
            else:
                raise fs_error(
                    errno.EAGAIN,
                    path,
                    f"{path} changed {EDIT_ATTEMPTS} times while the edit was computed (a program "
                    "writing it?): nothing was written; read it again and retry",
                )
            await store.write(path, new_data, mode=stat.mode)
        diff = await asyncio.to_thread(_diff, outcome, path) if heavy else _diff(outcome, path)
        result: dict[str, Any] = {
            "path": path,
            "editsApplied": outcome.applied,
            "diff": diff.diff,
            "patch": diff.patch,
            "firstChangedLine": diff.first_changed_line,
        }
        if diff.truncated:
            result["diffTruncated"] = True
        return result

    return Tool(
        name="edit",
        description=(
            "Edit a file with targeted replacements: each {oldText, newText} replaces text that occurs "
            "exactly once in the file. Each edit batch applies against the original content, so list every "
            "change of one call as if the others had not been made, and keep them non-overlapping. The batch "
            "is atomic: if any oldText is missing, ambiguous or overlapping, nothing changes. Copy oldText "
            "exactly from a recent read; minor differences in quotes, dashes, spaces or trailing whitespace "
            "are tolerated. Returns a unified diff "
            f"({CONTEXT_LINES} lines of context) and firstChangedLine. Files up to {cap}; at most "
            f"{options.max_edits} edits per call, fewer for a large file."
        ),
        input_model=EditInput,
        handler=handler,
        mutating=True,
        destructive=True,
        output_schema=EDIT_OUTPUT_SCHEMA,
    )
