"""A reader racing the owner's audit commits, placed for certain: the owner commits a record right after
a reader's first query (``AuditLog.read`` on another connection). Imported by its bare name (``tests/``
is the root on ``sys.path``, as for ``exec_cases``)."""

from __future__ import annotations

from typing import Any

import pytest

from computer.storage import AuditLog, AuditRecord


def commit_after_the_first_query(
    monkeypatch: pytest.MonkeyPatch, owner: Any, tool: str = "late"
) -> list[bool]:
    """Patch ``AuditLog.read`` so that the first read of any log but ``owner.audit`` is followed at once
    by ``owner`` committing a ``tool`` record; the list returned holds ``True`` once that happened."""
    real_read = AuditLog.read
    done: list[bool] = []

    def read(self: AuditLog, **kwargs: Any) -> list[AuditRecord]:
        records = real_read(self, **kwargs)
        if self is not owner.audit and not done:
            done.append(True)
            owner.audit.record("tool", tool=tool, status="ok")  # the owner commits now
            owner.audit.flush()
        return records

    monkeypatch.setattr(AuditLog, "read", read)
    return done
