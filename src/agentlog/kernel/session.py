"""The session: an append-only, validated event log and what is derived from it.

Appending is the only way to change a session. ``append`` snapshots the payload through the JSON gate,
checks the surface rules, commits, then notifies observers; a refused append changes nothing. Reads
(``events``, ``derive_messages``, ``request_header``) are incremental: each call costs O(new events),
and returns an immutable snapshot that later appends do not change.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time as _time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, Never, NoReturn, Protocol, overload

from .. import _accel
from ..errors import (
    ArgumentTypeError,
    EventDataError,
    InvalidEventError,
    InvalidSeedError,
    LegacyFormatError,
    NonJsonValueError,
    ReentrantAppendError,
    SessionDisposedError,
    SessionHeaderError,
    SessionLabelError,
    SurfaceError,
    UnknownEventTypeError,
)
from ..errors import SeqOutOfRangeError as SeqOutOfRangeError
from . import labels as _labels
from .events import (
    APPEND_CHECK_KINDS,
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    REQUEST_CONTEXT,
    REQUEST_HEADER,
    REQUEST_HEADER_DELTA,
    SESSION_END_SEED,
    SESSION_FORMAT_VERSION,
    TOOL_RESULT,
    USER_MESSAGE,
    AssistantChunkData,
    AssistantMessageData,
    Event,
    EventTypes,
    Message,
    RequestContextData,
    RequestHeaderData,
    StepData,
    SurfaceIntent,
    TodoWriteData,
    ToolCallData,
    ToolResultData,
    TurnEndData,
    TurnStartData,
    event_types,
    new_event,
)
from .jsonvalue import (
    _GIVE_UP,
    EMPTY_FROZEN_DICT,
    MAX_SAFE_INTEGER,
    FrozenDict,
    JsonValue,
    seal_as,
    snapshot_container,
    snapshot_json,
)
from .packedrun import ChunkRun, has_runs
from .prefixview import PrefixView
from .request_header import canonical_header, fold_request_header
from .seeds import (
    CORE_DATA_RULES,
    MESSAGE_EVENT_TYPES,
    check_append_data,
    check_message_event_shape,
    check_request_header_shape,
    check_seed_data,
    check_seed_envelope,
    event_from_restored,
    legacy_request_header_problem,
    restore_header,
    snapshot_header,
)
from .surface import Plan, SurfaceManager

logger = logging.getLogger("agentlog")

Clock = Callable[[], int]


def _py_wall_clock_ms() -> int:
    """Integer Unix epoch milliseconds (the original's ``Date.now()``)."""
    return _time.time_ns() // 1_000_000


wall_clock_ms: Clock = _accel.wall_clock_ms or _py_wall_clock_ms
"""Integer Unix epoch milliseconds (the original's ``Date.now()``); the session's default clock."""


# --- compact restored logs -------------------------------------------------------------------------


class LazyLog(list):  # type: ignore[type-arg]
    """A restored session's log that may still hold packed chunk runs (:class:`ChunkRun`) in place of events.

    A run occupies each of its members' slots (the same object ``n`` times; a slot's position is its
    event's seq), so ``len`` and positions are those of the event log. Reading a slot through the
    kernel's views builds the run's members once and writes them into their slots, so every later read
    (and every other log sharing the run) sees the very same frozen events. The class adds no behaviour
    of its own: it only tells the views that a slot may need materialising, so a plain log pays nothing.
    """

    __slots__ = ()


def _materialise(items: list[Any], index: int) -> Any:
    """The event at ``index`` of a lazy log whose slot holds a run; the run's slots now hold its events."""
    run: ChunkRun = items[index]
    events = run.events()
    start = run.seq0
    stop = min(start + run.n, len(items))
    if items[start] is run and items[stop - 1] is run:
        items[start:stop] = events[: stop - start]
    return events[index - start]


def _materialise_range(items: list[Any], start: int, stop: int) -> None:
    """Materialise every run slot of ``items[start:stop]`` (a lazy log)."""
    index = start
    while index < stop:
        item = items[index]
        if item.__class__ is ChunkRun:
            _materialise(items, index)
            index = min(stop, item.seq0 + item.n)
        else:
            index += 1


def _iter_lazy(items: list[Any], n: int) -> Iterator[Any]:
    """The events of a lazy log's first ``n`` slots, in order, leaving unread runs packed.

    A run's members are built for the pass (or taken from its cache if a read built them) and not
    written back, so one pass over a big restored log (an export, a reindex, ``show --log``) holds one
    run's members at a time rather than turning the whole log eager. Random access still caches.
    """
    index = 0
    while index < n:
        item = items[index]
        if item.__class__ is ChunkRun:
            start = index - item.seq0
            stop = min(item.n, start + n - index)
            yield from item.transient_events()[start:stop]
            index += stop - start
        else:
            yield item
            index += 1


def _type_at(items: list[Any], index: int) -> Any:
    """The type of the event at ``index`` without materialising a run (its members are chunks)."""
    item = items[index]
    return ASSISTANT_CHUNK if item.__class__ is ChunkRun else item["type"]


# --- immutable snapshot sequences -----------------------------------------------------------------


class _Snapshot(PrefixView[Any]):
    """A :class:`PrefixView` of a log or message list; on a restored :class:`LazyLog` it builds packed runs
    as it reads them (a plain list reads exactly as the base view does)."""

    __slots__ = ()

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        items = self._items
        if isinstance(index, slice):
            start, stop, step = index.indices(self._n)
            if step == 1:  # the common forward slice costs the slice, not a copy of the whole prefix
                if items.__class__ is LazyLog:
                    _materialise_range(items, start, stop)
                return items[start:stop]
            if items.__class__ is LazyLog:
                _materialise_range(items, 0, self._n)
            return items[: self._n][index]
        n = self._n
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"{type(self).__name__} index out of range")
        item = items[index]
        if item.__class__ is ChunkRun:
            return _materialise(items, index)
        return item

    def __iter__(self) -> Iterator[Any]:
        if self._items.__class__ is LazyLog:
            return _iter_lazy(self._items, self._n)
        return itertools.islice(self._items, self._n)

    def __reversed__(self) -> Iterator[Any]:
        items = self._items
        if items.__class__ is LazyLog:
            return (self[i] for i in range(self._n - 1, -1, -1))
        return (items[i] for i in range(self._n - 1, -1, -1))

    def to_list(self) -> list[Any]:
        """A plain list of the (frozen) items, e.g. for ``orjson.dumps``."""
        if self._items.__class__ is LazyLog:
            _materialise_range(self._items, 0, self._n)
        return self._items[: self._n]

    def backing(self) -> list[Any]:
        """The backing list itself, every slot of this view an event (packed runs built), uncopied.

        For hot read loops that index the log directly (the token meter): only the first ``len(self)``
        slots belong to this view, and the list must never be changed. Reading ``_items`` instead
        would hand such a loop the packed runs of a cold-loaded log.
        """
        if self._items.__class__ is LazyLog:
            _materialise_range(self._items, 0, self._n)
        return self._items


class EventsView(_Snapshot):
    """The log as it was when read: frozen events, never grows."""

    __slots__ = ()

    def prefix(self, n: int) -> EventsView:
        """The view of the first ``n`` events (O(1); ``n`` is clamped to this view's length)."""
        return EventsView(self._items, max(0, min(n, self._n)))

    def outside_runs(self, start: int = 0) -> Iterator[Any]:
        """The events in seq order from ``start`` on, less the members of a restored log's packed chunk
        runs (stepped over unbuilt: they are ``assistant/chunk`` events). A pass that skips chunks anyway
        (an index, a surface fold, the continuation of one) then reads a big restored log without
        building its runs; on a log without packed runs (or once they are built) it is every event."""
        items = self._items
        n = self._n
        start = max(0, start)
        if items.__class__ is not LazyLog:
            yield from itertools.islice(items, start, n)
            return
        index = start
        while index < n:
            item = items[index]
            if item.__class__ is ChunkRun:
                index = item.seq0 + item.n
                continue
            yield item
            index += 1

    def restore_seed(self) -> list[Any]:
        """These events as a seed :meth:`Session.from_restore` takes, packed chunk runs kept packed.

        A restored log's packed run stands once, in its first member's place (as in a compact read); a
        run the view ends inside gives the members it holds; every other event is itself, frozen, so
        restoring it again checks it without copying it. A reader that holds a restored session and
        learns of events stored after it (the inspector following a running session) restores the
        seed plus those events instead of reading the log again.
        """
        items, n = self._items, self._n
        if items.__class__ is not LazyLog:
            return items[:n]
        seed: list[Any] = []
        index = 0
        while index < n:
            item = items[index]
            if item.__class__ is not ChunkRun:
                seed.append(item)
                index += 1
                continue
            start = index - item.seq0
            stop = min(item.n, start + n - index)
            if start == 0 and stop == item.n:
                seed.append(item)
            else:
                seed.extend(item.transient_events()[start:stop])
            index += stop - start
        return seed


class MessageList(_Snapshot):
    """Derived model-visible messages as they were when derived: frozen messages, never changes."""

    __slots__ = ()


# --- projection -----------------------------------------------------------------------------------


def derive_event_message(event: Mapping[str, Any]) -> Any:
    """The message an event contributes to the model's history, or ``None``. Identity-preserving."""
    etype = event.get("type")
    if etype == USER_MESSAGE:
        return event.get("data")
    if etype == ASSISTANT_MESSAGE:
        message = event["data"].get("message")
        if not message or not message.get("content"):
            return None
        return message
    if etype == TOOL_RESULT:
        return event["data"].get("message")
    return None


class _MessageCache:
    """Derived messages, projected once per surface node; rebuilt only after a replacement."""

    __slots__ = ("_done", "_gen", "_items", "_view")

    def __init__(self) -> None:
        self._items: list[Any] = []
        self._done = 0
        self._gen = 0
        self._view: MessageList | None = None

    def derive(self, surface: SurfaceManager, log: list[Event]) -> MessageList:
        nodes, gen = surface.folded_state()
        if gen != self._gen:
            self._items = []
            self._done = 0
            self._gen = gen
            self._view = None
        total = len(nodes)
        if self._done < total:
            items = self._items
            for seq in nodes[self._done :]:
                message = derive_event_message(log[seq])
                if message is not None:
                    items.append(message)
            self._done = total
        view = self._view
        if view is None or view._n != len(self._items):
            view = self._view = MessageList(self._items, len(self._items))
        return view


# --- the session ----------------------------------------------------------------------------------

_MISSING: Any = object()
_RESTORE_SPECIAL_TYPES = frozenset(
    {USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_RESULT, REQUEST_HEADER, REQUEST_HEADER_DELTA}
)
# The core log-only types' data rules (seeds.CORE_DATA_RULES), checked by the accelerator on restore.
_RESTORE_RULES = {etype: APPEND_CHECK_KINDS[etype] for etype in CORE_DATA_RULES}
_LEGACY_TYPES = frozenset({REQUEST_HEADER, REQUEST_HEADER_DELTA})
_CREATE_TOKEN = object()


def _refuse_reentry() -> NoReturn:
    raise ReentrantAppendError("session append cannot reenter while another append is being published")


def _check_data(type: str, data_copy: Any) -> None:
    """The shared append/load data rules (``seeds``) plus the removed request-header vocabulary."""
    if type == REQUEST_HEADER:
        problem = legacy_request_header_problem(type, data_copy, f'session event "{type}"')
        if problem is not None:
            raise LegacyFormatError(problem)
    check_append_data(type, data_copy)


def _checked_copy(type: str, data: Any, check: int) -> Any:
    """The canonical (pure-Python) gate and data rules; the accelerator's answer must equal this one."""
    try:
        data_copy = snapshot_container(data) if data.__class__ is dict else snapshot_json(data)
    except NonJsonValueError as err:
        raise InvalidEventError(f'session event "{type}" carries non-JSON-serializable data: {err}') from None
    if check:
        _check_data(type, data_copy)
    return data_copy


def _py_event4(cls: type, type: str, seq: int, time: Any, data: Any) -> Any:
    if time.__class__ is not int or not -MAX_SAFE_INTEGER <= time <= MAX_SAFE_INTEGER:
        return None
    return seal_as(cls, {"type": type, "seq": seq, "time": time, "data": data})


# The accelerator's restore (``restore_events(seed, special, Event, rules, base, message_rules, appends)``)
# restores a log segment from ``base``, tries the message rules on the message events and, with ``appends``,
# reports the plain surface appends among them; None without the accelerator.
_restore_events: Any = _accel.restore_events
_MESSAGE_RULES = {etype: APPEND_CHECK_KINDS[etype] for etype in MESSAGE_EVENT_TYPES}
_checked_snapshot: Any = _accel.checked_snapshot
_event4: Callable[..., Any] = _accel.event4 or _py_event4


class Session:
    """One agent session's log. Build with :meth:`create` or :meth:`from_restore`."""

    __slots__ = (
        "__weakref__",
        "_attachment",
        "_disposed",
        "_events_view",
        "_first_live",
        "_header",
        "_known",
        "_lock",
        "_log",
        "_messages",
        "_now",
        "_rc_cache",
        "_rc_pos",
        "_registry",
        "_rh_cache",
        "_rh_pos",
        "_surface",
        "_validators",
    )

    def __init__(self, token: object, session_id: str, now: Clock | None, registry: EventTypes | None) -> None:
        if token is not _CREATE_TOKEN:
            raise TypeError("use Session.create(...) or Session.from_restore(...)")
        if not isinstance(session_id, str) or not session_id:
            raise SessionHeaderError("session id must be a non-empty string")
        self._now: Clock = now or wall_clock_ms
        self._registry = registry or event_types
        self._validators = self._registry.validators
        self._known = self._registry.infos
        self._lock = threading.RLock()
        self._disposed = False
        self._log: list[Any] = []  # events; a LazyLog of a compact restore may hold ChunkRun slots
        self._surface = SurfaceManager(self._log, 0, plain_tail=True)
        self._header: FrozenDict = EMPTY_FROZEN_DICT
        self._first_live = 0
        self._events_view: EventsView | None = None
        self._messages = _MessageCache()
        self._rh_cache: Any = None
        self._rh_pos = 0
        self._rc_cache: Any = None
        self._rc_pos = 0
        self._attachment: StoreAttachment | None = None

    # -- construction ------------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        id: str,
        seed: Sequence[Any] | None = None,
        header: Mapping[str, Any] | None = None,
        *,
        now: Clock | None = None,
        registry: EventTypes | None = None,
    ) -> Session:
        """A detached session from borrowed data: the seed and header are validated and deep-copied."""
        session = cls(_CREATE_TOKEN, id, now, registry)
        if seed is not None:
            session._load_seed(seed, restore=False)
        candidate: Any = header
        if header is None:
            candidate = {"version": SESSION_FORMAT_VERSION, "id": id, "createdAt": session._now()}
        session._header = snapshot_header(candidate, id)
        if seed is not None:
            session._mark_end_seed()
        return session

    @classmethod
    def from_restore(
        cls,
        id: str,
        seed: Sequence[Any],
        header: Any,
        *,
        now: Clock | None = None,
        registry: EventTypes | None = None,
    ) -> Session:
        """A session from freshly parsed persistence data, which the caller hands over (not copied)."""
        session = cls(_CREATE_TOKEN, id, now, registry)
        session._header = restore_header(header, id)
        session._load_seed(seed, restore=True)
        session._mark_end_seed()
        return session

    def _load_seed(self, seed: Sequence[Any], *, restore: bool) -> None:
        if restore and type(seed) is list and has_runs(seed):
            self._load_compact(seed)
        else:
            start = 0
            if restore and _restore_events is not None and type(seed) is list:
                start = self._load_restored_fast(seed)
            for index in range(start, len(seed)):
                self._load_entry(index, seed[index], restore)
        self._first_live = len(self._log)

    def _load_compact(self, seed: list[Any]) -> None:
        """Restore a compact seed: plain entries as always, packed chunk runs kept packed in the log.

        Each :class:`ChunkRun` stands for its members at their seqs. Its row was fully validated by the
        codec that made it; what the seed validation would still check of each member is its position
        and the ``assistant/chunk`` data rule, which judges only what all members share (turn, step, the
        chunk's type), so it is checked once, on the first member, in the members' place in the order.
        Members carry no surface metadata, so they never touch the surface. The plain entries between
        runs take exactly the paths of an ordinary restore, segment by segment.
        """
        log: list[Any] = LazyLog()
        self._log = log
        self._surface = surface = SurfaceManager(log, 0, plain_tail=True)
        fast = _restore_events is not None
        special = frozenset(_RESTORE_SPECIAL_TYPES | self._validators.keys())
        seq = 0
        previous = 0
        stops = [index for index, entry in enumerate(seed) if entry.__class__ is ChunkRun]
        stops.append(len(seed))
        for stop in stops:
            if stop > previous:
                segment = seed[previous:stop]
                start = self._load_restored_fast(segment, seq, special) if fast else 0
                for index in range(start, len(segment)):
                    self._load_entry(seq + index, segment[index], True)
                seq += len(segment)
            if stop < len(seed):
                run: ChunkRun = seed[stop]
                if not run.plainly_valid:
                    check_seed_data(ASSISTANT_CHUNK, run.rule_data, seq)
                if run.seq0 != seq:
                    raise InvalidSeedError(
                        f"seed event at index {seq} has seq {run.seq0} (expected {seq}); "
                        "seed must be contiguous from 0",
                        index=seq,
                    )
                log.extend(itertools.repeat(run, run.n))
                seq += run.n
                surface.skip_log_only(seq - 1)
            previous = stop + 1

    def _load_entry(self, index: int, entry: Any, restore: bool, event: Event | None = None) -> None:
        """Validate seed entry ``index`` with every layer and commit it (``event``: already frozen form)."""
        if restore:
            check_seed_envelope(entry, index)
        else:
            try:
                entry = snapshot_json(entry)
            except NonJsonValueError as err:
                raise InvalidSeedError(
                    f"seed event at index {index} is not losslessly JSON-serializable: {err}", index=index
                ) from None
            check_seed_envelope(entry, index)
        etype = entry["type"]
        problem = legacy_request_header_problem(etype, entry["data"], f"seed event at index {index}")
        if problem is not None:
            raise InvalidSeedError(problem, index=index)
        if not restore and etype not in self._known and entry.get("ignorable") is not True:
            # Restored logs were checked by their reader (persistence refuses unknown types itself).
            raise InvalidSeedError(
                f'seed event at index {index} has event type "{etype}", which is not registered and not '
                f'marked ignorable; register it first with agentlog.event_types.register("{etype}")',
                index=index,
            )
        if entry["seq"] != index:
            raise InvalidSeedError(
                f"seed event at index {index} has seq {entry['seq']} (expected {index}); "
                "seed must be contiguous from 0",
                index=index,
            )
        if event is None:
            event = event_from_restored(entry) if restore else new_event(entry)
        self._commit_seed_event(index, etype, event)

    def _commit_seed_event(self, index: int, etype: str, event: Event) -> None:
        """The last two seed layers, shared by every path: plugin validators, then the surface."""
        if etype in self._validators:
            try:
                self._registry.validate(etype, event["data"])
            except EventDataError as err:
                raise InvalidSeedError(f"invalid seed event at index {index}: {err}", index=index) from None
        surface = self._surface
        try:
            # A plain surface append (a restored message's usual form) is planned without the general
            # planner; anything else, or anything it doubts, takes validate_next (same checks, same errors).
            plan = surface.plain_append_plan(event) or surface.validate_next(event)
        except SurfaceError as err:
            raise InvalidSeedError(f"invalid seed event at index {index}: {err}", index=index) from None
        except Exception as err:  # a plugin validator failing without our error type
            text = str(err) or "invalid surface metadata"
            raise InvalidSeedError(f"invalid seed event at index {index}: {text}", index=index) from err
        self._log.append(event)
        surface.commit(event, plan)

    def _load_special(self, index: int, entry: Any, event: Event, verified: bool = False) -> None:
        """A restored event the accelerator already envelope-checked: only its type's own rules remain.

        ``verified``: the accelerator found the message rules plainly satisfied (it accepts only what the
        Python check accepts), so only the later layers remain."""
        etype = event["type"]
        if verified and etype in MESSAGE_EVENT_TYPES:
            pass
        elif etype == REQUEST_HEADER:
            check_request_header_shape(entry["data"], index)
            problem = legacy_request_header_problem(etype, entry["data"], f"seed event at index {index}")
            if problem is not None:
                raise InvalidSeedError(problem, index=index)
        elif etype in MESSAGE_EVENT_TYPES:
            check_message_event_shape(entry, f"seed {etype} at index {index}", InvalidSeedError)
        elif etype == REQUEST_HEADER_DELTA:
            self._load_entry(index, entry, True, event)  # the envelope layer reports the legacy refusal
            return
        else:
            check_seed_data(etype, entry["data"], index)
        self._commit_seed_event(index, etype, event)

    def _load_restored_fast(self, seed: list[Any], base: int = 0, special: frozenset[str] | None = None) -> int:
        """Restore the plainly valid part of a parsed seed in C; return where the Python path resumes.

        The accelerator checks every envelope, freezes and seals each event. Events of the types that
        have further rules (messages, request headers, registered validators, surface metadata) are
        reported back and go through :meth:`_load_entry` with the same checks as always; the rest are
        log-only events whose remaining rule (no surface transition) holds by construction.
        """
        if special is None:
            special = frozenset(_RESTORE_SPECIAL_TYPES | self._validators.keys())
        # Without a plugin validator on a message type, a message event whose rules and surface append the
        # accelerator found plain is committed here as the append it is (``appended``), unplanned.
        appends = self._validators.keys().isdisjoint(MESSAGE_EVENT_TYPES)
        events, specials, stop, verified, appended = _restore_events(
            seed, special, Event, _RESTORE_RULES, base, _MESSAGE_RULES, appends
        )
        verified = set(verified) if verified else ()
        log = self._log
        surface = self._surface
        done = 0
        taken = 0  # appended[:taken] are committed
        for index in specials:
            if index > done:
                log.extend(events[done:index])
                if taken < len(appended) and appended[taken] < index:
                    taken = self._commit_appends(appended, taken, index, base)
                surface.skip_log_only(base + index - 1)
            self._load_special(base + index, seed[index], events[index], index in verified)
            done = index + 1
        if stop > done:
            log.extend(events[done:stop])
            if taken < len(appended):
                taken = self._commit_appends(appended, taken, stop, base)
            surface.skip_log_only(base + stop - 1)
        return stop  # type: ignore[no-any-return]

    def _commit_appends(self, appended: list[int], taken: int, limit: int, base: int) -> int:
        """Commit the plain surface appends ``appended[taken:]`` below index ``limit`` (already in the log,
        between log-only events); return how many of ``appended`` are committed then."""
        end = taken
        while end < len(appended) and appended[end] < limit:
            end += 1
        self._surface.commit_plain_appends([base + index for index in appended[taken:end]])
        return end

    def _mark_end_seed(self) -> None:
        log = self._log
        if not log or _type_at(log, -1) != SESSION_END_SEED:
            self.append(SESSION_END_SEED, {})

    # -- identity ----------------------------------------------------------------------------------
    @property
    def id(self) -> str:
        return self._header["id"]  # type: ignore[no-any-return]

    @property
    def header(self) -> FrozenDict:
        return self._header

    @property
    def first_live_seq(self) -> int:
        return self._first_live

    @property
    def attached(self) -> bool:
        """Whether the session is entered in a store (created, prepared or resumed there, not yet disposed)."""
        return self._attachment is not None

    @property
    def seq(self) -> int:
        """The next seq (= the log's length)."""
        return len(self._log)

    @property
    def events(self) -> EventsView:
        view = self._events_view
        n = len(self._log)
        if view is None or view._n != n:  # (a view cached by a racing reader may be one append behind)
            view = self._events_view = EventsView(self._log, n)
        return view

    @property
    def surface(self) -> SurfaceManager:
        return self._surface

    def __len__(self) -> int:
        return len(self._log)

    def __repr__(self) -> str:
        return f"<agentlog.Session {self.id!r} events={len(self._log)}>"

    # -- append ------------------------------------------------------------------------------------
    # One typed form per core type (``mypy --strict`` checks the data against its TypedDict and the intent
    # against ``SurfaceIntent``) and no catch-all: a catch-all ``str`` form would also match a core name
    # and so accept any wrong core call. Other registered types are appended with ``append_custom``; at
    # run time ``append`` still takes any ``str`` with the same checks.
    @overload
    def append(self, type: Literal["turn/start"], data: TurnStartData, intent: None = None) -> Event: ...
    @overload
    def append(self, type: Literal["turn/end"], data: TurnEndData, intent: None = None) -> Event: ...
    @overload
    def append(self, type: Literal["step/start", "step/end"], data: StepData, intent: None = None) -> Event: ...
    @overload
    def append(self, type: Literal["assistant/chunk"], data: AssistantChunkData, intent: None = None) -> Event: ...
    @overload
    def append(self, type: Literal["tool/call"], data: ToolCallData, intent: None = None) -> Event: ...
    @overload
    def append(self, type: Literal["todo/write"], data: TodoWriteData, intent: None = None) -> Event: ...
    @overload
    def append(self, type: Literal["request/header"], data: RequestHeaderData, intent: None = None) -> Event: ...
    @overload
    def append(self, type: Literal["request/context"], data: RequestContextData, intent: None = None) -> Event: ...
    @overload
    def append(self, type: Literal["session/end-seed"], data: Mapping[str, Never], intent: None = None) -> Event: ...
    @overload
    def append(self, type: Literal["user/message"], data: Message, intent: SurfaceIntent) -> Event: ...
    @overload
    def append(
        self, type: Literal["assistant/message"], data: AssistantMessageData, intent: SurfaceIntent
    ) -> Event: ...
    @overload
    def append(self, type: Literal["tool/result"], data: ToolResultData, intent: SurfaceIntent) -> Event: ...
    def append(self, type: str, data: Any, intent: Mapping[str, Any] | None = None) -> Event:
        """Validate, commit and publish one event; return the committed (frozen) event.

        ``intent`` (``{"surfaceOp": ..., "sourceEventSeqs": [...]}``) is required for the three surface
        types and refused for every other type. Nothing changes when this raises. The data is checked
        with the same rules every load applies, so an accepted event always loads again.

        Thread-safe: appends from any thread are serialized by the session's lock, and each gets the
        next seq. A listener that appends to the session it is being notified about (on the same
        thread) is refused with ``REENTRANT_APPEND``.
        """
        if type.__class__ is not str:
            raise InvalidEventError(f"session event type must be a string, got {type!r}")
        info = self._known.get(type)
        if info is None:
            self._refuse_type(type)
        if data.__class__ is dict and _checked_snapshot is not None:
            data_copy = _checked_snapshot(data, info.fast_check)
            if data_copy is _GIVE_UP:
                data_copy = _checked_copy(type, data, info.check)
            elif info.check < 0:
                _check_data(type, data_copy)
        else:
            data_copy = _checked_copy(type, data, info.check)
        if info.validator is not None:
            self._registry.validate(type, data_copy)
        lock = self._lock
        lock.acquire()
        try:
            if self._disposed:
                self._refuse_disposed()
            log = self._log
            seq = len(log)
            entry = self._attachment
            if intent is None and info.log_only:
                # The common case: a log-only event without surface metadata (no surface transition).
                if entry is not None and entry.appending:
                    _refuse_reentry()
                now = self._now()
                event: Event = _event4(Event, type, seq, now, data_copy)
                if event is None:
                    self._refuse_time(now)
                if entry is not None:
                    entry.publish(self, event, None, self._commit_published)
                    return event
                log.append(event)
                self._events_view = None  # (the surface steps over it: it was built with plain_tail)
                return event
            # The general case: surface metadata, a surface type (validated by the surface, which
            # refuses one without a surfaceOp), or an envelope marker.
            if intent is None:
                record = {"type": type, "seq": seq, "time": 0, "data": data_copy}
            else:
                record = self._with_surface_metadata(type, seq, data_copy, intent)
            if info.ignorable:
                record["ignorable"] = True
            if entry is not None and entry.appending:
                _refuse_reentry()
            now = self._now()
            if now.__class__ is not int or not -MAX_SAFE_INTEGER <= now <= MAX_SAFE_INTEGER:
                self._refuse_time(now)
            record["time"] = now
            event = new_event(record)
            surface = self._surface
            if intent is not None or info.surface:
                plan = surface.validate_next(event)
            else:
                plan = None
            if entry is None:
                log.append(event)
                self._events_view = None
                surface.commit(event, plan)
                return event
            entry.publish(self, event, plan, self._commit_published)
            return event
        finally:
            lock.release()

    def append_custom(self, type: str, data: JsonValue, intent: Mapping[str, Any] | None = None) -> Event:
        """Append an event of a type that is not a core type: a plugin's or extension's registered type.

        The typed entry for every name ``append``'s core forms do not cover (a plugin event, the harness's
        own non-core vocabulary, a name only known at run time). It is :meth:`append`, with the same
        checks and errors: the type must be registered (``event_types.register``), its validator runs,
        and a core name still gets the core rules.
        """
        event: Event = self.append(type, data, intent)  # type: ignore[call-overload]  # any str, checked at run time
        return event

    # -- user metadata (agentlog.kernel.labels) ---------------------------------------------------------

    @property
    def labels(self) -> dict[str, str]:
        """The session's current labels (a fold of its ``session/labels`` events; a detached copy)."""
        return _labels.fold_labels(self.events)["labels"]

    @property
    def tags(self) -> list[str]:
        """The session's current tags, in first-added order (a fold of its ``session/tags`` events)."""
        return _labels.fold_labels(self.events)["tags"]

    def set_labels(self, labels: Mapping[str, str | None]) -> Event | None:
        """Set (or, with ``None``, remove) labels: one ignorable ``session/labels`` event, or nothing when
        ``labels`` changes nothing. Refuses (:class:`~agentlog.errors.SessionLabelError`, nothing logged)
        a bad key or value, or a change that would leave more than 64 labels."""
        changes = _labels.labels_change(labels)
        current = _labels.fold_labels(self.events)["labels"]
        changes = {key: value for key, value in changes.items() if current.get(key) != value}
        if not changes:
            return None
        after = {key for key in current if changes.get(key, current[key]) is not None}
        after.update(key for key, value in changes.items() if value is not None)
        if len(after) > _labels.MAX_LABELS:
            raise SessionLabelError(
                f'session "{self.id}" would carry {len(after)} labels; at most {_labels.MAX_LABELS} are '
                "allowed: remove some first (set them to None)"
            )
        return self.append_custom(_labels.SESSION_LABELS, {"labels": changes})

    def remove_labels(self, keys: Iterable[str]) -> Event | None:
        """Remove labels by key (absent keys are ignored): ``set_labels`` with ``None`` values."""
        if isinstance(keys, str):
            keys = [keys]
        return self.set_labels(dict.fromkeys(keys))

    def add_tags(self, tags: Iterable[str]) -> Event | None:
        """Add tags (ones already present are ignored): one ignorable ``session/tags`` event, or nothing.
        Refuses a bad tag, or more than 64 tags in all."""
        wanted = _labels.tags_change(tags)
        current = _labels.fold_labels(self.events)["tags"]
        added = [tag for tag in wanted if tag not in current]
        if not added:
            return None
        if len(current) + len(added) > _labels.MAX_TAGS:
            raise SessionLabelError(
                f'session "{self.id}" would carry {len(current) + len(added)} tags; at most {_labels.MAX_TAGS} '
                "are allowed: remove some first (remove_tags)"
            )
        return self.append_custom(_labels.SESSION_TAGS, {"add": added})

    def remove_tags(self, tags: Iterable[str]) -> Event | None:
        """Remove tags (absent ones are ignored): one ignorable ``session/tags`` event, or nothing."""
        unwanted = _labels.tags_change(tags)
        current = _labels.fold_labels(self.events)["tags"]
        removed = [tag for tag in unwanted if tag in current]
        if not removed:
            return None
        return self.append_custom(_labels.SESSION_TAGS, {"remove": removed})

    def _refuse_type(self, type: str) -> NoReturn:
        if self._disposed:
            self._refuse_disposed()
        problem = legacy_request_header_problem(type, None, f'session event "{type}"')
        if problem is not None:
            raise LegacyFormatError(problem)
        raise UnknownEventTypeError(
            f'session event type "{type}" is not registered, so no reader could load the log back; '
            f'register it first with agentlog.event_types.register("{type}") (readers must register it too, '
            "or pass ignorable=True if readers may skip it)"
        )

    def _refuse_disposed(self) -> NoReturn:
        raise SessionDisposedError(
            f'session "{self.id}" was disposed: an append would never be stored. '
            f'Reopen it with coordinator.resume("{self.id}") and append to the resumed session'
        )

    def _refuse_time(self, now: object) -> NoReturn:
        raise InvalidEventError(
            f'session "{self.id}" clock returned {now!r}: event time must be integer Unix epoch '
            "milliseconds (a safe integer); give the session a clock such as "
            "lambda: time.time_ns() // 1_000_000"
        )

    def _with_surface_metadata(
        self, type: str, seq: int, data_copy: Any, intent: Mapping[str, Any]
    ) -> dict[str, Any]:
        if intent.__class__ is not dict and not isinstance(intent, Mapping):  # (a dict skips the ABC check)
            raise InvalidEventError(
                f'session event "{type}" surface intent must be a mapping, got {intent!r} '
                f"({intent.__class__.__name__}): {_intent_remedy(intent)}"
            )
        record: dict[str, Any] = {"type": type, "seq": seq, "time": 0, "data": data_copy}
        sources = intent.get("sourceEventSeqs", _MISSING)
        op = intent.get("surfaceOp", _MISSING)
        try:
            if sources is not _MISSING:
                record["sourceEventSeqs"] = snapshot_json(sources)
            if op is not _MISSING:
                record["surfaceOp"] = snapshot_json(op)
        except NonJsonValueError as err:
            raise InvalidEventError(
                f'session event "{type}" carries non-JSON-serializable surface metadata: {err}'
            ) from None
        return record

    def _commit_published(self, event: Event, plan: Plan) -> None:
        """Commit an event its store is publishing (between the interceptors and the listeners)."""
        self._log.append(event)
        self._events_view = None
        self._surface.commit(event, plan)

    # -- derived views -----------------------------------------------------------------------------
    def derive_messages(self) -> MessageList:
        """The model-visible history now: O(new surface nodes) per call, a full rebuild only after a replace."""
        with self._lock:  # consistent with concurrent appends from other threads
            return self._messages.derive(self._surface, self._log)

    @staticmethod
    def derive_event_message(event: Mapping[str, Any]) -> Any:
        return derive_event_message(event)

    def request_header(self) -> Any:
        """The current canonical request header (frozen), or ``None`` before the first ``request/header``."""
        with self._lock:
            return self._request_header()

    def _request_header(self) -> Any:
        log = self._log
        pos = self._rh_pos
        if pos < len(log):
            state = self._rh_cache
            index = _last_of_type(log, REQUEST_HEADER, pos)
            if index >= 0:
                state = _header_of(log[index])
            self._rh_cache = state
            self._rh_pos = len(log)
        return self._rh_cache

    def request_context(self) -> Any:
        """The latest ``request/context`` record (frozen), or ``None``."""
        with self._lock:
            return self._request_context()

    def _request_context(self) -> Any:
        log = self._log
        pos = self._rc_pos
        if pos < len(log):
            index = _last_of_type(log, REQUEST_CONTEXT, pos)
            if index >= 0:
                self._rc_cache = _context_of(log[index])
            self._rc_pos = len(log)
        return self._rc_cache

    def at(self, seq: int) -> SessionView:
        """A read-only view of this session as it was right after event ``seq`` was committed."""
        with self._lock:
            prefix = _prefix_through(self._log, seq, self.id)
        return SessionView(self, prefix)


def _intent_remedy(intent: object) -> str:
    """What to pass instead of a non-mapping intent: a bare op (``al.APPEND``) goes inside the mapping."""
    if isinstance(intent, str):
        return f'pass {{"surfaceOp": {json.dumps(intent)}}} (the op goes inside the intent mapping)'
    return 'pass {"surfaceOp": "append"} or {"surfaceOp": {"op": "replace", "start": SEQ, "end": SEQ}}'


def _prefix_through(log: list[Any], seq: object, session_id: str) -> list[Any]:
    """``log`` up to and including ``seq`` (a lazy log's prefix stays lazy: runs stay packed), or the
    refusal of a seq that is not in it, naming its last seq; a seq that is no int at all is a type error."""
    if type(seq) is not int:
        raise ArgumentTypeError(
            f"seq must be an int, got {seq!r} ({seq.__class__.__name__}): pass the event's seq as an int (event.seq)"
        )
    if not 0 <= seq < len(log):
        last = len(log) - 1
        raise SeqOutOfRangeError(
            f'seq {seq!r} is not in session "{session_id}" (last seq: {last if last >= 0 else "none"})'
        )
    if log.__class__ is LazyLog:
        return LazyLog(itertools.islice(log, seq + 1))  # (one copy, not a slice copied again)
    return log[: seq + 1]


def _last_of_type(log: list[Any], etype: str, stop: int) -> int:
    """The index of the last event of type ``etype`` at or after ``stop``, or -1 (a packed run's slots are
    stepped over at once: its members are chunks)."""
    if log.__class__ is not LazyLog:
        for index in range(len(log) - 1, stop - 1, -1):
            if log[index]["type"] == etype:
                return index
        return -1
    index = len(log) - 1
    while index >= stop:
        event = log[index]
        if event.__class__ is ChunkRun:
            index = event.seq0 - 1
        elif event["type"] == etype:
            return index
        else:
            index -= 1
    return -1


def _header_of(event: Mapping[str, Any]) -> Any:
    data = event.get("data")
    header = data.get("header") if isinstance(data, Mapping) else None
    if not isinstance(header, Mapping):
        return None
    return FrozenDict(canonical_header(header))


def _context_of(event: Mapping[str, Any]) -> Any:
    data = event.get("data")
    return FrozenDict(data) if isinstance(data, dict) else data


class SessionView:
    """What a session looked like after one event: same fold, same projection, frozen prefix."""

    __slots__ = ("_log", "_messages", "_session", "_surface")

    def __init__(self, session: Session, prefix: list[Any]) -> None:
        self._session = session
        self._log = prefix
        self._surface = SurfaceManager(prefix, 0)
        self._messages = _MessageCache()

    @property
    def id(self) -> str:
        return self._session.id

    @property
    def header(self) -> FrozenDict:
        return self._session.header

    @property
    def seq(self) -> int:
        """The seq of the last event in this view."""
        return len(self._log) - 1

    @property
    def events(self) -> EventsView:
        return EventsView(self._log, len(self._log))

    @property
    def surface(self) -> SurfaceManager:
        return self._surface

    def derive_messages(self) -> MessageList:
        return self._messages.derive(self._surface, self._log)

    def request_header(self) -> Any:
        log = self._log
        header = fold_request_header(
            (event for event in log if event.__class__ is not ChunkRun) if log.__class__ is LazyLog else log
        )
        return None if header is None else FrozenDict(header)

    def request_context(self) -> Any:
        for event in reversed(self._log):
            if event.__class__ is not ChunkRun and event["type"] == REQUEST_CONTEXT:
                return _context_of(event)
        return None

    def at(self, seq: int) -> SessionView:
        """The view of the same session right after event ``seq``, an earlier point of this view.

        An inspection tool holding a view (``show --at`` over a cold, balanced view) gets an earlier
        moment from the events it already has, as :meth:`Session.at` does: only the prefix is sliced
        (a restored log's packed chunk runs stay packed) and folded, nothing is re-validated. A seq
        past this view's last one is refused as :meth:`Session.at` refuses it, naming this view's
        last seq: the view is all there is of the session here (a balanced view's closers included).
        """
        return SessionView(self._session, _prefix_through(self._log, seq, self.id))

    def __repr__(self) -> str:
        return f"<agentlog.SessionView {self.id!r} at seq {self.seq}>"


# --- the store's side of a session (kernel/store.py is the only caller) ------------------------------


class StoreAttachment(Protocol):
    """What a session needs from the store it is entered in (``kernel.store`` implements it).

    ``appending`` is true while the store publishes one of the session's appends (a listener appending
    to the same session is refused). ``publish`` runs the store's interceptors (which may veto), calls
    ``commit(event, plan)``, then notifies the listeners.
    """

    appending: bool

    def publish(
        self, session: Session, event: Event, plan: Plan, commit: Callable[[Event, Plan], None]
    ) -> None: ...


def attachment_of(session: Session) -> StoreAttachment | None:
    """The store attachment ``session`` is entered with, or ``None``."""
    return session._attachment


def attach(session: Session, attachment: StoreAttachment) -> None:
    """Record that ``session`` is entered in a store (the caller checked it was not already)."""
    session._attachment = attachment


def release(session: Session, *, dispose: bool) -> None:
    """Forget the store attachment; with ``dispose`` later appends are refused (``SESSION_DISPOSED``).

    Call it holding :func:`lock_of`, so an append on another thread is either published first or refused.
    """
    session._attachment = None
    if dispose:
        session._disposed = True


def refuse_if_disposed(session: Session) -> None:
    """Raise ``SESSION_DISPOSED`` if ``session`` was disposed."""
    if session._disposed:
        session._refuse_disposed()


def lock_of(session: Session) -> threading.RLock:
    """The lock that serializes ``session``'s appends."""
    return session._lock
