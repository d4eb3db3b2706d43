"""Chunk-row storage codec (spec §15): lossless packing of streamed delta runs.

Providers stream token-sized deltas, so a log holds long runs of ``assistant/chunk`` events whose JSON
envelopes dwarf their payloads. Persistence therefore packs each run of consecutive, same-block delta
events into one *storage row* (``text-chunks``, ``reasoning-chunks`` or ``tool-call-chunks``) and expands
rows back into the exact original events when reading.

Rows are a storage vocabulary, never session events: their bare (slash-less) tags cannot collide with an
event type, and they never enter ``Session.events``.

Two design rules carry the correctness argument:

* **The encoder whitelists exact shapes.** An event packs only when its whole shape (envelope keys, data
  keys, chunk keys, primitive types, integer seq/time) is recognised; anything else is written verbatim.
  Unknown fields or future chunk variants therefore cost compression, never data.
* **The decoder validates before it expands** and raises :class:`~agentlog.errors.ChunkRowError` on a
  malformed row-tagged value, because treating a corrupt row as an ordinary event would silently drop a
  whole run.

Both functions are pure (no I/O, no state) and do a single pass over their input, because persistence
runs the encoder on every flushed batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from itertools import accumulate
from typing import Any, Final, Literal, NotRequired, TypeAlias, TypedDict, TypeGuard

from agentlog import _accel
from agentlog.errors import ChunkRowError
from agentlog.kernel.events import ASSISTANT_CHUNK
from agentlog.kernel.jsonvalue import MAX_SAFE_INTEGER
from agentlog.kernel.packedrun import (
    _ABSENT,
    ChunkRun,
    _Absent,
    _frozen_members,
    _member_dicts,
    _MembersFacts,
    compact_chunk_runs,
    compact_runs_requested,
    count_items,
    expand_items,
    has_runs,
)

__all__ = [
    "CHUNK_ROW_TAGS",
    "MIN_RAW_RUN",
    "MIN_RUN",
    "REASONING_ROW",
    "TEXT_ROW",
    "TOOL_CALL_ROW",
    "ChunkRow",
    "ChunkRun",
    "StorageRecord",
    "TextChunkRow",
    "TextRunData",
    "ToolCallChunkRow",
    "ToolCallRunData",
    "compact_chunk_runs",
    "compact_raw_chunks",
    "compact_runs_requested",
    "count_items",
    "decode_storage_record",
    "decode_storage_run",
    "expand_items",
    "has_runs",
    "pack_chunk_runs",
]

MIN_RUN: Final = 3
"""Fewest members a run needs before it packs.

Below three, a row's own envelope rivals the event lines it would replace. It is a format constant, not
a tunable: packed and unpacked layouts decode identically, so changing it never invalidates stored logs.
"""

_MAX_SAFE: Final = MAX_SAFE_INTEGER  # JS Number.MAX_SAFE_INTEGER: logs must stay readable by the original harness

_CHUNK_EVENT: Final = ASSISTANT_CHUNK
_TEXT_DELTA: Final = "text-delta"
_REASONING_DELTA: Final = "reasoning-delta"
_TOOL_CALL_DELTA: Final = "tool-call-delta"
TEXT_ROW: Final = "text-chunks"
REASONING_ROW: Final = "reasoning-chunks"
TOOL_CALL_ROW: Final = "tool-call-chunks"
CHUNK_ROW_TAGS: Final = frozenset({TEXT_ROW, REASONING_ROW, TOOL_CALL_ROW})
"""Storage-row tags (bare words, never event types): a stored value whose ``type`` is one of these is a
packed run that must be expanded (or kept as a :class:`ChunkRun`). The one definition every backend reads;
the C accelerator interns the same words and exports them as ``_speedups.CHUNK_ROW_TAGS`` (a test holds
the two equal)."""
_TEXT_ROW: Final = TEXT_ROW
_REASONING_ROW: Final = REASONING_ROW
_TOOL_CALL_ROW: Final = TOOL_CALL_ROW

_ENVELOPE_WHY: Final = "envelope must be exactly {type, seq0, time0, data}"
_TOOL_DATA_WHY: Final = "data must be exactly {turn, step, index, id, name?, dt, args}"
_TEXT_DATA_WHY: Final = "data must be exactly {turn, step, index, dt, texts}"


class TextRunData(TypedDict):
    """Payload of a text/reasoning row: one ``texts`` entry per member, never joined.

    Members stay separate because token boundaries are data: joining them would not round-trip.
    """

    turn: float
    step: float
    index: float
    dt: list[int]
    texts: list[str]


class ToolCallRunData(TypedDict):
    """Payload of a tool-call row: the run-constant call identity plus each member's arguments fragment.

    ``name`` is present iff every member carried it with one value; a run mixing presence never packs.
    """

    turn: float
    step: float
    index: float
    dt: list[int]
    id: str
    name: NotRequired[str]
    args: list[str]


class TextChunkRow(TypedDict):
    """A packed text or reasoning run; member ``k`` is seq ``seq0 + k``, time ``time0 + sum(dt[:k])``."""

    type: Literal["text-chunks", "reasoning-chunks"]
    seq0: int
    time0: int
    data: TextRunData


class ToolCallChunkRow(TypedDict):
    """A packed tool-call-delta run; member placement as for :class:`TextChunkRow`."""

    type: Literal["tool-call-chunks"]
    seq0: int
    time0: int
    data: ToolCallRunData


ChunkRow: TypeAlias = TextChunkRow | ToolCallChunkRow
StorageRecord: TypeAlias = Mapping[str, Any] | ChunkRow
"""One durable log line's value: a session event written verbatim, or a packed chunk row."""


# What classification extracts from a packable delta, so the run logic never re-reads or re-checks it:
# (kind, seq, time, turn, step, index, call id or None, name or _ABSENT, member payload).
_Delta: TypeAlias = tuple[str, int, int, float, float, float, str | None, str | _Absent, str]


def _is_number(value: object) -> TypeGuard[float]:
    """A JSON number the encoder may copy into a row: ``int`` or finite ``float``, never ``bool``.

    The spec only asks for a "number". Non-finite floats are refused as a port decision: JSON would write
    them as ``null``, which the decoder rejects, so packing one would turn a readable log unreadable.
    """
    if type(value) is int:
        return True
    return type(value) is float and isinstance(value, float) and math.isfinite(value)


def _same_number(a: float, b: float) -> bool:
    """Whether two whitelisted numbers serialise identically, so one row value can stand for both.

    Python, unlike JS, writes ``1`` and ``1.0`` (and ``0.0``/``-0.0``) differently although they compare
    equal; a run mixing them would decode with the first member's spelling, so it must not continue.
    """
    if a is b:
        return True
    if type(a) is not type(b) or a != b:
        return False
    return type(a) is int or math.copysign(1.0, a) == math.copysign(1.0, b)


def _classify(event: object) -> _Delta | None:
    """Return the packable facts of a whitelisted delta event, or ``None`` to store it verbatim.

    Inputs come from live appends and from parsed files alike, so every check is structural. Integer
    seq/time are required because gaps are stored as differences: only integer arithmetic round-trips.
    Exact key counts (rather than "has these keys") are what make any extra field disqualify.
    """
    if not isinstance(event, dict) or len(event) != 4 or event.get("type") != _CHUNK_EVENT:
        return None
    seq = event.get("seq")
    time = event.get("time")
    data = event.get("data")
    # With exactly four keys, finding seq, time and data (type was matched above) proves the key set.
    if type(seq) is not int or seq < 0 or seq > _MAX_SAFE:
        return None
    if type(time) is not int or time < -_MAX_SAFE or time > _MAX_SAFE:
        return None
    if not isinstance(data, dict) or len(data) != 3:
        return None
    turn = data.get("turn")
    step = data.get("step")
    chunk = data.get("chunk")
    if not (_is_number(turn) and _is_number(step) and isinstance(chunk, dict)):
        return None
    index = chunk.get("index")
    if not _is_number(index):
        return None
    kind = chunk.get("type")
    size = len(chunk)
    if kind == _TEXT_DELTA or kind == _REASONING_DELTA:
        text = chunk.get("text")
        if size != 3 or type(text) is not str:
            return None
        kind = _TEXT_DELTA if kind == _TEXT_DELTA else _REASONING_DELTA  # the interned constant
        return (kind, seq, time, turn, step, index, None, _ABSENT, text)
    if kind == _TOOL_CALL_DELTA:
        call_id = chunk.get("id")
        args = chunk.get("argumentsDelta")
        if type(call_id) is not str or type(args) is not str:
            return None
        name: str | _Absent = _ABSENT
        if size == 5:
            given = chunk.get("name")
            if type(given) is not str:
                return None
            name = given
        elif size != 4:
            return None
        return (_TOOL_CALL_DELTA, seq, time, turn, step, index, call_id, name, args)
    # block-start/end, usage, finish and any future chunk variant stay one event per line.
    return None


def _emit(
    out: list[StorageRecord],
    run: list[Mapping[str, Any]],
    first: _Delta,
    dt: list[int],
    payloads: list[str],
) -> None:
    """Append a finished run to ``out``: one row when it reaches ``MIN_RUN``, else its events verbatim."""
    if len(run) < MIN_RUN:
        out.extend(run)
        return
    kind, seq0, time0, turn, step, index, call_id, name, _ = first
    if kind == _TOOL_CALL_DELTA:
        assert call_id is not None
        tool_data: ToolCallRunData
        if isinstance(name, str):
            tool_data = {
                "turn": turn,
                "step": step,
                "index": index,
                "dt": dt,
                "id": call_id,
                "name": name,
                "args": payloads,
            }
        else:
            tool_data = {
                "turn": turn,
                "step": step,
                "index": index,
                "dt": dt,
                "id": call_id,
                "args": payloads,
            }
        out.append({"type": _TOOL_CALL_ROW, "seq0": seq0, "time0": time0, "data": tool_data})
        return
    text_data: TextRunData = {"turn": turn, "step": step, "index": index, "dt": dt, "texts": payloads}
    tag: Literal["text-chunks", "reasoning-chunks"] = _TEXT_ROW if kind == _TEXT_DELTA else _REASONING_ROW
    out.append({"type": tag, "seq0": seq0, "time0": time0, "data": text_data})


def _py_pack_chunk_runs(events: Iterable[Mapping[str, Any]]) -> list[StorageRecord]:
    """The pure-Python :func:`pack_chunk_runs` (the accelerator's twin: same rows, same objects, same errors)."""
    out: list[StorageRecord] = []
    run: list[Mapping[str, Any]] = []
    first: _Delta | None = None  # facts of the current run's first member (its row values)
    dt: list[int] = []
    payloads: list[str] = []
    last_seq = 0
    last_time = 0
    for event in events:
        delta = _classify(event)
        if delta is None:
            if first is not None:
                _emit(out, run, first, dt, payloads)
                first = None
            out.append(event)
            continue
        kind, seq, time, turn, step, index, call_id, name, payload = delta
        if first is not None:
            gap = time - last_time
            if (
                kind == first[0]
                and seq == last_seq + 1
                and -_MAX_SAFE <= gap <= _MAX_SAFE
                and (turn is first[3] or _same_number(turn, first[3]))
                and (step is first[4] or _same_number(step, first[4]))
                and (index is first[5] or _same_number(index, first[5]))
                and call_id == first[6]
                and name == first[7]  # _ABSENT equals only itself: presence and value both match
            ):
                run.append(event)
                dt.append(gap)
                payloads.append(payload)
                last_seq = seq
                last_time = time
                continue
            _emit(out, run, first, dt, payloads)
        first = delta
        run = [event]
        dt = []
        payloads = [payload]
        last_seq = seq
        last_time = time
    if first is not None:
        _emit(out, run, first, dt, payloads)
    return out


_c_pack: Any = _accel.pack_chunk_runs


def pack_chunk_runs(events: Iterable[Mapping[str, Any]]) -> list[StorageRecord]:
    """Encode one batch for storage, packing every run of ``MIN_RUN``+ consecutive same-block deltas.

    A delta extends the current run iff it has the same kind, the next seq, a time gap that is itself a
    safe integer (so a JS reader reconstructs the exact timestamp), and the same turn, step, block index
    and — for tool calls — the same id and the same presence and value of ``name``. Everything else is
    returned verbatim (the very same objects), in order. Stateless, so batches split at flush boundaries
    simply pack per batch. Every durable flush runs this, so the C accelerator does it when present; a
    property holds it to :func:`_py_pack_chunk_runs`.
    """
    if _c_pack is not None:
        return _c_pack(events)  # type: ignore[no-any-return]
    return _py_pack_chunk_runs(events)


def _malformed(tag: str, why: str) -> ChunkRowError:
    """Build the uniform diagnostic; callers ``raise`` it so type checkers see the control flow."""
    return ChunkRowError(f"malformed {tag} storage row: {why}")


def _is_safe_int(value: object) -> bool:
    """``Number.isSafeInteger`` for Python: an exact ``int`` (``bool`` and integral floats excluded)."""
    return type(value) is int and -_MAX_SAFE <= value <= _MAX_SAFE


def _row_facts(value: object) -> _MembersFacts | None:
    """Checks 1-6 of §15.3 (envelope, data keys, field types); ``None`` when ``value`` is not row-tagged."""
    if not isinstance(value, dict):
        return None
    tag = value.get("type")
    if tag == _TOOL_CALL_ROW:
        tool = True
    elif tag == _TEXT_ROW or tag == _REASONING_ROW:
        tool = False
    else:
        return None
    tag = str(tag)  # normalise a str subclass for the message

    # 1-4: envelope.
    if len(value) != 4 or "seq0" not in value or "time0" not in value or "data" not in value:
        raise _malformed(tag, _ENVELOPE_WHY)
    seq0 = value["seq0"]
    if type(seq0) is not int or seq0 < 0 or seq0 > _MAX_SAFE:
        raise _malformed(tag, "seq0 must be a non-negative safe integer")
    time0 = value["time0"]
    if type(time0) is not int or time0 < -_MAX_SAFE or time0 > _MAX_SAFE:
        raise _malformed(tag, "time0 must be a safe integer")
    data = value["data"]
    if not isinstance(data, dict):
        raise _malformed(tag, "data must be an object")

    # 5: exact data keys (and, for tool calls, the call identity's types).
    has_common = "turn" in data and "step" in data and "index" in data and "dt" in data
    name: object = _ABSENT
    if tool:
        size = len(data)
        has_tool = has_common and "id" in data and "args" in data
        with_name = size == 7 and has_tool and "name" in data
        if not with_name and not (size == 6 and has_tool):
            raise _malformed(tag, _TOOL_DATA_WHY)
        call_id = data["id"]
        if with_name:
            name = data["name"]
        if not isinstance(call_id, str) or not (name is _ABSENT or isinstance(name, str)):
            raise _malformed(tag, "id (and name when present) must be strings")
        payload_key = "args"
    else:
        if len(data) != 5 or not has_common or "texts" not in data:
            raise _malformed(tag, _TEXT_DATA_WHY)
        call_id = None
        payload_key = "texts"

    # 6: field types.
    turn = data["turn"]
    step = data["step"]
    index = data["index"]
    numbers = (int, float)  # exact types: bool is not a JSON number here
    if type(turn) not in numbers or type(step) not in numbers or type(index) not in numbers:
        raise _malformed(tag, "turn/step/index must be numbers")
    chunk_type = _TOOL_CALL_DELTA if tool else (_TEXT_DELTA if tag == _TEXT_ROW else _REASONING_DELTA)
    return (tool, chunk_type, seq0, time0, turn, step, index, data["dt"], data[payload_key], call_id, name)


_check_row: Any = _accel.expand_row  # (without an event class: the check-only row pass)
_check_row_dict: Any = _accel.check_row
_untrack: Any = _accel.untrack


def _check_members(tag: str, facts: _MembersFacts) -> int:
    """Checks 7-11 (arity, payload and gap types, member seq and time bounds); the last member's time."""
    tool, chunk_type, seq0, time0, turn, step, index, dt, payload, _, _ = facts
    if _check_row is not None and type(payload) is list and type(dt) is list:
        # One C pass; on anything it does not accept it declines, and the checks below say exactly what.
        checked = _check_row(tool, chunk_type, seq0, time0, turn, step, index, dt, payload, None, None, None)
        if checked is not None:
            return checked  # type: ignore[no-any-return]
    payload_key = "args" if tool else "texts"
    if not isinstance(payload, list) or not payload or not {*map(type, payload)} <= _STR_TYPES:
        raise _malformed(tag, f"{payload_key} must be a non-empty string array")
    if (
        not isinstance(dt, list)
        or not {*map(type, dt)} <= _INT_TYPES
        or (dt and (min(dt) < -_MAX_SAFE or max(dt) > _MAX_SAFE))
    ):
        raise _malformed(tag, "dt must be an array of safe integers")
    members = len(payload)
    if len(dt) != members - 1:
        raise _malformed(tag, f"dt length {len(dt)} does not match {members} members")
    if seq0 + members - 1 > _MAX_SAFE:
        raise _malformed(tag, "member seqs must stay safe integers")
    if not dt:
        first: int = time0
        return first
    times = list(accumulate(dt, initial=time0))
    if min(times) < -_MAX_SAFE or max(times) > _MAX_SAFE:
        raise _malformed(tag, "member times must stay safe integers")
    last: int = times[-1]
    return last


_STR_TYPES: Final = frozenset({str})
_INT_TYPES: Final = frozenset({int})


def decode_storage_record(value: object) -> list[Any]:
    """Decode one parsed storage line into the session event(s) it stores, in log order.

    A value that is not a dict, or whose ``type`` is not a row tag, is returned as ``[value]`` without any
    validation (ordinary events are checked later by the session's seed validation). A row-tagged value is
    validated completely — the eleven checks of §15.3, in order, first failure wins — and raises
    :class:`ChunkRowError` rather than being passed through, since a corrupt row would otherwise drop a
    whole run silently. Expanded events are fresh plain dicts, or, with the C accelerator, already
    frozen :class:`~agentlog.events.Event` objects (equal to the plain form) that a restore adopts as is.
    """
    facts = _row_facts(value)
    if facts is None:
        return [value]
    # Checks 7-11 and the expansion in one C pass; on anything it does not accept it declines, and the
    # Python checks below report exactly what.
    expanded = _frozen_members(facts)
    if expanded is not None:
        return expanded
    _check_members(str(value["type"]), facts)  # type: ignore[index]
    return _member_dicts(facts)


def decode_storage_run(value: object) -> ChunkRun | None:
    """Validate one parsed storage line like :func:`decode_storage_record`, keeping a row packed.

    Returns ``None`` when ``value`` is not row-tagged (the caller keeps it as an ordinary event), else a
    :class:`ChunkRun` standing for the row's members. Every check of §15.3 runs here, with the same
    errors in the same order, so a row that would fail to decode fails the load, never a later read.
    """
    if _check_row_dict is not None:
        checked = _check_row_dict(value, _ABSENT)  # every check in one C pass; None: let Python decide
        if checked is not None:
            return _untrack(ChunkRun(*checked))  # type: ignore[no-any-return]
    facts = _row_facts(value)
    if facts is None:
        return None
    last_time = _check_members(str(value["type"]), facts)  # type: ignore[index]
    return ChunkRun(facts, last_time)


# --- raw chunk lines kept compact -----------------------------------------------------------------------
#
# A log written without packing (``packChunks`` false, or runs shorter than MIN_RUN) stores every delta as
# its own ``assistant/chunk`` line. A cold compact load turns each maximal stretch of such lines into a
# ChunkRun when, and only when, the run's members would be exactly the events the lines parse into: the
# same keys in the same order, integer fields (so one shared value prints like each line's own), plainly
# valid turn/step (so the seed rules hold for every member), contiguous seqs and safe time gaps. Such a
# stretch is exactly what ``pack_chunk_runs`` would pack, and a packed row decodes to the same events, so
# compact and eager loads stay indistinguishable. Anything else stays an ordinary event (never guessed).

MIN_RAW_RUN: Final = 2
"""Fewest raw chunk lines a stretch needs to become a ChunkRun at a compact load.

Measured on unpacked logs whose every stretch has the same length (zstd, ~150k events): stretches of
two kept 35% less memory (126 vs 194 MB) for a 12% longer load; lone chunks kept only 18% less for a
27% longer load, since a run's own objects rival one event's and each run splits the restore into one
more segment. Real streams are mostly long stretches (the benchmark's are 20), where a run is a clear
win either way. Only a load-time policy: it never changes what is stored or what any read sees.
"""

_RAW_ENVELOPE: Final = ("type", "seq", "time", "data")
_RAW_DATA: Final = ("turn", "step", "chunk")
_RAW_TEXT: Final = ("type", "index", "text")
_RAW_TOOL: Final = ("type", "index", "id", "argumentsDelta")
_RAW_NAMED_TOOL: Final = ("type", "index", "id", "name", "argumentsDelta")

_RawMember: TypeAlias = tuple[str, int, int, int, int, int, str | None, Any, str]
"""A raw chunk line of exactly a run member's shape: (chunk type, seq, time, turn, step, index, id, name, payload)."""


def _raw_member(value: object) -> _RawMember | None:
    """The member facts of a parsed ``assistant/chunk`` line that a ChunkRun reproduces exactly, else ``None``."""
    if value.__class__ is not dict:
        return None
    assert isinstance(value, dict)
    tag = value.get("type")
    if tag.__class__ is not str or tag != _CHUNK_EVENT or len(value) != 4 or tuple(value) != _RAW_ENVELOPE:
        return None
    seq = value["seq"]
    time = value["time"]
    data = value["data"]
    if seq.__class__ is not int or not 0 <= seq <= _MAX_SAFE or time.__class__ is not int:
        return None
    if not -_MAX_SAFE <= time <= _MAX_SAFE or data.__class__ is not dict or tuple(data) != _RAW_DATA:
        return None
    turn = data["turn"]
    step = data["step"]
    chunk = data["chunk"]
    if turn.__class__ is not int or not 0 < turn <= _MAX_SAFE or step.__class__ is not int:
        return None
    if not 0 <= step <= _MAX_SAFE or chunk.__class__ is not dict:
        return None
    kind = chunk.get("type")
    index = chunk.get("index")
    if kind.__class__ is not str or index.__class__ is not int:
        return None
    keys = tuple(chunk)
    if kind == _TEXT_DELTA or kind == _REASONING_DELTA:
        text = chunk["text"] if keys == _RAW_TEXT else None
        if text.__class__ is not str:
            return None
        kind = _TEXT_DELTA if kind == _TEXT_DELTA else _REASONING_DELTA
        return (kind, seq, time, turn, step, index, None, _ABSENT, text)
    if kind != _TOOL_CALL_DELTA:
        return None
    name: Any = _ABSENT
    if keys == _RAW_NAMED_TOOL:
        name = chunk["name"]
        if name.__class__ is not str:
            return None
    elif keys != _RAW_TOOL:
        return None
    call_id = chunk["id"]
    args = chunk["argumentsDelta"]
    if call_id.__class__ is not str or args.__class__ is not str:
        return None
    return (_TOOL_CALL_DELTA, seq, time, turn, step, index, call_id, name, args)


def _py_compact_raw_chunks(items: list[Any], start: int, min_run: int) -> list[Any] | None:
    """The pure-Python :func:`compact_raw_chunks` (the accelerator's twin, same result)."""
    out: list[Any] = []
    changed = False
    k = start
    end = len(items)
    while k < end:
        first = _raw_member(items[k])
        if first is None:
            out.append(items[k])
            k += 1
            continue
        kind, seq0, time0, turn, step, index, call_id, name, payload = first
        dt: list[int] = []
        payloads = [payload]
        last_seq = seq0
        last_time = time0
        j = k + 1
        while j < end:
            member = _raw_member(items[j])
            if (
                member is None
                or member[0] != kind
                or member[1] != last_seq + 1
                or member[3] != turn
                or member[4] != step
                or member[5] != index
                or member[6] != call_id
                or member[7] != name  # _ABSENT equals only itself: presence and value both match
            ):
                break
            gap = member[2] - last_time
            if not -_MAX_SAFE <= gap <= _MAX_SAFE:
                break
            dt.append(gap)
            payloads.append(member[8])
            last_seq = member[1]
            last_time = member[2]
            j += 1
        if j - k >= min_run:
            facts: _MembersFacts = (
                kind == _TOOL_CALL_DELTA, kind, seq0, time0, turn, step, index, dt, payloads, call_id, name,
            )  # fmt: skip
            out.append(ChunkRun(facts, last_time))
            changed = True
        else:
            out.extend(items[k:j])
        k = j
    return out if changed else None


_group_raw: Any = _accel.group_raw_chunks


def compact_raw_chunks(items: list[Any], start: int = 0, min_run: int = MIN_RAW_RUN) -> list[Any] | None:
    """``items[start:]`` (parsed storage values, seq-checked) with every maximal stretch of at least
    ``min_run`` raw ``assistant/chunk`` lines that a :class:`ChunkRun` reproduces exactly replaced by that
    run; ``None`` when there is none. What stays is the very same objects, in order.

    The lines were read by a compact load, which owes every reader the events an eager load builds: a
    run's members must equal the lines' events (keys, key order, values, ``json_bytes``) and pass the
    seed rules the eager load applies to them. Only lines of exactly the members' shape qualify (see
    :func:`_raw_member`), so nothing a line holds is dropped, reordered or judged differently.
    """
    if min_run < 1:
        raise ValueError("min_run must be at least 1")
    if _group_raw is not None:
        grouped = _group_raw(items, start, min_run, _ABSENT, ChunkRun)
        return grouped  # type: ignore[no-any-return]
    return _py_compact_raw_chunks(items, start, min_run)
