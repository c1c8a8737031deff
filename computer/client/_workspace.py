"""``WorkspaceClient``: the owner's surface (fs, locks, runtime, assets) from any process of the cluster."""

from __future__ import annotations

import uuid
from types import TracebackType
from typing import Any

from ..storage import current_tool_call
from ..surface import AssetsSurface, FileSystemSurface, LocksSurface, RuntimeSurface
from ._assets import ClientAssets
from ._audit import ClientAudit, default_client_id
from ._connection import Connection
from ._fs import ClientFileSystem
from ._locks import ClientLocks
from ._runtime import ClientRuntime

__all__ = ["WorkspaceClient"]

_READ_ONLY_TOOLS = frozenset({"read", "ls", "find", "grep"})


class WorkspaceClient:
    """A proxy of one workspace; ``id`` equals the owner's (the tools' lock identity).

    Built by :func:`computer.get_workspace` from the owner's description, which is snapshotted: the
    backends and whether assets exist are those of the owner when the client was created.
    """

    def __init__(self, connection: Connection, info: dict[str, Any]) -> None:
        self._conn = connection
        self.id: str = str(info["id"])
        self.name: str = str(info["name"])
        self.client_id = uuid.uuid4().hex
        self._locks = ClientLocks(connection, holder=f"client:{self.client_id}")
        # Typed as the surface protocols, so a client is a ``WorkspaceSurface`` for tools and adapters.
        self.fs: FileSystemSurface = ClientFileSystem(connection)
        self.locks: LocksSurface = self._locks
        # The audit log (SPEC 10); this client's calls, runs and links carry it as their caller.
        self.audit = ClientAudit(connection, default_client_id(self.client_id))
        self.runtime: RuntimeSurface = ClientRuntime(
            connection, list(info["backends"]), caller=self.audit.caller
        )
        assets = ClientAssets(connection, caller=self.audit.caller) if info["has_assets"] else None
        self.assets: AssetsSurface | None = assets
        self._closed = False

    @property
    def handle(self) -> Any:
        """The owner's Ray actor handle (it changes when the owner was re-created)."""
        return self._conn.handle

    async def run_tool(
        self, name: str, args: dict[str, Any], *, options: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Run agent tool ``name`` whole on the owner (one round trip); same result as the tool's ``run``.

        ``options`` are :func:`computer.tools.create_tools` keywords. Exec snapshots are not streamed
        this way: use ``create_tools(client)`` for ``on_update``.
        """
        call = current_tool_call.get()
        if call is not None:
            call.recorded_elsewhere = True  # the owner records the call as it runs it (no extra trip)
        result: dict[str, Any] = await self._conn.request(
            "run_tool",
            name,
            args,
            options,
            self.audit.caller(),
            retry_safe=name in _READ_ONLY_TOOLS,
            waits=name not in _READ_ONLY_TOOLS,  # a path lock, a command's run: not an ordinary call's slot
        )
        return result

    async def close(self) -> None:
        """Release this client's locks. Idempotent; the workspace itself stays open on its owner."""
        if self._closed:
            return
        self._closed = True
        await self._locks.close()
        await self.audit.drain()

    async def __aenter__(self) -> WorkspaceClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"WorkspaceClient(name={self.name!r}, id={self.id!r})"
