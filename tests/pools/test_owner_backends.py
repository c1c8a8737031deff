"""``owner_backends``: which pool backends an owner gets, in which order."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from computer.actors.pools import PoolBackend, owner_backends
from computer.config import Settings


def test_shell_comes_first_so_it_is_the_default(ray_session: Any, tmp_path: Path) -> None:
    backends = owner_backends(Settings(data_dir=tmp_path, shell_pool_size=2, python_pool_size=3), "w")
    assert [b.info.id for b in backends] == ["shell", "python"]
    assert all(isinstance(b, PoolBackend) for b in backends)


def test_a_pool_of_size_zero_is_left_out(ray_session: Any, tmp_path: Path) -> None:
    only_python = owner_backends(Settings(data_dir=tmp_path, shell_pool_size=0, python_pool_size=1), "w")
    assert [b.info.id for b in only_python] == ["python"]
    assert owner_backends(Settings(data_dir=tmp_path, shell_pool_size=0, python_pool_size=0), "w") == []


def test_a_minimum_of_zero_with_a_maximum_scales_from_zero(ray_session: Any, tmp_path: Path) -> None:
    config = Settings(data_dir=tmp_path, shell_pool_size=0, shell_pool_max=2, python_pool_size=0)
    assert [b.info.id for b in owner_backends(config, "w")] == ["shell"]


def test_outside_ray_there_are_no_pools_and_no_ray_is_started() -> None:
    code = (
        "from computer.actors.pools import owner_backends\n"
        "from computer.config import Settings\n"
        "import ray\n"
        "print(list(owner_backends(Settings(), 'w')), ray.is_initialized())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[] False"


def _worker_log(pid: int) -> str:
    """What Ray's worker process ``pid`` of this session wrote to its log files (stdout, stderr)."""
    import ray

    logs = Path(ray._private.worker._global_node.get_logs_dir_path())
    return "".join(
        p.read_text(errors="replace") for p in logs.glob(f"worker-*-{pid}.*") if p.suffix in (".err", ".out")
    )


async def test_the_first_owner_asks_a_worker_for_the_pool_description_without_blocking_its_loop(
    ray_session: Any, tmp_path: Path
) -> None:
    """The first owner of a cluster asks a pool worker for the pool's description (none published
    yet). Before: a blocking ``ray.get`` on the owner's event loop, which Ray warned about in the
    owner host's log ("Using blocking ray.get inside async actor"); now it is awaited."""
    from owner_models import process_pid

    import computer
    from computer.actors.raycompat import kv_del

    conf = computer.init(
        data_dir=tmp_path / "data",
        owners="hosted",
        shell_pool_size=0,
        shell_pool_max=1,
        python_pool_size=0,
        python_pool_max=0,
    )
    kv_del(b"computer:pool:info:shell")  # nothing published: this owner asks a worker
    try:
        async with computer.get_workspace("first-description") as ws:
            assert [b.id for b in ws.runtime.backends()] == ["shell"]
            assert (await (await ws.runtime.exec("echo hi")).result()).stdout == "hi\n"
            pid = await process_pid(ws.handle.host)
        text = _worker_log(pid)
        assert ":actor_name:OwnerHost" in text, text[-3000:]
        assert "blocking ray.get" not in text, text[-3000:]
    finally:
        from owner_models import kill_awake_owners

        await kill_awake_owners(("first-description",), conf)
        computer.init(data_dir=tmp_path / "other")


def test_a_constructor_blocks_for_the_same_description_the_awaited_one_gives(
    ray_session: Any, tmp_path: Path
) -> None:
    """``described`` (a dedicated owner's constructor, a ``WorkspaceHost``'s: no coroutine around it)
    asks a worker when nothing is published, publishes what it got, and answers from a thread whose
    own loop runs (an async actor's constructor) as from one with none."""
    import asyncio

    import computer
    from computer.actors import pools
    from computer.actors._pool_registry import described, published_info
    from computer.actors.raycompat import kv_del

    computer.init(
        data_dir=tmp_path / "data", shell_pool_size=0, shell_pool_max=1, python_pool_size=0, python_pool_max=0
    )
    try:
        kv_del(b"computer:pool:info:shell")  # nothing published: a worker is asked
        info = described("shell", pools._scaler_handle)
        assert (info.id, info.protocol) == ("shell", "command")
        assert published_info("shell") == info

        async def in_a_running_loop() -> Any:
            return described("shell", pools._scaler_handle)

        kv_del(b"computer:pool:info:shell")
        assert asyncio.run(in_a_running_loop()) == info
        assert published_info("shell") == info
    finally:
        computer.init(data_dir=tmp_path / "other")
