"""The ``sessionStats`` projection unit (runtime spec §2.5, §6.11): whole-log counts and wall times.

Eight totals fold from step boundaries, stream chunks, tool pairs and assembled assistant messages:

* ``steps`` counts ``step/end`` events — the step lifecycle authority (the loop appends exactly one per
  entered step, in a ``finally``), so completed, failed, cancelled and max-tokens steps all count once.
  Counting assembled ``assistant/message`` events instead would overcount a max-tokens usage-host
  message (empty content) and undercount a cancelled step (aborted before its message assembles).
* ``turns`` counts distinct turns with at least one closed step: turn numbers are host-assigned and
  increase, so one ``lastTurn`` slot decides "first closed step of a new turn"; a rejected or empty
  turn (``turn/end`` without a step) is not counted.
* ``llmMs`` is ``step/start`` → ``assistant/message`` of the open step; ``ttftMs``/``ttftSteps`` use the
  first non-empty token delta of the step (it survives an in-step ``llm/retry``); ``decodeMs`` and
  ``decodeTokens`` span first token → message on steps whose usage reports a finite, non-negative
  ``outputTokens``. A cancelled step assembles no message, so its partial stream time stays uncounted.
* ``toolMs`` pairs ``tool/call`` → ``tool/result`` by ``callId`` (out-of-order settlement pairs by id); a
  result without a recorded call is ignored and ``turn/end`` drops calls whose result never landed.

Every time delta clamps at 0 (clock skew). The reducer returns its input state itself for an event that
does not concern it — the registry's change feed compares with ``is`` — and never mutates its input
(it receives frozen states). The state is plain JSON in the original's key order, so checkpoint rows
equal the original's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final, TypedDict, cast

from ..errors import ProjectionRowError
from ..kernel.events import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    Event,
)
from .units import ProjectionUnit

__all__ = [
    "SESSION_STATS_KEY",
    "SESSION_STATS_STATE_VERSION",
    "SESSION_STATS_UNIT",
    "STATS_EVENT_TYPES",
    "OpenStep",
    "SessionStatsState",
    "SessionStatsView",
    "is_token_delta",
    "parse_session_stats_state",
]

SESSION_STATS_KEY: Final = "sessionStats"
SESSION_STATS_STATE_VERSION: Final = 1


class SessionStatsView(TypedDict):
    """The served value: exactly the eight totals (milliseconds and counts), in the original's order."""

    turns: int
    steps: int
    llmMs: float
    toolMs: float
    ttftMs: float
    ttftSteps: int
    decodeMs: float
    decodeTokens: float


class OpenStep(TypedDict):
    """The open step's boundary facts; the step is closed by its ``assistant/message`` or ``step/end``."""

    turn: int
    step: int
    startTime: float
    firstTokenTime: float | None


class SessionStatsState(SessionStatsView):
    """The totals plus the in-flight boundaries they accrue from."""

    lastTurn: int | None
    openStep: OpenStep | None
    pendingCalls: dict[str, float]


def is_token_delta(chunk: Mapping[str, Any]) -> bool:
    """Whether a stream chunk carries a token: non-empty text/reasoning, or a tool-call delta with
    non-empty arguments or a name (any name, even empty, as in the original's ``name !== undefined``)."""
    kind = chunk.get("type")
    if kind == "text-delta" or kind == "reasoning-delta":
        return chunk.get("text") != ""
    if kind == "tool-call-delta":
        return chunk.get("argumentsDelta") != "" or "name" in chunk
    return False


def _usage_output_tokens(usage: object) -> float | None:
    """Provider-reported completion tokens, or ``None`` when unreported or not a finite number >= 0."""
    if not isinstance(usage, Mapping):
        return None
    value = usage.get("outputTokens")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if value >= 0 else None


# --- the reducer ------------------------------------------------------------------------------------

_Handler = Callable[[SessionStatsState, Event], SessionStatsState]


def _step_start(state: SessionStatsState, event: Event) -> SessionStatsState:
    data = event["data"]
    return {
        **state,
        "openStep": {"turn": data["turn"], "step": data["step"], "startTime": event["time"], "firstTokenTime": None},
    }


def _assistant_message(state: SessionStatsState, event: Event) -> SessionStatsState:
    open_step = state["openStep"]
    data = event["data"]
    if open_step is None or open_step["turn"] != data["turn"] or open_step["step"] != data["step"]:
        return state
    time = event["time"]
    start = open_step["startTime"]
    # One assembled message per step: closing the boundary means a defensive duplicate cannot accrue twice.
    nxt: SessionStatsState = {**state, "llmMs": state["llmMs"] + max(0, time - start), "openStep": None}
    first = open_step["firstTokenTime"]
    if first is not None:
        nxt["ttftMs"] = state["ttftMs"] + max(0, first - start)
        nxt["ttftSteps"] = state["ttftSteps"] + 1
        output_tokens = _usage_output_tokens(data.get("usage"))
        if output_tokens is not None:
            nxt["decodeMs"] = state["decodeMs"] + max(0, time - first)
            nxt["decodeTokens"] = state["decodeTokens"] + output_tokens
    return nxt


def _tool_call(state: SessionStatsState, event: Event) -> SessionStatsState:
    return {**state, "pendingCalls": {**state["pendingCalls"], event["data"]["callId"]: event["time"]}}


def _tool_result(state: SessionStatsState, event: Event) -> SessionStatsState:
    pending = state["pendingCalls"]
    if not pending:
        return state
    source = event["data"]["message"].get("source")
    call_id = source.get("callId") if isinstance(source, Mapping) else None
    # A plain dict lookup: a callId such as "constructor" or "toString" is just a key (the original
    # needed an own-key check against the object prototype for the same outcome).
    dispatched = pending.get(call_id) if isinstance(call_id, str) else None
    if dispatched is None:
        return state
    rest = {key: value for key, value in pending.items() if key != call_id}
    return {**state, "toolMs": state["toolMs"] + max(0, event["time"] - dispatched), "pendingCalls": rest}


def _step_end(state: SessionStatsState, event: Event) -> SessionStatsState:
    turn = event["data"]["turn"]
    return {
        **state,
        "turns": state["turns"] if state["lastTurn"] == turn else state["turns"] + 1,
        "steps": state["steps"] + 1,
        "lastTurn": turn,
        "openStep": None,
    }


def _turn_end(state: SessionStatsState, event: Event) -> SessionStatsState:
    # A call whose result never landed belongs to a cancelled or failed turn; results land within their
    # turn, so the leftovers are dropped instead of growing the persisted state forever.
    return state if not state["pendingCalls"] else {**state, "pendingCalls": {}}


_HANDLERS: Final[dict[str, _Handler]] = {
    STEP_START: _step_start,
    ASSISTANT_MESSAGE: _assistant_message,
    TOOL_CALL: _tool_call,
    TOOL_RESULT: _tool_result,
    STEP_END: _step_end,
    TURN_END: _turn_end,
}
_handler_for = _HANDLERS.get

STATS_EVENT_TYPES: Final = frozenset({*_HANDLERS, ASSISTANT_CHUNK})
"""The event types the ``sessionStats`` reducer can change its state for (the registry picks its reducer by them)."""


def _reduce(state: SessionStatsState, event: Event) -> SessionStatsState:
    """Fold one event. Chunks (most of a log) are tested inline, cheapest condition first."""
    etype = event["type"]
    if etype == ASSISTANT_CHUNK:
        open_step = state["openStep"]
        if open_step is None or open_step["firstTokenTime"] is not None:
            return state
        data = event["data"]
        if open_step["turn"] != data["turn"] or open_step["step"] != data["step"] or not is_token_delta(data["chunk"]):
            return state
        return {**state, "openStep": {**open_step, "firstTokenTime": event["time"]}}
    handler = _handler_for(etype)
    return state if handler is None else handler(state, event)


def _initial() -> SessionStatsState:
    return {
        "turns": 0,
        "steps": 0,
        "llmMs": 0,
        "toolMs": 0,
        "ttftMs": 0,
        "ttftSteps": 0,
        "decodeMs": 0,
        "decodeTokens": 0,
        "lastTurn": None,
        "openStep": None,
        "pendingCalls": {},
    }


def _view(state: SessionStatsState) -> SessionStatsView:
    return {
        "turns": state["turns"],
        "steps": state["steps"],
        "llmMs": state["llmMs"],
        "toolMs": state["toolMs"],
        "ttftMs": state["ttftMs"],
        "ttftSteps": state["ttftSteps"],
        "decodeMs": state["decodeMs"],
        "decodeTokens": state["decodeTokens"],
    }


# --- the state schema (checkpoint rows read back) ----------------------------------------------------

_INT_TOTALS: Final = ("turns", "steps", "ttftSteps")
_TOTALS: Final = ("turns", "steps", "llmMs", "toolMs", "ttftMs", "ttftSteps", "decodeMs", "decodeTokens")
_STATE_KEYS: Final = (*_TOTALS, "lastTurn", "openStep", "pendingCalls")
_OPEN_STEP_KEYS: Final = ("turn", "step", "startTime", "firstTokenTime")


def _malformed(why: str) -> ProjectionRowError:
    return ProjectionRowError(f'projection "{SESSION_STATS_KEY}" checkpoint state is malformed: {why}')


def _number(value: object, name: str) -> float:
    """A finite JSON number >= 0 (kept as given)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _malformed(f"{name} must be a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise _malformed(f"{name} must be finite")
    if value < 0:
        raise _malformed(f"{name} must be at least 0")
    return value


def _integer(value: object, name: str) -> int:
    """A JSON integer >= 0; an integral float such as ``3.0`` counts, as in JavaScript."""
    number = _number(value, name)
    if isinstance(number, float):
        if not number.is_integer():
            raise _malformed(f"{name} must be an integer")
        return int(number)
    return number


def parse_session_stats_state(value: object) -> SessionStatsState:
    """The unit's state schema: check a state read back from a checkpoint row and return it.

    The top level is strict (an unknown key is refused), ``openStep`` drops unknown keys (the original's
    schemas); the result is a new dict in the state's canonical key order. Raises
    :class:`~agentlog.errors.ProjectionRowError`.
    """
    if not isinstance(value, Mapping):
        raise _malformed("state must be an object")
    unknown = sorted(str(key) for key in value if key not in _STATE_KEYS)
    if unknown:
        raise _malformed(f"state has unknown keys {', '.join(unknown)}")
    missing = [key for key in _STATE_KEYS if key not in value]
    if missing:
        raise _malformed(f"state lacks {', '.join(missing)}")
    out: dict[str, Any] = {
        key: _integer(value[key], key) if key in _INT_TOTALS else _number(value[key], key) for key in _TOTALS
    }
    last_turn = value["lastTurn"]
    out["lastTurn"] = None if last_turn is None else _integer(last_turn, "lastTurn")
    open_step = value["openStep"]
    if open_step is None:
        out["openStep"] = None
    else:
        if not isinstance(open_step, Mapping):
            raise _malformed("openStep must be an object or null")
        absent = [key for key in _OPEN_STEP_KEYS if key not in open_step]
        if absent:
            raise _malformed(f"openStep lacks {', '.join(absent)}")
        first = open_step["firstTokenTime"]
        out["openStep"] = {
            "turn": _integer(open_step["turn"], "openStep.turn"),
            "step": _integer(open_step["step"], "openStep.step"),
            "startTime": _number(open_step["startTime"], "openStep.startTime"),
            "firstTokenTime": None if first is None else _number(first, "openStep.firstTokenTime"),
        }
    pending = value["pendingCalls"]
    if not isinstance(pending, Mapping):
        raise _malformed("pendingCalls must be an object")
    out["pendingCalls"] = {str(key): _number(time, f"pendingCalls[{key!r}]") for key, time in pending.items()}
    return cast(SessionStatsState, out)


SESSION_STATS_UNIT: Final[ProjectionUnit[SessionStatsState, SessionStatsView]] = ProjectionUnit(
    key=SESSION_STATS_KEY,
    state_version=SESSION_STATS_STATE_VERSION,
    initial=_initial,
    reduce=_reduce,
    view=_view,
    client_visible=True,
    parse_state=parse_session_stats_state,
)
"""Whole-log turn/step counts and model/tool/first-token/decode wall times (client-visible)."""
