"""The audit log in the workspace's own file: records, retention, redaction, query, follow, readers."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from computer import Workspace
from computer.storage import FileSystem, audit_caller
from computer.storage._redact import redact, scrub
from computer.storage._schema import SCHEMA_VERSION
from computer.tools import create_tools


async def test_a_tool_call_leaves_one_record_with_its_outcome_and_caller(tmp_path: Path) -> None:
    async with Workspace(str(tmp_path / "w.sqlite")) as ws:
        tools = create_tools(ws)
        with audit_caller(agent="agent-7", adapter="custom"):
            await tools["write"].run({"path": "/a.txt", "content": "hello"})
        await tools["read"].run({"path": "/missing.txt"})
        ok, failed = await ws.audit.query()
    assert (ok.kind, ok.tool, ok.status, ok.error) == ("tool", "write", "ok", None)
    assert ok.caller == {"client": "local", "agent": "agent-7", "adapter": "custom"}
    assert ok.args == {"path": "/a.txt", "content": "hello"}
    assert ok.detail["bytes_in"] == len("/a.txt") + len("hello") + len("path") + len("content")
    assert ok.detail["bytes_out"] > 0 and ok.duration_ms is not None and ok.duration_ms >= 0
    assert ok.time.tzinfo is UTC and abs(datetime.now(UTC) - ok.time) < timedelta(minutes=1)
    assert (failed.tool, failed.status) == ("read", "error")
    assert failed.error is not None and "/missing.txt" in failed.error
    assert failed.caller == {"client": "local"}
    assert failed.id > ok.id


async def test_records_survive_reopening_the_file(tmp_path: Path) -> None:
    path = str(tmp_path / "w.sqlite")
    async with Workspace(path) as ws:
        await create_tools(ws)["ls"].run({"path": "/"})
    async with Workspace(path) as ws:
        (record,) = await ws.audit.query()
    assert record.tool == "ls" and record.status == "ok"


async def test_a_lone_surrogate_in_one_call_loses_no_record_of_its_batch() -> None:
    """``json.loads`` takes a model's broken emoji escape (``"\\ud83d"``); SQLite takes only UTF-8. Its
    record failed the insert of the whole batch: 3 clean calls, the bad one and 3 more left nothing."""
    async with Workspace() as ws:
        tools = create_tools(ws)
        for path in ["/", "/", "/", "/tmp/\ud83d", "/", "/", "/"]:
            await tools["ls"].run({"path": path})
        ws.audit.flush()
        records = await ws.audit.query()
        assert len(records) == 7 and ws.audit.dropped == 0
        bad = records[3]
        assert bad.status == "error" and bad.args == {"path": "/tmp/\ud83d"}  # the same string back
        assert bad.error is not None and "not valid UTF-8" in bad.error


async def test_invalid_arguments_and_a_cancelled_call_are_recorded_as_errors() -> None:
    async with Workspace() as ws:
        tools = create_tools(ws)
        await tools["read"].run({"path": "/x", "bogus": 1})
        async with ws.locks.hold(["/held.txt"]):
            call = asyncio.create_task(tools["write"].run({"path": "/held.txt", "content": "x"}))
            await asyncio.sleep(0.05)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
        bad, cancelled = await ws.audit.query()
    assert bad.status == "error" and bad.error is not None and "bogus" in bad.error
    assert (cancelled.tool, cancelled.status, cancelled.error) == ("write", "error", "cancelled")


def test_secret_looking_values_are_redacted_everywhere() -> None:
    assert scrub({"api_key": "abc", "headers": {"Authorization": "Bearer x"}, "n": 1}) == {
        "api_key": "[redacted]",
        "headers": {"Authorization": "[redacted]"},
        "n": 1,
    }
    text = (
        "export OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstu; curl -H 'Authorization: Bearer tok123456' "
        "--password hunter22 https://x AKIAABCDEFGHIJKLMNOP ghp_abcdefghijklmnopqrstuvwxyz0123 path=/src/a.py"
    )
    cleaned = redact(text)
    for secret in (
        "sk-proj-abcdefghijklmnopqrstu",
        "tok123456",
        "hunter22",
        "AKIAABCDEFGHIJKLMNOP",
        "ghp_abc",
    ):
        assert secret not in cleaned
    assert "OPENAI_API_KEY=[redacted]" in cleaned and "path=/src/a.py" in cleaned
    prose = "the token budget is 5; author: Jane; pass the passthrough test"
    assert redact(prose) == prose
    key = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----"
    assert redact(f"a {key} b") == "a [redacted] b"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ('curl -H "Authorization: token abc123" https://x', "abc123"),
        ('curl -H \'Authorization: Digest username="u", response="9f8e7d"\' x', "9f8e7d"),
        ("git clone https://user:pa55word@github.com/x.git", "pa55word"),
        ("psql postgres://bob:pw42@db/x", "pw42"),
        ("export GL=glpat-abcdefghijklmnopqrstuv", "glpat-abcdefghijklmnopqrstuv"),
        ("curl -u user:hunter2 https://x", "hunter2"),
        ("curl --user=bob:s3cr3t x", "s3cr3t"),
        ("mysql -u root -pS3cret db", "S3cret"),
        ("mysqldump -h h -psecretpw db > dump.sql", "secretpw"),
    ],
)
def test_credentials_in_fixed_places_are_redacted(text: str, secret: str) -> None:
    cleaned = redact(text)
    assert secret not in cleaned and "[redacted]" in cleaned, cleaned


@pytest.mark.parametrize(
    "text",
    ["git push -u origin main", "sort -u names.txt", "see https://example.com/a:b@c", "ssh://git@host/x"],
)
def test_look_alikes_of_fixed_places_are_kept(text: str) -> None:
    assert redact(text) == text


async def test_large_values_are_cut_and_secrets_in_them_still_redacted() -> None:
    async with Workspace() as ws:
        content = "token: sk-abcdefghijklmnopqrstuvwx " + "x" * 100_000
        await create_tools(ws)["write"].run({"path": "/big.txt", "content": content})
        (record,) = await ws.audit.query()
    kept = record.args["content"]
    assert len(kept) < 400 and kept.endswith(f"({len(content)} chars)")
    assert "sk-abc" not in kept and "[redacted]" in kept
    assert record.detail["bytes_in"] >= len(content)


async def test_retention_keeps_the_newest_records_within_count_and_bytes() -> None:
    fs = FileSystem.open(None)
    fs.audit.configure(max_records=50)
    for i in range(120):
        fs.audit.record("tool", tool=f"t{i}", status="ok")
    fs.audit.flush()
    kept = fs.audit.read(limit=1000)
    assert 45 <= len(kept) <= 50 and kept[-1].tool == "t119"
    assert [r.id for r in kept] == sorted(r.id for r in kept) and kept[0].id > 1
    fs.audit.configure(max_records=10_000, max_bytes=20_000)
    for _ in range(200):
        fs.audit.record("tool", tool="big", status="ok", args={"v": "y" * 200})
    fs.audit.flush()
    stored = fs._store.db.one("SELECT sum(size) FROM audit")[0]
    assert stored <= 20_000 and fs.audit.read(limit=1)[0].tool == "big"
    fs.close()


async def test_ids_never_repeat_after_a_trim(tmp_path: Path) -> None:
    path = str(tmp_path / "w.sqlite")
    fs = FileSystem.open(path)
    fs.audit.configure(max_records=2)
    for i in range(5):
        fs.audit.record("tool", tool=f"t{i}", status="ok")
        fs.audit.flush()
    ids = [r.id for r in fs.audit.read()]
    assert ids[-1] == 5
    fs.close()


async def test_query_filters_and_pages(tmp_path: Path) -> None:
    fs = FileSystem.open(None)
    for i in range(10):
        fs.audit.record("tool", tool="read" if i % 2 else "write", status="error" if i % 3 == 0 else "ok")
    fs.audit.record("exec", tool="shell", status="ok")
    newest = await fs.audit.query(limit=3)
    assert [r.id for r in newest] == [9, 10, 11]
    assert {r.tool for r in await fs.audit.query(tool="read", limit=100)} == {"read"}
    assert [r.id for r in await fs.audit.query(status="error")] == [1, 4, 7, 10]
    assert [r.kind for r in await fs.audit.query(kind="exec")] == ["exec"]
    page = await fs.audit.query(since=0, limit=4)
    assert [r.id for r in page] == [1, 2, 3, 4]
    assert [r.id for r in await fs.audit.query(since=page[-1].id, limit=4)] == [5, 6, 7, 8]
    later = datetime.now(UTC) + timedelta(hours=1)
    assert await fs.audit.query(since=later) == []
    assert len(await fs.audit.query(since=datetime.now(UTC) - timedelta(hours=1))) == 11
    with pytest.raises(ValueError):
        await fs.audit.query(status="fine")
    fs.close()


async def test_follow_yields_new_records_as_they_are_written() -> None:
    async with Workspace() as ws:
        tools = create_tools(ws)
        await tools["ls"].run({"path": "/"})  # before follow: not yielded
        seen: list[str] = []

        async def watch() -> None:
            async for record in ws.audit.follow(status="ok"):
                seen.append(str(record.tool))
                if len(seen) == 2:
                    return

        watcher = asyncio.create_task(watch())
        await asyncio.sleep(0.05)
        await tools["write"].run({"path": "/a", "content": "1"})
        await tools["read"].run({"path": "/missing"})  # an error: filtered out
        await tools["read"].run({"path": "/a"})
        await asyncio.wait_for(watcher, 5)
    assert seen == ["write", "read"]


async def test_a_read_only_reader_follows_another_writer(tmp_path: Path) -> None:
    path = str(tmp_path / "w.sqlite")
    owner = Workspace(path)
    reader = FileSystem.open(path, readonly=True)
    try:

        async def first() -> str:
            async for record in reader.audit.follow(poll=0.05):
                return str(record.tool)
            return ""

        task = asyncio.create_task(first())
        await asyncio.sleep(0.1)
        await create_tools(owner)["ls"].run({"path": "/"})
        assert await asyncio.wait_for(task, 5) == "ls"
        with pytest.raises(OSError) as caught:
            await reader.write_file("/x", b"no")
        assert caught.value.errno == 30  # EROFS
        reader.audit.record("tool", tool="never", status="ok")  # refused quietly
        assert [r.tool for r in await owner.audit.query()] == ["ls"]
    finally:
        reader.close()
        await owner.close()


async def test_a_fenced_out_owner_records_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "w.sqlite")
    old = FileSystem.open(path, fence=1)
    new = FileSystem.open(path, fence=2)
    old.audit.record("tool", tool="zombie", status="ok")
    old.audit.flush()
    new.audit.record("tool", tool="owner", status="ok")
    assert [r.tool for r in await new.audit.query()] == ["owner"]
    assert old.audit.dropped == 1
    old.close()
    new.close()


def test_a_version_3_file_gains_the_audit_table(tmp_path: Path) -> None:
    path = str(tmp_path / "w.sqlite")
    FileSystem.open(path).close()
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("DROP TABLE audit")
    con.execute("UPDATE meta SET value = 3 WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(OSError):  # a reader never upgrades
        FileSystem.open(path, readonly=True)
    fs = FileSystem.open(path)
    fs.audit.record("tool", tool="ls", status="ok")
    assert [r.tool for r in fs.audit.read()] == ["ls"]
    fs.close()
    con = sqlite3.connect(path)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == SCHEMA_VERSION
    con.close()


async def test_exec_runs_and_share_links_leave_records(tmp_path: Path) -> None:
    from computer.assets import SqliteAssetStore
    from computer.runtime.shell import ShellBackend

    store = SqliteAssetStore(tmp_path / "assets")
    async with Workspace(str(tmp_path / "w.sqlite"), backends=[ShellBackend()], assets=store) as ws:
        await ws.fs.write_file("/report.txt", b"hi")
        handle = await ws.runtime.exec("echo out; echo API_TOKEN=abcdef123 >&2; exit 3", env={"SECRET": "s"})
        result = await handle.result()
        url = await ws.assets.share("/report.txt", expires_after=60)
        run, share = await ws.audit.query()
    assert (run.kind, run.tool, run.status) == ("exec", "shell", "error")
    assert run.detail["id"] == result.id and run.detail["exit_code"] == 3
    assert run.detail["status"] == "failed" and run.detail["pulled"] == 0 and run.detail["skipped"] == 0
    assert run.args["command"].startswith("echo out") and "abcdef123" not in run.args["command"]
    assert run.args["env"] == ["SECRET"] and run.duration_ms is not None
    assert (share.kind, share.tool, share.status) == ("share", "share", "ok")
    assert share.args["path"] == "/report.txt" and share.detail["url"] == url
    await store.close()


async def test_settings_bound_the_log_or_turn_it_off(tmp_path: Path) -> None:
    from computer.config import configure, settings

    before = settings().model_dump()
    try:
        configure(**{**before, "audit_max_records": 5})
        async with Workspace(str(tmp_path / "bounded.sqlite")) as ws:
            tools = create_tools(ws)
            for i in range(20):
                await tools["write"].run({"path": f"/workspace/{i}.txt", "content": "x"})
                ws.audit.flush()
            kept = await ws.audit.query(limit=100)
        assert 1 <= len(kept) <= 5 and kept[-1].args["path"] == "/workspace/19.txt"
        configure(**{**before, "audit": False})
        async with Workspace(str(tmp_path / "off.sqlite")) as ws:
            await create_tools(ws)["ls"].run({"path": "/"})
            assert await ws.audit.query() == []
    finally:
        configure(**before)


def test_records_made_while_a_transaction_is_open_wait_for_it() -> None:
    fs = FileSystem.open(None)
    db = fs._store.db
    with db.transaction():  # no event loop here: the batch stays pending, never recursing
        for i in range(300):
            fs.audit.record("tool", tool=f"t{i}", status="ok")
    assert len(fs.audit.read(limit=1000)) == 300
    fs.close()


async def test_a_limit_or_since_past_sqlites_integers_is_all_or_nothing() -> None:
    """``computer log NAME --limit 1e23`` (and ``query(since=...)`` with such an id or ``inf``) raised
    ``OverflowError`` from SQLite: a traceback. Past 64 bits every record is before or after, as asked."""
    ws = Workspace()
    await create_tools(ws)["ls"].run({"path": "/"})
    ws.audit.flush()
    assert len(await ws.audit.query(limit=10**30)) == 1
    assert await ws.audit.query(since=10**30) == []
    assert len(await ws.audit.query(since=-(10**30))) == 1
    assert await ws.audit.query(since=float("inf")) == []
    assert len(await ws.audit.query(since=float("-inf"))) == 1
    with pytest.raises(ValueError, match="NaN"):
        await ws.audit.query(since=float("nan"))
    await ws.close()


async def test_the_exec_tool_record_keeps_env_names_not_values() -> None:
    """The run's record kept ``env`` names only ("values are where secrets live"), but the exec
    tool's own record of the same call kept every value whose name did not look secret:
    ``{"MYVAR": "plainsecretvalue"}`` was in the log, and ``computer log`` showed it."""
    from computer.runtime.shell import ShellBackend

    async with Workspace(backends=[ShellBackend()]) as ws:
        env = {"MYVAR": "plainsecretvalue", "DB_URL": "postgres://u:hunter2@h/db"}
        result = await create_tools(ws)["exec"].run({"command": "true", "env": env, "timeout": 30})
        assert result["status"] == "completed"
        records = await ws.audit.query()
    by_kind = {record.kind: record for record in records}
    assert by_kind["tool"].args["env"] == ["DB_URL", "MYVAR"]
    assert by_kind["exec"].args["env"] == ["DB_URL", "MYVAR"]
    for record in records:
        assert "plainsecretvalue" not in str(record.to_json())
    assert by_kind["tool"].detail["bytes_in"] > len("plainsecretvalue")  # the sizes still count them


async def test_a_run_stopped_by_its_timeout_is_recorded_as_timed_out() -> None:
    """A run its timeout stopped was recorded "cancelled (exit code 124)", as any cancelled run: the
    log did not say what the exec tool says, that it timed out, nor after how long."""
    from computer.runtime.shell import ShellBackend

    async with Workspace(backends=[ShellBackend()]) as ws:
        handle = await ws.runtime.exec("sleep 30", timeout=0.2)
        result = await handle.result()
        killed = await ws.runtime.exec("sleep 30")
        await killed.kill()
        await killed.result()
        timed, stopped = await ws.audit.query(kind="exec")
    assert result.status == "cancelled" and result.exit_code == 124
    assert (timed.status, timed.error, timed.detail["exit_code"]) == ("error", "timed out after 0.2 s", 124)
    assert timed.duration_ms is not None and timed.duration_ms >= 200
    assert (stopped.status, stopped.error) == ("error", "killed")


async def test_a_run_that_killed_itself_says_which_signal_not_cancelled() -> None:
    """``kill -9 $$`` (and ``os.kill(os.getpid(), 9)``) read "cancelled (exit code 137)" in the audit
    and a bare ``status: "cancelled"`` in the exec tool's result, as if a caller or a timeout had ended
    the run. SPEC 6 keeps the status; the record and the result name the signal, SIGSEGV's too."""
    from computer.runtime import PythonBackend
    from computer.runtime.shell import ShellBackend

    async with Workspace(backends=[ShellBackend(), PythonBackend()]) as ws:
        exec_tool = create_tools(ws)["exec"]
        calls = [
            ({"command": "kill -9 $$"}, "cancelled", "SIGKILL"),
            ({"command": "kill -SEGV $$"}, "failed", "SIGSEGV"),
            ({"command": "import os; os.kill(os.getpid(), 9)", "backend": "python"}, "cancelled", "SIGKILL"),
        ]
        for args, status, name in calls:
            result = await exec_tool.run({**args, "timeout": 60})
            assert (result["status"], result.get("signal"), "error" in result) == (status, name, False), (
                result
            )
        ended = await exec_tool.run({"command": "exit 3", "timeout": 60})
        assert "signal" not in ended  # a plain exit code is no signal
        records = await ws.audit.query(kind="exec")
    assert [record.error for record in records] == [
        "killed by SIGKILL (exit code 137)",
        "killed by SIGSEGV (exit code 139)",
        "killed by SIGKILL (exit code 137)",
        "failed (exit code 3)",
    ]


async def test_a_follow_ends_when_its_workspace_closes() -> None:
    """``follow`` is documented to end when the log closes; it raised ``ProgrammingError`` (cannot
    operate on a closed database) from the follower's ``async for`` instead: the store closes the
    file right after the log, before the woken follower reads again."""
    ws = Workspace()
    tools = create_tools(ws)
    got: list[str | None] = []

    async def follow() -> None:
        async for record in ws.audit.follow():
            got.append(record.tool)

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0.1)  # the follower has read the newest id and waits
    await tools["ls"].run({"path": "/"})
    for _ in range(50):  # up to 5 s
        if got:
            break
        await asyncio.sleep(0.1)
    await ws.close()
    await asyncio.wait_for(follower, 10)  # ends, without an error
    assert got == ["ls"]
    assert [record async for record in ws.audit.follow()] == []  # a closed log: nothing, at once


async def test_a_record_a_client_sends_keeps_the_time_of_its_call_not_of_its_arrival() -> None:
    """A client records the calls it answers itself (exec, publish, bad arguments) with one owner call
    nobody waits for, and the owner stamped the record when it arrived: later by the round trip, and by
    a failover's seconds when the owner moved first (the record is sent again). The entry carries the
    call's end now, by the client's clock; a clock running ahead, or no time at all, is the arrival."""
    from computer.client._audit import ClientAudit

    sent: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()

    def remote(entry: dict[str, Any]) -> asyncio.Future[Any]:
        sent.append(entry)
        reply: asyncio.Future[Any] = loop.create_future()
        reply.set_result(("ok", None))
        return reply

    connection = SimpleNamespace(handle=SimpleNamespace(audit_record=SimpleNamespace(remote=remote)))
    client = ClientAudit(connection, "host:1:abcdef01")  # type: ignore[arg-type]
    client.record_tool("exec", {"command": "true"}, {"status": "completed"}, 0.01)
    await client.drain()
    answered = datetime.now(UTC)
    async with Workspace() as ws:  # the owner's side: what ``audit_record`` does with the entry
        for at in (sent[0].get("at"), time.time() + 3600, float("nan"), "soon", -1e30, 2**64):
            ws.audit.record(**{**sent[0], "at": at})
        call, *arrived = await ws.audit.query()
    assert call.time <= answered and call.caller == {"client": "host:1:abcdef01"}
    assert len(arrived) == 5 and all(answered <= r.time <= datetime.now(UTC) for r in arrived)


async def test_a_row_sqlite_refuses_costs_only_itself_not_its_batch(caplog: pytest.LogCaptureFixture) -> None:
    """A batch is one statement: one row SQLite refuses (here a value past its length limit, as a
    string past 1 GB would be at the default) failed every record of the batch. The batch is written
    again row by row: the good rows are kept, the bad one is logged and counted."""
    async with Workspace() as ws:
        ws.audit._db.conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1500)  # the error below is 2,000 chars
        ws.audit.record("tool", tool="before", status="ok")
        ws.audit.record("tool", tool="huge", status="error", error="e" * 2000)
        ws.audit.record("tool", tool="after", status="ok")
        ws.audit.flush()
        records = await ws.audit.query()
        assert [r.tool for r in records] == ["before", "after"] and ws.audit.dropped == 1
        assert any("tool 'huge'" in r.getMessage() and "too big" in r.getMessage() for r in caplog.records)
        ws.audit.record("tool", tool="later", status="ok")  # the totals were reloaded, the log goes on
        assert [r.tool for r in await ws.audit.query()] == ["before", "after", "later"]


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": None},
        {"kind": ["tool"]},
        {"status": None},
        {"status": 2**64},
        {"tool": ["ls"]},
        {"tool": {"name": "ls"}},
        {"tool": b"\xff"},
    ],
    ids=repr,
)
async def test_a_record_of_the_wrong_shape_is_refused_alone(bad: dict[str, Any]) -> None:
    """What the owner's ``audit_record`` takes from a client: a field of the wrong type passed every
    check and failed the insert of its whole batch (a ``None`` kind or status, a list as the tool), or
    was stored as what no reader expects (bytes as the tool). It is refused, named in a log line and
    counted; the records around it are kept."""
    async with Workspace() as ws:
        ws.audit.record("tool", tool="before", status="ok")
        ws.audit.record(**{"kind": "tool", "tool": "t", "status": "ok", **bad})
        ws.audit.record("tool", tool="after", status="ok")
        records = await ws.audit.query()
        assert [r.tool for r in records] == ["before", "after"] and ws.audit.dropped == 1


async def test_numbers_json_has_no_spelling_for_and_a_long_tool_name_are_kept_readable() -> None:
    """A model's arguments may hold ``NaN`` (``json.loads`` takes it) and its call may name a tool
    that does not exist at any length: the record kept ``NaN`` in its JSON, which the dashboard's JSON
    answer refuses, and the whole name."""
    async with Workspace() as ws:
        tools = create_tools(ws)
        await tools["ls"].run({"path": "/", "depth": float("nan"), "limit": float("-inf")})
        tools["ls"].record_refused({}, "no such tool", name="x" * 100_000)
        ws.audit.record("tool", tool="t", status="ok", duration_ms=float("inf"))
        records = await ws.audit.query()
    nan, refused, endless = records
    assert nan.args["depth"] == "NaN" and nan.args["limit"] == "-Infinity"
    assert refused.tool is not None and refused.tool.startswith("x" * 256) and len(refused.tool) < 300
    assert endless.duration_ms is None
    json.dumps([r.to_json() for r in records], allow_nan=False)  # what the dashboard answers with


async def test_a_record_written_with_nan_before_reads_as_its_name() -> None:
    """Records written before non-finite floats were scrubbed hold ``NaN`` in their JSON text."""
    async with Workspace() as ws:
        ws.audit._db.execute(
            "INSERT INTO audit (time, kind, tool, status, args, size) VALUES (1, 'tool', 't', 'ok', ?, 70)",
            ('{"x":NaN,"y":-Infinity}',),
        )
        (record,) = await ws.audit.query()
    assert record.args == {"x": "NaN", "y": "-Infinity"}
