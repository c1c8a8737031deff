"""A run's environment at the limits ``check_env`` takes (``_options.ENV_MAX_*``): 20,000 variables, per
call and live, every one arriving with its value; one more variable, one more byte in all, or one
``NAME=value`` past the kernel's 128 KiB is refused before anything runs, with the reason. Before, 20,000
variables took ~1.4 s of CPU per call in the standby's stub bash alone (it set them as assignments of
its ``exec``: bash's own time grows with the square of the count), 40,000 ~6 s, and an environment
over the kernel's limits failed in the sandbox with "Argument list too long", said twice, exit 126
(127 live). The counts are checked inside the sandbox (work, not time: the cost is in benchmarks/)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import pytest

import computer
from computer.runtime import ShellBackend
from computer.runtime._options import ENV_MAX_BYTES, ENV_MAX_STRING, ENV_MAX_VARIABLES

# The variables' names, and a digest of every NAME=value line, read back in the sandbox: ``read`` and
# ``case`` are bash builtins, so bash starts no program that would rebuild the environment.
COUNT = (
    "n=0; while IFS= read -r -d '' pair; do case $pair in V[0-9]*) n=$((n + 1));; esac;"
    " done < /proc/$$/environ; echo $n; grep -z '^V[0-9]' /proc/$$/environ | LC_ALL=C sort -z | sha256sum"
)


@pytest.fixture(params=[False, True], ids=["per-call", "live"])
async def ws(request: pytest.FixtureRequest) -> AsyncIterator[computer.Workspace]:
    async with computer.Workspace(backends=[ShellBackend(live=request.param)]) as workspace:
        await workspace.fs.mkdir("/workspace/sub", recursive=True)
        yield workspace


def _digest(env: dict[str, str]) -> str:
    return hashlib.sha256(b"".join(sorted(f"{k}={v}\0".encode() for k, v in env.items()))).hexdigest()


async def test_the_largest_environment_taken_reaches_the_program_whole(ws: computer.Workspace) -> None:
    env = {f"V{i}": f"value {i} 'quoted' $HOME `x`\n" for i in range(ENV_MAX_VARIABLES)}
    result = await (
        await ws.runtime.exec(f"pwd -P; {COUNT}", cwd="/workspace/sub", env=env, timeout=300)
    ).result()
    assert result.status == "completed", (result.exit_code, result.stderr)
    cwd, count, digest = result.stdout.split("\n")[:3]
    assert (cwd, int(count)) == ("/workspace/sub", ENV_MAX_VARIABLES)
    assert digest.split()[0] == _digest(env)
    # And a run after it (a standby made meanwhile) gets its own environment only.
    again = await (await ws.runtime.exec(COUNT, env={"V1": "one"})).result()
    assert again.stdout.split("\n")[0] == "1", again


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({f"V{i}": "" for i in range(ENV_MAX_VARIABLES + 1)}, "env has 20,001 variables: at most 20,000"),
        (
            {f"V{i:03d}": "y" * (ENV_MAX_BYTES // 512 - 6) for i in range(512)} | {"W": ""},
            f"env is {ENV_MAX_BYTES + 3:,} bytes",
        ),
        ({"BIG": "x" * (ENV_MAX_STRING - 4)}, f"'BIG' is {ENV_MAX_STRING + 1:,} bytes as NAME=value"),
    ],
    ids=["count", "bytes", "one-string"],
)
async def test_an_environment_past_the_limits_is_refused_with_the_reason(
    ws: computer.Workspace, env: dict[str, str], named: str
) -> None:
    with pytest.raises(ValueError, match="nothing ran") as refused:
        await ws.runtime.exec("echo ran > /workspace/ran", env=env)
    assert named in str(refused.value)
    assert not await ws.fs.exists("/workspace/ran")
    # At the limits themselves, it runs.
    fits = dict(list(env.items())[:-1]) if len(env) > 1 else {"BIG": "x" * (ENV_MAX_STRING - 5)}
    ran = await (await ws.runtime.exec("echo ran", env=fits, timeout=300)).result()
    assert ran.stdout == "ran\n", (ran.exit_code, ran.stderr)
