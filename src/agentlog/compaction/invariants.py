"""Optional compaction invariant checker: brackets, turn ownership and checkpoint provenance (spec §5.3).

The compaction transaction (``compaction/start`` … ``compaction/summary`` … checkpoint ``user/message``
… ``compaction/end``) is recorded in the log, so its shape can be checked at the append that would
break it, the way :class:`~agentlog.kernel.invariants.SessionInvariants` checks turns and steps:

- a live bracket never crosses ``turn/start`` / ``turn/end``: a numbered bracket
  (``compaction/start.turn = N``) lies inside turn N, a ``null`` (standalone, manual) bracket outside
  every turn;
- one bracket at a time, at most one summary in it, a successful end only after its summary, and the
  same ``compactionId`` / ``sourceCommandId`` on every event of the bracket;
- a replacement checkpoint ``user/message`` (source ``{kind: "plugin", plugin: "compact"}``) names the
  open transaction;
- ``session/end-seed`` retires an inherited open bracket (a crashed lifecycle), and the repair turn
  boundaries a seed carries before that end-seed are accepted.

Like the kernel's checker this is opt-in: it constrains how a writer *uses* the log (the engine, a
port, a hand-written tool), and a loop under test turns it on so a structural bug is caught at the
append that introduces it. Violations raise :class:`~agentlog.errors.InvariantError` attributed to the
original's package (``@deepseek-ai/dsh-compaction``), with the original's texts. Validation runs in a
pre-commit interceptor (a violation vetoes the append) and the staged transition is applied only once
the event is actually committed. The prune pass and the manual command own no invariant of their own
(the original's companions for them are empty): a pruned ``tool/result`` replacement is checked by the
kernel's rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, NoReturn

from ..errors import InvariantError
from ..kernel.events import SESSION_END_SEED, TURN_END, TURN_START, USER_MESSAGE
from ..kernel.invariants import StagedInvariants
from ..kernel.jsonvalue import MAX_SAFE_INTEGER
from ..kernel.store import SessionStore
from .events import COMPACTION_END, COMPACTION_START, COMPACTION_SUMMARY
from .region import is_checkpoint_source

PACKAGE_NAME: Final = "@deepseek-ai/dsh-compaction"


class _Absent:
    """A key the event does not carry (the original's ``undefined``, distinct from JSON ``null``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "undefined"


ABSENT: Final = _Absent()


@dataclass(frozen=True)
class OpenCompaction:
    """The live bracket: what its ``compaction/start`` said, and whether its summary was logged."""

    compaction_id: str
    source_command_id: str | None
    """``None``: the start carried no ``sourceCommandId`` (a present one is always a non-empty string)."""
    start_seq: int
    turn: Any
    """The owning turn number, or ``None`` for a standalone (manual) bracket."""
    summarized: bool = False


@dataclass(frozen=True)
class CompactionTrace:
    """The committed facts the rules need: the open turn and the live bracket (if any)."""

    open_turn: Any = None
    compaction: OpenCompaction | None = None


# --- helpers ---------------------------------------------------------------------------------------


def _fail(text: str) -> NoReturn:
    raise InvariantError(text, PACKAGE_NAME)


def _show(value: Any) -> str:
    """``String(value)`` as the original renders it in its messages."""
    if value is ABSENT:
        return "undefined"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, Mapping):
        return "[object Object]"
    if isinstance(value, (list, tuple)):
        return ",".join("" if item is None or item is ABSENT else _show(item) for item in value)
    return str(value)


def _same(a: Any, b: Any) -> bool:
    """``a === b`` over JSON values: numbers by value, booleans only equal booleans, others by type and value."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def _field(data: Any, key: str) -> Any:
    if isinstance(data, Mapping) and key in data:
        return data[key]
    return ABSENT


def _is_safe_integer(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, float) and not value.is_integer():
        return False
    return abs(value) <= MAX_SAFE_INTEGER


def _validate_id(value: Any, label: str) -> str:
    if not isinstance(value, str) or not value:
        _fail(f"{label} must be a non-empty string")
    return value


def _validate_source_command_id(event_type: str, value: Any, expected: str | None) -> None:
    """Keep the optional initiating command identity stable across one transaction."""
    if value is not ABSENT:
        _validate_id(value, f"{event_type} sourceCommandId")
    if not _same(None if value is ABSENT else value, expected):
        shown_expected = "undefined" if expected is None else expected
        _fail(
            f"{event_type} sourceCommandId {_show(value)} does not match compaction/start sourceCommandId "
            f"{shown_expected}"
        )


def _validate_owner(owner: Any, open_turn: Any, event_type: str) -> None:
    """A numbered bracket inside its exact turn, or a standalone bracket between turns."""
    if owner is None:
        if open_turn is not None:
            _fail(f"{event_type} is standalone but turn {_show(open_turn)} is open")
        return
    if open_turn is None:
        _fail(f"{event_type} for turn {_show(owner)} appended outside any open turn")
    if not _same(owner, open_turn):
        _fail(f"{event_type} names turn {_show(owner)} but open turn is {_show(open_turn)}")


def _is_checkpoint(event: Mapping[str, Any]) -> bool:
    if event["type"] != USER_MESSAGE or not isinstance(event.get("surfaceOp"), Mapping):
        return False
    source = _field(event.get("data"), "source")
    return isinstance(source, Mapping) and is_checkpoint_source(source)


# --- the rules -------------------------------------------------------------------------------------


def check_turn_boundary(trace: CompactionTrace, event: Mapping[str, Any]) -> None:
    """Refuse a turn boundary while a bracket is live (it would cross the bracket)."""
    etype = event["type"]
    open_bracket = trace.compaction
    if (etype != TURN_START and etype != TURN_END) or open_bracket is None:
        return
    owner = "standalone compaction" if open_bracket.turn is None else f"compaction for turn {_show(open_bracket.turn)}"
    _fail(f"{etype} cannot cross an open {owner}")


def _check_checkpoint(trace: CompactionTrace, event: Mapping[str, Any]) -> None:
    source = event["data"]["source"]
    compaction_id = _validate_id(_field(source, "compactionId"), "compaction checkpoint compactionId")
    source_command_id = _field(source, "sourceCommandId")
    if source_command_id is not ABSENT:
        _validate_id(source_command_id, "compaction checkpoint sourceCommandId")
    open_bracket = trace.compaction
    if open_bracket is None:
        _fail("compaction checkpoint has no matching compaction/start")
    if compaction_id != open_bracket.compaction_id:
        _fail(
            f"compaction checkpoint id {compaction_id} does not match compaction/start id {open_bracket.compaction_id}"
        )
    _validate_source_command_id("compaction checkpoint", source_command_id, open_bracket.source_command_id)


def _lifecycle_ids(etype: str, data: Any) -> tuple[str, Any]:
    compaction_id = _validate_id(_field(data, "compactionId"), f"{etype} compactionId")
    source_command_id = _field(data, "sourceCommandId")
    if source_command_id is not ABSENT:
        _validate_id(source_command_id, f"{etype} sourceCommandId")
    return compaction_id, source_command_id


def _matching_open(trace: CompactionTrace, etype: str, compaction_id: str, source_command_id: Any) -> OpenCompaction:
    open_bracket = trace.compaction
    if open_bracket is None:
        _fail(f"{etype} has no matching compaction/start")
    if compaction_id != open_bracket.compaction_id:
        _fail(f"{etype} id {compaction_id} does not match compaction/start id {open_bracket.compaction_id}")
    _validate_source_command_id(etype, source_command_id, open_bracket.source_command_id)
    return open_bracket


def _start(trace: CompactionTrace, event: Mapping[str, Any]) -> OpenCompaction:
    data = event["data"]
    compaction_id, source_command_id = _lifecycle_ids(COMPACTION_START, data)
    open_bracket = trace.compaction
    if open_bracket is not None:
        owner = "standalone compaction" if open_bracket.turn is None else f"turn {_show(open_bracket.turn)}"
        _fail(f"compaction/start while {owner} is still compacting")
    turn = _field(data, "turn")
    _validate_owner(turn, trace.open_turn, COMPACTION_START)
    return OpenCompaction(compaction_id, None if source_command_id is ABSENT else source_command_id, event["seq"], turn)


def _summary(trace: CompactionTrace, event: Mapping[str, Any]) -> OpenCompaction:
    data = event["data"]
    compaction_id, source_command_id = _lifecycle_ids(COMPACTION_SUMMARY, data)
    open_bracket = _matching_open(trace, COMPACTION_SUMMARY, compaction_id, source_command_id)
    _validate_owner(open_bracket.turn, trace.open_turn, COMPACTION_SUMMARY)
    if open_bracket.summarized:
        _fail("compaction/summary repeated within one compaction")
    seqs = _field(data, "shadowedSeqs")
    if not isinstance(seqs, Sequence) or isinstance(seqs, str) or len(seqs) == 0:
        _fail("compaction/summary shadowedSeqs must be non-empty")
    shadowed_range = _field(data, "shadowedRange")
    if not (_same(seqs[0], _field(shadowed_range, "start")) and _same(seqs[-1], _field(shadowed_range, "end"))):
        _fail("compaction/summary shadowedRange must match the first and last shadowedSeqs")
    count = _field(data, "shadowedTokenCount")
    if not _is_safe_integer(count) or count < 0:
        _fail("compaction/summary shadowedTokenCount must be a non-negative safe integer")
    return replace(open_bracket, summarized=True)


def _end(trace: CompactionTrace, event: Mapping[str, Any]) -> None:
    data = event["data"]
    compaction_id, source_command_id = _lifecycle_ids(COMPACTION_END, data)
    open_bracket = _matching_open(trace, COMPACTION_END, compaction_id, source_command_id)
    turn = _field(data, "turn")
    if not _same(turn, open_bracket.turn):
        _fail(f"compaction/end owner {_show(turn)} does not match compaction/start owner {_show(open_bracket.turn)}")
    _validate_owner(open_bracket.turn, trace.open_turn, COMPACTION_END)
    if _field(data, "error") is ABSENT and not open_bracket.summarized:
        _fail("successful compaction/end requires one compaction/summary")


def _transition(trace: CompactionTrace, event: Mapping[str, Any]) -> CompactionTrace:
    """Validate one event's compaction rules (not the turn-crossing rule) and return the next trace."""
    etype = event["type"]
    if etype == TURN_START:
        return replace(trace, open_turn=_field(event.get("data"), "turn"))
    if etype == TURN_END:
        return replace(trace, open_turn=None)
    if etype == SESSION_END_SEED:
        return trace if trace.compaction is None else replace(trace, compaction=None)
    if etype == COMPACTION_START:
        return replace(trace, compaction=_start(trace, event))
    if etype == COMPACTION_SUMMARY:
        return replace(trace, compaction=_summary(trace, event))
    if etype == COMPACTION_END:
        _end(trace, event)
        return replace(trace, compaction=None)
    if _is_checkpoint(event):
        _check_checkpoint(trace, event)
    return trace


def advance(trace: CompactionTrace, event: Mapping[str, Any]) -> CompactionTrace:
    """The trace after appending ``event``, or :class:`InvariantError` for the first rule it breaks. Pure.

    Returns ``trace`` itself when the event concerns no rule.
    """
    check_turn_boundary(trace, event)
    return _transition(trace, event)


def inherited_orphan_start_seqs(events: Iterable[Mapping[str, Any]]) -> frozenset[int]:
    """Seqs of the ``compaction/start`` events still unmatched when a later ``session/end-seed`` came."""
    stale: set[int] = set()
    open_start: int | None = None
    for event in events:
        etype = event["type"]
        if etype == COMPACTION_START:
            open_start = event["seq"]
        elif etype == COMPACTION_END:
            open_start = None
        elif etype == SESSION_END_SEED:
            if open_start is not None:
                stale.add(open_start)
            open_start = None
    return frozenset(stale)


def replay(events: Iterable[Mapping[str, Any]]) -> CompactionTrace:
    """The trace of an existing log, validating every event; :class:`InvariantError` at the first break.

    A seed may carry the repair turn boundaries that closed a crashed turn *before* the end-seed that
    retires the crashed bracket: while the open bracket is such an inherited orphan, turn boundaries are
    not refused (everything else still is).
    """
    log = events if isinstance(events, Sequence) else list(events)
    stale = inherited_orphan_start_seqs(log)
    trace = CompactionTrace()
    for event in log:
        if trace.compaction is None or trace.compaction.start_seq not in stale:
            check_turn_boundary(trace, event)
        trace = _transition(trace, event)
    return trace


# --- the store companion ---------------------------------------------------------------------------


class CompactionInvariants(StagedInvariants[CompactionTrace]):
    """Installs the compaction checks on a store (all sessions, present and future), beside the kernel's
    :class:`~agentlog.kernel.invariants.SessionInvariants` and through the same installer."""

    def __init__(self, store: SessionStore) -> None:
        super().__init__(store, replay, advance)


__all__ = [
    "ABSENT",
    "PACKAGE_NAME",
    "CompactionInvariants",
    "CompactionTrace",
    "OpenCompaction",
    "advance",
    "check_turn_boundary",
    "inherited_orphan_start_seqs",
    "replay",
]
