"""``computer.init``: configure, then connect to (or start) Ray; share the settings with the cluster."""

from __future__ import annotations

import logging
import os
import socket
import threading
from pathlib import Path
from typing import Any

from ..config import Settings, configure, settings
from ._nodes import ClusterSilentError
from .raycompat import kv_get, kv_put, quiet_driver_messages

__all__ = ["adopt", "cluster_settings", "ensure_ray", "init", "published_settings"]

_RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
_TEMP_DIR = "/tmp/computer-ray"  # short: Ray's unix socket paths must stay under ~107 bytes
_KV_KEY = b"computer:settings"
_lock = threading.Lock()
_initialised_here = False


def init(address: str | None = None, *, data_dir: str | Path | None = None, **config: Any) -> Settings:
    """Configure ``computer`` and connect to Ray; idempotent.

    ``config`` holds :class:`~computer.Settings` fields (``hibernate_after=60``, ``redis_url=...``);
    each call replaces the active settings (unset fields come from ``COMPUTER_*`` variables). Ray is
    joined at ``address`` (or ``RAY_ADDRESS``), else started locally and quietly; if this process is
    already connected, that session is used as is. The settings are published in Ray's key-value
    store, so tasks and actors that never called ``init`` resolve workspaces the same way; owners
    receive them explicitly at creation, never through the environment. ``ConnectionError`` when
    nothing answers at a ``HOST:PORT`` address.
    """
    global _initialised_here
    conf = configure(data_dir=data_dir, **config)
    ensure_ray(address, object_store_memory=conf.object_store_memory)
    conf.workspaces_dir.mkdir(parents=True, exist_ok=True)
    _publish(conf)
    _initialised_here = True
    return conf


def adopt(**config: Any) -> Settings:
    """Make the settings of ``config`` (as ``configure`` takes them) this process's, as ``init`` does,
    without publishing them (this process must be connected): a CLI command that joins a cluster
    leaves the cluster's settings as its last ``init`` published them."""
    global _initialised_here
    conf = configure(**config)
    _initialised_here = True
    return conf


def cluster_settings() -> Settings:
    """This process's settings if it called ``init``, else the ones the cluster's last ``init`` published."""
    if _initialised_here:
        return settings()
    import ray

    if not ray.is_initialized():  # no cluster: this process's own settings are the only ones
        return settings()
    published = published_settings()
    # Connected to a cluster on which nobody called computer.init: the defaults.
    return settings() if published is None else published


def published_settings() -> Settings | None:
    """The settings the cluster's last ``init`` published (this process must be connected), or None;
    ``ClusterSilentError`` when the GCS does not answer within ``NODES_TIMEOUT``."""
    try:
        raw = kv_get(_KV_KEY)
    except ClusterSilentError:
        raise  # as it is: the GCS silent past ``NODES_TIMEOUT`` (a ``TimeoutError``)
    except Exception as exc:
        # The settings choose the data directory and the owner's actor name: guessing them locally
        # could open (and create) a different, empty workspace. Fail loudly instead.
        raise RuntimeError(f"cannot read the cluster's settings from Ray's key-value store: {exc}") from exc
    return None if raw is None else Settings.model_validate_json(raw)


def _publish(conf: Settings) -> None:
    kv_put(_KV_KEY, conf.model_dump_json().encode())


def ensure_ray(address: str | None = None, *, object_store_memory: int | None = None) -> None:
    """Connect to Ray unless this process already is (drivers, tasks and actors all are)."""
    import ray

    if ray.is_initialized():
        return
    with _lock:
        if ray.is_initialized():
            return
        for key, value in _RAY_ENV.items():
            os.environ.setdefault(key, value)
        quiet_driver_messages()  # before connecting: messages arrive as soon as it is
        address = address or os.environ.get("RAY_ADDRESS")
        if address:
            _check_reachable(address)
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
            return
        ray.init(
            include_dashboard=False,
            object_store_memory=object_store_memory or settings().object_store_memory,
            _temp_dir=_TEMP_DIR,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast on a ``HOST:PORT`` nobody listens on: ``ray.init`` waits there for minutes, logging
    retries, before it raises. ``auto`` and ``ray://`` addresses are left to Ray."""
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ConnectionError(f"no Ray cluster answers at {address} ({exc.strerror or exc})") from None
