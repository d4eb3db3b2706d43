"""The ``agentlog`` command: inspect stored sessions, and run an agent over them.

The inspection commands read only (``ls``, ``export``, ``verify``, ``show`` and ``replay`` never write
and never take a writer lock). ``run``, ``resume`` and ``fork`` write through a
:class:`PersistenceCoordinator` and leave nothing live or locked when they return. Every command prints
readable output for people and, with ``--json``, a machine-readable document for scripts. On failure
the exit code is non-zero and, with ``--json``, ``{"error": {"code", "message"}}`` goes to stderr so a
script can branch on the stable code.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import importlib
import os
import secrets
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import orjson
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from ..errors import (
    AgentlogError,
    SessionExistsError,
    SessionNotFoundError,
    SessionPersistenceCorruptionError,
    StoreNotFoundError,
)
from ..kernel.jsonvalue import thaw
from ..kernel.repair import interrupted_turn_closers
from ..kernel.session import SeqOutOfRangeError, Session
from ..kernel.store import SessionStore
from ..persistence.backend import Backend, StoredPrefix
from ..persistence.coordinator import PersistenceCoordinator

if TYPE_CHECKING:  # the agent and the HTTP client load only for the commands that run a model
    from ..agent.builtin_tools import CommandPolicy
    from ..agent.loop import AgentOptions, TurnOutcome

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


def open_backend(
    store: Path | None, backend: BackendKind, compression: Compression, *, read_only: bool = False
) -> Backend:
    """The backend of a command (constructing one never writes to the store).

    ``read_only=True`` is for the inspection commands: nothing is ever created (a store or database
    that does not exist is ``STORE_NOT_FOUND``), and JSONL reads whichever encoding the store holds,
    whatever ``--compression`` says (that option chooses the encoding of new sessions).
    """
    root = _store_root(store).absolute()
    if backend is BackendKind.sqlite:
        from ..persistence.sqlite.backend import SqliteBackend

        return SqliteBackend(str(root / SQLITE_FILENAME), read_only=read_only)
    from ..persistence.jsonl.backend import JsonlBackend

    if read_only:
        return JsonlBackend(str(root), compression="auto", read_only=True)
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
    """List stored sessions from their headers (damaged or foreign headers are reported, not hidden).

    Only each session's header is read, so listing stays cheap however long the logs are: event counts
    are not reported (``events`` and ``lastActivity`` are ``null`` in ``--json``); ``agentlog verify``
    reads and checks whole logs.
    """
    try:
        storage = open_backend(store, backend, compression, read_only=True)
        try:
            listings = storage.list_sessions()
        finally:
            storage.close()
    except AgentlogError as err:
        _fail(err, as_json)
    listings = [item for item in listings if cursor is None or item.id > cursor]
    page = listings[:limit]
    next_cursor = page[-1].id if len(listings) > limit else None
    rows: list[dict[str, Any]] = []
    for item in page:
        header = item.header or {}
        rows.append(
            {
                "id": item.id,
                "createdAt": header.get("createdAt"),
                "cwd": header.get("cwd"),
                "parentSession": header.get("parentSession"),
                "events": None,  # not counted: ls reads headers only
                "lastActivity": None,
                "error": None if item.error_code is None else {"code": item.error_code, "message": item.error_message},
            }
        )
    if as_json:
        _emit_json({"sessions": rows, "nextCursor": next_cursor})
        return
    table = Table(title=f"sessions in {_store_root(store)}", show_lines=False)
    table.add_column("id", overflow="fold")
    for column in ("created", "cwd", "parent", "status"):
        table.add_column(column, overflow="fold")
    cells: list[list[str]] = []
    for row in rows:
        status = "ok" if row["error"] is None else str(row["error"]["code"])
        cells.append(
            [str(row["id"]), _iso(row["createdAt"]), str(row["cwd"] or ""), str(row["parentSession"] or ""), status]
        )
        colour = "green" if row["error"] is None else "red"
        table.add_row(*cells[-1][:-1], f"[{colour}]{status}[/]")
    console = _table_console([["id", "created", "cwd", "parent", "status"], *cells])
    console.print(table)
    if next_cursor is not None:
        console.print(f"more: agentlog ls --cursor {next_cursor}", soft_wrap=True)


def _table_console(cells: Sequence[Sequence[str]]) -> Console:
    """Standard output for a table of ``cells`` (header row included): the terminal's width on a
    terminal (long cells wrap, never cut); piped or redirected, wide enough that no cell is wrapped or
    cut, so scripts read whole ids."""
    console = Console()
    if console.is_terminal:
        return console
    columns = max(map(len, cells), default=0)
    widths = [max((len(row[i]) for row in cells if i < len(row)), default=0) for i in range(columns)]
    return Console(width=max(console.width, sum(widths) + 3 * columns + 4))


def _require_store(storage: Backend, session_id: str) -> None:
    """Raise ``STORE_NOT_FOUND`` now if the store is missing (a backend may report it only when first
    used); any other problem is the session's own and is reported with it."""
    try:
        storage.read_revision(session_id)
    except StoreNotFoundError:
        storage.close()
        raise
    except AgentlogError:
        pass


def _reader(storage: Backend) -> PersistenceCoordinator:
    """A coordinator used only to read (no session is made live, so nothing is written or locked)."""
    return PersistenceCoordinator(SessionStore(), storage)


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
    _emit_json({"header": prefix.meta, "events": events, "damage": report})
    if as_json:
        sys.stderr.write(
            orjson.dumps(
                {
                    "error": {"code": damage.code, "message": str(damage)},
                    "partial": {"events": len(events), "afterSeq": last, "location": location, "offset": offset},
                }
            ).decode()
            + "\n"
        )
    else:
        through = f"seq 0..{last}" if last is not None else "no events"
        sys.stderr.write(
            f'partial export of session "{session_id}": {len(events)} stored events written ({through}), then '
            f"stopped at the damage ({damage.code}) in {location}, offset {offset}:\n  {damage}\n"
        )
    raise typer.Exit(code=PARTIAL_EXIT)


@app.command("export")
def export_command(
    session_id: Annotated[str, typer.Argument(help="The session to export.")],
    store: StoreOption = None,
    backend: BackendOption = BackendKind.jsonl,
    compression: CompressionOption = Compression.zstd,
    as_json: JsonOption = False,
    partial: Annotated[
        bool,
        typer.Option(
            "--partial",
            help=f"On a damaged log, print the records before the damage and say where it is (exit {PARTIAL_EXIT}).",
        ),
    ] = False,
) -> None:
    """Print one JSON document: header, events, surface, derived messages, request header and context.

    With --partial, a damaged log (SESSION_CORRUPT) is salvaged instead of refused: the document holds the
    header, the stored events before the damage and a "damage" object (code, message, location, offset,
    afterSeq); stderr says where the export stopped and the exit code is 3. A healthy log exports as usual.
    """
    try:
        reader = _reader(open_backend(store, backend, compression, read_only=True))
        try:
            try:
                snapshot = reader.inspect(session_id)
                view = reader.view(session_id)
            except SessionPersistenceCorruptionError as err:
                if not partial:
                    raise
                _export_partial(reader, session_id, err, as_json)
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
        storage = open_backend(store, backend, compression, read_only=True)
        if session_ids:
            _require_store(storage, session_ids[0])
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
        columns = ("id", "status", "events", "detail")
        for column in columns:
            table.add_column(column, overflow="fold")
        cells: list[list[str]] = [list(columns)]
        for r in results:
            colour = {"ok": "green", "repairable": "yellow", "failed": "red"}[r["status"]]
            detail = r["error"]["message"] if r["error"] else (r.get("note") or "")
            cells.append([str(r["id"]), str(r["status"]), str(r["events"] or ""), str(detail)])
            table.add_row(r["id"], f"[{colour}]{r['status']}[/]", str(r["events"] or ""), detail)
        _table_console(cells).print(table)
    if failed:
        raise typer.Exit(code=1)


def _verify_one(reader: PersistenceCoordinator, session_id: str) -> dict[str, Any]:
    from ..kernel.invariants import check_tool_pairing

    result: dict[str, Any] = {"id": session_id, "status": "ok", "events": None, "error": None, "note": None}
    try:
        stored = reader.backend.load_stored(session_id)
        if stored is None:
            raise SessionNotFoundError(f'session "{session_id}" not found')
        view = reader.view(session_id)  # every validation layer and the surface replay
        # A closed turn with an unanswered call (older builds on cancel): every request would be refused.
        check_tool_pairing(view.derive_messages(), session_id, view.events)
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


# --- running an agent ---------------------------------------------------------------------------------

DEFAULT_PROVIDER = "deepseek"
DEFAULT_MAX_RETRIES = 5
DEFAULT_MAX_STEPS = 50
"""The agent loop's own default (``agentlog.agent.loop.DEFAULT_MAX_STEPS``; a test keeps them equal)."""
MAX_REPLAY_GAP_S = 2.0
"""``replay`` waits at most this long (before dividing by ``--speed``) between two recorded chunks."""

ModelOption = Annotated[
    str | None,
    typer.Option("--model", help="Model name (default: deepseek-chat; on resume, the session's).", show_default=False),
]
BaseUrlOption = Annotated[
    str | None,
    typer.Option("--base-url", help="OpenAI-compatible endpoint (default: the DeepSeek API).", show_default=False),
]
SystemOption = Annotated[
    str | None,
    typer.Option("--system", help="System prompt (on resume: the session's unless given).", show_default=False),
]
CwdOption = Annotated[
    Path | None,
    typer.Option(
        "--cwd",
        help="Working directory of the tools (default: the current directory; on resume, the session's).",
        exists=True,
        file_okay=False,
        dir_okay=True,
        show_default=False,
    ),
]
ProviderOption = Annotated[
    str | None,
    typer.Option(
        "--provider",
        help="Provider name recorded in the log (default: deepseek; on resume, the session's).",
        show_default=False,
    ),
]
MaxStepsOption = Annotated[
    int,
    typer.Option(
        "--max-steps",
        min=1,
        help="Steps (model calls) one turn may take; a turn that needs more ends with MAX_STEPS_EXCEEDED.",
    ),
]
MaxRetriesOption = Annotated[
    int,
    typer.Option(
        "--max-retries", min=0, help="Logged retries of a failed model request (rate limit, server, transport)."
    ),
]
ApiKeyOption = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        help="API key (default: $DEEPSEEK_API_KEY, then $OPENAI_API_KEY; a loopback --base-url needs none). "
        "--api-key '' sends no key. Prefer the environment: a command line is visible to other users.",
        show_default=False,
    ),
]
AllowCommandOption = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-command",
        metavar="PATTERN",
        help="Let run_command start command lines matching PATTERN (fnmatch-style, whole line; wildcards never "
        "match ; & | < > ( ) $ ` or a line break). Repeatable. Without it (or --yes) every command is refused.",
        show_default=False,
    ),
]
YesOption = Annotated[
    bool,
    typer.Option("--yes", "-y", help="Let run_command start every command (it is not confined to --cwd)."),
]
TimeoutOption = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        metavar="SECONDS",
        min=0.001,
        help="Provider idle timeout: the longest wait for the next streamed data event (keep-alive comments "
        "do not count). Default: 300.",
        show_default=False,
    ),
]
COMMAND_HINT = (
    "To allow it, re-run with --allow-command PATTERN (repeatable, e.g. --allow-command 'pytest *') "
    "or --yes to allow every command."
)


def _command_policy(allow: Sequence[str] | None, yes: bool) -> CommandPolicy:
    """``--yes`` allows every command; otherwise only ``--allow-command`` patterns (none: deny all)."""
    from ..agent.builtin_tools import CommandPolicy

    if yes:
        return CommandPolicy.allow_all()
    return CommandPolicy(allow_patterns=tuple(allow or ()), hint=COMMAND_HINT)


def _short(text: str, limit: int = 160) -> str:
    """One line of at most ``limit`` characters (whitespace runs collapsed, a cut marked with …)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _text_of(blocks: Any) -> str:
    if not isinstance(blocks, Sequence) or isinstance(blocks, str):
        return ""
    return "".join(b.get("text", "") for b in blocks if isinstance(b, Mapping) and b.get("type") == "text")


def _fail_with(code: str, message: str, as_json: bool) -> NoReturn:
    _fail(AgentlogError(message, code=code), as_json)


class _EventPrinter:
    """Renders session events for people: streamed answer text, tool calls (→) and their results (←).

    Used live by ``run``/``resume`` (subscribed to the store's ``on_event``) and by ``replay``.
    """

    def __init__(self, *, prompts: bool = False) -> None:
        self.prompts = prompts
        self._mid_line = False

    def _write(self, text: str) -> None:
        if text:
            sys.stdout.write(text)
            sys.stdout.flush()
            self._mid_line = not text.endswith("\n")

    def end_line(self) -> None:
        if self._mid_line:
            self._write("\n")

    def line(self, text: str) -> None:
        self.end_line()
        self._write(text + "\n")

    def __call__(self, event: Mapping[str, Any]) -> None:
        etype = event["type"]
        data = event["data"]
        if not isinstance(data, Mapping):
            return
        if etype == "assistant/chunk":
            chunk = data.get("chunk")
            if isinstance(chunk, Mapping) and chunk.get("type") == "text-delta":
                self._write(str(chunk.get("text", "")))
        elif etype == "tool/call":
            self.line(f"→ {data.get('name')} {_short(str(data.get('arguments', '')))}")
        elif etype == "tool/result":
            error = data.get("error")
            if isinstance(error, Mapping):
                self.line(f"← error {error.get('code')}")
            else:
                blocks = (data.get("message") or {}).get("content") or ()
                failed = any(isinstance(b, Mapping) and b.get("isError") for b in blocks)
                self.line("← error" if failed else "← ok")
        elif etype == "user/message" and self.prompts:
            source = data.get("source")
            if isinstance(source, Mapping) and source.get("kind") == "user":
                self.line(f"> {_text_of(data.get('content'))}")
        elif etype == "llm/retry":
            failure = data.get("failure") or {}
            self.end_line()
            sys.stderr.write(
                f"retry {data.get('retry')}/{data.get('maxRetries')} in {data.get('delayMs')} ms after "
                f"{failure.get('code')}: {_short(str(failure.get('message', '')), 200)}\n"
            )
        elif etype == "turn/end":
            self.end_line()


def _new_session_id(storage: Backend) -> str:
    while True:
        candidate = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        if storage.read_revision(candidate) is None:
            return candidate


def _require_absent(storage: Backend, session_id: str) -> None:
    if storage.read_revision(session_id) is not None:
        raise SessionExistsError(f'session "{session_id}" already exists in the store')


def _api_key(provider: str, api_key: str | None = None, base_url: str | None = None) -> str:
    """``--api-key`` as given (``""``: send none), else DEEPSEEK_API_KEY (DeepSeek's host only) or
    OPENAI_API_KEY, else ``""`` for a loopback ``--base-url``; otherwise ``MISSING_API_KEY`` naming the ways
    to give one."""
    from ..llm.openai_compat import DEEPSEEK_BASE_URL, resolve_api_key
    from ..llm.types import MissingApiKeyError

    try:
        return resolve_api_key(api_key, provider, base_url or DEEPSEEK_BASE_URL)
    except MissingApiKeyError:
        raise MissingApiKeyError(
            f'no API key for provider "{provider}": set DEEPSEEK_API_KEY (read for api.deepseek.com only) or '
            "OPENAI_API_KEY (any endpoint given with --base-url), or pass --api-key KEY (--api-key '' for a "
            "server that needs none; a loopback --base-url needs none)"
        ) from None


def _release(coordinator: PersistenceCoordinator, sessions: Sequence[Session]) -> AgentlogError | None:
    """Flush, dispose and close: nothing stays live or locked. Returns the first persistence failure."""
    failure: AgentlogError | None = None
    store = coordinator.store
    for session in sessions:
        try:
            store.flush(session)
        except AgentlogError as err:
            failure = failure or err
    for session in sessions:
        store.dispose(session)
    try:
        coordinator.close()
    except AgentlogError as err:
        failure = failure or err
    return failure


async def _agent_turns(
    session: Session,
    store: SessionStore,
    options: AgentOptions,
    *,
    api_key: str,
    base_url: str | None,
    prompt: str,
    command_policy: CommandPolicy | None = None,
    timeout_s: float | None = None,
    signals: list[int] | None = None,
) -> list[TurnOutcome]:
    from ..agent.builtin_tools import CommandPolicy, builtin_registry
    from ..agent.loop import Agent
    from ..llm.openai_compat import DEFAULT_TIMEOUT_S, OpenAICompatibleProvider

    provider = OpenAICompatibleProvider(
        base_url=base_url,
        model=options.model,
        api_key=api_key,
        provider=options.provider,
        timeout_s=timeout_s if timeout_s is not None else DEFAULT_TIMEOUT_S,
    )
    loop = asyncio.get_running_loop()
    policy = command_policy if command_policy is not None else CommandPolicy(hint=COMMAND_HINT)
    agent = Agent(session, provider, options, tools=builtin_registry(command_policy=policy), store=store)

    received = signals if signals is not None else []
    task = asyncio.current_task()

    def interrupt(signum: int) -> None:
        # The first SIGINT/SIGTERM cancels the turn the documented way (streamed text is kept as an
        # interrupted message, a running command is killed and its result recorded); a second one
        # cancels the task: a call still running is answered TOOL_OUTCOME_UNKNOWN. Either way the turn
        # is closed with every call answered and flushed before the command exits (130 / 143).
        received.append(signum)
        if len(received) == 1:
            agent.cancel({"kind": "user"} if signum == signal.SIGINT else {"kind": "hook", "reason": "SIGTERM"})
        elif task is not None:
            task.cancel()

    handled: list[int] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(signum, interrupt, signum)
            handled.append(signum)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signal support
            break
    try:
        agent.followup(prompt)
        return await agent.run()
    finally:
        for installed in handled:
            loop.remove_signal_handler(installed)
            if received:  # the command is on its way out (flush, release, exit 130/143): stay on course
                signal.signal(installed, signal.SIG_IGN)
        await provider.aclose()


def _run_agent(
    coordinator: PersistenceCoordinator,
    session: Session,
    options: AgentOptions,
    *,
    api_key: str,
    base_url: str | None,
    prompt: str,
    as_json: bool,
    extra: Mapping[str, Any] | None = None,
    command_policy: CommandPolicy | None = None,
    timeout_s: float | None = None,
) -> None:
    """Run the prompt to the end, release the session, report; exit non-zero if the turn failed."""
    store = coordinator.store
    printer = None if as_json else _EventPrinter()
    unsubscribe: Callable[[], None] | None = None
    if printer is not None:
        watched = printer

        def on_event(source: Session, event: Any) -> None:
            if source is session:
                watched(event)

        unsubscribe = store.on_event(on_event)
    outcomes: list[TurnOutcome] = []
    failure: AgentlogError | None = None
    interrupted = False
    signals: list[int] = []
    try:
        turns = _agent_turns(
            session,
            store,
            options,
            api_key=api_key,
            base_url=base_url,
            prompt=prompt,
            command_policy=command_policy,
            timeout_s=timeout_s,
            signals=signals,
        )
        outcomes = asyncio.run(turns)
    except (KeyboardInterrupt, asyncio.CancelledError):
        interrupted = True  # the loop closed the turn as aborted before the interrupt reached here
    except AgentlogError as err:
        failure = err
    finally:
        if unsubscribe is not None:
            unsubscribe()
        released = _release(coordinator, [session])
    failure = failure or released
    if printer is not None:
        printer.end_line()
    if as_json:
        document: dict[str, Any] = {"sessionId": session.id}
        document.update(extra or {})
        document["turns"] = [{"turn": o.turn, "reason": thaw(o.reason)} for o in outcomes]
        document["messages"] = thaw(session.derive_messages().to_list())
        _emit_json(document)
    else:
        typer.echo(f"session {session.id}")
    if failure is not None:
        _fail(failure, as_json)
    last: dict[str, Any] = outcomes[-1].reason if outcomes else {"kind": "completed"}
    if signals or interrupted:
        # 128 + the signal number, as a shell reports it: 130 for SIGINT (Ctrl-C), 143 for SIGTERM.
        name = "SIGTERM" if signals and signals[0] == signal.SIGTERM else "SIGINT"
        try:
            _fail_with(
                "TURN_ABORTED", f"interrupted ({name}): the turn was closed as aborted (the log stays valid)", as_json
            )
        except typer.Exit:
            raise typer.Exit(code=143 if name == "SIGTERM" else 130) from None
    if last["kind"] == "aborted":
        _fail_with("TURN_ABORTED", "interrupted: the turn was closed as aborted (the log stays valid)", as_json)
    if last["kind"] == "error":
        error = last.get("error") or {}
        _fail_with(str(error.get("code") or "UNKNOWN"), str(error.get("message") or "the turn failed"), as_json)
    if last["kind"] == "blocked":
        _fail_with("TURN_BLOCKED", "the turn was blocked", as_json)


def _agent_options(
    *,
    provider: str,
    model: str,
    system: str | None,
    cwd: Path,
    max_retries: int,
    config: Mapping[str, Any] | None = None,
    max_steps: int | None = None,
) -> AgentOptions:
    from ..agent.loop import AgentOptions, RetryPolicy

    config = config or {}
    effort = config.get("reasoningEffort")
    temperature = config.get("temperature")
    max_tokens = config.get("maxTokens")
    return AgentOptions(
        provider=provider,
        model=model,
        system=system,
        reasoning_effort=effort if isinstance(effort, str) else None,
        temperature=float(temperature) if isinstance(temperature, (int, float)) else None,
        max_tokens=max_tokens if isinstance(max_tokens, int) else None,
        retry=RetryPolicy(max_retries=max_retries),
        cwd=cwd,
        max_steps=max_steps if max_steps is not None else DEFAULT_MAX_STEPS,
    )


@app.command("run")
def run_command(
    prompt: Annotated[str, typer.Argument(help="The prompt of the first turn.")],
    store: StoreOption = None,
    backend: BackendOption = BackendKind.jsonl,
    compression: CompressionOption = Compression.zstd,
    as_json: JsonOption = False,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
    system: SystemOption = None,
    cwd: CwdOption = None,
    session_id: Annotated[
        str | None, typer.Option("--session-id", help="Id of the new session (default: time + random).")
    ] = None,
    provider: ProviderOption = None,
    max_retries: MaxRetriesOption = DEFAULT_MAX_RETRIES,
    max_steps: MaxStepsOption = DEFAULT_MAX_STEPS,
    api_key_option: ApiKeyOption = None,
    allow_command: AllowCommandOption = None,
    yes: YesOption = False,
    timeout: TimeoutOption = None,
) -> None:
    """Start a new session and run an agent (built-in tools) on PROMPT, streaming its answer.

    run_command refuses every command unless --allow-command PATTERN or --yes allows it.
    """
    work_dir = Path(os.path.abspath(cwd if cwd is not None else Path.cwd()))
    route = provider or DEFAULT_PROVIDER
    try:
        api_key = _api_key(route, api_key_option, base_url)
        command_policy = _command_policy(allow_command, yes)
        storage = open_backend(store, backend, compression)
        if session_id is not None:
            _require_absent(storage, session_id)
        new_id = session_id if session_id is not None else _new_session_id(storage)
    except AgentlogError as err:
        _fail(err, as_json)
    from ..llm.openai_compat import DEFAULT_MODEL

    sessions = SessionStore()
    coordinator = PersistenceCoordinator(sessions, storage)
    try:
        session = sessions.create(new_id, meta={"cwd": str(work_dir)})
    except AgentlogError as err:
        coordinator.close()
        _fail(err, as_json)
    options = _agent_options(
        provider=route,
        model=model or DEFAULT_MODEL,
        system=system,
        cwd=work_dir,
        max_retries=max_retries,
        max_steps=max_steps,
    )
    _run_agent(
        coordinator,
        session,
        options,
        api_key=api_key,
        base_url=base_url,
        prompt=prompt,
        as_json=as_json,
        command_policy=command_policy,
        timeout_s=timeout,
    )


def _last_turn(events: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    for event in reversed(events):
        if event["type"] == "turn/end":
            return {"turn": event["data"].get("turn"), "reason": thaw(event["data"].get("reason"))}
    return None


@app.command("resume")
def resume_command(
    session_id: Annotated[str, typer.Argument(help="The session to resume.")],
    prompt: Annotated[str | None, typer.Argument(help="A follow-up prompt (omit to only resume and report).")] = None,
    store: StoreOption = None,
    backend: BackendOption = BackendKind.jsonl,
    compression: CompressionOption = Compression.zstd,
    as_json: JsonOption = False,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
    system: SystemOption = None,
    cwd: CwdOption = None,
    provider: ProviderOption = None,
    max_retries: MaxRetriesOption = DEFAULT_MAX_RETRIES,
    max_steps: MaxStepsOption = DEFAULT_MAX_STEPS,
    api_key_option: ApiKeyOption = None,
    allow_command: AllowCommandOption = None,
    yes: YesOption = False,
    timeout: TimeoutOption = None,
) -> None:
    """Resume a stored session (an interrupted turn is repaired), then run PROMPT if given.

    As with run, run_command refuses every command unless --allow-command PATTERN or --yes allows it.
    """
    try:
        api_key = _api_key(provider or DEFAULT_PROVIDER, api_key_option, base_url) if prompt is not None else ""
        command_policy = _command_policy(allow_command, yes)
        storage = open_backend(store, backend, compression)
        stored = storage.load_stored(session_id)
        if stored is None:
            storage.close()
            raise SessionNotFoundError(f'session "{session_id}" not found')
    except AgentlogError as err:
        _fail(err, as_json)
    repairs: list[str] = []
    if stored.torn_marker is not None:
        repairs.append("removed a torn tail")
    if interrupted_turn_closers(stored.events):
        repairs.append("closed the interrupted turn")
    sessions = SessionStore()
    coordinator = PersistenceCoordinator(sessions, storage)
    try:
        session = coordinator.resume(session_id)
    except AgentlogError as err:
        coordinator.close()
        _fail(err, as_json)
    state = {"repaired": bool(repairs), "repairs": repairs}
    if prompt is None:
        events = session.events
        last = _last_turn(events)
        failure = _release(coordinator, [session])
        if failure is not None:
            _fail(failure, as_json)
        if as_json:
            _emit_json({"sessionId": session_id, "events": len(events), "lastTurn": last, **state})
            return
        turn = "no turn yet" if last is None else f"last turn {last['turn']} ({last['reason'].get('kind')})"
        typer.echo(f"session {session_id}: {len(events)} events, {turn}")
        typer.echo(f"repaired: {'; '.join(repairs)}" if repairs else "repaired: no (the log was already balanced)")
        return
    from ..llm.openai_compat import DEFAULT_MODEL

    header = session.request_header()
    config: Mapping[str, Any] = header["config"] if header is not None else {}
    persisted_system = header.get("system") if header is not None else None
    header_cwd = session.header.get("cwd")
    work_dir = Path(os.path.abspath(cwd)) if cwd is not None else Path(header_cwd or os.getcwd())
    options = _agent_options(
        provider=provider or str(config.get("provider") or DEFAULT_PROVIDER),
        model=model or str(config.get("model") or DEFAULT_MODEL),
        system=system if system is not None else persisted_system,
        cwd=work_dir,
        max_retries=max_retries,
        config=config,
        max_steps=max_steps,
    )
    _run_agent(
        coordinator,
        session,
        options,
        api_key=api_key,
        base_url=base_url,
        prompt=prompt,
        as_json=as_json,
        extra=state,
        command_policy=command_policy,
        timeout_s=timeout,
    )


# --- reading sessions for people ------------------------------------------------------------------------


def _transcript(messages: Sequence[Mapping[str, Any]], limit: int = 400) -> list[str]:
    """Readable lines for derived messages: roles, text, tool calls (→) and results (←), shortened."""
    names: dict[str, str] = {}
    lines: list[str] = []
    for message in messages:
        role = str(message.get("role"))
        source = message.get("source")
        kind = source.get("kind") if isinstance(source, Mapping) else None
        label = role if kind in (None, "user", "model", "tool") else f"{role} ({kind})"
        for block in message.get("content") or ():
            if not isinstance(block, Mapping):
                continue
            btype = block.get("type")
            if btype == "text":
                lines.append(f"{label}: {_short(str(block.get('text', '')), limit)}")
            elif btype == "reasoning":
                lines.append(f"{label} (reasoning): {_short(str(block.get('text', '')), limit)}")
            elif btype == "tool-call":
                call_id = str(block.get("id"))
                names[call_id] = str(block.get("name"))
                lines.append(f"  → {block.get('name')} {_short(str(block.get('arguments', '')), 160)}")
            elif btype == "tool-result":
                call_id = str(block.get("toolCallId"))
                status = "error" if block.get("isError") else "ok"
                text = _short(_text_of(block.get("content")), 160)
                lines.append(f"  ← {names.get(call_id, call_id)} {status}: {text}")
            elif btype == "image":
                lines.append(f"{label}: [image]")
    return lines


PENDING_MARK = "(would be added on resume)"
"""``show --log`` marks the closers of an unrepaired interrupted turn with this: not stored yet."""


def _event_line(event: Mapping[str, Any]) -> str:
    data = event["data"]
    shown = orjson.dumps(data).decode() if data is not None else ""
    return f"{event['seq']:>6}  {event['type']:<22}  {_short(shown, 110)}"


def _read_view(
    session_id: str, store: Path | None, backend: BackendKind, compression: Compression, as_json: bool
) -> tuple[Any, Any]:
    """``(header, SessionView)`` of a stored session, read without writing (a cold view is balanced)."""
    header, view, _stored = _open_view(session_id, store, backend, compression, as_json, with_stored=False)
    return header, view


def _open_view(
    session_id: str,
    store: Path | None,
    backend: BackendKind,
    compression: Compression,
    as_json: bool,
    *,
    with_stored: bool,
) -> tuple[Any, Any, StoredPrefix | None]:
    """``(header, SessionView, stored prefix or None)``: the balanced view and, on request, the stored
    prefix itself, so a caller can tell stored events from the closers a resume would add."""
    try:
        reader = _reader(open_backend(store, backend, compression, read_only=True))
        try:
            view = reader.view(session_id)
            stored = reader.backend.load_stored(session_id) if with_stored else None
        finally:
            reader.close()
    except AgentlogError as err:
        _fail(err, as_json)
    return view.header, view, stored


@app.command("show")
def show_command(
    session_id: Annotated[str, typer.Argument(help="The session to show.")],
    store: StoreOption = None,
    backend: BackendOption = BackendKind.jsonl,
    compression: CompressionOption = Compression.zstd,
    as_json: JsonOption = False,
    log: Annotated[bool, typer.Option("--log", help="Every event: seq, type and (shortened) data.")] = False,
    at: Annotated[
        int | None, typer.Option("--at", min=0, help="The model's view right after this seq.", show_default=False)
    ] = None,
) -> None:
    """A readable transcript of a stored session (never writes).

    An interrupted session is shown as a resume would see it; with ``--log`` the closing events that
    are not stored yet are marked "would be added on resume".
    """
    header, view, stored = _open_view(session_id, store, backend, compression, as_json, with_stored=log)
    events = view.events
    if at is not None:
        try:
            if at >= len(events):
                last = len(events) - 1
                raise SeqOutOfRangeError(
                    f'seq {at} is not in session "{session_id}" (last seq: {last if last >= 0 else "none"})'
                )
            point = Session.create(session_id, seed=list(events), header=header).at(at)
        except AgentlogError as err:
            _fail(err, as_json)
        messages = thaw(point.derive_messages().to_list())
        request_header = thaw(point.request_header())
        if as_json:
            _emit_json(
                {
                    "sessionId": session_id,
                    "seq": at,
                    "event": {"type": events[at]["type"]},
                    "messages": messages,
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
            typer.echo(f"request header: {config.get('provider')}/{config.get('model')}, tools: {', '.join(tools)}")
            if request_header.get("system"):
                typer.echo(f"system: {_short(str(request_header['system']))}")
        for line in _transcript(messages):
            typer.echo(line)
        return
    if log:
        # Events past the last stored seq are the in-memory closers of an interrupted turn.
        last_stored = stored.events[-1]["seq"] if stored is not None and stored.events else -1
        pending = [event["seq"] for event in events if event["seq"] > last_stored]
        torn = stored is not None and stored.torn_marker is not None
        if as_json:
            _emit_json(
                {
                    "sessionId": session_id,
                    "header": thaw(header),
                    "events": thaw(events.to_list()),
                    "storedEvents": len(events) - len(pending),
                    "wouldBeAddedOnResume": pending,
                    "tornTail": torn,
                }
            )
            return
        for event in events:
            line = _event_line(event)
            typer.echo(f"{line}  {PENDING_MARK}" if event["seq"] > last_stored else line)
        if torn:
            typer.echo(f"(a torn tail after seq {last_stored} is not shown; it would be removed on resume)")
        return
    messages = thaw(view.derive_messages().to_list())
    if as_json:
        _emit_json(
            {
                "sessionId": session_id,
                "header": thaw(header),
                "events": len(events),
                "lastTurn": _last_turn(events),
                "messages": messages,
            }
        )
        return
    parent = header.get("parentSession")
    lineage = f", forked from {parent}" if parent else ""
    typer.echo(f"session {session_id} ({header.get('cwd')}{lineage}): {len(events)} events")
    for line in _transcript(messages):
        typer.echo(line)


@app.command("replay")
def replay_command(
    session_id: Annotated[str, typer.Argument(help="The session to play back.")],
    store: StoreOption = None,
    backend: BackendOption = BackendKind.jsonl,
    compression: CompressionOption = Compression.zstd,
    speed: Annotated[
        float, typer.Option("--speed", min=0.0, help="Playback speed (2 = twice as fast; 0 = no waiting).")
    ] = 1.0,
) -> None:
    """Play a session back token by token at its recorded pace (never writes, needs no network)."""
    _header, view = _read_view(session_id, store, backend, compression, False)
    printer = _EventPrinter(prompts=True)
    previous: int | None = None
    for event in view.events:
        when = event.get("time")
        if event["type"] == "assistant/chunk" and speed > 0 and isinstance(when, int) and previous is not None:
            gap = min(max(when - previous, 0) / 1000, MAX_REPLAY_GAP_S) / speed
            if gap > 0:
                time.sleep(gap)
        if event["type"] == "llm/retry":
            data = event["data"]
            printer.end_line()
            failure = data.get("failure") or {}
            sys.stderr.write(f"(retry {data.get('retry')} after {failure.get('code')})\n")
        else:
            printer(event)
        if isinstance(when, int):
            previous = when
    printer.end_line()


# --- forking -------------------------------------------------------------------------------------------


@app.command("fork")
def fork_command(
    session_id: Annotated[str, typer.Argument(help="The session to fork.")],
    store: StoreOption = None,
    backend: BackendOption = BackendKind.jsonl,
    compression: CompressionOption = Compression.zstd,
    as_json: JsonOption = False,
    at: Annotated[
        int | None,
        typer.Option("--at", help="Last seq the child inherits (a closed turn; default: the end).", show_default=False),
    ] = None,
    child_id: Annotated[
        str | None, typer.Option("--child-id", help="Id of the child (default: <id>-fork-<random>).")
    ] = None,
) -> None:
    """Start a child session from a closed-turn prefix of SESSION_ID (lineage in its header)."""
    try:
        storage = open_backend(store, backend, compression)
        if child_id is not None:
            _require_absent(storage, child_id)
        else:
            child_id = f"{session_id}-fork-{secrets.token_hex(3)}"
            while storage.read_revision(child_id) is not None:
                child_id = f"{session_id}-fork-{secrets.token_hex(3)}"
    except AgentlogError as err:
        _fail(err, as_json)
    sessions = SessionStore()
    coordinator = PersistenceCoordinator(sessions, storage)
    live: list[Session] = []
    failure: AgentlogError | None = None
    child: Session | None = None
    try:
        source = coordinator.resume(session_id)
        live.append(source)
        child = sessions.fork(source, at, child_id)
        live.append(child)
    except AgentlogError as err:
        failure = err
    finally:
        released = _release(coordinator, list(reversed(live)))
    failure = failure or released
    if failure is not None or child is None:
        _fail(failure or AgentlogError("fork failed"), as_json)
    document = {
        "childId": child.id,
        "parentSession": child.header.get("parentSession"),
        "seedLength": child.header.get("seedLength"),
    }
    if as_json:
        _emit_json(document)
    else:
        typer.echo(child.id)


# --- demo ----------------------------------------------------------------------------------------------


@app.command("demo")
def demo_command(store: StoreOption = None, as_json: JsonOption = False) -> None:
    """A scripted, offline agent session against a local model (no API key needed)."""
    # Imported by name at call time: the demo module is optional for every other command.
    run_demo: Callable[..., int] = importlib.import_module(f"{__package__}.demo").run_demo
    code = run_demo(store=store, as_json=as_json)
    if code:
        raise typer.Exit(code=code)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version("agentlog")
        except PackageNotFoundError:  # running from a source tree that was never installed
            from .. import __version__ as installed
        typer.echo(f"agentlog {installed}")
        raise typer.Exit()


@app.callback()
def _app_options(
    show_version: Annotated[
        bool,
        typer.Option("--version", help="Print the version and exit.", callback=_print_version, is_eager=True),
    ] = False,
) -> None:
    """agentlog: an agent session as an append-only, validated event log."""


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
