"""A client learns its owner's settings (``describe``) once per distinct settings and process
(building ``Settings`` reads the whole environment: ~20 ms of CPU under load, per ``get_workspace``)."""

from __future__ import annotations

from typing import Any

import pytest

from computer.client import _connection
from computer.client._connection import Connection, owner_settings
from computer.config import Settings


def _describe(config: dict[str, Any]) -> dict[str, Any]:
    return {"name": "w", "managed": True, "epoch": 3, "owner": "o", "config": config}


def test_the_same_owner_settings_are_built_once_and_given_as_copies(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setattr(_connection, "_settings_seen", type(_connection._settings_seen)())
    built: list[dict[str, Any]] = []
    validate = Settings.model_validate

    def counting(values: Any) -> Settings:
        built.append(values)
        return validate(values)

    monkeypatch.setattr(Settings, "model_validate", counting)
    values = Settings(data_dir=str(tmp_path)).model_dump(mode="json")
    first, second = Connection(None, name="w", managed=True), Connection(None, name="w", managed=True)
    first.learn(_describe(values))
    # Every field is given: this process's environment cannot change what the owner reported.
    monkeypatch.setenv("COMPUTER_LOCK_LEASE", "99")
    second.learn(_describe(dict(values)))
    assert len(built) == 1
    assert first.config == second.config == validate(values)
    assert first.config is not second.config  # each its own copy
    assert first.config is not None and first.config.lock_lease != 99
    other = {**values, "lock_lease": 7.0}
    assert owner_settings(other).lock_lease == 7.0 and len(built) == 2


def test_remembered_settings_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_connection, "_settings_seen", type(_connection._settings_seen)())
    values = Settings().model_dump(mode="json")
    for i in range(_connection._SETTINGS_KEPT + 10):
        assert owner_settings({**values, "lock_lease": float(i + 1)}).lock_lease == i + 1
    assert len(_connection._settings_seen) == _connection._SETTINGS_KEPT
