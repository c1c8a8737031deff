"""The dashboard's HTML, rendered on the server: whole pages and the fragments its script swaps in.

Every value is escaped here (``html.escape``); the script only inserts fragments made by these
functions, so there is one renderer for a row whether it arrives with the page or live.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from html import escape
from typing import Any
from urllib.parse import quote

from ..cli import display
from ..storage import AuditRecord

__all__ = [
    "cluster_fragment",
    "directory_page",
    "file_page",
    "index_page",
    "record_row",
    "run_page",
    "workspace_page",
    "workspace_rows",
]


def _e(value: Any) -> str:
    """``value`` as HTML text; a lone surrogate (a model's broken emoji escape, kept by the audit log
    as given) written as its ``\\udXXX`` escape: the page's UTF-8 encoding raised on it, a 500."""
    text = "" if value is None else str(value)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return escape(text, quote=True)


def _q(value: str) -> str:
    return quote(value, safe="")


def layout(title: str, body: str, *, crumbs: str = "") -> str:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)} · computer</title>
<link rel="stylesheet" href="/static/dashboard.css">
<script src="/static/dashboard.js" defer></script>
</head><body>
<header><a class="brand" href="/">computer</a> <nav><a href="/">workspaces</a> <a href="/cluster">cluster</a></nav>
<span class="crumbs">{crumbs}</span></header>
<main>{body}</main>
</body></html>"""


def size_text(n: int | None) -> str:
    return "elsewhere" if n is None else display.size_text(n)


def ago_text(when: float | None) -> str:
    return "-" if when is None else display.ago_text(time.time() - when)


# -- workspaces ------------------------------------------------------------------------------------


def workspace_rows(rows: Iterable[dict[str, Any]]) -> str:
    out = []
    for row in rows:
        name = str(row["name"])
        state = f"awake {row['where']}" if row.get("where") else row["state"]
        out.append(
            f'<tr data-name="{_e(name)}"><td><a href="/w/{_q(name)}">{_e(name)}</a></td>'
            f'<td class="state {_e(row["state"])}">{_e(state)}</td><td class="num">{_e(size_text(row["size"]))}</td>'
            f'<td>{_e(ago_text(row["last_active"]))}</td><td class="num">{_e(row["live_runs"])}</td></tr>'
        )
    if not out:
        out.append('<tr class="empty"><td colspan="5">no workspaces yet</td></tr>')
    return "\n".join(out)


def index_page(rows: list[dict[str, Any]], mode: str) -> str:
    body = f"""<h1>Workspaces</h1>
<p class="muted">{_e(mode)} view · refreshed every second</p>
<table class="grid"><thead><tr><th>name</th><th>state</th><th>size</th><th>last activity</th><th>live runs</th></tr></thead>
<tbody id="workspaces" data-refresh="/fragments/workspaces">{workspace_rows(rows)}</tbody></table>"""
    return layout("workspaces", body)


# -- one workspace ----------------------------------------------------------------------------------


def record_row(record: AuditRecord, name: str) -> str:
    """One timeline row (the same for the page and the live stream)."""
    ms = "" if record.duration_ms is None else f"{record.duration_ms:.1f}"
    what = _e(record.summary())
    if record.kind == "exec" and record.detail.get("id"):
        what = f'<a href="/w/{_q(name)}/runs/{_q(str(record.detail["id"]))}">{what}</a>'
    return (
        f'<tr class="record {_e(record.status)}" data-id="{record.id}"><td>{_e(record.time.strftime("%H:%M:%S"))}</td>'
        f'<td>{_e(record.kind)}</td><td>{_e(record.tool)}</td><td class="status">{_e(record.status)}</td>'
        f'<td class="num">{ms}</td><td>{_e(display.caller_text(record.caller))}</td><td class="what">{what}</td></tr>'
    )


def _runs_table(runs: list[dict[str, Any]], name: str) -> str:
    rows = []
    for run in runs:
        exec_id = str(run.get("id", ""))
        rows.append(
            f'<tr class="run {_e(run.get("status"))}"><td><a href="/w/{_q(name)}/runs/{_q(exec_id)}">{_e(exec_id)}</a></td>'
            f'<td>{_e(run.get("backend"))}</td><td class="status">{_e(run.get("status"))}</td>'
            f'<td class="num">{_e(run.get("exit_code"))}</td><td><code>{_e(str(run.get("source", ""))[:120])}</code></td></tr>'
        )
    if not rows:
        rows.append('<tr class="empty"><td colspan="5">no runs yet</td></tr>')
    return (
        '<table class="grid"><thead><tr><th>run</th><th>backend</th><th>status</th><th>exit</th><th>command</th>'
        f'</tr></thead><tbody id="runs">{"".join(rows)}</tbody></table>'
    )


def _links_table(links: list[AuditRecord]) -> str:
    rows = []
    now = time.time()
    for link in reversed(links):
        expires = link.detail.get("expires_at")
        state = "expired" if isinstance(expires, int | float) and expires < now else "live"
        url = str(link.detail.get("url", ""))
        rows.append(
            f'<tr><td>{_e(link.args.get("path"))}</td><td><a href="{_e(url)}" rel="noreferrer">{_e(url)}</a></td>'
            f"<td>{_e(link.time.strftime('%Y-%m-%d %H:%M:%S'))}</td><td>{state}</td></tr>"
        )
    if not rows:
        rows.append('<tr class="empty"><td colspan="4">nothing published</td></tr>')
    return (
        '<table class="grid"><thead><tr><th>path</th><th>link</th><th>created (UTC)</th><th></th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def workspace_page(
    name: str, records: list[AuditRecord], runs: list[dict[str, Any]], links: list[AuditRecord], top: int
) -> str:
    timeline = "".join(record_row(r, name) for r in reversed(records))
    body = f"""<h1>{_e(name)}</h1>
<p><a href="/w/{_q(name)}/files?path=%2F">files</a> · <a href="/w/{_q(name)}/transcript">agent transcript</a></p>
<section><h2>Timeline <span class="live" id="live-state">live</span></h2>
<table class="grid"><thead><tr><th>time (UTC)</th><th>kind</th><th>tool</th><th>status</th><th>ms</th><th>caller</th><th>what</th></tr></thead>
<tbody id="timeline" data-stream="/events/w/{_q(name)}/audit?after={top}">{timeline}</tbody></table></section>
<section><h2>Runs</h2>{_runs_table(runs, name)}</section>
<section><h2>Published links</h2>{_links_table(links)}</section>"""
    return layout(name, body, crumbs=f'<a href="/w/{_q(name)}">{_e(name)}</a>')


def directory_page(name: str, path: str, entries: list[Any]) -> str:
    parent = path.rsplit("/", 1)[0] or "/"
    rows = []
    if path != "/":
        rows.append(
            f'<tr><td><a href="/w/{_q(name)}/files?path={_q(parent)}">..</a></td><td></td><td></td></tr>'
        )
    for entry in entries:
        child = f"{path.rstrip('/')}/{entry.name}"
        kind = "dir" if entry.is_directory else ("link" if entry.is_symlink else "file")
        target = "files" if entry.is_directory else "file"
        label = entry.name + ("/" if entry.is_directory else "")
        rows.append(
            f'<tr class="{kind}"><td><a href="/w/{_q(name)}/{target}?path={_q(child)}">{_e(label)}</a></td>'
            f'<td class="num">{"" if entry.is_directory else _e(size_text(entry.size))}</td><td>{kind}</td></tr>'
        )
    body = f"""<h1>{_e(name)}: {_e(path)}</h1>
<table class="grid files"><thead><tr><th>name</th><th>size</th><th>kind</th></tr></thead><tbody>{"".join(rows)}</tbody></table>"""
    return layout(f"{name}:{path}", body, crumbs=f'<a href="/w/{_q(name)}">{_e(name)}</a>')


def file_page(name: str, path: str, *, size: int, text: str | None, image: bool, cut: bool) -> str:
    parent = path.rsplit("/", 1)[0] or "/"
    if image:
        view = f'<img class="viewer" alt="{_e(path)}" src="/w/{_q(name)}/raw?path={_q(path)}">'
    elif text is not None:
        more = (
            f'<p class="muted">first {size_text(len(text.encode()))} of {size_text(size)}</p>' if cut else ""
        )
        view = f'{more}<pre class="viewer" id="file-text">{_e(text)}</pre>'
    else:
        view = f'<p class="muted">binary file, {_e(size_text(size))}</p>'
    body = f"""<h1>{_e(name)}: {_e(path)}</h1>
<p><a href="/w/{_q(name)}/files?path={_q(parent)}">back to {_e(parent)}</a> · {_e(size_text(size))}</p>{view}"""
    return layout(f"{name}:{path}", body, crumbs=f'<a href="/w/{_q(name)}">{_e(name)}</a>')


def run_page(name: str, exec_id: str, run: dict[str, Any] | None) -> str:
    source = "" if run is None else str(run.get("source", ""))
    logs = "" if run is None else _log_links(name, run)
    body = f"""<h1>{_e(name)}: run {_e(exec_id)}</h1>
<pre class="command">$ {_e(source)}</pre>
<p>status <b id="run-status">{_e(None if run is None else run.get("status"))}</b>
exit code <b id="run-exit">{_e(None if run is None else run.get("exit_code"))}</b> <span class="muted" id="run-note"></span></p>
<div id="output" data-stream="/events/w/{_q(name)}/runs/{_q(exec_id)}">
<h2>stdout</h2><pre class="out" id="stdout"></pre><h2>stderr</h2><pre class="out err" id="stderr"></pre></div>{logs}"""
    return layout(f"{name} {exec_id}", body, crumbs=f'<a href="/w/{_q(name)}">{_e(name)}</a>')


def _log_links(name: str, run: dict[str, Any]) -> str:
    saved = [
        (stream, cut.get("path"))
        for stream, cut in (run.get("truncated") or {}).items()
        if isinstance(cut, dict) and cut.get("path")
    ]
    if not saved:
        return ""
    items = "".join(
        f'<li>{_e(stream)}: <a href="/w/{_q(name)}/file?path={_q(str(path))}">{_e(path)}</a></li>'
        for stream, path in saved
    )
    return f"<h2>Saved logs (full output)</h2><ul>{items}</ul>"


def transcript_fragment(messages: list[dict[str, Any]] | None) -> str:
    if messages is None:
        return '<p class="muted">this workspace keeps no transcript (see computer/dashboard/README.md)</p>'
    items = []
    for message in messages:
        role = str(message.get("role", "?"))
        content = message.get("content")
        text = content if isinstance(content, str) else ("" if content is None else str(content))
        calls = "".join(
            f'<div class="call"><b>{_e((c.get("function") or {}).get("name"))}</b> '
            f"<code>{_e((c.get('function') or {}).get('arguments'))}</code></div>"
            for c in message.get("tool_calls") or []
            if isinstance(c, dict)
        )
        body = f"<pre>{_e(text)}</pre>" if text else ""
        items.append(f'<li class="message {_e(role)}"><span class="role">{_e(role)}</span>{body}{calls}</li>')
    return f'<ol class="transcript">{"".join(items)}</ol>'


def transcript_page(name: str, messages: list[dict[str, Any]] | None) -> str:
    body = (
        f"<h1>{_e(name)}: transcript</h1>"
        f'<div id="transcript" data-refresh="/fragments/w/{_q(name)}/transcript">{transcript_fragment(messages)}</div>'
    )
    return layout(f"{name} transcript", body, crumbs=f'<a href="/w/{_q(name)}">{_e(name)}</a>')


# -- cluster ----------------------------------------------------------------------------------------


def cluster_fragment(view: dict[str, Any]) -> str:
    nodes = (
        "".join(
            f'<tr><td>{_e(n["id"])}</td><td>{_e(n["address"])}</td><td class="num">{_e(n["cpus"])}</td>'
            f'<td class="num">{_e(n["memory_gib"])} GiB</td></tr>'
            for n in view.get("nodes", [])
        )
        or '<tr class="empty"><td colspan="4">no Ray cluster (embedded view of the data directory)</td></tr>'
    )
    pools = (
        "".join(
            f'<tr><td>{_e(p["worker"])}</td><td>{_e(p["node"])}</td><td class="num">{_e(p["running"])}</td>'
            f'<td class="num">{_e("-" if p.get("queued") is None else p["queued"])}</td>'
            f'<td class="num">{_e(p.get("failures", 0))}</td>'
            f'<td class="num">{_e(p["runs"])}</td><td class="num">{_e(p["runs_per_s"] if p["runs_per_s"] is not None else "-")}</td></tr>'
            for p in view.get("pools", [])
        )
        or '<tr class="empty"><td colspan="7">no exec pool workers</td></tr>'
    )
    totals = (
        "".join(
            f'<tr><td>{_e(t["backend"])}</td><td class="num">{_e(t["workers"])}'
            + (f" (+{_e(t['pending'])} starting)" if t["pending"] else "")
            + f'</td><td class="num">{_e(t["running"])}</td><td class="num">{_e(t["queued"])}</td>'
            f'<td class="num">{_e(_wait(t["wait_p50"]))}</td><td class="num">{_e(_wait(t["wait_p99"]))}</td>'
            f'<td class="num">{_e(t["runs_per_s"])}</td></tr>'
            for t in view.get("pool_totals", [])
        )
        or '<tr class="empty"><td colspan="7">no pool control loop (no exec run yet)</td></tr>'
    )
    owners = (
        "".join(
            f'<tr><td><a href="/w/{_q(o["name"])}">{_e(o["name"])}</a></td><td>{_e(o["where"])}</td>'
            f"<td>{_e(o.get('host') or '-')}</td></tr>"
            for o in view.get("owners", [])
        )
        or '<tr class="empty"><td colspan="3">no awake owners</td></tr>'
    )
    silent = f'<p class="error">{_e(view["silent"])}</p>' if view.get("silent") else ""
    return f"""<p class="muted">{_e(view.get("mode"))} view</p>{silent}
<h2>Nodes</h2><table class="grid"><thead><tr><th>node</th><th>address</th><th>CPUs</th><th>memory</th></tr></thead><tbody>{nodes}</tbody></table>
<h2>Exec pools</h2><table class="grid" id="pool-totals"><thead><tr><th>pool</th><th>workers</th><th>running</th><th>queued</th><th>p50 wait</th><th>p99 wait</th><th>runs/s</th></tr></thead><tbody>{totals}</tbody></table>
<h2>Pool workers</h2><table class="grid"><thead><tr><th>worker</th><th>node</th><th>running</th><th>queued</th><th>failed</th><th>runs</th><th>runs/s</th></tr></thead><tbody>{pools}</tbody></table>
<h2>Awake owners</h2><table class="grid"><thead><tr><th>workspace</th><th>where</th><th>owner host</th></tr></thead><tbody>{owners}</tbody></table>"""


def _wait(seconds: float | None) -> str:
    """A queue wait as the pools' control loop measured it (``-`` when no run waited lately)."""
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.0f} s"  # as `computer status`


def cluster_page(view: dict[str, Any]) -> str:
    body = (
        f'<h1>Cluster</h1><div id="cluster" data-refresh="/fragments/cluster">{cluster_fragment(view)}</div>'
    )
    return layout("cluster", body)
