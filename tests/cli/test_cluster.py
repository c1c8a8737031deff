"""Running on a cluster: ``cluster.yaml`` is a valid launcher config whose settings are real, and the
CLI (demo, tool, mcp, shell, status) works against a two-node Ray cluster on loopback via --address."""

from __future__ import annotations

import json
import re
import shlex
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from computer.config import Settings

from .conftest import REPO, FakeOpenAI, cli_env, mcp_exchange, run_cli

CLUSTER_YAML = REPO / "cluster.yaml"


def _launcher_config() -> dict[str, Any]:
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = prepare_config(yaml.safe_load(CLUSTER_YAML.read_text()))
    validate_config(config)  # Ray's own schema for `ray up`
    return config


def test_cluster_yaml_is_a_valid_launcher_config_with_head_and_autoscaling_workers() -> None:
    config = _launcher_config()
    workers = config["available_node_types"]["ray.worker.default"]
    assert workers["max_workers"] > workers["min_workers"] >= 1
    assert config["file_mounts"] == {"~/computer": "."}
    assert any("pip install -q -e ~/computer" in c for c in config["setup_commands"])
    assert any("redis-server" in c for c in config["head_start_ray_commands"])
    assert any("computer serve" in c for c in config["head_start_ray_commands"])
    assert any("--address=$RAY_HEAD_IP:6379" in c for c in config["worker_start_ray_commands"])


def test_cluster_yaml_settings_are_real_computer_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    env_command = next(
        c for c in _launcher_config()["setup_commands"] if "~/.computer.env" in c and "printf" in c
    )
    assignments = [word for word in shlex.split(env_command) if "=" in word and word.split("=")[0].isupper()]
    values = dict(a.split("=", 1) for a in assignments)
    computer_vars = {k: v for k, v in values.items() if k.startswith("COMPUTER_")}
    assert {
        "COMPUTER_REDIS_URL",
        "COMPUTER_DATA_DIR",
        "COMPUTER_SHELL_POOL_SIZE",
        "COMPUTER_PYTHON_POOL_SIZE",
    } <= set(computer_vars)
    for key, value in computer_vars.items():  # shell expansions replaced by what a node would have
        value = value.replace("$HOME", "/home/ubuntu")
        monkeypatch.setenv(key, re.sub(r"\$\{RAY_HEAD_IP[^}]*\}\)?\}?", "10.0.0.5", value))
    settings = Settings()  # extra="forbid": an unknown COMPUTER_ name would not be read at all
    assert settings.redis_url == "redis://10.0.0.5:6380/0"
    # each pool's minimum (the maximum is elastic)
    assert settings.shell_pool_size == 4 and settings.python_pool_size == 2
    assert settings.shared_data_dir is False


@pytest.mark.slow
def test_demo_runs_on_a_two_node_cluster_with_a_model_behind_an_openai_endpoint(
    two_node_cluster: str, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    env = cli_env(OPENAI_BASE_URL=fake_openai.base_url, OPENAI_API_KEY="sk-fake")
    proc = run_cli(
        [
            "--data-dir",
            str(tmp_path),
            "demo",
            "--agents",
            "2",
            "--address",
            two_node_cluster,
            "--model",
            "fake-llm",
        ],
        env=env,
        timeout=240,
    )
    explain = f"{proc.stdout[-5000:]}\n{proc.stderr[-5000:]}"
    assert proc.returncode == 0, explain
    assert "Ray joined" in proc.stdout
    assert "agents: 2/2 green (model: fake-llm)" in proc.stdout
    assert "identical)" in proc.stdout  # the persistence line
    assert any(r["model"] == "fake-llm" for r in fake_openai.requests)


@pytest.mark.slow
def test_tool_calls_through_the_cluster_print_json(two_node_cluster: str, tmp_path: Path) -> None:
    name = f"cli-{uuid.uuid4().hex[:8]}"
    base = ["--data-dir", str(tmp_path), "--address", two_node_cluster, "tool", name]
    env = cli_env()

    wrote = run_cli(
        [*base, "write", json.dumps({"path": "/workspace/notes/a.txt", "content": "one\ntwo\n"})], env=env
    )
    assert wrote.returncode == 0, wrote.stderr
    assert json.loads(wrote.stdout) == {"path": "/workspace/notes/a.txt", "bytesWritten": 8}

    ran = run_cli([*base, "exec", json.dumps({"backend": "shell", "command": "wc -l notes/a.txt"})], env=env)
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert result["exitCode"] == 0 and result["stdout"].strip() == "2 notes/a.txt"

    missing = run_cli([*base, "read", json.dumps({"path": "/workspace/nope.txt"})], env=env)
    assert missing.returncode == 1
    assert "nope.txt" in json.loads(missing.stdout)["error"]

    listed = run_cli(["--data-dir", str(tmp_path), "ls", "--json"], env=env)
    assert [row["name"] for row in json.loads(listed.stdout)] == [name]


@pytest.mark.slow
def test_mcp_answers_initialize_and_lists_the_tools_over_stdio(two_node_cluster: str, tmp_path: Path) -> None:
    name = f"mcp-{uuid.uuid4().hex[:8]}"
    replies = mcp_exchange(["--data-dir", str(tmp_path), "--address", two_node_cluster, "mcp", name])
    initialize, listing = replies
    assert initialize["id"] == 1 and initialize["result"]["serverInfo"]["name"] == "computer"
    names = {tool["name"] for tool in listing["result"]["tools"]}
    assert names >= {"read", "ls", "find", "grep", "write", "edit", "delete", "exec", "publish"}


@pytest.mark.slow
def test_shell_reads_commands_from_stdin(two_node_cluster: str, tmp_path: Path) -> None:
    name = f"sh-{uuid.uuid4().hex[:8]}"
    script = "!mkdir -p /workspace/d && echo hello > /workspace/d/f.txt\nls d\ncat d/f.txt\nexit\n"
    proc = run_cli(
        ["--data-dir", str(tmp_path), "--address", two_node_cluster, "shell", name],
        env=cli_env(),
        input=script,
    )
    assert proc.returncode == 0, proc.stderr
    assert "f.txt" in proc.stdout and "hello" in proc.stdout


@pytest.mark.slow
def test_status_shows_both_nodes_and_the_pools(two_node_cluster: str, tmp_path: Path) -> None:
    proc = run_cli(["--data-dir", str(tmp_path), "--address", two_node_cluster, "status"], env=cli_env())
    assert proc.returncode == 0, proc.stderr
    assert "2 node(s)" in proc.stdout
    assert "exec pools:" in proc.stdout and "dedicated workspace owners:" in proc.stdout
    assert "owner hosts:" in proc.stdout
