"""``computer demo``: N agents, each in its own durable workspace, repairing a small project at once.

Starts (or joins) Ray through ``computer.init``, opens one client per agent, runs every agent
concurrently under a live table, then proves durability: it waits for one owner to hibernate (its actor
exits, the SQLite file stays) and reads that agent's report back through a fresh client.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shlex
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from ._agent import AgentState, ChatModel, run_agent
from ._board import board
from ._dashboard import demo_dashboard
from ._latency import percentile
from ._projects import project_for
from ._prompt import REPORT_PATH

__all__ = ["DemoError", "DemoSummary", "PersistenceCheck", "print_summary", "run_demo"]

REQUIRED_BACKEND = "shell"


class DemoError(RuntimeError):
    """The demo cannot run here (said plainly, without a traceback)."""


@dataclass
class PersistenceCheck:
    name: str
    idle_seconds: float
    size: int
    identical: bool


@dataclass
class DemoSummary:
    agents: list[AgentState]
    model: str
    data_dir: Path
    temporary: bool = False  # the data directory was made for this run (everything in it is the run's)
    persistence: PersistenceCheck | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def green(self) -> int:
        return sum(1 for state in self.agents if state.green)

    @property
    def latencies(self) -> list[float]:
        return [value for state in self.agents for value in state.latencies]

    @property
    def by_tool(self) -> dict[str, list[float]]:
        """Latencies per tool name (an ``exec`` runs the project's tests: seconds, not milliseconds)."""
        merged: dict[str, list[float]] = {}
        for state in self.agents:
            for name, values in state.by_tool.items():
                merged.setdefault(name, []).extend(values)
        return merged

    @property
    def ok(self) -> bool:
        return self.green == len(self.agents) and self.persistence is not None and self.persistence.identical


@contextlib.contextmanager
def _phase(timings: dict[str, float], name: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = time.perf_counter() - started


async def run_demo(
    *,
    agents: int = 16,
    address: str | None = None,
    data_dir: str | Path | None = None,
    model: ChatModel | None = None,
    hibernate_after: float = 3.0,
    console: Console | None = None,
) -> DemoSummary:
    """Run the demo and return its summary (the caller prints it and shuts Ray down)."""

    from ._scripted_model import ScriptedModel

    if agents < 1:
        raise DemoError("--agents must be at least 1")
    console = console or Console()
    model = model or ScriptedModel()
    timings: dict[str, float] = {}
    started = time.perf_counter()
    local = address is None and not os.environ.get("RAY_ADDRESS")
    temporary = local and data_dir is None
    if temporary:  # never the user's own data directory: a run of its own, easy to serve and remove
        data_dir = tempfile.mkdtemp(prefix="computer-demo-")
    try:
        with _phase(timings, "ray"), console.status("starting Ray" if local else f"joining Ray at {address}"):
            config = _start(address, local, console, data_dir=data_dir, hibernate_after=hibernate_after)
        console.print(f"Ray {'started locally' if local else 'joined'}", soft_wrap=True)
        kind = " (new, temporary: this run's workspaces and links)" if temporary else ""
        console.print(
            f"data directory: {config.data_dir}{kind}", soft_wrap=True, markup=False, highlight=False
        )
        states = [AgentState(f"demo-agent-{i}", project_for(i)) for i in range(agents)]
        with _phase(timings, "open"):
            clients = await _open_all([s.name for s in states], console)
        try:
            _require_exec(clients[0], console)
            async with demo_dashboard(config, console):  # issue 21: the live dashboard of this run
                with _phase(timings, "agents"):
                    await _run_agents(clients, states, model, console)
        finally:
            await asyncio.gather(*(client.close() for client in clients), return_exceptions=True)
            await model.aclose()
        summary = DemoSummary(states, model.name, config.data_dir, temporary, timings=timings)
        first_green = next((s for s in states if s.green), None)
        if first_green is not None:
            with _phase(timings, "persistence"):
                summary.persistence = await _check_persistence(first_green.name, config, console)
        if local:
            await _put_to_sleep([s.name for s in states], config)
        timings["wall"] = time.perf_counter() - started
        return summary
    except (asyncio.CancelledError, KeyboardInterrupt):
        # Ctrl-C: the run's temporary data directory stays (its owners may still hold files in it
        # until Ray stops); say where, as a finished run does, rather than leave it unmentioned.
        if temporary:
            where = shlex.quote(str(data_dir))
            console.print(
                f"interrupted: this run's data directory stays at {where} (remove it: rm -rf {where})",
                soft_wrap=True,
                markup=False,
                highlight=False,
            )
        raise


async def _put_to_sleep(names: Sequence[str], config: Any) -> None:
    """Close the owners still awake (either owner model), so their workspaces are asleep (lease
    released) when the Ray started here stops, rather than awake until their leases run out."""
    from computer.actors import close_owners

    await close_owners(list(names), config)


def _start(address: str | None, local: bool, console: Console, **config: Any) -> Any:
    """``computer.init``; a local start that misses Ray's fixed 30 s node-registration budget (a
    heavily loaded machine) is retried once. Runs in the main thread, where Ray installs its signal
    handlers (nothing else runs on the event loop yet)."""
    import ray

    import computer

    if local:
        config["shared_data_dir"] = True  # a cluster started here is this one machine: all nodes see the data
    for attempt in (1, 2):
        try:
            return computer.init(address, **config)
        except Exception as exc:  # Ray raises a bare Exception when its node does not come up in time
            ray.shutdown()
            if attempt == 2 or not local:
                raise DemoError(f"Ray did not {'start' if local else 'connect'}: {exc}") from None
            console.print(f"Ray did not start ({exc}); retrying once")
    raise AssertionError("unreachable")


async def _open_all(names: Sequence[str], console: Console) -> list[Any]:
    import computer

    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())  # fmt: skip
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("opening workspaces (one owner actor each)", total=len(names))

        async def open_one(name: str) -> Any:
            client = await computer.get_workspace(name)
            progress.advance(task)
            return client

        results = await asyncio.gather(*(open_one(name) for name in names), return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    clients = [r for r in results if not isinstance(r, BaseException)]
    if failures:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
        raise DemoError(f"could not open {len(failures)} workspace(s): {failures[0]}")
    return clients


def _require_exec(client: Any, console: Console | None = None) -> None:
    """Refuse owners with no shell backend; say on ``console`` when its runs have no namespaces.

    Decision: on a machine without bubblewrap (the README's first command installs none) the agents'
    commands ran as the host user and the demo said nothing; the backend's ``isolation`` says so,
    as the owners' backends report it (where the runs happen, not this process)."""
    infos = list(client.runtime.backends())
    ids = [info.id for info in infos]
    shell = next((info for info in infos if info.id == REQUIRED_BACKEND), None)
    if console is not None and shell is not None and shell.isolation.startswith("NO namespace isolation"):
        console.print(
            "exec: NO sandbox namespaces where the agents' commands run (bubblewrap is missing or "
            "cannot start there): they run as that host user (apt-get install bubblewrap)",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
    if REQUIRED_BACKEND not in ids:
        offered = ", ".join(ids) or "none"
        raise DemoError(
            f"the workspace owners offer no {REQUIRED_BACKEND!r} exec backend (offered: {offered}); the agents "
            "need it to run their tests. Exec pools come from computer/actors/pools.py "
            "(shell_pool_size/python_pool_size in the settings); check `computer status`."
        )


async def _run_agents(
    clients: Sequence[Any], states: list[AgentState], model: ChatModel, console: Console
) -> None:
    title = f"{len(states)} agents, model: {model.name}"

    def render() -> Any:
        return board(states, title=title, width=console.width)

    with Live(render(), console=console, refresh_per_second=4) as live:
        tasks = [asyncio.create_task(run_agent(c, model, s)) for c, s in zip(clients, states, strict=True)]
        pending = set(tasks)
        while pending:
            _, pending = await asyncio.wait(pending, timeout=0.25)
            live.update(render())
        live.update(render())


async def _check_persistence(name: str, config: Any, console: Console) -> PersistenceCheck:
    """Wait until ``name``'s owner hibernated, then read its report through a brand-new client."""
    import computer
    from computer.actors import open_directory

    async with computer.get_workspace(name) as client:
        before = await client.fs.read_file(REPORT_PATH)
    last_call = time.monotonic()
    directory = open_directory(config)
    deadline = time.monotonic() + config.hibernate_after + 60.0
    try:
        with console.status(f"waiting for {name}'s owner to hibernate (idle {config.hibernate_after:g} s)"):
            while True:
                record = await asyncio.to_thread(directory.get, name)
                if record is not None and record.state == "hibernating":
                    break
                if time.monotonic() > deadline:
                    raise DemoError(
                        f"{name}'s owner did not hibernate within {config.hibernate_after + 60:g} s"
                    )
                await asyncio.sleep(0.2)  # polling the directory: hibernation has no event to await
    finally:
        directory.close()
    idle = time.monotonic() - last_call
    async with computer.get_workspace(name) as fresh:
        after = await fresh.fs.read_file(REPORT_PATH)
    return PersistenceCheck(
        name, idle, len(after), hashlib.sha256(after).digest() == hashlib.sha256(before).digest()
    )


def print_summary(summary: DemoSummary, console: Console) -> None:
    """The summary block (plain lines, stable enough to be checked by tests)."""
    states = summary.agents
    latencies = summary.latencies
    calls = sum(s.calls for s in states)
    errors = sum(s.errors for s in states)
    console.print()
    console.print(f"agents: {summary.green}/{len(states)} green (model: {summary.model})", soft_wrap=True)
    if latencies:
        console.print(
            f"tool calls: {calls} ({errors} errors), latency p50 {percentile(latencies, 50) * 1000:.1f} ms, "
            f"p99 {percentile(latencies, 99) * 1000:.1f} ms"
        )
        per_tool = ", ".join(
            f"{name} {len(values)} (p50 {percentile(values, 50) * 1000:.1f} ms, "
            f"p99 {percentile(values, 99) * 1000:.1f} ms)"
            for name, values in sorted(summary.by_tool.items())
        )
        console.print(f"  by tool: {per_tool}", soft_wrap=True)
    console.print("reports:")
    for state in states:
        if state.url:
            console.print(f"  {state.name}  {state.project.label}  {state.url}", soft_wrap=True)
        else:
            reason = state.failure or state.answer
            console.print(
                f"  {state.name}  {state.project.label}  FAILED: {reason}", soft_wrap=True, markup=False
            )
    check = summary.persistence
    if check is None:
        console.print("persistence: not checked (no agent finished)")
    else:
        verdict = "identical" if check.identical else "DIFFERENT"
        console.print(
            f"persistence: {check.name} hibernated {check.idle_seconds:.1f} s after its last call; a fresh "
            f"client read its report back ({check.size} bytes, {verdict})",
            soft_wrap=True,
        )
    where = shlex.quote(str(summary.data_dir))
    lines = [f"dashboard (timelines, files, runs, transcripts): computer --data-dir {where} dashboard"]
    if any(state.url for state in states):  # no link to serve when no agent published one
        lines.insert(0, f"links: run `computer --data-dir {where} serve` in another terminal, then open them")
    if summary.temporary:
        lines.append(f"remove this run: rm -rf {where}")
    else:
        lines.append(f"remove this run: computer --data-dir {where} rm --prefix demo- --yes")
    for line in lines:
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    t = summary.timings
    phases = ", ".join(f"{k} {v:.1f} s" for k, v in t.items() if k != "wall")
    console.print(f"wall time: {t.get('wall', 0.0):.1f} s ({phases})", soft_wrap=True)
