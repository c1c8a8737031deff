"""ls, find and grep over a workspace (SPEC 8, CASES 21-24): paging, defaults, shapes, errors."""

from __future__ import annotations

import json

import pytest

from computer import Workspace
from computer.tools import Tool, create_tools
from computer.tools.grep import OUTPUT_BUDGET

from .conftest import put


async def test_ls_shows_one_entry_with_metadata(workspace: Workspace, tools: dict[str, Tool]) -> None:
    await tools["write"].run({"path": "/workspace/notes/todo.txt", "content": "one\ntwo\n"})
    result = await tools["ls"].run({"path": "/workspace/notes"})
    assert result["path"] == "/workspace/notes" and result["count"] == 1
    (entry,) = result["entries"]
    assert entry["name"] == "todo.txt" and entry["size"] == 8
    assert (entry["isFile"], entry["isDirectory"], entry["isSymbolicLink"]) == (True, False, False)
    assert isinstance(entry["mtime"], int) and entry["mtime"] > 0
    assert "nextOffset" not in result


async def test_ls_pages_in_name_order_with_next_offset(workspace: Workspace, tools: dict[str, Tool]) -> None:
    for name in "dcba":
        await put(workspace, f"/d/{name}", name)
    first = await tools["ls"].run({"path": "/d", "limit": 2})
    assert [e["name"] for e in first["entries"]] == ["a", "b"]
    assert first["nextOffset"] == 2
    second = await tools["ls"].run({"path": "/d", "limit": 2, "offset": first["nextOffset"]})
    assert [e["name"] for e in second["entries"]] == ["c", "d"]
    assert "nextOffset" not in second


async def test_ls_marks_directories_and_symlinks(workspace: Workspace, tools: dict[str, Tool]) -> None:
    await put(workspace, "/d/sub/x", "x")
    await put(workspace, "/d/target", "t")
    await workspace.fs.symlink("/d/target", "/d/link")
    entries = {e["name"]: e for e in (await tools["ls"].run({"path": "/d"}))["entries"]}
    assert entries["sub"]["isDirectory"] is True
    assert entries["link"]["isSymbolicLink"] is True


async def test_ls_on_a_file_or_missing_path_is_an_error(workspace: Workspace, tools: dict[str, Tool]) -> None:
    await put(workspace, "/f", "x")
    assert "error" in await tools["ls"].run({"path": "/f"})
    assert "/missing" in (await tools["ls"].run({"path": "/missing"}))["error"]


@pytest.mark.parametrize("limit", [0, 1001, -1])
async def test_listing_limits_outside_1_to_1000_are_rejected(tools: dict[str, Tool], limit: int) -> None:
    for name, args in (("ls", {"path": "/"}), ("find", {"pattern": ""}), ("grep", {"query": "x"})):
        result = await tools[name].run({**args, "limit": limit})
        assert "limit" in result["error"]


async def test_find_defaults_to_workspace_and_pages(workspace: Workspace, tools: dict[str, Tool]) -> None:
    for path in ("/workspace/a/1.ts", "/workspace/a/b/2.ts", "/workspace/a/b/3.ts", "/workspace/a/z.ts"):
        await put(workspace, path, "x")
    await put(workspace, "/elsewhere/4.ts", "x")
    result = await tools["find"].run({"pattern": "**/*.ts", "offset": 1, "limit": 2})
    assert result["path"] == "/workspace" and result["pattern"] == "**/*.ts"
    assert result["entries"] == [
        {"path": "/workspace/a/b/2.ts", "type": "file"},
        {"path": "/workspace/a/b/3.ts", "type": "file"},
    ]
    assert result["count"] == 2 and result["nextOffset"] == 3
    last = await tools["find"].run({"pattern": "**/*.ts", "offset": 3, "limit": 2})
    assert [e["path"] for e in last["entries"]] == ["/workspace/a/z.ts"]
    assert "nextOffset" not in last


async def test_find_exclude_prunes_and_accepts_a_single_glob(
    workspace: Workspace, tools: dict[str, Tool]
) -> None:
    await put(workspace, "/p/node_modules/m/i.js", "x")
    await put(workspace, "/p/node_modules_extra/i.js", "x")
    await put(workspace, "/p/src/i.js", "x")
    result = await tools["find"].run(
        {"path": "/p", "pattern": "**/*.js", "exclude": ["node_modules", "node_modules/**"]}
    )
    assert [e["path"] for e in result["entries"]] == ["/p/node_modules_extra/i.js", "/p/src/i.js"]
    single = await tools["find"].run({"path": "/p", "pattern": "**/*.js", "exclude": "src/**"})
    assert "/p/src/i.js" not in [e["path"] for e in single["entries"]]


async def test_find_missing_directory_is_an_error(tools: dict[str, Tool]) -> None:
    assert "error" in await tools["find"].run({"path": "/nowhere", "pattern": "*"})


async def test_grep_defaults_literal_case_sensitive_under_workspace(
    workspace: Workspace, tools: dict[str, Tool]
) -> None:
    await put(workspace, "/workspace/t.txt", "task \\d+\ntask 12\nTASK 7\n")
    await put(workspace, "/other/t.txt", "task \\d+\n")
    literal = await tools["grep"].run({"query": "task \\d+"})
    assert literal["path"] == "/workspace" and literal["query"] == "task \\d+"
    assert literal["matches"] == [{"path": "/workspace/t.txt", "line": 1, "text": "task \\d+"}]
    regex = await tools["grep"].run({"query": "task \\d+", "regex": True})
    assert [m["line"] for m in regex["matches"]] == [2]
    both = await tools["grep"].run({"query": "task \\d+", "regex": True, "ignoreCase": True})
    assert [m["line"] for m in both["matches"]] == [2, 3]


async def test_grep_invalid_regex_is_a_structured_error(workspace: Workspace, tools: dict[str, Tool]) -> None:
    await put(workspace, "/workspace/t.txt", "x\n")
    result = await tools["grep"].run({"query": "[", "regex": True})
    assert "Invalid regular expression" in result["error"]


@pytest.mark.parametrize(
    ("query", "reason"),
    [("foo(", "missing ): foo("), ("a{2,1}", "invalid repetition size: {2,1}"), ("é(", "missing ): é(")],
)
async def test_grep_invalid_regex_reads_as_text_and_re2_writes_nothing_to_stderr(
    workspace: Workspace, tools: dict[str, Tool], capfd: pytest.CaptureFixture[str], query: str, reason: str
) -> None:
    await put(workspace, "/workspace/t.txt", "x\n")
    capfd.readouterr()
    result = await tools["grep"].run({"query": query, "regex": True})
    assert result["error"] == f"Invalid regular expression (RE2 syntax): {reason}: /workspace"
    assert "b'" not in result["error"]
    # RE2 logs through absl to file descriptor 2 unless told not to.
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("query", ["(?<=def )name", "(?!x)y", r"(a)\1", "a++", "(?>ab)"])
async def test_grep_of_a_construct_re2_lacks_says_what_to_do(
    workspace: Workspace, tools: dict[str, Tool], query: str
) -> None:
    """Lookaround, backreferences, atomic groups and possessive repeats are RE2's by design, not a
    typo: the error said only "invalid perl operator: (?<=", and a model tried variants of the same."""
    await put(workspace, "/workspace/t.txt", "def name\n")
    error = (await tools["grep"].run({"query": query, "regex": True}))["error"]
    assert error.startswith("Invalid regular expression (RE2 syntax): "), error
    assert "has no lookaround, backreferences" in error and "grep -P through exec" in error, error
    # A typo in a construct RE2 has gets its reason alone.
    typo = (await tools["grep"].run({"query": "(?P<n>a", "regex": True}))["error"]
    assert "lookaround" not in typo, typo


async def test_grep_context_lines_carry_is_match(workspace: Workspace, tools: dict[str, Tool]) -> None:
    await put(workspace, "/workspace/t.txt", "a\nhit1\nhit2\nb\n")
    result = await tools["grep"].run({"query": "hit", "context": 1})
    first, second = result["matches"]
    assert first["context"] == [
        {"line": 1, "text": "a", "isMatch": False},
        {"line": 2, "text": "hit1", "isMatch": True},
        {"line": 3, "text": "hit2", "isMatch": True},
    ]
    assert second["context"][-1] == {"line": 4, "text": "b", "isMatch": False}


async def test_grep_without_context_has_no_context_key(workspace: Workspace, tools: dict[str, Tool]) -> None:
    await put(workspace, "/workspace/t.txt", "hit\n")
    (match,) = (await tools["grep"].run({"query": "hit"}))["matches"]
    assert "context" not in match


async def test_grep_context_over_10_is_rejected(tools: dict[str, Tool]) -> None:
    assert "context" in (await tools["grep"].run({"query": "x", "context": 11}))["error"]


async def test_grep_pages_matching_lines_after_include(workspace: Workspace, tools: dict[str, Tool]) -> None:
    await put(workspace, "/g/a.txt", "x\nx\n")
    await put(workspace, "/g/b.txt", "x\nx\n")
    await put(workspace, "/g/c.ts", "x\n")
    page = await tools["grep"].run({"path": "/g", "query": "x", "offset": 1, "limit": 2})
    assert [(m["path"], m["line"]) for m in page["matches"]] == [("/g/a.txt", 2), ("/g/b.txt", 1)]
    assert page["nextOffset"] == 3
    only_ts = await tools["grep"].run({"path": "/g", "query": "x", "include": "**/*.ts"})
    assert [m["path"] for m in only_ts["matches"]] == ["/g/c.ts"]
    assert "nextOffset" not in only_ts


async def test_grep_skips_binary_files_and_searches_one_file(
    workspace: Workspace, tools: dict[str, Tool]
) -> None:
    await put(workspace, "/g/bin.dat", b"needle\x00\xff\xfe needle")
    await put(workspace, "/g/text.txt", "needle\n")
    result = await tools["grep"].run({"path": "/g", "query": "needle"})
    assert [m["path"] for m in result["matches"]] == ["/g/text.txt"]
    single = await tools["grep"].run({"path": "/g/text.txt", "query": "needle"})
    assert [m["path"] for m in single["matches"]] == ["/g/text.txt"]


async def test_grep_is_prompt_on_a_catastrophic_regex(workspace: Workspace, tools: dict[str, Tool]) -> None:
    await put(workspace, "/workspace/t.txt", "a" * 50 + "b\n")
    result = await tools["grep"].run({"query": "(a+)+$", "regex": True})
    assert result["matches"] == []


UNICODE_NAMES = ["50% off_now.txt", "star*?[x].md", "🚀 launch.txt", "файл данные.txt", "空白 名前.txt"]


async def test_unicode_names_through_ls_find_grep(workspace: Workspace, tools: dict[str, Tool]) -> None:
    for name in UNICODE_NAMES:
        await tools["write"].run({"path": f"/workspace/ü/{name}", "content": f"needle in {name}\n"})
    ls = await tools["ls"].run({"path": "/workspace/ü"})
    assert sorted(e["name"] for e in ls["entries"]) == sorted(UNICODE_NAMES)
    found = await tools["find"].run({"path": "/workspace/ü", "pattern": "*"})
    assert sorted(e["path"] for e in found["entries"]) == sorted(f"/workspace/ü/{n}" for n in UNICODE_NAMES)
    grep = await tools["grep"].run({"path": "/workspace/ü", "query": "needle"})
    assert sorted(m["text"] for m in grep["matches"]) == sorted(f"needle in {n}" for n in UNICODE_NAMES)
    for name in UNICODE_NAMES:
        read = await tools["read"].run({"path": f"/workspace/ü/{name}"})
        assert read["content"] == f"needle in {name}"


@pytest.mark.parametrize(
    "options",
    [{}, {"context": 1}, {"ignoreCase": True}, {"regex": True}, {"path": "/workspace/nl.txt"}],
)
@pytest.mark.parametrize("query", ["hello\nworld", "\n", "foo\n"])
async def test_grep_refuses_a_query_with_a_newline_whatever_the_options(
    workspace: Workspace, tools: dict[str, Tool], options: dict[str, object], query: str
) -> None:
    await put(workspace, "/workspace/nl.txt", "hello\nworld\nfoo\n")
    result = await tools["grep"].run({"query": query, **options})
    assert set(result) == {"error"}
    assert "query contains a newline" in result["error"]
    assert (await tools["grep"].run({"query": "world", **options}))["count"] == 1


async def test_find_types_a_symlink_as_what_it_leads_to_and_a_broken_one_as_file(
    workspace: Workspace,
) -> None:
    """The pinned types are ``file | dir``: a link to a directory is ``dir``; a link to a file, a
    dangling link and a loop are ``file`` (documented in find.py and the tools README)."""
    fs = workspace.fs
    await fs.mkdir("/workspace/d", recursive=True)
    await fs.write_file("/workspace/f", b"x")
    await fs.symlink("/workspace/d", "/workspace/to-dir")
    await fs.symlink("d", "/workspace/to-dir-relative")
    await fs.symlink("/workspace/f", "/workspace/to-file")
    await fs.symlink("/workspace/missing", "/workspace/dangling")
    await fs.symlink("/workspace/self", "/workspace/self")
    await fs.symlink("/workspace/loop-b", "/workspace/loop-a")
    await fs.symlink("/workspace/loop-a", "/workspace/loop-b")
    await fs.symlink("/workspace/d", "/workspace/d/up")  # a link to an ancestor: listed, not entered
    found = await create_tools(workspace)["find"].run({"path": "/workspace", "pattern": "**"})
    assert {e["path"]: e["type"] for e in found["entries"]} == {
        "/workspace/d": "dir",
        "/workspace/d/up": "dir",
        "/workspace/dangling": "file",
        "/workspace/f": "file",
        "/workspace/loop-a": "file",
        "/workspace/loop-b": "file",
        "/workspace/self": "file",
        "/workspace/to-dir": "dir",
        "/workspace/to-dir-relative": "dir",
        "/workspace/to-file": "file",
    }
    assert found["count"] == 10


async def test_a_find_page_of_long_paths_stops_at_the_output_budget_and_the_next_page_continues(
    workspace: Workspace,
) -> None:
    """1000 paths of ~4 KB each were one 4 MB find result; a page now stops past ``OUTPUT_BUDGET``
    (as grep's does), with nextOffset at the first entry left out."""
    fs = workspace.fs
    deep = "/workspace/" + "/".join(f"{i}" + "d" * 250 for i in range(15))
    await fs.mkdir(deep, recursive=True)
    for i in range(300):
        await fs.write_file(f"{deep}/{i:03}", b"")
    tools = create_tools(workspace)
    seen: list[str] = []
    offset: int | None = 0
    pages = 0
    while offset is not None and pages < 50:
        page = await tools["find"].run({"path": deep, "pattern": "*", "limit": 1000, "offset": offset})
        assert len(json.dumps(page).encode()) < OUTPUT_BUDGET + 8192, len(json.dumps(page))
        assert page["count"] == len(page["entries"]) >= 1
        seen += [e["path"] for e in page["entries"]]
        offset = page.get("nextOffset")
        pages += 1
    assert pages > 1
    assert seen == [f"{deep}/{i:03}" for i in range(300)]


async def test_an_ls_page_of_long_names_stops_at_the_output_budget(workspace: Workspace) -> None:
    fs = workspace.fs
    await fs.mkdir("/workspace", recursive=True)
    for i in range(1000):
        await fs.write_file(f"/workspace/{i:04}" + "n" * 250, b"")
    tools = create_tools(workspace)
    page = await tools["ls"].run({"path": "/workspace", "limit": 1000})
    assert len(json.dumps(page).encode()) < OUTPUT_BUDGET + 8192
    assert page["nextOffset"] == page["count"] < 1000
    rest = await tools["ls"].run({"path": "/workspace", "limit": 1000, "offset": page["nextOffset"]})
    names = [e["name"] for e in page["entries"] + rest["entries"]]
    assert names[: page["count"] + rest["count"]] == [f"{i:04}" + "n" * 250 for i in range(len(names))]
