"""The query engine: one logical corpus of live and stored sessions (runtime spec §4.1).

Why it is built this way:

* **Live wins, and a live read never touches storage.** A session that is live in the engine's
  :class:`~agentlog.kernel.store.SessionStore` is read from memory and persistence is not consulted at
  all, so a failing backend cannot make current in-memory history unreadable. A stored session is read
  with :meth:`PersistenceCoordinator.inspect` — non-mutating, never crash-repairs, never takes the writer
  lock — so the query path never writes the store, even for a log another process is writing.
* **One observation per answer.** Every read resolves its source once (header and events together) and
  returns plain JSON deep copies (``thaw``): callers may mutate results freely, and a header is always
  the one that goes with the events it came with. A stored header is checked against its listing, and a
  live header against the stored one, on the immutable fields (:func:`assert_headers_compatible`): two
  observations of one id that disagree are a ``SESSION_QUERY_SOURCE_CONFLICT``, never silently merged.
* **Synchronous, cancellable between calls.** The backends are synchronous, so is this API. Every public
  read takes an optional keyword ``signal`` (anything with ``is_set()``, e.g. ``threading.Event``),
  checked before and after each backend call: a started call is allowed to finish (it cannot be
  interrupted), then the abort surfaces as ``SESSION_QUERY_ABORTED`` and nothing further starts.
* **Persistence is optional and dynamic.** The binding can be mounted, replaced and unmounted at run
  time (:meth:`SessionQuery.bind_persistence`, the original's optional ``sessionPersistence``
  service); each operation uses the binding current when it starts, and ``binding_epoch`` counts the
  changes so a derived index (the SQLite provider subclass) can tell that its topology changed.
* **A damaged listing is not part of the corpus.** A stored entry whose header cannot be read
  (``not listing.ok``) cannot be compared or loaded; it is left out instead of failing every listing of a
  store over one bad file (the original has no damaged-listing concept).

Surface classification, replacement links and lineage are computed here from one ``fold_surface``
replay per read; the semantic documents and filters come from the pure :mod:`.documents` and
:mod:`.filters` modules.
"""

from __future__ import annotations

import threading
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, Protocol, Self, TypeVar

from ..errors import AgentlogError, SessionPersistenceCorruptionError, SessionQueryError, SurfaceError
from ..kernel.events import TOOL_RESULT
from ..kernel.jsonvalue import MAX_SAFE_INTEGER, thaw
from ..kernel.session import Session
from ..kernel.store import SessionStore
from ..kernel.surface import fold_surface
from ..persistence.coordinator import PersistenceCoordinator, SessionSnapshot
from ..projection.title import fold_session_title
from .documents import build_documents
from .filters import (
    apply_event_filters,
    apply_session_filters,
    materialize_event_filters,
    materialize_session_filters,
)

__all__ = [
    "DEFAULT_PERSISTED_INSPECT_CONCURRENCY",
    "READ_WINDOW_MAX",
    "SessionQuery",
    "Signal",
    "assert_headers_compatible",
    "header_copy",
    "js_integer",
    "session_order_key",
]

#: Default maximum ``before``/``after`` raw-event window of :meth:`SessionQuery.read_event`.
READ_WINDOW_MAX: Final = 50
#: Default maximum number of concurrent stored-log inspections in one title batch.
DEFAULT_PERSISTED_INSPECT_CONCURRENCY: Final = 4

_ABORTED = "SESSION_QUERY_ABORTED"
_CORRUPT = "SESSION_QUERY_CORRUPT_SESSION"
_NOT_FOUND = "SESSION_QUERY_SESSION_NOT_FOUND"
_EVENT_NOT_FOUND = "SESSION_QUERY_EVENT_NOT_FOUND"
_INVALID_CONFIG = "SESSION_QUERY_INVALID_CONFIG"
_INVALID_LINEAGE = "SESSION_QUERY_INVALID_LINEAGE"
_INVALID_SURFACE = "SESSION_QUERY_INVALID_SURFACE"
_INVALID_WINDOW = "SESSION_QUERY_INVALID_WINDOW"
_PERSISTENCE_FAILED = "SESSION_QUERY_PERSISTENCE_FAILED"
_SOURCE_CONFLICT = "SESSION_QUERY_SOURCE_CONFLICT"

_ABSENT: Final = object()

Json = dict[str, Any]
_V = TypeVar("_V")


class Signal(Protocol):
    """A cancellation flag: ``threading.Event`` and ``asyncio.Event`` both qualify."""

    def is_set(self) -> bool: ...


# --- shared helpers (also used by the SQLite provider) ---------------------------------------------------


def header_copy(header: Mapping[str, Any]) -> Json:
    """A plain, mutable deep copy of a (possibly frozen) session header."""
    copied: Json = thaw(header if isinstance(header, dict) else dict(header))
    return copied


def assert_headers_compatible(a: Mapping[str, Any], b: Mapping[str, Any]) -> None:
    """Refuse two observations of one logical session whose immutable header fields differ.

    ``version``, ``id``, ``createdAt``, ``cwd``, ``parentSession`` and ``seedLength`` must be equal (an
    absent field equals only an absent field); ``delegationDepth`` treats absent as 0. Anything else
    (``agentPreset``, ``origin``) may differ: it is not identity.
    """
    for key in ("version", "id", "createdAt", "cwd", "parentSession", "seedLength"):
        if not _same(a.get(key, _ABSENT), b.get(key, _ABSENT)):
            raise _conflict(a)
    if not _same(_depth(a), _depth(b)):
        raise _conflict(a)


def _same(x: object, y: object) -> bool:
    """JavaScript ``===`` on JSON scalars: a boolean never equals a number (Python's ``True == 1``)."""
    if isinstance(x, bool) or isinstance(y, bool):
        return x is y
    return x is y or x == y


def _depth(header: Mapping[str, Any]) -> object:
    value = header.get("delegationDepth")
    return 0 if value is None else value


def _conflict(header: Mapping[str, Any]) -> SessionQueryError:
    return SessionQueryError(f'session source headers conflict for session "{header.get("id")}"', _SOURCE_CONFLICT)


def _char_rank(char: str) -> tuple[int, str]:
    """One character's primary weight, approximating the root collation of ``localeCompare``:
    spaces and punctuation before digits before letters, letters case-insensitively and with their
    accents folded away."""
    if char.isspace():
        return (0, char)
    if char.isdigit():
        return (2, char)
    if char.isalpha():
        base = unicodedata.normalize("NFKD", char)
        stripped = "".join(c for c in base if not unicodedata.combining(c)) or char
        return (3, stripped.casefold())
    if unicodedata.category(char)[0] in "PS":
        return (1, char)
    return (4, char)


def _id_key(session_id: str) -> tuple[Any, ...]:
    """An order on ids like the original's ``localeCompare``: primary weights first, then lowercase
    before uppercase, then code points (so the order is total and deterministic)."""
    return (
        tuple(_char_rank(c) for c in session_id),
        tuple(not c.islower() for c in session_id),
        session_id,
    )


def session_order_key(record: Mapping[str, Any]) -> tuple[Any, ...]:
    """The corpus order: ``createdAt`` newest first, ties by id ascending (locale-like compare)."""
    header = record["header"]
    return (-header["createdAt"], _id_key(header["id"]))


def _child_order_key(record: Mapping[str, Any]) -> tuple[Any, ...]:
    header = record["header"]
    return (header["createdAt"], _id_key(header["id"]))


def _message(err: BaseException) -> str:
    """The failure text the original interpolates (``error.message``)."""
    text = err.message if isinstance(err, AgentlogError) else str(err)
    return text or type(err).__name__


def _not_found(session_id: object) -> SessionQueryError:
    return SessionQueryError(f'session "{session_id}" not found', _NOT_FOUND)


def _event_not_found(session_id: str, seq: object) -> SessionQueryError:
    return SessionQueryError(f'session "{session_id}" has no event at seq {seq}', _EVENT_NOT_FOUND)


def _invalid_surface(err: BaseException) -> SessionQueryError:
    failure = SessionQueryError(f"invalid session surface: {_message(err)}", _INVALID_SURFACE)
    failure.__cause__ = err
    return failure


def js_integer(value: object) -> int | None:
    """``value`` as an int when JavaScript's ``Number.isInteger`` would accept it, else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _record_copy(record: Mapping[str, Any]) -> Json:
    return {"header": header_copy(record["header"]), "live": record["live"], "persisted": record["persisted"]}


# --- surface analysis -------------------------------------------------------------------------------------


class _Analysis:
    """One fold of a whole log: per-event records and the replacement links between events."""

    __slots__ = ("current", "records", "replaced_by", "replaced_seqs")

    def __init__(self, session_id: str, events: Sequence[Mapping[str, Any]]) -> None:
        try:
            folded = fold_surface(events)
        except Exception as err:  # SurfaceError, or a malformed event the fold tripped over
            raise _invalid_surface(err) from err
        self.current: list[int] = list(folded.nodes)
        self.replaced_by: dict[int, int] = {}
        self.replaced_seqs: dict[int, list[int]] = {}
        for replacement in folded.replacements:
            self.replaced_seqs[replacement.seq] = list(replacement.shadowed_seqs)
            for removed in replacement.shadowed_seqs:
                self.replaced_by[removed] = replacement.seq
        current = set(self.current)
        self.records: list[Json] = [
            {
                "sessionId": session_id,
                "seq": event["seq"],
                "type": event["type"],
                "time": event["time"],
                "surface": "current"
                if event["seq"] in current
                else "shadowed"
                if event["seq"] in self.replaced_by
                else "log-only",
            }
            for event in events
        ]


def _sources(event: Mapping[str, Any]) -> list[Any]:
    sources = event.get("sourceEventSeqs")
    return list(sources) if isinstance(sources, (list, tuple)) else []


def _delegated_answer(event: Mapping[str, Any]) -> Json | None:
    """Where a delegated tool result's answer came from: ``{sessionId, seqs}`` of its ``meta.subagent``
    (the child session and the seq range of its answer), or ``None``."""
    if event.get("type") != TOOL_RESULT:
        return None
    meta = event["data"].get("meta")
    record = meta.get("subagent") if isinstance(meta, Mapping) else None
    if not isinstance(record, Mapping) or not isinstance(record.get("sessionId"), str):
        return None
    seqs = record.get("seqs")
    if not (isinstance(seqs, Sequence) and len(seqs) == 2 and all(type(s) is int for s in seqs)):
        return None
    return {"sessionId": record["sessionId"], "seqs": [seqs[0], seqs[1]]}


def _target(session_id: str, events: Sequence[Mapping[str, Any]], seq: object) -> Mapping[str, Any]:
    index = js_integer(seq)
    if index is None or not 0 <= index < len(events) or events[index].get("seq") != index:
        raise _event_not_found(session_id, seq)
    return events[index]


# --- the engine -------------------------------------------------------------------------------------------


class SessionQuery:
    """Exact reads, filters and traces over the live-preferred logical corpus (runtime spec §4.1).

    ``SessionQuery(coordinator)`` reads the coordinator's store and its stored sessions;
    ``SessionQuery(store=store)`` reads live sessions only until persistence is bound.
    """

    def __init__(
        self,
        coordinator: PersistenceCoordinator | None = None,
        *,
        store: SessionStore | None = None,
        read_window_max: int = READ_WINDOW_MAX,
        persisted_inspect_concurrency: int = DEFAULT_PERSISTED_INSPECT_CONCURRENCY,
    ) -> None:
        window = js_integer(read_window_max)
        if window is None or window < 0:
            raise SessionQueryError("session-query: readWindowMax must be a non-negative integer", _INVALID_CONFIG)
        concurrency = js_integer(persisted_inspect_concurrency)
        if concurrency is None or not 1 <= concurrency <= MAX_SAFE_INTEGER:
            raise SessionQueryError(
                "session-query: persistedInspectConcurrency must be a positive safe integer", _INVALID_CONFIG
            )
        if store is None:
            if coordinator is None:
                raise SessionQueryError(
                    "session-query: a session store or a persistence coordinator is required", _INVALID_CONFIG
                )
            store = coordinator.store
        self._store = store
        self._read_window_max = window
        self._inspect_concurrency = concurrency
        self._binding_lock = threading.Lock()
        self._persistence: PersistenceCoordinator | None = None
        self._binding_epoch = 0
        if coordinator is not None:
            self.bind_persistence(coordinator)

    # -- configuration -------------------------------------------------------------------------------
    @property
    def store(self) -> SessionStore:
        """The store whose sessions are the live part of the corpus."""
        return self._store

    @property
    def persistence(self) -> PersistenceCoordinator | None:
        """The persistence binding in use now, or ``None`` (live sessions only)."""
        return self._persistence

    @property
    def binding_epoch(self) -> int:
        """How many times the persistence binding has changed (mount, replace, unmount)."""
        return self._binding_epoch

    @property
    def read_window_max(self) -> int:
        return self._read_window_max

    @property
    def persisted_inspect_concurrency(self) -> int:
        return self._inspect_concurrency

    def bind_persistence(self, coordinator: PersistenceCoordinator | None) -> None:
        """Mount (or replace) the persistence binding, or unmount it with ``None``.

        Operations already running keep the binding they started with. The coordinator must persist
        this engine's store: a corpus merging one store's live sessions with another store's logs would
        pair sessions that are not the same.
        """
        if coordinator is not None and coordinator.store is not self._store:
            raise SessionQueryError(
                "session-query: the persistence coordinator must belong to the query's session store",
                _INVALID_CONFIG,
            )
        with self._binding_lock:
            if coordinator is self._persistence:
                return
            self._persistence = coordinator
            self._binding_epoch += 1

    def close(self) -> None:
        """Release the persistence binding (idempotent); live reads keep working."""
        self.bind_persistence(None)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- protected helpers (the SQLite provider builds on these) ----------------------------------------
    @staticmethod
    def _check_signal(signal: Signal | None) -> None:
        """Raise ``SESSION_QUERY_ABORTED`` when ``signal`` is set."""
        if signal is not None and signal.is_set():
            raise SessionQueryError("session query aborted", _ABORTED)

    def _live_sessions(self) -> dict[str, Session]:
        """The live sessions of the store, by id."""
        return {session.id: session for session in self._store.list()}

    def _live(self, session_id: object) -> Session | None:
        return self._store.get(session_id) if isinstance(session_id, str) else None

    def _persisted_headers(
        self, persistence: PersistenceCoordinator, signal: Signal | None
    ) -> dict[str, Mapping[str, Any]]:
        """The readable stored headers by id (damaged listings left out); failures → PERSISTENCE_FAILED."""
        self._check_signal(signal)
        try:
            listings = persistence.list()
        except Exception as err:
            self._check_signal(signal)
            raise SessionQueryError(
                f"session persistence listing failed: {_message(err)}", _PERSISTENCE_FAILED
            ) from err
        self._check_signal(signal)
        return {
            listing.id: listing.header for listing in listings if listing.ok and isinstance(listing.header, Mapping)
        }

    def _inspect(self, persistence: PersistenceCoordinator, session_id: str, signal: Signal | None) -> SessionSnapshot:
        """One non-mutating stored read; corruption → CORRUPT_SESSION, anything else → PERSISTENCE_FAILED."""
        self._check_signal(signal)
        try:
            snapshot = persistence.inspect(session_id)
        except SessionPersistenceCorruptionError as err:
            self._check_signal(signal)
            raise SessionQueryError(f'stored session "{session_id}" is corrupt: {_message(err)}', _CORRUPT) from err
        except Exception as err:
            self._check_signal(signal)
            raise SessionQueryError(
                f'failed to inspect session "{session_id}": {_message(err)}', _PERSISTENCE_FAILED
            ) from err
        self._check_signal(signal)
        return snapshot

    @staticmethod
    def _snapshot_live(session: Session) -> tuple[Json, list[Json]]:
        events = session.events  # one immutable view: the header and events of one moment
        return header_copy(session.header), thaw(list(events))

    def _load_source(self, session_id: str, signal: Signal | None) -> tuple[Json, list[Json], bool]:
        """``(header, events, validated)``: the logical source of one id, as detached plain JSON.

        ``validated`` says the events were already replay-validated by their source: a live Session
        (every event checked as it was appended) or a real :class:`PersistenceCoordinator`, whose
        ``inspect`` restores the log into a Session with the coordinator's own event-type registry.
        """
        self._check_signal(signal)
        live = self._live(session_id)
        if live is not None:
            header, events = self._snapshot_live(live)
            self._check_signal(signal)
            return header, events, True
        persistence = self._persistence
        if persistence is None:
            raise _not_found(session_id)
        listed = self._persisted_headers(persistence, signal).get(session_id)
        if listed is None:
            raise _not_found(session_id)
        snapshot = self._inspect(persistence, session_id, signal)
        attached = self._live(session_id)  # became live while the stored log was read: the live log wins
        if attached is not None:
            header, events = self._snapshot_live(attached)
            self._check_signal(signal)
            return header, events, True
        assert_headers_compatible(snapshot.meta, listed)
        header, events = header_copy(snapshot.meta), thaw(list(snapshot.events))
        self._check_signal(signal)
        return header, events, isinstance(persistence, PersistenceCoordinator)

    def _load(self, session_id: str, signal: Signal | None = None) -> tuple[Json, list[Json]]:
        """Header and thawed events of the logical source of ``session_id`` (spec §4.1 ``load``)."""
        header, events, _ = self._load_source(session_id, signal)
        return header, events

    # -- corpus ----------------------------------------------------------------------------------------
    def list_sessions(self, *, signal: Signal | None = None) -> list[Json]:
        """Every logical session as ``{header, live, persisted}``, newest first (ties by id)."""
        self._check_signal(signal)
        persistence = self._persistence
        persisted = {} if persistence is None else self._persisted_headers(persistence, signal)
        records: dict[str, Json] = {
            session_id: {"header": header_copy(header), "live": False, "persisted": True}
            for session_id, header in persisted.items()
        }
        for session in self._store.list():
            durable = records.get(session.id)
            if durable is not None:
                assert_headers_compatible(session.header, durable["header"])
            records[session.id] = {
                "header": header_copy(session.header),
                "live": True,
                "persisted": durable is not None,
            }
        return sorted(records.values(), key=session_order_key)

    def filter_sessions(self, filters: Iterable[Any], *, signal: Signal | None = None) -> list[Json]:
        """The corpus records matching every clause, in corpus order (filters are copied first)."""
        owned = materialize_session_filters(filters)
        return apply_session_filters(self.list_sessions(signal=signal), owned)

    # -- exact reads -----------------------------------------------------------------------------------
    def read_session(self, session_id: str, *, signal: Signal | None = None) -> Json:
        """``{session, events}``: the whole raw log, replay-validated, without making it live.

        A live session was validated event by event as it was appended, and the coordinator's ``inspect``
        replays a stored log with the coordinator's own event-type registry (replaying it again here with
        the default registry would refuse a custom event type the store legitimately holds). A log from any
        other binding is replayed into a detached Session; one that does not replay is a
        ``SESSION_QUERY_CORRUPT_SESSION``.
        """
        header, events, validated = self._load_source(session_id, signal)
        if not validated:
            try:
                Session.create(session_id, events, header)
            except AgentlogError as err:
                raise SessionQueryError(f'stored session "{session_id}" is corrupt: {_message(err)}', _CORRUPT) from err
        return {"session": header, "events": events}

    def filter_events(self, session_id: str, filters: Iterable[Any], *, signal: Signal | None = None) -> list[Json]:
        """The semantic documents (§4.2) of one session matching every clause, ascending seq."""
        owned = materialize_event_filters(filters)
        _, events = self._load(session_id, signal)
        try:
            documents = build_documents(session_id, events)
        except SessionQueryError:
            raise
        except SurfaceError as err:
            raise _invalid_surface(err) from err
        return apply_event_filters(documents, owned)

    def list_events(self, session_id: str, *, signal: Signal | None = None) -> list[Json]:
        """One ``{sessionId, seq, type, time, surface}`` record per raw event, ascending seq."""
        _, events = self._load(session_id, signal)
        return _Analysis(session_id, events).records

    def read_surface(self, session_id: str, *, signal: Signal | None = None) -> Json:
        """``{session, capturedThroughSeq, events}``: the current model surface of one observation."""
        header, events = self._load(session_id, signal)
        analysis = _Analysis(session_id, events)
        current: list[Json] = []
        for seq in analysis.current:
            if not 0 <= seq < len(events) or events[seq].get("seq") != seq:
                raise SessionQueryError(
                    f"invalid session surface: current node {seq} is not a surface event", _INVALID_SURFACE
                )
            current.append(events[seq])
        return {
            "session": header,
            "capturedThroughSeq": events[-1]["seq"] if events else None,
            "events": current,
        }

    def read_event(
        self,
        session_id: str,
        seq: int,
        *,
        before: int | None = 0,
        after: int | None = 0,
        signal: Signal | None = None,
    ) -> Json:
        """``{session, target, events, startSeq, endSeq}``: one event and up to ``before``/``after``
        raw neighbours (each an integer in ``[0, read_window_max]``)."""
        lead = self._window("before", before)
        trail = self._window("after", after)
        header, events = self._load(session_id, signal)
        target = _target(session_id, events, seq)
        index = target["seq"]
        start = max(0, index - lead)
        end = min(len(events) - 1, index + trail)
        return {
            "session": header,
            "target": thaw(target),
            "events": events[start : end + 1],
            "startSeq": start,
            "endSeq": end,
        }

    def _window(self, name: str, value: object) -> int:
        if value is None:
            return 0
        size = js_integer(value)
        if size is None or not 0 <= size <= self._read_window_max:
            raise SessionQueryError(f"{name} must be an integer between 0 and {self._read_window_max}", _INVALID_WINDOW)
        return size

    # -- traces ----------------------------------------------------------------------------------------
    def trace_session(self, session_id: str, *, signal: Signal | None = None) -> Json:
        """Known ancestry (immediate parent outward) and descendant trees of one session.

        ``{target, ancestors, descendants, complete: True, root}``, or ``complete: False`` with the
        first ``unresolvedParentId`` that is not in the corpus; a cycle through the target's ancestry is
        ``SESSION_QUERY_INVALID_LINEAGE``. Built iteratively: a deep lineage costs no call stack.
        """
        records = self.list_sessions(signal=signal)
        self._check_signal(signal)
        by_id = {record["header"]["id"]: record for record in records}
        target = by_id.get(session_id) if isinstance(session_id, str) else None
        if target is None:
            raise _not_found(session_id)

        ancestors: list[Json] = []
        seen = {session_id}
        unresolved: str | None = None
        parent_id = target["header"].get("parentSession")
        while parent_id is not None:
            if parent_id in seen:
                raise SessionQueryError(f'session lineage contains a cycle at "{parent_id}"', _INVALID_LINEAGE)
            seen.add(parent_id)
            parent = by_id.get(parent_id)
            if parent is None:
                unresolved = parent_id
                break
            ancestors.append(parent)
            parent_id = parent["header"].get("parentSession")

        children: dict[str, list[Json]] = {}
        for record in records:
            parent_of = record["header"].get("parentSession")
            if parent_of is not None:
                children.setdefault(parent_of, []).append(record)
        for group in children.values():
            group.sort(key=_child_order_key)

        descendants: list[Json] = []
        stack: list[tuple[str, list[Json]]] = [(session_id, descendants)]
        while stack:
            parent_of, into = stack.pop()
            for child in children.get(parent_of, ()):
                node: Json = {"session": _record_copy(child), "descendants": []}
                into.append(node)
                stack.append((child["header"]["id"], node["descendants"]))

        trace: Json = {
            "target": _record_copy(target),
            "ancestors": [_record_copy(record) for record in ancestors],
            "descendants": descendants,
        }
        if unresolved is not None:
            trace["complete"] = False
            trace["unresolvedParentId"] = unresolved
        else:
            trace["complete"] = True
            trace["root"] = _record_copy(ancestors[-1] if ancestors else target)
        return trace

    def trace_event(self, session_id: str, seq: int, *, signal: Signal | None = None) -> Json:
        """One event's direct links: ``{session, target, replacedBy?, replacementChain,
        replacedEventSeqs, sourceEventSeqs, derivedEventSeqs}``.

        The target must exist before the log is analysed (a missing target is EVENT_NOT_FOUND even in an
        invalid log); the whole log must then fold (else INVALID_SURFACE).
        """
        header, events = self._load(session_id, signal)
        self._check_signal(signal)
        target = _target(session_id, events, seq)
        index: int = target["seq"]
        analysis = _Analysis(session_id, events)
        chain: list[int] = []
        replacement = analysis.replaced_by.get(index)
        while replacement is not None:
            chain.append(replacement)
            replacement = analysis.replaced_by.get(replacement)
        derived = [event["seq"] for event in events[index + 1 :] if index in _sources(event)]
        trace: Json = {"session": header, "target": analysis.records[index]}
        if index in analysis.replaced_by:
            trace["replacedBy"] = analysis.replaced_by[index]
        trace["replacementChain"] = chain
        trace["replacedEventSeqs"] = list(analysis.replaced_seqs.get(index, ()))
        trace["sourceEventSeqs"] = _sources(target)
        trace["derivedEventSeqs"] = derived
        delegated = _delegated_answer(target)
        if delegated is not None:
            trace["subagent"] = delegated
        return trace

    # -- titles ----------------------------------------------------------------------------------------
    def read_title_snapshots(self, session_ids: Iterable[str], *, signal: Signal | None = None) -> list[Json]:
        """The latest folded title of each unique id, in first-occurrence order.

        Each result is ``{sessionId, status: "fulfilled", value: {session, title?}}`` or ``{sessionId,
        status: "rejected", reason}``: one session's failure does not fail the others, while
        cancellation (``signal``) fails the whole batch. Stored logs are listed once and inspected by at
        most ``persisted_inspect_concurrency`` worker threads; each log is folded as soon as it is read
        and dropped before its worker takes the next id, so a batch never holds every log at once.
        """
        return self._project_many(session_ids, _title_observation, signal)

    def read_title_snapshot(self, session_id: str, *, signal: Signal | None = None) -> Json:
        """``{session, title?}`` of one session (its failure raised)."""
        result = self.read_title_snapshots([session_id], signal=signal)[0]
        if result["status"] == "rejected":
            reason: BaseException = result["reason"]
            raise reason
        value: Json = result["value"]
        return value

    def read_title(self, session_id: str, *, signal: Signal | None = None) -> Json | None:
        """The latest title snapshot of one session, or ``None`` when its log has no title."""
        title: Json | None = self.read_title_snapshot(session_id, signal=signal).get("title")
        return title

    def _project_many(
        self,
        session_ids: Iterable[str],
        project: Callable[[str, Mapping[str, Any], Sequence[Mapping[str, Any]]], _V],
        signal: Signal | None,
    ) -> list[Json]:
        """Project each unique id's logical source once (live first, stored ones by bounded workers)."""
        ids = [session_ids] if isinstance(session_ids, str) else list(dict.fromkeys(session_ids))
        self._check_signal(signal)
        resolved: dict[str, Json] = {}
        aborted = threading.Event()

        def settle(session_id: str, header: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> Json:
            self._check_signal(signal)
            try:
                value = project(session_id, header, events)
            except SessionQueryError as err:
                return _rejected(session_id, err)
            except Exception as err:
                # A log that validates but cannot be folded (a malformed title event): that session's
                # failure, typed like every other per-session failure, with the fold's error as its cause.
                failure = SessionQueryError(f'session "{session_id}" could not be folded: {_message(err)}', _CORRUPT)
                failure.__cause__ = err
                return _rejected(session_id, failure)
            self._check_signal(signal)
            return {"sessionId": session_id, "status": "fulfilled", "value": value}

        unresolved: list[str] = []
        for session_id in ids:
            live = self._live(session_id)
            if live is None:
                unresolved.append(session_id)
            else:
                resolved[session_id] = settle(session_id, live.header, live.events)
        if not unresolved:
            return [resolved[session_id] for session_id in ids]

        persistence = self._persistence
        if persistence is None:
            for session_id in unresolved:
                resolved[session_id] = _rejected(session_id, _not_found(session_id))
            return [resolved[session_id] for session_id in ids]
        try:
            listed = self._persisted_headers(persistence, signal)
        except SessionQueryError as err:
            if err.code == _ABORTED:
                raise
            for session_id in unresolved:
                resolved[session_id] = _rejected(session_id, err)
            return [resolved[session_id] for session_id in ids]

        def resolve(session_id: str) -> Json:
            header = listed.get(session_id)
            if header is None:
                attached = self._live(session_id)
                if attached is None:
                    return _rejected(session_id, _not_found(session_id))
                return settle(session_id, attached.header, attached.events)
            snapshot = self._inspect(persistence, session_id, signal)
            attached = self._live(session_id)
            if attached is not None:
                return settle(session_id, attached.header, attached.events)
            assert_headers_compatible(snapshot.meta, header)
            return settle(session_id, snapshot.meta, snapshot.events)

        claim = threading.Lock()
        cursor = 0

        def worker() -> None:
            nonlocal cursor
            while not aborted.is_set():
                if signal is not None and signal.is_set():
                    aborted.set()
                    return
                with claim:  # claim the next id only when this worker is free: the bound on inspections
                    index = cursor
                    cursor += 1
                if index >= len(unresolved):
                    return
                session_id = unresolved[index]
                try:
                    resolved[session_id] = resolve(session_id)
                except SessionQueryError as err:
                    if err.code == _ABORTED:
                        aborted.set()
                        return
                    resolved[session_id] = _rejected(session_id, err)

        workers = min(self._inspect_concurrency, len(unresolved))
        if workers == 1:
            worker()
        else:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agentlog-query") as pool:
                futures = [pool.submit(worker) for _ in range(workers)]
            for future in futures:
                future.result()  # per-id failures settle inside the worker; this re-raises a bug
        if aborted.is_set():
            raise SessionQueryError("session query aborted", _ABORTED)
        self._check_signal(signal)
        return [resolved[session_id] for session_id in ids]


def _rejected(session_id: str, reason: BaseException) -> Json:
    return {"sessionId": session_id, "status": "rejected", "reason": reason}


def _title_observation(session_id: str, header: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> Json:
    """``{session, title?}``: the header and the latest ``session/title`` of one observed log."""
    title = fold_session_title(events)  # type: ignore[arg-type]  # stored and live events are Event mappings
    observation: Json = {"session": header_copy(header)}
    if title is not None:
        observation["title"] = thaw(dict(title))
    return observation
