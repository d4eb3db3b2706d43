"""The agent commands ``run``, ``resume``, ``fork`` and ``compact`` (they write through a
:class:`~agentlog.persistence.coordinator.PersistenceCoordinator` and leave nothing live or locked when
they return), and ``replay``, which plays a stored session back and never writes."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer

from ..errors import (
    AgentlogError,
    SessionExistsError,
    SessionNotFoundError,
    TurnAborted,
    TurnBlockedError,
    TurnFailedError,
)
from ..kernel.events import ASSISTANT_CHUNK
from ..kernel.jsonvalue import thaw
from ..kernel.labels import check_tag, parse_label_filter
from ..kernel.repair import interrupted_turn_closers
from ..kernel.session import Session
from ..kernel.store import SessionStore
from ..llm.events import LLM_RETRY
from ..persistence.backend import Backend
from ..persistence.coordinator import PersistenceCoordinator
from ._reading import _last_turn, _read_view
from .options import DEFAULT_OPTIONS, OptionGroup, StoreOptions, shared_options
from .projection_commands import LiveProjections, attach_projections
from .render import _ChunkedStdout, _emit_json, _EventPrinter, render_error

if TYPE_CHECKING:  # the agent and the HTTP client load only for the commands that run a model
    from ..agent.builtin_tools import CommandPolicy
    from ..agent.loop import AgentOptions, TurnOutcome
    from ..compaction import CompactionEngine, CompactionResult
    from ..llm.openai_compat import OpenAICompatibleProvider
    from ..projection.title_service import SessionTitleService

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
ContextWindowOption = Annotated[
    int | None,
    typer.Option(
        "--context-window",
        metavar="TOKENS",
        min=1,
        help="The model's context window in tokens (compaction keeps each request under it). Default: "
        "1,000,000 on the DeepSeek API; none elsewhere (no pressure compaction); on resume, the session's last.",
        show_default=False,
    ),
]
NoCompactionOption = Annotated[
    bool,
    typer.Option(
        "--no-compaction",
        help="Do not compact (by default large tool results are pruned and old turns summarized when a request "
        "nears the context window or overflows it).",
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


SessionIdOption = Annotated[
    str | None, typer.Option("--session-id", help="Id of the new session (default: time + random).")
]


@dataclass(frozen=True, slots=True)
class ModelRunOptions:
    """The options of the commands that run the model (``run``; ``resume`` with a prompt)."""

    model: str | None = None
    base_url: str | None = None
    system: str | None = None
    cwd: Path | None = None
    session_id: str | None = None  # run only: the id of the new session
    provider: str | None = None
    max_retries: int = DEFAULT_MAX_RETRIES
    max_steps: int = DEFAULT_MAX_STEPS
    api_key: str | None = None
    allow_command: list[str] | None = None
    yes: bool = False
    timeout: float | None = None
    context_window: int | None = None
    no_compaction: bool = False

    def resolve_api_key(self, provider: str) -> str:
        """The key sent to ``provider`` (see :func:`_api_key`)."""
        return _api_key(provider, self.api_key, self.base_url)

    def command_policy(self) -> CommandPolicy:
        """Which command lines ``run_command`` may start (see :func:`_command_policy`)."""
        return _command_policy(self.allow_command, self.yes)


DEFAULT_MODEL_RUN = ModelRunOptions()

model_options = OptionGroup(
    ModelRunOptions,
    {
        "model": ModelOption,
        "base_url": BaseUrlOption,
        "system": SystemOption,
        "cwd": CwdOption,
        "session_id": SessionIdOption,
        "provider": ProviderOption,
        "max_retries": MaxRetriesOption,
        "max_steps": MaxStepsOption,
        "api_key": ApiKeyOption,
        "allow_command": AllowCommandOption,
        "yes": YesOption,
        "timeout": TimeoutOption,
        "context_window": ContextWindowOption,
        "no_compaction": NoCompactionOption,
    },
)
"""``@model_options()`` gives a command the model options as its ``run: ModelRunOptions`` parameter."""


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


def _release(
    coordinator: PersistenceCoordinator,
    sessions: Sequence[Session],
    *,
    projections: LiveProjections | None = None,
) -> AgentlogError | None:
    """Flush, dispose and close: nothing stays live or locked. Returns the first persistence failure.

    With ``projections`` (see :func:`~agentlog.cli.projection_commands.attach_projections`), each
    flushed session's cache record is written before it is disposed, and the services are closed
    before the coordinator (their queued writes land first). Cache failures only warn."""
    failure: AgentlogError | None = None
    store = coordinator.store
    for session in sessions:
        try:
            store.flush(session)
        except AgentlogError as err:
            failure = failure or err
            continue
        if projections is not None:
            projections.checkpoint(session)
    for session in sessions:
        store.dispose(session)
    if projections is not None:
        projections.close()
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
    compaction: bool = True,
    titles: SessionTitleService | None = None,
) -> list[TurnOutcome]:
    from ..agent.builtin_tools import CommandPolicy, builtin_registry
    from ..agent.loop import Agent

    provider = _provider(options, api_key=api_key, base_url=base_url, timeout_s=timeout_s)
    loop = asyncio.get_running_loop()
    policy = command_policy if command_policy is not None else CommandPolicy(hint=COMMAND_HINT)
    agent = Agent(
        session,
        provider,
        options,
        tools=builtin_registry(command_policy=policy),
        store=store,
        compaction=_compaction_engine() if compaction else None,
    )

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
        outcomes = await agent.run()
        if titles is not None:
            await titles.settle(session)  # the fallback title of the first prompt lands before the release
        return outcomes
    finally:
        for installed in handled:
            loop.remove_signal_handler(installed)
            if received:  # the command is on its way out (flush, release, exit 130/143): stay on course
                signal.signal(installed, signal.SIG_IGN)
        await provider.aclose()


def _provider(
    options: AgentOptions, *, api_key: str, base_url: str | None, timeout_s: float | None
) -> OpenAICompatibleProvider:
    """The OpenAI-compatible provider of ``options``' route and model; ``options.context_window`` (from
    ``--context-window``) is the window its model info reports to compaction."""
    from ..llm.openai_compat import DEFAULT_TIMEOUT_S, OpenAICompatibleProvider

    return OpenAICompatibleProvider(
        base_url=base_url,
        model=options.model,
        api_key=api_key,
        provider=options.provider,
        timeout_s=timeout_s if timeout_s is not None else DEFAULT_TIMEOUT_S,
        context_window=options.context_window,
    )


def _compaction_engine() -> CompactionEngine:
    """The engine ``run``, ``resume`` and ``compact`` install: the default configuration (threshold 80% of
    the window, tool-result pruning first, summaries written by the session's own model)."""
    from ..compaction import CompactionEngine

    return CompactionEngine()


def _recorded_context_window(session: Any) -> int | None:
    """The context window the session last ran with (its ``request/context``'s ``contextWindow``)."""
    context = session.request_context()
    window = context.get("contextWindow") if context is not None else None
    return window if type(window) is int and window > 0 else None


def _run_agent(
    coordinator: PersistenceCoordinator,
    session: Session,
    options: AgentOptions,
    run: ModelRunOptions,
    *,
    api_key: str,
    prompt: str,
    as_json: bool,
    extra: Mapping[str, Any] | None = None,
    command_policy: CommandPolicy | None = None,
    projections: LiveProjections | None = None,
) -> None:
    """Run the prompt to the end, release the session, report; exit non-zero if the turn failed.

    ``run`` gives the endpoint (``--base-url``) and the idle timeout (``--timeout``); ``projections``
    (attached to the coordinator's store) keep the cache current and title the session."""
    store = coordinator.store
    printer = None if as_json else _EventPrinter()
    unsubscribe: Callable[[], None] | None = None
    if printer is not None:
        printer.remember(session.events)
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
            base_url=run.base_url,
            prompt=prompt,
            command_policy=command_policy,
            timeout_s=run.timeout,
            signals=signals,
            compaction=not run.no_compaction,
            titles=projections.titles if projections is not None else None,
        )
        outcomes = asyncio.run(turns)
    except (KeyboardInterrupt, asyncio.CancelledError):
        interrupted = True  # the loop closed the turn as aborted before the interrupt reached here
    except AgentlogError as err:
        failure = err
    finally:
        if unsubscribe is not None:
            unsubscribe()
        released = _release(coordinator, [session], projections=projections)
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
        render_error(failure, as_json)
    last: dict[str, Any] = outcomes[-1].reason if outcomes else {"kind": "completed"}
    if signals or interrupted:
        # 128 + the signal number, as a shell reports it: 130 for SIGINT (Ctrl-C), 143 for SIGTERM.
        name = "SIGTERM" if signals and signals[0] == signal.SIGTERM else "SIGINT"
        try:
            render_error(
                TurnAborted(f"interrupted ({name}): the turn was closed as aborted (the log stays valid)"), as_json
            )
        except typer.Exit:
            raise typer.Exit(code=143 if name == "SIGTERM" else 130) from None
    if last["kind"] == "aborted":
        render_error(TurnAborted("interrupted: the turn was closed as aborted (the log stays valid)"), as_json)
    if last["kind"] == "error":
        error = last.get("error") or {}
        code, message = str(error.get("code") or "UNKNOWN"), str(error.get("message") or "the turn failed")
        render_error(TurnFailedError(message, code=code), as_json)
    if last["kind"] == "blocked":
        render_error(TurnBlockedError("the turn was blocked"), as_json)


def _agent_options(
    run: ModelRunOptions,
    *,
    provider: str,
    model: str,
    system: str | None,
    cwd: Path,
    config: Mapping[str, Any] | None = None,
    context_window: int | None = None,
) -> AgentOptions:
    """The agent's options: the resolved route, model, system prompt and cwd, ``run``'s retry and step
    limits and context window (else ``context_window``: a resumed session's), and the sampling settings
    of a resumed session's ``config``."""
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
        retry=RetryPolicy(max_retries=run.max_retries),
        cwd=cwd,
        max_steps=run.max_steps,
        context_window=run.context_window if run.context_window is not None else context_window,
    )


@shared_options()
@model_options()
def run_command(
    prompt: Annotated[str, typer.Argument(help="The prompt of the first turn.")],
    opts: StoreOptions = DEFAULT_OPTIONS,
    run: ModelRunOptions = DEFAULT_MODEL_RUN,
    label: Annotated[
        list[str] | None,
        typer.Option("--label", help="Label the new session KEY=VALUE (repeatable).", metavar="KEY=VALUE",
                     show_default=False),
    ] = None,
    tag: Annotated[
        list[str] | None,
        typer.Option("--tag", help="Tag the new session TAG (repeatable).", metavar="TAG", show_default=False),
    ] = None,
) -> None:
    """Start a new session and run an agent (built-in tools) on PROMPT, streaming its answer.

    run_command refuses every command unless --allow-command PATTERN or --yes allows it. --label and
    --tag give the new session user metadata (see agentlog label), logged before its first turn.
    """
    work_dir = Path(os.path.abspath(run.cwd if run.cwd is not None else Path.cwd()))
    route = run.provider or DEFAULT_PROVIDER
    try:
        labels = dict(parse_label_filter(text) for text in label or ())
        tags = [check_tag(text) for text in tag or ()]
        api_key = run.resolve_api_key(route)
        command_policy = run.command_policy()
        storage = opts.open_backend()
        if run.session_id is not None:
            _require_absent(storage, run.session_id)
        new_id = run.session_id if run.session_id is not None else _new_session_id(storage)
    except AgentlogError as err:
        render_error(err, opts.as_json)
    from ..llm.openai_compat import DEFAULT_MODEL

    sessions = SessionStore()
    coordinator = PersistenceCoordinator(sessions, storage)
    projections = attach_projections(coordinator)
    try:
        session = sessions.create(new_id, meta={"cwd": str(work_dir)}, labels=labels or None, tags=tags or None)
    except AgentlogError as err:
        projections.close()
        coordinator.close()
        render_error(err, opts.as_json)
    options = _agent_options(run, provider=route, model=run.model or DEFAULT_MODEL, system=run.system, cwd=work_dir)
    _run_agent(
        coordinator,
        session,
        options,
        run,
        api_key=api_key,
        prompt=prompt,
        as_json=opts.as_json,
        command_policy=command_policy,
        projections=projections,
    )


@shared_options()
@model_options(exclude=("session_id",))
def resume_command(
    session_id: Annotated[str, typer.Argument(help="The session to resume.")],
    prompt: Annotated[str | None, typer.Argument(help="A follow-up prompt (omit to only resume and report).")] = None,
    opts: StoreOptions = DEFAULT_OPTIONS,
    run: ModelRunOptions = DEFAULT_MODEL_RUN,
) -> None:
    """Resume a stored session (an interrupted turn is repaired), then run PROMPT if given.

    As with run, run_command refuses every command unless --allow-command PATTERN or --yes allows it.
    """
    try:
        api_key = run.resolve_api_key(run.provider or DEFAULT_PROVIDER) if prompt is not None else ""
        command_policy = run.command_policy()
        storage = opts.open_backend()
        stored = storage.load_stored(session_id)
        if stored is None:
            storage.close()
            raise SessionNotFoundError(f'session "{session_id}" not found')
    except AgentlogError as err:
        render_error(err, opts.as_json)
    repairs: list[str] = []
    if stored.torn_marker is not None:
        repairs.append("removed a torn tail")
    if interrupted_turn_closers(stored.events):
        repairs.append("closed the interrupted turn")
    sessions = SessionStore()
    coordinator = PersistenceCoordinator(sessions, storage)
    projections = attach_projections(coordinator)
    try:
        session = coordinator.resume(session_id)
    except AgentlogError as err:
        projections.close()
        coordinator.close()
        render_error(err, opts.as_json)
    state = {"repaired": bool(repairs), "repairs": repairs}
    if prompt is None:
        events = session.events
        last = _last_turn(events)
        failure = _release(coordinator, [session], projections=projections)
        if failure is not None:
            render_error(failure, opts.as_json)
        if opts.as_json:
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
    work_dir = Path(os.path.abspath(run.cwd)) if run.cwd is not None else Path(header_cwd or os.getcwd())
    options = _agent_options(
        run,
        provider=run.provider or str(config.get("provider") or DEFAULT_PROVIDER),
        model=run.model or str(config.get("model") or DEFAULT_MODEL),
        system=run.system if run.system is not None else persisted_system,
        cwd=work_dir,
        config=config,
        context_window=_recorded_context_window(session),
    )
    _run_agent(
        coordinator,
        session,
        options,
        run,
        api_key=api_key,
        prompt=prompt,
        as_json=opts.as_json,
        extra=state,
        command_policy=command_policy,
        projections=projections,
    )


async def _compact_now(
    session: Session, store: SessionStore, options: AgentOptions, run: ModelRunOptions, *, api_key: str
) -> CompactionResult | None:
    from ..agent.loop import Agent

    provider = _provider(options, api_key=api_key, base_url=run.base_url, timeout_s=run.timeout)
    try:
        agent = Agent(session, provider, options, store=store, compaction=_compaction_engine())
        result: CompactionResult | None = await agent.compact_now()
        return result
    finally:
        await provider.aclose()


def _compactable(session_id: str, opts: StoreOptions) -> bool:
    """Whether ``compact_now`` would find a span to summarize, decided on a read-only copy of the log
    (the same selection: everything but the newest balanced unit, and not the checkpoint alone). A
    missing session is reported here."""
    from ..compaction import TokenMeter, manual_compaction_range

    header, view = _read_view(session_id, opts)
    copy = Session.create(session_id, seed=list(view.events), header=header)
    return manual_compaction_range(copy, TokenMeter().measure(copy)) is not None


def _with_cause(err: AgentlogError) -> AgentlogError:
    """A manual-compaction failure with its underlying reason in the message (the code is kept)."""
    from ..errors import ManualCompactionError

    cause = err.__cause__
    if isinstance(err, ManualCompactionError) and cause is not None and str(cause):
        detailed = ManualCompactionError(err.kind, f"{err}: {cause}")
        detailed.__cause__ = cause
        return detailed
    return err


@shared_options()
@model_options("model", "base_url", "provider", "api_key", "timeout", "context_window")
def compact_command(
    session_id: Annotated[str, typer.Argument(help="The session to compact.")],
    opts: StoreOptions = DEFAULT_OPTIONS,
    run: ModelRunOptions = DEFAULT_MODEL_RUN,
) -> None:
    """Compact an idle stored session now: its history but the newest message becomes one summary.

    The summary is written by the session's own model (the same provider options as resume). Every
    original event stays in the log: show --at a seq before the compaction still shows them all.

    With --json: the result (compactionId, startSeq, summarySeq, summary, shadowedRange, shadowedSeqs,
    shadowedTokenCount, endSeq), or null when there is nothing to compact (then nothing is written at
    all). Otherwise the session is resumed first (an interrupted turn is closed), so the log gains the
    resume's session/end-seed marker before the four compaction events.
    """
    try:
        api_key = run.resolve_api_key(run.provider or DEFAULT_PROVIDER)
    except AgentlogError as err:
        render_error(err, opts.as_json)
    if not _compactable(session_id, opts):  # decided read-only: nothing at all is written then
        if opts.as_json:
            _emit_json(None)
        else:
            typer.echo(f"session {session_id}: nothing to compact (the newest message is always kept whole)")
        return
    try:
        storage = opts.open_backend()
    except AgentlogError as err:
        render_error(err, opts.as_json)
    from ..llm.openai_compat import DEFAULT_MODEL

    sessions = SessionStore()
    coordinator = PersistenceCoordinator(sessions, storage)
    try:
        session = coordinator.resume(session_id)
    except AgentlogError as err:
        coordinator.close()
        render_error(err, opts.as_json)
    header = session.request_header()
    config: Mapping[str, Any] = header["config"] if header is not None else {}
    header_cwd = session.header.get("cwd")
    options = _agent_options(
        run,
        provider=run.provider or str(config.get("provider") or DEFAULT_PROVIDER),
        model=run.model or str(config.get("model") or DEFAULT_MODEL),
        system=header.get("system") if header is not None else None,
        cwd=Path(header_cwd or os.getcwd()),
        config=config,
        context_window=_recorded_context_window(session),
    )
    surface_before, events_before = len(session.derive_messages()), len(session.events)
    result: CompactionResult | None = None
    failure: AgentlogError | None = None
    interrupted = False
    try:
        result = asyncio.run(_compact_now(session, sessions, options, run, api_key=api_key))
    except (KeyboardInterrupt, asyncio.CancelledError):
        interrupted = True
    except AgentlogError as err:
        failure = _with_cause(err)
    finally:
        surface_after, events_after = len(session.derive_messages()), len(session.events)
        released = _release(coordinator, [session])
    if interrupted:
        from ..errors import ManualCompactionError

        try:
            render_error(ManualCompactionError("cancelled", "manual compaction was cancelled"), opts.as_json)
        except typer.Exit:
            raise typer.Exit(code=130) from None
    failure = failure or released
    if failure is not None:
        render_error(failure, opts.as_json)
    if opts.as_json:
        _emit_json(None if result is None else result.to_json())
        return
    if result is None:
        typer.echo(f"session {session_id}: nothing to compact (the newest message is always kept whole)")
        return
    typer.echo(
        f"session {session_id}: compacted {len(result.shadowed_seqs)} messages (~{result.shadowed_token_count:,} "
        f"tokens) into a checkpoint at seq {result.summary_seq + 1}"
    )
    typer.echo(
        f"surface: {surface_before} → {surface_after} messages; log: {events_before} → {events_after} events "
        f"(+{events_after - events_before} compaction events, nothing removed)"
    )


@shared_options()
def replay_command(
    session_id: Annotated[str, typer.Argument(help="The session to play back.")],
    opts: StoreOptions = DEFAULT_OPTIONS,
    speed: Annotated[
        float, typer.Option("--speed", min=0.0, help="Playback speed (2 = twice as fast; 0 = no waiting).")
    ] = 1.0,
) -> None:
    """Play a session back token by token at its recorded pace (never writes, needs no network).

    With --json, every event is written as it is played, one JSON object per line (NDJSON: the stored
    event, as in ``export``), then a last line ``{"summary": {sessionId, events, chunks, lastTurn}}``.
    """
    _header, view = _read_view(session_id, opts)
    printer = None if opts.as_json else _EventPrinter(prompts=True)
    lines = _ChunkedStdout()  # --json: NDJSON in flushed chunks, and flushed before every wait
    previous: int | None = None
    chunks = 0
    for event in view.events:
        when = event.get("time")
        if event["type"] == ASSISTANT_CHUNK:
            chunks += 1
            if speed > 0 and isinstance(when, int) and previous is not None:
                gap = min(max(when - previous, 0) / 1000, MAX_REPLAY_GAP_S) / speed
                if gap > 0:
                    lines.flush()
                    time.sleep(gap)
        if printer is None:
            lines.write(orjson.dumps(event) + b"\n")  # the bytes of _emit_json_line(thaw(event))
        elif event["type"] == LLM_RETRY:
            data = event["data"]
            printer.end_line()
            failure = data.get("failure") or {}
            sys.stderr.write(f"(retry {data.get('retry')} after {failure.get('code')})\n")
        else:
            printer(event)
        if isinstance(when, int):
            previous = when
    if printer is None:
        summary = {"sessionId": session_id, "events": len(view.events), "chunks": chunks}
        lines.write(orjson.dumps({"summary": {**summary, "lastTurn": _last_turn(view.events)}}) + b"\n")
        lines.flush()
        return
    printer.end_line()


def _check_fork_boundary(session_id: str, at: int | None, opts: StoreOptions) -> None:
    """Refuse a fork boundary the fork would refuse, decided on a read-only view of the stored log.

    The fork itself needs the source loaded for writing (a load appends its ``session/end-seed``
    marker, and closers for an interrupted turn), so a refusal found only there would leave those
    behind. The view holds the same events but that marker, whose seq (the view's length) is also a
    boundary a fork accepts: the view is balanced, so the marker follows a closed turn."""
    from ..kernel.events import SESSION_END_SEED
    from ..kernel.store import fork_seed_length

    _header, view = _read_view(session_id, opts)
    events = view.events
    marker = len(events) if not events or events[-1]["type"] != SESSION_END_SEED else None
    try:
        fork_seed_length(events, None if at == marker else at, session_id)
    except AgentlogError as err:
        render_error(err, opts.as_json)


@shared_options()
def fork_command(
    session_id: Annotated[str, typer.Argument(help="The session to fork.")],
    opts: StoreOptions = DEFAULT_OPTIONS,
    at: Annotated[
        int | None,
        typer.Option("--at", help="Last seq the child inherits (a closed turn; default: the end).", show_default=False),
    ] = None,
    child_id: Annotated[
        str | None, typer.Option("--child-id", help="Id of the child (default: <id>-fork-<random>).")
    ] = None,
) -> None:
    """Start a child session from a closed-turn prefix of SESSION_ID (lineage in its header).

    A refused fork (a boundary inside a turn, past the end, a child id in use) writes nothing at all:
    the boundary is checked on a read-only view before the source is loaded for writing.
    """
    _check_fork_boundary(session_id, at, opts)
    try:
        storage = opts.open_backend()
        if child_id is not None:
            _require_absent(storage, child_id)
        else:
            child_id = f"{session_id}-fork-{secrets.token_hex(3)}"
            while storage.read_revision(child_id) is not None:
                child_id = f"{session_id}-fork-{secrets.token_hex(3)}"
    except AgentlogError as err:
        render_error(err, opts.as_json)
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
        render_error(failure or AgentlogError("fork failed"), opts.as_json)
    document = {
        "childId": child.id,
        "parentSession": child.header.get("parentSession"),
        "seedLength": child.header.get("seedLength"),
    }
    if opts.as_json:
        _emit_json(document)
    else:
        typer.echo(child.id)
