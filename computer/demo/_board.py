"""The live table of the demo: one row per agent (step, tool calls, latency, test runs).

It fits the terminal: the step column takes what the others leave and is cut with an ellipsis, the
other columns never wrap; below 100 columns the "last ms" column goes. The caption explains the
columns.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.markup import escape
from rich.table import Table

from ._agent import AgentState
from ._latency import percentile

__all__ = ["CAPTION", "board", "test_runs_cell"]

CAPTION = (
    "step: the tool call in progress · calls: tool calls so far · p50 ms: their median latency · "
    "tests: how many times the agent ran its tests, and the latest outcome"
)
WIDE = 100  # columns from which the latency of the last call is shown too


def test_runs_cell(state: AgentState) -> str:
    """``-`` before the first run, else ``<runs> run(s), <latest outcome>``: ``2 runs, pass``."""
    if state.tests_green is None:
        return "-"
    outcome = "[green]pass[/]" if state.tests_green else "[red]fail[/]"
    return f"{state.test_runs} run{'s' if state.test_runs != 1 else ''}, {outcome}"


def board(states: Sequence[AgentState], *, title: str, width: int = 80) -> Table:
    """Render the agents' current states for a terminal ``width`` columns wide."""
    wide = width >= WIDE
    table = Table(title=title, caption=CAPTION, box=box.SIMPLE_HEAD, expand=True, pad_edge=False)
    table.add_column("agent", no_wrap=True)
    table.add_column("project", no_wrap=True)
    table.add_column("step", ratio=1, min_width=10, no_wrap=True, overflow="ellipsis")
    table.add_column("calls", justify="right", no_wrap=True)
    table.add_column("p50 ms", justify="right", no_wrap=True)
    if wide:
        table.add_column("last ms", justify="right", no_wrap=True)
    table.add_column("tests", no_wrap=True)
    for state in states:
        latencies = state.latencies
        step = escape(state.step) if not state.failure else f"[red]{escape(state.failure)}[/]"
        if state.done and state.green:
            step = "[green]done[/]"
        row = [
            state.name,
            state.project.label,
            step,
            str(state.calls),
            f"{percentile(latencies, 50) * 1000:.0f}" if latencies else "-",
        ]
        if wide:
            row.append(f"{latencies[-1] * 1000:.0f}" if latencies else "-")
        row.append(test_runs_cell(state))
        table.add_row(*row)
    return table
