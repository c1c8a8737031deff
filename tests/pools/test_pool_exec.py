"""Executions through the backend pools, seen from a client: listing, sync, python, snapshots, spool."""

from __future__ import annotations

import hashlib
import time

from exec_cases import (
    a_conflicted_path_comes_back_with_the_workspace_version,
    a_file_changed_during_a_run_keeps_the_workspace_version,
    a_write_during_a_run_that_changes_nothing_reaches_the_next_run,
)
from runtime.test_fd_budget import OPEN_PAST_THE_SHARE

import computer
from computer.config import Settings
from computer.runtime import ExecSnapshot
from computer.runtime._live import SYNC_INTERVAL

from .pool_helpers import worker_stats


async def test_client_lists_shell_then_python_with_their_descriptions(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        infos = ws.runtime.backends()
    assert [b.id for b in infos] == ["shell", "python"]
    shell, python = infos
    assert shell.protocol == "command" and not shell.callable
    assert python.protocol == "module" and python.callable
    assert "bash" in shell.description and "/workspace" in shell.description
    assert "main(input)" in python.description and "import workspace" in python.description


async def test_shell_through_the_pool_syncs_files_both_ways(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/in.txt", b"from the workspace\n")
        await ws.fs.write_file("/workspace/gone.txt", b"delete me")
        handle = await ws.runtime.exec("cat in.txt > copy.txt; echo more >> copy.txt; rm gone.txt; echo out")
        result = await handle.result()
        assert (result.status, result.exit_code, result.stdout) == ("completed", 0, "out\n")
        assert await ws.fs.read_text("/workspace/copy.txt") == "from the workspace\nmore\n"
        assert not await ws.fs.exists("/workspace/gone.txt")
        assert set(result.pulled) >= {"/workspace/copy.txt", "/workspace/gone.txt"}


async def test_end_to_end_echo_streams_snapshots_and_saves_the_file(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        handle = await ws.runtime.exec("echo hi > /workspace/a; echo out")
        snapshots = [s async for s in handle]
        result = await handle.result()
        assert snapshots[-1].done and snapshots[-1].status == "completed" and snapshots[-1].stdout == "out\n"
        assert (result.status, result.stdout) == ("completed", "out\n")
        assert await ws.fs.read_text("/workspace/a") == "hi\n"


async def test_shell_exit_code_and_stderr_come_back(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        result = await (await ws.runtime.exec("echo kept; echo oops >&2; exit 9")).result()
    assert (result.status, result.exit_code, result.stdout, result.stderr) == (
        "failed",
        9,
        "kept\n",
        "oops\n",
    )


async def test_python_value_and_workspace_module_through_the_pool(cluster: Settings, name: str) -> None:
    source = (
        "import workspace\n"
        "def main(input):\n"
        "    workspace.write_file('/workspace/py.txt', b'written by python')\n"
        "    return {'double': input['x'] * 2, 'seen': workspace.read_text('/workspace/given.txt')}\n"
    )
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        await ws.fs.write_file("/workspace/given.txt", b"given")
        result = await (await ws.runtime.exec(source, backend="python", input={"x": 21})).result()
        assert result.status == "completed", result
        assert result.value == {"double": 42, "seen": "given"}
        assert await ws.fs.read_text("/workspace/py.txt") == "written by python"


async def test_python_workspace_errors_keep_their_class_through_the_pool(
    cluster: Settings, name: str
) -> None:
    source = (
        "import workspace\n"
        "def main(input):\n"
        "    try:\n"
        "        workspace.read_text('/workspace/missing.txt')\n"
        "    except FileNotFoundError as exc:\n"
        "        return [type(exc).__name__, exc.errno, exc.filename]\n"
    )
    async with computer.get_workspace(name) as ws:
        result = await (await ws.runtime.exec(source, backend="python")).result()
    assert result.value == ["FileNotFoundError", 2, "/workspace/missing.txt"]


async def test_snapshots_stream_while_a_command_runs(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        handle = await ws.runtime.exec("for i in 1 2 3 4 5 6; do echo line $i; sleep 0.2; done")
        snapshots: list[ExecSnapshot] = [s async for s in handle]
    running = [s for s in snapshots if not s.done and s.stdout]
    assert len(running) >= 2, snapshots  # output arrived in pieces while the command ran
    assert running[0].stdout.startswith("line 1\n") and running[0].stdout != snapshots[-1].stdout
    assert snapshots[-1].stdout == "".join(f"line {i}\n" for i in range(1, 7))


async def test_long_output_is_tailed_and_spooled_by_the_owner(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        result = await (await ws.runtime.exec("seq 1 5000")).result()
        cut = result.truncated["stdout"]
        assert cut.status == "saved" and cut.first_line == 3001 and cut.path is not None
        assert result.stdout.splitlines()[0] == "3001"
        assert await ws.fs.read_text(cut.path) == "".join(f"{i}\n" for i in range(1, 5001))


async def test_a_warm_mirror_receives_only_changes(cluster: Settings, name: str) -> None:
    prefetched = sum(s["prefetched"] for s in await worker_stats("shell", 2))
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        for i in range(3):
            await ws.fs.write_file(f"/workspace/f{i}", b"x")
        first = await (await ws.runtime.exec("true")).result()
        second = await (await ws.runtime.exec("true")).result()
        await ws.fs.write_file("/workspace/f0", b"changed")
        third = await (await ws.runtime.exec("cat f0")).result()
    assert (first.pushed, second.pushed, third.pushed) == (3, 0, 1)
    assert third.stdout == "changed"
    # The warm runs got their push with the request (the owner computed it for the worker's mirror
    # revision), the change included: no push call back to the owner.
    assert sum(s["prefetched"] for s in await worker_stats("shell", 2)) == prefetched + 2


async def test_a_warm_pooled_run_syncs_both_ways_without_calling_the_owner_back(
    cluster: Settings, name: str
) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        await (await ws.runtime.exec("echo a > a.txt; mkdir d")).result()
        await ws.fs.write_file("/workspace/from-client.txt", "client\n")
        stats = await worker_stats("shell", 2)
        before, prefetched = (sum(s[k] for s in stats) for k in ("callbacks", "prefetched"))
        began = time.monotonic()
        result = await (
            await ws.runtime.exec("cat a.txt from-client.txt; echo b > d/b.txt; rm a.txt")
        ).result()
        took = time.monotonic() - began
        stats = await worker_stats("shell", 2)
        after = sum(s["callbacks"] for s in stats)
        assert (result.status, result.stdout, result.pushed) == ("completed", "a\nclient\n", 1)
        assert {"/workspace/a.txt", "/workspace/d/b.txt"} <= set(result.pulled)
        assert await ws.fs.read_text("/workspace/d/b.txt") == "b\n"
        assert not await ws.fs.exists("/workspace/a.txt")
        # The push came with the run (computed ahead from the live sandbox's mirror revision); the
        # pull is the one call back (a live sandbox keeps syncing, so it settles its mirror itself).
        assert sum(s["prefetched"] for s in stats) == prefetched + 1
        # A run longer than one sync tick (a loaded machine) also syncs while it runs: one look for
        # the workspace's changes per tick, and a pull when the sandbox changed something.
        ticks = int(took / SYNC_INTERVAL)
        assert before + 1 <= after <= before + 1 + 2 * ticks, (after - before, took)
        # The mirror settled from the owner's outcome: the next run pushes nothing and sees it all.
        again = await (await ws.runtime.exec("ls -R")).result()
        assert again.pushed == 0 and "b.txt" in again.stdout and "a.txt" not in again.stdout


async def test_only_the_first_run_on_a_worker_carries_the_owner_handle(cluster: Settings, name: str) -> None:
    size = cluster.shell_pool_size
    before = await worker_stats("shell", size)
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        for i in range(5):
            assert (await (await ws.runtime.exec(f"echo {i}")).result()).stdout == f"{i}\n"
    after = await worker_stats("shell", size)
    runs = sum(s["runs"] for s in after) - sum(s["runs"] for s in before)
    handles = sum(s["owner_handles"] for s in after) - sum(s["owner_handles"] for s in before)
    assert runs == 5 and 1 <= handles <= size


async def test_a_file_changed_during_a_pooled_run_keeps_the_workspace_version(
    cluster: Settings, name: str
) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        await (await ws.runtime.exec("true")).result()  # the workspace's live sandbox on its worker
        await a_file_changed_during_a_run_keeps_the_workspace_version(ws, live=True)


async def test_pooled_runs_keep_workspace_writes_made_while_they_ran(cluster: Settings, name: str) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        await (await ws.runtime.exec("true")).result()  # the workspace's live sandbox on its worker
        await a_write_during_a_run_that_changes_nothing_reaches_the_next_run(ws, live=True)
        await a_conflicted_path_comes_back_with_the_workspace_version(ws, live=True)


async def test_workers_report_the_runs_they_took(cluster: Settings, name: str) -> None:
    before = sum(s["runs"] for s in await worker_stats("python", 2))
    async with computer.get_workspace(name) as ws:
        for _ in range(2):
            assert (await (await ws.runtime.exec("print(1)", backend="python")).result()).stdout == "1\n"
    after = await worker_stats("python", 2)
    assert sum(s["runs"] for s in after) == before + 2
    assert all(s["running"] == [] for s in after)


async def test_assets_publish_in_a_pooled_shell_shares_through_the_owner(
    cluster: Settings, name: str
) -> None:
    from computer.assets import default_store

    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        result = await (await ws.runtime.exec("echo chart > chart.txt && assets publish chart.txt")).result()
        assert result.status == "completed", result.stderr
    url = result.stdout.strip()
    assert url.startswith(cluster.assets_url.rstrip("/") + "/") and url.endswith("/chart.txt")
    key = url[len(cluster.assets_url.rstrip("/")) + 1 :]
    store = default_store(cluster)
    assert await store.get(key) is not None
    assert b"".join([piece async for piece in store.read(key)]) == b"chart\n"


async def test_a_short_run_comes_back_with_exec_and_a_long_one_does_not_wait(
    cluster: Settings, name: str
) -> None:
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        await (await ws.runtime.exec("true")).result()  # warm
        short = await ws.runtime.exec("echo quick")
        long = await ws.runtime.exec("echo started; sleep 3; echo done")
        # The long run's exec answered while it still ran: its snapshots show it running.
        first = await anext(aiter(long))
        assert first.status == "running"
        assert (await long.result()).stdout == "started\ndone\n"
        # A short run that ended within the owner's wait came back with its result already.
        short_result = await short.result()
        assert short_result.stdout == "quick\n"
        assert short_result == await (await ws.runtime.get_exec(short.id)).result()


async def test_directory_times_round_trip_through_a_pool(cluster: Settings, name: str) -> None:
    """A run's directory times reach the workspace (the pull through the pool's codec, deferred small
    pulls included), and the next run sees them in another worker's mirror or a warm one alike."""
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        result = await (await ws.runtime.exec("mkdir -p t/u && touch -d @1500000000 t/u t")).result()
        assert result.status == "completed", result.stderr
        assert result.pulled == ["/workspace/t", "/workspace/t/u"]  # every directory the run made
        result = await (await ws.runtime.exec("touch -d @1400000000 t")).result()
        assert result.status == "completed" and result.pulled == []
        assert (await ws.fs.stat("/workspace/t")).mtime == 1_400_000_000_000
        assert (await ws.fs.stat("/workspace/t/u")).mtime == 1_500_000_000_000
        for _ in range(3):  # both workers of the pool, whichever serves
            result = await (await ws.runtime.exec("stat -c %Y t t/u")).result()
            assert result.stdout == "1400000000\n1500000000\n"
        # The workspace root's own time (the mirror's top, no entry of its state) too: a run's touch of
        # it alone reaches the workspace, and the other worker's mirror (before: never pulled).
        result = await (await ws.runtime.exec("touch -d @1300000000 .")).result()
        assert result.status == "completed" and result.pulled == []
        assert (await ws.fs.stat("/workspace")).mtime == 1_300_000_000_000
        for _ in range(3):
            result = await (await ws.runtime.exec("stat -c %Y .")).result()
            assert result.stdout == "1300000000\n"


async def test_times_finer_than_a_millisecond_round_trip_through_a_pool(cluster: Settings, name: str) -> None:
    """A run's nanoseconds past the ms (``sub_ns``: a file's, a directory's, the root's) cross the
    pool's codec both ways: stored from the worker's pull, set again by every worker's mirror."""
    listing = "stat -c '%n %.9Y' . t t/f"
    expected = ". 1300000000.000000007\nt 1400000000.000300001\nt/f 1500000000.000400123\n"
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        made = "mkdir t && echo x > t/f && touch -d @1500000000.000400123 t/f"
        made += " && touch -d @1400000000.000300001 t && touch -d @1300000000.000000007 ."
        result = await (await ws.runtime.exec(made)).result()
        assert result.status == "completed", result.stderr
        st = await ws.fs.stat("/workspace/t/f")
        assert (st.mtime, st.sub_ns) == (1_500_000_000_000, 400_123)
        for _ in range(3):  # both workers of the pool, whichever serves
            result = await (await ws.runtime.exec(listing)).result()
            assert result.stdout == expected


async def test_a_python_guests_large_write_through_the_pool_lands_whole(cluster: Settings, name: str) -> None:
    """A guest's write of several MiB crosses Ray from the worker's lane thread (``_pool_context``:
    over a MiB, handed to Ray off the worker's loop): it lands whole, reads back in the next run and
    from the client, after a close and reopen too."""
    source = (
        "import hashlib\nimport workspace\n"
        "data = bytes(range(256)) * (12 << 12)\n"
        "workspace.write_file('/workspace/big', data)\n"
        "print(hashlib.sha256(data).hexdigest())"
    )
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        result = await (await ws.runtime.exec(source, backend="python")).result()
        assert (result.status, result.exit_code) == ("completed", 0), result.stderr
        digest = result.stdout.strip()
        check = "import hashlib\nimport workspace\nprint(hashlib.sha256(workspace.read_file('/workspace/big')).hexdigest())"
        again = await (await ws.runtime.exec(check, backend="python")).result()
        assert again.stdout.strip() == digest
    async with computer.get_workspace(name) as ws:
        data = await ws.fs.read_file("/workspace/big")
        assert len(data) == 12 << 20
        assert hashlib.sha256(data).hexdigest() == digest


async def test_a_pools_sandboxes_get_the_descriptor_budget(cluster: Settings, name: str) -> None:
    """A pool worker's sandboxes (shell and python) get each process's share of the descriptor budget
    (``_fd_budget``, read from the worker's host: this one), and a program past it gets EMFILE."""
    from computer.runtime._fd_budget import descriptor_limit, in_force
    from computer.runtime._limits import SandboxLimits

    nofile = descriptor_limit(in_force(SandboxLimits()))
    assert nofile is not None
    async with computer.get_workspace(name) as ws:
        await ws.fs.mkdir("/workspace")
        shell = await (await ws.runtime.exec("ulimit -Hn", timeout=60)).result()
        python = await (await ws.runtime.exec(OPEN_PAST_THE_SHARE, backend="python", timeout=60)).result()
    assert (shell.status, shell.stdout) == ("completed", f"{nofile[1]}\n"), shell
    assert python.status == "completed" and python.stdout.split()[1:] == [str(nofile[1]), "True", "24"], (
        python
    )
