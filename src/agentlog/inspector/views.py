"""The inspector's data layer: what the web app serves, computed from the store with no web code.

:class:`Inspector` opens a store as the read commands do (a :class:`PersistenceCoordinator` over a
read-only backend, no session made live, nothing written but the derived files ``ls`` and ``search``
keep) and answers four questions, each as plain JSON:

* :meth:`Inspector.sessions` — one row per stored session, from the projection cache as ``agentlog ls``
  serves it (title, created, last activity, turns, tokens, context pressure, lineage parent, status);
* :meth:`Inspector.log_page` — a page of the log from a seq, each event with its rendering hints (kind,
  turn and step, streamed chunks folded into one item, tool call and result paired, repair closers and
  the closers a resume would add marked);
* :meth:`Inspector.state_at` — the session as it was right after one seq: ``session.at(seq)``'s surface
  nodes with their provenance (what each replacement shadowed, compaction checkpoints with their
  summary, pruned results), ``derive_messages()`` exactly, the request header and context;
* :meth:`Inspector.search` — the store's search index (:class:`~agentlog.query.sqlite.SqliteSearch`),
  hits with snippets and the seq to open.

A loaded session is kept in a small LRU keyed by id and checked against the backend's revision on each
use. It is read whole and validated once, as the read commands read it (the session page's first paint,
:meth:`Inspector.first_paint`, does not wait for that: it shows the log's tail, read by seq range, with
the status ``validating`` while the whole read runs in the background); a background pager then keeps
its log as compressed pages (:class:`~agentlog.inspector.paged.PagedLog`: a page decoded when a request
shows a seq in it) and lets the restored session go. Indexing a loaded session folds its surface once into a
:class:`~agentlog.kernel.surface.SurfaceTimeline`: moving the time slider reads the surface at a seq
from it (node-list checkpoints, no fold of the prefix) and derives only the messages of the window it
serves. A log that was appended to is continued by its stored suffix (a seek read from the last loaded
seq, checked against the event already loaded there), its index and timeline continued by the new
events (not folded again from seq 0); one that cannot be (another history, a torn tail, a backend
without seek reads) is read again. Nothing here re-executes anything.
"""

from __future__ import annotations

import bisect
import dataclasses
import difflib
import gc
import os
import pickle
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from ..compaction.events import COMPACTION_SUMMARY
from ..compaction.marks import CheckpointMark, PruneMark, mark_of
from ..errors import (
    AgentlogError,
    InspectorRequestError,
    InvalidSessionIdError,
    SeqOutOfRangeError,
)
from ..kernel.chunkrows import ChunkRun
from ..kernel.events import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    REQUEST_CONTEXT,
    REQUEST_HEADER,
    SESSION_END_SEED,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
)
from ..kernel.jsonvalue import MAX_SAFE_INTEGER, thaw
from ..kernel.repair import TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN, interrupted_turn_closers
from ..kernel.request_header import fold_request_header
from ..kernel.session import EventsView, Session, derive_event_message
from ..kernel.store import SessionStore
from ..kernel.surface import SurfaceTimeline
from ..persistence.backend import Backend, ProbesTornTail, SeeksStored
from ..persistence.coordinator import PersistenceCoordinator, StoredView
from ..projection.cache import InlineWriter, ProjectionCache, anchor_of
from ..projection.cache_storage import CacheStorage, MemoryCacheStorage, cache_path_for, open_cache_storage
from ..projection.events import SESSION_TITLE
from ..projection.labels import labels_of
from ..projection.last_turn import LastTurn, ended_interrupted, last_turn_of
from ..projection.listing import LAST_ACTIVITY_KEY, command_registry
from ..projection.redaction import Redactor
from ..projection.stats import SESSION_STATS_UNIT
from ..projection.units import CONTEXT_PRESSURE_UNIT, TOKEN_USAGE_UNIT
from ..projection.usage_steps import usage_known
from .paged import PAGE_EVENTS, PagedLog

__all__ = [
    "CLOSER_CODES",
    "DEFAULT_PAGE_LIMIT",
    "MAX_PAGE_LIMIT",
    "MAX_SESSION_ID_LENGTH",
    "PREVIEW_BACK",
    "PREVIEW_EVENTS",
    "Inspector",
    "LoadedSession",
    "validate_seq",
    "validate_session_id",
]

DEFAULT_PAGE_LIMIT: Final = 200
"""Log items per page when the request does not say (a folded chunk run is one item)."""
MAX_PAGE_LIMIT: Final = 1000
DEFAULT_STATE_WINDOW: Final = 200
"""Messages (and the surface nodes they come from) a state serves when the request does not say: the newest."""
MAX_STATE_WINDOW: Final = 2000
MAX_EVENTS_PER_PAGE: Final = 20_000
"""A page stops after this many raw events even inside one long chunk run (the next page continues it)."""
MAX_SESSION_ID_LENGTH: Final = 1024
CLIP_CHARS: Final = 4000
"""Strings longer than this are cut in log pages and surface previews (``clipped`` says so); the full
event is one request away (:meth:`Inspector.event`)."""
EVENT_CLIP_CHARS: Final = 1_000_000
"""A single event is served whole up to this many characters per string (a 10 MB line is cut, not shipped)."""
MAX_SHADOWED_SHOWN: Final = 200
"""A replacement lists the previews of at most this many of the nodes it shadowed (all their seqs are listed)."""
MAX_CHART_POINTS: Final = 2000
"""The pressure series is thinned to at most this many points (the peak of each run of points)."""
MAX_DIFF_MESSAGES: Final = 500
"""A diff op ships at most this many removed and this many added messages (``truncated`` says it cut)."""
PREVIEW_EVENTS: Final = 300
"""How many of a log's last stored events the session page's first paint reads (a seq-range read) while
the whole log is read and validated in the background: the shown page and the turns and steps around it."""
PREVIEW_BACK: Final = 20
"""The first paint's log page starts this many seqs before the last one (where the page then shows the
last state)."""
CLOSER_CODES: Final = frozenset({TOOL_OUTCOME_UNKNOWN, TOOL_NOT_STARTED})
"""``tool/result`` error codes of the results crash repair (or a cancel) writes for an unanswered call."""

_KINDS: Final = {
    TURN_START: "turn-start",
    TURN_END: "turn-end",
    STEP_START: "step-start",
    STEP_END: "step-end",
    USER_MESSAGE: "message",
    ASSISTANT_MESSAGE: "message",
    TOOL_CALL: "tool-call",
    TOOL_RESULT: "tool-result",
    REQUEST_HEADER: "request-header",
    REQUEST_CONTEXT: "request-context",
}


def validate_session_id(session_id: object) -> str:
    """A session id as the inspector accepts it from a URL: a non-empty string of at most
    :data:`MAX_SESSION_ID_LENGTH` characters without control characters (the backends encode every id
    into a file name safely, so no id escapes the store; this refuses the nonsensical ones early)."""
    if not isinstance(session_id, str) or not session_id or len(session_id) > MAX_SESSION_ID_LENGTH:
        raise InvalidSessionIdError(f"not a session id: {str(session_id)[:80]!r}")
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 for ch in session_id):
        raise InvalidSessionIdError(f"not a session id (control characters): {session_id[:80]!r}")
    return session_id


def validate_seq(value: object, name: str = "seq") -> int:
    """A seq from a query string: decimal digits only (no sign, no spaces), as an int."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if not isinstance(value, str) or not value.isascii() or not value.isdigit() or len(value) > 16:
        raise InspectorRequestError(f"{name} must be a non-negative integer, got {str(value)[:40]!r}")
    return int(value)


def _clip(value: Any, limit: int = CLIP_CHARS) -> tuple[Any, bool]:
    """A plain JSON copy of ``value`` whose strings are cut at ``limit`` characters (and whether any was).

    A container is copied by one JSON round trip in C (a log page copies thousands of payloads, and the
    Python walk was most of an export's time); when its JSON text is no longer than ``limit`` characters
    no string in it can be, so the copy is the answer, else the copy is walked and cut. A value JSON cannot
    write as is (not a JSON value) takes the walk alone, which copies it as it always did."""
    if value.__class__ is not str and isinstance(value, (dict, list)):
        try:
            text = orjson.dumps(value)
        except TypeError:
            pass
        else:
            value = orjson.loads(text)
            if len(text) <= limit:
                return value, False
    clipped = False

    def walk(item: Any) -> Any:
        nonlocal clipped
        if isinstance(item, str):
            if len(item) > limit:
                clipped = True
                return item[:limit] + f"… [{len(item) - limit:,} more characters]"
            return item
        if isinstance(item, Mapping):
            return {str(key): walk(inner) for key, inner in item.items()}
        if isinstance(item, (list, tuple)):
            return [walk(inner) for inner in item]
        return item

    return walk(value), clipped


def _text_of(blocks: Any) -> str:
    """The readable text of message content (text, reasoning, tool calls by name, nested results)."""
    if isinstance(blocks, str):
        return blocks
    parts: list[str] = []
    # (the concrete types first: the ABC checks were a tenth of an export's time)
    if not isinstance(blocks, (list, tuple)) and not isinstance(blocks, Sequence):
        return ""
    for block in blocks:
        if not isinstance(block, dict) and not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind in ("text", "reasoning") and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind == "tool-call":
            parts.append(f"{block.get('name')}({block.get('arguments', '')})")
        elif kind == "tool-result":
            parts.append(_text_of(block.get("content")))
    return "\n".join(part for part in parts if part)


def _role(event: Mapping[str, Any]) -> str | None:
    data = event.get("data")
    message = data.get("message") if isinstance(data, Mapping) else None
    if event.get("type") == USER_MESSAGE and isinstance(data, Mapping):
        source = data.get("source")
        kind = source.get("kind") if isinstance(source, Mapping) else None
        return "user" if kind in (None, "user") else f"user ({kind})"
    if event.get("type") == ASSISTANT_MESSAGE:
        return "assistant"
    if event.get("type") == TOOL_RESULT and isinstance(message, Mapping):
        return "tool"
    return None


def _message_text(event: Mapping[str, Any]) -> str:
    data = event.get("data")
    if not isinstance(data, Mapping):
        return ""
    if event.get("type") == USER_MESSAGE:
        return _text_of(data.get("content"))
    message = data.get("message")
    return _text_of(message.get("content")) if isinstance(message, Mapping) else ""


@dataclass
class _Index:
    """What a log page needs to know beyond its own events, built in one pass over the log."""

    turn_starts: list[int] = field(default_factory=list)
    turn_numbers: list[Any] = field(default_factory=list)
    step_starts: list[int] = field(default_factory=list)
    step_numbers: list[tuple[Any, Any]] = field(default_factory=list)
    turn_ends: list[int] = field(default_factory=list)
    step_ends: list[int] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=dict)
    results: dict[str, int] = field(default_factory=dict)
    compactions: list[int] = field(default_factory=list)
    header_seqs: list[int] = field(default_factory=list)
    context_seqs: list[int] = field(default_factory=list)
    title: str | None = None
    last_turn_end: dict[str, Any] | None = None
    replaces: bool = False
    """Whether any event replaces surface nodes (else the surface fold has no replacements to report)."""
    timeline: SurfaceTimeline | None = None
    """The surface at every seq (one fold of the log, with checkpoints): a slider move reads it."""
    silent: list[int] = field(default_factory=list)
    """The surface events that derive no message (an assistant message without content), in seq order."""


@dataclass
class LoadedSession:
    """One session read from the store, with what the inspector derived from it (lazily, once).

    Right after the read it holds the restored session (``stored``); :meth:`page_out` then keeps only
    what the pages need beyond the events (the index with its surface timeline, the stored facts) and
    the log as a :class:`~agentlog.inspector.paged.PagedLog`, read a page at a time.
    """

    session_id: str
    revision: str | None
    stored: StoredView | None
    """The validated read (the restored session and its stored facts); ``None`` once paged out."""
    header: Any = None
    stored_events: int = 0
    torn: bool = False
    closers: int = 0
    last_seq: int = -1
    _paged: PagedLog | None = None
    _index: _Index | None = None
    _charts: dict[str, Any] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _paged_out: threading.Event = field(default_factory=threading.Event)
    _stored_index: _Index | None = None
    """The index of the stored events alone (the closers left out), kept when the session was continued
    by a stored suffix: the next continuation extends it instead of indexing the whole log again."""

    def __post_init__(self) -> None:
        stored = self.stored
        if stored is not None:
            self.header = stored.view.header
            self.stored_events = stored.stored_events
            self.torn = stored.torn
            self.closers = stored.closers
            self.last_seq = stored.view.seq

    @property
    def events(self) -> Sequence[Any]:
        """The log by seq: the restored session's events, or the pages once paged out."""
        stored = self.stored
        if stored is not None:
            return stored.view.events
        assert self._paged is not None
        return self._paged

    @property
    def paged(self) -> PagedLog | None:
        """The paged log (``None`` while the restored session is held)."""
        return self._paged if self.stored is None else None

    @property
    def last_stored_seq(self) -> int:
        return self.stored_events - 1

    def index(self) -> _Index:
        with self._lock:
            if self._index is None:
                stored = self.stored
                assert stored is not None  # (a session is paged out only once indexed)
                self._index = _build_index(stored.view.events)
            return self._index

    def charts(self) -> dict[str, Any]:
        """The chart series of the whole log, folded once with the projection units (see :func:`_charts`)."""
        with self._lock:
            if self._charts is None:
                self._charts = _charts(self.events)
            return self._charts

    def page_out(self, page_events: int = PAGE_EVENTS) -> None:
        """Keep the log as compressed pages and let the restored session go: indexed first (the index,
        the surface timeline and the pairs are all later requests need beyond the events they show),
        then every event serialized once into pages; the surface timeline folds on over the pages when
        the session is continued. Idempotent.

        What is kept is made anew once the restored session is gone (pickled before, unpickled after):
        a seq or a call id shared with a freed event, or a copy made while the log was still there,
        would sit in the allocator's arenas among the freed events and keep them from the system.
        """
        self.index()
        stored = self.stored
        if stored is None:
            return
        events = stored.view.events
        paged = PagedLog(events.restore_seed(), len(events), page_events=page_events)  # (requests go on)
        with self._lock:
            if self.stored is not stored:
                return  # paged out meanwhile
            same = self._stored_index is self._index
            kept = pickle.dumps(
                (_unbound(self._index), None if same else _unbound(self._stored_index), self._charts, self.header),
                protocol=pickle.HIGHEST_PROTOCOL,
            )
            self._paged = paged
            self.stored = None
            self._index = self._stored_index = self._charts = None
            del stored, events
            index, stored_index, charts, header = pickle.loads(kept)
            self._index = _bound(index, paged)
            self._stored_index = self._index if same else _bound(stored_index, paged)
            self._charts = charts
            self.header = header
        self._paged_out.set()

    def adopt_pages(self, paged: PagedLog, index: _Index, stored_index: _Index | None) -> None:
        """Start paged out (a streamed load: :func:`~.streamed.load_streamed`): ``paged`` is the log (with
        the closers a load would add), ``index`` its index (its timeline reading ``paged``),
        ``stored_index`` that of the stored events alone when known (the index itself without closers;
        else the first continuation makes it, as for a session read whole)."""
        with self._lock:
            self._paged = paged
            self._index = index
            self._stored_index = stored_index
        self._paged_out.set()

    def wait_paged(self, timeout: float | None = None) -> bool:
        """Wait until this session is paged out (by the background pager); whether it is."""
        return self._paged_out.wait(timeout)

    def replacements(self) -> list[Any]:
        """fold_surface's replacements over the whole log (those at or before a seq are that moment's)."""
        return self.timeline().replacements

    def timeline(self) -> SurfaceTimeline:
        """The surface at every seq of the loaded log (folded once, with the index)."""
        timeline = self.index().timeline
        assert timeline is not None
        return timeline

    def surface_at(self, seq: int) -> tuple[list[int], list[int]]:
        """``session.at(seq)``'s surface nodes and, in order, those that derive a message (the seqs of
        ``derive_messages()``), from the timeline: no fold of the prefix."""
        index = self.index()
        assert index.timeline is not None
        nodes = index.timeline.nodes_at(seq)
        silent = index.silent
        if not silent or silent[0] > seq:  # every node derives its message (the usual case)
            return nodes, nodes
        quiet = set(silent[: bisect.bisect_right(silent, seq)])
        return nodes, [node for node in nodes if node not in quiet]


def _unbound(index: _Index | None) -> _Index | None:
    """``index`` with a copy of its surface timeline that reads no log (so that it pickles)."""
    if index is None or index.timeline is None:
        return index
    return dataclasses.replace(index, timeline=index.timeline.copy(()))


def _bound(index: _Index | None, window: Sequence[Any]) -> _Index | None:
    """``index`` (unpickled) with its surface timeline reading ``window``, the paged log, from now on."""
    if index is not None and index.timeline is not None:
        index.timeline = index.timeline.copy(window)
    return index


def _give_back_memory() -> None:
    """After a page-out: collect the restored session's cycles, and ask the C allocator to return the
    freed heap to the system (glibc's ``malloc_trim``; elsewhere nothing)."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        pass


def _index_pass(index: _Index, events: Iterable[Any], add: Callable[[Any], object] | None) -> Any:
    """:func:`_build_index`'s pass over ``events`` (chunks skipped), each surface event given to ``add``
    (``None``: the structure only, as the preview of a log's tail needs it); the last event seen."""
    last = None
    for event in events:
        last = event
        etype = event["type"]
        if etype == ASSISTANT_CHUNK:
            continue
        seq = event["seq"]
        data = event["data"]
        op = event.get("surfaceOp")
        if op is not None:
            if add is not None:
                add(event)
            if derive_event_message(event) is None:
                index.silent.append(seq)
            if not isinstance(op, str):  # a replace op (an append is the string "append")
                index.replaces = True
        if etype == TURN_START:
            index.turn_starts.append(seq)
            index.turn_numbers.append(data.get("turn"))
        elif etype == STEP_START:
            index.step_starts.append(seq)
            index.step_numbers.append((data.get("turn"), data.get("step")))
        elif etype == TOOL_CALL and isinstance(data.get("callId"), str):
            index.calls.setdefault(data["callId"], seq)
        elif etype == TOOL_RESULT:
            message = data.get("message")
            source = message.get("source") if isinstance(message, Mapping) else None
            call_id = source.get("callId") if isinstance(source, Mapping) else None
            if isinstance(call_id, str) and not (isinstance(event.get("surfaceOp"), Mapping)):
                index.results.setdefault(call_id, seq)
        elif etype == COMPACTION_SUMMARY:
            index.compactions.append(seq)
        elif etype == REQUEST_HEADER:
            index.header_seqs.append(seq)
        elif etype == REQUEST_CONTEXT:
            index.context_seqs.append(seq)
        elif etype == SESSION_TITLE and isinstance(data.get("title"), str):
            index.title = data["title"]
        elif etype == TURN_END:
            index.turn_ends.append(seq)
            index.last_turn_end = {"seq": seq, "turn": data.get("turn"), "reason": thaw(data.get("reason"))}
        elif etype == STEP_END:
            index.step_ends.append(seq)
    return last


def _build_index(events: EventsView, index: _Index | None = None, start: int = 0) -> _Index:
    """One pass over the log less its packed chunk runs (stepped over unbuilt): the index and the
    surface timeline of ``events``, or ``index`` (of ``events[:start]``, its timeline included) continued
    by ``events[start:]``."""
    if index is None:
        index = _Index()
    if index.timeline is None:
        index.timeline = SurfaceTimeline(events)
    timeline = index.timeline
    last = _index_pass(index, events.outside_runs(start), timeline.add)
    if len(events) > start and (last is None or last["seq"] != len(events) - 1):
        last = events[len(events) - 1]  # the log ends in a packed run: the timeline covers it too
    if last is not None and last["seq"] > timeline.last_seq:
        timeline.add(last)
    return index


def _charts(events: Sequence[Any]) -> dict[str, Any]:
    """The series the charts draw, folded with the projection units themselves (so the figures are the
    ones ``agentlog stats`` and ``ls`` serve):

    * ``pressure``: ``[seq, pressureTokens, projectedTokens, contextWindow]`` at each event where the
      ``contextPressure`` unit's pressure or window changed (a usage sample, a new request context);
    * ``turns``: per ``turn/end``, the turn's provider-reported tokens (the ``tokenUsage`` unit's totals
      since the previous turn end);
    * ``steps``: per ``step/end``, the step's tool time (the ``sessionStats`` unit's ``toolMs`` since the
      previous step end);
    * ``compactions``: the seqs of the ``compaction/summary`` events.
    """
    pressure_unit, usage_unit, stats_unit = CONTEXT_PRESSURE_UNIT, TOKEN_USAGE_UNIT, SESSION_STATS_UNIT
    pressure_state = pressure_unit.initial()
    usage_state = usage_unit.initial()
    stats_state = stats_unit.initial()
    pressure: list[list[Any]] = []
    turns: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    compactions: list[int] = []
    last_key: tuple[Any, Any] = (None, None)
    tokens_before = 0
    tool_before: float = 0
    for seq, event in enumerate(events):
        following = pressure_unit.reduce(pressure_state, event)
        if following is not pressure_state:
            pressure_state = following
            view = pressure_unit.view(following)
            key = (view.get("pressureTokens"), view.get("contextWindow"))
            if key != last_key and key[0] is not None:
                pressure.append([seq, key[0], view.get("projectedTokens"), key[1]])
                last_key = key
        usage_state = usage_unit.reduce(usage_state, event)
        stats_state = stats_unit.reduce(stats_state, event)
        etype = event["type"]
        if etype == STEP_END:
            tool_ms = stats_unit.view(stats_state)["toolMs"]
            data = event["data"]
            steps.append(
                {"seq": seq, "turn": data.get("turn"), "step": data.get("step"), "toolMs": tool_ms - tool_before}
            )
            tool_before = tool_ms
        elif etype == TURN_END:
            buckets = usage_unit.view(usage_state)
            total = sum(value for value in buckets.values() if type(value) is int)
            turns.append({"seq": seq, "turn": event["data"].get("turn"), "tokens": total - tokens_before})
            tokens_before = total
        elif etype == COMPACTION_SUMMARY:
            compactions.append(seq)
    return {
        "lastSeq": len(events) - 1,
        "pressure": _downsample(pressure, MAX_CHART_POINTS),
        "pressurePoints": len(pressure),
        "turns": turns,
        "steps": steps,
        "compactions": compactions,
    }


def _downsample(points: list[list[Any]], limit: int) -> list[list[Any]]:
    """At most ``limit`` points: per bucket of consecutive points the one with the highest pressure (peaks
    survive), and always the last point."""
    if len(points) <= limit:
        return points
    size = -(-len(points) // (limit - 1))
    out = [max(points[i : i + size], key=lambda point: point[1]) for i in range(0, len(points), size)]
    if out[-1] is not points[-1]:
        out.append(points[-1])
    return out


def _extend_stored(reader: PersistenceCoordinator, loaded: LoadedSession) -> StoredView | None:
    """``loaded`` continued by the events committed after its stored prefix, without reading the log
    again: the suffix from its last stored seq on is read (``read_from``, a seek read), the event at
    that seq must be the one already loaded (its anchor, as the projection cache checks a cut), and the
    loaded stored events plus the new ones are restored into a session as a whole read would (the
    closers of a turn left open recomputed; the loaded events are already frozen, or decoded from the
    pages of a paged-out session, so restoring them again reads nothing). ``None`` when the log must be
    read whole instead: a torn tail was loaded (the next load repairs it: the history changes), nothing
    was stored, the header or the anchor event differs (a rewritten log, another history), the suffix
    does not continue at the next seq, or it does not restore (a whole read reports the damage)."""
    last = loaded.last_stored_seq
    if loaded.torn or last < 1:
        return None
    session_id = loaded.session_id
    try:
        suffix = reader.read_from(session_id, last)
    except AgentlogError:
        return None
    events = suffix.events
    header = loaded.header
    if not len(events) or any(suffix.meta.get(key) != header.get(key) for key in ("id", "createdAt", "cwd")):
        return None
    stored = loaded.stored  # (read once: a page-out may let it go meanwhile, the pages are set before)
    if stored is not None:
        loaded_events: Sequence[Any] = stored.view.events
    else:
        assert loaded._paged is not None
        loaded_events = loaded._paged
    if anchor_of(last, events[0]) != anchor_of(last, loaded_events[last]):
        return None
    added = events[1:]
    if any(event.get("seq") != last + 1 + offset for offset, event in enumerate(added)):
        return None
    if stored is not None:
        seed = stored.view.events.prefix(last + 1).restore_seed()
    else:
        assert loaded._paged is not None
        seed = loaded._paged.restore_seed(last + 1)
    logged = [*seed, *added]
    try:
        closers = interrupted_turn_closers(logged)
        balanced = [*logged, *closers]
        session = Session.from_restore(session_id, balanced, header)
    except AgentlogError:
        return None
    end = balanced[-1]
    marked = end.__class__ is not ChunkRun and end["type"] == SESSION_END_SEED
    length = len(session) if marked else len(session) - 1
    return StoredView(session.at(length - 1), last + 1 + len(added), False, len(closers))


def _copy_index(index: _Index, window: EventsView) -> _Index:
    """A copy of ``index`` that :func:`_build_index` continues on its own (``index`` unchanged, its
    readers undisturbed), its surface timeline folding on over ``window`` (the grown log)."""
    return dataclasses.replace(
        index,
        timeline=None if index.timeline is None else index.timeline.copy(window),
        silent=list(index.silent),
        turn_starts=list(index.turn_starts),
        turn_numbers=list(index.turn_numbers),
        step_starts=list(index.step_starts),
        step_numbers=list(index.step_numbers),
        turn_ends=list(index.turn_ends),
        step_ends=list(index.step_ends),
        calls=dict(index.calls),
        results=dict(index.results),
        compactions=list(index.compactions),
        header_seqs=list(index.header_seqs),
        context_seqs=list(index.context_seqs),
    )


def _continue_index(old: LoadedSession, new: LoadedSession) -> None:
    """``new``'s index (``new`` continues ``old`` by a stored suffix) from ``old``'s: the index of the
    stored events continued by the new stored events, then by the new closers. Without an index of
    ``old``'s stored events (the first continuation of a session loaded with closers), the stored
    events are indexed once."""
    with old._lock:  # (not while a page-out swaps them)
        base = old._stored_index
        if base is None and old.closers == 0:
            base = old._index
    assert new.stored is not None
    events = new.stored.view.events
    stored = new.stored_events
    if base is None:
        stored_index = _build_index(events.prefix(stored))
    else:
        stored_index = _build_index(events.prefix(stored), _copy_index(base, events), old.stored_events)
    new._stored_index = stored_index
    if new.closers:
        new._index = _build_index(events, _copy_index(stored_index, events), stored)
    else:
        new._index = stored_index


def _status(loaded: LoadedSession, index: _Index) -> str:
    """``repairable`` (a torn tail, or an open turn a resume closes), ``interrupted`` (the last turn
    ended interrupted), else ``ok``."""
    if loaded.torn or loaded.closers:
        return "repairable"
    end = index.last_turn_end
    return "interrupted" if end is not None and ended_interrupted(end) else "ok"


_TURN_STATUS: Final[dict[LastTurn, str]] = {"open": "repairable", "interrupted": "interrupted"}
"""The sessions page's status of a row by its cached ``lastTurn`` (an open turn is one a resume closes)."""


class Inspector:
    """Read-only answers over one store for the web app (thread-safe: the app calls it from workers).

    ``cache_size`` is how many loaded sessions are kept. ``page_after`` is how many seconds a loaded
    session stays as read (the restored session, every payload in memory: a followed session is
    continued from it cheaply) before a background thread pages it out (:meth:`page_out`: its log kept
    as compressed pages of ``page_events`` seqs, a page decoded when read); ``None`` never pages on its
    own. ``stream`` (default on) loads a log a backend can stream a batch at a time, paged as it is read
    (:func:`~.streamed.load_streamed`: the whole log is never held; off, every log is read whole and
    paged out later, as ``export --html`` reads it). ``validation_gate``, when given, holds every
    background validation (:meth:`first_paint`) until
    it is set: a test sees the page while it validates. ``search`` (default on) opens the store's search
    index on the first search, creating it as ``agentlog search`` does; the store's logs are never written.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        cache_size: int = 4,
        search: bool = True,
        page_after: float | None = 2.0,
        page_events: int = PAGE_EVENTS,
        validation_gate: threading.Event | None = None,
        stream: bool = True,
    ) -> None:
        if cache_size < 1:
            raise ValueError("cache_size must be at least 1")
        if page_after is not None and page_after < 0:
            raise ValueError("page_after must be None or at least 0")
        self._page_after = page_after
        self._stream = stream
        self._page_events = page_events
        self._pager_cond = threading.Condition()
        self._pager_due: dict[str, tuple[float, LoadedSession]] = {}
        self._pager: threading.Thread | None = None
        self._closing = False
        self.backend = backend
        self.reader = PersistenceCoordinator(SessionStore(), backend, prepared_cache_size=1)
        self._cache_size = cache_size
        self._loaded: OrderedDict[str, LoadedSession] = OrderedDict()
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()
        self._memory_storage: MemoryCacheStorage | None = None
        self._rows: dict[str, tuple[str | None, dict[str, Any], bool | None]] = {}
        """``{id: (revision, row, torn)}``: a listed row at its log's revision, with the torn-tail probe
        of that revision once :meth:`refine_status` made it (``None`` before)."""
        self._rows_lock = threading.Lock()
        self._search_enabled = search
        self._search: Any = None
        self._search_lock = threading.Lock()
        self._validation_gate = validation_gate
        self._validation_lock = threading.Lock()
        self._validations: dict[str, threading.Thread] = {}
        self._failures: dict[str, tuple[str | None, BaseException]] = {}
        self._previews: dict[str, tuple[str, dict[str, Any]]] = {}
        self.loads = 0
        """How many times a log was read (tests count them: a slider move reads nothing)."""
        self.extensions = 0
        """How many times a loaded session was continued by its stored suffix instead of read again."""

    # -- loading ----------------------------------------------------------------------------------------

    def load(self, session_id: str) -> LoadedSession:
        """The session, from the LRU while its stored revision is unchanged, else continued by the
        stored suffix (:meth:`_extended`) or, when it cannot be, read again."""
        validate_session_id(session_id)
        revision = self.backend.read_revision(session_id)
        with self._lock:
            loaded = self._loaded.get(session_id)
            if loaded is not None and revision is not None and loaded.revision == revision:
                self._loaded.move_to_end(session_id)
                return loaded
        with self._load_lock:  # one read at a time: two requests for a new session read it once
            with self._lock:
                loaded = self._loaded.get(session_id)
                if loaded is not None and revision is not None and loaded.revision == revision:
                    return loaded
            extended = self._extended(loaded) if loaded is not None and revision is not None else None
            if extended is not None:
                return extended
            loaded = self._read(session_id, revision)
            self.loads += 1
            with self._lock:
                self._loaded[session_id] = loaded
                self._loaded.move_to_end(session_id)
                while len(self._loaded) > self._cache_size:
                    self._loaded.popitem(last=False)
            self._schedule_page_out(loaded)
            return loaded

    def _read(self, session_id: str, revision: str | None) -> LoadedSession:
        """The session read from the store: streamed and paged as it is read when the backend can stream
        it and the log is plainly valid (:func:`~.streamed.load_streamed`: the whole log is never held),
        else read whole and validated (``stored_view``, which also reports what is wrong with a log).
        ``revision`` (read before) is kept only if the log was not written meanwhile."""
        if self._stream:
            from .streamed import load_streamed

            streamed = load_streamed(self.reader, session_id, self._page_events)
            if streamed is not None:
                loaded, read_at = streamed
                if self.backend.read_revision(session_id) != read_at:
                    loaded.revision = None  # written since it was read: served, read again next time
                _give_back_memory()  # (the batches' freed memory, as after a page-out)
                return loaded
        for _attempt in range(3):
            stored = self.reader.stored_view(session_id, keep=False)
            after = self.backend.read_revision(session_id)
            if after == revision:
                break
            revision = after  # written while it was read: read again (the revision names these bytes)
        else:
            revision = None  # still being written: serve this read, read again on the next request
        return LoadedSession(session_id, revision, stored)

    def _extended(self, loaded: LoadedSession) -> LoadedSession | None:
        """``loaded`` continued by the events stored after it, read with a seek read (the suffix only), or
        ``None`` when it cannot be: see :func:`_extend_stored`. Caller holds the load lock."""
        if not isinstance(self.backend, SeeksStored):
            return None
        session_id = loaded.session_id
        revision = self.backend.read_revision(session_id)  # before the read: a racing append changes it again
        stored = _extend_stored(self.reader, loaded)
        if stored is None:
            return None
        if self.backend.read_revision(session_id) != revision:
            revision = None  # written while it was read: extended again on the next request
        self.extensions += 1
        extended = LoadedSession(session_id, revision, stored)
        _continue_index(loaded, extended)
        with self._lock:
            self._loaded[session_id] = extended
            self._loaded.move_to_end(session_id)
        self._schedule_page_out(extended)
        return extended

    # -- paging -----------------------------------------------------------------------------------------

    def page_out(self, session_id: str) -> LoadedSession:
        """Page the loaded session out now (loading it first if needed): see :meth:`LoadedSession.page_out`.
        The background pager does this ``page_after`` seconds after a load or a continuation."""
        loaded = self.load(session_id)
        loaded.page_out(self._page_events)
        _give_back_memory()
        return loaded

    def _schedule_page_out(self, loaded: LoadedSession) -> None:
        if self._page_after is None:
            return
        with self._pager_cond:
            if self._closing:
                return
            self._pager_due[loaded.session_id] = (time.monotonic() + self._page_after, loaded)
            if self._pager is None:
                self._pager = threading.Thread(target=self._page_loop, name="agentlog-inspector-pager", daemon=True)
                self._pager.start()
            self._pager_cond.notify()

    def _page_loop(self) -> None:
        """Pages out each loaded session once it has been left alone for ``page_after`` seconds (a session
        continued meanwhile is the newer one, scheduled again; one evicted from the cache is dropped)."""
        while True:
            with self._pager_cond:
                while not self._closing:
                    now = time.monotonic()
                    due = [sid for sid, (when, _) in self._pager_due.items() if when <= now]
                    if due:
                        break
                    wait = min((when for when, _ in self._pager_due.values()), default=None)
                    self._pager_cond.wait(None if wait is None else wait - now)
                if self._closing:
                    return
                ready = [self._pager_due.pop(sid)[1] for sid in due]
            for loaded in ready:
                with self._lock:
                    current = self._loaded.get(loaded.session_id) is loaded
                if current:
                    try:
                        loaded.page_out(self._page_events)
                    except Exception:  # pragma: no cover - kept as read; paging is only a memory saving
                        continue
                    _give_back_memory()

    # -- the sessions page ------------------------------------------------------------------------------

    def _cache(self) -> ProjectionCache:
        """The store's projection cache if it has one (stale rows refreshed in it, as ``ls`` does), else
        a memory medium kept for the server's lifetime (so a changed log is refolded from its tail): the
        inspector never creates the cache file."""
        path = cache_path_for(self.backend)
        if path is not None and os.path.isfile(path):
            storage: CacheStorage = open_cache_storage(self.backend)
            owns = True
        else:
            if self._memory_storage is None:
                self._memory_storage = MemoryCacheStorage()
            storage, owns = self._memory_storage, False
        return ProjectionCache(
            command_registry(), self.reader, storage, writer=InlineWriter(), store=SessionStore(), owns_storage=owns
        )

    def sessions(self) -> list[dict[str, Any]]:
        """Every stored session, newest activity first (ties by id), as the sessions page lists them.

        Figures come from the projection cache: a row current for the stored revision is served without
        reading the log, any other session is cold-read (the rows plus the log's tail) as ``ls`` does.
        The server keeps each row with the revision it was made for: a listing whose revisions did not
        change reads no cache record and no log. ``status`` is ``damaged`` for a header or log that cannot
        be read, ``repairable`` when the newest turn is still open (a resume closes it), ``interrupted``
        when it ended interrupted (the cached ``lastTurn`` unit), else ``ok``; a torn tail, which is not
        in the log, is told by :meth:`refine_status`.
        """
        listings = self.backend.list_sessions()
        with self._rows_lock:
            known = dict(self._rows)
            fresh = [
                item
                for item in listings
                if item.revision is None or item.id not in known or known[item.id][0] != item.revision
            ]
            if fresh:
                for row, item in zip(self._rows_of(fresh), fresh, strict=True):
                    known[item.id] = (item.revision, row, None)
            self._rows = {item.id: known[item.id] for item in listings}
            rows = [known[item.id][1] for item in listings]
        rows.sort(key=_newest_first)
        return rows

    def refine_status(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """``rows`` (a page of :meth:`sessions`) with a torn tail told: ``repairable`` when the log ends in
        a torn tail, which only a backend whose logs can tear can have and tells by reading the file's end
        (:class:`~agentlog.persistence.backend.ProbesTornTail`). The other statuses come with the rows
        (the cached ``lastTurn`` unit); each probe is kept with the row's revision."""
        if not isinstance(self.backend, ProbesTornTail):
            return list(rows)
        out = []
        for row in rows:
            if row["status"] in ("damaged", "repairable"):
                out.append(row)
                continue
            with self._rows_lock:
                entry = self._rows.get(row["id"])
            if entry is not None and entry[0] is not None and entry[2] is not None:
                torn = entry[2]
            else:
                try:
                    torn = self.backend.probe_torn_tail(row["id"])
                except AgentlogError:
                    torn = False  # damage near the end: the whole read (the session page) tells it
                with self._rows_lock:
                    if entry is not None and self._rows.get(row["id"]) is entry:  # not relisted meanwhile
                        self._rows[row["id"]] = (entry[0], entry[1], torn)
            out.append({**row, "status": "repairable"} if torn else row)
        return out

    def _rows_of(self, listings: Sequence[Any]) -> list[dict[str, Any]]:
        usable = [item for item in listings if item.error_code is None and item.header is not None]
        snapshots: dict[str, dict[str, Any] | None] = {}
        failed: dict[str, dict[str, str]] = {}
        if usable:
            cache = self._cache()
            try:
                # Served only when every registered unit's row is at the listed revision (a record written
                # before a unit was registered is refolded, once, and written back).
                served = cache.cached_snapshots(usable, current_only=True)
                for item in usable:
                    snapshot = served.get(item.id)
                    if snapshot is None:
                        try:
                            snapshot = cache.cold_snapshot(item.id)
                        except AgentlogError as err:
                            failed[item.id] = {"code": err.code, "message": str(err)}
                            snapshot = None
                    snapshots[item.id] = snapshot
            finally:
                cache.close()
        rows = []
        for item in listings:
            header = item.header or {}
            snapshot = snapshots.get(item.id)
            values = snapshot["values"] if snapshot is not None else {}
            usage = values.get("tokenUsage") if usage_known(values) else None
            pressure = values.get("contextPressure")
            error = failed.get(item.id)
            turn_status = _TURN_STATUS.get(last_turn_of(values), "ok")
            if item.error_code is not None:
                error = {"code": item.error_code, "message": item.error_message or ""}
            rows.append(
                {
                    "id": item.id,
                    "title": values.get("title"),
                    "createdAt": header.get("createdAt"),
                    "lastActivity": values.get(LAST_ACTIVITY_KEY),
                    "cwd": header.get("cwd"),
                    "parentSession": header.get("parentSession"),
                    "events": None if snapshot is None else snapshot["asOfSeq"] + 1,
                    "turns": (values.get("sessionStats") or {}).get("turns"),
                    "tokens": None if usage is None else sum(v for v in usage.values() if type(v) is int),
                    "contextPressure": thaw(pressure) if pressure is not None else None,
                    "status": "damaged" if error is not None else turn_status,
                    "error": error,
                    **dict(zip(("labels", "tags"), labels_of(values), strict=True)),
                }
            )
        return rows

    # -- the session page -------------------------------------------------------------------------------

    def summary(self, session_id: str) -> dict[str, Any]:
        """The session page's heading: header, counts, status and compactions (their seqs)."""
        loaded = self.load(session_id)
        index = loaded.index()
        return {
            "id": session_id,
            "header": thaw(loaded.header),
            "title": index.title,
            "lastSeq": loaded.last_seq,
            "storedEvents": loaded.stored_events,
            "tornTail": loaded.torn,
            "closers": loaded.closers,
            "status": _status(loaded, index),
            "turns": len(index.turn_starts),
            "compactions": list(index.compactions),
            "lastTurnEnd": index.last_turn_end,
        }

    def first_paint(self, session_id: str) -> dict[str, Any]:
        """The session page's first answer, without waiting for the whole log: a session already loaded
        gets its :meth:`summary`; any other is read and validated in the background (:meth:`load`, then
        indexed) while this answers from a seq-range read of its last :data:`PREVIEW_EVENTS` stored
        events: the header, the stored count, and ``log``, the log page of the last seqs, with ``status``
        ``validating``. Asked again, it answers the same until the validation ends, then the summary
        (``ok``, ``interrupted``, ``repairable``: what :meth:`summary` says) or, when the whole read
        failed, ``damaged`` with the ``error`` it raised and no log. The tail alone never makes a status:
        damage before it is seen only by the whole read. Without a count to place the tail (no projection
        cache row, no listing row) the answer waits for the validation."""
        validate_session_id(session_id)
        with self._lock:
            known = session_id in self._loaded
        if known:
            return self.summary(session_id)
        revision = self.backend.read_revision(session_id)
        if revision is None:
            return self.summary(session_id)  # (not found: the typed refusal)
        failure = self._failure(session_id, revision)
        if failure is not None:
            return self._damaged(session_id, failure)
        preview = self._preview(session_id, revision)
        worker = self._validate_in_background(session_id)
        if preview is not None:
            return preview
        worker.join()
        with self._lock:
            known = session_id in self._loaded
        failure = None if known else self._failure(session_id, None)
        if failure is not None:
            return self._damaged(session_id, failure)
        return self.summary(session_id)

    def wait_validated(self, session_id: str, timeout: float | None = None) -> bool:
        """Wait until the background validation :meth:`first_paint` started for ``session_id`` ends
        (``True`` when none runs); whether it has."""
        with self._validation_lock:
            worker = self._validations.get(session_id)
        if worker is not None:
            worker.join(timeout)
            return not worker.is_alive()
        return True

    def _failure(self, session_id: str, revision: str | None) -> BaseException | None:
        """The error the last background validation of ``session_id`` raised, if it was of ``revision``
        (``None``: whichever); an error that is not the store's (a bug) is raised again."""
        with self._validation_lock:
            found = self._failures.get(session_id)
        if found is None or (revision is not None and found[0] != revision):
            return None
        if not isinstance(found[1], AgentlogError):
            raise found[1]
        return found[1]

    def _damaged(self, session_id: str, error: BaseException) -> dict[str, Any]:
        code = error.code if isinstance(error, AgentlogError) else "INTERNAL_ERROR"
        return {
            "id": session_id,
            "header": None,
            "title": None,
            "lastSeq": None,
            "storedEvents": None,
            "tornTail": False,
            "closers": 0,
            "status": "damaged",
            "error": {"code": code, "message": str(error)},
            "turns": None,
            "compactions": [],
            "lastTurnEnd": None,
        }

    def _validate_in_background(self, session_id: str) -> threading.Thread:
        """The thread reading and validating ``session_id`` whole (one at a time per session)."""
        with self._validation_lock:
            worker = self._validations.get(session_id)
            if worker is None or not worker.is_alive():
                worker = threading.Thread(
                    target=self._validate, args=(session_id,), name="agentlog-inspector-validate", daemon=True
                )
                self._validations[session_id] = worker
                worker.start()
            return worker

    def _validate(self, session_id: str) -> None:
        gate = self._validation_gate
        if gate is not None:
            gate.wait()
        revision = self.backend.read_revision(session_id)
        try:
            self.load(session_id).index()
        except Exception as err:  # kept for the page: a store error is "damaged", another is raised there
            with self._validation_lock:
                self._failures[session_id] = (revision, err)
        else:
            with self._validation_lock:
                self._failures.pop(session_id, None)
        finally:
            with self._validation_lock:
                self._previews.pop(session_id, None)

    def _preview(self, session_id: str, revision: str) -> dict[str, Any] | None:
        """The first paint of a session not validated yet (kept while its revision holds), or ``None``
        when there is no count to place its tail or the tail cannot be read."""
        with self._validation_lock:
            kept = self._previews.get(session_id)
        if kept is not None and kept[0] == revision:
            return kept[1]
        known = self._known_count(session_id)
        if known is None:
            return None
        count, values = known
        try:
            tail = self.reader.read_from(session_id, max(0, count - PREVIEW_EVENTS))
        except AgentlogError:
            return None  # (the whole read tells what is wrong)
        events = list(tail.events)
        if not events:
            return None  # a log shorter than the count said: rewritten, the whole read serves it
        first, last = events[0]["seq"], events[-1]["seq"]
        index = _Index()
        _index_pass(index, events, None)
        by_seq = {event["seq"]: event for event in events}
        page = _page(session_id, by_seq, index, max(first, last - PREVIEW_BACK), last, last, DEFAULT_PAGE_LIMIT)
        current = count == last + 1  # the cached figures are of exactly these events
        preview = {
            "id": session_id,
            "header": thaw(tail.meta),
            "title": values.get("title"),
            "lastSeq": last,
            "storedEvents": last + 1,
            "tornTail": False,
            "closers": 0,
            "status": "validating",
            "turns": (values.get("sessionStats") or {}).get("turns") if current else None,
            "compactions": [],
            "lastTurnEnd": None,
            "log": page,
        }
        with self._validation_lock:
            self._previews[session_id] = (revision, preview)
        return preview

    def _known_count(self, session_id: str) -> tuple[int, Mapping[str, Any]] | None:
        """The stored event count (and the cached values) the listing or the projection cache knows for
        ``session_id``, maybe behind the log (the tail read reads on to its end); ``None`` if neither."""
        with self._rows_lock:
            row = self._rows.get(session_id)
        if row is not None and type(row[1]["events"]) is int:
            return row[1]["events"], {"title": row[1]["title"], "sessionStats": {"turns": row[1]["turns"]}}
        cache = self._cache()
        try:
            header = self.reader.read_from(session_id, MAX_SAFE_INTEGER).meta
            snapshot = cache.cached_snapshot(header)
        except AgentlogError:
            return None
        finally:
            cache.close()
        if snapshot is None:
            return None
        return int(snapshot["asOfSeq"]) + 1, snapshot["values"]

    def log_page(self, session_id: str, from_seq: int = 0, limit: int = DEFAULT_PAGE_LIMIT) -> dict[str, Any]:
        """Up to ``limit`` log items from ``from_seq``: each event with its rendering hints, a run of
        ``assistant/chunk`` events folded into one ``chunks`` item. ``nextSeq`` continues the log
        (``None`` at its end)."""
        if type(limit) is not int or not 1 <= limit <= MAX_PAGE_LIMIT:
            raise InspectorRequestError(f"limit must be an integer in [1, {MAX_PAGE_LIMIT}], got {limit!r}")
        loaded = self.load(session_id)
        events = loaded.events
        last = len(events) - 1
        if from_seq > last:
            raise SeqOutOfRangeError(f"seq {from_seq} is past the log's last seq {last}")
        return _page(session_id, events, loaded.index(), from_seq, last, loaded.last_stored_seq, limit)

    def event(self, session_id: str, seq: int) -> dict[str, Any]:
        """One event whole (strings cut only past :data:`EVENT_CLIP_CHARS` characters)."""
        loaded = self.load(session_id)
        events = loaded.events
        if seq > len(events) - 1:
            raise SeqOutOfRangeError(f"seq {seq} is past the log's last seq {len(events) - 1}")
        value, clipped = _clip(events[seq], EVENT_CLIP_CHARS)
        return {"sessionId": session_id, "seq": seq, "event": value, "clipped": clipped}

    def state_at(
        self,
        session_id: str,
        seq: int,
        *,
        messages_from: int | None = None,
        limit: int = DEFAULT_STATE_WINDOW,
        shadowed_between: tuple[int, int] | None = None,
    ) -> dict[str, Any]:
        """The session right after ``seq``: ``session.at(seq)``'s surface with provenance, its derived
        messages exactly, the request header and context. Nothing is re-executed: the prefix of the
        loaded log is folded (``SEQ_OUT_OF_RANGE`` past its last seq).

        A long context is served a window at a time: ``limit`` messages from index ``messages_from``
        (default: the newest ``limit``) and the surface nodes they come from, with the totals
        (``messageCount``, ``surfaceCount``) and where the window starts (``messagesFrom``,
        ``surfaceFrom``). ``shadowed`` lists the shadowed seqs (all of them, or those in
        ``shadowed_between``'s inclusive range: the log page the caller shows).
        """
        if type(limit) is not int or not 1 <= limit <= MAX_STATE_WINDOW:
            raise InspectorRequestError(f"limit must be an integer in [1, {MAX_STATE_WINDOW}], got {limit!r}")
        loaded = self.load(session_id)
        events = loaded.events
        if seq > len(events) - 1:
            raise SeqOutOfRangeError(f"seq {seq} is past the log's last seq {len(events) - 1}")
        nodes, message_seqs = loaded.surface_at(seq)
        count = len(message_seqs)
        start = max(0, count - limit) if messages_from is None else min(messages_from, count)
        end = min(count, start + limit)
        # The window's nodes: after the previous window's last message node, through its own last one
        # (the last window through the end), so a node that derives no message belongs to one window.
        if message_seqs is nodes:  # every node derives its message: positions are indexes
            surface_from, surface_to = start, end
        else:
            surface_from = 0 if start == 0 else nodes.index(message_seqs[start - 1]) + 1
            surface_to = len(nodes) if end >= count else nodes.index(message_seqs[end - 1]) + 1
        replacements = {r.seq: r for r in loaded.timeline().replacements_through(seq)}
        shadowed: list[int] = []
        for replacement in replacements.values():
            shadowed.extend(replacement.shadowed_seqs)
        if shadowed_between is not None:
            low, high = shadowed_between
            shadowed = [s for s in shadowed if low <= s <= high]
        surface = [_node(events, node, replacements.get(node)) for node in nodes[surface_from:surface_to]]
        return {
            "sessionId": session_id,
            "seq": seq,
            "lastSeq": loaded.last_seq,
            "event": {"type": events[seq]["type"]},
            "surface": surface,
            "surfaceCount": len(nodes),
            "surfaceFrom": surface_from,
            "replacements": [
                {"seq": r.seq, "start": r.start, "end": r.end, "shadowedCount": len(r.shadowed_seqs)}
                for r in sorted(replacements.values(), key=lambda r: r.seq)
            ],
            "shadowed": sorted(set(shadowed)),
            "messages": thaw([derive_event_message(events[node]) for node in message_seqs[start:end]]),
            "messageSeqs": message_seqs[start:end],
            "messageCount": count,
            "messagesFrom": start,
            "requestHeader": self._request_header(loaded, seq),
            "requestContext": self._request_context(loaded, seq),
        }

    @staticmethod
    def _request_header(loaded: LoadedSession, seq: int) -> Any:
        """``view.at(seq).request_header()`` without scanning the prefix: the header is the canonical
        snapshot of the last ``request/header`` at or before ``seq`` (the kernel's fold, given that one
        event), found in the loaded session's index."""
        index = loaded.index()
        at = bisect.bisect_right(index.header_seqs, seq) - 1
        if at < 0:
            return None
        return thaw(fold_request_header([loaded.events[index.header_seqs[at]]]))

    @staticmethod
    def _request_context(loaded: LoadedSession, seq: int) -> Any:
        """``view.at(seq).request_context()`` without slicing the prefix: the data of the last
        ``request/context`` at or before ``seq`` (the kernel's answer, a frozen copy of it), found in the
        loaded session's index."""
        index = loaded.index()
        at = bisect.bisect_right(index.context_seqs, seq) - 1
        if at < 0:
            return None
        return thaw(loaded.events[index.context_seqs[at]]["data"])

    # -- charts -----------------------------------------------------------------------------------------

    def charts(self, session_id: str) -> dict[str, Any]:
        """Context pressure over seqs with the compactions, tokens per turn, tool time per step (folded
        once per loaded session: the first call reads the whole log through three projection units)."""
        return {"sessionId": session_id, **self.load(session_id).charts()}

    # -- diff -------------------------------------------------------------------------------------------

    def diff(self, session_id: str, from_seq: int, to_seq: int) -> dict[str, Any]:
        """How the derived messages changed from ``session.at(from_seq)`` to ``session.at(to_seq)``.

        ``ops`` are :class:`difflib.SequenceMatcher` opcodes over the two message lists (messages compared
        by their JSON text): ``equal`` runs give their index ranges only, ``delete``/``insert``/``replace``
        also the messages removed and added (at most :data:`MAX_DIFF_MESSAGES` of each per op, with
        ``truncated``), each with the seq of the surface node it comes from.
        """
        loaded = self.load(session_id)
        sides = []
        events = loaded.events
        for seq in (from_seq, to_seq):
            if seq > len(events) - 1:
                raise SeqOutOfRangeError(f"seq {seq} is past the log's last seq {len(events) - 1}")
            _nodes, seqs = loaded.surface_at(seq)
            sides.append(([derive_event_message(events[node]) for node in seqs], seqs))
        (before, before_seqs), (after, after_seqs) = sides
        keys_before = [orjson.dumps(m, option=orjson.OPT_SORT_KEYS) for m in before]
        keys_after = [orjson.dumps(m, option=orjson.OPT_SORT_KEYS) for m in after]
        ops: list[dict[str, Any]] = []
        matcher = difflib.SequenceMatcher(None, keys_before, keys_after, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            op: dict[str, Any] = {"op": tag, "from": [i1, i2], "to": [j1, j2]}
            if tag != "equal":
                op["removed"] = [
                    {"index": i, "seq": before_seqs[i], "message": thaw(before[i])}
                    for i in range(i1, min(i2, i1 + MAX_DIFF_MESSAGES))
                ]
                op["added"] = [
                    {"index": j, "seq": after_seqs[j], "message": thaw(after[j])}
                    for j in range(j1, min(j2, j1 + MAX_DIFF_MESSAGES))
                ]
                op["truncated"] = i2 - i1 > MAX_DIFF_MESSAGES or j2 - j1 > MAX_DIFF_MESSAGES
            ops.append(op)
        return {
            "sessionId": session_id,
            "fromSeq": from_seq,
            "toSeq": to_seq,
            "fromCount": len(before),
            "toCount": len(after),
            "ops": ops,
        }

    # -- export -----------------------------------------------------------------------------------------

    def export_document(
        self, session_id: str, *, redact: Redactor | Callable[[str], str] | None = None
    ) -> dict[str, Any]:
        """Everything the session page shows, for ``agentlog export ID --html``: see
        :func:`agentlog.inspector.export.build_document` (``head`` parsed when the file opens, ``blocks``
        parsed on first use).

        ``redact`` (a :class:`~agentlog.projection.redaction.Redactor`, or any ``str -> str`` function)
        rewrites the content taken from the log and the header — every string of event data, and tool
        output dropped first when the redactor says so — before anything is derived from it: a hook to
        remove secrets before the file leaves the machine.
        """
        from .export import build_document

        return build_document(self, session_id, redact)

    # -- lineage ----------------------------------------------------------------------------------------

    def fork_tree(self, session_id: str) -> dict[str, Any]:
        """The fork tree ``session_id`` belongs to, from its root (or the first ancestor missing from the
        store) down, as :meth:`agentlog.query.SessionQuery.trace_session` traces it: ``{target, rootId,
        complete, unresolvedParentId, tree}``, each tree node ``{id, createdAt, parentSession,
        seedLength, origin, delegationDepth, children}`` (children by creation time, then id; a subagent's
        ``origin`` is ``"subagent"``, ``delegationDepth`` the header's, 0 for a top-level session)."""
        validate_session_id(session_id)
        from ..kernel.lineage import delegation_depth_of
        from ..query.engine import SessionQuery

        query = SessionQuery(self.reader)
        try:
            trace = query.trace_session(session_id)
            ancestors = trace["ancestors"]
            top = ancestors[-1]["header"] if ancestors else trace["target"]["header"]
            whole = query.trace_session(top["id"]) if top["id"] != session_id else trace
        finally:
            query.close()

        def node(header: Mapping[str, Any], descendants: list[Any]) -> dict[str, Any]:
            return {
                "id": header["id"],
                "createdAt": header.get("createdAt"),
                "parentSession": header.get("parentSession"),
                "seedLength": header.get("seedLength"),
                "origin": header.get("origin"),
                "delegationDepth": delegation_depth_of(header),
                "children": [node(child["session"]["header"], child["descendants"]) for child in descendants],
            }

        return {
            "target": session_id,
            "rootId": top["id"],
            "complete": bool(trace["complete"]),
            "unresolvedParentId": trace.get("unresolvedParentId"),
            "tree": node(whole["target"]["header"], whole["descendants"]),
        }

    # -- search -----------------------------------------------------------------------------------------

    def search(
        self, query: str, *, session_id: str | None = None, limit: int = 20, cursor: str | None = None
    ) -> dict[str, Any]:
        """The store's search index: sessions (their best hit each), or one session's events. Hits carry
        ``sessionId``, ``seq``, ``type``, ``surface`` and a plain-text ``snippet``; ``nextCursor`` pages."""
        if not self._search_enabled:
            raise InspectorRequestError("search is disabled for this server", "INSPECTOR_NOT_FOUND")
        search = self._searcher()
        if session_id is not None:
            validate_session_id(session_id)
            page = search.search_events(session_id=session_id, query=query, limit=limit, cursor=cursor)
            return {"items": page["items"], "nextCursor": page.get("nextCursor")}
        page = search.search_sessions(query=query, limit=limit, cursor=cursor)
        return {"items": page["items"], "nextCursor": page.get("nextCursor")}

    def _searcher(self) -> Any:
        with self._search_lock:
            if self._search is None:
                from ..query.provider import open_store_search

                self._search = open_store_search(self.reader, open_at="first-search", max_limit=100)
            return self._search

    def close(self) -> None:
        with self._pager_cond:
            self._closing = True
            self._pager_due.clear()
            self._pager_cond.notify()
            pager = self._pager
        if pager is not None:
            pager.join()
        with self._search_lock:
            if self._search is not None:
                self._search.close()
                self._search = None
        with self._lock:
            self._loaded.clear()
        if self._memory_storage is not None:
            self._memory_storage.close()
        self.reader.close()


def _page(
    session_id: str,
    events: Sequence[Any] | Mapping[int, Any],
    index: _Index,
    from_seq: int,
    last: int,
    last_stored: int,
    limit: int,
) -> dict[str, Any]:
    """A log page of ``events`` (looked up by seq) from ``from_seq``: see :meth:`Inspector.log_page`."""
    items: list[dict[str, Any]] = []
    seq = from_seq
    stop = min(last, from_seq + MAX_EVENTS_PER_PAGE - 1)
    while seq <= stop and len(items) < limit:
        event = events[seq]
        if event["type"] == ASSISTANT_CHUNK:
            run = [event]  # (each chunk read once: on a restored log a read builds a packed run's members)
            end = seq
            while end + 1 <= stop:
                following = events[end + 1]
                if following["type"] != ASSISTANT_CHUNK:
                    break
                run.append(following)
                end += 1
            items.append(_chunk_item(run, seq, end, last_stored))
            seq = end + 1
            continue
        items.append(_event_item(event, seq, index, events, last_stored))
        seq += 1
    return {
        "sessionId": session_id,
        "fromSeq": from_seq,
        "nextSeq": seq if seq <= last else None,
        "lastSeq": last,
        "items": items,
    }


def _newest_first(row: Mapping[str, Any]) -> tuple[int, str]:
    when = row["lastActivity"] if type(row["lastActivity"]) is int else row["createdAt"]
    return (-(when if type(when) is int else 0), str(row["id"]))


def _turn_step(index: _Index, seq: int, data: Any) -> tuple[Any, Any]:
    turn = data.get("turn") if isinstance(data, Mapping) else None
    step = data.get("step") if isinstance(data, Mapping) else None
    if turn is None:  # the turn open at seq: an event after its end and before the next start has none
        at = bisect.bisect_right(index.turn_starts, seq) - 1
        if at >= 0 and not _ended_between(index.turn_ends, index.turn_starts[at], seq):
            turn = index.turn_numbers[at]
    if step is None and turn is not None:
        at = bisect.bisect_right(index.step_starts, seq) - 1
        if (
            at >= 0
            and index.step_numbers[at][0] == turn
            and index.step_starts[at] >= _turn_start(index, seq)
            and not _ended_between(index.step_ends, index.step_starts[at], seq)
        ):
            step = index.step_numbers[at][1]
    return turn, step


def _ended_between(ends: list[int], start: int, seq: int) -> bool:
    """Whether one of ``ends`` (sorted seqs) lies strictly between ``start`` and ``seq``."""
    at = bisect.bisect_right(ends, start)
    return at < len(ends) and ends[at] < seq


def _turn_start(index: _Index, seq: int) -> int:
    at = bisect.bisect_right(index.turn_starts, seq) - 1
    return index.turn_starts[at] if at >= 0 else -1


def _event_item(
    event: Mapping[str, Any], seq: int, index: _Index, events: Sequence[Any] | Mapping[int, Any], last_stored: int
) -> dict[str, Any]:
    etype = event["type"]
    data = event.get("data")
    turn, step = _turn_step(index, seq, data)
    kind = _KINDS.get(etype, "compaction" if etype.startswith("compaction/") else "other")
    value, clipped = _clip(data)  # (a plain copy, as thaw makes one)
    item: dict[str, Any] = {
        "kind": kind,
        "seq": seq,
        "type": etype,
        "time": event.get("time"),
        "turn": turn,
        "step": step,
        "data": value,
        "clipped": clipped,
    }
    if event.get("surfaceOp") is not None:
        item["surfaceOp"] = thaw(event["surfaceOp"])
    if event.get("sourceEventSeqs") is not None:
        item["sourceEventSeqs"] = thaw(event["sourceEventSeqs"])
    role = _role(event)
    if role is not None:
        item["role"] = role
        text, cut = _clip(_message_text(event))
        item["text"] = text
        item["clipped"] = clipped or cut
    if seq > last_stored:
        item["pending"] = True  # a closer a resume would add: not stored yet
    if etype == TOOL_CALL and isinstance(data, Mapping):
        item["callId"] = data.get("callId")
        item["name"] = data.get("name")
        item["pairedSeq"] = index.results.get(str(data.get("callId")))
    elif etype == TOOL_RESULT and isinstance(data, Mapping):
        message = data.get("message")
        source = message.get("source") if isinstance(message, Mapping) else None
        call_id = source.get("callId") if isinstance(source, Mapping) else None
        item["callId"] = call_id
        item["pairedSeq"] = index.calls.get(call_id) if isinstance(call_id, str) else None
        error = data.get("error")
        code = error.get("code") if isinstance(error, Mapping) else None
        if code in CLOSER_CODES:
            item["closer"] = code
    elif etype == ASSISTANT_MESSAGE and isinstance(data, Mapping):
        message = data.get("message")
        content = message.get("content") if isinstance(message, Mapping) else None
        calls = [
            block.get("id")
            for block in content or ()
            if isinstance(block, Mapping) and block.get("type") == "tool-call"
        ]
        if calls:
            item["toolCalls"] = [{"callId": c, "callSeq": index.calls.get(str(c))} for c in calls]
    mark = mark_of(events, seq) if etype in (USER_MESSAGE, TOOL_RESULT) else None
    if mark is not None:
        item["mark"] = mark.to_json()
    return item


def _chunk_item(run: Sequence[Any], first: int, last: int, last_stored: int) -> dict[str, Any]:
    """A run of streamed chunks (``run``: the events of seqs ``first..last``) folded into one item: its
    text and reasoning joined, tool-call deltas and other chunk types counted (the assembled message is
    the ``assistant/message`` after the run)."""
    text: list[str] = []
    reasoning: list[str] = []
    counts: dict[str, int] = {}
    head = run[0]
    for event in run:
        chunk = event["data"].get("chunk")
        ctype = chunk.get("type") if isinstance(chunk, dict) or isinstance(chunk, Mapping) else None
        counts[str(ctype)] = counts.get(str(ctype), 0) + 1
        if ctype == "text-delta" and isinstance(chunk.get("text"), str):
            text.append(chunk["text"])
        elif ctype == "reasoning-delta" and isinstance(chunk.get("text"), str):
            reasoning.append(chunk["text"])
    joined, clipped = _clip({"text": "".join(text), "reasoning": "".join(reasoning)})
    item: dict[str, Any] = {
        "kind": "chunks",
        "seq": first,
        "lastSeq": last,
        "count": last - first + 1,
        "type": ASSISTANT_CHUNK,
        "time": head.get("time"),
        "turn": head["data"].get("turn"),
        "step": head["data"].get("step"),
        "text": joined["text"],
        "reasoning": joined["reasoning"],
        "chunkTypes": counts,
        "clipped": clipped,
    }
    if last > last_stored:
        item["pending"] = True
    return item


def _shadowed(events: Sequence[Any], seq: int) -> dict[str, Any]:
    event = events[seq]
    return {"seq": seq, "type": event["type"], "role": _role(event), "text": _clip(_message_text(event), 400)[0]}


def _node(events: Sequence[Any], seq: int, replacement: Any) -> dict[str, Any]:
    """One surface node: its event, a preview of its message, and its provenance."""
    event = events[seq]
    text, clipped = _clip(_message_text(event))
    node: dict[str, Any] = {
        "seq": seq,
        "type": event["type"],
        "role": _role(event),
        "text": text,
        "clipped": clipped,
    }
    if replacement is not None:
        node["replaces"] = {
            "start": replacement.start,
            "end": replacement.end,
            "shadowedSeqs": list(replacement.shadowed_seqs),
            "shadowed": [_shadowed(events, s) for s in replacement.shadowed_seqs[:MAX_SHADOWED_SHOWN]],
        }
    mark = mark_of(events, seq) if event["type"] in (USER_MESSAGE, TOOL_RESULT) else None
    if isinstance(mark, CheckpointMark):
        summary_text = None
        if mark.summary_seq is not None and 0 <= mark.summary_seq < len(events):
            summary = events[mark.summary_seq]
            if summary["type"] == COMPACTION_SUMMARY:
                summary_text = _text_of(summary["data"].get("summary"))
        node["checkpoint"] = {**mark.to_json(), "summary": summary_text}
    elif isinstance(mark, PruneMark):
        node["pruned"] = mark.to_json()
    return node
