"""The token meter's projection units (runtime spec §2.5): tokenUsage, contextPressure, contextBreakdown.

A unit (:class:`ProjectionUnit`) is a pure reducer over committed events plus a view of its state; the
registry (:mod:`.registry`) drives units per session and persists their states as checkpoint rows. The
token meter's units are here rather than in :mod:`agentlog.compaction` because projections sit above
compaction: every unit, the meter's included, is defined in this package.

Every state is plain JSON of bounded size, because a checkpoint stores the whole state of every unit
after every event. The surface figures therefore never keep per-node prices: a replacement is priced
by the shadow-price protocol (§5.1) — the ``compaction/summary`` or ``compaction/prune`` event right
before a surface ``replace`` states the heuristic price of the exact range it shadows — so a state holds
a running total and at most one armed claim. A replacement without an armed claim (a log written before
the protocol) folds at zero: bounded state cannot reprice the shadowed range, so replay drifts rather
than fails. An armed claim for a different range is a producer bug and raises.

A reducer returns its input state object itself (``is``) for an event that does not concern it; a
changed state is always a new object, the input is never mutated. The views are the values the
original serves (after its view schema), key order included.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, NamedTuple, NotRequired, TypedDict, TypeVar, cast

from ..compaction.events import COMPACTION_PRUNE, COMPACTION_SUMMARY
from ..errors import CompactionStateError
from ..kernel.events import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    REQUEST_CONTEXT,
    REQUEST_HEADER,
    TOOL_RESULT,
    USER_MESSAGE,
    Event,
)
from ..kernel.request_header import canonical_header
from ..kernel.session import derive_event_message
from ..kernel.surface import APPEND, is_surface_event
from ..llm.tokens import estimate_message, estimate_system_tokens, estimate_tools_tokens

__all__ = [
    "BREAKDOWN_EVENT_TYPES",
    "CONTEXT_BREAKDOWN_UNIT",
    "CONTEXT_PRESSURE_UNIT",
    "PRESSURE_EVENT_TYPES",
    "TOKEN_METER_UNITS",
    "TOKEN_USAGE_UNIT",
    "ContextBreakdownState",
    "ContextBreakdownView",
    "ContextPressureState",
    "ContextPressureView",
    "LastUsageSample",
    "ProjectionUnit",
    "ShadowPriceClaim",
    "SurfaceTokensFold",
    "TokenUsageState",
    "UsageBuckets",
    "fold_surface_projection",
]

S = TypeVar("S")
V = TypeVar("V")

_SHADOW_PRICE_TYPES: Final = frozenset({COMPACTION_SUMMARY, COMPACTION_PRUNE})


@dataclass(frozen=True)
class ProjectionUnit(Generic[S, V]):
    """One projection unit (the original's ``ProjectionDefinition``).

    ``reduce`` must be pure and return ``state`` itself when ``event`` does not concern the unit (the
    registry's change feed compares with ``is``). ``client_visible`` is the original's ``wire``: a
    visible unit's view is served to clients, a host-only unit's never. ``parse_state`` is the
    original's ``stateSchema``: it checks a state read back from a JSON checkpoint row and returns it,
    raising a typed error for one the reducer could not continue from (the token meter's units raise
    :class:`~agentlog.errors.CompactionStateError`). Views are built to the served shape directly; the
    original additionally re-validates every served view against a view schema (registry behaviour).
    """

    key: str
    state_version: int
    initial: Callable[[], S]
    reduce: Callable[[S, Event], S]
    view: Callable[[S], V]
    client_visible: bool
    parse_state: Callable[[object], S]

    def fold(self, events: Iterable[Event]) -> S:
        """The state after ``events``, folded from :attr:`initial`."""
        return self.fold_from(self.initial(), events)

    def fold_from(self, state: S, events: Iterable[Event]) -> S:
        """Continue a fold (for instance from a checkpointed state) over further ``events``."""
        reduce = self.reduce
        for event in events:
            state = reduce(state, event)
        return state


# --- state and view shapes (wire keys, exactly the original's) ------------------------------------


class UsageBuckets(TypedDict):
    """Four disjoint provider buckets; reasoning tokens are already inside ``outputTokens``."""

    uncachedInputTokens: int
    outputTokens: int
    cacheReadTokens: int
    cacheWriteTokens: int


class LastUsageSample(TypedDict):
    turn: int
    step: int
    buckets: UsageBuckets


class TokenUsageState(TypedDict):
    totals: UsageBuckets
    last: LastUsageSample | None


class ShadowPriceClaim(TypedDict):
    """An armed shadow price: the tokens of the surface range the very next event replaces."""

    start: int
    end: int
    tokens: int


class ContextPressureState(TypedDict):
    contextWindow: NotRequired[int]
    pressureTokens: NotRequired[int]
    surfaceTokens: int
    sampledSurfaceTokens: NotRequired[int]
    claim: NotRequired[ShadowPriceClaim]


class ContextPressureView(TypedDict, total=False):
    """Occupancy for a status display; the fields are last-wins records of different moments."""

    pressureTokens: int
    projectedTokens: int
    contextWindow: int


class ContextBreakdownState(TypedDict):
    systemTokens: int
    toolsTokens: int
    messageTokens: int
    claim: NotRequired[ShadowPriceClaim]


class ContextBreakdownView(TypedDict):
    systemTokens: int
    toolsTokens: int
    messageTokens: int


# --- the shared O(1) surface fold -----------------------------------------------------------------


class SurfaceTokensFold(NamedTuple):
    """One event's effect on a running surface-token total."""

    delta_tokens: int
    """Signed change of the surface total; 0 for an event off the surface."""
    claim: ShadowPriceClaim | None
    """The claim armed for the next event, or ``None``."""


_NO_CHANGE: Final = SurfaceTokensFold(0, None)


_last_priced: Final[list[tuple[object, int]]] = [(None, 0)]


def _surface_event_tokens(event: Mapping[str, Any]) -> int:
    """The heuristic price of a surface event's message, remembered for the last event priced.

    contextPressure and contextBreakdown both fold every surface event, one after the other: the second
    reuses the first's price instead of estimating the message again. Events are frozen, so the price of
    the same object cannot change; the slot holds one tuple, replaced whole (safe across threads). It keeps
    the last priced event alive until the next one is priced (one event, whatever the number of sessions).
    """
    last = _last_priced[0]
    if last[0] is event:
        return last[1]
    message = derive_event_message(event)
    tokens = 0 if message is None else estimate_message(message)
    _last_priced[0] = (event, tokens)
    return tokens


def fold_surface_projection(claim: ShadowPriceClaim | None, event: Mapping[str, Any]) -> SurfaceTokensFold:
    """Fold one committed event onto a running surface total, given the claim the previous event armed.

    A shadow-price event arms a claim; every other event expires it. A surface append adds its
    message's price; a replace consumes the claim naming its exact range (delta = new price − claimed
    price), folds at zero without a claim, and raises when the adjacent claim names another range —
    producers append the metering event and the replacement back to back, so that is a live contract
    violation that must not let the total drift.
    """
    etype = event.get("type")
    if etype in _SHADOW_PRICE_TYPES:
        data = event["data"]
        shadowed = data["shadowedRange"]
        return SurfaceTokensFold(
            0, {"start": shadowed["start"], "end": shadowed["end"], "tokens": data["shadowedTokenCount"]}
        )
    if not is_surface_event(event):
        return _NO_CHANGE
    tokens = _surface_event_tokens(event)
    op = event["surfaceOp"]
    if op == APPEND:
        return SurfaceTokensFold(tokens, None)
    if claim is None:
        return _NO_CHANGE
    if claim["start"] != op["start"] or claim["end"] != op["end"]:
        raise CompactionStateError(
            f"token surface: replace at seq {event['seq']} over range {op['start']}-{op['end']} has no adjacent"
            f" shadow price (armed claim covers {claim['start']}-{claim['end']})"
        )
    return SurfaceTokensFold(tokens - claim["tokens"], None)


# --- usage samples --------------------------------------------------------------------------------


def _usage_sample(event: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The usage an ``assistant/chunk`` of type ``usage`` or an ``assistant/message`` reports, if any."""
    etype = event.get("type")
    if etype == ASSISTANT_CHUNK:
        chunk = event["data"].get("chunk")
        # a committed chunk is a (frozen) dict: the concrete check is far cheaper than the Mapping ABC's
        if isinstance(chunk, dict) and chunk.get("type") == "usage":
            return cast("Mapping[str, Any]", chunk["usage"])
        return None
    if etype == ASSISTANT_MESSAGE:
        return cast("Mapping[str, Any] | None", event["data"].get("usage"))
    return None


def _count(usage: Mapping[str, Any], key: str) -> int:
    value = usage.get(key)
    return 0 if value is None else cast(int, value)


def _buckets(usage: Mapping[str, Any]) -> UsageBuckets:
    return {
        "uncachedInputTokens": usage["inputTokens"],
        "outputTokens": usage["outputTokens"],
        "cacheReadTokens": _count(usage, "cacheReadTokens"),
        "cacheWriteTokens": _count(usage, "cacheWriteTokens"),
    }


def _pressure(usage: Mapping[str, Any]) -> int:
    """Prompt-side size of one request: uncached input plus cache traffic, never the output."""
    return cast(int, usage["inputTokens"]) + _count(usage, "cacheReadTokens") + _count(usage, "cacheWriteTokens")


_BUCKET_KEYS: Final = ("uncachedInputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens")


# --- tokenUsage -----------------------------------------------------------------------------------


def _token_usage_initial() -> TokenUsageState:
    return {
        "totals": {"uncachedInputTokens": 0, "outputTokens": 0, "cacheReadTokens": 0, "cacheWriteTokens": 0},
        "last": None,
    }


def _token_usage_reduce(state: TokenUsageState, event: Event) -> TokenUsageState:
    """Add each step's usage once: a later sample for the same ``(turn, step)`` replaces the earlier one.

    A usage chunk is an early sample that survives a failed request; the final ``assistant/message``
    restates (or corrects) it. One ``last`` slot suffices because a legal log reports one step's usage
    samples adjacently: once a later step reports, an earlier one never does again.
    """
    etype = event["type"]
    if etype == ASSISTANT_CHUNK:
        chunk = event["data"].get("chunk")
        if not isinstance(chunk, dict) or chunk.get("type") != "usage":
            return state  # the common case, decided inline
    elif etype != ASSISTANT_MESSAGE:
        return state
    usage = _usage_sample(event)
    if usage is None:
        return state
    data = event["data"]
    turn: int = data["turn"]
    step: int = data["step"]
    buckets = _buckets(usage)
    last = state["last"]
    previous = last["buckets"] if last is not None and last["turn"] == turn and last["step"] == step else None
    if previous == buckets:
        return state
    totals = state["totals"]
    new_totals = cast(
        UsageBuckets,
        {key: totals[key] - (0 if previous is None else previous[key]) + buckets[key] for key in _BUCKET_KEYS},
    )
    return {"totals": new_totals, "last": {"turn": turn, "step": step, "buckets": buckets}}


def _token_usage_view(state: TokenUsageState) -> UsageBuckets:
    totals = state["totals"]
    return {
        "uncachedInputTokens": totals["uncachedInputTokens"],
        "outputTokens": totals["outputTokens"],
        "cacheReadTokens": totals["cacheReadTokens"],
        "cacheWriteTokens": totals["cacheWriteTokens"],
    }


# --- contextPressure ------------------------------------------------------------------------------


def _context_pressure_initial() -> ContextPressureState:
    return {"surfaceTokens": 0}


_SURFACE_TYPES: Final = frozenset({USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_RESULT})
_PRESSURE_TYPES: Final = _SURFACE_TYPES | _SHADOW_PRICE_TYPES | {REQUEST_CONTEXT}
_BREAKDOWN_TYPES: Final = _SURFACE_TYPES | _SHADOW_PRICE_TYPES | {REQUEST_HEADER}
PRESSURE_EVENT_TYPES: Final = _PRESSURE_TYPES | {ASSISTANT_CHUNK}
"""The event types that can change a ``contextPressure`` state without an armed claim (the registry's
quiet-event test; with a claim armed every event can change it)."""
BREAKDOWN_EVENT_TYPES: Final = _BREAKDOWN_TYPES
"""The same for ``contextBreakdown``."""


def _context_pressure_reduce(state: ContextPressureState, event: Event) -> ContextPressureState:
    """Last-wins capacity and pressure sample, plus the surface's movement since the sample was taken.

    The sample is stamped BEFORE the same event joins the surface, so an ``assistant/message`` anchors
    against the surface its own request saw. ``surfaceTokens`` rides :func:`fold_surface_projection`, so a
    compaction (which reports no usage of its own) still moves the projected figure.
    """
    if "claim" not in state:  # the fast exit: most events (chunks, step markers) concern no figure here
        etype = event["type"]
        if etype == ASSISTANT_CHUNK:
            chunk = event["data"].get("chunk")
            if not isinstance(chunk, dict) or chunk.get("type") != "usage":
                return state
        elif etype not in _PRESSURE_TYPES:
            return state
    fold = fold_surface_projection(state.get("claim"), event)
    nxt: dict[str, Any] = cast("dict[str, Any]", state)
    if event.get("type") == REQUEST_CONTEXT:
        window = event["data"].get("contextWindow")
        if window != state.get("contextWindow"):
            if window is not None:
                nxt = {**nxt, "contextWindow": window}
            else:
                nxt = {key: value for key, value in nxt.items() if key != "contextWindow"}
    usage = _usage_sample(event)
    if usage is not None:
        pressure = _pressure(usage)
        if pressure != nxt.get("pressureTokens") or nxt.get("sampledSurfaceTokens") != nxt["surfaceTokens"]:
            nxt = {**nxt, "pressureTokens": pressure, "sampledSurfaceTokens": nxt["surfaceTokens"]}
    if fold.delta_tokens != 0:
        nxt = {**nxt, "surfaceTokens": nxt["surfaceTokens"] + fold.delta_tokens}
    if "claim" not in state and fold.claim is None:
        return cast(ContextPressureState, nxt)
    without_claim = {key: value for key, value in nxt.items() if key != "claim"}
    if fold.claim is not None:
        without_claim["claim"] = fold.claim
    return cast(ContextPressureState, without_claim)


def _context_pressure_view(state: ContextPressureState) -> ContextPressureView:
    """``pressureTokens``, ``projectedTokens`` (clamped at 0), ``contextWindow`` — each only when known.

    The key order is the original's served order (its view schema rebuilds the object in this order).
    """
    view: ContextPressureView = {}
    pressure = state.get("pressureTokens")
    if pressure is not None:
        view["pressureTokens"] = pressure
        sampled = state.get("sampledSurfaceTokens")
        if sampled is not None:
            view["projectedTokens"] = max(0, pressure + state["surfaceTokens"] - sampled)
    window = state.get("contextWindow")
    if window is not None:
        view["contextWindow"] = window
    return view


# --- contextBreakdown -----------------------------------------------------------------------------


def _context_breakdown_initial() -> ContextBreakdownState:
    return {"systemTokens": 0, "toolsTokens": 0, "messageTokens": 0}


def _context_breakdown_reduce(state: ContextBreakdownState, event: Event) -> ContextBreakdownState:
    """System and tools priced from the newest ``request/header`` (last wins), messages from the surface."""
    if "claim" not in state and event["type"] not in _BREAKDOWN_TYPES:
        return state  # nothing to expire and nothing priced: the fast exit most events take
    fold = fold_surface_projection(state.get("claim"), event)
    system_tokens = state["systemTokens"]
    tools_tokens = state["toolsTokens"]
    if event.get("type") == REQUEST_HEADER:
        header = canonical_header(event["data"]["header"])
        system_tokens = estimate_system_tokens(header)
        tools_tokens = estimate_tools_tokens(header)
    if (
        system_tokens == state["systemTokens"]
        and tools_tokens == state["toolsTokens"]
        and fold.delta_tokens == 0
        and fold.claim is None
        and "claim" not in state
    ):
        return state
    nxt: ContextBreakdownState = {
        "systemTokens": system_tokens,
        "toolsTokens": tools_tokens,
        "messageTokens": state["messageTokens"] + fold.delta_tokens,
    }
    if fold.claim is not None:
        nxt["claim"] = fold.claim
    return nxt


def _context_breakdown_view(state: ContextBreakdownState) -> ContextBreakdownView:
    return {
        "systemTokens": state["systemTokens"],
        "toolsTokens": state["toolsTokens"],
        "messageTokens": state["messageTokens"],
    }


# --- state schemas (checkpoint rows read back) ----------------------------------------------------


def _bad_state(key: str, why: str) -> CompactionStateError:
    return CompactionStateError(f'projection "{key}" checkpoint state is malformed: {why}')


def _int(key: str, value: object, name: str, *, minimum: int = 0) -> int:
    """A JSON integer (an integral float such as ``3.0`` counts, as in JavaScript) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad_state(key, f"{name} must be an integer")
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise _bad_state(key, f"{name} must be an integer")
        value = int(value)
    if value < minimum:
        raise _bad_state(key, f"{name} must be at least {minimum}")
    return value


def _object(
    key: str, value: object, name: str, required: Iterable[str], optional: Iterable[str] = ()
) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _bad_state(key, f"{name} must be an object")
    required = tuple(required)
    allowed = set(required) | set(optional)
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:
        raise _bad_state(key, f"{name} has unknown keys {', '.join(unknown)}")
    missing = [k for k in required if k not in value]
    if missing:
        raise _bad_state(key, f"{name} lacks {', '.join(missing)}")
    return dict(value)


def _parse_buckets(key: str, value: object, name: str) -> UsageBuckets:
    raw = _object(key, value, name, _BUCKET_KEYS)
    return cast(UsageBuckets, {k: _int(key, raw[k], f"{name}.{k}") for k in _BUCKET_KEYS})


def _parse_claim(key: str, value: object) -> ShadowPriceClaim:
    raw = _object(key, value, "claim", ("start", "end", "tokens"))
    return {
        "start": _int(key, raw["start"], "claim.start"),
        "end": _int(key, raw["end"], "claim.end"),
        "tokens": _int(key, raw["tokens"], "claim.tokens"),
    }


def _parse_token_usage(value: object) -> TokenUsageState:
    key = "tokenUsage"
    raw = _object(key, value, "state", ("totals", "last"))
    last = raw["last"]
    parsed_last: LastUsageSample | None = None
    if last is not None:
        last_raw = _object(key, last, "last", ("turn", "step", "buckets"))
        parsed_last = {
            "turn": _int(key, last_raw["turn"], "last.turn"),
            "step": _int(key, last_raw["step"], "last.step"),
            "buckets": _parse_buckets(key, last_raw["buckets"], "last.buckets"),
        }
    return {"totals": _parse_buckets(key, raw["totals"], "totals"), "last": parsed_last}


def _parse_context_pressure(value: object) -> ContextPressureState:
    key = "contextPressure"
    raw = _object(
        key, value, "state", ("surfaceTokens",), ("contextWindow", "pressureTokens", "sampledSurfaceTokens", "claim")
    )
    out: dict[str, Any] = {}
    for name in ("contextWindow", "pressureTokens", "surfaceTokens", "sampledSurfaceTokens"):  # the schema's order
        if name in raw:
            out[name] = _int(key, raw[name], name, minimum=1 if name == "contextWindow" else 0)
    if "claim" in raw:
        out["claim"] = _parse_claim(key, raw["claim"])
    return cast(ContextPressureState, out)


def _parse_context_breakdown(value: object) -> ContextBreakdownState:
    key = "contextBreakdown"
    raw = _object(key, value, "state", ("systemTokens", "toolsTokens", "messageTokens"), ("claim",))
    out: ContextBreakdownState = {
        "systemTokens": _int(key, raw["systemTokens"], "systemTokens"),
        "toolsTokens": _int(key, raw["toolsTokens"], "toolsTokens"),
        "messageTokens": _int(key, raw["messageTokens"], "messageTokens"),
    }
    if "claim" in raw:
        out["claim"] = _parse_claim(key, raw["claim"])
    return out


# --- the units ------------------------------------------------------------------------------------

TOKEN_USAGE_UNIT: Final[ProjectionUnit[TokenUsageState, UsageBuckets]] = ProjectionUnit(
    key="tokenUsage",
    state_version=1,
    initial=_token_usage_initial,
    reduce=_token_usage_reduce,
    view=_token_usage_view,
    client_visible=True,
    parse_state=_parse_token_usage,
)
"""Provider-reported usage over the whole durable log (a compaction never erases billed tokens)."""

CONTEXT_PRESSURE_UNIT: Final[ProjectionUnit[ContextPressureState, ContextPressureView]] = ProjectionUnit(
    key="contextPressure",
    state_version=4,
    initial=_context_pressure_initial,
    reduce=_context_pressure_reduce,
    view=_context_pressure_view,
    client_visible=True,
    parse_state=_parse_context_pressure,
)
"""The newest request's prompt pressure, its projection onto the current surface, and the route's capacity."""

CONTEXT_BREAKDOWN_UNIT: Final[ProjectionUnit[ContextBreakdownState, ContextBreakdownView]] = ProjectionUnit(
    key="contextBreakdown",
    state_version=2,
    initial=_context_breakdown_initial,
    reduce=_context_breakdown_reduce,
    view=_context_breakdown_view,
    client_visible=True,
    parse_state=_parse_context_breakdown,
)
"""Heuristic composition of the next request: system prompt, tool schemas, conversation surface."""

TOKEN_METER_UNITS: Final = (TOKEN_USAGE_UNIT, CONTEXT_PRESSURE_UNIT, CONTEXT_BREAKDOWN_UNIT)
"""The three units in the original's registration order."""
