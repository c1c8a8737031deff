"""``computer demo --agents 4`` end to end on the embedded default (a local Ray it starts, no Redis),
in a temporary data directory of its own, then ``computer serve`` answering one of its links,
``computer ls`` showing its workspaces asleep and ``computer rm`` removing them.

One demo run (a subprocess, with HOME and TMPDIR of its own) is shared by the tests of this module.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from .conftest import COMPUTER, REPO, cli_env, free_port, run_cli

pytestmark = pytest.mark.slow

AGENTS = 4
LINK = re.compile(r"^  (demo-agent-\d+)  (\S+)  (http://\S+)$", re.MULTILINE)


@dataclass
class DemoRun:
    home: Path
    tmp: Path
    data_dir: Path
    pid: int
    returncode: int
    stdout: str
    stderr: str

    def explain(self) -> str:
        return f"exit {self.returncode}\n--- stdout\n{self.stdout[-6000:]}\n--- stderr\n{self.stderr[-6000:]}"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoRun]:
    home = tmp_path_factory.mktemp("home")
    # The sandbox user must reach the runs' scratch space under $TMPDIR: pytest's base is private (0700).
    scratch = Path(tempfile.mkdtemp(prefix="demo-tmp-", dir="/tmp"))
    scratch.chmod(0o755)
    env = {k: v for k, v in cli_env().items() if k != "COMPUTER_DATA_DIR"}
    env.update(HOME=str(home), TMPDIR=str(scratch), COLUMNS="80")
    proc = subprocess.Popen(
        [*COMPUTER, "demo", "--agents", str(AGENTS)],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        pytest.fail(f"the demo did not finish within 240 s\n{stdout[-4000:]}\n{stderr[-4000:]}")
    found = re.search(r"^data directory: (\S+) \(new, temporary", stdout, re.MULTILINE)
    data_dir = Path(found.group(1)) if found else scratch / "not-printed"
    yield DemoRun(home, scratch, data_dir, proc.pid, proc.returncode, stdout, stderr)
    shutil.rmtree(scratch, ignore_errors=True)


def test_the_demo_runs_in_a_temporary_data_directory_of_its_own(demo_run: DemoRun) -> None:
    assert demo_run.returncode == 0, demo_run.explain()
    assert demo_run.data_dir.name.startswith("computer-demo-") and demo_run.data_dir.is_dir()
    assert demo_run.data_dir.parent == demo_run.tmp  # made in the temp directory ($TMPDIR)
    assert not (demo_run.home / ".local" / "share" / "computer").exists()  # the default data dir
    where = str(demo_run.data_dir)
    assert f"links: run `computer --data-dir {where} serve` in another terminal" in demo_run.stdout
    assert f"remove this run: rm -rf {where}" in demo_run.stdout


def test_no_ray_messages_or_colour_codes_in_the_output(demo_run: DemoRun) -> None:
    for stream in (demo_run.stdout, demo_run.stderr):
        assert "(raylet)" not in stream and "\x1b[" not in stream, demo_run.explain()
        assert "worker processes have been started" not in stream


def test_the_table_fits_80_columns_and_explains_its_columns(demo_run: DemoRun) -> None:
    table = demo_run.stdout.split(f"{AGENTS} agents, model: scripted")[1].split("agents: ")[0]
    assert max(len(line) for line in table.splitlines()) <= 80, table
    assert "2 runs, pass" in table and "how many times the agent ran its tests" in table


def test_every_agent_finishes_green_with_a_report_link(demo_run: DemoRun) -> None:
    assert demo_run.returncode == 0, demo_run.explain()
    assert f"agents: {AGENTS}/{AGENTS} green (model: scripted)" in demo_run.stdout
    links = LINK.findall(demo_run.stdout)
    assert sorted(name for name, _, _ in links) == [f"demo-agent-{i}" for i in range(AGENTS)]
    assert len({project for _, project, _ in links}) == AGENTS  # different projects
    assert "Traceback" not in demo_run.stderr


def test_summary_shows_tool_calls_latency_persistence_and_wall_time(demo_run: DemoRun) -> None:
    calls = re.search(
        r"tool calls: (\d+) \((\d+) errors\), latency p50 ([\d.]+) ms, p99 ([\d.]+) ms", demo_run.stdout
    )
    assert calls is not None, demo_run.explain()
    assert int(calls.group(1)) == 10 * AGENTS and int(calls.group(2)) == 0
    assert 0 < float(calls.group(3)) <= float(calls.group(4))
    # The same per tool (the slow end is exec running the project's tests, not the file tools).
    per_tool = re.findall(r"(\w+) (\d+) \(p50 ([\d.]+) ms, p99 ([\d.]+) ms\)", demo_run.stdout)
    assert "exec" in {name for name, _, _, _ in per_tool}, demo_run.explain()
    assert sum(int(count) for _, count, _, _ in per_tool) == int(calls.group(1))
    persistence = re.search(
        r"persistence: demo-agent-\d+ hibernated [\d.]+ s after its last call; a fresh client read its report "
        r"back \((\d+) bytes, identical\)",
        demo_run.stdout,
    )
    assert persistence is not None and int(persistence.group(1)) > 100, demo_run.explain()
    wall = re.search(r"wall time: ([\d.]+) s", demo_run.stdout)
    assert wall is not None and float(wall.group(1)) < 240


def test_the_ray_it_started_is_gone_when_it_exits(demo_run: DemoRun) -> None:
    # A Ray started by a driver names its session after the driver's pid, in every process's arguments.
    session = re.compile(rf"session_[\d_-]+_{demo_run.pid}\b")
    deadline = time.monotonic() + 30
    while True:
        left = [pid for pid, args in _processes() if session.search(args)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)  # Ray's last workers exit asynchronously after shutdown; /proc has no event to await
    assert left == [], f"Ray processes of the demo still running: {left}"


def test_no_scratch_directory_of_its_processes_is_left_in_the_temp_directory(demo_run: DemoRun) -> None:
    # The Ray workers it started exit after its shutdown without their exit handlers; the demo reaps
    # their scratch directories (`computer-<pid>-<start>-<uid>`) before it exits. The shared entries
    # (`computer-shared-*`: /etc, bubblewrap probes) are kept on purpose, for the next process.
    assert demo_run.returncode == 0, demo_run.explain()
    left = sorted(
        p.name for p in demo_run.tmp.iterdir() if re.match(r"computer-(\d+-\d+|etc-|shell-)", p.name)
    )
    assert left == [], left


def test_serve_answers_a_published_link(demo_run: DemoRun) -> None:
    links = LINK.findall(demo_run.stdout)
    assert links, demo_run.explain()
    _, project, url = links[0]
    port = free_port()
    server = subprocess.Popen(
        [*COMPUTER, "--data-dir", str(demo_run.data_dir), "serve", "--port", str(port)],
        env=cli_env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        banner = server.stdout.readline()  # printed just before listening
        assert f"on http://127.0.0.1:{port}" in banner
        response = _get_when_listening(f"http://127.0.0.1:{port}{urlsplit(url).path}", server)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/markdown")
        assert response.text.startswith(f"# Report: {project}")
        assert httpx.get(f"http://127.0.0.1:{port}/no/such/link.md").status_code == 404
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_dashboard_transcripts_and_the_audit_log_show_what_each_agent_did(demo_run: DemoRun) -> None:
    # Issue 21: the demo prints the dashboard's address, keeps each agent's transcript in its workspace
    # and its tool calls carry the agent's name in the workspace's audit log.
    assert re.search(r"^dashboard: http://127\.0\.0\.1:\d+/", demo_run.stdout, re.MULTILINE), (
        demo_run.explain()
    )
    where = ["--data-dir", str(demo_run.data_dir)]
    name = "demo-agent-2"
    proc = run_cli([*where, "tool", name, "read", '{"path": "/.computer/transcript.json"}'], env=cli_env())
    assert proc.returncode == 0, proc.stderr
    transcript = json.loads(json.loads(proc.stdout)["content"])
    roles = [message["role"] for message in transcript]
    assert roles[:2] == ["system", "user"] and "assistant" in roles and "tool" in roles
    proc = run_cli([*where, "log", name, "--json", "--tool", "write"], env=cli_env())
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert records and all(r["tool"] == "write" and r["caller"]["agent"] == name for r in records)


def test_ls_lists_the_demo_workspaces_asleep_with_their_size(demo_run: DemoRun) -> None:
    proc = run_cli(["--data-dir", str(demo_run.data_dir), "ls", "--json"], env=cli_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    rows = {row["name"]: row for row in json.loads(proc.stdout)}
    assert set(rows) == {f"demo-agent-{i}" for i in range(AGENTS)}
    assert all(row["size"] > 0 and row["live_runs"] == 0 for row in rows.values())
    assert {row["state"] for row in rows.values()} == {"asleep"}  # the demo put its owners to sleep


def test_the_report_diff_keeps_the_first_lines_indentation(demo_run: DemoRun) -> None:
    proc = run_cli(
        [
            "--data-dir",
            str(demo_run.data_dir),
            "tool",
            "demo-agent-0",
            "read",
            '{"path": "/workspace/project/REPORT.md"}',
        ],
        env=cli_env(),
        timeout=60,
    )
    report = json.loads(proc.stdout)["content"]
    diff = report.split("```diff\n")[1].split("```")[0]
    assert re.match(r" +\d+ ", diff), (
        diff
    )  # "  5     return ...": line numbers right-aligned from the first line


def _get_when_listening(url: str, server: subprocess.Popen[str]) -> httpx.Response:
    deadline = time.monotonic() + 30
    while True:
        try:
            return httpx.get(url, timeout=5)
        except httpx.ConnectError:
            assert server.poll() is None, "computer serve exited"
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # uvicorn binds right after the banner; connection refused until then


def _processes() -> Iterator[tuple[int, str]]:
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        yield int(entry.name), raw.replace(b"\0", b" ").decode("utf-8", "replace")


def test_a_later_command_with_a_new_local_ray_reads_a_demo_report(demo_run: DemoRun) -> None:
    # A new Ray has new node ids: the workspace's directory record names a node that no longer exists.
    proc = run_cli(
        [
            "--data-dir",
            str(demo_run.data_dir),
            "tool",
            "demo-agent-1",
            "read",
            '{"path": "/workspace/project/REPORT.md"}',
        ],
        env=cli_env(),
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["content"].startswith("# Report: text#2")


def test_rm_prefix_removes_the_demo_workspaces_and_their_links(demo_run: DemoRun) -> None:
    # Last in this module: it deletes what the other tests read.
    proc = run_cli(["--data-dir", str(demo_run.data_dir), "rm", "--prefix", "demo-", "--yes"], env=cli_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("deleted demo-agent-") == AGENTS and "1 share link(s)" in proc.stdout
    assert not list((demo_run.data_dir / "workspaces").glob("*.sqlite*"))
