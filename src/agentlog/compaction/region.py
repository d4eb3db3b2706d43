"""The compaction transaction: one summary replaces one surface span, recorded in the log (spec §5.2–§5.8).

Everything is in the log, so every reader — a resumed process, a fork, another implementation — sees
the same state: ``compaction/start`` is the durable lock, appended synchronously right after the span
and the lock were checked (no await between them); the summarizer runs; then ``compaction/summary``,
the replacing checkpoint ``user/message`` and ``compaction/end`` are appended together, without an
await. Any failure after the start — a summarizer error, a summary that is not smaller, a surface that
changed meanwhile, a cancellation — makes exactly one ``compaction/end {error}`` attempt and leaves the
surface as it was. A crash leaves an unmatched start, which the next process's ``session/end-seed``
retires (a dead lifecycle does not hold the lock).

Beyond the original: when the shadowed span does not fit one summarization request (``max_input_tokens``),
it is summarized in consecutive parts cut at balanced boundaries, each part's request carrying the
summary so far as a prior checkpoint — the instruction's own merge rule — so the last answer is one
consolidated summary of the whole span.
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import Any, Final, Literal

from ..errors import (
    CompactionBusyError,
    CompactionError,
    CompactionRangeError,
    CompactionStateError,
    ManualCompactionError,
    SummaryNotSmallerError,
    SurfaceChangedError,
)
from ..kernel.events import SESSION_END_SEED, TURN_END, TURN_START, USER_MESSAGE, Message
from ..kernel.jsonvalue import thaw
from ..kernel.messages import user_message
from ..kernel.prefixview import PrefixView
from ..kernel.session import Session, derive_event_message
from .estimate import estimate_header, estimate_message
from .events import COMPACTION_END, COMPACTION_PRUNE, COMPACTION_START, COMPACTION_SUMMARY
from .meter import TokenMeasurement, TokenMeter
from .pairing import balanced_after, balanced_before
from .selection import CompactableRange, select_compactable_range
from .summarizer import SummarizationInput, SummaryResult, frame_summary, instruction_message

CHECKPOINT_PLUGIN: Final = "compact"

Summarize = Callable[[SummarizationInput], Awaitable[SummaryResult]]


def checkpoint_source(compaction_id: str, source_command_id: str | None = None) -> dict[str, Any]:
    """The ``source`` of a checkpoint message, correlated with its transaction."""
    source: dict[str, Any] = {"kind": "plugin", "plugin": CHECKPOINT_PLUGIN, "compactionId": compaction_id}
    if source_command_id is not None:
        source["sourceCommandId"] = source_command_id
    return source


def is_checkpoint_source(source: Mapping[str, Any] | None) -> bool:
    """Whether a message source marks a compaction checkpoint (any backend's)."""
    return source is not None and source.get("kind") == "plugin" and source.get("plugin") == CHECKPOINT_PLUGIN


def manual_compaction_range(session: Any, measurement: TokenMeasurement) -> CompactableRange | None:
    """The span a manual compaction summarizes, or ``None`` when there is nothing to compact.

    The original's selection with nothing retained but the newest balanced unit (spec §5.10:
    ``selectCompactableRange(session, measure, 0)``), and one case more: a span that is nothing but
    checkpoints. Right after a compaction the surface is the checkpoint and the newest message, so the
    selection would be the checkpoint alone; summarizing a summary by itself only re-words it (its
    framed copy is never smaller), and the original then fails and logs a failed attempt every time it
    is asked. Here that is nothing to compact: decided on the surface, before anything is written. The
    lock still comes first, as it would for the span the original goes on to compact: while another
    compaction holds it, this is :class:`~agentlog.errors.CompactionBusyError`, not ``None``.
    """
    span = select_compactable_range(session, measurement, 0)
    if span is None:
        return None
    nodes = list(session.surface.nodes)
    shadowed = nodes[nodes.index(span.start) : nodes.index(span.end) + 1]  # head-anchored: from nodes[0]
    events = session.events
    if all(_is_checkpoint_message(derive_event_message(events[seq])) for seq in shadowed):
        assert_no_active_compaction(session, "compaction")
        return None
    return span


def _is_checkpoint_message(message: Mapping[str, Any] | None) -> bool:
    return message is not None and message.get("role") == "user" and is_checkpoint_source(message.get("source"))


def error_chain(err: BaseException) -> str:
    """The error and its causes on one line (the original's ``errorChain``), for ``compaction/end.error``.

    Never raises: a node whose text cannot be rendered (a hostile ``__str__``) becomes
    ``<unrenderable value>``, as in the original, so the failure bracket is always appended.
    """
    seen: set[int] = set()

    def render(current: BaseException) -> str:
        if id(current) in seen:
            return "<circular cause>"
        seen.add(id(current))
        try:
            message = str(current) or type(current).__name__
            members = ""
            if isinstance(current, BaseExceptionGroup) and current.exceptions:
                message = current.message or type(current).__name__
                members = " [" + "; ".join(render(e) for e in current.exceptions) + "]"
            cause = current.__cause__
            cause_text = render(cause) if cause is not None else ""
            suffix = f": {cause_text}" if cause_text and cause_text != message else ""
            return f"{message}{members}{suffix}"
        except Exception:
            return "<unrenderable value>"
        finally:
            seen.discard(id(current))

    return render(err)


@dataclass(frozen=True)
class CompactionResult:
    """A committed compaction: the seqs it appended, the summary, and what it shadowed."""

    compaction_id: str
    start_seq: int
    summary_seq: int
    end_seq: int
    summary: tuple[Mapping[str, Any], ...]
    shadowed_range: CompactableRange
    shadowed_seqs: tuple[int, ...]
    shadowed_token_count: int
    source_command_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"compactionId": self.compaction_id}
        if self.source_command_id is not None:
            out["sourceCommandId"] = self.source_command_id
        out.update(
            startSeq=self.start_seq,
            summarySeq=self.summary_seq,
            summary=[thaw(block) for block in self.summary],
            shadowedRange=self.shadowed_range.to_json(),
            shadowedSeqs=list(self.shadowed_seqs),
            shadowedTokenCount=self.shadowed_token_count,
            endSeq=self.end_seq,
        )
        return out


# --- the durable lock (§5.3) ----------------------------------------------------------------------


class _EntryState:
    """Open turn, unmatched ``compaction/start`` and newest ``session/end-seed``, folded forward."""

    __slots__ = ("end_seed_seq", "open_turn", "pos", "unmatched_start")

    def __init__(self) -> None:
        self.pos = 0
        self.open_turn: int | None = None
        self.unmatched_start: Any = None
        self.end_seed_seq: int | None = None


_ENTRY: weakref.WeakKeyDictionary[Any, _EntryState] = weakref.WeakKeyDictionary()


def entry_state(session: Any) -> _EntryState:
    """The lock-relevant facts at the log's end (O(events since the last call) per session)."""
    state = _ENTRY.get(session)
    if state is None:
        state = _ENTRY[session] = _EntryState()
    events = session.events
    n = len(events)
    pos = state.pos
    if pos >= n:
        return state
    # Only the new events: a slice of the view (skipping ``pos`` events through an iterator costs the
    # whole log per call). A first fold of a restored log steps over its packed chunk runs unbuilt.
    outside_runs = getattr(events, "outside_runs", None) if pos == 0 else None
    for event in outside_runs(0) if outside_runs is not None else events[pos:n]:
        etype = event["type"]
        if etype == TURN_START:
            state.open_turn = event["data"]["turn"]
        elif etype == TURN_END:
            state.open_turn = None
        elif etype == COMPACTION_START:
            state.unmatched_start = event
        elif etype == COMPACTION_END:
            state.unmatched_start = None
        elif etype == SESSION_END_SEED:
            state.end_seed_seq = event.seq
    state.pos = n
    return state


def lock_is_held(session: Any) -> bool:
    """Whether a live compaction holds the session (an unmatched start after the newest end-seed)."""
    state = entry_state(session)
    start = state.unmatched_start
    return start is not None and (state.end_seed_seq is None or state.end_seed_seq < start.seq)


def assert_no_active_compaction(session: Any, stage: str) -> None:
    if lock_is_held(session):
        raise CompactionBusyError(
            f"{stage}: compaction already in progress; the session compaction lock is already active"
        )


# --- span validation ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Selection:
    start: int
    end: int
    start_index: int
    end_index: int
    shadowed_seqs: tuple[int, ...]


def validate_region(session: Any, start: int, end: int) -> _Selection:
    """Both ends on the surface, in order, and balanced cuts on both sides (the original's messages)."""
    nodes = list(session.surface.nodes)
    start_index = _position(nodes, start)
    end_index = _position(nodes, end)
    if start_index == -1:
        raise CompactionRangeError(f"compactRegion: start seq {start} not found in surface")
    if end_index == -1:
        raise CompactionRangeError(f"compactRegion: end seq {end} not found in surface")
    if start_index > end_index:
        raise CompactionRangeError(
            f"compactRegion: start seq {start} (position {start_index}) is after end seq {end} "
            f"(position {end_index}) on the surface"
        )
    if not balanced_before(session, start):
        raise CompactionRangeError(
            f"compactRegion: start seq {start} is not a balanced boundary (would split a step's tool-call/result pair)"
        )
    if not balanced_after(session, end):
        raise CompactionRangeError(
            f"compactRegion: end seq {end} is not a balanced boundary (would split a step, or the step is still open)"
        )
    return _Selection(start, end, start_index, end_index, tuple(nodes[start_index : end_index + 1]))


def _position(nodes: list[int], seq: int) -> int:
    """``seq``'s position on the surface (seqs are unique there), or -1; one scan in C."""
    try:
        return nodes.index(seq)
    except ValueError:
        return -1


# --- the transaction ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RegionOptions:
    """How one transaction runs.

    ``owner``: ``"current-turn"`` (automatic or explicit region compaction inside the open turn) or
    ``None`` (manual, between turns). ``stability``: what must survive the summarizer's await —
    ``"whole-surface"`` (the whole priced surface) or ``"selected-span"`` (only the span; appends after it
    are fine). ``flush`` runs after a closed bracket (manual compaction makes it durable before returning).
    """

    owner: Literal["current-turn"] | None = "current-turn"
    stability: Literal["whole-surface", "selected-span"] = "whole-surface"
    flush: Callable[[], Awaitable[None]] | None = None
    source_command_id: str | None = None
    max_input_tokens: int | None = None


@dataclass(frozen=True)
class _Prepared:
    selection: _Selection
    measurement: TokenMeasurement
    nodes: tuple[Any, ...]
    shadowed_token_count: int
    input: SummarizationInput


_seq_of = itemgetter(0)
_tokens_of = itemgetter(1)


def _prepare(meter: TokenMeter, session: Any, selection: _Selection, template: SummarizationInput) -> _Prepared:
    measurement = meter.measure(session)
    stop = selection.end_index + 1
    selected = tuple(measurement.nodes[selection.start_index : stop])
    if tuple(map(_seq_of, selected)) != selection.shadowed_seqs:
        raise SurfaceChangedError("compaction: selected surface changed before summarization began")
    header = session.request_header()
    # The meter's fold read every node's message when it priced it: take those, not a second derivation.
    surface_messages = getattr(meter, "_surface_messages", None)  # (a stand-in meter may lack it)
    messages = None if surface_messages is None else surface_messages(session, measurement, selection.start_index, stop)
    if messages is None:
        log = session.events.to_list()
        messages = [m for seq in selection.shadowed_seqs if (m := derive_event_message(log[seq])) is not None]
    summary_input = replace(
        template,
        messages=messages,
        system=header.get("system") if header is not None else None,
        tools=header.get("tools") if header is not None else None,
    )
    return _Prepared(selection, measurement, selected, sum(map(_tokens_of, selected)), summary_input)


def _same_nodes(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Equal node sequences; views of the meter's node list compare without a copy (at once when they
    view the same list)."""
    if isinstance(a, PrefixView) or isinstance(b, PrefixView):
        return bool(a == b)
    return tuple(a) == tuple(b)


def _check_stable(meter: TokenMeter, session: Any, prepared: _Prepared, stability: str) -> None:
    if stability == "whole-surface":
        if not _same_nodes(meter.measure(session).nodes, prepared.measurement.nodes):
            raise SurfaceChangedError("compaction: session surface changed during summarization")
        return
    selection = prepared.selection
    try:
        current = validate_region(session, selection.start, selection.end)
    except CompactionError as err:
        raise SurfaceChangedError("compaction: the selected span is no longer a valid replacement target") from err
    if current.shadowed_seqs != selection.shadowed_seqs:
        raise SurfaceChangedError("compaction: the selected span changed during summarization")
    measured = tuple(meter.measure(session).nodes[current.start_index : current.end_index + 1])
    if measured != prepared.nodes:
        raise SurfaceChangedError("compaction: the selected span was rewritten during summarization")


async def _summarize(
    summarize: Summarize, session: Any, prepared: _Prepared, max_input_tokens: int | None
) -> SummaryResult:
    """One call when the span fits one request; otherwise balanced parts, each merged into the last."""
    summary_input = prepared.input
    if max_input_tokens is None:
        return await summarize(summary_input)
    fixed = estimate_header({"system": summary_input.system, "tools": summary_input.tools}) + estimate_message(
        instruction_message()
    )
    budget = max_input_tokens - fixed
    if budget <= 0 or prepared.shadowed_token_count <= budget:
        # Nothing fits beside the fixed prefix (e.g. an output cap as large as the window): splitting
        # cannot help, so the span goes whole in one call, as in the original.
        return await summarize(summary_input)
    # Cut the span into parts at balanced boundaries; each request = prior summary + one part.
    events = session.events
    units: list[tuple[int, list[Any]]] = []  # (tokens, messages) of each smallest balanced group
    tokens, group = 0, []
    for node in prepared.nodes:
        message = derive_event_message(events[node.seq])
        tokens += node.tokens
        if message is not None:
            group.append(message)
        if balanced_after(session, node.seq):
            units.append((tokens, group))
            tokens, group = 0, []
    if group:
        units.append((tokens, group))
    result: SummaryResult | None = None
    calls = 0
    index = 0
    while index < len(units):
        prior: list[Any] = []
        allowance = budget
        if result is not None:
            checkpoint = user_message(frame_summary(result.summary))
            prior = [checkpoint]
            allowance -= estimate_message(checkpoint)
        part: list[Any] = []
        used = 0
        while index < len(units) and (not part or used + units[index][0] <= allowance):
            used += units[index][0]
            part.extend(units[index][1])
            index += 1
        result = await summarize(replace(summary_input, messages=[*prior, *part]))
        calls += 1
    assert result is not None
    if calls == 1:
        return result
    return replace(result, llm_stream_call=False, raw_output=result.raw_output, calls=calls)


async def compact_surface_region(
    session: Any,
    start: int,
    end: int,
    *,
    meter: TokenMeter,
    summarize: Summarize,
    template: SummarizationInput | None = None,
    options: RegionOptions | None = None,
) -> CompactionResult:
    """Replace the surface span ``start``..``end`` (seqs, by position) with one summary checkpoint."""
    opts = options or RegionOptions()
    selection = validate_region(session, start, end)
    state = entry_state(session)
    assert_no_active_compaction(session, "compaction")
    owner: int | None
    if opts.owner is None:
        if state.open_turn is not None:
            raise CompactionBusyError("manual compaction: the session already has an open turn")
        owner = None
    else:
        if state.open_turn is None:
            raise CompactionStateError(
                "compactRegion: no open turn — automatic compaction events must be enclosed in a turn"
            )
        owner = state.open_turn
    compaction_id = str(uuid.uuid4())
    lifecycle: dict[str, Any] = {"compactionId": compaction_id}
    if opts.source_command_id is not None:
        lifecycle["sourceCommandId"] = opts.source_command_id
    lifecycle["turn"] = owner
    start_event = session.append_custom(COMPACTION_START, lifecycle)  # the lock: no await since the checks

    failure: BaseException | None = None
    stage = "summary"
    closed = False
    result: CompactionResult | None = None
    try:
        prepared = _prepare(meter, session, selection, template or SummarizationInput(messages=()))
        summary = await _summarize(summarize, session, prepared, opts.max_input_tokens)
        checkpoint = user_message(
            frame_summary(summary.summary), source=checkpoint_source(compaction_id, opts.source_command_id)
        )
        framed = estimate_message(checkpoint)
        if framed >= prepared.shadowed_token_count:
            raise SummaryNotSmallerError(
                f"summary is not smaller than the shadowed content ({framed} estimated framed tokens >= "
                f"{prepared.shadowed_token_count})"
            )
        _check_stable(meter, session, prepared, opts.stability)
        stage = "commit"
        result = _commit(session, start_event, selection, prepared, summary, checkpoint)
        end_event = session.append_custom(COMPACTION_END, lifecycle)
        closed = True
        result = replace(result, end_seq=end_event.seq)
    except BaseException as err:  # cancellation and interrupts close the bracket too
        failure = err
        if stage != "commit" or result is None:
            try:
                session.append_custom(COMPACTION_END, {**lifecycle, "error": error_chain(err)})
                closed = True
            except Exception as close_error:  # the unmatched start stays: an intentional busy signal
                failure, stage = close_error, "commit"
                failure.__context__ = err
    flush_failure: BaseException | None = None
    if closed and opts.flush is not None:
        try:
            await opts.flush()
        except Exception as err:
            flush_failure = err
    if failure is not None:
        if not isinstance(failure, Exception):
            raise failure  # CancelledError, KeyboardInterrupt: the bracket is closed, the caller decides
        if opts.owner is None:
            if isinstance(failure, ManualCompactionError):
                raise failure  # already classified; chaining it to itself would hide its own cause
            raise _manual_failure(failure, stage) from failure
        raise failure
    if flush_failure is not None:
        raise ManualCompactionError("persistence", "manual compaction durability checkpoint failed") from flush_failure
    assert result is not None
    return result


def _manual_failure(failure: Exception, stage: str) -> ManualCompactionError:
    if isinstance(failure, ManualCompactionError):
        return failure
    if stage == "commit":
        return ManualCompactionError("commit", "manual compaction did not commit cleanly")
    if isinstance(failure, SurfaceChangedError):
        return ManualCompactionError("changed", "the compacted history changed during manual compaction")
    return ManualCompactionError("summary", "manual compaction could not produce a smaller summary")


def _commit(
    session: Session,
    start_event: Any,
    selection: _Selection,
    prepared: _Prepared,
    summary: SummaryResult,
    checkpoint: Message,
) -> CompactionResult:
    start_data = start_event["data"]
    data: dict[str, Any] = {"compactionId": start_data["compactionId"]}
    if "sourceCommandId" in start_data:
        data["sourceCommandId"] = start_data["sourceCommandId"]
    data["summary"] = [thaw(block) for block in summary.summary]
    if summary.llm_stream_call:
        data["rawOutput"] = [thaw(block) for block in summary.raw_output or ()]
        data["llmStreamCall"] = True
    elif summary.raw_output is not None:
        data["rawOutput"] = [thaw(block) for block in summary.raw_output]
    data["shadowedRange"] = {"start": selection.start, "end": selection.end}
    data["shadowedSeqs"] = list(selection.shadowed_seqs)
    data["shadowedTokenCount"] = prepared.shadowed_token_count
    data["provider"] = summary.provider
    data["model"] = summary.model
    if summary.max_tokens is not None:
        data["maxTokens"] = summary.max_tokens
    if summary.usage is not None:
        data["usage"] = thaw(summary.usage)
    summary_event = session.append_custom(COMPACTION_SUMMARY, data)
    session.append(
        USER_MESSAGE,
        checkpoint,
        {
            "surfaceOp": {"op": "replace", "start": selection.start, "end": selection.end},
            "sourceEventSeqs": [start_event.seq, summary_event.seq, *selection.shadowed_seqs],
        },
    )
    return CompactionResult(
        compaction_id=start_data["compactionId"],
        start_seq=start_event.seq,
        summary_seq=summary_event.seq,
        end_seq=-1,
        summary=tuple(data["summary"]),
        shadowed_range=CompactableRange(selection.start, selection.end),
        shadowed_seqs=selection.shadowed_seqs,
        shadowed_token_count=prepared.shadowed_token_count,
        source_command_id=start_data.get("sourceCommandId"),
    )


__all__ = [
    "COMPACTION_END",
    "COMPACTION_PRUNE",
    "COMPACTION_START",
    "COMPACTION_SUMMARY",
    "CompactionResult",
    "RegionOptions",
    "assert_no_active_compaction",
    "checkpoint_source",
    "compact_surface_region",
    "entry_state",
    "error_chain",
    "is_checkpoint_source",
    "lock_is_held",
    "validate_region",
]
