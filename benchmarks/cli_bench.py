"""CLI speed: one ``computer`` command, in process (no cluster named) and joined to a running cluster.

Run: ``.venv/bin/python benchmarks/cli_bench.py [--runs N] [--no-cluster] [--no-local-ray]
[--compare CHECKOUT]``. Every
command is a fresh subprocess, as a user or a script runs it; the wall time of each is measured from
spawn to exit. Printed, per command: median and slowest of N runs, and the ratio to the baselines
measured in the same run (and the median CPU time of the command's process, which a loaded machine
inflates less than wall time). The package is compiled to bytecode first and the commands run without
``PYTHONDONTWRITEBYTECODE``: what a user's commands cost after the first one (with that variable set,
a source tree's edited modules were compiled again by every command, ~0.2 s). The baselines:

- ``python -c pass``: the interpreter's own start (no command can be faster);
- ``computer --help``: the command line's start (typer, rich), no workspace opened;
- a command as it was before it worked in process: each invocation started a local Ray for its
  lifetime (``ray.init()`` + ``ray.shutdown()`` in a fresh interpreter; measured once or twice, it
  takes seconds).

The commands: ``tool`` (write, read, grep, ls, exec on the shell and on the python backend), ``ls``,
``log``, ``shell -c`` (a line that reads, and one that runs a command) and ``mcp``: for ``mcp``, the
time from spawn to the answer of its ``initialize`` request (what an MCP client waits for), and to
its exit once stdin closes. With a cluster: a loopback Ray cluster (one node, started by this script,
stopped at the end: only its own processes), and the same commands with ``--address``. The target: in
process "well under a second" per command.

``--compare CHECKOUT`` measures only the in-process commands, alternating runs of an earlier revision's
checkout (``git worktree add /tmp/old REV``) with this one's, each in a data directory of its own:
old and new under the same load, with the ratio new/old of the wall and CPU medians.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMPUTER = [sys.executable, "-m", "computer.cli"]

_CLUSTER = """
import os, select, sys
os.environ.pop("RAY_ADDRESS", None)
from ray.cluster_utils import Cluster
cluster = Cluster(initialize_head=True, head_node_args={
    "num_cpus": 2, "object_store_memory": 100 * 1024 * 1024, "node_ip_address": "127.0.0.1",
    "include_dashboard": False})
try:
    cluster.wait_for_nodes()
    print(cluster.address, flush=True)
    sys.stdin.readline()  # until the benchmark closes stdin
finally:
    cluster.shutdown()
"""


def env(data_dir: Path, **extra: str) -> dict[str, str]:
    # PYTHONDONTWRITEBYTECODE (set in some shells and CI images) would leave a source tree's changed
    # modules without bytecode: every command compiled them again (~0.2 s here), which no installed
    # copy does. The commands write and use bytecode, as a user's second command does (``bytecode``).
    drop = ("RAY_ADDRESS", "COMPUTER_REDIS_URL", "PYTHONDONTWRITEBYTECODE")
    out = {k: v for k, v in os.environ.items() if k not in drop}
    out.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", COMPUTER_DATA_DIR=str(data_dir))
    # Ray advertises loopback instead of the host's address: the cluster stays on 127.0.0.1.
    out["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    out.update(extra)
    return out


CPU: list[float] = []  # CPU seconds (user + system) of each command run, in order


@contextmanager
def children_cpu() -> Iterator[None]:
    """Append the CPU time of the child processes that ended inside the block to :data:`CPU`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    yield
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


def bytecode(checkout: Path) -> None:
    """Compile ``checkout``'s package once before measuring: the first command after an edit pays for
    compiling it, later ones do not (a pip install compiles at install time)."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(checkout / "computer")],
        env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        check=True,
        stdout=subprocess.DEVNULL,
    )


def timed(args: Sequence[str], environ: dict[str, str], cwd: Path = REPO) -> float:
    with children_cpu():
        started = time.perf_counter()
        proc = subprocess.run(args, env=environ, cwd=cwd, capture_output=True, text=True, timeout=300)
        elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return elapsed


def series(args: Sequence[str], environ: dict[str, str], runs: int) -> list[float]:
    return [timed(args, environ) for _ in range(runs)]


def mcp_timed(args: Sequence[str], environ: dict[str, str], cwd: Path = REPO) -> tuple[float, float]:
    """``computer mcp``: seconds from spawn to the answer of ``initialize``, and to its exit after
    stdin closes (its CPU time appended to :data:`CPU`)."""
    pipe = subprocess.PIPE
    with children_cpu():
        started = time.perf_counter()
        proc = subprocess.Popen(args, env=environ, cwd=cwd, stdin=pipe, stdout=pipe, stderr=pipe, text=True)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(_INITIALIZE) + "\n")
            proc.stdin.flush()
            reply = proc.stdout.readline()
            answered = time.perf_counter() - started
            proc.stdin.close()
            code = proc.wait(timeout=300)
            ended = time.perf_counter() - started
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if code != 0 or '"serverInfo"' not in reply:
        err = proc.stderr.read()[-2000:] if proc.stderr else ""
        raise RuntimeError(f"{' '.join(args)} failed ({code}): {reply[:500]} {err}")
    return answered, ended


def measure(prefix: Sequence[str], environ: dict[str, str], runs: int, baselines: dict[str, float]) -> None:
    """One row per command, then ``mcp`` (first answer, then exit)."""
    for label, args in COMMANDS:
        print(row(label, series([*prefix, *args], environ, runs), baselines), flush=True)
    samples = [mcp_timed([*prefix, *MCP], environ) for _ in range(runs)]
    print(row("mcp: spawn to initialize answered", [a for a, _ in samples], baselines, cpu=False), flush=True)
    print(row("mcp: spawn to exit (stdin closed)", [e for _, e in samples], baselines), flush=True)


def compare(other: Path, environs: tuple[dict[str, str], dict[str, str]], runs: int) -> None:
    """Each command in process, run alternately from the checkout ``other`` (an earlier revision,
    e.g. ``git worktree add /tmp/old REV``) and from this one, so both see the same load: two rows
    per command (median wall, median CPU) and the ratio new/old of each."""
    trees = (other, REPO)
    for tree in trees:
        bytecode(tree)
    print(f"old ({other}) vs new ({REPO}), alternating, in process:")
    for cwd, environ in zip(trees, environs, strict=True):
        timed([*COMPUTER, *COMMANDS[0][1]], environ, cwd)  # creates the workspace in its data dir
    for label, args in [*COMMANDS, ("mcp: spawn to initialize answered", MCP)]:
        wall: tuple[list[float], list[float]] = ([], [])
        cpu: tuple[list[float], list[float]] = ([], [])
        for _ in range(runs):
            for side, (cwd, environ) in enumerate(zip(trees, environs, strict=True)):
                if args is MCP:
                    wall[side].append(mcp_timed([*COMPUTER, *args], environ, cwd)[0])
                else:
                    wall[side].append(timed([*COMPUTER, *args], environ, cwd))
                cpu[side].append(CPU[-1])
        old, new = (statistics.median(w) * 1000 for w in wall)
        old_cpu, new_cpu = (statistics.median(c) * 1000 for c in cpu)
        print(
            f"  {label:<40} old {old:6.0f} ms (cpu {old_cpu:5.0f})  new {new:6.0f} ms (cpu {new_cpu:5.0f})"
            f"  new/old {_ratio(new / old)} wall {_ratio(new_cpu / old_cpu)} cpu",
            flush=True,
        )


def _ratio(value: float) -> str:
    return f"{value:5.1f}x" if value >= 1 else f"{value:5.2f}x"


def row(label: str, samples: list[float], baselines: dict[str, float], *, cpu: bool = True) -> str:
    """Median wall time (slowest), median CPU time of the same runs, ratios of the wall medians."""
    median = statistics.median(samples)
    used = f"cpu {statistics.median(CPU[-len(samples) :]) * 1000:4.0f}" if cpu else " " * 8
    ratios = "  ".join(f"{_ratio(median / base)} {name}" for name, base in baselines.items())
    return f"  {label:<40} {median * 1000:7.0f} ms (max {max(samples) * 1000:5.0f}, {used})  {ratios}"


COMMANDS: list[tuple[str, list[str]]] = [
    ("tool write", ["tool", "bench", "write", json.dumps({"path": "/workspace/a.txt", "content": "x\n"})]),
    ("tool read", ["tool", "bench", "read", json.dumps({"path": "/workspace/a.txt"})]),
    ("tool grep", ["tool", "bench", "grep", json.dumps({"query": "x"})]),
    ("tool ls", ["tool", "bench", "ls", json.dumps({"path": "/workspace"})]),
    ("tool exec (shell: true)", ["tool", "bench", "exec", json.dumps({"command": "true"})]),
    (
        "tool exec (python: pass)",
        ["tool", "bench", "exec", json.dumps({"command": "pass", "backend": "python"})],
    ),
    ("ls", ["ls"]),
    ("log", ["log", "bench"]),
    ("shell -c 'cat a.txt'", ["shell", "bench", "-c", "cat a.txt"]),
    ("shell -c '!true'", ["shell", "bench", "-c", "!true"]),
]
MCP = ["mcp", "bench"]
_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"},
    },
}


@contextmanager
def loopback_cluster() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _CLUSTER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env(Path(tempfile.gettempdir())),
    )
    assert proc.stdout is not None and proc.stdin is not None
    address = proc.stdout.readline().strip()
    try:
        if not address:
            raise RuntimeError("the loopback cluster did not start")
        yield address
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="invocations per command (default 7)")
    parser.add_argument("--no-cluster", action="store_true", help="skip the joined-cluster section")
    parser.add_argument("--no-local-ray", action="store_true", help="skip the old per-command Ray start")
    parser.add_argument(
        "--compare",
        type=Path,
        metavar="CHECKOUT",
        help="only compare, in process, this checkout's commands with those of CHECKOUT (an earlier revision)",
    )
    opts = parser.parse_args()
    runs = max(1, opts.runs)

    bytecode(REPO)
    with tempfile.TemporaryDirectory(prefix="cli-bench-") as tmp:
        data = Path(tmp) / "data"
        environ = env(data)
        if opts.compare is not None:
            print(f"cli_bench: {runs} runs per command and side, load average {os.getloadavg()[0]:.1f}")
            compare(opts.compare.resolve(), (env(Path(tmp) / "old-data"), environ), runs)
            print(f"load average at the end {os.getloadavg()[0]:.1f}")
            return
        print(f"cli_bench: {runs} runs per command, load average {os.getloadavg()[0]:.1f}")
        baselines = {
            "python": statistics.median(series([sys.executable, "-c", "pass"], environ, runs)),
            "--help": statistics.median(series([*COMPUTER, "--help"], environ, runs)),
        }
        print(f"  {'python -c pass':<40} {baselines['python'] * 1000:7.0f} ms")
        print(f"  {'computer --help':<40} {baselines['--help'] * 1000:7.0f} ms")
        if not opts.no_local_ray:
            start_ray = (
                "import ray; ray.init(include_dashboard=False, num_cpus=1, object_store_memory=78643200, "
                f"_temp_dir={str(Path(tmp) / 'ray')!r}); ray.shutdown()"
            )
            before = series([sys.executable, "-c", start_ray], environ, min(2, runs))
            baselines["local Ray"] = statistics.median(before)
            print(
                f"  {'a local Ray started and stopped (old path)':<40} {baselines['local Ray'] * 1000:7.0f} ms"
            )

        print("in process (no cluster named):")
        measure(COMPUTER, environ, runs, baselines)

        if opts.no_cluster:
            return
        with loopback_cluster() as address:
            joined = env(Path(tmp) / "cluster-data")
            timed([*COMPUTER, "--address", address, *COMMANDS[0][1]], joined)  # creates the owner once
            print(f"joined to a running cluster (--address {address}):")
            measure([*COMPUTER, "--address", address], joined, runs, baselines)


if __name__ == "__main__":
    main()
