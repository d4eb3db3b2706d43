"""Optional relational invariant checker: turn/step enclosure, numbering and same-step tool pairing.

Also here, and always on: :func:`tool_pairing_problems`, the pure check that derived messages pair
every tool call with its result (the agent loop runs it before every model request, ``agentlog
verify`` on every stored session), since an endpoint refuses a request that breaks it.

Storage validity (JSON, surface, seeds) is always enforced by the session itself. These relational
rules are opt-in because they constrain how an agent loop *uses* the log; a loop under test turns
them on so a structural bug is caught at the append that introduces it, not when a resumed session
later confuses the model. Validation runs in a pre-commit interceptor (a violation vetoes the append)
and the staged transition is applied only once the event is actually committed.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, NamedTuple, Self, TypeVar

from ..errors import InvariantError, ToolPairingError
from .events import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    REQUEST_CONTEXT,
    REQUEST_HEADER,
    STEP_END,
    STEP_START,
    TODO_WRITE,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
)
from .session import Session
from .store import SessionStore

T = TypeVar("T")

PACKAGE_NAME = "@deepseek-ai/dsh-session"

_STEP_SCOPED = frozenset({STEP_END, ASSISTANT_CHUNK, ASSISTANT_MESSAGE, TOOL_CALL})
_TURN_SCOPED = frozenset({TODO_WRITE, REQUEST_HEADER, REQUEST_CONTEXT})


def _show(value: Any) -> str:
    return "null" if value is None else str(value)


@dataclass(frozen=True)
class Trace:
    last_seq: int = -1
    open_turn: Any = None
    open_step: Any = None
    next_turn: int = 1
    next_step: int = 1
    pending_calls: frozenset[Any] = field(default_factory=frozenset)
    unanswered: frozenset[Any] = field(default_factory=frozenset)
    """Call ids of the open turn (tool-call blocks and ``tool/call``) that have no ``tool/result`` yet."""


def _fail(text: str) -> InvariantError:
    return InvariantError(text, PACKAGE_NAME)


def advance(trace: Trace, event: Mapping[str, Any]) -> Trace:
    """The trace after ``event``, or :class:`InvariantError` for the first rule it breaks. Pure."""
    seq = event["seq"]
    etype = event["type"]
    data = event.get("data")
    get = data.get if isinstance(data, Mapping) else (lambda key, default=None: default)
    if seq <= trace.last_seq:
        raise _fail(f"seq must strictly increase: saw {seq} after {trace.last_seq}")
    t = replace(trace, last_seq=seq)
    if etype == TURN_START:
        turn = get("turn")
        if t.open_turn is not None:
            raise _fail(f"turn/start {_show(turn)} while turn {_show(t.open_turn)} is still open")
        if turn != t.next_turn:
            raise _fail(f"turn/start expected turn {t.next_turn}, got {_show(turn)}")
        return replace(t, open_turn=turn, next_step=1, unanswered=frozenset())
    if etype == TURN_END:
        turn = get("turn")
        if t.open_turn != turn or t.open_turn is None:
            raise _fail(f"turn/end {_show(turn)} does not match open turn {_show(t.open_turn)}")
        if t.open_step is not None:
            raise _fail(f"turn/end {_show(turn)} while step {_show(t.open_step)} is still open")
        if t.unanswered:
            shown = ", ".join(sorted(_show(call_id) for call_id in t.unanswered))
            raise _fail(f"turn/end {_show(turn)} while tool call {shown} has no tool/result")
        return replace(t, open_turn=None, next_turn=t.next_turn + 1)
    if etype == STEP_START:
        turn, step = get("turn"), get("step")
        if t.open_turn != turn or t.open_turn is None:
            raise _fail(f"step/start in turn {_show(turn)} but open turn is {_show(t.open_turn)}")
        if t.open_step is not None:
            raise _fail(f"step/start {_show(step)} while step {_show(t.open_step)} is still open")
        if step != t.next_step:
            raise _fail(f"step/start expected step {t.next_step} in turn {_show(turn)}, got {_show(step)}")
        return replace(t, open_step=step)
    if etype == TOOL_RESULT and event.get("surfaceOp") != "append":
        if t.open_turn is None:
            raise _fail("tool/result surface replacement appended outside any open turn")
        return t
    if etype in _STEP_SCOPED or etype == TOOL_RESULT:
        turn, step = get("turn"), get("step")
        if t.open_turn is None or t.open_step is None or turn != t.open_turn or step != t.open_step:
            raise _fail(
                f"{etype} names turn {_show(turn)}/step {_show(step)} but open is turn "
                f"{_show(t.open_turn)}/step {_show(t.open_step)}"
            )
        if etype == STEP_END:
            return replace(t, open_step=None, next_step=t.next_step + 1, pending_calls=frozenset())
        if etype == TOOL_CALL:
            call_id = get("callId")
            return replace(t, pending_calls=t.pending_calls | {call_id}, unanswered=t.unanswered | {call_id})
        if etype == TOOL_RESULT:
            message = get("message")
            source = message.get("source") if isinstance(message, Mapping) else None
            call_id = source.get("callId") if isinstance(source, Mapping) else None
            if call_id not in t.pending_calls and not _is_not_started_repair(event):
                raise _fail(f"tool/result for {_show(call_id)} with no prior tool/call in this step")
            return replace(t, pending_calls=t.pending_calls - {call_id}, unanswered=t.unanswered - {call_id})
        if etype == ASSISTANT_MESSAGE:
            requested = _requested_calls(get("message"))
            return replace(t, unanswered=t.unanswered | requested) if requested else t
        return t
    if etype in _TURN_SCOPED:
        if t.open_turn is None:
            raise _fail(f"{etype} appended outside any open turn (core execution events must be turn-enclosed)")
        return t
    return t


def _requested_calls(message: Any) -> frozenset[Any]:
    content = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(content, list):
        return frozenset()
    return frozenset(b.get("id") for b in content if isinstance(b, Mapping) and b.get("type") == "tool-call")


def _is_not_started_repair(event: Mapping[str, Any]) -> bool:
    data = event.get("data")
    if not isinstance(data, Mapping):
        return False
    error = data.get("error")
    message = data.get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    first = content[0] if isinstance(content, list) and content else None
    return (
        isinstance(first, Mapping)
        and first.get("isError") is True
        and isinstance(error, Mapping)
        and error.get("code") == "TOOL_NOT_STARTED"
    )


def replay(events: Iterable[Mapping[str, Any]], trace: Trace | None = None) -> Trace:
    state = trace or Trace()
    for event in events:
        state = advance(state, event)
    return state


class _Staged(NamedTuple, Generic[T]):
    """The transition an interceptor computed for ``candidate``, kept until it is committed."""

    candidate: Any
    trace: T


class StagedInvariants(Generic[T]):
    """A store companion that checks every append against a trace folded from the log.

    ``replay(events)`` folds a whole log into a trace (raising on a violation); ``advance(trace, event)``
    checks one candidate event and returns the next trace. ``install()`` first replays every live session
    (a violation in an existing log raises and installs nothing), then checks each new session's seed when
    it is created and every append before it is committed (``before_event``, so a refused event is never
    committed); the staged trace is kept only once that very event commits. A session the store never
    announced is replayed the first time it appends. Plugins install their own rules the same way
    (:class:`agentlog.compaction.CompactionInvariants`).
    """

    def __init__(
        self,
        store: SessionStore,
        replay: Callable[[Iterable[Mapping[str, Any]]], T],
        advance: Callable[[T, Mapping[str, Any]], T],
    ) -> None:
        self._store = store
        self._replay = replay
        self._advance = advance
        self._traces: weakref.WeakKeyDictionary[Session, T] = weakref.WeakKeyDictionary()
        # One append is in flight per session at most (appends cannot reenter), so one slot each.
        self._staged: weakref.WeakKeyDictionary[Session, _Staged[T]] = weakref.WeakKeyDictionary()
        self._unsubscribe: list[Callable[[], None]] = []

    def install(self) -> Self:
        if self._unsubscribe:
            return self
        traces = [(session, self._replay(session.events)) for session in self._store.list()]
        for session, trace in traces:
            self._traces[session] = trace
        self._unsubscribe = [
            self._store.on_created(self._on_created),
            self._store.before_event(self._before_event),
            self._store.on_event(self._after_event),
        ]
        return self

    def dispose(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe = []
        self._staged.clear()

    def trace(self, session: Session) -> T | None:
        """The committed trace of ``session`` (``None`` until it was seen)."""
        return self._traces.get(session)

    def _on_created(self, session: Session) -> None:
        self._traces[session] = self._replay(session.events)

    def _before_event(self, session: Session, candidate: Any) -> None:
        current = self._traces.get(session)
        if current is None:
            current = self._replay(session.events)
            self._traces[session] = current
        # A veto by a later interceptor leaves the staged transition unused; the next append replaces it.
        self._staged[session] = _Staged(candidate, self._advance(current, candidate))

    def _after_event(self, session: Session, event: Any) -> None:
        staged = self._staged.pop(session, None)
        if staged is not None and staged.candidate is event:
            self._traces[session] = staged.trace
        else:
            # Committed without our pre-commit check (installed mid-append): rebuild from the log next time.
            self._traces.pop(session, None)


class SessionInvariants(StagedInvariants[Trace]):
    """Installs the relational checks on a store (all sessions, present and future)."""

    def __init__(self, store: SessionStore) -> None:
        super().__init__(store, replay, advance)


# --- tool pairing of derived messages ------------------------------------------------------------------


@dataclass(frozen=True)
class PairingProblem:
    """One break of tool pairing in derived messages (``index`` is the message's position)."""

    kind: str
    """``"call-without-result"`` or ``"result-without-call"``."""
    call_id: Any
    index: int
    message_id: Any

    def describe(self) -> str:
        if self.kind == "call-without-result":
            return f"tool call {_show(self.call_id)} (message {self.index}) has no tool result"
        return f"tool result for {_show(self.call_id)} (message {self.index}) answers no preceding tool call"


def tool_pairing_problems(messages: Iterable[Mapping[str, Any]]) -> list[PairingProblem]:
    """Every tool call without its result, and every result without its call, in derived messages. Pure.

    A call is answered by a ``tool-result`` block with its id in a later non-assistant message before
    the next assistant message (what OpenAI-compatible endpoints require); a result must answer a call
    of the latest assistant message that is still open.
    """
    problems: list[PairingProblem] = []
    open_calls: dict[Any, tuple[int, Any]] = {}
    for index, message in enumerate(messages):
        content = message.get("content")
        blocks = content if isinstance(content, (list, tuple)) else ()
        if message.get("role") == "assistant":
            problems.extend(
                PairingProblem("call-without-result", call_id, at, mid) for call_id, (at, mid) in open_calls.items()
            )
            open_calls = {}
            for block in blocks:
                if isinstance(block, Mapping) and block.get("type") == "tool-call":
                    open_calls[block.get("id")] = (index, message.get("id"))
            continue
        for block in blocks:
            if isinstance(block, Mapping) and block.get("type") == "tool-result":
                call_id = block.get("toolCallId")
                if open_calls.pop(call_id, None) is None:
                    problems.append(PairingProblem("result-without-call", call_id, index, message.get("id")))
    problems.extend(
        PairingProblem("call-without-result", call_id, at, mid) for call_id, (at, mid) in open_calls.items()
    )
    return problems


def last_closed_turn_before_unpaired(events: Iterable[Mapping[str, Any]]) -> int | None:
    """The seq of the last ``turn/end`` before the first turn that closed with an unanswered call.

    That is where a fork keeps everything that can still be sent (``None``: the first turn is damaged, or
    no closed turn has an unanswered call). Pure, one pass.
    """
    boundary: int | None = None
    unanswered: set[Any] = set()
    for event in events:
        etype = event.get("type")
        data = event.get("data")
        if not isinstance(data, Mapping):
            continue
        if etype == TURN_START:
            unanswered = set()
        elif etype == ASSISTANT_MESSAGE:
            unanswered |= _requested_calls(data.get("message"))
        elif etype == TOOL_CALL:
            unanswered.add(data.get("callId"))
        elif etype == TOOL_RESULT:
            message = data.get("message")
            source = message.get("source") if isinstance(message, Mapping) else None
            unanswered.discard(source.get("callId") if isinstance(source, Mapping) else None)
        elif etype == TURN_END:
            if unanswered:
                return boundary
            boundary = event.get("seq")
    return None


def check_tool_pairing(
    messages: Iterable[Mapping[str, Any]],
    session_id: str | None = None,
    events: Iterable[Mapping[str, Any]] | None = None,
) -> None:
    """Raise :class:`ToolPairingError` (``UNPAIRED_TOOL_CALL``) if :func:`tool_pairing_problems` finds any.

    With the session's ``events``, the message names the fork point that keeps every sendable turn.
    """
    problems = tool_pairing_problems(messages)
    if not problems:
        return
    where = f'session "{session_id}"' if session_id is not None else "the messages"
    listed = "; ".join(problem.describe() for problem in problems[:5])
    more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
    boundary = last_closed_turn_before_unpaired(events) if events is not None else None
    sid = session_id if session_id is not None else "ID"
    if boundary is not None:
        remedy = f"fork the session before the damaged turn: agentlog fork {sid} --at {boundary}"
    elif events is not None:
        remedy = "its first turn is damaged: start a new session"
    else:
        remedy = f"fork the session before the damaged turn (agentlog fork {sid} --at SEQ of the turn/end before it)"
    raise ToolPairingError(
        f"{where} cannot be sent to a model: {listed}{more}. Every tool call needs its result before the "
        f"next request (older builds left calls unanswered on cancel); {remedy}"
    )
