"""One workspace inside an owner host (``_hosts.py``): :class:`HostedWorkspace`, the same per-workspace
logic as a dedicated owner (:class:`OwnerActor`) on an event loop and thread of its own, and
:func:`construct`, which opens one there.

What differs from a dedicated owner: the host renews every lease it holds in one write per round
(``renews_own_lease`` False), settings and the directory connection are the host's, pool workers call
the workspace back through its :class:`HostedHandle`, a lease names the host, and closing tells the
host (``leaving``, then ``gone``), which forgets the object; the next call opens the workspace again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..config import Settings
from ._host_placement import HostedHandle, claim_to_create
from ._lease import owner_id
from ._loop_thread import LoopThread
from ._owner import OwnerActor
from ._pool_callbacks import owner_token
from .directory import Directory

if TYPE_CHECKING:
    from ._hosts import OwnerHost

__all__ = ["HostedWorkspace", "construct"]

T = TypeVar("T")


class HostedWorkspace(OwnerActor):
    """A managed owner living inside an :class:`OwnerHost` (constructed on its own loop thread)."""

    managed = True
    renews_own_lease = False  # the host renews every lease it holds in one write per round

    def __init__(self, name: str, config: Settings, host: OwnerHost, thread: LoopThread) -> None:
        self._host_obj = host
        self._thread = thread
        self._left = False
        super().__init__(name, config)
        # The host's groups (a host of an older version has none: the default group then).
        self.probe_group = host.probe_group
        self.control_group = host.control_group
        self.wait_group = host.wait_group
        self.stream_group = host.stream_group

    async def _on_own_loop(self, call: Awaitable[T], gone: Callable[[], T] | None = None) -> T:
        return await call  # the host's ``ws_call`` hands every call to this workspace's loop

    def _configure(self, config: Settings) -> Settings:
        return config  # the host's, which configured the process once (every workspace here shares it)

    def _open_directory(self) -> Directory:
        return self._host_obj.directory  # one connection per host, not one per workspace (thread-safe)

    def _backends(self) -> Sequence[Any]:
        # Pool workers call the owner back through the handle a run carries: this workspace's
        # HostedHandle, not the host's actor handle (``current_actor``, what a pool backend assumes).
        backends = super()._backends()
        handle = HostedHandle(self._host_obj.handle, self.name, self._host_obj.host_name)
        for backend in backends:
            if getattr(backend, "_owner", False) is None:  # a PoolBackend that has not met its owner
                backend._owner = handle
                backend._token = owner_token()
        return backends

    def _new_owner_id(self) -> str:
        # The lease says which host holds it (``computer ls`` shows it): "<host name>#<pid>~<place>/<uuid>".
        return owner_id(self._host_obj.host_name)

    async def close_workspace(self) -> None:
        """Close the workspace, release the lease and leave the host (the next call opens it again)."""
        await self._leave(hibernating=False)

    async def _close_for_deletion(self) -> None:
        await self._leave(hibernating=False)  # the host forgets it: the next call opens it (refused)

    async def _leave(self, *, hibernating: bool, release: bool = True) -> None:
        """Close (hibernation, fenced, closed on request) and tell the host, which forgets this object."""
        if self._left:
            return
        self._left = True
        host = self._host_obj
        host.loop.call_soon_threadsafe(host.leaving, self)
        try:
            await self._close_quietly(hibernating=hibernating, release=release)
        finally:
            host.loop.call_soon_threadsafe(host.gone, self)


async def construct(name: str, config: Settings, host: OwnerHost, thread: LoopThread) -> HostedWorkspace:
    """Open a workspace (on its own loop: the constructor's background tasks belong to that loop),
    once its pools' descriptions are known (awaited: the constructor would block this loop on them)."""
    from .pools import describe_pools

    claim_to_create(config, host.directory, name, host.node)  # a new name: this node's claim, or moved
    await describe_pools(config)
    return HostedWorkspace(name, config, host, thread)
