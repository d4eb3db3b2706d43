"""The ``agentlog`` command: inspect stored sessions.

Every command reads only (``ls``, ``export`` and ``verify`` never write and never take a writer lock),
prints a readable table for people and, with ``--json``, a machine-readable document for scripts. On
failure the exit code is non-zero and, with ``--json``, ``{"error": {"code", "message"}}`` goes to
stderr so a script can branch on the stable code.
"""

from __future__ import annotations

import datetime as _dt
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import orjson
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from .errors import AgentlogError, SessionNotFoundError
from .jsonvalue import thaw
from .persistence.backend import Backend
from .persistence.coordinator import PersistenceCoordinator
from .repair import interrupted_turn_closers
from .store import SessionStore

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="agentlog: an agent session as an append-only, validated event log.",
    pretty_exceptions_enable=False,
)


class BackendKind(StrEnum):
    jsonl = "jsonl"
    sqlite = "sqlite"


class Compression(StrEnum):
    zstd = "zstd"
    none = "none"


StoreOption = Annotated[
    Path | None,
    typer.Option("--store", help="Store root (default: $AGENTLOG_STORE or ./.agentlog).", show_default=False),
]
BackendOption = Annotated[BackendKind, typer.Option("--backend", help="Storage backend.")]
CompressionOption = Annotated[Compression, typer.Option("--compression", help="JSONL physical encoding.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]

SQLITE_FILENAME = "sessions.sqlite3"


def _store_root(store: Path | None) -> Path:
    if store is not None:
        return store
    return Path(os.environ.get("AGENTLOG_STORE") or ".agentlog")


def open_backend(store: Path | None, backend: BackendKind, compression: Compression) -> Backend:
    """The backend a command reads from (constructing one never writes to the store)."""
    root = _store_root(store).absolute()
    if backend is BackendKind.sqlite:
        from .persistence.sqlite import SqliteBackend

        return SqliteBackend(str(root / SQLITE_FILENAME))
    from .persistence.jsonl import JsonlBackend

    return JsonlBackend(str(root), compression=compression.value)


def _fail(err: AgentlogError, as_json: bool) -> NoReturn:
    if as_json:
        sys.stderr.write(orjson.dumps({"error": {"code": err.code, "message": str(err)}}).decode() + "\n")
    else:
        Console(stderr=True).print(f"[bold red]error[/] [{err.code}] {err}", markup=True, highlight=False)
    raise typer.Exit(code=1)


def _iso(ms: Any) -> str:
    if type(ms) is not int:
        return ""
    return _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _emit_json(document: Any) -> None:
    sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")


@app.command("ls")
def ls_command(
    store: StoreOption = None,
    backend: BackendOption = BackendKind.jsonl,
    compression: CompressionOption = Compression.zstd,
    as_json: JsonOption = False,
    cursor: Annotated[str | None, typer.Option("--cursor", help="Show sessions after this id.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Sessions per page.")] = 50,
) -> None:
    """List stored sessions (damaged or foreign headers are reported, not hidden)."""
    try:
        storage = open_backend(store, backend, compression)
        listings = storage.list_sessions()
    except AgentlogError as err:
        _fail(err, as_json)
    listings = [item for item in listings if cursor is None or item.id > cursor]
    page = listings[:limit]
    next_cursor = page[-1].id if len(listings) > limit else None
    rows: list[dict[str, Any]] = []
    for item in page:
        row: dict[str, Any] = {
            "id": item.id,
            "createdAt": None,
            "cwd": None,
            "parentSession": None,
            "events": None,
            "lastActivity": None,
            "error": None,
        }
        if item.header is not None:
            row["createdAt"] = item.header.get("createdAt")
            row["cwd"] = item.header.get("cwd")
            row["parentSession"] = item.header.get("parentSession")
        if item.error_code is not None:
            row["error"] = {"code": item.error_code, "message": item.error_message}
        else:
            try:
                stored = storage.load_stored(item.id)
            except AgentlogError as err:
                row["error"] = {"code": err.code, "message": str(err)}
            else:
                if stored is not None:
                    row["events"] = len(stored.events)
                    row["lastActivity"] = stored.events[-1]["time"] if stored.events else row["createdAt"]
        rows.append(row)
    storage.close()
    if as_json:
        _emit_json({"sessions": rows, "nextCursor": next_cursor})
        return
    table = Table(title=f"sessions in {_store_root(store)}", show_lines=False)
    for column in ("id", "created", "cwd", "parent", "events", "last activity"):
        table.add_column(column, justify="right" if column == "events" else "left")
    for row in rows:
        if row["error"] is not None:
            table.add_row(
                row["id"],
                _iso(row["createdAt"]),
                row["cwd"] or "",
                row["parentSession"] or "",
                "",
                f"[red]{row['error']['code']}[/]",
            )
        else:
            table.add_row(
                row["id"],
                _iso(row["createdAt"]),
                row["cwd"] or "",
                row["parentSession"] or "",
                str(row["events"]),
                _iso(row["lastActivity"]),
            )
    console = Console()
    console.print(table)
    if next_cursor is not None:
        console.print(f"more: agentlog ls --cursor {next_cursor}")


def _reader(storage: Backend) -> PersistenceCoordinator:
    """A coordinator used only to read (no session is made live, so nothing is written or locked)."""
    return PersistenceCoordinator(SessionStore(), storage)


@app.command("export")
def export_command(
    session_id: Annotated[str, typer.Argument(help="The session to export.")],
    store: StoreOption = None,
    backend: BackendOption = BackendKind.jsonl,
    compression: CompressionOption = Compression.zstd,
    as_json: JsonOption = False,
) -> None:
    """Print one JSON document: header, events, surface, derived messages, request header and context."""
    try:
        reader = _reader(open_backend(store, backend, compression))
        try:
            snapshot = reader.inspect(session_id)
            view = reader.view(session_id)
        finally:
            reader.close()
    except AgentlogError as err:
        _fail(err, as_json)
    document = {
        "header": thaw(snapshot.meta),
        "events": thaw(snapshot.events.to_list()),
        "surface": list(view.surface.nodes),
        "messages": thaw(view.derive_messages().to_list()),
        "requestHeader": thaw(view.request_header()),
        "requestContext": thaw(view.request_context()),
    }
    _emit_json(document)


@app.command("verify")
def verify_command(
    session_ids: Annotated[list[str] | None, typer.Argument(help="Sessions to verify (default: all).")] = None,
    store: StoreOption = None,
    backend: BackendOption = BackendKind.jsonl,
    compression: CompressionOption = Compression.zstd,
    as_json: JsonOption = False,
) -> None:
    """Check checksums, seq continuity, surface replay and headers without modifying anything."""
    try:
        storage = open_backend(store, backend, compression)
        ids = list(session_ids) if session_ids else [item.id for item in storage.list_sessions()]
        reader = _reader(storage)
    except AgentlogError as err:
        _fail(err, as_json)
    results: list[dict[str, Any]] = []
    console = Console(stderr=True)
    with Progress(
        TextColumn("verifying"), BarColumn(), MofNCompleteColumn(), console=console, disable=as_json or len(ids) < 2
    ) as progress:
        task = progress.add_task("verify", total=len(ids))
        for session_id in ids:
            results.append(_verify_one(reader, session_id))
            progress.advance(task)
    reader.close()
    failed = [r for r in results if r["status"] == "failed"]
    if as_json:
        _emit_json({"sessions": results, "ok": not failed})
    else:
        table = Table(title="verify")
        for column in ("id", "status", "events", "detail"):
            table.add_column(column)
        for r in results:
            colour = {"ok": "green", "repairable": "yellow", "failed": "red"}[r["status"]]
            detail = r["error"]["message"] if r["error"] else (r.get("note") or "")
            table.add_row(r["id"], f"[{colour}]{r['status']}[/]", str(r["events"] or ""), detail)
        Console().print(table)
    if failed:
        raise typer.Exit(code=1)


def _verify_one(reader: PersistenceCoordinator, session_id: str) -> dict[str, Any]:
    result: dict[str, Any] = {"id": session_id, "status": "ok", "events": None, "error": None, "note": None}
    try:
        stored = reader.backend.load_stored(session_id)
        if stored is None:
            raise SessionNotFoundError(f'session "{session_id}" not found')
        reader.view(session_id)  # every validation layer and the surface replay
    except AgentlogError as err:
        result["status"] = "failed"
        result["error"] = {"code": err.code, "message": str(err)}
        return result
    result["events"] = len(stored.events)
    notes = []
    if stored.torn_marker is not None:
        notes.append("torn tail after the committed prefix (removed on the next load)")
    if interrupted_turn_closers(stored.events):
        notes.append("interrupted turn (closed on the next load)")
    if notes:
        result["status"] = "repairable"
        result["note"] = "; ".join(notes)
    return result


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
