"""``computer tool NAME TOOL --name value ...``: a tool's arguments given as options (``_flags``),
typed by the tool's schema: text as typed, anything else as JSON; usage errors before anything opens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from computer.cli._context import CliError
from computer.cli._tool import parse_arguments

from .conftest import cli_env, run_cli


def test_an_argument_that_takes_text_gets_the_value_as_typed_even_when_it_looks_like_json() -> None:
    args = parse_arguments("write", ["--path", "/workspace/p.json", "--content", '{"a": 1}'])
    assert args == {"path": "/workspace/p.json", "content": '{"a": 1}'}
    assert parse_arguments("write", ["--path=/w/x", "--content=5"]) == {"path": "/w/x", "content": "5"}
    assert parse_arguments("write", ["--path", "/w/x", "--content", ""]) == {"path": "/w/x", "content": ""}


def test_other_types_are_read_as_json_and_names_take_any_spelling() -> None:
    assert parse_arguments("read", ["--path", "/a", "--limit", "5", "--byte-offset", "0", "--offset=2"]) == {
        "path": "/a", "limit": 5, "byteOffset": 0, "offset": 2,
    }  # fmt: skip
    assert parse_arguments("grep", ["--query", "x", "--ignore_case", "--regex", "false"]) == {
        "query": "x", "ignoreCase": True, "regex": False,
    }  # fmt: skip
    edits = [{"oldText": "a", "newText": "b"}]
    assert parse_arguments("edit", ["--path", "/a", "--edits", json.dumps(edits)])["edits"] == edits
    run = parse_arguments("exec", ["--command", "ls", "--env", '{"A": "1"}', "--timeout", "2.5"])
    assert run == {"command": "ls", "env": {"A": "1"}, "timeout": 2.5}


def test_a_text_or_list_argument_is_a_list_only_when_given_a_json_list() -> None:
    assert (
        parse_arguments("find", ["--pattern", "*", "--exclude", "node_modules"])["exclude"] == "node_modules"
    )
    assert parse_arguments("find", ["--pattern", "*", "--exclude", '["a", "b"]'])["exclude"] == ["a", "b"]
    # exec's input takes any JSON value: JSON when it parses, text otherwise
    assert parse_arguments("exec", ["--command", "x", "--input", "[1, 2]"])["input"] == [1, 2]
    assert parse_arguments("exec", ["--command", "x", "--input", "plain words"])["input"] == "plain words"


def test_options_apply_over_a_json_object_given_first() -> None:
    args = parse_arguments("read", ['{"path": "/a", "limit": 1}', "--limit", "7"])
    assert args == {"path": "/a", "limit": 7}


@pytest.mark.parametrize(
    ("tokens", "says"),
    [
        (["--path", "/a", "--limit", "five"], "--limit takes an integer (as JSON), not 'five'"),
        (["--path"], "--path needs a value"),
        (["--path", "/a", "--limit"], "--limit needs a value"),
        (["--path", "/a", "--path", "/b"], "--path is given twice"),
        (["--path", "/a", "--byteOffset", "1", "--byte-offset", "2"], "--byte-offset is given twice"),
        (["--path", "/a", "stray"], "unexpected argument 'stray'"),
        (["{}", "{}"], "one JSON object of arguments, not 2 words"),
    ],
)
def test_bad_options_are_usage_errors(tokens: list[str], says: str) -> None:
    with pytest.raises(CliError) as caught:
        parse_arguments("read", tokens)
    assert caught.value.code == 2 and says in str(caught.value)


def test_an_unknown_name_reaches_the_tool_which_names_the_valid_ones(tmp_path: Path) -> None:
    assert parse_arguments("read", ["--paht", "/a"]) == {"paht": "/a"}
    done = run_cli(["tool", "w", "read", "--paht", "/a"], env=cli_env(tmp_path))
    assert done.returncode == 1
    assert "Unknown argument 'paht' (did you mean 'path'?)" in json.loads(done.stdout)["error"]


def test_a_newcomer_s_option_call_runs_end_to_end_and_a_bad_one_opens_nothing(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    wrote = run_cli(
        ["tool", "w", "write", "--path", "/workspace/package.json", "--content", '{"a": 1}\n'], env=env
    )
    assert wrote.returncode == 0, wrote.stderr
    ran = run_cli(
        ["tool", "w", "exec", "--command", "cat package.json; echo $X", "--env", '{"X": "5"}'], env=env
    )
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["stdout"] == '{"a": 1}\n5\n'
    bad = run_cli(["tool", "other", "read", "--path", "/workspace/package.json", "--limit", "x"], env=env)
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr.strip() == "error: --limit takes an integer (as JSON), not 'x'"
    listed = run_cli(["ls", "--json"], env=env)
    assert [row["name"] for row in json.loads(listed.stdout)] == ["w"]  # the usage error made no workspace
