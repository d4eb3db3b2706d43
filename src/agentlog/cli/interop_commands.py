"""``agentlog import``: another tool's transcript as a new stored session.

The import itself lives in :mod:`agentlog.interop.transcripts` (streaming, two passes over one snapshot
of the file, all or nothing); this module only opens the store, prints the new session id and the
report of what did not map, and renders refusals the way every command does.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..errors import AgentlogError, InvalidOptionError
from ..interop.transcripts import ImportReport, import_transcript, update_transcript
from ..interop.tree import detect_transcript_format, import_tree
from ..kernel.store import SessionStore
from ..persistence.coordinator import PersistenceCoordinator
from ..projection.listing import cache_stored_session
from .options import DEFAULT_OPTIONS, StoreOptions, shared_options
from .render import _emit_json, render_error


class ImportSource(StrEnum):
    auto = "auto"
    claude_code = "claude-code"
    codex = "codex"


@shared_options()
def import_command(
    # readable=False: an unreadable path is the import's typed refusal (STORAGE_PERMISSION_DENIED, also under
    # --json), not a usage error.
    file: Annotated[
        Path,
        typer.Argument(
            help="The transcript file (JSONL) to import, or a directory: every *.jsonl under it.",
            show_default=False,
            readable=False,
        ),
    ],
    source: Annotated[
        ImportSource, typer.Option("--from", help="The tool that wrote the transcript (auto: told from each file).")
    ] = ImportSource.auto,
    opts: StoreOptions = DEFAULT_OPTIONS,
    session_id: Annotated[
        str | None,
        typer.Option(
            "--id", help="Id of the new session (default: the transcript's own session id).", show_default=False
        ),
    ] = None,
    update: Annotated[
        bool,
        typer.Option(
            "--update",
            help="Append to the session imported from this transcript what the file gained since (a live "
            "transcript); the session is the transcript's own id, or --id.",
        ),
    ] = False,
    parent: Annotated[
        str | None,
        typer.Option(
            "--parent",
            help="Link the import as a subagent child of this stored session (e.g. a Claude Code sub-agent file).",
            metavar="ID",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Import a Claude Code or Codex CLI transcript as a new session, or every transcript under a directory.

    The new session's id is the transcript's own session id (--id names another); a transcript imported
    before is refused (TRANSCRIPT_ALREADY_IMPORTED). --from auto (the default) tells the format from the
    file's first records.

    A directory (e.g. ~/.claude/projects/X or ~/.codex/sessions) is walked recursively in sorted order,
    sub-agent files after the others so that each links to its parent; a transcript imported before is
    skipped, a *.jsonl file that is no transcript is skipped, and a file that fails is reported while the
    others are imported (exit status 1 when any failed). It prints one line per file and a count (--json:
    one document with imported, skipped and failed).

    --parent ID links the new session as a subagent of ID (parentSession, origin "subagent", the parent's
    delegation depth + 1); a parent the store does not have is SESSION_NOT_FOUND and nothing is written.
    A Claude Code sub-agent's own file (every conversation record a sidechain's) is imported as its
    conversation and, without --parent, linked to the session imported from its parent transcript (the
    records' own sessionId; found when exactly one such import is stored, else imported unlinked with a note).

    Records with no agentlog counterpart are kept as ignorable "import/record" events; the report counts
    them, the fields that were dropped, the tool results the transcript lacked and the approximate mappings
    made ("approximate:", JSON "lossy"; docs/interop.md lists them). A line that is not JSON or has the
    wrong shape fails the import (TRANSCRIPT_INVALID, naming the file and line), and so does a file that
    changes while it is imported; nothing is written. A torn last line (a transcript still being written)
    is dropped with a note. A FIFO or unreadable file is refused (STORAGE_NOT_A_FILE /
    STORAGE_PERMISSION_DENIED).
    """
    if update:
        if file.is_dir() or parent is not None:
            render_error(
                InvalidOptionError("--update names one transcript and its session: give a file, without --parent"),
                opts.as_json,
            )
        _update(file, source, session_id, opts)
        return
    if file.is_dir():
        if session_id is not None or parent is not None:
            render_error(
                InvalidOptionError(
                    "--id and --parent name one session: import a directory without them "
                    "(each transcript takes its own session id; sub-agents link to their parents)"
                ),
                opts.as_json,
            )
        _import_directory(file, source, opts)
        return
    try:
        storage = opts.open_backend()
    except AgentlogError as err:
        render_error(err, opts.as_json)
    coordinator = PersistenceCoordinator(SessionStore(), storage)
    try:
        kind = _format_of(file, source)
        report = import_transcript(coordinator, kind, file, session_id=session_id, parent_session=parent)
    except AgentlogError as err:
        coordinator.close()
        render_error(err, opts.as_json)
    if report.session_id is not None:  # as run does: the next ls serves it without reading its log
        cache_stored_session(coordinator, report.session_id)
    try:
        coordinator.close()
    except AgentlogError as err:
        render_error(err, opts.as_json)
    document = report.to_json()
    if opts.as_json:
        _emit_json(document)
        return
    typer.echo(report.session_id)
    _echo_report(report)


def _format_of(file: Path, source: ImportSource) -> str:
    """``--from``, or with ``auto`` the format told from the file (not a regular file: the import's own
    refusal names what it is)."""
    if source is not ImportSource.auto:
        return source.value
    return detect_transcript_format(file) if file.is_file() else "claude-code"


def _update(file: Path, source: ImportSource, session_id: str | None, opts: StoreOptions) -> None:
    """``import FILE --update``: what the transcript gained since its import, appended to its session."""
    try:
        storage = opts.open_backend()
    except AgentlogError as err:
        render_error(err, opts.as_json)
    coordinator = PersistenceCoordinator(SessionStore(), storage)
    try:
        report = update_transcript(coordinator, _format_of(file, source), file, session_id=session_id)
        if report.appended and report.session_id is not None:
            cache_stored_session(coordinator, report.session_id)
        coordinator.close()
    except AgentlogError as err:
        coordinator.close()
        render_error(err, opts.as_json)
    if opts.as_json:
        _emit_json(report.to_json())
        return
    typer.echo(report.session_id)
    if not report.appended:
        typer.echo("up to date: the transcript has no new records since its import")
        return
    typer.echo(f"appended {report.appended} events")
    _echo_report(report)


def _echo_report(report: ImportReport) -> None:
    document = report.to_json()
    messages = ", ".join(f"{count} {kind}" for kind, count in document["messages"].items()) or "no messages"
    typer.echo(f"imported {report.lines} lines ({report.bytes:,} bytes): {report.turns} turns, {messages}")
    for title, table in (("kept as import/record", document["keptRecords"]), ("not mapped", document["dropped"])):
        if table:
            typer.echo(f"{title}: " + ", ".join(f"{kind} ×{count}" for kind, count in table.items()))
    if report.torn_last_line is not None:
        typer.echo(
            f"dropped the torn last line {report.torn_last_line} ({report.torn_bytes:,} bytes: the file ends inside a "
            "record, as a transcript still being written does)"
        )
    if report.forks:
        typer.echo(f"abandoned branches imported as forks: {', '.join(report.forks)}")
    if report.lossy:  # imported, but not exactly (docs/interop.md lists each mapping)
        typer.echo("approximate: " + ", ".join(f"{kind} ×{count}" for kind, count in sorted(report.lossy.items())))
    if report.parent_note is not None:
        typer.echo(report.parent_note)
    if report.synthesized_results:
        typer.echo(
            f"tool calls without a result in the transcript (closed with an error): {report.synthesized_results}"
        )


def _import_directory(root: Path, source: ImportSource, opts: StoreOptions) -> None:
    """Every transcript under ``root``, with a progress bar on stderr and a summary table (or one JSON document)."""
    try:
        storage = opts.open_backend()
    except AgentlogError as err:
        render_error(err, opts.as_json)
    coordinator = PersistenceCoordinator(SessionStore(), storage)
    console = Console(stderr=True)
    progress = Progress(
        TextColumn("importing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, disable=opts.as_json or not console.is_terminal,
    )
    try:
        with progress:
            task = progress.add_task("import", total=None)

            def advance(done: int, total: int, _path: str) -> None:
                progress.update(task, completed=done, total=total)

            result = import_tree(coordinator, root, source=source.value, progress=advance)
        for report in result.imported:
            if report.session_id is not None:
                cache_stored_session(coordinator, report.session_id)
        coordinator.close()
    except AgentlogError as err:
        coordinator.close()
        render_error(err, opts.as_json)
    if opts.as_json:
        _emit_json(result.to_json())
    else:
        # One line per file (status, session, path, detail): nothing cut to the terminal's width.
        for report in result.imported:
            detail = f"{report.turns} turns" + (f", child of {report.parent_session}" if report.parent_session else "")
            if report.forks:
                detail += f", forks {', '.join(report.forks)}"
            typer.echo(f"imported  {report.session_id}  {report.path}  ({detail})")
        for skipped in result.skipped:
            typer.echo(f"skipped   {skipped.session_id or '-'}  {skipped.path}  ({skipped.reason})")
        for failed in result.failed:
            typer.echo(f"failed    -  {failed.path}  [{failed.error.code}] {failed.error}")
        typer.echo(
            f"imported {len(result.imported)} transcripts, skipped {len(result.skipped)}, failed {len(result.failed)}"
        )
    if result.failed:
        raise typer.Exit(code=1)
