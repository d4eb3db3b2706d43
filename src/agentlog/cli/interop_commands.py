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

from ..errors import AgentlogError
from ..interop.transcripts import import_transcript
from ..kernel.store import SessionStore
from ..persistence.coordinator import PersistenceCoordinator
from ..projection.listing import cache_stored_session
from .options import DEFAULT_OPTIONS, StoreOptions, shared_options
from .render import _emit_json, render_error


class ImportSource(StrEnum):
    claude_code = "claude-code"
    codex = "codex"


@shared_options()
def import_command(
    # readable=False: an unreadable path is the import's typed refusal (STORAGE_PERMISSION_DENIED, also under
    # --json), not a usage error.
    file: Annotated[
        Path, typer.Argument(help="The transcript file (JSONL) to import.", show_default=False, readable=False)
    ],
    source: Annotated[ImportSource, typer.Option("--from", help="The tool that wrote the transcript.")],
    opts: StoreOptions = DEFAULT_OPTIONS,
    session_id: Annotated[
        str | None, typer.Option("--id", help="Id of the new session (default: a fresh one).", show_default=False)
    ] = None,
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
    """Import a Claude Code or Codex CLI transcript as a new session; print its id and what did not map.

    --parent ID links the new session as a subagent of ID (parentSession, origin "subagent", the parent's
    delegation depth + 1); a parent the store does not have is SESSION_NOT_FOUND and nothing is written.
    A Claude Code sub-agent's own file (every conversation record a sidechain's) is imported as its
    conversation and, without --parent, linked to the session imported from its parent transcript (the
    records' own sessionId; found when exactly one such import is stored, else imported unlinked with a note).

    Records with no agentlog counterpart are kept as ignorable "import/record" events; the report counts
    them, the fields that were dropped, the tool results the transcript lacked and the approximate mappings
    made ("approximate:", JSON "lossy"; docs/interop.md lists them). A line that is not
    JSON, is truncated or has the wrong shape fails the import (TRANSCRIPT_INVALID, naming the file and
    line), and so does a file that changes while it is imported; nothing is written. A directory, FIFO or
    unreadable file is refused (STORAGE_NOT_A_FILE / STORAGE_PERMISSION_DENIED).
    """
    try:
        storage = opts.open_backend()
    except AgentlogError as err:
        render_error(err, opts.as_json)
    coordinator = PersistenceCoordinator(SessionStore(), storage)
    try:
        report = import_transcript(coordinator, source.value, file, session_id=session_id, parent_session=parent)
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
    messages = ", ".join(f"{count} {kind}" for kind, count in document["messages"].items()) or "no messages"
    typer.echo(f"imported {report.lines} lines ({report.bytes:,} bytes): {report.turns} turns, {messages}")
    for title, table in (("kept as import/record", document["keptRecords"]), ("not mapped", document["dropped"])):
        if table:
            typer.echo(f"{title}: " + ", ".join(f"{kind} ×{count}" for kind, count in table.items()))
    if report.lossy:  # imported, but not exactly (docs/interop.md lists each mapping)
        typer.echo("approximate: " + ", ".join(f"{kind} ×{count}" for kind, count in sorted(report.lossy.items())))
    if report.parent_note is not None:
        typer.echo(report.parent_note)
    if report.synthesized_results:
        typer.echo(
            f"tool calls without a result in the transcript (closed with an error): {report.synthesized_results}"
        )
