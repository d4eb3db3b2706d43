"""``agentlog copy``: stored sessions from one store to another, of any two backends.

The copy itself is :func:`agentlog.persistence.copy.copy_sessions` (staged whole per session, verified by
digest, resumable by re-running); this module opens the two stores from their own options, shows a
progress bar on stderr, and prints one line per session (or one JSON document).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..errors import AgentlogError
from ..persistence.backend import Backend
from ..persistence.copy import CopiedSession, copy_sessions
from .options import (
    DEFAULT_OPTIONS,
    BackendKind,
    Compression,
    StoreOptions,
    open_backend,
    parse_backend,
    shared_options,
)
from .render import _emit_json, render_error


def _role(side: str) -> str:
    return "source" if side == "from" else "target"


def _store_option(side: str) -> object:
    return typer.Option(
        f"--{side}-store",
        help=f"Store root of the {_role(side)} (default: --store).",
        show_default=False,
        readable=False,
    )


def _backend_option(side: str) -> object:
    return typer.Option(
        f"--{side}-backend",
        help=f"Backend of the {_role(side)} (default: --backend).",
        parser=parse_backend,
        metavar="<jsonl|sqlite|postgres>",
        show_default=False,
    )


def _dsn_option(side: str) -> object:
    return typer.Option(
        f"--{side}-dsn",
        help=f"PostgreSQL connection string of the {_role(side)} (default: --dsn).",
        show_default=False,
    )


def _schema_option(side: str) -> object:
    return typer.Option(
        f"--{side}-pg-schema",
        help=f"PostgreSQL schema of the {_role(side)} (default: $AGENTLOG_PG_SCHEMA or agentlog).",
        show_default=False,
    )


@shared_options("store", "backend", "compression", "dsn", "as_json")
def copy_command(
    ctx: typer.Context,
    ids: Annotated[
        list[str] | None,
        typer.Argument(
            help="Sessions to copy (default: every session of the source).", metavar="[ID]...", show_default=False
        ),
    ] = None,
    opts: StoreOptions = DEFAULT_OPTIONS,
    from_store: Annotated[Path | None, _store_option("from")] = None,
    from_backend: Annotated[str | None, _backend_option("from")] = None,
    from_dsn: Annotated[str | None, _dsn_option("from")] = None,
    from_pg_schema: Annotated[str | None, _schema_option("from")] = None,
    to_store: Annotated[Path | None, _store_option("to")] = None,
    to_backend: Annotated[str | None, _backend_option("to")] = None,
    to_dsn: Annotated[str | None, _dsn_option("to")] = None,
    to_pg_schema: Annotated[str | None, _schema_option("to")] = None,
) -> None:
    """Copy sessions between two stores, of any backends (JSONL raw or zstd, SQLite, PostgreSQL).

    Each session is copied as stored (header with its lineage, and every durable event: titles and labels
    are events) and published on the target whole or not at all, then read back and compared by a digest
    of its events. Re-running after a crash or an interruption resumes: a session the target already holds
    with the same digest is skipped. A session the target holds with other content is refused
    (COPY_CONFLICT) and the others are copied; exit status 1 when any session failed.

    Each side is named by its own options (--from-store, --from-backend, --from-dsn, --from-pg-schema and
    the same with --to-); --store, --backend and --dsn give both sides' default, so "--store DIR
    --to-backend sqlite" copies a JSONL store into a SQLite file in the same directory. --compression is
    the encoding of the sessions a JSONL target receives; without it, the one its store already holds.

    The source is only read (never repaired). A torn tail (a JSONL write cut short) is left out, and a
    session a writer appends to during the copy has the durable prefix that was read copied; both are
    reported. Progress is shown on stderr (not with --json, which prints one document with copied,
    skipped, failed and every session's status, event count and digest).
    """
    as_json = opts.as_json
    # Without --compression, a JSONL target keeps its store's encoding (the shared option's default is zstd).
    given = getattr(ctx.get_parameter_source("compression"), "name", "DEFAULT") != "DEFAULT"
    compression = opts.compression if given else None
    try:
        source = _open(
            from_store or opts.store,
            from_backend or opts.backend,
            None,
            from_dsn or opts.dsn,
            from_pg_schema,
            read_only=True,
        )
    except AgentlogError as err:
        render_error(err, as_json)
    try:
        target = _open(
            to_store or opts.store,
            to_backend or opts.backend,
            compression,
            to_dsn or opts.dsn,
            to_pg_schema,
            read_only=False,
        )
    except AgentlogError as err:
        source.close()
        render_error(err, as_json)
    console = Console(stderr=True)
    progress = Progress(
        TextColumn("copying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, disable=as_json or not console.is_terminal,
    )
    try:
        with progress:
            task = progress.add_task("copy", total=None)

            def advance(done: int, total: int, _session_id: str) -> None:
                progress.update(task, completed=done, total=total)

            report = copy_sessions(source, target, ids or None, progress=advance)
    except AgentlogError as err:
        render_error(err, as_json)
    if as_json:
        _emit_json(report.to_json())
    else:
        for session in report.sessions:
            typer.echo(_line(session))
        document = report.to_json()
        typer.echo(
            f"copied {document['copied']} sessions ({document['events']:,} events), skipped {document['skipped']}, "
            f"failed {document['failed']}"
        )
    if not report.ok:
        raise typer.Exit(code=1)


def _open(
    store: Path | None,
    backend: str,
    compression: Compression | None,
    dsn: str | None,
    schema: str | None,
    *,
    read_only: bool,
) -> Backend:
    """One side's backend. A JSONL target without ``--compression`` keeps the encoding its store holds: a
    resumed copy (or a copy into a raw store) must not be refused for the encoding it was not told."""
    kind = parse_backend(backend)
    if kind is BackendKind.jsonl and compression is None and not read_only:
        from ..persistence.jsonl.backend import JsonlBackend

        return JsonlBackend(str(StoreOptions(store=store).root.absolute()), compression="auto")
    chosen = compression or Compression.zstd
    return open_backend(store, kind, chosen, read_only=read_only, dsn=dsn, pg_schema=schema)


def _line(session: CopiedSession) -> str:
    if session.error is not None:
        return f"failed   {session.id}  [{session.error.code}] {session.error}"
    if session.status == "skipped":
        return f"skipped  {session.id}  (the target holds it: {session.events} events, {session.digest})"
    notes = []
    if session.torn:
        notes.append("the source's torn tail left out")
    if session.moved:
        notes.append("written to during the copy: the durable prefix read was copied")
    extra = f"; {'; '.join(notes)}" if notes else ""
    return f"copied   {session.id}  {session.events} events, {session.digest}{extra}"
