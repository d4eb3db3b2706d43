"""The token meter (runtime spec §5.4): request pressure and the priced surface, folded incrementally.

``TokenMeter.measure(session)`` replays the session's log once: each call folds only the events appended
since the previous call on the same session, so measuring after every step costs what was appended, not
the whole log. The fold keeps, per session (weakly, so a dropped session takes its state with it):

* the priced surface — one :class:`TokenSurfaceNode` per surface node, in surface order;
* the latest ``request/header`` (canonical) and the open ``step/start`` bracket;
* the *anchor* of the latest ``assistant/message``: the provider's reported usage (or a heuristic
  price) together with the surface price it was measured against, so later surface changes are added
  to it as a signed heuristic delta.

A measurement shares the fold's node list instead of copying it: the list is append-only while a
measurement holds it, and a surface replacement copies it first (copy-on-write). That keeps
``measure()`` O(new events) — the original clones the node list on every call.

A malformed event (a step bracket out of order, an assistant message citing impossible chunks, a
replacement range not on the priced surface) raises :class:`~agentlog.errors.CompactionStateError`
with the original's text and leaves the fold just before that event, so every retry fails the same.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple

from .._accel import stream_text_length as _stream_text_length
from ..errors import CompactionConfigError, CompactionStateError
from ..kernel.events import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    REQUEST_HEADER,
    STEP_END,
    STEP_START,
    SURFACE_EVENT_TYPES,
    USER_MESSAGE,
)
from ..kernel.jsonvalue import FrozenDict
from ..kernel.prefixview import PrefixView
from ..kernel.request_header import canonical_header, header_equals
from ..llm.assembler import Assembler
from .estimate import BLOCK_OVERHEAD, CHARS_PER_TOKEN, ROLE_OVERHEAD, estimate_content, estimate_header, js_length
from .estimate import estimate_message as _estimate_message

__all__ = ["TokenMeasurement", "TokenMeter", "TokenSurfaceNode"]


class TokenSurfaceNode(NamedTuple):
    """One priced surface node: the surface event's seq and the heuristic price of its message."""

    seq: int
    tokens: int

    def to_json(self) -> dict[str, int]:
        return {"seq": self.seq, "tokens": self.tokens}


class _MeasurementFields(NamedTuple):
    log_revision: int
    baseline: Mapping[str, Any]
    surface_delta_tokens: int
    total_tokens: int
    surface_tokens: int
    nodes: Sequence[TokenSurfaceNode]


class TokenMeasurement(_MeasurementFields):
    """Request pressure and the priced surface at one log revision. Immutable; compares by value.

    ``baseline`` is ``{"kind": "none", "tokens": 0}``, ``{"kind": "estimated", "tokens": n}`` or
    ``{"kind": "usage", "tokens": n, "usage": {...}}`` (a read-only mapping); ``total_tokens`` is
    ``max(0, baseline tokens + surface_delta_tokens)``; ``nodes`` is an immutable sequence of
    :class:`TokenSurfaceNode` in surface order (shared with the meter, never copied per call).
    A tuple underneath (so the meter can build one per call cheaply), but equal only to another
    measurement.
    """

    __slots__ = ()

    def __new__(
        cls,
        log_revision: int,
        baseline: Mapping[str, Any],
        surface_delta_tokens: int,
        total_tokens: int,
        surface_tokens: int,
        nodes: Sequence[TokenSurfaceNode],
    ) -> TokenMeasurement:
        frozen_baseline = baseline if isinstance(baseline, FrozenDict) else FrozenDict(baseline)
        frozen_nodes = nodes if nodes.__class__ is PrefixView else _freeze_nodes(nodes)
        fields = (log_revision, frozen_baseline, surface_delta_tokens, total_tokens, surface_tokens, frozen_nodes)
        return tuple.__new__(cls, fields)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TokenMeasurement):
            return False
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"TokenMeasurement(log_revision={self.log_revision}, baseline={dict(self.baseline)!r}, "
            f"surface_delta_tokens={self.surface_delta_tokens}, total_tokens={self.total_tokens}, "
            f"surface_tokens={self.surface_tokens}, nodes=<{len(self.nodes)} nodes>)"
        )

    def to_json(self) -> dict[str, Any]:
        """The original's shape: ``{logRevision, baseline, surfaceDeltaTokens, totalTokens, surfaceTokens, nodes}``."""
        baseline = dict(self.baseline)
        if "usage" in baseline:
            baseline["usage"] = dict(baseline["usage"])
        return {
            "logRevision": self.log_revision,
            "baseline": baseline,
            "surfaceDeltaTokens": self.surface_delta_tokens,
            "totalTokens": self.total_tokens,
            "surfaceTokens": self.surface_tokens,
            "nodes": [{"seq": seq, "tokens": tokens} for seq, tokens in self.nodes],
        }


def _freeze_nodes(nodes: Sequence[Any]) -> PrefixView[TokenSurfaceNode]:
    items = [TokenSurfaceNode(int(seq), int(tokens)) for seq, tokens in nodes]
    return PrefixView(items, len(items))


# --- the fold ---------------------------------------------------------------------------------------

_NONE_BASELINE: Final = FrozenDict({"kind": "none", "tokens": 0})
_SURFACE_TYPES: Final = frozenset(SURFACE_EVENT_TYPES)
_TEXT_BLOCKS: Final = frozenset({"text", "reasoning"})
_DELTAS: Final = frozenset({"text-delta", "reasoning-delta"})
_new_node = tuple.__new__
_new_measurement = tuple.__new__


def _dead_ref() -> None:
    return None


def _usage_tokens(usage: Mapping[str, Any]) -> int:
    """Disjoint provider buckets (reasoning is part of output and is not added again)."""
    total: int = (
        usage["inputTokens"]
        + (usage.get("cacheReadTokens") or 0)
        + (usage.get("cacheWriteTokens") or 0)
        + usage["outputTokens"]
    )
    return total


def _optional_header_equals(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    if a is None or b is None:
        return a is b
    return a is b or header_equals(a, b)


class _Anchor(NamedTuple):
    header: Mapping[str, Any] | None
    surface_tokens: int
    baseline: FrozenDict


class _State:
    """One session's fold. ``nodes`` may be shared with measurements (then ``shared`` is set)."""

    __slots__ = (
        "anchor",
        "consumed",
        "header",
        "header_price",
        "header_priced",
        "last_estimate",
        "messages",
        "nodes",
        "seqs",
        "shared",
        "step_start",
        "surface_tokens",
    )

    def __init__(self) -> None:
        self.consumed = 0
        self.header: Mapping[str, Any] | None = None
        self.nodes: list[TokenSurfaceNode] = []
        self.seqs: list[int] = []  # the nodes' seqs (private, never shared): list.index runs in C
        # The nodes' derived messages (None where a node derives none), private, for the compaction
        # transaction: it summarizes what the fold already read instead of deriving every node again.
        self.messages: list[Any] = []
        self.shared = False
        self.surface_tokens = 0
        self.step_start: tuple[Any, Any, int] | None = None  # (turn, step, surface tokens at step start)
        self.anchor: _Anchor | None = None
        self.header_priced: Mapping[str, Any] | None = None  # estimate_header cache, by identity
        self.header_price = 0
        self.last_estimate: tuple[int, FrozenDict] | None = None  # (tokens, baseline) of the last estimate

    def price_header(self, header: Mapping[str, Any] | None) -> int:
        if header is None:
            return 0
        if header is not self.header_priced:
            self.header_price = estimate_header(header)
            self.header_priced = header
        return self.header_price


def events_of(session: Any) -> tuple[Sequence[Any], int]:
    """The session's log as an indexable sequence and its length, without copying it.

    ``session.events`` (an ``EventsView``) is an O(1) prefix view of the append-only log; reading its
    backing list directly (``backing()``, which builds a cold-loaded log's packed chunk runs first)
    avoids a Python-level ``__getitem__`` per event.
    """
    events = session.events
    backing = getattr(events, "backing", None)
    if backing is not None:
        return backing(), len(events)  # a cold-loaded log's packed runs are built first
    return events, len(events)


def _malformed_sources(seq: int, turn: Any, step: Any, sources: Sequence[Any], log: Sequence[Any]) -> None:
    """Raise the original's error for the first invalid source seq (checked in citation order)."""
    seen: set[int] = set()
    for source in sources:
        if source >= seq:
            raise CompactionStateError(
                f"token meter: assistant/message at seq {seq} source seq {source} is not earlier"
            )
        if source in seen:
            raise CompactionStateError(f"token meter: assistant/message at seq {seq} repeats source seq {source}")
        seen.add(source)
        event = log[source] if source >= 0 else None
        if event is None or event.get("type") != ASSISTANT_CHUNK:
            raise CompactionStateError(
                f"token meter: assistant/message at seq {seq} source seq {source} is not assistant/chunk"
            )
        data = event["data"]
        if data.get("turn") != turn or data.get("step") != step:
            raise CompactionStateError(
                f"token meter: assistant/message at seq {seq} source seq {source} belongs to another step"
            )


def _assembled_tokens(seq: int, chunks: Sequence[Any]) -> int:
    """The provider output's price through the block assembler (the general path)."""
    assembler = Assembler()
    try:
        for chunk in chunks:
            assembler.push(chunk)
        blocks = assembler.blocks()
        return 0 if not blocks else estimate_content(blocks) + ROLE_OVERHEAD
    except (KeyError, TypeError, AttributeError) as error:
        raise CompactionStateError(
            f"token meter: assistant/message at seq {seq} cites a malformed assistant/chunk ({error!r})"
        ) from None


_UNSET: Final[Any] = object()


def provider_assistant_tokens(log: Sequence[Any], event: Mapping[str, Any], durable_tokens: int) -> int:
    """The price of what the provider streamed for ``event`` (an ``assistant/message``), re-assembled.

    From the exact cited ``assistant/chunk`` seqs; an absent list (legacy) prices the durable message, an
    explicit empty list a known empty stream (0). Validation is the original's, in citation order.

    The price equals assembling the cited chunks with :class:`~agentlog.llm.assembler.Assembler` and
    pricing its blocks. A one-pass fast path computes it without the assembler when every chunk up to
    the first ``finish`` is a text/reasoning ``block-start``/delta/``block-end`` for one single block
    index, or a ``usage`` report: the assembler then builds exactly one text/reasoning block (or none),
    whose text is the first ``block-end``'s text if there is one, else the deltas' concatenation —
    chunks after ``finish`` are ignored and ``max-tokens`` drops only tool calls — so the price is
    ``ceil(len/4) + BLOCK_OVERHEAD + ROLE_OVERHEAD``. Everything else goes through the assembler.

    With the C accelerator, that fast path runs in C first (``stream_text_length``: it reads the cited
    chunks without a Python iteration per chunk, the bulk of measuring after every step); whenever it
    cannot decide (unordered sources, an unusual chunk or value, a general stream) it answers ``None``
    and the Python path below decides, so the price and every error are the same.
    """
    sources = event.get("sourceEventSeqs")
    if sources is None:
        return durable_tokens
    if not sources:
        return 0
    seq: int = event["seq"]
    data = event["data"]
    turn, step = data.get("turn"), data.get("step")
    if _stream_text_length is not None:
        fast = _stream_text_length(log, sources, seq, turn, step)
        if fast is not None:
            return 0 if fast < 0 else -(-fast // CHARS_PER_TOKEN) + BLOCK_OVERHEAD + ROLE_OVERHEAD
    if min(sources) < 0 or max(sources) >= seq or len(set(sources)) != len(sources):
        _malformed_sources(seq, turn, step, sources, log)
    texts: list[str] = []
    add = texts.append
    index: Any = _UNSET
    ended: str | None = None
    length = 0
    skip = general = False  # skip: nothing after a finish (or a general chunk) can change the fast price
    try:
        for source in sources:
            cited = log[source]
            cdata = cited["data"]
            if cited["type"] != ASSISTANT_CHUNK or cdata["turn"] != turn or cdata["step"] != step:
                general = True
                break
            if skip:
                continue
            chunk = cdata["chunk"]
            kind = chunk["type"]
            if kind in _DELTAS:
                if chunk["index"] != index:
                    if index is not _UNSET:
                        general = skip = True
                        continue
                    index = chunk["index"]
                if ended is None:
                    add(chunk["text"])
                else:
                    chunk["text"]  # the assembler reads it even when it ignores it
            elif kind == "finish":
                chunk["reason"]["kind"]  # the assembler reads it: a chunk without one is malformed
                skip = True
            elif kind == "usage":
                chunk["usage"]  # likewise
            elif kind == "block-start" or kind == "block-end":
                if chunk["index"] != index:
                    if index is not _UNSET:
                        general = skip = True
                        continue
                    index = chunk["index"]
                if kind == "block-start":
                    if chunk["blockType"] not in _TEXT_BLOCKS:
                        general = skip = True
                elif ended is None:
                    block = chunk["block"]
                    if block.get("type") not in _TEXT_BLOCKS or type(block.get("text")) is not str:
                        general = skip = True
                    else:
                        ended = block["text"]
            else:
                general = skip = True
        if not general and index is not _UNSET:
            length = js_length(ended if ended is not None else "".join(texts))
    except (KeyError, TypeError, AttributeError, IndexError):
        general = True
    if general:
        _malformed_sources(seq, turn, step, sources, log)  # raises the original's error if one applies
        return _assembled_tokens(seq, [log[source]["data"]["chunk"] for source in sources])
    if index is _UNSET:
        return 0
    return -(-length // CHARS_PER_TOKEN) + BLOCK_OVERHEAD + ROLE_OVERHEAD


def _fold(state: _State, log: Sequence[Any], end: int) -> None:
    """Fold ``log[state.consumed:end]`` into ``state``; on a malformed event, stop just before it."""
    nodes = state.nodes
    seqs = state.seqs
    messages = state.messages
    shared = state.shared
    surface_tokens = state.surface_tokens
    header = state.header
    step_start = state.step_start
    anchor = state.anchor
    start = state.consumed
    i = end
    # Locals: the loop runs once per logged event, most of them chunks that it only skips.
    surface_types, chunk_type, assistant_type, user_type = (
        _SURFACE_TYPES,
        ASSISTANT_CHUNK,
        ASSISTANT_MESSAGE,
        USER_MESSAGE,
    )
    step_start_type, step_end_type, header_type = STEP_START, STEP_END, REQUEST_HEADER
    price, new_node, node_class = _estimate_message, _new_node, TokenSurfaceNode
    try:
        for i, event in enumerate(log[start:end], start):  # noqa: B007 (i is read in the finally)
            etype = event["type"]
            if etype == chunk_type:
                continue
            if etype in surface_types:
                op = event.get("surfaceOp")
                if op is None:  # not a surface event (never committed by the kernel)
                    continue
                # derive_event_message, inlined: an empty assistant message derives nothing.
                if etype == user_type:
                    message = event.get("data")
                else:
                    message = event["data"].get("message")
                    if etype == assistant_type and (not message or not message.get("content")):
                        message = None
                tokens = 0 if message is None else price(message)
                seq = event["seq"]
                if op == "append":
                    start_idx = end_idx = -1
                    delta = tokens
                else:
                    try:
                        start_idx = seqs.index(op["start"])
                        end_idx = seqs.index(op["end"])
                    except ValueError:
                        start_idx = end_idx = -2
                    if start_idx < 0 or start_idx > end_idx:
                        raise CompactionStateError(
                            f"token surface: replace at seq {seq} has invalid current range {op['start']}-{op['end']}"
                        )
                    delta = tokens - sum(node[1] for node in nodes[start_idx : end_idx + 1])
                next_anchor = anchor
                if etype == assistant_type:
                    data = event["data"]
                    if step_start is None or step_start[0] != data.get("turn") or step_start[1] != data.get("step"):
                        raise CompactionStateError(
                            f"token meter: assistant/message at seq {seq} has no matching step/start event"
                        )
                    usage = data.get("usage")
                    if usage is not None and header is not None:
                        anchor_surface = step_start[2] + provider_assistant_tokens(log, event, tokens)
                        provider_tokens = _usage_tokens(usage)
                        estimated = state.price_header(header) + anchor_surface
                        if provider_tokens >= estimated:
                            baseline = FrozenDict({"kind": "usage", "tokens": provider_tokens, "usage": usage})
                        else:
                            baseline = FrozenDict({"kind": "estimated", "tokens": estimated})
                    else:
                        anchor_surface = step_start[2] + tokens
                        baseline = FrozenDict(
                            {"kind": "estimated", "tokens": state.price_header(header) + anchor_surface}
                        )
                    next_anchor = _Anchor(header, anchor_surface, baseline)
                # commit (nothing below can fail)
                node = new_node(node_class, (seq, tokens))
                if start_idx == -1:
                    nodes.append(node)
                    seqs.append(seq)
                    messages.append(message)
                else:
                    if shared:  # a measurement holds this list: replace in a copy
                        nodes = nodes.copy()
                        shared = False
                    nodes[start_idx : end_idx + 1] = (node,)
                    seqs[start_idx : end_idx + 1] = (seq,)
                    messages[start_idx : end_idx + 1] = (message,)
                surface_tokens += delta
                anchor = next_anchor
            elif etype == step_start_type:
                if step_start is not None:
                    raise CompactionStateError(
                        f"token meter: step/start at seq {event['seq']} arrived before turn "
                        f"{step_start[0]}/step {step_start[1]} ended"
                    )
                data = event["data"]
                step_start = (data.get("turn"), data.get("step"), surface_tokens)
            elif etype == step_end_type:
                data = event["data"]
                if step_start is None or step_start[0] != data.get("turn") or step_start[1] != data.get("step"):
                    raise CompactionStateError(
                        f"token meter: step/end at seq {event['seq']} has no matching step/start event"
                    )
                step_start = None
            elif etype == header_type:
                data = event.get("data")
                value = data.get("header") if isinstance(data, Mapping) else None
                if isinstance(value, Mapping):
                    header = canonical_header(value)
        i = end
    finally:
        state.consumed = i
        state.nodes = nodes
        state.shared = shared
        state.surface_tokens = surface_tokens
        state.header = header
        state.step_start = step_start
        state.anchor = anchor


class TokenMeter:
    """Replays sessions into token measurements; one meter serves any number of sessions.

    The heuristic is fixed (§5.4), so the meter takes no settings: any keyword is refused.
    """

    def __init__(self, **config: object) -> None:
        for key in config:
            raise CompactionConfigError(f'TokenMeterConfig: unknown key "{key}" (no settings are supported)')
        self._states: weakref.WeakKeyDictionary[Any, _State] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._last: tuple[Callable[[], Any], _State] = (_dead_ref, _State())

    def measure(self, session: Any, request_header: Mapping[str, Any] | None = None) -> TokenMeasurement:
        """Measure request pressure and the surface through the session's current tail.

        Provider usage is reused only when the latest ``assistant/message``'s header equals the effective
        header (``request_header`` if given, else the latest logged one) and the usage is no lower than that
        call's full heuristic price; otherwise the header and surface are priced heuristically.
        ``request_header`` affects pressure only: the surface fields always describe the session.
        Works on a ``SessionView`` (``session.at(seq)``) too, folding it from scratch.
        """
        log, end = events_of(session)
        with self._lock:
            last_session, state = self._last
            if last_session() is not session:
                state = self._state_of(session)
            if state.consumed < end:
                _fold(state, log, end)
            header = state.header if request_header is None else canonical_header(request_header)
            anchor = state.anchor
            surface_tokens = state.surface_tokens
            if anchor is not None and _optional_header_equals(anchor.header, header):
                baseline = anchor.baseline
                delta = surface_tokens - anchor.surface_tokens
            elif header is None and surface_tokens == 0:
                baseline = _NONE_BASELINE
                delta = 0
            else:
                tokens = state.price_header(header) + surface_tokens
                last = state.last_estimate
                if last is not None and last[0] == tokens:
                    baseline = last[1]
                else:
                    baseline = FrozenDict({"kind": "estimated", "tokens": tokens})
                    state.last_estimate = (tokens, baseline)
                delta = 0
            total = baseline["tokens"] + delta
            state.shared = True
            nodes = state.nodes
            return _new_measurement(
                TokenMeasurement,
                (
                    state.consumed,
                    baseline,
                    delta,
                    total if total > 0 else 0,
                    surface_tokens,
                    PrefixView(nodes, len(nodes)),
                ),
            )

    def _surface_messages(self, session: Any, measurement: TokenMeasurement, start: int, stop: int) -> list[Any] | None:
        """The messages of ``measurement.nodes[start:stop]`` (those that derive one), as the fold read them.

        Exactly ``[derive_event_message(log[node.seq]) for node in nodes[start:stop]]`` less the ``None``s,
        the very message objects, without reading the log again. ``None`` when this meter's fold of the
        session is not at ``measurement``'s revision (another append landed since, or the session is a
        ``SessionView``, folded afresh per call): the caller then derives the messages itself.
        """
        with self._lock:
            last_session, state = self._last
            if last_session() is not session:
                try:
                    found = self._states.get(session)
                except TypeError:
                    return None
                if found is None:
                    return None
                state = found
            if state.consumed != measurement.log_revision or len(state.messages) != len(measurement.nodes):
                return None
            return [message for message in state.messages[start:stop] if message is not None]

    def _state_of(self, session: Any) -> _State:
        try:
            state = self._states.get(session)
            if state is None:
                state = self._states[session] = _State()
            self._last = (weakref.ref(session), state)
        except TypeError:  # not weakly referenceable (a SessionView): fold from scratch
            state = _State()
        return state

    def estimate_message(self, message: Mapping[str, Any]) -> int:
        """The heuristic price of one model-visible message (content plus role framing)."""
        return _estimate_message(message)
