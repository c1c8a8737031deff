"""``computer bench``: run the scripts under ``benchmarks/`` of the source checkout, one after another."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ._context import CliError

__all__ = ["benchmark_scripts", "run_benchmarks"]


def benchmarks_dir() -> Path:
    """``benchmarks/`` beside the package (it ships with the repository, not with a wheel)."""
    return Path(__file__).resolve().parents[2] / "benchmarks"


def benchmark_scripts() -> dict[str, Path]:
    """Benchmark name (``fs`` for ``fs_bench.py``) → script."""
    folder = benchmarks_dir()
    if not folder.is_dir():
        raise CliError(f"no benchmarks directory at {folder}: benchmarks ship with the source checkout")
    return {path.name.removesuffix("_bench.py"): path for path in sorted(folder.glob("*_bench.py"))}


def run_benchmarks(names: Sequence[str], extra: Sequence[str], console: Console) -> int:
    """Run the named benchmarks (all when none), passing ``extra`` arguments; the worst exit code."""
    scripts = benchmark_scripts()
    unknown = [name for name in names if name not in scripts]
    if unknown:
        raise CliError(f"unknown benchmark(s) {', '.join(unknown)}; available: {', '.join(scripts)}", code=2)
    chosen = [scripts[name] for name in names] if names else list(scripts.values())
    worst = 0
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("benchmarks", total=len(chosen))
        for script in chosen:
            progress.update(task, description=f"running {script.name}")
            process = subprocess.run(
                [sys.executable, str(script), *extra],
                cwd=script.parent.parent,
                capture_output=True,
                text=True,
            )
            progress.console.rule(script.name)
            progress.console.print(process.stdout.rstrip(), markup=False, highlight=False, soft_wrap=True)
            if process.returncode != 0:
                progress.console.print(
                    process.stderr.rstrip()[-4000:], markup=False, style="red", soft_wrap=True
                )
                worst = max(worst, process.returncode)
            progress.advance(task)
    return worst
