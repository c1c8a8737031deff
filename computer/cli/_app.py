"""The ``computer`` command (typer). Each command imports what it needs when it runs, so ``--help`` is fast."""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
import typer.core

from ._context import GLOBAL_OPTIONS, CliError, GlobalOptions, global_option_misplaced, settings_error
from ._output import closed_pipe, console, report

__all__ = ["app"]

T = TypeVar("T")


def _flags_without_type(params: list[Any]) -> list[Any]:
    """``params`` with no type shown beside a flag. Decision: typer 0.29's help prints every
    option's type, ``<bool>`` beside each flag too (``--yes <bool>``, even its own ``--help``), which
    reads as if the flag took a value; an empty metavar is what it prints instead."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


class _ClosedPipe(Exception):
    """stdout's reader went away while typer parsed or ran a command: not an ``OSError``, which
    typer's own handling turns into exit 1."""


def _help_console_raises_on_closed_pipe() -> None:
    """Make the consoles typer prints help with raise ``BrokenPipeError`` when stdout's reader has
    gone, as ``_output.console`` does. Decision: rich's own handler ends the process with
    ``SystemExit(1)`` from inside the print (`computer --help | head -1` exited 1, before anything of
    ours could tell it from a failure). Done when help is first formatted, so a command that prints no
    help imports no rich; typer's ``rich_utils._get_rich_console`` is private: without it, help into a
    closed pipe exits 1 as before."""
    from typer import rich_utils

    made = getattr(rich_utils, "_get_rich_console", None)
    if made is None or getattr(made, "raises_on_closed_pipe", False):
        return

    def get_console(stderr: bool = False) -> Any:
        console = made(stderr=stderr)

        def on_broken_pipe() -> None:
            console.quiet = True
            raise BrokenPipeError(32, "Broken pipe")

        console.on_broken_pipe = on_broken_pipe
        return console

    get_console.raises_on_closed_pipe = True  # type: ignore[attr-defined]
    rich_utils._get_rich_console = get_console


class _Command(typer.core.TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _flags_without_type(super().get_params(ctx))

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _help_console_raises_on_closed_pipe()
        super().format_help(ctx, formatter)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        """The usage line's pieces, a required argument as its bare name (``NAME``). Decision: typer
        0.29 writes it ``{NAME}``, which reads as a set to choose from; an optional one stays
        ``[NAME]``, as in click, git and the README."""
        return [re.sub(r"^\{(.+)\}", r"\1", piece) for piece in super().collect_usage_pieces(ctx)]


class _Group(typer.core.TyperGroup):
    """The app's group: flags without a type in help (``_flags_without_type``), and a usage error
    (unknown command or option, missing or extra argument, bad value) as one line on stderr, exit 2.

    Decision: typer printed a usage error as the usage line, a hint and the message in a box (five
    lines); every other error of the CLI is one ``error: ...`` line (``CliError``), and a script's log
    or a terminal shows one line best. The line names the command's ``--help``."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _flags_without_type(super().get_params(ctx))

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _help_console_raises_on_closed_pipe()
        super().format_help(ctx, formatter)

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        """The group's context; ``--help`` and ``--version`` print while it is made."""
        try:
            return super().make_context(*args, **kwargs)
        except BrokenPipeError:
            raise _ClosedPipe from None

    def invoke(self, ctx: Any) -> Any:
        """Run the command (its ``--help`` too); a closed stdout is ``_ClosedPipe``."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise _ClosedPipe from None

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except Exception as exc:
            _exit_for(exc)
        sys.exit(code if isinstance(code, int) else 0)


def _exit_for(exc: Exception) -> NoReturn:
    """End the command for an exception typer's standalone mode would have printed: a click error as
    one line, an abort (end of input at a prompt) as typer says it; anything else propagates.
    Decision: click's exceptions are told by their class names (typer 0.29 vendors click, earlier
    versions use the click package), as typer itself tells ``NoArgsIsHelpError``."""
    if isinstance(exc, _ClosedPipe):  # 141 and no traceback, as every command (`_output.closed_pipe`)
        sys.exit(closed_pipe())
    kinds = {kind.__name__ for kind in type(exc).__mro__}
    if "NoArgsIsHelpError" in kinds:  # the help is printed already (`computer` alone)
        sys.exit(2)
    if "ClickException" in kinds:
        message = exc.format_message()  # type: ignore[attr-defined]
        ctx = getattr(exc, "ctx", None)
        option = getattr(exc, "option_name", None)
        if (
            "NoSuchOption" in kinds
            and option in GLOBAL_OPTIONS
            and ctx is not None
            and ctx.parent is not None
        ):
            message = (
                f"{message}; {global_option_misplaced(option, ctx.info_name, ctx.find_root().info_name)}"
            )
        elif "UsageError" in kinds and ctx is not None:
            message = f"{message.removesuffix('.')} (see '{ctx.command_path} --help')"
            given = str(ctx.params.get("name", ""))
            if getattr(getattr(exc, "param", None), "name", None) == "pid" and given.isdecimal():
                # `computer kill 12 notes`: the process id given first, then the workspace's name.
                message += f"; the workspace's name comes first: {ctx.command_path} NAME {given}"
        sys.exit(report(CliError(message, code=exc.exit_code)))  # type: ignore[attr-defined]
    if "Abort" in kinds:
        from typer import rich_utils

        rich_utils.rich_abort_error()
        sys.exit(1)
    raise exc


app = typer.Typer(
    name="computer",
    cls=_Group,
    help="Durable, isolated workspaces for AI agents, on Ray.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


IN_PROCESS = (
    "No cluster named: works in this process on the data directory (no Ray). "
    "With --address (or RAY_ADDRESS): joins that cluster."
)
NO_RAY = "Needs no Ray: reads the data directory only."


def _options(ctx: typer.Context) -> GlobalOptions:
    options = ctx.obj
    return options if isinstance(options, GlobalOptions) else GlobalOptions()


def _run(action: Callable[[], T]) -> T:
    """Run a command body; a ``CliError`` becomes one red line and its exit code."""
    try:
        return action()
    except CliError as exc:
        raise typer.Exit(report(exc)) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except BrokenPipeError:  # stdout's reader has gone (`computer ps | head -1`)
        raise typer.Exit(closed_pipe()) from None
    except ValueError as exc:  # settings that do not validate (a bad COMPUTER_* value)
        problem = settings_error(exc)
        if problem is None:
            raise
        raise typer.Exit(report(problem)) from None


def _run_async(coroutine: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return _run(lambda: asyncio.run(coroutine()))


def _show_version(value: bool) -> None:
    """``--version``: the installed distribution's version (``ray-computer``), then exit 0."""
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("ray-computer")
    except PackageNotFoundError:  # run from a source tree that was never installed
        found = "unknown (not installed)"
    console().print(f"computer {found}", markup=False, highlight=False)
    raise typer.Exit(0)


@app.callback()
def main_options(
    ctx: typer.Context,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir", help="Data directory (workspaces, directory, assets). Env: COMPUTER_DATA_DIR."
        ),
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            help="Ray cluster to join, e.g. 10.0.0.5:6379, or auto (the one Ray finds on this machine). "
            "None: no cluster is joined. Env: RAY_ADDRESS.",
        ),
    ] = None,
    _version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_show_version,
            is_eager=True,
            expose_value=False,
            help="Show the version and exit.",
        ),
    ] = False,
) -> None:
    """Durable, isolated workspaces for AI agents, on Ray."""
    ctx.obj = GlobalOptions(data_dir=data_dir, address=address)


@app.command(
    help="Run N scripted agents at once, each repairing a small project in its own workspace, in a "
    "data directory of its own (a new temporary one unless --data-dir). Starts a local Ray for its "
    "lifetime, or joins --address (or RAY_ADDRESS)."
)
def demo(
    ctx: typer.Context,
    agents: Annotated[int, typer.Option("--agents", "-n", min=1, help="How many concurrent agents.")] = 16,
    address: Annotated[
        str | None, typer.Option("--address", help="Ray cluster to join (overrides the global option).")
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Data directory of this run (overrides the global option)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="Drive a real LLM through an OpenAI-compatible endpoint "
            "(OPENAI_BASE_URL, OPENAI_API_KEY) instead of the scripted model.",
        ),
    ] = None,
    hibernate_after: Annotated[
        float,
        typer.Option("--hibernate-after", min=0.5, help="Seconds an idle owner waits before hibernating."),
    ] = 3.0,
) -> None:
    from ._demo import run_demo_command

    options = _options(ctx)
    if address is not None or data_dir is not None:
        options = GlobalOptions(data_dir or options.data_dir, address or options.address)
    code = _run(
        lambda: run_demo_command(
            options, agents=agents, model=model, hibernate_after=hibernate_after, console=console()
        )
    )
    raise typer.Exit(code)


@app.command(
    help="Call one tool on a workspace and print its result as JSON (exit 1 if the tool reports an "
    "error; exec of a command that failed: the command's exit code). `computer tool NAME TOOL --help` "
    f"describes TOOL. {IN_PROCESS}",
    context_settings={"help_option_names": [], "ignore_unknown_options": True},
)
def tool(
    ctx: typer.Context,
    name: Annotated[
        str | None, typer.Argument(metavar="NAME", help="Workspace name (created on first use).")
    ] = None,
    tool_name: Annotated[
        str | None,
        typer.Argument(metavar="TOOL", help="read, ls, find, grep, write, edit, delete, exec or publish."),
    ] = None,
    arguments: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="ARGS",
            help="The tool's arguments as one JSON object, and/or as --name value options "
            "(text as typed, other types as JSON).",
        ),
    ] = None,
    show_help: Annotated[
        bool, typer.Option("--help", "-h", help="Show this message, or TOOL's arguments and an example.")
    ] = False,
) -> None:
    from ._tool import TOOL_NAMES, parse_arguments, run_tool, tool_help, tools_overview

    if tool_name is None and name is not None and not show_help:  # `computer tool ws`: one line
        problem = CliError(
            f"Missing argument 'TOOL': {', '.join(TOOL_NAMES)} (see '{ctx.command_path} --help', "
            "or `computer tools`)",
            code=2,
        )
        raise typer.Exit(report(problem))
    if tool_name is None or show_help:
        if tool_name is not None:
            console().print(
                _run(lambda: tool_help(tool_name, name)), markup=False, highlight=False, soft_wrap=True
            )
        else:
            console().print(ctx.get_help(), markup=False, highlight=False, soft_wrap=True)
            console().print()
            console().print(tools_overview(), markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(0)
    assert name is not None
    options = _options(ctx)
    args = _run(lambda: parse_arguments(tool_name, arguments or [], name))
    raise typer.Exit(_run_async(lambda: run_tool(options, name, tool_name, args)))


@app.command(help="Describe the tools: what each does, its arguments and an example call. Needs no Ray.")
def tools(
    tool_name: Annotated[
        str | None, typer.Argument(metavar="TOOL", help="One tool: its full description and JSON schema.")
    ] = None,
) -> None:
    from ._tool import tool_help, tools_overview

    text = _run(lambda: tool_help(tool_name) if tool_name else tools_overview())
    console().print(text, markup=False, highlight=False, soft_wrap=True)


@app.command("ls", help=f"List the workspaces: awake or asleep, size, last activity, live runs. {NO_RAY}")
def list_command(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    prefix: Annotated[str, typer.Option("--prefix", help="Only names starting with this.")] = "",
) -> None:
    from ._ls import check_data_dir, list_workspaces, print_workspaces

    options = _options(ctx)
    _run(lambda: check_data_dir(options))
    rows = _run(lambda: list_workspaces(options, prefix=prefix))
    print_workspaces(rows, as_json=as_json, console=console(), prefix=prefix)


@app.command(
    "rm",
    help="Delete workspaces: stops the owner, removes the file, its directory record and its share "
    f"links (their URLs answer 404). Asks first unless --yes. {IN_PROCESS}",
)
def remove_command(
    ctx: typer.Context,
    names: Annotated[list[str] | None, typer.Argument(metavar="NAME", help="Workspaces to delete.")] = None,
    prefix: Annotated[
        str | None,
        typer.Option("--prefix", help="Also every workspace whose name starts with P.", metavar="P"),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    force: Annotated[
        bool,
        typer.Option("--force", help="Delete even a workspace a live client holds (calls, locks, runs)."),
    ] = False,
) -> None:
    from ._rm import remove_workspaces

    options = _options(ctx)
    code = _run(
        lambda: remove_workspaces(
            options, names or [], prefix=prefix, yes=yes, force=force, console=console()
        )
    )
    raise typer.Exit(code)


@app.command(
    help="An interactive prompt over one workspace: ls, cat, edit (in $EDITOR), exec, cd; -c runs one "
    "line of it and exits as tool exec does: a command that failed, with its own exit code; any other "
    f"failure, 1 (what went wrong goes to stderr). {IN_PROCESS}"
)
def shell(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="Workspace name.")],
    command: Annotated[
        str | None,
        typer.Option("--command", "-c", help="Run this one line (e.g. 'ls', 'cat f', '!make') and exit."),
    ] = None,
) -> None:
    from ._shell import run_shell

    options = _options(ctx)
    raise typer.Exit(_run_async(lambda: run_shell(options, name, console(), command=command)))


LIVE = (
    "A live sandbox runs in the process that owns the workspace: joins the cluster of --address (or "
    "RAY_ADDRESS); with none, says where the workspace is awake."
)


@app.command(
    help=f"List the processes of a workspace's live sandbox (pid, start, cpu, memory, command). {LIVE}"
)
def ps(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="Workspace name.")],
    backend: Annotated[
        str | None, typer.Option("--backend", help="Exec backend (default: the first).")
    ] = None,
) -> None:
    from ._ps import list_processes

    options = _options(ctx)
    raise typer.Exit(_run_async(lambda: list_processes(options, name, backend, console())))


@app.command(
    help=f"Kill one process of a workspace's live sandbox (its PID as `computer ps` shows it). {LIVE}"
)
def kill(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="Workspace name.")],
    pid: Annotated[int, typer.Argument(metavar="PID", help="Process id, as `computer ps` lists it.")],
    backend: Annotated[
        str | None, typer.Option("--backend", help="Exec backend (default: the first).")
    ] = None,
) -> None:
    from ._ps import kill_process

    options = _options(ctx)
    raise typer.Exit(_run_async(lambda: kill_process(options, name, pid, backend, console())))


@app.command(help=f"Serve one workspace's tools over MCP on stdin/stdout (for MCP clients). {IN_PROCESS}")
def mcp(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="Workspace name.")],
    readonly: Annotated[bool, typer.Option("--readonly", help="Only read, ls, find and grep.")] = False,
    processes: Annotated[
        bool,
        typer.Option(
            "--processes",
            help="Also the processes and kill tools: programs left running in the live sandbox.",
        ),
    ] = False,
) -> None:
    from ._mcp import serve_mcp

    options = _options(ctx)
    _run_async(lambda: serve_mcp(options, name, readonly=readonly, processes=processes))


@app.command(help=f"Serve share links (the URLs the publish tool prints) over HTTP. {NO_RAY}")
def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port to listen on.")] = 8787,
) -> None:
    from ._serve import serve_assets

    options = _options(ctx)
    _run(lambda: serve_assets(options, host, port, console()))


@app.command(
    "log",
    help="A workspace's audit log: tool calls, exec runs, share links (newest LIMIT, oldest first). "
    "No cluster named: reads its file read-only, waking nothing. With --address: through the cluster.",
)
def log_command(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="Workspace name.")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new records.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    tool: Annotated[str | None, typer.Option("--tool", help="Only this tool (or backend, or share).")] = None,
    errors_only: Annotated[bool, typer.Option("--errors", help="Only failed calls and runs.")] = False,
    limit: Annotated[int, typer.Option("--limit", "-n", min=0, help="How many records first.")] = 50,
) -> None:
    from ._log import show_log

    options = _options(ctx)
    _run_async(
        lambda: show_log(
            options, name, follow=follow, as_json=as_json, tool=tool, errors=errors_only, limit=limit,
            console=console(),
        )
    )  # fmt: skip


@app.command(
    help="A read-only dashboard in the browser: workspaces, live timelines, files, runs, links, cluster. "
    "No cluster named: reads the data directory (no Ray). With --address: that cluster too.",
)
def dashboard(
    ctx: typer.Context,
    host: Annotated[
        str,
        typer.Option(
            "--host",
            help="Interface. Other than loopback, every request needs a token: --token's, or one made "
            "and printed in the URL.",
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port to listen on.")] = 8788,
    token: Annotated[
        str | None, typer.Option("--token", help="Token to require (env COMPUTER_DASHBOARD_TOKEN).")
    ] = None,
) -> None:
    from ._dashboard import run_dashboard

    options = _options(ctx)
    _run(lambda: run_dashboard(options, host, port, token, console()))


@app.command(
    help="Run the benchmarks under benchmarks/ (all, or the NAMES given: fs, tools…); arguments after -- go to each script.",
    context_settings={"allow_extra_args": True},
)
def bench(
    ctx: typer.Context,
    names: Annotated[
        list[str] | None, typer.Argument(metavar="NAME", help="Benchmarks to run (default: all).")
    ] = None,
    list_only: Annotated[bool, typer.Option("--list", help="List the benchmarks and exit.")] = False,
) -> None:
    from ._bench import benchmark_scripts, run_benchmarks

    if list_only:
        for bench_name, path in _run(benchmark_scripts).items():
            console().print(f"{bench_name}\t{path}", markup=False, highlight=False)
        return
    # Click hands what follows `--` to the NAMES argument: the first item that looks like an option
    # starts the arguments for the scripts.
    given = list(names or [])
    split = next((i for i, item in enumerate(given) if item.startswith("-")), len(given))
    chosen, extra = given[:split], [*given[split:], *ctx.args]
    raise typer.Exit(_run(lambda: run_benchmarks(chosen, extra, console())))


@app.command(
    help="Show the data directory and the Ray cluster named by --address or RAY_ADDRESS (nodes, exec "
    "pools, live owners); `--address auto` joins the one Ray finds on this machine. With none named it "
    "joins none: it says so and names the clusters running here. Never starts one."
)
def status(ctx: typer.Context) -> None:
    from ._status import show_status

    options = _options(ctx)
    _run(lambda: show_status(options, console()))


# Every command gets the help without ``<bool>`` beside its flags (``_Command``), in place of
# typer's default class (which ``app.command`` fills in).
for _info in app.registered_commands:
    if _info.cls is typer.core.TyperCommand:
        _info.cls = _Command
