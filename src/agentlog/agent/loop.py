"""The agent loop: turns and steps over the session log (runtime spec §6.2–§6.7).

Everything the loop knows is in the log or rebuilt from it: pending input (``agent/inbox/spliced``),
the request header (``request/header``), retry counts (``llm/retry``), turn numbers (``turn/start``).
So a loop resumed after a crash — or in another process — continues exactly where the durable log
says, and the request it sends is always the one the log reconstructs (checked before every dispatch
when ``check_reconstruction`` is on).

However a turn ends — completed, an error, ``cancel()``, the task cancelled (``task.cancel()``,
``asyncio.wait_for``, Ctrl-C under ``asyncio.run``), a raising hook — every tool call the model asked for
has a ``tool/result`` before ``turn/end``: the real one, the canonical ``ABORTED_BEFORE_DISPATCH`` for a
call whose body never ran, or ``TOOL_OUTCOME_UNKNOWN`` (crash repair's text) for one that was running.
An exceptional ending is then flushed before the exception goes on. If even that cannot be written, the
turn is left open for crash repair instead of being closed over an unanswered call. And no request is
sent while the derived messages pair a tool call without its result (``UNPAIRED_TOOL_CALL``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

import orjson

from ..errors import AgentError as AgentError
from ..errors import AgentlogError, ArgumentTypeError, describe_error
from ..errors import AgentNotDurableError as AgentNotDurableError
from ..errors import InvalidAgentOptionError as InvalidAgentOptionError
from ..errors import OpenTurnError as OpenTurnError
from ..errors import ReconstructionError as ReconstructionError
from ..errors import StepLimitError as StepLimitError
from ..errors import TurnAborted as TurnAborted
from ..kernel.events import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    REQUEST_CONTEXT,
    REQUEST_HEADER,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    AssistantMessageData,
    Event,
    Message,
    RequestContextData,
    TurnEndReason,
)
from ..kernel.invariants import check_tool_pairing
from ..kernel.jsonvalue import thaw
from ..kernel.messages import user_message
from ..kernel.repair import interrupted_tool_result_data, interrupted_turn_closers
from ..kernel.request_header import canonical_header, header_equals
from ..kernel.session import Session
from ..kernel.store import SessionStore, store_of
from ..llm.assembler import Assembler
from ..llm.events import LLM_RETRY, LLM_RETRY_STARTED, LlmRetryData, LlmRetryStartedData
from ..llm.types import GenerateRequest, LlmError, Provider
from .checkpoint import CheckpointPolicy
from .inbox import Inbox, Target
from .subagents import DelegateTool, Delegation, DelegationResult, Mode, ProviderKind, SubagentConfig
from .tools import (
    CallResult,
    Tool,
    ToolCall,
    ToolContext,
    ToolRegistry,
    aborted_before_dispatch_outcome,
    batch_concludes_turn,
    schedule_calls,
)

logger = logging.getLogger("agentlog")

PreStepHook = Callable[["Agent", int, int], Awaitable[None]]
"""Runs before each step: ``(agent, turn, step)``, after the inbox was claimed, before ``step/start``."""
RequestErrorHook = Callable[["Agent", int, int, Mapping[str, Any]], Awaitable[str | None]]
"""Runs when a model request fails: ``(agent, turn, step, failure)``; returning ``"retry"`` resends the
step's request (rebuilt from the log) instead of the retry policy deciding."""
IdleHook = Callable[["Agent"], None]
"""Runs when ``run()`` returns (the agent is idle again)."""
ErrorHook = Callable[["Agent", int, int, BaseException], None]
"""Runs when a turn fails (the original's ``agent/error``): ``(agent, turn, step, error)``, before the
failed turn's ``turn/end`` is appended; also when ``turn/start`` or ``turn/end`` cannot be appended.
Cancellation is no error. A hook that raises is logged and never changes the turn."""

DEFAULT_RETRY_CODES = ("EMPTY_RESPONSE", "RATE_LIMIT", "SERVER", "TIMEOUT", "TRANSPORT")
DEFAULT_MAX_STEPS = 50
"""Steps (model calls, not counting retries) one turn may take before it ends with ``MAX_STEPS_EXCEEDED``."""


@dataclass(frozen=True)
class RetryPolicy:
    """The normal-mode retry policy of spec §6.7 (counts persist in the log across restarts)."""

    max_retries: int = 5
    codes: tuple[str, ...] = DEFAULT_RETRY_CODES
    initial_delay_ms: int = 500
    max_delay_ms: int = 10_000
    jitter_ratio: float = 0.1

    @property
    def key(self) -> str:
        value = [
            "normal",
            self.max_retries,
            sorted(self.codes),
            self.initial_delay_ms,
            self.max_delay_ms,
            self.jitter_ratio,
        ]
        return orjson.dumps(value).decode()


@dataclass
class TurnOutcome:
    turn: int
    reason: dict[str, Any]
    error: BaseException | None = None


# --- stream updates -----------------------------------------------------------------------------------
# One update per log event that a caller watching a turn cares about, made from the committed event
# itself (``update_from_event``): ``Agent.stream`` is a view of the log as it grows, never a second
# channel, so what a stream shows is exactly what a replay of the stored session shows.


@dataclass(frozen=True, slots=True)
class TurnStarted:
    """``turn/start``: a turn began."""

    turn: int
    seq: int
    kind: Literal["turn-start"] = "turn-start"


@dataclass(frozen=True, slots=True)
class TextDelta:
    """An ``assistant/chunk`` holding a ``text-delta``: the next piece of the model's text."""

    turn: int
    step: int
    index: int
    text: str
    seq: int
    kind: Literal["text-delta"] = "text-delta"


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """An ``assistant/chunk`` holding a ``reasoning-delta``: the next piece of the model's reasoning."""

    turn: int
    step: int
    index: int
    text: str
    seq: int
    kind: Literal["reasoning-delta"] = "reasoning-delta"


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    """``assistant/message``: the step's assembled reply (``interrupted`` when an abort cut it short)."""

    turn: int
    step: int
    message: dict[str, Any]
    interrupted: bool
    seq: int
    kind: Literal["assistant-message"] = "assistant-message"

    @property
    def text(self) -> str:
        return "".join(b["text"] for b in self.message["content"] if b.get("type") == "text")


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """``tool/call``: the loop is about to run a call's body (``arguments`` is the model's raw text).

    A call cancelled before its body started is recorded as a ``tool/call`` immediately followed by
    its ``ABORTED_BEFORE_DISPATCH`` result, so it appears here too, with that result right after it.
    """

    turn: int
    step: int
    call_id: str
    name: str
    arguments: str
    seq: int
    kind: Literal["tool-call"] = "tool-call"


@dataclass(frozen=True, slots=True)
class ToolResult:
    """``tool/result``: what the model will see for a call (``error`` is the stable ``{name, code}``)."""

    turn: int
    step: int
    call_id: str
    content: list[dict[str, Any]]
    is_error: bool
    error: dict[str, str] | None
    meta: Any
    seq: int
    kind: Literal["tool-result"] = "tool-result"

    @property
    def text(self) -> str:
        return "\n".join(b["text"] for b in self.content if b.get("type") == "text" and isinstance(b.get("text"), str))


@dataclass(frozen=True, slots=True)
class TurnEnded:
    """``turn/end``: how the turn ended (``reason["kind"]``: completed, error, aborted, max-tokens…)."""

    turn: int
    reason: dict[str, Any]
    seq: int
    kind: Literal["turn-end"] = "turn-end"

    @property
    def outcome(self) -> TurnOutcome:
        """The :class:`TurnOutcome` the log records (the exception object itself is not in the log)."""
        return TurnOutcome(self.turn, self.reason)


@dataclass(frozen=True, slots=True)
class SubagentUpdate:
    """Progress of a subagent (a child session this run delegated to, at any depth): ``update`` is what
    that child's own stream would yield; ``parent_session`` is the session that delegated to it."""

    session_id: str
    parent_session: str
    depth: int
    update: TurnStarted | TextDelta | ReasoningDelta | AssistantMessage | ToolCallStarted | ToolResult | TurnEnded
    kind: Literal["subagent"] = "subagent"


AgentUpdate: TypeAlias = (
    TurnStarted
    | TextDelta
    | ReasoningDelta
    | AssistantMessage
    | ToolCallStarted
    | ToolResult
    | TurnEnded
    | SubagentUpdate
)
"""What ``Agent.stream`` yields; branch on ``update.kind`` (or ``isinstance``). ``update_from_event`` never
makes a :class:`SubagentUpdate`: the stream wraps a child session's own updates in one."""


def update_from_event(
    event: Event,
) -> TurnStarted | TextDelta | ReasoningDelta | AssistantMessage | ToolCallStarted | ToolResult | TurnEnded | None:
    """The stream update one committed event stands for, or ``None`` for events a watcher skips.

    Pure and total over any stored session, so ``[u for e in session.events if (u := update_from_event(e))]``
    replays exactly what ``Agent.stream`` showed live. Surface replaces (compaction's pruning of an old
    result) are not new output and give ``None``.
    """
    etype = event["type"]
    data = event["data"]
    seq = event["seq"]
    if etype == ASSISTANT_CHUNK:
        chunk = data["chunk"]
        ctype = chunk.get("type")
        if ctype == "text-delta":
            return TextDelta(data["turn"], data["step"], chunk["index"], chunk["text"], seq)
        if ctype == "reasoning-delta":
            return ReasoningDelta(data["turn"], data["step"], chunk["index"], chunk["text"], seq)
        return None
    if etype == TURN_START:
        return TurnStarted(data["turn"], seq)
    if etype == TURN_END:
        return TurnEnded(data["turn"], thaw(data["reason"]), seq)
    if etype == TOOL_CALL:
        return ToolCallStarted(data["turn"], data["step"], data["callId"], data["name"], data["arguments"], seq)
    if event.get("surfaceOp") != "append":
        return None
    if etype == ASSISTANT_MESSAGE:
        return AssistantMessage(data["turn"], data["step"], thaw(data["message"]), data.get("interrupted") is True, seq)
    if etype == TOOL_RESULT:
        message = data["message"]
        block = message["content"][0]
        error = data.get("error")
        return ToolResult(
            data["turn"],
            data["step"],
            message["source"]["callId"],
            thaw(block.get("content") or []),
            block.get("isError") is True,
            thaw(error) if error is not None else None,
            thaw(data["meta"]) if "meta" in data else None,
            seq,
        )
    return None


def _tool_registry(tools: ToolRegistry | Sequence[Tool] | None) -> ToolRegistry:
    """The agent's registry: a list of tools is the natural spelling, so it is registered here, at build time,
    where a bad definition or a wrong type fails before any turn starts rather than mid-turn."""
    if tools is None:
        return ToolRegistry()
    if isinstance(tools, ToolRegistry):
        return tools
    if isinstance(tools, (list, tuple)):
        return ToolRegistry(tools)
    raise ArgumentTypeError(
        f"tools= takes a ToolRegistry or a list of tools, not {type(tools).__name__}; "
        "wrap a single tool in a list: tools=[my_tool]"
    )


@dataclass
class AgentOptions:
    provider: str
    model: str
    system: str | None = None
    reasoning_effort: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    context_window: int | None = None
    max_parallel_tools: int = 10
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    check_reconstruction: bool = True
    cwd: Path | None = None
    adapter_defaults: Mapping[str, Any] | None = None
    """Exact-model defaults the adapter applies when the request leaves them out, e.g.
    ``{"reasoningEffort": "high", "maxTokens": 256000}`` for DeepSeek (flagged in ``adapterDefaults``)."""
    max_steps: int = DEFAULT_MAX_STEPS
    """At most this many steps per turn; a turn that needs more ends with ``MAX_STEPS_EXCEEDED``."""

    def __post_init__(self) -> None:
        steps = self.max_steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise InvalidAgentOptionError(f"max_steps must be a positive integer, got {steps!r}")


class Agent:
    """Drives one session: ``send`` input, ``run()`` until idle, ``cancel()`` the active turn.

    The agent checkpoints through the store its session is live in (with a
    :class:`~agentlog.persistence.coordinator.PersistenceCoordinator` attached, every checkpoint is a
    durable flush). ``store`` may name that store explicitly; any other store is refused. Running
    without checkpoints is an explicit choice: ``durable=False``.

    A turn that fails is recorded (``turn/end`` with ``reason.kind == "error"``) and reported in its
    :class:`TurnOutcome`, not raised: the log is the report. ``raise_on_error=True`` (here, or per call
    on :meth:`run` / :meth:`stream`) raises the turn's exception as well, after the turn is closed and
    flushed, for callers who prefer ``try``/``except``.
    """

    def __init__(
        self,
        session: Session,
        provider: Provider,
        options: AgentOptions,
        *,
        tools: ToolRegistry | Sequence[Tool] | None = None,
        store: SessionStore | None = None,
        durable: bool = True,
        compaction: Any | None = None,
        raise_on_error: bool = False,
        subagents: SubagentConfig | None = None,
    ) -> None:
        self.session = session
        self.raise_on_error = raise_on_error
        self.provider = provider
        self.options = options
        self.tools = _tool_registry(tools)
        self.subagents: Delegation | None = None
        if subagents is not None:
            self.subagents = Delegation(self, subagents)
            if self.subagents.may_delegate:  # a child at max_depth is not offered the tool at all
                tool = DelegateTool(self.subagents, name=subagents.tool_name)
                self.tools = ToolRegistry([*self.tools, tool])
        live = store_of(session)
        if store is not None and store is not live:
            raise AgentNotDurableError(
                f'session "{session.id}" is not live in the store given to the agent; '
                "pass the store the session was created in (or omit store=)"
            )
        if live is None and durable:
            raise AgentNotDurableError(
                f'session "{session.id}" is not live in a store, so the agent cannot checkpoint it; '
                "create it with store.create(...) or coordinator.resume(...), or pass durable=False "
                "to run without checkpoints"
            )
        self.store = live if durable else None
        self.checkpoint = CheckpointPolicy(live) if durable and live is not None else None
        self._dispatched: set[str] = set()
        self.inbox = Inbox(session)
        self._abort = asyncio.Event()
        self._cause: dict[str, Any] = {"kind": "user"}
        self._first_request = True
        self._wake = False
        # Input that was already pending in the log (a resumed session) is work to do, like a wake.
        self._resume_pending = self.inbox.has_pending("next-turn")
        self._last_turn = 0
        for event in session.events:
            if event["type"] == TURN_START:
                self._last_turn = event["data"]["turn"]  # turn numbers continue after a resume
        self.pre_step_hooks: list[PreStepHook] = []
        self.request_error_hooks: list[RequestErrorHook] = []
        self.idle_hooks: list[IdleHook] = []
        self.error_hooks: list[ErrorHook] = []
        self._running = False
        self._maintenance: asyncio.Event | None = None  # set while a maintenance job runs; cleared after
        self.compaction = compaction
        if compaction is not None:
            compaction.install(self)

    # -- state ---------------------------------------------------------------------------------------
    @property
    def aborted(self) -> bool:
        """Whether the active turn (or maintenance job) has been cancelled."""
        return self._abort.is_set()

    @property
    def abort_signal(self) -> asyncio.Event:
        """The event ``cancel()`` sets; providers and summarizers watch it."""
        return self._abort

    @property
    def idle(self) -> bool:
        return not self._running and self._maintenance is None

    def flush(self) -> None:
        """Make everything appended so far durable (a no-op for a non-durable agent)."""
        if self.store is not None and self.store.get(self.session.id) is self.session:
            self.store.flush(self.session)

    async def aflush(self) -> None:
        """:meth:`flush` off the event loop (in a worker thread, as the loop's own checkpoints run)."""
        if self.store is not None and self.store.get(self.session.id) is self.session:
            await asyncio.to_thread(self.store.flush, self.session)

    def maintenance(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Reserve the idle agent for a non-turn job (manual compaction); refused at once when busy.

        ``run()`` called meanwhile waits for the job to finish, so prompts sent during it start after.
        """
        if not self.idle:
            raise AgentError(f'agent "{self.session.id}" already has active work')
        done = asyncio.Event()
        self._maintenance = done
        self._abort = asyncio.Event()

        @contextlib.asynccontextmanager
        async def job() -> AsyncIterator[None]:
            try:
                yield
            finally:
                self._maintenance = None
                done.set()

        return job()

    async def compact_now(self, *, source_command_id: str | None = None) -> Any:
        """Compact this idle agent's session now (needs ``Agent(compaction=...)``); see
        :meth:`agentlog.compaction.CompactionEngine.compact_now`."""
        if self.compaction is None:
            raise InvalidAgentOptionError(
                "this agent has no compaction engine; create it with Agent(..., compaction=CompactionEngine())"
            )
        return await self.compaction.compact_now(self, source_command_id=source_command_id)

    async def delegate(
        self,
        task: str,
        *,
        mode: Mode = "one-shot",
        provider: ProviderKind | None = None,
        label: str | None = None,
        persona: str | None = None,
        tool_filter: Sequence[str] | None = None,
        agent_provider: str | None = None,
        agent_model: str | None = None,
    ) -> DelegationResult:
        """Run ``task`` in a subagent's own child session and return its answer (needs ``subagents=``).

        The same delegation the ``delegate`` tool makes, from Python: ``mode="continuable"`` with a
        ``label`` continues that child on a later call; refusals raise (``SubagentDepthError``,
        ``SubagentLabelError``, ``InvalidAgentOptionError``) before anything is written.
        """
        if self.subagents is None:
            raise InvalidAgentOptionError(
                "this agent cannot delegate; create it with Agent(..., subagents=SubagentConfig())"
            )
        return await self.subagents.delegate(
            task,
            mode=mode,
            provider=provider,
            label=label,
            persona=persona,
            tool_filter=tool_filter,
            agent_provider=agent_provider,
            agent_model=agent_model,
        )

    # -- input ---------------------------------------------------------------------------------------
    def send(
        self, message: Mapping[str, Any] | str, target: Target = "next-turn", *, wakeup: bool = True
    ) -> dict[str, Any]:
        """Queue input durably; ``wakeup`` marks it as work that ``run()`` should start a turn for."""
        payload: dict[str, Any] = dict(user_message(message)) if isinstance(message, str) else dict(message)
        self.inbox.append(target, payload)
        if wakeup:
            self._wake = True
        return payload

    def followup(self, message: Mapping[str, Any] | str) -> dict[str, Any]:
        return self.send(message, "next-turn")

    def steer(self, message: Mapping[str, Any] | str) -> dict[str, Any]:
        """Input for the next step boundary of the running (or next) turn."""
        return self.send(message, "next-step")

    def inject(self, message: Mapping[str, Any] | str) -> dict[str, Any]:
        """Context for the next step boundary that should not by itself start work (non-waking).

        ``run()`` starts only after a waking send (a prompt or steering); injected context waits in the
        next-step queue and rides along with whatever boundary comes next.
        """
        return self.send(message, "next-step", wakeup=False)

    def cancel(self, cause: Mapping[str, Any] | None = None, *, keep_inbox: bool = False) -> None:
        """Abort the active turn (its ``turn/end`` records the cause); pending input is discarded too."""
        if not keep_inbox:
            self.inbox.clear()
        self._cause = dict(cause or {"kind": "user"})
        self._abort.set()

    # -- driving ---------------------------------------------------------------------------------------
    async def run(self, *, raise_on_error: bool | None = None) -> list[TurnOutcome]:
        """Run turns while input is pending; returns each turn's ending.

        Errors are recorded, not raised, unless ``raise_on_error`` (default: the constructor's) is true:
        then a turn that ended with ``reason.kind == "error"`` raises its exception (an
        :class:`~agentlog.errors.LlmError`, a :class:`~agentlog.errors.StepLimitError`, …) once the
        turn is closed in the log. Aborted turns (``cancel()``) are the caller's choice and never raise.
        """
        outcomes = await self._run()
        raising = self.raise_on_error if raise_on_error is None else raise_on_error
        if raising:
            for outcome in outcomes:
                if outcome.reason.get("kind") == "error" and outcome.error is not None:
                    outcome.error.add_note(
                        f'agentlog: turn {outcome.turn} of session "{self.session.id}" ended with this error '
                        "(recorded in its turn/end; raised because raise_on_error is on)"
                    )
                    raise outcome.error
        return outcomes

    async def stream(
        self, prompt: Mapping[str, Any] | str | None = None, *, raise_on_error: bool | None = None
    ) -> AsyncIterator[AgentUpdate]:
        """Send ``prompt`` (if given), run until idle, and yield the updates as the log records them.

        ``async for update in agent.stream("hi")`` yields :class:`TurnStarted`, :class:`TextDelta`,
        :class:`ReasoningDelta`, :class:`AssistantMessage`, :class:`ToolCallStarted`,
        :class:`ToolResult` and :class:`TurnEnded`, one per event this session's store publishes while
        the run lasts (see :func:`update_from_event`), in log order; a subagent's progress comes wrapped
        in a :class:`SubagentUpdate` naming its session. A failed turn ends with its
        :class:`TurnEnded` (``reason.kind == "error"``); with ``raise_on_error`` its exception is raised
        after that update. Leaving the loop early (``break``) cancels the run like :meth:`cancel` and
        waits for the turn to close. The session must be live in a store (the stream listens to it).
        """
        session = self.session
        store = store_of(session)
        if store is None:
            raise AgentError(
                f'session "{session.id}" is not live in a store, so there are no events to stream; '
                "create it with store.create(...) or coordinator.resume(...)"
            )
        if self._running:  # refused before the prompt is queued: a running loop would take it as a follow-up
            raise AgentError(f'agent "{session.id}" is already running')
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[Session, Event] | None] = asyncio.Queue()
        owner = threading.get_ident()
        family = {session.id}  # this session and the subagent sessions delegated to from it, at any depth

        def listen(source: Session, event: Event) -> None:
            if source is not session:
                header = source.header
                if header.get("origin") != "subagent" or header.get("parentSession") not in family:
                    return
                family.add(source.id)
            if threading.get_ident() == owner:
                queue.put_nowait((source, event))
            else:  # an append from a worker thread (a tool that writes to the log)
                loop.call_soon_threadsafe(queue.put_nowait, (source, event))

        unsubscribe = store.on_event(listen)
        task: asyncio.Task[list[TurnOutcome]] | None = None
        try:
            if prompt is not None:
                self.send(prompt)
            task = asyncio.create_task(self.run(raise_on_error=raise_on_error), name=f"agent-stream:{session.id}")
            task.add_done_callback(lambda _: queue.put_nowait(None))
            while True:
                item = await queue.get()
                if item is None:
                    break
                source, event = item
                update = update_from_event(event)
                if update is None:
                    continue
                if source is session:
                    yield update
                else:
                    header = source.header
                    yield SubagentUpdate(source.id, header["parentSession"], header.get("delegationDepth", 0), update)
            task.result()  # re-raise what the run raised (raise_on_error, an open turn, …)
        finally:
            unsubscribe()
            if task is not None and not task.done():
                # The consumer left early (break, an exception, its own cancellation): end the turn as a
                # cancel() would, and let it close in the log before handing control back.
                self.cancel()
                with contextlib.suppress(BaseException):
                    await asyncio.shield(task)

    async def _run(self) -> list[TurnOutcome]:
        outcomes: list[TurnOutcome] = []
        while self._maintenance is not None:  # a maintenance job (manual compaction) settles first
            await self._maintenance.wait()
        if self._running:
            raise AgentError(f'agent "{self.session.id}" is already running')
        self._abort = asyncio.Event()
        if not self._wake and not self._resume_pending:
            return outcomes  # only non-waking context is pending: it waits for a real boundary
        self._wake = self._resume_pending = False
        if interrupted_turn_closers(self.session.events):
            raise OpenTurnError(
                f'session "{self.session.id}" ends inside an open turn (an earlier turn could not be closed); '
                "flush and reload it from its store (coordinator.resume), which repairs the turn"
            )
        self._running = True
        try:
            while self.inbox.has_pending() and not self._abort.is_set():
                outcome = await self._turn()
                outcomes.append(outcome)
                if outcome.reason["kind"] in ("aborted", "error", "blocked"):
                    break
        finally:
            self._running = False
            for hook in self.idle_hooks:
                hook(self)
        return outcomes

    async def _turn(self) -> TurnOutcome:
        session = self.session
        turn = self._last_turn + 1
        self._last_turn = turn
        try:
            session.append(TURN_START, {"turn": turn})
        except Exception as err:
            self._report_error(turn, 0, err)
            raise
        target: Target = "next-turn"
        ending: TurnEndReason | None = None
        error: BaseException | None = None
        closable = True  # False once a started call could not be answered: the turn stays open for repair
        propagating = False  # an exception (cancellation, interrupt) is on its way out of this turn
        step = 0
        try:
            while True:
                if step >= self.options.max_steps:
                    if ending is None:
                        raise StepLimitError(
                            f"turn {turn} used all {self.options.max_steps} steps (max_steps) and the model still "
                            "wanted another one; send a new prompt to continue, or raise max_steps (--max-steps)"
                        )
                    break  # pending steering waits for the next turn
                claimed = self.inbox.claim(target)
                if ending is not None and not claimed:
                    break
                if step == 0 and not claimed:
                    ending = {"kind": "completed"}
                    break
                step += 1
                if self.pre_step_hooks:
                    await self._pre_step(target, claimed, turn, step)
                if self.checkpoint is not None:
                    await self.checkpoint.abefore_step(session)
                step_start = session.append(STEP_START, {"turn": turn, "step": step}).seq
                self._dispatched = set()
                try:
                    for message in claimed:
                        session.append(USER_MESSAGE, message, {"surfaceOp": "append"})
                    step_end = await self._step(turn, step)
                    if ending is None or ending["kind"] != "max-tokens":
                        ending = step_end
                except BaseException:
                    closable = self._answer_open_calls(turn, step, step_start)
                    raise
                finally:
                    if closable:
                        session.append(STEP_END, {"turn": turn, "step": step})
                if ending is not None and not self.inbox.has_pending("next-step"):
                    break
                target = "next-step"
        except TurnAborted as err:
            ending, error = {"kind": "aborted", "reason": self._cause}, err
        except asyncio.CancelledError as err:
            ending, error, propagating = {"kind": "aborted", "reason": self._cause}, err, True
            raise
        except LlmError as err:
            ending, error = {"kind": "error", "error": thaw(err.failure)}, err
            self._report_error(turn, step, err)
        except AgentlogError as err:  # our own typed refusals keep their stable code in the log
            ending, error = {"kind": "error", "error": {"message": str(err), "code": err.code}}, err
            self._report_error(turn, step, err)
        except Exception as err:
            ending, error = {"kind": "error", "error": {"message": describe_error(err), "code": "UNKNOWN"}}, err
            self._report_error(turn, step, err)
        except BaseException as err:  # KeyboardInterrupt / SystemExit raised inside the loop
            ending, error, propagating = {"kind": "aborted", "reason": self._cause}, err, True
            raise
        finally:
            closing: Exception | None = None
            if closable:
                try:
                    session.append(TURN_END, {"turn": turn, "reason": ending or {"kind": "completed"}})
                except Exception as err:  # the turn stays open: crash repair closes it on the next load
                    closing = err
                    self._report_error(turn, step, err)
            if error is not None or closing is not None:
                self._flush_after(error or closing)
            if closing is not None:
                if not propagating:
                    raise closing  # nothing else is on its way out: the caller must hear of it
                logger.warning(
                    'session "%s": turn/end %s could not be appended (left open for crash repair): %s',
                    session.id,
                    turn,
                    describe_error(closing),
                )
        return TurnOutcome(turn, dict(ending or {"kind": "completed"}), error)

    def _report_error(self, turn: int, step: int, error: BaseException) -> None:
        """Tell the error hooks (telemetry's agent-error record); a failing hook must not change the turn."""
        for hook in self.error_hooks:
            try:
                hook(self, turn, step, error)
            except Exception as err:
                logger.warning('session "%s": agent error hook threw: %s', self.session.id, describe_error(err))

    async def _pre_step(self, target: Target, claimed: list[Any], turn: int, step: int) -> None:
        """Run the pre-step hooks (compaction); claimed input goes back to the inbox if one raises."""
        try:
            for hook in self.pre_step_hooks:
                await hook(self, turn, step)
        except BaseException:
            try:
                for message in reversed(claimed):
                    self.inbox.prepend(target, message)
            except Exception as err:
                logger.warning(
                    'session "%s": claimed input could not be returned to the inbox: %s', self.session.id, err
                )
            raise

    def _answer_open_calls(self, turn: int, step: int, step_start: int) -> bool:
        """Answer every call of this step that has no ``tool/result`` (the step is ending exceptionally).

        A call whose body was dispatched gets ``TOOL_OUTCOME_UNKNOWN`` (crash repair's result: it may have
        had effects); a recorded call whose body never ran, and a requested call never recorded, get the
        canonical ``ABORTED_BEFORE_DISPATCH`` (the latter as a ``tool/call`` + ``tool/result`` pair, as an
        abort records unstarted calls). Plain appends, no awaits: a second cancellation cannot cut this
        short. Returns False if an answer could not be written (the turn must then stay open).
        """
        session = self.session
        try:
            requested: dict[str, tuple[str, str]] = {}
            recorded: dict[str, int] = {}
            answered: set[str] = set()
            for event in session.events[step_start:]:
                etype = event["type"]
                data = event["data"]
                if etype == ASSISTANT_MESSAGE:
                    for block in data["message"]["content"]:
                        if block.get("type") == "tool-call":
                            requested[block["id"]] = (block.get("name", ""), block.get("arguments", ""))
                elif etype == TOOL_CALL:
                    recorded[data["callId"]] = event.seq
                elif etype == TOOL_RESULT and event.get("surfaceOp") == "append":
                    answered.add(data["message"]["source"]["callId"])
            for call_id in [*requested, *(c for c in recorded if c not in requested)]:
                if call_id in answered:
                    continue
                seq = recorded.get(call_id)
                if seq is None:
                    name, arguments = requested[call_id]
                    seq = session.append(
                        TOOL_CALL,
                        {"turn": turn, "step": step, "callId": call_id, "name": name, "arguments": arguments},
                    ).seq
                if call_id in self._dispatched:
                    result = interrupted_tool_result_data(
                        call_id,
                        started=True,
                        turn=turn,
                        step=step,
                        message_id=f"interrupted-tool-result-{call_id}-{session.seq}",
                    )
                else:
                    result = aborted_before_dispatch_outcome().result_data(call_id, turn=turn, step=step)
                session.append(TOOL_RESULT, result, {"surfaceOp": "append", "sourceEventSeqs": [seq]})
        except Exception as err:
            logger.warning(
                'session "%s": could not answer the open tool calls of turn %s (left open for crash repair): %s',
                session.id,
                turn,
                describe_error(err),
            )
            return False
        return True

    def _flush_after(self, error: BaseException | None) -> None:
        """Make an exceptional ending durable now (synchronously: a second cancellation cannot cut it)."""
        store = self.store
        if store is None or self.checkpoint is None or store.get(self.session.id) is not self.session:
            return
        try:
            store.flush(self.session)
        except Exception as err:
            logger.warning(
                'session "%s": flush after the turn ended with %s failed (buffered events retained): %s',
                self.session.id,
                type(error).__name__,
                describe_error(err),
            )

    # -- one step ------------------------------------------------------------------------------------------
    async def _step(self, turn: int, step: int) -> TurnEndReason | None:
        session = self.session
        while True:
            request = self._build_request(turn, step)
            if self.checkpoint is not None:
                await self.checkpoint.abefore_model_request(session)
            if self._abort.is_set():
                raise TurnAborted("turn aborted before the model request")
            assembler = Assembler()
            chunk_seqs: list[int] = []
            async for chunk in self.provider.stream(request, signal=self._abort):
                event = session.append(ASSISTANT_CHUNK, {"turn": turn, "step": step, "chunk": chunk})
                chunk_seqs.append(event.seq)
                assembler.push(chunk)
            result = assembler.result()
            finish = result.finish
            if self._abort.is_set():
                kept = assembler.interrupted_blocks()
                if kept:
                    partial: AssistantMessageData = {
                        "turn": turn,
                        "step": step,
                        "message": self._assistant(kept),
                        "interrupted": True,
                    }
                    if result.usage is not None:
                        partial["usage"] = result.usage
                    session.append(ASSISTANT_MESSAGE, partial, {"surfaceOp": "append", "sourceEventSeqs": chunk_seqs})
                raise TurnAborted("turn aborted while the model was streaming")
            if finish["kind"] in ("error", "aborted"):
                failure = finish["failure"]
                if await self._request_error(turn, step, failure):
                    continue
                if await self._retry(turn, step, failure):
                    continue
                raise LlmError.from_failure(failure)
            data: AssistantMessageData = {"turn": turn, "step": step, "message": self._assistant(result.content)}
            if result.usage is not None:
                data["usage"] = result.usage
            message_event = session.append(
                ASSISTANT_MESSAGE, data, {"surfaceOp": "append", "sourceEventSeqs": chunk_seqs}
            )
            if finish["kind"] == "max-tokens":
                return {"kind": "max-tokens"}
            calls = [
                ToolCall.from_block(block)
                for block in message_event.data["message"]["content"]
                if block.get("type") == "tool-call"
            ]
            if not calls:
                return {"kind": "completed"}
            results = await self._run_tools(turn, step, calls)
            if batch_concludes_turn(results):
                return {"kind": "completed"}
            if self._abort.is_set():
                raise TurnAborted("turn aborted while its tools ran")
            return None

    def _assistant(self, content: Sequence[Any]) -> Message:
        """The step's assistant message, keys in the original's ``createAssistantMessage`` order."""
        return {
            "role": "assistant",
            "content": list(content),
            "source": {"kind": "model", "provider": self.options.provider, "model": self.options.model},
            "id": str(uuid.uuid4()),
        }

    # -- request building ------------------------------------------------------------------------------------
    def _build_request(self, turn: int, step: int) -> GenerateRequest:
        session = self.session
        options = self.options
        persisted = session.request_header()
        config = self._proposed_config(persisted)
        adapter_defaults: dict[str, bool] = {}
        # Exact-model defaults (the adapter's): fields the proposal left absent are materialised and
        # flagged, so a later request (or a resumed loop) re-derives them instead of freezing them in.
        for key, value in (options.adapter_defaults or {}).items():
            if key in ("reasoningEffort", "maxTokens") and key not in config and value is not None:
                config[key] = value
                adapter_defaults[key] = True
        candidate: dict[str, Any] = {"config": config}
        if adapter_defaults:
            candidate["adapterDefaults"] = adapter_defaults
        if options.system:
            candidate["system"] = options.system
        schemas = self.tools.schemas()
        if schemas:
            candidate["tools"] = [thaw(schema) for schema in schemas]
        header = canonical_header(candidate)
        if self._first_request:
            reason: Literal["initial", "resume"] = "initial" if persisted is None else "resume"
            session.append(REQUEST_HEADER, {"header": header, "reason": reason})
        elif persisted is None or not header_equals(persisted, header):
            session.append(REQUEST_HEADER, {"header": header, "reason": "change"})
        self._first_request = False
        context: RequestContextData = {"provider": options.provider, "model": options.model}
        if options.context_window is not None:
            context["contextWindow"] = options.context_window
        if session.request_context() != context:
            session.append(REQUEST_CONTEXT, context)
        folded = session.request_header()
        messages = session.derive_messages()
        check_tool_pairing(messages, session.id, session.events)  # an endpoint would refuse it: never send it
        request = GenerateRequest.from_config(
            folded["config"],
            list(messages),
            system=folded.get("system"),
            tools=list(folded.get("tools") or ()),
            session_id=session.id,
        )
        if options.check_reconstruction:
            self._check_reconstruction(request)
        return request

    def _proposed_config(self, persisted: Mapping[str, Any] | None) -> dict[str, Any]:
        """The config this request proposes (runtime spec §6.5 step 2).

        A new loop instance starts from its declared options, restoring only an explicitly chosen
        reasoning effort of the same route; later requests propose the persisted config minus the fields
        the adapter defaulted, so explicit settings persist and defaults re-materialise.
        """
        options = self.options
        if not self._first_request and persisted is not None:
            config = dict(thaw(persisted["config"]))
            flagged = persisted.get("adapterDefaults") or {}
            for key in ("reasoningEffort", "maxTokens"):
                if flagged.get(key) is True:
                    config.pop(key, None)
            return config
        config = {"provider": options.provider, "model": options.model}
        if options.reasoning_effort is not None:
            config["reasoningEffort"] = options.reasoning_effort
        elif persisted is not None:
            old = persisted["config"]
            flagged = persisted.get("adapterDefaults") or {}
            same_route = old.get("provider") == options.provider and old.get("model") == options.model
            if same_route and "reasoningEffort" in old and flagged.get("reasoningEffort") is not True:
                config["reasoningEffort"] = old["reasoningEffort"]
        if options.temperature is not None:
            config["temperature"] = options.temperature
        if options.max_tokens is not None:
            config["maxTokens"] = options.max_tokens
        return config

    def _check_reconstruction(self, request: GenerateRequest) -> None:
        """The request must be exactly what the log rebuilds (derived messages + folded header)."""
        session = self.session
        folded = session.request_header()
        problems = []
        if orjson.dumps(list(request.messages)) != orjson.dumps(session.derive_messages().to_list()):
            problems.append("messages")
        if folded is None:
            problems.append(REQUEST_HEADER)
        else:
            config = folded["config"]
            if request.model != config.get("model") or request.provider != config.get("provider"):
                problems.append("route")
            if request.system != folded.get("system"):
                problems.append("system")
            if request.max_tokens != config.get("maxTokens") or request.temperature != config.get("temperature"):
                problems.append("config")
            if orjson.dumps(list(request.tools)) != orjson.dumps(list(folded.get("tools") or [])):
                problems.append("tools")
        if not any(e["type"] == STEP_START for e in reversed(session.events)):
            problems.append(STEP_START)
        if problems:
            raise ReconstructionError(
                f'log-reconstruction desync in session "{session.id}": {", ".join(problems)} differ from the log'
            )

    # -- retries -------------------------------------------------------------------------------------------
    async def _request_error(self, turn: int, step: int, failure: Mapping[str, Any]) -> bool:
        """Whether a request-error hook (overflow compaction) asks for the request to be sent again."""
        if self._abort.is_set():
            return False
        for hook in self.request_error_hooks:
            if await hook(self, turn, step, failure) == "retry":
                return True
        return False

    async def _retry(self, turn: int, step: int, failure: Mapping[str, Any]) -> bool:
        """Decide, log and wait for a retry of this step's request (counts survive restarts)."""
        policy = self.options.retry
        if failure.get("code") not in policy.codes or self._abort.is_set():
            return False
        previous = None
        for event in reversed(self.session.events):
            if event["type"] == LLM_RETRY:
                data = event["data"]
                if (
                    data.get("turn") == turn
                    and data.get("step") == step
                    and data.get("provider") == self.options.provider
                    and data.get("policyKey") == policy.key
                ):
                    previous = data
                    break
        count = previous["retry"] if previous is not None else 0
        if count >= policy.max_retries:
            return False
        retry = count + 1
        after = failure.get("providerRetryAfterMs")
        if isinstance(after, (int, float)) and 0 < after:
            if after > policy.max_delay_ms:
                return False
            delay = int(after)
        else:
            base = min(policy.initial_delay_ms * 2 ** (retry - 1), policy.max_delay_ms)
            jitter = policy.jitter_ratio
            delay = int(min(base * (1 - jitter + 2 * jitter * random.random()), policy.max_delay_ms))
        retry_id = previous["retryId"] if previous is not None else str(uuid.uuid4())
        scheduled: LlmRetryData = {
            "retryId": retry_id,
            "turn": turn,
            "step": step,
            "provider": self.options.provider,
            "mode": "normal",
            "policyKey": policy.key,
            "retry": retry,
            "maxRetries": policy.max_retries,
            "delayMs": delay,
            "failure": thaw(failure),
        }
        self.session.append_custom(LLM_RETRY, scheduled)
        try:
            await asyncio.wait_for(self._abort.wait(), timeout=delay / 1000)
            return False  # cancelled while waiting: nothing more is written
        except TimeoutError:
            pass
        started: LlmRetryStartedData = {"retryId": retry_id, "turn": turn, "step": step, "retry": retry}
        self.session.append_custom(LLM_RETRY_STARTED, started)
        return True

    # -- tools ---------------------------------------------------------------------------------------------
    async def _run_tools(self, turn: int, step: int, calls: list[ToolCall]) -> list[CallResult]:
        session = self.session
        call_seqs: dict[str, int] = {}
        self._dispatched = set()

        async def record(call: ToolCall) -> None:
            event = session.append(
                TOOL_CALL,
                {"turn": turn, "step": step, "callId": call.call_id, "name": call.name, "arguments": call.arguments},
            )
            call_seqs[call.call_id] = event.seq
            if self.checkpoint is not None:
                await self.checkpoint.abefore_tool_body(session)

        async def start(call: ToolCall) -> None:
            await record(call)
            self._dispatched.add(call.call_id)  # the scheduler launches the body right after this returns

        async def commit(result: CallResult) -> None:
            if not result.started:
                await record(result.call)
            data = result.outcome.result_data(result.call.call_id, turn=turn, step=step)
            session.append(
                TOOL_RESULT,
                data,
                {"surfaceOp": "append", "sourceEventSeqs": [call_seqs[result.call.call_id]]},
            )
            for extra in result.outcome.additional_contexts:
                self.inbox.append("next-step", extra)

        context = ToolContext(
            session_id=session.id,
            cwd=self.options.cwd or Path.cwd(),
            cancel=self._abort,
            turn=turn,
            step=step,
        )
        return await schedule_calls(
            calls, self.tools, start, self.options.max_parallel_tools, context=context, commit=commit
        )
