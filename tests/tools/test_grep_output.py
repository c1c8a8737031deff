"""grep's answer stays readable when the matching lines are huge (minified code, one-line JSON, logs).

Each match's line used to come back whole: one match in a 2 MB minified bundle was 2 MB of model
output, 900 matches of 5 KB lines 6.5 MB, far past any model's context. A long line is now cut around
its first match, and a page stops at the output budget with a nextOffset that continues it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from computer import Workspace
from computer.tools import Tool, create_tools
from computer.tools.grep import MAX_LINE_CHARS, OUTPUT_BUDGET

from .conftest import put

MARKER = "... (truncated)"


def model_text(tools: dict[str, Tool], result: dict[str, object]) -> str:
    (part,) = tools["grep"].to_model_output(result)
    return str(part["text"])


async def test_a_match_in_a_huge_line_is_cut_around_the_match(
    workspace: Workspace, tools: dict[str, Tool]
) -> None:
    line = "var a=1;" * 250_000 + "needle(42)" + ";x=2" * 1000
    await put(workspace, "/workspace/dist/app.min.js", line + "\nshort needle line\n")
    for args in (
        {"query": "needle"},
        {"query": "NEEDLE", "ignoreCase": True},
        {"query": r"ne+dle(\(\d+\))?", "regex": True},
    ):
        result = await tools["grep"].run(args)
        long, short = result["matches"]
        assert "needle(42)" in long["text"] and len(long["text"]) <= MAX_LINE_CHARS + 2 * len(MARKER)
        assert long["text"].startswith("...") and long["text"].endswith(MARKER)
        assert short["text"] == "short needle line"  # short lines are whole
        assert len(model_text(tools, result)) < 4 * MAX_LINE_CHARS
    # A match at the start keeps the line's beginning.
    await put(workspace, "/workspace/one.json", '{"needle": 1, ' + '"k": 0, ' * 100_000 + "}\n")
    (match,) = (await tools["grep"].run({"query": "needle", "include": "*.json"}))["matches"]
    assert match["text"].startswith('{"needle": 1,') and match["text"].endswith(MARKER)


async def test_long_context_lines_are_cut_too(workspace: Workspace, tools: dict[str, Tool]) -> None:
    await put(workspace, "/workspace/ctx.txt", "x" * 50_000 + "\nneedle\n" + "y" * 50_000 + "\n")
    (match,) = (await tools["grep"].run({"query": "needle", "context": 1}))["matches"]
    before, hit, after = match["context"]
    assert hit == {"line": 2, "text": "needle", "isMatch": True}
    for line in (before, after):
        assert len(line["text"]) <= MAX_LINE_CHARS + len(MARKER) and line["text"].endswith(MARKER)


async def test_a_page_stops_at_the_output_budget_and_the_next_pages_hold_the_rest(
    workspace: Workspace, tools: dict[str, Tool]
) -> None:
    for i in range(300):
        await put(workspace, f"/workspace/f{i:03}.txt", ("needle " + "y" * 5000 + "\n") * 3)
    seen: list[tuple[str, int]] = []
    offset: int | None = 0
    pages = 0
    while offset is not None:
        result = await tools["grep"].run({"query": "needle", "limit": 1000, "offset": offset, "context": 2})
        text = model_text(tools, result)
        assert len(text.encode()) <= OUTPUT_BUDGET + 4 * MAX_LINE_CHARS * 5
        assert result["count"] == len(result["matches"]) >= 1
        seen += [(m["path"], m["line"]) for m in result["matches"]]
        offset = result.get("nextOffset")
        assert offset is None or offset == len(seen)
        pages += 1
        assert pages < 100
    assert pages > 1
    assert seen == [(f"/workspace/f{i:03}.txt", line) for i in range(300) for line in (1, 2, 3)]
    json.loads(text)  # the model output of a page is still one JSON document


@pytest.mark.parametrize("include", ["", "./", "/workspace/", [""], ["", "./"]])
async def test_an_empty_include_filters_nothing(workspace: Workspace, include: Any) -> None:
    """``include: ""`` (a model's value for an optional string it leaves unset) matched no file: an
    empty result, where find's empty pattern matches everything."""
    await put(workspace, "/workspace/a.py", "needle\n")
    await put(workspace, "/workspace/sub/b.txt", "needle\n")
    result = await create_tools(workspace)["grep"].run({"query": "needle", "include": include})
    assert [m["path"] for m in result["matches"]] == ["/workspace/a.py", "/workspace/sub/b.txt"], result
