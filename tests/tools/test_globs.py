"""find and grep globs as agents write them: brace alternatives ("**/*.{ts,tsx}", as bash, ripgrep and
most glob tools take them) and absolute globs below the searched directory.

Both used to match nothing (the storage walk takes every other character literally and compares paths
relative to the directory), so an agent was told a project had no TypeScript files.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from computer import Workspace
from computer.tools import Tool, create_tools
from computer.tools._globs import MAX_ALTERNATIVES, expand

from .conftest import put

TREE = [
    "/workspace/a.ts",
    "/workspace/b.tsx",
    "/workspace/c.js",
    "/workspace/src/d.ts",
    "/workspace/src/e.tsx",
    "/workspace/src/deep/f.ts",
    "/workspace/src/Z.md",
    "/workspace/node_modules/m.ts",
    "/workspace/{{tpl}}/g.ts",
    "/workspace/é.ts",
]


def paths(result: dict[str, Any]) -> list[str]:
    assert "error" not in result, result
    return [e["path"] for e in result.get("entries", result.get("matches", []))]


@pytest.fixture
async def tree(workspace: Workspace) -> Workspace:
    for path in TREE:
        await put(workspace, path, "needle\n")
    return workspace


async def test_brace_alternatives_find_every_match_in_walk_order(
    tree: Workspace, tools: dict[str, Tool]
) -> None:
    found = await tools["find"].run(
        {"pattern": "**/*.{ts,tsx}", "exclude": ["{node_modules,node_modules/**}"]}
    )
    assert paths(found) == [
        "/workspace/a.ts",
        "/workspace/b.tsx",
        "/workspace/src/d.ts",
        "/workspace/src/deep/f.ts",
        "/workspace/src/e.tsx",
        "/workspace/{{tpl}}/g.ts",
        "/workspace/é.ts",
    ]
    assert found["pattern"] == "**/*.{ts,tsx}"
    # A brace group without a comma is literal (a template directory's name).
    assert paths(await tools["find"].run({"pattern": "{{tpl}}/*"})) == ["/workspace/{{tpl}}/g.ts"]
    grep = await tools["grep"].run({"query": "needle", "include": "src/*.{tsx,md}"})
    assert paths(grep) == ["/workspace/src/Z.md", "/workspace/src/e.tsx"]


async def test_absolute_globs_below_the_path_match_as_the_relative_ones(
    tree: Workspace, tools: dict[str, Tool]
) -> None:
    await put(tree, "/other/c.ts", "needle\n")
    relative = await tools["find"].run({"pattern": "**/*.ts", "exclude": ["node_modules", "node_modules/**"]})
    absolute = await tools["find"].run(
        {
            "pattern": "/workspace/**/*.ts",
            "exclude": ["/workspace/node_modules", "/workspace/node_modules/**"],
        }
    )
    assert paths(absolute) == paths(relative)
    assert "/workspace/src/d.ts" in paths(absolute) and "/workspace/node_modules/m.ts" not in paths(absolute)
    assert paths(await tools["find"].run({"path": "/", "pattern": "/other/*.ts"})) == ["/other/c.ts"]
    assert paths(await tools["find"].run({"pattern": "/other/*.ts"})) == []  # elsewhere: as before
    for include in ("/workspace/src/deep/**", ["/workspace/src/deep/*.ts", "*.md"]):
        grep = await tools["grep"].run({"query": "needle", "include": include})
        assert paths(grep) == ["/workspace/src/deep/f.ts"]
    pruned = await tools["grep"].run(
        {"query": "needle", "include": "**/*.ts", "exclude": ["/workspace/{node_modules,src,{{tpl}}}/**"]}
    )
    assert paths(pruned) == ["/workspace/a.ts", "/workspace/é.ts"]


async def test_a_leading_dot_slash_or_a_directorys_trailing_slash_is_dropped(
    tree: Workspace, tools: dict[str, Tool]
) -> None:
    # "./node_modules/**" and the .gitignore spelling "node_modules/" pruned nothing; "./src/*.ts" as a
    # grep include found nothing.
    for exclude in (
        ["./node_modules/**", "./{{tpl}}"],
        ["node_modules/", "{{tpl}}/"],
        [".//node_modules", "src/", "{{tpl}}"],
    ):
        found = paths(await tools["find"].run({"pattern": "**/*.ts", "exclude": exclude}))
        grep = paths(await tools["grep"].run({"query": "needle", "include": "**/*.ts", "exclude": exclude}))
        assert "/workspace/node_modules/m.ts" not in found and "/workspace/{{tpl}}/g.ts" not in found
        assert grep == found and "/workspace/a.ts" in found
    assert paths(await tools["grep"].run({"query": "needle", "include": "./src/*.ts"})) == [
        "/workspace/src/d.ts"
    ]
    assert paths(await tools["find"].run({"pattern": "src/deep/"})) == ["/workspace/src/deep"]


async def test_too_many_alternatives_is_an_error(tools: dict[str, Tool]) -> None:
    result = await tools["find"].run({"pattern": "{a,b}" * 7})
    assert f"more than {MAX_ALTERNATIVES} alternatives" in str(result["error"])


NAMES = ["a", "b", "ab", "a.ts", "b.tsx", "Z", "é", "{x}"]
files = st.lists(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map("/".join), max_size=12)
parts = st.sampled_from(["*", "**", "a", "b", "*.ts", "*.tsx", "**/*", "{x}", "é"])
group = st.lists(parts, min_size=2, max_size=3).map(lambda alts: "{" + ",".join(alts) + "}")
patterns = st.lists(parts | group, min_size=1, max_size=3).map("/".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=files, pattern=patterns, limit=st.integers(1, 4))
async def test_a_brace_pattern_is_the_union_of_its_alternatives_in_walk_order_on_every_page(
    tree: list[str], pattern: str, limit: int
) -> None:
    ws = Workspace()
    try:
        await ws.fs.mkdir("/w")
        for rel in tree:
            try:
                await put(ws, f"/w/{rel}", "x")
            except OSError:
                pass  # a name already a file where a directory is wanted
        tools = create_tools(ws)
        walk = paths(await tools["find"].run({"path": "/w", "pattern": "", "limit": 1000}))
        union = set()
        for alternative in expand(pattern):
            union.update(
                paths(await tools["find"].run({"path": "/w", "pattern": alternative, "limit": 1000}))
            )
        expected = [p for p in walk if p in union]
        pages: list[str] = []
        offset: int | None = 0
        while offset is not None:
            page = await tools["find"].run(
                {"path": "/w", "pattern": pattern, "limit": limit, "offset": offset}
            )
            pages += paths(page)
            offset = page.get("nextOffset")
            assert len(pages) <= len(expected)
        assert pages == expected
    finally:
        await ws.close()


async def test_a_name_with_braces_is_still_found_by_its_literal_pattern(
    workspace: Workspace, tools: dict[str, Tool]
) -> None:
    """Braces are literal characters of a name to the walk (SPEC section 4): a file really named
    ``a{b,c}.txt`` is matched by that pattern as written, beside the alternatives it expands to."""
    for path in ("/workspace/a{b,c}.txt", "/workspace/ab.txt", "/workspace/ad.txt"):
        await put(workspace, path, "needle\n")
    found = await tools["find"].run({"pattern": "a{b,c}.txt"})
    assert paths(found) == ["/workspace/ab.txt", "/workspace/a{b,c}.txt"]
    hits = await tools["grep"].run({"query": "needle", "include": "a{b,c}.txt"})
    assert sorted(paths(hits)) == ["/workspace/ab.txt", "/workspace/a{b,c}.txt"]
    pruned = await tools["find"].run({"pattern": "*.txt", "exclude": ["a{b,c}.txt"]})
    assert paths(pruned) == ["/workspace/ad.txt"]


@pytest.mark.timeout(60)
async def test_a_brace_bomb_is_an_error_not_a_hang(tools: dict[str, Tool]) -> None:
    """``{a,a}`` written 40 times is one glob but 2**40 expansions: the walk of every one of them ran
    on the owner's event loop for hours. Counting repeats, it is refused like too many alternatives."""
    result = await tools["find"].run({"pattern": "{a,a}" * 40})
    assert f"more than {MAX_ALTERNATIVES} alternatives" in str(result["error"])
    result = await tools["grep"].run({"query": "x", "include": "{a,a}" * 40})
    assert f"more than {MAX_ALTERNATIVES} alternatives" in str(result["error"])
    assert len(str(result["error"])) < 400  # the glob is named, cut


@pytest.mark.timeout(60)
async def test_unclosed_braces_are_scanned_once(tree: Workspace, tools: dict[str, Tool]) -> None:
    """Each ``{`` was scanned to the end of the glob (quadratic: 8,000 took 13 s, 60,000 minutes,
    on the owner's event loop). Unclosed, they stay literal; an inner group still expands."""
    assert expand("{" * 60_000 + "a,b") == ["{" * 60_000 + "a,b"]
    assert expand("{" * 60_000 + "a,b}") == ["{" * 59_999 + "a", "{" * 59_999 + "b"]
    assert "error" not in await tools["find"].run({"pattern": "{" * 60_000})


async def test_a_pattern_of_thousands_of_double_stars_is_answered(
    tree: Workspace, tools: dict[str, Tool]
) -> None:
    """``**/`` written 2,000 times: RecursionError (``find failed``), now the walk's answer."""
    result = await tools["find"].run({"pattern": "src/" + "**/" * 2000})
    assert "error" not in result
    assert "/workspace/src/deep/f.ts" in paths(result)


@pytest.mark.timeout(120)
async def test_thousands_of_globs_or_one_too_large_is_an_error(
    tree: Workspace, tools: dict[str, Tool]
) -> None:
    """100,000 excludes were deduplicated in a list (quadratic: 20,000 took 4 s on the owner's loop)
    and then matched against every entry of the walk; a glob too large for RE2 raised RE2's own
    error (``find failed: Error: pattern too large``, logged with a traceback), not EINVAL."""
    many = [f"n{i}" for i in range(100_000)]
    found = await tools["find"].run({"pattern": "*", "exclude": many})
    assert "over the 1000 one search takes" in str(found["error"])
    matched = await tools["grep"].run({"query": "needle", "include": many})
    assert "over the 1000 one search takes" in str(matched["error"])
    huge = "*?*?*" + "?" * 1_000_000
    for result in (
        await tools["find"].run({"pattern": huge}),
        await tools["grep"].run({"query": "needle", "exclude": [huge]}),
    ):
        assert str(result["error"]).startswith("the glob is too large to match"), result
    kept = await tools["find"].run({"pattern": "**/*.ts", "exclude": [*many[:900], "node_modules"]})
    assert "/workspace/node_modules/m.ts" not in paths(kept) and len(paths(kept)) == 5


@pytest.mark.parametrize(
    ("tool", "args", "said"),
    [
        ("find", {"pattern": "../**/*.py"}, "has a '..' segment"),
        ("find", {"pattern": "src/../../x"}, "has a '..' segment"),
        ("grep", {"query": "x", "include": ["**/*.py", "../*.py"]}, "has a '..' segment"),
    ],
)
async def test_a_glob_that_cannot_match_below_path_is_an_error_not_an_empty_result(
    workspace: Workspace, tool: str, args: dict[str, Any], said: str
) -> None:
    """A find pattern or grep include whose every alternative has a ``..`` segment matched nothing,
    silently: "no results" for an answer."""
    await workspace.fs.mkdir("/workspace/src", recursive=True)
    await workspace.fs.write_file("/workspace/src/a.py", b"x\n")
    result = await create_tools(workspace)[tool].run(args)
    assert set(result) == {"error"} and said in result["error"], result


async def test_globs_below_path_and_excludes_that_match_nothing_still_work(workspace: Workspace) -> None:
    await workspace.fs.mkdir("/workspace/src", recursive=True)
    await workspace.fs.write_file("/workspace/src/a.py", b"x\n")
    tools = create_tools(workspace)
    found = await tools["find"].run({"pattern": "/workspace/src/*.py", "exclude": ["../*", "/etc/**"]})
    assert [e["path"] for e in found["entries"]] == ["/workspace/src/a.py"], found
    found = await tools["find"].run({"path": "/", "pattern": "/workspace/**/*.py"})
    assert [e["path"] for e in found["entries"]] == ["/workspace/src/a.py"], found
    grep = await tools["grep"].run({"query": "x", "include": "{../*.py,**/*.py}"})
    assert [m["path"] for m in grep["matches"]] == ["/workspace/src/a.py"], grep
