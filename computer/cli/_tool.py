"""``computer tool NAME TOOL ARGS``: one tool call on a workspace, the result printed as JSON; and the
help of each tool (``computer tool NAME TOOL --help``, ``computer tools``)."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from typing import Any

from ..storage import audit_caller
from ._context import CliError, GlobalOptions, command_exit_code
from ._output import write_out
from ._workspaces import open_workspace

__all__ = [
    "EXAMPLES",
    "TOOL_NAMES",
    "exec_backends",
    "exit_code",
    "parse_arguments",
    "run_tool",
    "tool_help",
    "tools_overview",
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


def parse_arguments(tool: str, raw: str | Sequence[str]) -> dict[str, Any]:
    """Check the tool name and the arguments before anything starts (usage errors exit 2): one JSON
    object, then any ``--name value`` options set over it (``_flags``)."""
    if tool not in TOOL_NAMES:
        raise CliError(f"unknown tool {tool!r}; tools: {', '.join(TOOL_NAMES)}", code=2)
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
    async with open_workspace(
        options, name, backends=backends, assets=tool in ("exec", "publish"), live=False
    ) as workspace:
        tools = create_tools(workspace)
        if tool not in tools:
            raise CliError(
                f"tool {tool!r} is not available on workspace {name!r} (available: {', '.join(tools)})",
                code=2,
            )
        with audit_caller(adapter="cli"):  # the audit log says the call came from this command
            result = await tools[tool].run(args)
    write_out(result_json(result) + "\n")  # all of it, or BrokenPipeError (a reader gone)
    return exit_code(tool, result)


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


def tool_help(tool: str) -> str:
    """Description, JSON schema and an example call of one tool."""
    if tool not in TOOL_NAMES:
        raise CliError(f"unknown tool {tool!r}; tools: {', '.join(TOOL_NAMES)}", code=2)
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
