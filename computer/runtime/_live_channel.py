"""A live sandbox's channel to its init (see ``_live``): messages sent (with descriptors), read and
dispatched (a job's start and exit, a request's reply), and a request awaited to its reply. A part of
:class:`~computer.runtime._live.LiveSandbox`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Sequence
from typing import Any

from ._live_jobs import LiveSandboxError
from ._live_parts import Job, fail, host_pid, pages

__all__ = ["LiveChannel"]

log = logging.getLogger("computer.runtime._live")

# Seconds a request to the init (a listing page, a kill) waits for its reply. One not answered in time
# is the init's channel failing (``LiveSandboxError``): a tick's look counts it toward ``TICK_FAILURES``.
REQUEST_TIMEOUT = 10.0


class LiveChannel:
    """The channel to a live sandbox's init (fields and the end: ``LiveSandbox``)."""

    workspace_id: str
    loop: asyncio.AbstractEventLoop
    channel: socket.socket
    dead: str | None
    jobs: dict[str, Job]
    _requests: dict[int, asyncio.Future[dict[str, Any]]]
    _next_ref: int
    _base_procs: frozenset[int]

    def _lost(self, why: str) -> None:
        raise NotImplementedError  # the sandbox's (``LiveSandbox``)

    def _procs(self) -> set[int] | None:
        raise NotImplementedError

    def _readable(self) -> None:
        while True:
            try:
                data = self.channel.recv(1 << 22)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._lost("its first process ended")
                return
            try:
                message = json.loads(data)
            except ValueError:
                log.warning("live sandbox of %s: unreadable message from its init", self.workspace_id)
                continue
            self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        op = message.get("op")
        if op in ("started", "exit"):
            job = self.jobs.get(str(message.get("id")))
            if job is None:
                return
            if op == "started":
                if not job.started.done():
                    job.started.set_result(int(message["pid"]))
                if job.waiting and self._base_procs:  # its host pid: it does not make a sync pause
                    new = (self._procs() or set()) - self._base_procs
                    job.host_pid = host_pid(new, int(message["pid"]))
                return
            if not job.started.done():
                job.started.set_result(0)
            if not job.exited.done():
                job.exited.set_result((int(message["code"]), message.get("error")))
        elif op in ("killed", "ps") or (op == "error" and message.get("ref")):
            future = self._requests.pop(int(message.get("ref") or 0), None)
            if future is not None and not future.done():
                future.set_result(message)
        else:
            log.warning("live sandbox of %s: init says %s", self.workspace_id, message.get("error"))

    def _send(self, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
        if self.dead is not None:
            raise LiveSandboxError(f"the live sandbox ended: {self.dead}")
        data = json.dumps(message).encode()
        for _ in range(200):
            try:
                socket.send_fds(self.channel, [data], list(fds))
                return
            except BlockingIOError:
                time.sleep(0.001)
            except OSError as exc:
                self._lost(f"its init cannot be reached ({exc.strerror})")
                raise LiveSandboxError(f"the live sandbox ended: {self.dead}") from exc
        raise LiveSandboxError("the live sandbox's init does not read its messages")

    def _settle(self) -> None:
        """Fail what waits on the init, the sandbox ended: its jobs' start and exit, and its requests
        (a listing, a kill: ``_listing`` and ``_signal`` answer them). Only the init's loss did the
        requests: an end (``end``, idle, lifetime) left a listing in flight waiting ``REQUEST_TIMEOUT``
        for a reply that never came."""
        error = LiveSandboxError(f"the live sandbox ended: {self.dead}")
        fail([f for job in self.jobs.values() for f in (job.started, job.exited)], error)
        fail(list(self._requests.values()), error)
        self._requests.clear()

    async def _listing(self) -> tuple[list[dict[str, Any]], int]:
        """The init's ``ps`` rows (``pages``): none once the sandbox ended, before or while asked (as
        ``LiveSandboxes.processes`` answers for a workspace whose sandbox is gone)."""
        try:
            return await pages(self._request)
        except LiveSandboxError:
            if self.dead is None:
                raise  # the channel failed (no reply in time, the init could not answer)
            return [], 0

    async def _signal(self, pid: int, sig: int) -> None:
        """Ask the init to signal ``pid``: ``ProcessLookupError`` when it has none, or when the sandbox
        ended, before or while asked (its processes are dead)."""
        try:
            reply = await self._request({"op": "kill", "pid": int(pid), "sig": int(sig)})
        except LiveSandboxError:
            if self.dead is None:
                raise
            raise ProcessLookupError(f"no process {pid}: the live sandbox ended ({self.dead})") from None
        if reply.get("error"):
            raise ProcessLookupError(reply["error"])

    async def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        self._next_ref += 1
        ref = self._next_ref
        future: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self._requests[ref] = future
        try:
            self._send({**message, "ref": ref})
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT):
                    reply = await future
            except TimeoutError:  # (a bare TimeoutError was no channel failure: a tick retried it forever)
                raise LiveSandboxError(
                    f"the live sandbox's init did not answer within {REQUEST_TIMEOUT:g} s"
                ) from None
            if reply.get("op") == "error":  # the init could not answer (it goes on)
                raise LiveSandboxError(f"the live sandbox's init could not answer: {reply.get('error')}")
            return reply
        finally:
            self._requests.pop(ref, None)
