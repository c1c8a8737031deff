"""Where the dashboard reads: the data directory (embedded) and, when a cluster runs, that cluster.

Everything about a workspace is read from its own file, read-only (``FileSystem.open(readonly=True)``)
beside whatever owner holds it: the audit log, the file tree, the exec journal and saved logs. Nothing
is written and no asleep workspace is woken by looking at it. Two things need an owner: the output of
a run *while it runs* (it lives in the owner's memory until the run ends) and the cluster view. An
in-process owner (a ``Workspace`` given to :class:`DataDirSource`) or, in :class:`ClusterSource`, a
client of an awake owner in the cluster provides them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from dataclasses import asdict
from typing import Any

from ..config import Settings
from ..runtime import JOURNAL_DIR
from ..storage import AuditRecord, FileSystem

__all__ = ["ClusterSource", "DataDirSource", "Source"]

_OPEN_STORES = 32  # read-only stores kept open (least recently used closed first)
_RUNS_SHOWN = 50
LIST_TTL = 0.5  # seconds one workspace listing is reused


class DataDirSource:
    """The dashboard's view of one data directory (see the module docstring).

    ``workspaces``: owners living in this process, by name; their running executions stream live.
    """

    mode = "embedded"

    def __init__(self, config: Settings, *, workspaces: Mapping[str, Any] | None = None) -> None:
        self.config = config
        self.owners = dict(workspaces or {})
        self._stores: OrderedDict[str, tuple[FileSystem, int]] = OrderedDict()  # name -> (store, inode)
        self._listing: tuple[float, list[dict[str, Any]]] | None = None

    # -- workspaces ---------------------------------------------------------------------------------

    async def workspaces(self) -> list[dict[str, Any]]:
        """Every workspace: name, state, where, size, last activity, live runs.

        One listing serves every request of the next ``LIST_TTL`` seconds (each open tab asks every
        second, and a listing opens the journal of every awake workspace).
        """
        from ..cli import GlobalOptions, list_workspaces

        now = time.monotonic()
        if self._listing is None or now - self._listing[0] > LIST_TTL:
            rows = await asyncio.to_thread(list_workspaces, GlobalOptions(data_dir=self.config.data_dir))
            self._listing = (time.monotonic(), [asdict(row) for row in rows])
        listed = [dict(row) for row in self._listing[1]]
        for row in listed:
            owner = self._owner(row["name"])
            if owner is not None:  # an owner of this process: its own count is exact
                row["live_runs"] = owner.runtime.active()
                row["state"], row["where"] = "awake", "in this process"
        return listed

    def _owner(self, name: str) -> Any | None:
        """The owner of ``name`` given to this source while it is open: a closed one (its program
        closed the workspace) was still shown awake in this process, with its closed runtime's runs."""
        owner = self.owners.get(name)
        return None if owner is None or getattr(owner, "closed", False) else owner

    def store(self, name: str) -> FileSystem:
        """The read-only store of workspace ``name`` (ENOENT when it has no file here).

        Kept open between requests; reopened when the file was replaced (deleted and made again).
        """
        from ..actors.naming import workspace_file

        path = workspace_file(self.config, name)
        try:
            inode = path.stat().st_ino
        except FileNotFoundError:
            inode = None
        cached = self._stores.pop(name, None)
        if cached is not None and cached[1] != inode:
            cached[0].close()
            cached = None
        if inode is None:
            raise FileNotFoundError(2, "no such workspace here", name)
        if cached is None:
            cached = (FileSystem.open(str(path), readonly=True, garbage_timer=False), inode)
            while len(self._stores) >= _OPEN_STORES:
                self._stores.popitem(last=False)[1][0].close()
        self._stores[name] = cached
        return cached[0]

    def close(self) -> None:
        for store, _ in self._stores.values():
            store.close()
        self._stores.clear()

    # -- audit log ------------------------------------------------------------------------------------

    async def records(self, name: str, *, limit: int = 100, **filters: Any) -> list[AuditRecord]:
        return await self.store(name).audit.query(limit=limit, **filters)

    def follow(self, name: str, since: int) -> AsyncIterator[AuditRecord]:
        """New records as they come, from a store of the stream's own (ENOENT at once when the
        workspace has no file here): one of the shared ones is closed once 32 others were viewed,
        and a stream reading it ended silently."""
        from ..actors.naming import workspace_file

        self.store(name)  # ENOENT, and the same checks, before the stream starts
        own = FileSystem.open(str(workspace_file(self.config, name)), readonly=True, garbage_timer=False)
        return _following(own, since)

    async def links(self, name: str) -> list[AuditRecord]:
        return await self.records(name, kind="share", limit=200)

    # -- runs ----------------------------------------------------------------------------------------

    async def runs(self, name: str) -> list[dict[str, Any]]:
        """The exec journal's records, newest first (status ``running`` while a run goes on)."""
        fs = self.store(name)
        try:
            entries = [e for e in await fs.readdir(JOURNAL_DIR) if e.is_file and e.name.endswith(".json")]
        except FileNotFoundError:
            return []
        entries.sort(key=lambda e: (e.mtime, e.name), reverse=True)
        runs = []
        for entry in entries[:_RUNS_SHOWN]:
            record = await self.run(name, entry.name.removesuffix(".json"))
            if record is not None:
                runs.append(record)
        return runs

    async def run(self, name: str, exec_id: str) -> dict[str, Any] | None:
        try:
            record = json.loads(await self.store(name).read_file(f"{JOURNAL_DIR}/{exec_id}.json"))
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    async def live_runtime(self, name: str) -> Any | None:
        """The runtime of an owner that holds workspace ``name``'s running executions, if reachable."""
        owner = self._owner(name)
        return None if owner is None else owner.runtime

    async def run_output(self, name: str, exec_id: str) -> AsyncIterator[dict[str, Any]]:
        """The run's output: live snapshots while it runs (when its owner is reachable), then the final one."""
        record = await self.run(name, exec_id)
        if record is not None and record.get("status") == "running":
            runtime = await self.live_runtime(name)
            if runtime is not None:
                try:
                    handle = await runtime.get_exec(exec_id)
                    async for snapshot in handle:
                        yield {
                            "status": snapshot.status,
                            "stdout": snapshot.stdout,
                            "stderr": snapshot.stderr,
                            "exit_code": snapshot.exit_code,
                            "live": True,
                        }
                except LookupError:
                    pass
                record = await self.run(name, exec_id)
        if record is None:
            yield {"status": "unknown", "stdout": "", "stderr": "", "exit_code": None, "live": False}
            return
        yield {
            "status": record.get("status"),
            "stdout": record.get("stdout", ""),
            "stderr": record.get("stderr", ""),
            "exit_code": record.get("exit_code"),
            "live": False,
            "note": "" if record.get("status") != "running" else _NOT_LIVE,
        }

    # -- cluster -------------------------------------------------------------------------------------

    async def cluster(self) -> dict[str, Any]:
        """Nodes, exec pools and awake owners (embedded: owners from the directory only)."""
        rows = await self.workspaces()
        return {
            "mode": self.mode,
            "nodes": [],
            "pools": [],
            # ``host``: the owner host holding it (owners="hosted"), as `computer ls` names it.
            "owners": [
                {"name": r["name"], "where": r["where"], "host": r.get("owner_host")}
                for r in rows
                if r["state"] == "awake"
            ],
        }


_NOT_LIVE = (
    "running: its output shows when it ends (live output needs its owner: a dashboard in the same "
    "process, or one started with --address against its cluster)"
)


class ClusterSource(DataDirSource):
    """A running cluster: what :class:`DataDirSource` reads, plus live runs and the cluster view."""

    mode = "cluster"

    def __init__(self, config: Settings) -> None:
        super().__init__(config)
        self._clients: dict[str, Any] = {}
        self._pool_samples: dict[str, tuple[float, int]] = {}

    async def live_runtime(self, name: str) -> Any | None:
        """A client's runtime, only for a workspace awake now (a dashboard never wakes one)."""
        rows = {r["name"]: r for r in await self.workspaces()}
        if rows.get(name, {}).get("state") != "awake":
            return None
        client = self._clients.get(name)
        if client is None:
            import computer

            client = self._clients[name] = await computer.get_workspace(name)
        return client.runtime

    async def cluster(self) -> dict[str, Any]:

        from ..actors import NAMESPACE, ClusterSilentError, listed_nodes, named_actor, named_actors

        view = await super().cluster()
        view["mode"] = self.mode
        # The GCS's answers are bounded (``listed_nodes``): a stopped or wedged GCS used to hold a
        # thread of the default executor per page view for as long as it was silent, until the
        # executor's threads were all taken and every page of the dashboard waited. Silent now: the
        # view says so and shows what it read elsewhere (the directory's owners).
        try:
            nodes = await asyncio.to_thread(listed_nodes)
            actors = await asyncio.to_thread(named_actors)
        except ClusterSilentError as exc:
            view["silent"] = str(exc)
            return view
        view["nodes"] = [
            {
                "id": str(n["NodeID"])[:12],
                "address": n.get("NodeManagerAddress"),
                "cpus": n.get("Resources", {}).get("CPU", 0),
                "memory_gib": round(n.get("Resources", {}).get("memory", 0) / 2**30, 1),
            }
            for n in nodes
            if n.get("Alive")
        ]
        pools: list[dict[str, Any]] = []
        now = time.monotonic()
        samples, self._pool_samples = self._pool_samples, {}  # workers gone since: forgotten
        for actor in actors:
            actor_name = str(actor.get("name", "")) if isinstance(actor, dict) else str(actor)
            if not actor_name.startswith("computer:pool:"):
                continue
            try:
                handle = await asyncio.to_thread(named_actor, actor_name, NAMESPACE)  # bounded, off the loop
                stats: dict[str, Any] = await asyncio.wait_for(handle.stats.remote(), 2.0)
            except Exception:
                continue
            runs = int(stats.get("runs", 0))
            before = samples.get(actor_name)
            self._pool_samples[actor_name] = (now, runs)
            # A worker restarted in place (same name) counts its runs from 0 again: no rate between
            # the two (it was negative), as for a worker seen for the first time.
            rate = (
                None
                if before is None or now <= before[0] or runs < before[1]
                else (runs - before[1]) / (now - before[0])
            )
            pools.append(
                {
                    "worker": actor_name.removeprefix("computer:pool:"),
                    "node": str(stats.get("node_id", ""))[:12],
                    "running": len(stats.get("running", [])),
                    # Runs waiting for a slot, when the worker reports them (admission queue).
                    "queued": stats.get("queued", stats.get("waiting")),
                    "failures": int(stats.get("failures", 0)),
                    "runs": runs,
                    "runs_per_s": None if rate is None else round(rate, 2),
                }
            )
        totals, queued = await _pool_control_status()
        for pool in pools:
            if pool["queued"] is None:
                pool["queued"] = queued.get(str(pool["worker"]))
        view["pools"] = sorted(pools, key=lambda p: str(p["worker"]))
        view["pool_totals"] = totals
        return view


async def _pool_control_status() -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Each pool's queue, running runs, waits and runs/s from the pools' control loop (what ``computer
    status`` prints), and each worker's queue by worker name; nothing when the loop does not answer
    (no exec so far). A worker's own ``stats`` has no queue: runs wait in its admission line, which
    reports to the control loop."""
    from ..actors import NAMESPACE, SCALER_NAME, named_actor

    try:
        scaler = await asyncio.to_thread(named_actor, SCALER_NAME, NAMESPACE)  # bounded, off the loop
        state: dict[str, Any] = await asyncio.wait_for(scaler.status.remote(), 2.0)
    except Exception:
        return [], {}
    totals: list[dict[str, Any]] = []
    queued: dict[str, int] = {}
    for backend, pool in sorted(state.get("pools", {}).items()):
        workers = pool.get("workers", [])
        for worker in workers:
            queued[str(worker.get("name", "")).removeprefix("computer:pool:")] = int(worker.get("queued", 0))
        totals.append(
            {
                "backend": backend,
                "workers": sum(1 for w in workers if w.get("state") != "pending"),
                "pending": sum(1 for w in workers if w.get("state") == "pending"),
                "running": pool.get("running", 0),
                "queued": pool.get("queued", 0),
                "wait_p50": pool.get("wait_p50"),
                "wait_p99": pool.get("wait_p99"),
                "runs_per_s": round(float(pool.get("runs_per_s", 0.0)), 2),
            }
        )
    return totals, queued


Source = DataDirSource


async def _following(fs: FileSystem, since: int) -> AsyncIterator[AuditRecord]:
    try:
        async for record in fs.audit.follow(since=since, poll=0.25):
            yield record
    finally:
        fs.close()
