"""The live table of the demo: one row per agent (step, tool calls, latency, tests, link)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from ._agent import AgentState
from ._latency import percentile

__all__ = ["board"]


def board(states: Sequence[AgentState], *, title: str) -> Table:
    """Render the agents' current states."""
    table = Table(title=title, expand=False)
    table.add_column("agent")
    table.add_column("project")
    table.add_column("step", max_width=44, no_wrap=True)
    table.add_column("calls", justify="right")
    table.add_column("p50 ms", justify="right")
    table.add_column("last ms", justify="right")
    table.add_column("tests")
    for state in states:
        latencies = state.latencies
        tests = {None: "-", True: "[green]pass[/]", False: "[red]fail[/]"}[state.tests_green]
        step = state.step if not state.failure else f"[red]{state.failure}[/]"
        if state.done and state.green:
            step = "[green]done[/]"
        table.add_row(
            state.name,
            state.project.label,
            step,
            str(state.calls),
            f"{percentile(latencies, 50) * 1000:.0f}" if latencies else "-",
            f"{latencies[-1] * 1000:.0f}" if latencies else "-",
            f"{tests} ({state.test_runs})",
        )
    return table
