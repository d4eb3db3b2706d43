"""The inspection commands ``ls``, ``export``, ``verify`` and ``show``: they read only (nothing is
written and no writer lock is taken)."""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from ..errors import (
    AgentlogError,
    OtelError,
    SessionPersistenceCorruptionError,
)
from ..kernel.jsonvalue import thaw
from ..kernel.labels import check_tag, parse_label_filter
from ..kernel.lineage import delegation_depth_of
from ..persistence.backend import Backend, SessionListing
from ..persistence.coordinator import PersistenceCoordinator, StoredView
from ..persistence.paths import encode_segment
from ..persistence.storage_errors import storage_error
from ..projection.cache import InlineWriter, ProjectionCache
from ..projection.labels import LABELS_KEY, labels_match, labels_of
from ..projection.listing import LAST_ACTIVITY_KEY
from ..projection.usage_steps import USAGE_STEPS_KEY, usage_known
from ._lineage import children_index, tree_order
from ._marks import CheckpointMark, log_marks, marks_json, seq_ranges, surface_marks
from ._reading import _last_turn, _open_view, _read_view, _reader, _require_store
from .options import (
    DEFAULT_OPTIONS,
    BackendKind,
    StoreOptions,
    shared_options,
)
from .projection_commands import listing_registry, read_cache, total_tokens
from .render import (
    Streamed,
    _echo_lines,
    _emit_json,
    _emit_json_line,
    _emit_json_stream,
    _event_line,
    _iso,
    _short,
    _TableOutput,
    _transcript_lines,
    render_error,
)


def _pg_where(storage: object) -> str:
    """A PostgreSQL store's place for a title: its address (never the password) and schema."""
    return f"{getattr(storage, 'location', 'PostgreSQL')} schema {getattr(storage, 'schema', '?')}"


@shared_options()
def ls_command(
    opts: StoreOptions = DEFAULT_OPTIONS,
    cursor: Annotated[str | None, typer.Option("--cursor", help="Show the sessions listed after this id.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Sessions per page.")] = 50,
    tree: Annotated[
        bool, typer.Option("--tree", help="Each session followed by its forks and subagents, indented.")
    ] = False,
    label: Annotated[
        list[str] | None,
        typer.Option(
            "--label", help="Only sessions labelled KEY=VALUE (repeatable: all must match).", metavar="KEY=VALUE",
            show_default=False,
        ),
    ] = None,
    tag: Annotated[
        list[str] | None,
        typer.Option("--tag", help="Only sessions tagged TAG (repeatable: all must match).", metavar="TAG",
                     show_default=False),
    ] = None,
) -> None:
    """List stored sessions, newest first: title, turns, tokens, last activity, parent and delegation
    depth (damaged or foreign headers are reported, not hidden).

    ``--tree`` lists each root session (no parent in the store) followed by its descendants, forks and
    subagents, indented by level (``level`` in ``--json``); pages are cut from that order.

    Titles and counts come from the projection cache: a row that is current for the stored log is
    served without reading the log; a stale or missing row (a session written by code that does not
    keep the cache) is refreshed by reading the log (only its tail past the row) and written back.
    A store without a cache file (never used by a writer that keeps it, nor reindexed with
    ``agentlog reindex --projections``) is folded in memory: the figures are the same, ``ls`` creates
    nothing, and it reads every log each time. A figure that cannot be known (a
    log that cannot be read; tokens when no step of the log reported usage) is ``—`` in the table and
    ``null`` in ``--json``, never 0 or the creation time. Sessions are sorted by last activity (else
    creation time), newest first, ties by id; ``--cursor ID`` continues after ID in that order.

    ``--label KEY=VALUE`` and ``--tag TAG`` keep the sessions carrying every one given (labels and tags
    are served from the cache like the title); ``--json`` rows carry ``labels`` and ``tags``. With
    ``--tree`` a filtered-out ancestor is left out and its matching descendants are listed as roots.
    """
    try:
        wanted_labels = [parse_label_filter(text) for text in label or ()]
        wanted_tags = [check_tag(text) for text in tag or ()]
        storage = opts.open_backend(read_only=True)
        where = str(opts.root) if opts.backend is not BackendKind.postgres else _pg_where(storage)
        try:
            with _collector_paused():
                listings = storage.list_sessions()
            projected = _projected(storage, listings)
        finally:
            storage.close()
    except AgentlogError as err:
        render_error(err, opts.as_json)
    rows: list[dict[str, Any]] = []
    for item in listings:
        header = item.header or {}
        values, as_of = projected.get(item.id, ({}, None))
        usage = values.get("tokenUsage") if usage_known(values) else None
        labels, tags = labels_of(values)
        if (wanted_labels or wanted_tags) and not labels_match(labels, tags, wanted_labels, wanted_tags):
            continue
        rows.append(
            {
                "id": item.id,
                "title": values.get("title"),
                "createdAt": header.get("createdAt"),
                "cwd": header.get("cwd"),
                "parentSession": header.get("parentSession"),
                "origin": header.get("origin"),
                "delegationDepth": delegation_depth_of(header),
                "events": None if as_of is None else as_of + 1,
                "lastActivity": values.get(LAST_ACTIVITY_KEY),
                "turns": (values.get("sessionStats") or {}).get("turns"),
                "tokens": total_tokens(usage),
                "tokenUsage": usage,
                "labels": labels,
                "tags": tags,
                "error": None if item.error_code is None else {"code": item.error_code, "message": item.error_message},
            }
        )
    rows.sort(key=_newest_first)
    if tree:
        rows = tree_order(rows)
    position = next((i for i, row in enumerate(rows) if row["id"] == cursor), None) if cursor is not None else None
    if position is not None:
        rows = rows[position + 1 :]
    elif cursor is not None:  # the cursor's session is gone: continue by id
        rows = [row for row in rows if row["id"] > cursor]
    page = rows[:limit]
    next_cursor = page[-1]["id"] if len(rows) > limit else None
    if opts.as_json:
        _emit_json({"sessions": page, "nextCursor": next_cursor})
        return
    # The labels column only when a listed session has any: a store that never uses them keeps its table.
    labelled = any(row["labels"] or row["tags"] for row in page)
    table = _TableOutput(
        ("id", "title", "turns", "tokens", "last activity", "cwd", "parent", "depth")
        + (("labels",) if labelled else ())
        + ("status",),
        title=f"sessions in {where}",
        right=("turns", "tokens", "depth"),
    )
    for row in page:
        status = "ok" if row["error"] is None else str(row["error"]["code"])
        folded = row["events"] is not None  # the log was folded: an absent title is "untitled", not unknown
        indent = "  " * row.get("level", 0) + ("└ " if row.get("level") else "")
        cells = [
            indent + str(row["id"]),
            str(row["title"] or "") if folded else UNKNOWN,
            UNKNOWN if row["turns"] is None else f"{row['turns']:,}",
            UNKNOWN if row["tokens"] is None else f"{row['tokens']:,}",
            UNKNOWN if row["lastActivity"] is None else _iso(row["lastActivity"]),
            str(row["cwd"] or ""),
            str(row["parentSession"] or ""),
            str(row["delegationDepth"] or "") if row["origin"] == "subagent" else "",
            *((_labels_cell(row["labels"], row["tags"]),) if labelled else ()),
            status,
        ]
        colour = "green" if row["error"] is None else "red"
        table.add_row(*[escape(cell) for cell in cells[:-1]], f"[{colour}]{status}[/]", plain=cells)
    console = table.print()
    if next_cursor is not None:
        console.print(f"more: agentlog ls --cursor {next_cursor}", soft_wrap=True, markup=False, highlight=False)


def _labels_cell(labels: Mapping[str, str], tags: Sequence[str]) -> str:
    """``key=value`` labels then ``#tag`` tags, space separated (keys and tags hold no space)."""
    return " ".join([*(f"{key}={value}" for key, value in labels.items()), *(f"#{tag}" for tag in tags)])


UNKNOWN = "—"
"""``ls``'s cell for a figure it cannot know (``null`` in ``--json``): never 0, never the creation time."""


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while the listing is decoded.

    A listing allocates a few containers per session (headers, decoded cache views) and no cycles,
    but every 700 allocations the collector would walk young objects, and every few of those the whole
    heap of the imported CLI (typer, rich, pydantic): at a thousand sessions that was half of ``ls``'s
    cache read. Reference counting still frees everything; the collector resumes right after.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _newest_first(row: Mapping[str, Any]) -> tuple[int, str]:
    when = row["lastActivity"] if type(row["lastActivity"]) is int else row["createdAt"]
    return (-(when if type(when) is int else 0), str(row["id"]))


def _listed(values: Mapping[str, Any]) -> dict[str, Any]:
    """The served values ``ls`` shows, as plain JSON (only the usage buckets are a nested value)."""
    stats = values.get("sessionStats")
    return {
        "title": values.get("title"),
        "sessionStats": {"turns": stats.get("turns"), "steps": stats.get("steps")}
        if isinstance(stats, Mapping)
        else None,
        "tokenUsage": _plain(values.get("tokenUsage")),
        LAST_ACTIVITY_KEY: values.get(LAST_ACTIVITY_KEY),
        USAGE_STEPS_KEY: values.get(USAGE_STEPS_KEY),
        LABELS_KEY: _plain(values.get(LABELS_KEY)),
    }


def _plain(value: Any) -> Any:
    """``value`` as plain JSON: a view the listing read decoded for this call is plain already (its own
    ``dict``, never shared), a frozen one (a cold read's, a rows-path view) is thawed into a copy."""
    return value if value is None or type(value) is dict else thaw(value)


def _projected(storage: Backend, listings: Sequence[SessionListing]) -> dict[str, tuple[dict[str, Any], int | None]]:
    """``{id: (values, asOfSeq)}``: each session's listed figures, from its cache row or its log.

    One query reads every record; a record verified against the listed revision is served as is, any
    other session with a readable header is cold-read (rows plus the log tail; the whole log when it
    has no row), whoever wrote the log — ``run``, an adapter, the Recorder, ``import``, third-party
    code. The refreshed row is written back to a cache file that exists; a store without one is folded
    in memory (a read command creates nothing; the writers and ``reindex --projections`` create it).
    A log that cannot be read leaves its figures unknown: ``verify`` is the command that reports damage.
    """
    usable = [item for item in listings if item.error_code is None and item.header is not None]
    if not usable:
        return {}
    reader = _reader(storage)
    cache = read_cache(reader)  # the store's cache file when it has one, else folded in memory
    rows = ProjectionCache(listing_registry(), reader, cache.storage, writer=InlineWriter(), store=reader.store)
    out: dict[str, tuple[dict[str, Any], int | None]] = {}
    try:
        cold: list[str] = []
        with _collector_paused():  # many small decodes and no cycles (see _collector_paused)
            served = rows.cached_snapshots(usable, current_only=True)
            for item in usable:
                snapshot = served.get(item.id)
                if snapshot is None:  # no row of every listed unit at the listed revision
                    cold.append(item.id)
                else:
                    out[item.id] = (_listed(snapshot["values"]), snapshot["asOfSeq"])
        for session_id in cold:  # whole logs are read here: the collector runs as usual
            try:
                snapshot = cache.cold_snapshot(session_id)
            except AgentlogError:
                continue
            out[session_id] = (_listed(snapshot["values"]), snapshot["asOfSeq"])
    finally:
        rows.close()
        cache.close()
    return out




class ExportTarget(StrEnum):
    openai_chat = "openai-chat"
    openai_responses = "openai-responses"
    anthropic = "anthropic"
    sharegpt = "sharegpt"
    claude_code = "claude-code"
    codex = "codex"
    otlp = "otlp"


def _export_to(session_id: str, opts: StoreOptions, to: ExportTarget, wrap_arguments: bool = False) -> None:
    """``export --to``: the conversation rendered by :func:`agentlog.interop.transcripts.export_session`;
    what ``--wrap-arguments`` changed is reported on stderr (the document alone goes to stdout)."""
    from ..interop.transcripts import ExportReport, export_session

    report = ExportReport(to.value)
    try:
        _header, view = _read_view(session_id, opts)
        export_session(view, to.value, sys.stdout, wrap_arguments=wrap_arguments, report=report)
    except AgentlogError as err:
        render_error(err, opts.as_json)
    sys.stdout.flush()
    wrapped = report.wrapped_arguments
    if opts.as_json:
        _emit_json_line({"exportReport": report.to_json()}, stderr=True)
    elif wrapped:
        calls = ", ".join(f"{w['callId']} ({w['name']}, message {w['message']})" for w in wrapped)
        sys.stderr.write(
            f"export: arguments of {len(wrapped)} tool call(s) were not a JSON object and were wrapped as "
            f'{{"input": <text>}}: {calls}\n'
        )


def _export_otlp(session_id: str, opts: StoreOptions, endpoint: str | None, patterns: Sequence[str]) -> None:
    """``export --to otlp``: the session's GenAI spans (and its subagents') sent to an OTLP/HTTP receiver."""
    from ..projection.redaction import Redactor

    try:
        redact = Redactor(patterns=patterns) if patterns else None  # the --html export's hook
        try:
            from ..telemetry.otel import export_otlp
        except ImportError as err:  # the extra's packages are missing
            raise OtelError.not_installed("--to otlp", err) from None
        summary = export_otlp(opts.open_backend(read_only=True), session_id, endpoint=endpoint, redact=redact)
    except AgentlogError as err:
        render_error(err, opts.as_json)
    if opts.as_json:
        report = {"sessionId": session_id, "endpoint": summary.endpoint}
        _emit_json({**report, "sessions": summary.sessions, "spans": summary.spans})
    else:
        typer.echo(
            f"sent {summary.spans:,} spans of {len(summary.sessions)} session(s) to {summary.endpoint} "
            f"(session {session_id})"
        )


def _export_html(
    session_id: str, opts: StoreOptions, output: Path | None, patterns: Sequence[str], drop_tool_output: bool
) -> None:
    """``export --html``: the inspector's self-contained session page (:mod:`agentlog.inspector.export`)."""
    from ..inspector.export import export_html_bytes
    from ..inspector.views import Inspector
    from ..projection.redaction import Redactor

    try:
        redactor = Redactor(patterns=patterns, drop_tool_output=drop_tool_output)
        # One pass over the whole log: kept as read (not paged, not streamed: the document holds all of it).
        inspector = Inspector(opts.open_backend(read_only=True), search=False, page_after=None, stream=False)
        try:
            document = inspector.export_document(session_id, redact=redactor)
        finally:
            inspector.close()
        target = output if output is not None else Path(f"{encode_segment(session_id)}.html")
        try:
            target.write_bytes(export_html_bytes(document))  # (the UTF-8 text, never decoded)
        except OSError as err:
            raise storage_error(err, str(target)) from None
    except AgentlogError as err:
        render_error(err, opts.as_json)
    events = document["head"]["lastSeq"] + 1
    if opts.as_json:
        _emit_json({"sessionId": session_id, "file": str(target), "events": events})
    else:
        typer.echo(f"wrote {target} (session {session_id}, {events:,} events)")


PARTIAL_EXIT = 3
"""Exit code of ``export --partial`` when the log is damaged and only the prefix before it was written."""


def _export_partial(
    reader: PersistenceCoordinator, session_id: str, refusal: SessionPersistenceCorruptionError, as_json: bool
) -> NoReturn:
    """Write the readable stored prefix of a damaged session, report the damage, exit ``PARTIAL_EXIT``."""
    prefix = reader.read_prefix(session_id)  # the bytes up to the first damage; nothing validated or written
    # Every record reads back but the log still failed validation: all of it is the readable prefix.
    damage = prefix.damage if prefix.damage is not None else refusal
    events = list(prefix.events)
    last = events[-1]["seq"] if events else None
    location = getattr(damage, "location", None)
    offset = getattr(damage, "offset", None)
    report = {
        "code": damage.code,
        "message": str(damage),
        "location": location,
        "offset": offset,
        "afterSeq": last,
    }
    _emit_json_stream((("header", prefix.meta), ("events", Streamed(events)), ("damage", report)))
    if as_json:
        _emit_json_line(
            {
                "error": {"code": damage.code, "message": str(damage)},
                "partial": {"events": len(events), "afterSeq": last, "location": location, "offset": offset},
            },
            stderr=True,
        )
    else:
        through = f"seq 0..{last}" if last is not None else "no events"
        sys.stderr.write(
            f'partial export of session "{session_id}": {len(events)} stored events written ({through}), then '
            f"stopped at the damage ({damage.code}) in {location}, offset {offset}:\n  {damage}\n"
        )
    raise typer.Exit(code=PARTIAL_EXIT)


@shared_options()
def export_command(
    session_id: Annotated[str, typer.Argument(help="The session to export.")],
    opts: StoreOptions = DEFAULT_OPTIONS,
    partial: Annotated[
        bool,
        typer.Option(
            "--partial",
            help=f"On a damaged log, print the records before the damage and say where it is (exit {PARTIAL_EXIT}).",
        ),
    ] = False,
    to: Annotated[
        ExportTarget | None,
        typer.Option(
            "--to",
            help="Write the conversation in another tool's format instead of agentlog's document.",
            show_default=False,
        ),
    ] = None,
    html: Annotated[
        bool,
        typer.Option("--html", help="Write the inspector's session page as one self-contained HTML file."),
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="With --html: the file to write (default: ID.html).", show_default=False),
    ] = None,
    redact: Annotated[
        list[str] | None,
        typer.Option(
            "--redact",
            help="With --html or --to otlp: replace every match of this regular expression by [redacted] (repeatable).",
            show_default=False,
        ),
    ] = None,
    endpoint: Annotated[
        str | None,
        typer.Option(
            "--endpoint",
            help="With --to otlp: the OTLP/HTTP traces URL (default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, "
            "OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318/v1/traces).",
            show_default=False,
        ),
    ] = None,
    wrap_arguments: Annotated[
        bool,
        typer.Option(
            "--wrap-arguments",
            help='With --to anthropic: write tool-call arguments that are not a JSON object as {"input": <text>} '
            "(listed on stderr) instead of refusing them.",
        ),
    ] = False,
    redact_tool_output: Annotated[
        bool,
        typer.Option(
            "--redact-tool-output",
            help="With --html: drop every tool output (tool results' content and meta) from the file.",
        ),
    ] = False,
) -> None:
    """Print one JSON document: header, events, surface, derived messages, request header and context.

    With --html, write the inspector's session page instead (docs/inspector.md): one HTML file that opens
    offline with the log, the surface and the messages at any seq; --redact REGEX removes text first,
    --redact-tool-output drops every tool output.

    With --to openai-chat|openai-responses|anthropic|sharegpt, the document is the session's
    conversation in that format instead (the system prompt and tools from its request header; the
    message list is written item by item); --partial does not combine with --to. Anthropic's tool_use
    input must be a JSON object: a call whose arguments are not one (Codex's apply_patch) is refused,
    or with --wrap-arguments written as {"input": <text>} and listed on stderr (with --json, stderr's
    last line is {"exportReport": {format, items, wrappedArguments: [{message, callId, name}]}}).

    With --to otlp, the session's OpenTelemetry GenAI spans (and its subagent sessions') are sent to an
    OTLP/HTTP receiver instead (--endpoint URL; docs/telemetry.md); the same ids every time.

    With --partial, a damaged log (SESSION_CORRUPT) is salvaged instead of refused: the document holds the
    header, the stored events before the damage and a "damage" object (code, message, location, offset,
    afterSeq); stderr says where the export stopped and the exit code is 3. A healthy log exports as usual.
    """
    if html:
        _export_html(session_id, opts, output, redact or [], redact_tool_output)
        return
    if to is ExportTarget.otlp:
        _export_otlp(session_id, opts, endpoint, redact or [])
        return
    if to is not None:
        _export_to(session_id, opts, to, wrap_arguments)
        return
    try:
        reader = _reader(opts.open_backend(read_only=True))
        try:
            try:
                snapshot = reader.inspect(session_id)
                view = reader.view(session_id)
            except SessionPersistenceCorruptionError as err:
                if not partial:
                    raise
                _export_partial(reader, session_id, err, opts.as_json)
        finally:
            reader.close()
    except AgentlogError as err:
        render_error(err, opts.as_json)
    # Everything but the event log is derived before the first byte is written; the events (and the
    # surface and messages, as long as the session) are then written one by one.
    messages = view.derive_messages()
    request_header = view.request_header()
    request_context = view.request_context()
    _emit_json_stream(
        (
            ("header", snapshot.meta),
            ("events", Streamed(snapshot.events)),
            ("surface", Streamed(view.surface.nodes)),
            ("messages", Streamed(messages)),
            ("requestHeader", request_header),
            ("requestContext", request_context),
        )
    )


@shared_options()
def verify_command(
    session_ids: Annotated[list[str] | None, typer.Argument(help="Sessions to verify (default: all).")] = None,
    opts: StoreOptions = DEFAULT_OPTIONS,
) -> None:
    """Check checksums, seq continuity, surface replay and headers without modifying anything."""
    try:
        storage = opts.open_backend(read_only=True)
        if session_ids:
            _require_store(storage, session_ids[0])
        ids = list(session_ids) if session_ids else [item.id for item in storage.list_sessions()]
        reader = _reader(storage)
    except AgentlogError as err:
        render_error(err, opts.as_json)
    results: list[dict[str, Any]] = []
    with _verify_progress(opts) as progress:
        task = progress.add_task("", total=len(ids))
        for done, session_id in enumerate(ids):
            results.append(_verify_one(reader, session_id, _VerifyStages(progress, task, session_id, done)))
            progress.update(task, completed=done + 1)
    reader.close()
    failed = [r for r in results if r["status"] == "failed"]
    if opts.as_json:
        _emit_json({"sessions": results, "ok": not failed})
    else:
        table = _TableOutput(("id", "status", "events", "detail"), title="verify")
        for r in results:
            colour = {"ok": "green", "repairable": "yellow", "failed": "red"}[r["status"]]
            detail = r["error"]["message"] if r["error"] else (r.get("note") or "")
            cells = [str(r["id"]), str(r["status"]), str(r["events"] or ""), str(detail)]
            table.add_row(r["id"], f"[{colour}]{r['status']}[/]", cells[2], detail, plain=cells)
        table.print()
    if failed:
        raise typer.Exit(code=1)


VERIFY_STAGES = ("reading and validating", "checking tool pairing")
"""What ``verify`` does to each session, in order; its progress bar moves half a session per stage (the
log is read once, validated and replayed as it is restored)."""


def _verify_progress(opts: StoreOptions) -> Progress:
    """``verify``'s progress on standard error, as ``reindex`` shows its own (label, bar, count, elapsed
    time), plus the session and stage being worked on: a big session takes a while to read and check.

    Only on a terminal: with ``--json`` or when standard error is a file or a pipe nothing is drawn, so
    scripts and logs see only the result (rich would otherwise print the finished bar there once).
    """
    console = Console(stderr=True)
    return Progress(
        TextColumn("verifying"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=console,
        disable=opts.as_json or not console.is_terminal,
    )


class _VerifyStages:
    """Moves ``verify``'s bar as one session goes through :data:`VERIFY_STAGES`."""

    def __init__(self, progress: Progress, task: TaskID, session_id: str, done: int) -> None:
        self.progress = progress
        self.task = task
        self.session_id = session_id
        self.done = done

    def __call__(self, stage: str) -> None:
        part = VERIFY_STAGES.index(stage) / len(VERIFY_STAGES)
        self.progress.update(self.task, completed=self.done + part, description=f"{escape(self.session_id)}: {stage}")


def _verify_one(
    reader: PersistenceCoordinator, session_id: str, stage: Callable[[str], None] = lambda _stage: None
) -> dict[str, Any]:
    """One session's verify result: ``{id, status: ok|repairable|failed, events, error, note}``.

    One validated read gives the view and what only the stored prefix tells (its length, a torn
    tail, the closers an open turn would get): a big session is read, and held, once.
    """
    from ..kernel.invariants import check_tool_pairing

    result: dict[str, Any] = {"id": session_id, "status": "ok", "events": None, "error": None, "note": None}
    try:
        stage("reading and validating")
        # Every validation layer and the surface replay; not kept in the reader's cache of recent reads,
        # so a store's sessions are held one at a time.
        stored = reader.stored_view(session_id, keep=False)
        count, torn, interrupted = stored.stored_events, stored.torn, stored.closers > 0
        view = stored.view
        del stored
        stage("checking tool pairing")
        # A closed turn with an unanswered call (older builds on cancel): every request would be refused.
        check_tool_pairing(view.derive_messages(), session_id, view.events)
        del view
    except AgentlogError as err:
        result["status"] = "failed"
        result["error"] = {"code": err.code, "message": str(err)}
        return result
    result["events"] = count
    notes = []
    if torn:
        notes.append("torn tail after the committed prefix (removed on the next load)")
    if interrupted:
        notes.append("interrupted turn (closed on the next load)")
    if notes:
        result["status"] = "repairable"
        result["note"] = "; ".join(notes)
    return result


PENDING_MARK = "(would be added on resume)"
"""``show --log`` marks the closers of an unrepaired interrupted turn with this: not stored yet."""


@shared_options()
def show_command(
    session_id: Annotated[str, typer.Argument(help="The session to show.")],
    opts: StoreOptions = DEFAULT_OPTIONS,
    log: Annotated[bool, typer.Option("--log", help="Every event: seq, type and (shortened) data.")] = False,
    at: Annotated[
        int | None, typer.Option("--at", min=0, help="The model's view right after this seq.", show_default=False)
    ] = None,
) -> None:
    """A readable transcript of a stored session (never writes).

    An interrupted session is shown as a resume would see it: the first line counts the stored events
    (as verify and ls do) and, apart, the closers a resume would add; with ``--log`` those closing
    events are marked "would be added on resume". Compaction checkpoints and pruned tool
    results are marked; ``--log`` shows which seqs each checkpoint shadowed, and ``--at`` a seq before a
    compaction shows the full, uncompacted view of that moment.
    """
    header, view, stored = _open_view(session_id, opts, with_stored=at is None)
    events = view.events
    if at is not None:
        try:
            # The moment is a prefix of the view already read: sliced and folded, not re-validated.
            point = view.at(at)
        except AgentlogError as err:
            render_error(err, opts.as_json)
        messages = thaw(point.derive_messages().to_list())
        request_header = thaw(point.request_header())
        at_marks = surface_marks(point.events, point.surface.nodes)
        if opts.as_json:
            _emit_json(
                {
                    "sessionId": session_id,
                    "seq": at,
                    "event": {"type": events[at]["type"]},
                    "messages": messages,
                    "messageSeqs": [seq for seq, _ in at_marks],
                    "compaction": marks_json(at_marks),
                    "requestHeader": request_header,
                    "requestContext": thaw(point.request_context()),
                }
            )
            return
        typer.echo(f"session {session_id} at seq {at} ({events[at]['type']}): {len(messages)} messages")
        if request_header is None:
            typer.echo("request header: none yet")
        else:
            config = request_header.get("config") or {}
            tools = [tool.get("name") for tool in request_header.get("tools") or ()]
            typer.echo(
                f"request header: {_or_unknown(config.get('provider'))}/{_or_unknown(config.get('model'))}, "
                f"tools: {', '.join(str(name) for name in tools) or 'none'}"
            )
            if request_header.get("system"):
                typer.echo(f"system: {_short(str(request_header['system']))}")
        _echo_lines(_transcript_lines(messages, marks=[mark for _, mark in at_marks]))
        return
    assert stored is not None  # read with the view whenever there is no --at
    # Events past the last stored seq are the in-memory closers of an interrupted turn.
    last_stored = stored.last_stored_seq
    pending = [event["seq"] for event in events if event["seq"] > last_stored]
    if log:
        torn = stored.torn
        marks = {mark.seq: mark for mark in log_marks(events)}
        if opts.as_json:
            _emit_json_stream(
                (
                    ("sessionId", session_id),
                    ("header", header),
                    ("events", Streamed(events)),
                    ("storedEvents", len(events) - len(pending)),
                    ("wouldBeAddedOnResume", pending),
                    ("tornTail", torn),
                    ("compaction", [mark.to_json() for mark in marks.values()]),
                )
            )
            return
        _echo_lines(_log_lines(events, last_stored, marks))
        if torn:
            typer.echo(f"(a torn tail after seq {last_stored} is not shown; it would be removed on resume)")
        return
    messages = view.derive_messages()
    shown = surface_marks(events, view.surface.nodes)
    children = _children_of(session_id, opts)
    if opts.as_json:
        _emit_json_stream(
            (
                ("sessionId", session_id),
                ("header", header),
                ("children", children),
                ("events", stored.stored_events),
                ("wouldBeAddedOnResume", pending),
                ("lastTurn", _last_turn(events)),
                ("messages", Streamed(messages)),
                ("messageSeqs", [seq for seq, _ in shown]),
                ("compaction", marks_json(shown)),
            )
        )
        return
    typer.echo(_show_heading(session_id, header, stored))
    subagents = [c["id"] for c in children if c["origin"] == "subagent"]
    forks = [c["id"] for c in children if c["origin"] != "subagent"]
    if subagents:
        typer.echo(f"subagents: {', '.join(subagents)}")
    if forks:
        typer.echo(f"forks: {', '.join(forks)}")
    _echo_lines(_transcript_lines(messages, marks=[mark for _, mark in shown]))


def _children_of(session_id: str, opts: StoreOptions) -> list[dict[str, Any]]:
    """The stored sessions whose header names ``session_id`` as parent: ``[{id, origin, delegationDepth}]``."""
    try:
        storage = opts.open_backend(read_only=True)
        try:
            listings = storage.list_sessions()
        finally:
            storage.close()
    except AgentlogError as err:
        render_error(err, opts.as_json)
    headers = {item.id: item.header or {} for item in listings}
    index = children_index(headers.items())
    return [
        {
            "id": child,
            "origin": headers[child].get("origin"),
            "delegationDepth": delegation_depth_of(headers[child]),
        }
        for child in sorted(index.get(session_id, ()), key=lambda c: (headers[c].get("createdAt") or 0, c))
    ]


def _or_unknown(value: object) -> str:
    """A field of a sentence: its text, or ``unknown`` when the session does not record it."""
    return "unknown" if value is None or value == "" else str(value)


def _show_heading(session_id: str, header: Mapping[str, Any], stored: StoredView) -> str:
    """``show``'s first line: the session, its cwd and parent when it records them, and one count.

    The count is the stored events, the figure ``verify`` and ``ls`` report; the closers a resume would
    append to an interrupted turn are shown in the transcript but are not stored, so they are a second,
    labelled figure (and a torn tail, which a resume removes, a note of its own).
    """
    where = [str(header["cwd"])] if header.get("cwd") else []
    if header.get("parentSession") and header.get("origin") == "subagent":
        where.append(f"subagent of {header['parentSession']} at depth {delegation_depth_of(header)}")
    elif header.get("parentSession"):
        where.append(f"forked from {header['parentSession']}")
    described = f"{session_id} ({', '.join(where)})" if where else session_id
    line = f"session {described}: {stored.stored_events} stored events"
    if stored.closers:
        line += f", +{stored.closers} closer{'s' if stored.closers != 1 else ''} a resume would add"
    if stored.torn:
        line += f"; a torn tail after seq {stored.last_stored_seq} would be removed on resume"
    return line


def _log_lines(events: Sequence[Mapping[str, Any]], last_stored: int, marks: Mapping[int, Any]) -> Iterator[str]:
    """``show --log``'s lines, one event (and its compaction mark) at a time."""
    for event in events:
        line = _event_line(event)
        yield f"{line}  {PENDING_MARK}" if event["seq"] > last_stored else line
        mark = marks.get(event["seq"])
        if isinstance(mark, CheckpointMark):
            shadowed = seq_ranges(mark.shadowed_seqs) or "nothing"
            yield f"{'':>6}  ↳ {mark.label}: shadows seqs {shadowed}"
        elif mark is not None:
            yield f"{'':>6}  ↳ {mark.label}: replaces seq {mark.original_seq}"
