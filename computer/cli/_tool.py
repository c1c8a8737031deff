"""``computer tool NAME TOOL ARGS``: one tool call on a workspace, the result printed as JSON; and the
help of each tool (``computer tool NAME TOOL --help``, ``computer tools``)."""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from ..storage import audit_caller
from ._context import CliError, GlobalOptions, command_exit_code
from ._output import write_out
from ._workspaces import made_here, new_workspace_note, open_workspace

__all__ = [
    "EXAMPLES",
    "TOOL_NAMES",
    "exec_backends",
    "exit_code",
    "parse_arguments",
    "run_tool",
    "tool_help",
    "tools_overview",
    "unknown_tool",
]

TOOL_NAMES = ("read", "ls", "find", "grep", "write", "edit", "delete", "exec", "publish")

# One example call per tool: shown by the help, and run in this order by the tests (each must succeed
# on a fresh workspace after the ones before it).
EXAMPLES: dict[str, dict[str, Any]] = {
    "write": {"path": "/workspace/notes.md", "content": "# notes\nTODO: tidy up\n"},
    "read": {"path": "/workspace/notes.md"},
    "ls": {"path": "/workspace"},
    "find": {"pattern": "**/*.md"},
    "grep": {"query": "TODO", "include": "**/*.md"},
    "edit": {"path": "/workspace/notes.md", "edits": [{"oldText": "TODO: tidy up", "newText": "done"}]},
    "exec": {"command": "wc -l notes.md"},
    "publish": {"path": "/workspace/notes.md"},
    "delete": {"path": "/workspace/notes.md"},
}

# What a newcomer trips over, per tool (shown under the description).
NOTES: dict[str, str] = {
    "find": 'Patterns: "*.md" matches only directly in path; "**/*.md" matches at any depth.',
    "exec": "Without backend, the first backend (shell) runs; backend: python runs Python source.\n"
    "Without --address each call runs in a sandbox of its own, as described above: a process started in "
    "the background (`server &`) ends with the command, and its stderr says which ones ended. To keep "
    "one running between calls, make them in one process (`computer shell NAME` for the shell backend, "
    "whose prompt runs commands there only; `computer mcp NAME --processes` for either) or through a "
    "cluster (--address), where commands share a live sandbox.",
    "publish": "The link is answered by `computer serve` (same data directory).",
}


# What a newcomer types for a tool, from a shell or from another tool set (the Think-style names
# ``list`` and ``bash`` that ``names="think"`` offers), answered with the tool meant.
ALIASES = {
    "cat": "read", "list": "ls", "dir": "ls", "glob": "find", "search": "grep", "rg": "grep",
    "rm": "delete", "remove": "delete", "del": "delete", "run": "exec", "bash": "exec", "sh": "exec",
    "shell": "exec", "share": "publish", "link": "publish", "replace": "edit", "create": "write",
}  # fmt: skip


def unknown_tool(tool: str, name: str | None = None) -> CliError:
    """The usage error for a tool name that is none of ``TOOL_NAMES``, saying what was likely meant.

    Decision: the two likeliest mistakes are answered with the command meant. The workspace and the
    tool swapped (``computer tool write notes``: ``notes`` is no tool, ``write`` is one): the order.
    A misspelling or another tool set's name (``wrte``, ``cat``, ``bash``): the tool meant. Before,
    both got the same list of tools."""
    tools = ", ".join(TOOL_NAMES)
    if name is not None and name in TOOL_NAMES:
        return CliError(
            f"unknown tool {tool!r}: the workspace's name comes first, then the tool "
            f"(computer tool {shlex.quote(tool)} {name} ...); tools: {tools}",
            code=2,
        )
    import difflib

    meant = ALIASES.get(tool.lower()) or next(
        iter(difflib.get_close_matches(tool.lower(), TOOL_NAMES, n=1)), None
    )
    hint = f" (did you mean {meant!r}?)" if meant else ""
    return CliError(f"unknown tool {tool!r}{hint}; tools: {tools}", code=2)


def parse_arguments(tool: str, raw: str | Sequence[str], name: str | None = None) -> dict[str, Any]:
    """Check the tool name and the arguments before anything starts (usage errors exit 2): one JSON
    object, then any ``--name value`` options set over it (``_flags``). ``name``: the workspace's, for
    the message of a tool name that is none (:func:`unknown_tool`)."""
    if tool not in TOOL_NAMES:
        raise unknown_tool(tool, name)
    tokens = [raw] if isinstance(raw, str) else list(raw)
    flags: list[tuple[str, str | None]] = []
    if any(token.startswith("--") for token in tokens):
        from ._flags import split_flags

        first, flags = split_flags(tokens)
        tokens = [] if first is None else [first]
    if tokens and tokens[0].strip() and tokens[0].lstrip()[0] not in "{[" and not _is_json(tokens[0]):
        # A bare value (``read /workspace/a.md``, ``exec 'ls -la'``, ``exec ls -la``): the likeliest
        # first mistake, answered with the call meant rather than a JSON parser's complaint.
        key = next(iter(EXAMPLES[tool]))
        text = " ".join(tokens)
        raise CliError(
            f"the arguments are one JSON object or --name value options, not {shlex.quote(text)}; "
            f"did you mean --{key} {shlex.quote(text)} (or {_quoted({key: text})})? "
            f"See computer tool NAME {tool} --help",
            code=2,
        )
    if len(tokens) > 1:
        raise CliError(
            f"one JSON object of arguments, not {len(tokens)} words; e.g. {_quoted(EXAMPLES[tool])}, "
            f"or --name value options (see computer tool NAME {tool} --help)",
            code=2,
        )
    try:
        parsed = json.loads(tokens[0] if tokens else "{}")
    except RecursionError:  # not a ValueError: it was a traceback
        raise CliError(
            "the arguments are nested too deeply to parse; send a flatter JSON object", code=2
        ) from None
    except ValueError as exc:
        raise CliError(
            f"the arguments are not valid JSON ({exc}); pass one JSON object, e.g. "
            f"{_quoted(EXAMPLES[tool])}, or --name value options (see computer tool NAME {tool} --help)",
            code=2,
        ) from None
    if not isinstance(parsed, dict):
        raise CliError(f"the arguments must be a JSON object, not {type(parsed).__name__}", code=2)
    args: dict[str, Any] = parsed
    if flags:
        from ._flags import apply_flags

        args = apply_flags(tool, args, flags)
    return args


# The exec arguments whose meaning and messages do not depend on which other backends exist, per
# backend: only a callable backend (python) takes ``input``.
_ALONE_ARGUMENTS = {
    "shell": frozenset({"command", "cwd", "env", "timeout", "backend"}),
    "python": frozenset({"command", "cwd", "env", "timeout", "backend", "input"}),
}


def exec_backends(args: dict[str, Any]) -> bool | tuple[str, ...]:
    """The backends an in-process ``exec`` call needs built: only the one it runs on (no ``backend``:
    the shell; ``"shell"`` or ``"python"``) when it names no argument outside that backend's, all of
    them otherwise.

    Decision: building a backend costs a third of such a command (the python one ~0.3 s of CPU: its
    modules, and a sandbox and an interpreter started to measure its start-up; the shell one ~0.2 s).
    With the one backend alone the call runs and answers the same: a ``backend`` given to a
    single-backend exec is dropped, and its other fields, defaults and messages are the same. A call
    with ``input`` on the shell, another backend or an unknown name gets every backend, so its
    messages list them as before."""
    backend = args.get("backend", "shell")
    if isinstance(backend, str) and args.keys() <= _ALONE_ARGUMENTS.get(backend, frozenset()):
        return (backend,)
    return True


async def run_tool(options: GlobalOptions, name: str, tool: str, args: dict[str, Any]) -> int:
    """Run the call; exit code 0 on success, 1 when the tool reports an error, the command's own exit
    code when an ``exec`` ran a command that failed (:func:`exit_code`).

    In process, only ``exec`` gets the exec backends (with a sandbox per run: one run, then the
    command ends), and only the one it runs on when that one alone answers it alike (:func:`exec_backends`);
    only ``publish`` and ``exec`` get the share-link publisher (made at its first share, so an exec
    that shares nothing pays nothing; without it the sandbox's ``assets publish FILE`` answered "this
    workspace has no assets publisher"): the other tools do not depend on them, and building them
    would cost most of the command's time.
    """
    from ..tools import create_tools

    backends = exec_backends(args) if tool == "exec" else False
    new = made_here(options, name)
    async with open_workspace(
        options, name, backends=backends, assets=tool in ("exec", "publish"), live=False
    ) as workspace:
        tools = create_tools(workspace)
        if tool not in tools:
            raise CliError(
                f"tool {tool!r} is not available on workspace {name!r} (available: {', '.join(tools)})",
                code=2,
            )
        if new:  # the user root, as `computer shell` makes it: `ls /workspace` lists it (empty)
            await workspace.fs.mkdir("/workspace", recursive=True)
        with audit_caller(adapter="cli"):  # the audit log says the call came from this command
            result = await tools[tool].run(args)
    write_out(result_json(result) + "\n")  # all of it, or BrokenPipeError (a reader gone)
    if new and (tool in _READS or exit_code(tool, result)):
        print(new_workspace_note(name), file=sys.stderr)
    hint = missing_argument_hint(name, tool, result)
    if hint:
        print(hint, file=sys.stderr)
    return exit_code(tool, result)


def missing_argument_hint(name: str, tool: str, result: dict[str, Any]) -> str | None:
    """For a call that left out a required argument, the tool's example call, on stderr.

    Decision: ``computer tool notes ls`` (as one types ``ls``) answered only ``Invalid arguments:
    path: Field required``, the message a model gets; a person at a shell is shown a call that works
    and where the full help is. An unknown argument's message already lists the valid ones."""
    error = result.get("error")
    if not isinstance(error, str) or not error.startswith("Invalid arguments:"):
        return None
    if "Field required" not in error or tool not in EXAMPLES:
        return None
    return (
        f"computer: e.g. computer tool {shlex.quote(name)} {tool} {_quoted(EXAMPLES[tool])} "
        f"(`computer tool {shlex.quote(name)} {tool} --help`: its arguments)"
    )


_READS = frozenset({"read", "ls", "find", "grep"})  # the tools that change nothing


def exit_code(tool: str, result: dict[str, Any]) -> int:
    """The exit code of one call: 1 when the tool reports an error (``{"error": ...}``, ``publish``'s
    ``{"ok": false, ...}``); for ``exec``, the command's own exit code when it ran and failed (1 to
    255; 1 when it has none, say it was killed), so ``computer tool NAME exec ... && next`` behaves
    like the command itself; 0 otherwise. The JSON result is printed either way.

    Decision: before, an exec whose command failed exited 0 (the call itself succeeded), and a script
    had to parse the JSON to notice. A demanding user expects ``ssh``/``docker exec``: the command's
    code. Codes 1 and 2 are then also those of a tool error and of bad usage; the JSON on stdout (there
    is none on a usage error) tells them apart."""
    if tool == "exec":
        code = command_exit_code(result.get("exitCode"), result.get("status", "completed"))
        if code:
            return code
    return 1 if "error" in result or result.get("ok") is False else 0


def result_json(result: dict[str, Any]) -> str:
    """The result as indented JSON, non-ASCII text as it is; a result that echoes text which is not
    Unicode (a lone surrogate: ``find`` with the pattern ``"\\ud800*"``) is written with ASCII
    escapes instead. Before, the write failed half-way: part of the JSON, then a traceback."""
    text = json.dumps(result, indent=2, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(result, indent=2)
    return text


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _quoted(args: dict[str, Any]) -> str:
    return shlex.quote(json.dumps(args, ensure_ascii=False))


def _as_options(args: dict[str, Any]) -> str:
    """The same call as ``--name value`` options (``_flags``): text as it is, anything else as JSON."""
    return " ".join(
        f"--{name} {shlex.quote(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))}"
        for name, value in args.items()
    )


def _reference_tools() -> dict[str, Any]:
    """The full tool set (both exec backends, a publisher) over a throw-away in-memory workspace:
    the descriptions and schemas every in-process workspace offers. Its backends are those of
    ``tool NAME exec`` in process, a sandbox per run (their descriptions said that a process started in
    the background keeps running, which holds only for one process's many calls or a cluster's)."""
    from ..runtime import PythonBackend, ShellBackend
    from ..tools import create_tools
    from ..workspace import Workspace
    from ._inprocess import SharePublisher

    workspace = Workspace(
        None, backends=[ShellBackend(live=False, warm_sandboxes=0), PythonBackend(live=False, warm_guests=0)]
    )
    workspace.assets = SharePublisher(workspace)  # never called: the publish tool needs one to exist
    try:
        return create_tools(workspace)
    finally:
        workspace.fs.close()


def tool_help(tool: str, name: str | None = None) -> str:
    """Description, JSON schema and an example call of one tool."""
    if tool not in TOOL_NAMES:
        raise unknown_tool(tool, name)
    spec = _reference_tools()[tool]
    lines = [
        f"computer tool NAME {tool} '<arguments as JSON>'",
        f"computer tool NAME {tool} --name value ...",
        "",
        spec.description,
    ]
    if tool in NOTES:
        lines += ["", NOTES[tool]]
    lines += [
        "",
        "Arguments (JSON schema):",
        json.dumps(spec.parameters, indent=2, ensure_ascii=False),
        "",
        "Example:",
        f"  computer tool my-workspace {tool} {_quoted(EXAMPLES[tool])}",
        f"  computer tool my-workspace {tool} {_as_options(EXAMPLES[tool])}",
        "",
        "As options, an argument that takes text gets the value as typed; any other is read as JSON.",
        'The result is printed as JSON; exit code 1 when it is {"error": ...}'
        + ("; for a command that failed, its own exit code (1 when it has none)." if tool == "exec" else "."),
    ]
    return "\n".join(lines)


def tools_overview() -> str:
    """Every tool with the first sentence of its description, its arguments and an example."""
    tools = _reference_tools()
    lines = ["Tools (computer tool NAME TOOL --help shows one in full):", ""]
    for tool in TOOL_NAMES:
        spec = tools[tool]
        properties = spec.parameters.get("properties", {})
        required = set(spec.parameters.get("required", ()))
        args = ", ".join(f"{p}" if p in required else f"{p}?" for p in properties)
        lines += [
            f"{tool}: {_first_sentence(spec.description)}{_backends_text(spec.description)}",
            f"    arguments: {args}",
            f"    example: computer tool my-workspace {tool} {_quoted(EXAMPLES[tool])}",
        ]
    lines += [
        "",
        "Arguments ending in ? are optional. They may also be given as options, e.g.",
        f"computer tool my-workspace read {_as_options(EXAMPLES['read'])}",
    ]
    return "\n".join(lines)


def _first_sentence(description: str) -> str:
    """The description up to its first full stop, on one line (``exec``'s first line ends without
    ``". "``: a split on it ran into its backend list)."""
    first = re.split(r"\.(?:\s|$)", description.strip(), maxsplit=1)[0]
    return " ".join(first.split()).rstrip(".") + "."


def _backends_text(description: str) -> str:
    """`` Backends: shell, python.`` for a description listing them (``exec``), else ``""``."""
    _, found, rest = description.partition("Backends:")
    names = re.findall(r"^- ([\w-]+):", rest, flags=re.MULTILINE) if found else []
    return f" Backends: {', '.join(names)} (`backend` chooses; default {names[0]})." if names else ""
