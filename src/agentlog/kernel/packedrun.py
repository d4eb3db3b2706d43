"""Packed chunk runs kept compact in a restored log: :class:`ChunkRun` and its helpers.

A cold load validates every packed chunk row (``kernel.chunkrows`` for the JSONL codec, the SQLite codec
for its rows) but keeps it packed: the restored session's log holds the run in its members' slots and
builds the members' frozen events only when something reads them. A JSONL log's raw chunk lines (an
unpacked log, or runs too short to pack) become runs too when a stretch has exactly the members' shape
(``kernel.chunkrows.compact_raw_chunks``). This module owns that compact form and its materialisation, so
both codecs (and the kernel's views) share one definition of what a run's members are.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Final, TypeAlias

from .. import _accel
from .events import ASSISTANT_CHUNK
from .events import Event as _Event
from .jsonvalue import MAX_SAFE_INTEGER

__all__ = [
    "ChunkRun",
    "compact_chunk_runs",
    "compact_runs_requested",
    "count_items",
    "expand_items",
    "has_runs",
]

_expand_row: Any = _accel.expand_row
_untrack: Any = _accel.untrack
_CHUNK_EVENT: Final = ASSISTANT_CHUNK
_MAX_SAFE: Final = MAX_SAFE_INTEGER


class _Absent:
    """Marker for a tool-call delta without ``name``: absent and ``None`` must stay distinguishable."""

    __slots__ = ()


_ABSENT: Final = _Absent()

_MembersFacts: TypeAlias = tuple[bool, str, int, int, Any, Any, Any, list[Any], list[Any], Any, Any]
"""A row that passed checks 1-6: (tool, chunk type, seq0, time0, turn, step, index, dt, payload, id, name)."""


def _member_dicts(facts: _MembersFacts) -> list[dict[str, Any]]:
    """The member events of a validated row as fresh plain dicts (the pure-Python expansion)."""
    tool, chunk_type, seq0, time0, turn, step, index, dt, payload, call_id, name = facts
    events: list[dict[str, Any]] = []
    time = time0
    for k, member in enumerate(payload):
        if k:
            time += dt[k - 1]
        chunk: dict[str, Any]
        if not tool:
            chunk = {"type": chunk_type, "index": index, "text": member}
        elif name is _ABSENT:
            chunk = {"type": chunk_type, "index": index, "id": call_id, "argumentsDelta": member}
        else:
            chunk = {
                "type": chunk_type,
                "index": index,
                "id": call_id,
                "name": name,
                "argumentsDelta": member,
            }
        events.append(
            {
                "type": _CHUNK_EVENT,
                "seq": seq0 + k,
                "time": time,
                "data": {"turn": turn, "step": step, "chunk": chunk},
            }
        )
    return events


def _frozen_members(facts: _MembersFacts) -> list[Any] | None:
    """The members as frozen events built in C (``None`` without the accelerator or when it declines)."""
    if _expand_row is None or type(facts[8]) is not list or type(facts[7]) is not list:
        return None
    tool, chunk_type, seq0, time0, turn, step, index, dt, payload, call_id, name = facts
    expanded = _expand_row(
        tool, chunk_type, seq0, time0, turn, step, index, dt, payload,
        call_id, None if name is _ABSENT else name, _Event,
    )  # fmt: skip
    return expanded  # type: ignore[no-any-return]


# Re-entrant: a finaliser or GC callback that reads a lazy log while this thread builds a run must not
# deadlock on it (building is idempotent and cached, so re-entry only returns the same events).
_MATERIALISING = threading.RLock()


class ChunkRun:
    """A validated packed chunk run kept compact in a restored log: it stands for its ``n`` member events.

    A cold load keeps the row's own payload lists (a few bytes per member instead of three frozen dicts)
    and builds the members only when something reads one: :meth:`events` returns exactly the events
    :func:`decode_storage_record` and the session's restore would have produced (equal, same key order,
    same ``json_bytes``), built once and then shared by every log that holds the run. The members are
    ``assistant/chunk`` events without surface metadata, so nothing derived from the surface, the
    messages or the request header ever needs them.
    """

    __slots__ = ("_events", "_facts", "last_time", "n", "seq0")

    def __init__(self, facts: _MembersFacts, last_time: int) -> None:
        self._facts = facts
        self.seq0: int = facts[2]
        self.n: int = len(facts[8])
        self.last_time = last_time
        self._events: list[Any] | None = None

    @classmethod
    def from_validated(
        cls,
        *,
        tool: bool,
        chunk_type: str,
        seq0: int,
        time0: int,
        turn: Any,
        step: Any,
        index: Any,
        dt: list[int],
        payload: list[str],
        call_id: str | None,
        name: str | None,
        last_time: int,
    ) -> ChunkRun:
        """A run from another codec's already validated row (SQLite's packed rows); ``name`` ``None``: absent."""
        facts: _MembersFacts = (
            tool, chunk_type, seq0, time0, turn, step, index, dt, payload, call_id, _ABSENT if name is None else name,
        )  # fmt: skip
        run = cls(facts, last_time)
        if _untrack is not None:
            # As the JSONL codec's C check leaves its runs: the run owns the row's fresh lists and nothing
            # in them leads back to it, so none of it can be in a cycle. Tracked, a compact log's four
            # containers per run are all traversed by the first collection after the load.
            _untrack(dt)
            _untrack(payload)
            _untrack(facts)
            _untrack(run)
        return run

    @property
    def last_seq(self) -> int:
        return self.seq0 + self.n - 1

    @property
    def plainly_valid(self) -> bool:
        """Whether the members plainly pass the ``assistant/chunk`` data rule (integer turn >= 1, step >= 0;
        the chunk's type is a string by construction): the rule's common case, without building anything."""
        turn = self._facts[4]
        step = self._facts[5]
        return turn.__class__ is int and 0 < turn <= _MAX_SAFE and step.__class__ is int and 0 <= step <= _MAX_SAFE

    @property
    def rule_data(self) -> dict[str, Any]:
        """What the ``assistant/chunk`` data rule reads of every member's ``data`` (all members share it:
        turn, step and a chunk with its type), for the rule to judge and word its refusal exactly."""
        facts = self._facts
        return {"turn": facts[4], "step": facts[5], "chunk": {"type": facts[1]}}

    @property
    def first_data(self) -> dict[str, Any]:
        """The first member's ``data`` as a plain dict."""
        tool, chunk_type, seq0, time0, turn, step, index, dt, payload, call_id, name = self._facts
        first = (tool, chunk_type, seq0, time0, turn, step, index, dt, payload[:1], call_id, name)
        data: dict[str, Any] = _member_dicts(first)[0]["data"]
        return data

    def events(self) -> list[Any]:
        """The member events, frozen (built on the first call, the same objects afterwards)."""
        events = self._events
        if events is None:
            with _MATERIALISING:
                events = self._events
                if events is None:
                    events = self._events = self._build()
        return events

    def transient_events(self) -> list[Any]:
        """The member events, frozen, without keeping them: the built events if a read already cached
        them, else a fresh build the caller alone holds. A full pass over a big log (an export, a
        search reindex) then needs memory for one run at a time instead of every member at once."""
        events = self._events
        return events if events is not None else self._build()

    def _build(self) -> list[Any]:
        """The member events, frozen: built in C, or (without the accelerator, or when it declines)
        from their plain form, frozen as a restore freezes a parsed event."""
        built = _frozen_members(self._facts)
        if built is None:
            from .seeds import event_from_restored

            built = [event_from_restored(member) for member in _member_dicts(self._facts)]
        return built

    def to_state(self) -> list[Any]:
        """The run as plain JSON values, which :meth:`from_state` turns back into an equal run: a reader
        that keeps a restored log serialized (the inspector's paged log) stores a run in a few bytes per
        member, never its member events."""
        tool, chunk_type, seq0, time0, turn, step, index, dt, payload, call_id, name = self._facts
        absent = name is _ABSENT
        shown = None if absent else name
        return [tool, chunk_type, seq0, time0, turn, step, index, dt, payload, call_id, absent, shown, self.last_time]

    @classmethod
    def from_state(cls, state: list[Any]) -> ChunkRun:
        """The run :meth:`to_state` described (its members equal, same key order, same JSON bytes)."""
        tool, chunk_type, seq0, time0, turn, step, index, dt, payload, call_id, absent, name, last_time = state
        facts: _MembersFacts = (
            tool, chunk_type, seq0, time0, turn, step, index, dt, payload, call_id, _ABSENT if absent else name,
        )  # fmt: skip
        return cls(facts, last_time)

    def plain_events(self) -> list[dict[str, Any]]:
        """The member events as fresh plain dicts (what a non-compact read returns without the accelerator)."""
        return _member_dicts(self._facts)

    def __repr__(self) -> str:
        return f"<ChunkRun {self._facts[1]} seq {self.seq0}..{self.last_seq}>"


def expand_items(items: Iterable[Any]) -> list[Any]:
    """A compact event list (events and :class:`ChunkRun` items) as one event per item, in order."""
    out: list[Any] = []
    for item in items:
        if item.__class__ is ChunkRun:
            out.extend(item.events())
        else:
            out.append(item)
    return out


def count_items(items: list[Any]) -> int:
    """How many events a compact event list stands for."""
    total = len(items)
    if ChunkRun in {*map(type, items)}:
        total += sum(item.n - 1 for item in items if item.__class__ is ChunkRun)
    return total


def has_runs(items: list[Any]) -> bool:
    """Whether a list holds any :class:`ChunkRun` (one C-speed pass over the item types)."""
    return ChunkRun in {*map(type, items)}


_COMPACT: ContextVar[bool] = ContextVar("agentlog_compact_chunk_runs", default=False)


@contextmanager
def compact_chunk_runs() -> Iterator[None]:
    """Within this block (this thread/context), the file and SQLite backends' ``load_stored`` keep
    packed runs as :class:`ChunkRun` items. Only the coordinator's cold load asks for it: it validates
    and restores compact lists; every other reader keeps getting one event per item."""
    token = _COMPACT.set(True)
    try:
        yield
    finally:
        _COMPACT.reset(token)


def compact_runs_requested() -> bool:
    """Whether the caller asked for compact runs (see :func:`compact_chunk_runs`)."""
    return _COMPACT.get()
