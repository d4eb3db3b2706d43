"""The persistence coordinator: durable sessions over any backend.

Policies live here, bytes live in the backend. The coordinator listens to a :class:`SessionStore`:
every committed event is queued (``on_event`` never blocks the producer), queued events are written
behind in batches (one fixed window of ``batch_delay_ms`` from the first queued event), and
``flush`` is a barrier that drains the current batch and every batch admitted while it runs, raising
the first failure. A failed batch is kept, in order, and retried: no seq is lost or written twice.

Cold reads validate everything (identity, format version, legacy shapes, unknown event types, every
kernel seed rule), close an interrupted turn with the kernel's repair closers, and commit the repair
through the backend — under the session's writer lock, so a log another process is writing is never
"repaired" underneath it.

Threads: a single background thread runs the batch deadlines; ``flush`` writes in the caller's thread.
Per session, a write lock orders every write; per id, a re-entrant lock orders every storage operation.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import logging
import operator
import threading
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import (
    AgentlogError,
    InvalidEventError,
    InvalidSeedError,
    LegacyFormatError,
    MessageShapeError,
    PersistenceError,
    ResourceExhaustedError,
    SessionCollisionError,
    SessionHasChildrenError,
    SessionHeaderError,
    SessionLockedError,
    SessionNotFoundError,
    SessionPersistenceCorruptionError,
    SurfaceError,
    describe_error,
)
from ..errors import InvalidOptionError as InvalidOptionError
from ..kernel._gc import gc_paused
from ..kernel._js import UNDEFINED, js_string
from ..kernel.chunkrows import ChunkRun, compact_chunk_runs, count_items, has_runs
from ..kernel.events import SESSION_END_SEED, Event, EventTypes, event_types
from ..kernel.jsonvalue import MAX_SAFE_INTEGER, FrozenDict, snapshot_json, thaw
from ..kernel.repair import interrupted_turn_closers
from ..kernel.seeds import SessionPreparation, check_header_fields, check_message_event_shape
from ..kernel.session import EventsView, Session, SessionView
from ..kernel.store import SessionStore
from . import legacy
from .backend import (
    Backend,
    DeletesSessions,
    DeleteStep,
    ListsRevisions,
    PartialRead,
    SalvagesPrefix,
    SeeksStored,
    SessionListing,
    StagesSessions,
    WireEvent,
    event_json,
    validate_session_id,
)
from .tail import DEFAULT_POLL_INTERVAL_S, RetryHook, tail_events
from .write_behind import Scheduler, WriteBehind
from .writer_lock import deadline_of, holder_record, locked_error, wait_for_writer

logger = logging.getLogger("agentlog")

DEFAULT_BATCH_DELAY_MS = 200
MAX_BATCH_DELAY_MS = 2_147_483_647
DEFAULT_PREPARED_CACHE_SIZE = 5
MAX_BATCH_EVENTS = 8192


@dataclass(frozen=True)
class SessionSnapshot:
    """An immutable logical view of a stored session: its header and its (balanced) events."""

    meta: FrozenDict
    events: EventsView


@dataclass(frozen=True)
class StoredView:
    """A balanced view of a session with the facts of its stored prefix that the view alone hides
    (:meth:`PersistenceCoordinator.stored_view`): ``verify`` and ``show --log`` report them beside it.

    ``stored_events`` is how many events the stored prefix holds (the view's first ones, seqs
    ``0..stored_events - 1``, a stored end-seed marker included); ``torn`` says that a torn tail
    follows it (removed on the next load); ``closers`` is how many events a load would append to close
    an interrupted turn (the view's last ones, not stored yet).
    """

    view: SessionView
    stored_events: int
    torn: bool
    closers: int

    @property
    def last_stored_seq(self) -> int:
        """The seq of the last stored event (``-1`` when nothing is stored)."""
        return self.stored_events - 1


@dataclass(frozen=True)
class _StoredPart:
    """A part of a streamed read, in the shape :meth:`PersistenceCoordinator._interpret` reads."""

    meta: Any
    events: builtins.list[Any]


@dataclass(frozen=True)
class DurableRead:
    """A stored session exactly as its durable log holds it (:meth:`PersistenceCoordinator.read_stored`).

    ``events`` are the durable events (a torn tail excluded, an interrupted turn left open), ``revision``
    the stored revision they were read at, ``torn`` whether a torn tail followed them.
    """

    meta: FrozenDict
    events: builtins.list[FrozenDict]
    revision: str
    torn: bool


DELETE_CHILDREN_MODES: tuple[str, ...] = ("refuse", "delete", "orphan")
"""What :meth:`PersistenceCoordinator.delete` does with a session's children: refuse to delete it, delete
them first, or leave them without their parent."""


@dataclass(frozen=True)
class DeleteResult:
    """What :meth:`PersistenceCoordinator.delete` removed (children before their parent) and the
    children it left without their parent (``children="orphan"``)."""

    deleted: tuple[str, ...]
    orphaned: tuple[str, ...] = ()


def _subtree(index: Mapping[str, Sequence[str]], root: str) -> builtins.list[str]:
    """Every descendant of ``root`` (parents before their children); a cycle stops."""
    found: builtins.list[str] = []
    seen = {root}
    stack = builtins.list(reversed(index.get(root, ())))
    while stack:
        session_id = stack.pop()
        if session_id in seen:
            continue
        seen.add(session_id)
        found.append(session_id)
        stack.extend(reversed(index.get(session_id, ())))
    return found


# --- state ------------------------------------------------------------------------------------------


@dataclass
class _Candidate:
    """A stored prefix with a batch after it, shaped as a backend's read for the load's checks."""

    meta: dict[str, Any]
    events: builtins.list[Any]


@dataclass
class _State:
    meta: dict[str, Any]
    cursor: int
    materialized: bool
    owner: Session | None = None


class StagedSession:
    """What :meth:`PersistenceCoordinator.stage` returns: ``append`` batches, then ``publish`` or ``discard``.

    Each batch passes the same JSON gate and seq check as :meth:`PersistenceCoordinator.append`.
    """

    def __init__(self, coordinator: PersistenceCoordinator, session_id: str, staged: Any) -> None:
        self._coordinator = coordinator
        self.session_id = session_id
        self._staged = staged
        self._next_seq = 0

    def append(self, events: Sequence[Mapping[str, Any]]) -> None:
        if self._staged is None:
            self._coordinator.append(self.session_id, events)
            return
        try:
            batch = [snapshot_json(dict(event)) for event in events]
        except AgentlogError:
            raise PersistenceError(
                "session event batch is not losslessly JSON-serializable because it contains non-JSON-serializable data"
            ) from None
        legacy.assert_supported_events(self.session_id, batch)
        _check_contiguous(self.session_id, batch, self._next_seq)
        for start in range(0, len(batch), MAX_BATCH_EVENTS):
            self._staged.append(batch[start : start + MAX_BATCH_EVENTS])
        self._next_seq += len(batch)

    def publish(self) -> None:
        """Make the whole session durable and visible at once."""
        coordinator = self._coordinator
        if self._staged is not None:
            try:
                self._staged.publish()
            except BaseException:
                coordinator._states.pop(self.session_id, None)
                raise
            state = coordinator._states.get(self.session_id)
            if state is not None:
                state.cursor = self._next_seq
                state.materialized = True
        coordinator._cache.pop(self.session_id, None)

    def discard(self) -> None:
        """Leave nothing of the session (with staging; without it, what was appended stays)."""
        if self._staged is not None:
            self._staged.discard()
        self._coordinator._states.pop(self.session_id, None)
        self._coordinator._cache.pop(self.session_id, None)


@dataclass
class _Source:
    """A validated, balanced stored session (not yet committed)."""

    meta: FrozenDict
    events: EventsView  # balanced log, without the end-seed marker
    session: Session
    revision: str
    torn_marker: object
    closers: list[dict[str, Any]]
    stored_events: int = 0  # events in the stored prefix as read (before closers; a packed run counts its members)
    holder: int | None = None  # thread holding the reservation of this source, if reserved


_WRAPPED = (InvalidSeedError, MessageShapeError, SessionHeaderError, SurfaceError, LegacyFormatError)


def _drain_at_exit(reference: weakref.ReferenceType[PersistenceCoordinator]) -> None:
    coordinator = reference()
    if coordinator is not None:
        try:
            coordinator.close()
        except Exception as err:  # nothing can be raised to anyone at exit: report it
            logger.warning("persistence drain at exit failed: %s", describe_error(err))


def _seed_covers(seed: Sequence[Any], stored: Sequence[Any]) -> bool:
    """Whether a live session's events begin with exactly the stored events (compared as JSON text,
    as the original compares ``JSON.stringify`` output)."""
    if len(seed) < len(stored):
        return False
    return all(event_json(seed[i]) == event_json(snapshot_json(event)) for i, event in enumerate(stored))


def _js_opt(value: Any) -> str:
    """An optional header field as the original prints it (absent is ``undefined``)."""
    return "undefined" if value is None else str(value)


def _adopt_stored(event: Any) -> Any:
    """Message-shape validation of one stored event (the suffix read has no Session to do it)."""
    check_message_event_shape(event, f"session event at seq {js_string(event.get('seq'))}", MessageShapeError)
    return event


class PersistenceCoordinator:
    """Makes the sessions of a :class:`SessionStore` durable through a storage backend."""

    def __init__(
        self,
        store: SessionStore,
        backend: Backend,
        *,
        batch_delay_ms: int = DEFAULT_BATCH_DELAY_MS,
        prepared_cache_size: int = DEFAULT_PREPARED_CACHE_SIZE,
        registry: EventTypes | None = None,
    ) -> None:
        if type(prepared_cache_size) is not int or prepared_cache_size < 1:
            raise InvalidOptionError("preparedSessionCacheSize must be a positive safe integer")
        if type(batch_delay_ms) is not int or not 1 <= batch_delay_ms <= MAX_BATCH_DELAY_MS:
            raise InvalidOptionError("writeBatchMaxDelayMs must be an integer between 1 and 2147483647")
        self.store = store
        self.backend = backend
        # The optional capabilities, resolved once (each a runtime protocol check): ``None`` when absent.
        self._salvager = backend if isinstance(backend, SalvagesPrefix) else None
        self._seeker = backend if isinstance(backend, SeeksStored) else None
        self._lister = backend if isinstance(backend, ListsRevisions) else None
        self._stager = backend if isinstance(backend, StagesSessions) else None
        self._delay = batch_delay_ms / 1000.0
        self._registry = registry or event_types
        self._mutex = threading.RLock()
        self._id_locks: dict[str, list[Any]] = {}
        self._states: dict[str, _State] = {}
        self._live: dict[int, WriteBehind] = {}
        self._reserved: dict[str, _Source] = {}
        self._cond = threading.Condition(self._mutex)
        self._cache: OrderedDict[str, _Source] = OrderedDict()
        self._cache_size = prepared_cache_size
        # Inspections of different sessions run at once (a search reads with several threads), each
        # holding only its own id's lock: the LRU's order and eviction need one of their own.
        self._cache_lock = threading.Lock()
        self._scheduler = Scheduler()
        self._closed = False
        self._deleted_hooks: builtins.list[Callable[[str], None]] = []
        self._unsubscribe = [
            store.on_created(self._on_created),
            store.on_event(self._on_event),
            store.on_flush(self._on_flush),
            store.on_disposed(self._on_disposed),
        ]
        for session in store.list():  # sessions that were live before persistence was attached
            self._init_for(session)
        # Write-behind must not turn a normal interpreter exit into data loss: drain at exit (the
        # weak reference lets an abandoned coordinator be collected as usual).
        reference = weakref.ref(self)
        self._atexit = lambda: _drain_at_exit(reference)
        atexit.register(self._atexit)

    # -- helpers -------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _serialized(self, session_id: str) -> Iterator[None]:
        """Run one storage operation for ``session_id`` after every earlier one for the same id."""
        with self._mutex:
            entry = self._id_locks.get(session_id)
            if entry is None:
                entry = self._id_locks[session_id] = [threading.RLock(), 0]
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._mutex:
                entry[1] -= 1
                if entry[1] == 0 and self._id_locks.get(session_id) is entry:
                    del self._id_locks[session_id]
                    self._cond.notify_all()

    def _location(self, meta: Mapping[str, Any]) -> str | None:
        try:
            return self.backend.locate(meta)
        except AgentlogError:
            return None

    def _corruption(self, session_id: str, meta: Mapping[str, Any], err: BaseException) -> Exception:
        location = self._location(meta)
        where = f" — {location}" if location else ""
        return SessionPersistenceCorruptionError(
            f'stored session "{session_id}" failed validation: {describe_error(err)}{where}. '
            "The stored log was not modified.",
            location=location,
        )

    # -- cold reads ------------------------------------------------------------------------------------
    def _interpret(self, session_id: str, stored: Any, *, adopt: Any = None, wrap: bool = False) -> Any:
        """A stored prefix's events, checked and upgraded in the original's order: identity, format
        version, removed vocabulary, legacy shapes, unknown types. ``wrap`` reports shape problems as
        corruption of the stored session (cold loads); the suffix read and live adoption raise them as is.
        """
        meta = stored.meta
        if not isinstance(meta, dict) or meta.get("id") != session_id:
            header_id = meta.get("id") if isinstance(meta, dict) else None
            raise SessionPersistenceCorruptionError(
                f'stored session identity mismatch: requested "{session_id}", header contains "{header_id}"',
                location=self._location(meta) if isinstance(meta, dict) else None,
            )
        location = self._location(meta)
        legacy.assert_version(session_id, meta, location=location)
        items = stored.events
        if adopt is None and type(items) is list:
            # A current-format log (the usual case): one pass proves that the three checks below would
            # pass and upgrade nothing, so only the types it saw remain to be checked as known.
            present = legacy.current_log_types(items, ChunkRun)
            if present is not None and all(self._registry.is_known(etype) for etype in present):
                return items
        # A compact read (packed chunk runs kept as ChunkRun items): the legacy checks and upgrades see
        # the other events only. A run's members are current-format assistant/chunk events, which none of
        # them refuses, upgrades or reads (a legacy id lookup finds no message in a chunk), so leaving
        # them out changes no outcome and no error.
        compact = adopt is None and type(items) is list and has_runs(items)
        plain = [item for item in items if item.__class__ is not ChunkRun] if compact else items
        written = plain[:] if compact else plain
        try:
            legacy.assert_supported_events(session_id, plain)
            events = legacy.normalize_stored_events(session_id, plain, adopt=adopt)
        except _WRAPPED as err:
            if wrap:
                raise self._corruption(session_id, meta, err) from err
            raise
        legacy.assert_events_known(session_id, events, self._registry, location=location)
        if compact:
            if any(map(operator.is_not, written, events)):  # an upgrade replaced an event: put it in place
                upgraded = iter(events)
                events = [item if item.__class__ is ChunkRun else next(upgraded) for item in items]
            else:
                events = items
        return events

    @property
    def registry(self) -> EventTypes:
        """The event types this coordinator's reads check against (and restore with)."""
        return self._registry

    def interpret_part(self, session_id: str, meta: Any, items: builtins.list[Any]) -> builtins.list[Any] | None:
        """One part of a streamed whole read (:class:`~agentlog.persistence.backend.StreamsStored`),
        checked as a cold load checks the log it belongs to — identity, format version, removed
        vocabulary, unknown types — and returned unchanged; ``None`` when the part has anything a part
        alone cannot judge (a legacy shape, which the whole log normalises). A refusal raises the cold
        load's error for that part (a caller that reports it reads the log whole for the exact one)."""
        plain = [item for item in items if item.__class__ is not ChunkRun]
        if any(legacy.needs_legacy_prefix(event) for event in plain):
            return None
        events = self._interpret(session_id, _StoredPart(meta, items), wrap=True)
        if len(events) != len(items) or any(map(operator.is_not, events, items)):
            return None  # an upgrade replaced an event: the whole read does it in place
        return items

    def _validate(self, session_id: str, stored: Any) -> _Source:
        stored_events = count_items(stored.events)
        events = self._interpret(session_id, stored, wrap=True)
        meta = stored.meta
        try:
            closers = self._closers_of_valid(session_id, events, meta)
            balanced = [*events, *closers]
            # Built directly (not through the store): a throw-away view must not collide with a live id.
            session = Session.from_restore(session_id, balanced, meta, registry=self._registry)
        except _WRAPPED as err:
            raise self._corruption(session_id, meta, err) from err
        # Without the end-seed marker (the restore appends one unless the log already ends with it); the
        # session's log length is the event count even where a compact list holds packed runs.
        last = balanced[-1] if balanced else None
        marked = last is not None and last.__class__ is not ChunkRun and last.get("type") == SESSION_END_SEED
        view = session.events.prefix(len(session) if marked else len(session) - 1)
        return _Source(
            meta=session.header,
            events=view,
            session=session,
            revision=stored.revision,
            torn_marker=stored.torn_marker,
            closers=closers,
            stored_events=stored_events,
        )

    def _closers_of_valid(self, session_id: str, events: Any, meta: Any) -> builtins.list[dict[str, Any]]:
        """The repair closers, computed only over events that passed validation.

        Repair assumes valid events. On the fast path it is simply run (the full validation follows when
        the balanced session is restored); if it trips over an event, the stored events are validated
        first, so the typed refusal names the malformed event instead of a ``KeyError`` escaping.
        """
        if not events:
            return []
        try:
            return interrupted_turn_closers(events)
        except Exception as err:
            try:
                Session.from_restore(session_id, events, meta, registry=self._registry)
            except AgentlogError as invalid:
                raise self._corruption(session_id, meta, invalid) from invalid
            raise self._corruption(session_id, meta, err) from err

    def _check_id(self, session_id: object) -> None:
        """The backend's optional id check (INVALID_SESSION_ID naming the limit), before any storage I/O."""
        validate_session_id(self.backend, session_id)

    def read_prefix(self, session_id: str) -> PartialRead:
        """Salvage: the valid stored prefix up to the first damage, and the damage (``agentlog export
        --partial``). Nothing is validated beyond the bytes, repaired or written; raises
        ``SessionNotFoundError`` when absent and ``PersistenceError`` when the backend cannot salvage."""
        self._check_id(session_id)
        if self._salvager is None:
            raise PersistenceError(f"{self.backend.name} cannot read a partial prefix")
        with self._serialized(session_id), gc_paused():
            partial: PartialRead | None = self._salvager.read_prefix(session_id)
        if partial is None:
            raise SessionNotFoundError(f'session "{session_id}" not found')
        return partial

    def _read_source(self, session_id: str) -> _Source:
        self._check_id(session_id)
        try:
            with gc_paused():
                # Packed chunk runs stay packed (validated, not expanded) through validation and restore:
                # the restored session builds a run's events only when something reads them.
                with compact_chunk_runs():
                    stored = self.backend.load_stored(session_id)
                if stored is None:
                    raise SessionNotFoundError(f'session "{session_id}" not found')
                source = self._validate(session_id, stored)
                # The parsed records (one tracked dict per event, replaced by the sealed events) go
                # before the collector is back: alive at its first run, they would all be traversed.
                del stored
            return source
        except ResourceExhaustedError:
            raise
        except MemoryError as err:  # out of memory is never corruption, and nothing was repaired
            raise ResourceExhaustedError(
                f'out of memory while loading session "{session_id}"; nothing was repaired or written (this is '
                "not damage). Retry with more memory available"
            ) from err

    def _repaired_source(self, session_id: str, source: _Source | None = None) -> _Source:
        """Read (or take ``source``, a current cached read), durably repair if needed, and re-read.

        The repair is committed under the session's writer lock and only if the stored revision is
        still the one that was read; the repaired graph is then read back rather than pairing the old
        view with the new revision. The caller holds the id's serialization.
        """
        repaired = False
        while True:
            if source is None:
                try:
                    source = self._read_source(session_id)
                except ResourceExhaustedError as err:
                    if not repaired:
                        raise
                    # The read-back after a committed repair ran out: the error must not claim that
                    # nothing was written.
                    raise ResourceExhaustedError(
                        f'out of memory while reading session "{session_id}" back after its repair was '
                        "committed (the torn tail removed and/or the interrupted turn closed, as any load "
                        "does); the stored log is valid and nothing else was written. Retry with more memory "
                        "available"
                    ) from err
            if source.torn_marker is None and not source.closers:
                return source
            lock = self.backend.lock_writer(source.meta)
            try:
                if self.backend.read_revision(session_id) == source.revision:
                    self.backend.commit_repair(thaw(source.meta), source.torn_marker, source.closers)
                    repaired = True
            finally:
                lock.release()
            source = None

    def _live_session(self, session_id: str) -> Session | None:
        session = self.store.get(session_id)
        if session is not None and id(session) in self._live:
            return session
        return None

    def load(self, session_id: str) -> SessionSnapshot:
        """A balanced, immutable view of a session; cold recovery is committed durably first."""
        self._check_id(session_id)
        while True:
            live = self._live_session(session_id)
            if live is not None:
                return self._load_live(live)
            self._wait_unreserved(session_id)
            with self._serialized(session_id):
                if self._live_session(session_id) is not None or session_id in self._reserved:
                    continue  # became live or reserved while we waited: take that path instead
                source = self._current_or_repaired(session_id)
                self._cache.pop(session_id, None)  # load never keeps the cache entry
                self._remember_ownerless(session_id, source)
                return SessionSnapshot(source.meta, source.events)

    def _load_live(self, session: Session) -> SessionSnapshot:
        events = session.events
        self.flush(session)
        state = self._states.get(session.id)
        if state is None or not len(events):
            raise SessionNotFoundError(f'session "{session.id}" not found')
        if interrupted_turn_closers(events):
            raise PersistenceError(
                f'cannot load session "{session.id}" while its live turn is open; '
                "use the live Session or wait for the turn to close"
            )
        return SessionSnapshot(FrozenDict(state.meta), events)

    def inspect(self, session_id: str) -> SessionSnapshot:
        """A logical view without committing anything: cold views are balanced in memory only."""
        self._check_id(session_id)
        live = self._live_session(session_id)
        if live is not None:
            return SessionSnapshot(live.header, live.events)
        with self._serialized(session_id):
            live = self._live_session(session_id)
            if live is not None:
                return SessionSnapshot(live.header, live.events)
            source = self._cold_source(session_id)
            return SessionSnapshot(source.meta, source.events)

    def view(self, session_id: str) -> SessionView:
        """A read-only view of a stored session *as a session*: surface, derived messages, request
        header — without publishing or committing anything (a cold view is balanced in memory only).

        It answers "what would the model see if this session were resumed now?" for inspection tools;
        to continue the session, use :meth:`resume`.
        """
        with self._serialized(session_id):
            session = self._live_session(session_id)
            length = len(session.events) if session is not None else 0
            if session is None:
                source = self._cold_source(session_id)
                session, length = source.session, len(source.events)
            if not length:
                raise SessionNotFoundError(f'session "{session_id}" has no events to view')
            return session.at(length - 1)

    def stored_view(self, session_id: str, *, keep: bool = True) -> StoredView:
        """:meth:`view`, read once together with the facts of the stored prefix behind it.

        A checker must tell the stored log from what a load would make of it: how many events are
        stored, whether a torn tail follows them, how many closers an interrupted turn would get.
        The validated read behind the view already knows all three, so asking the backend for its raw
        prefix as well would read (and, for a big session, hold) the whole log a second time. The view
        is the one :meth:`view` returns, with its semantics: a live session is viewed as it is (its
        facts are those of this coordinator's writes: the events written so far, no torn tail, no
        closers, since its open turn is its own), a held reservation as it was prepared (its repair
        already committed), else the cached read while current or a fresh one. Nothing is written.

        ``keep=False`` leaves a fresh read out of the cache of recent reads (and drops a stale entry):
        a caller that goes through many sessions once (``verify`` of a whole store) then holds one
        session at a time, not the last few it read as well.
        """
        with self._serialized(session_id):
            session = self._live_session(session_id)
            if session is not None:
                length = len(session.events)
                state = self._states.get(session_id)
                stored, torn, closers = (state.cursor if state is not None else 0), False, 0
            else:
                source = self._cold_source(session_id, keep=keep)
                session, length = source.session, len(source.events)
                stored, torn, closers = source.stored_events, source.torn_marker is not None, len(source.closers)
            if not length:
                raise SessionNotFoundError(f'session "{session_id}" has no events to view')
            return StoredView(session.at(length - 1), stored, torn, closers)

    def _cold_source(self, session_id: str, *, keep: bool = True) -> _Source:
        """The stored session as inspection sees it (caller holds the id's serialization): a held
        reservation's view, else the cached read while its revision is current, else a fresh read
        (cached unless ``keep`` is false)."""
        reserved = self._reserved.get(session_id)
        if reserved is not None:
            return reserved  # held by a preparation: its (possibly older) view
        source = self._cache.get(session_id)
        if source is None or self.backend.read_revision(session_id) != source.revision:
            if not keep:
                self._cache.pop(session_id, None)  # (before the read: never the stale and the fresh at once)
                del source
                return self._read_source(session_id)
            source = self._read_source(session_id)
            self._cache_put(session_id, source)
        else:
            with self._cache_lock:
                if session_id in self._cache:  # (evicted by another session's read meanwhile: still valid)
                    self._cache.move_to_end(session_id)
        return source

    def _cache_put(self, session_id: str, source: _Source) -> None:
        with self._cache_lock:
            self._cache[session_id] = source
            self._cache.move_to_end(session_id)
            evicted = [self._cache.popitem(last=False) for _ in range(len(self._cache) - self._cache_size)]
        del evicted  # freed outside the lock: a whole session's events

    def _current_or_repaired(self, session_id: str) -> _Source:
        """The cached source if it is still current and needs no repair, else a fresh repaired read."""
        source = self._cache.pop(session_id, None)
        if (
            source is not None
            and len(source.session.events) == len(source.events) + 1
            and self.backend.read_revision(session_id) == source.revision
        ):
            return self._repaired_source(session_id, source)
        return self._repaired_source(session_id)

    def _remember_ownerless(self, session_id: str, source: _Source) -> None:
        state = self._states.get(session_id)
        if state is not None and state.owner is not None:
            raise SessionCollisionError(f'session "{session_id}" already has a live persistence owner')
        self._states[session_id] = _State(thaw(source.meta), len(source.events), True)

    def read_from(self, session_id: str, from_seq: int) -> SessionSnapshot:
        """The durable events with ``seq >= from_seq``, as stored (no repair, no closers).

        A backend with a seek read (``load_stored_from``) is asked for the suffix only, so a tail read
        of a long log costs the tail; its events are checked like a whole read's, but only the suffix
        is (removed vocabulary and unknown types before ``from_seq`` are not seen). When a suffix event
        needs the events before it to be normalised (a legacy message shape), or the backend has no
        seek read, the whole stored log is read and sliced.
        """
        if type(from_seq) is not int or not 0 <= from_seq <= MAX_SAFE_INTEGER:
            raise InvalidOptionError(f"readFrom fromSeq must be a non-negative safe integer, got {from_seq}")
        self._check_id(session_id)
        with self._serialized(session_id), gc_paused():
            sought = self._stored_suffix(session_id, from_seq)
            if sought is None:
                stored = self.backend.load_stored(session_id)
                if stored is None:
                    raise SessionNotFoundError(f'session "{session_id}" not found')
                meta = stored.meta
                events = self._interpret(session_id, stored, adopt=_adopt_stored)[from_seq:]
            else:
                meta, events = sought
            suffix = [snapshot_json(event) for event in events]
            return SessionSnapshot(snapshot_json(meta), EventsView(suffix, len(suffix)))

    def read_stored(self, session_id: str) -> DurableRead:
        """The whole durable log as stored, with the facts a copy reports: no repair, no closers, no write.

        What :meth:`read_from` gives from seq 0, plus the revision it was read at (so a caller can tell
        that a writer moved it since) and whether a torn tail follows the durable events (left out).
        """
        self._check_id(session_id)
        with self._serialized(session_id), gc_paused():
            stored = self.backend.load_stored(session_id)
            if stored is None:
                raise SessionNotFoundError(f'session "{session_id}" not found')
            events = self._interpret(session_id, stored, adopt=_adopt_stored)
            return DurableRead(
                meta=snapshot_json(stored.meta),
                events=[snapshot_json(event) for event in events],
                revision=stored.revision,
                torn=stored.torn_marker is not None,
            )

    def tail(
        self,
        session_id: str,
        *,
        from_seq: int = 0,
        follow: bool = True,
        poll_interval: float = DEFAULT_POLL_INTERVAL_S,
        reconnect: bool | None = None,
        on_retry: RetryHook | None = None,
    ) -> AsyncIterator[FrozenDict]:
        """The stored events with ``seq >= from_seq``, then (``follow``) each one as it is committed.

        ``async for event in coordinator.tail(session_id, from_seq=...)``: every committed event
        exactly once and in seq order, by whichever writer commits it; nothing is written and no lock
        is taken. Without ``follow`` the iteration ends at the end of the stored log. File and SQLite
        stores are polled every ``poll_interval`` seconds (a cheap revision check); a backend with a
        ``wait_for_change`` signal is waited on, as a hint, for at most a second between checks. See
        :mod:`agentlog.persistence.tail`. ``reconnect`` (default: ``follow``) and ``on_retry`` are
        :func:`~agentlog.persistence.tail.tail_events`'s: a followed tail outlives a store that stops
        answering for a while (``DATABASE_UNAVAILABLE``) and resumes at its next seq.
        """
        return tail_events(
            self,
            session_id,
            from_seq=from_seq,
            follow=follow,
            poll_interval=poll_interval,
            reconnect=reconnect,
            on_retry=on_retry,
        )

    def _stored_suffix(self, session_id: str, from_seq: int) -> tuple[Any, list[Any]] | None:
        """``(meta, events)`` of the backend's seek read, or ``None`` when the whole log must be read."""
        if self._seeker is None or from_seq == 0:
            return None
        stored = self._seeker.load_stored_from(session_id, from_seq)
        if stored is None:
            raise SessionNotFoundError(f'session "{session_id}" not found')
        if any(legacy.needs_legacy_prefix(event) for event in stored.events):
            return None
        return stored.meta, self._interpret(session_id, stored, adopt=_adopt_stored)

    def _wait_unreserved(self, session_id: str) -> None:
        with self._cond:
            while session_id in self._reserved:
                if self._reserved[session_id].holder == threading.get_ident():
                    raise PersistenceError(
                        f'session "{session_id}" is reserved by a preparation this thread has not released'
                    )
                self._cond.wait()

    def prepare(self, session_id: str) -> SessionPreparation:
        """An unpublished Session restored from storage (repair committed); publish it with the store.

        While the preparation is held, the id is reserved: appends to it are refused and a second
        ``prepare`` (from another thread) waits, then reuses the very same Session if it was released
        unchanged. ``dispose()`` the preparation, or publish its session, to end the reservation.
        """
        while True:
            if self._live_session(session_id) is not None:
                raise PersistenceError(f'cannot prepare session "{session_id}" while it is live')
            self._wait_unreserved(session_id)
            with self._serialized(session_id):
                # Reservations are only made while holding this id's serialization, so none can appear
                # between this check and the one below.
                if session_id in self._reserved or self._live_session(session_id) is not None:
                    continue
                source = self._current_or_repaired(session_id)
                with self._cond:
                    self._cache.pop(session_id, None)
                    self._remember_ownerless(session_id, source)
                    source.holder = threading.get_ident()
                    self._reserved[session_id] = source
                break
        session = source.session

        def release() -> None:
            with self._cond:
                if self._reserved.get(session_id) is not source:
                    return
                del self._reserved[session_id]
                state = self._states.get(session_id)
                reusable = (
                    state is not None
                    and state.owner is None
                    and len(session.events) == len(source.events) + 1
                    and not session.attached
                )
                if reusable:
                    source.holder = None
                    self._cache_put(session_id, source)
                self._cond.notify_all()

        return SessionPreparation.create(session, release)

    def resume(self, session_id: str, *, wait: bool = False, timeout: float | None = None) -> Session:
        """Restore a stored session and make it live in the store (it keeps being persisted).

        Another writer holding the session is ``SESSION_LOCKED`` at once (naming the holder), unless
        the caller opts in to waiting: ``wait=True`` waits as long as it takes, ``timeout=`` seconds (alone
        or with ``wait=True``) bounds the wait, past which the refusal is raised after all. Waiting
        probes the lock (nothing is read meanwhile) and logs one INFO record on the ``agentlog`` logger
        naming the holder when it starts.
        """
        deadline = deadline_of(wait, timeout)
        while True:
            try:
                return self._resume_now(session_id)
            except SessionLockedError as err:
                if deadline is None:
                    raise
                self._wait_for_writer(session_id, err, deadline, timeout)

    def _wait_for_writer(
        self, session_id: str, err: SessionLockedError, deadline: float, timeout: float | None
    ) -> None:
        meta = {"id": session_id}
        wait_for_writer(session_id, lambda: self.backend.lock_writer(meta), err, deadline, timeout)

    def _resume_now(self, session_id: str) -> Session:
        preparation = self.prepare(session_id)
        session: Session = preparation.session
        detach = self.store.enter(session)
        try:
            self.store.announce(session)
        except BaseException:
            detach()
            preparation.dispose()
            raise
        return session

    def list(self) -> builtins.list[SessionListing]:
        """Every materialized session (headers only; damaged or foreign headers are reported)."""
        return self.backend.list_sessions()

    def list_revisions(self) -> dict[str, str]:
        """Every stored session's current revision by id, at the cost of a stat per session, not a header read.

        The search index reconciles against this on every search (re-reading only the sessions whose
        revision moved). A backend's optional ``list_revisions`` answers when it has one; otherwise the
        map is built from :meth:`list`, keeping the listings that carry a revision. Either way a session
        with a damaged header may be present: the reader it is handed to reports the damage.
        """
        if self._lister is not None:
            return dict(self._lister.list_revisions())
        return {listing.id: listing.revision for listing in self.list() if listing.revision is not None}

    # -- delete ----------------------------------------------------------------------------------------------
    def delete(
        self,
        session_id: str,
        *,
        children: str = "refuse",
        forget: Sequence[Callable[[str], None]] = (),
        step: DeleteStep | None = None,
        listings: Sequence[SessionListing] | None = None,
    ) -> DeleteResult:
        """Remove a stored session (and, with ``children="delete"``, its whole subtree) for good.

        Each session goes atomically (the backend's ``delete_session``: a reader or a crash sees it whole
        or not at all), children before their parent, so an interrupted subtree delete never leaves a
        child whose parent is gone unless ``children="orphan"`` asked for it. Refused at once, before
        anything is removed: a session open for writing here or in any process (``SESSION_LOCKED``: every
        session to delete is locked first), one with children unless ``children`` is ``"delete"`` or
        ``"orphan"`` (``SESSION_HAS_CHILDREN``), an id with no stored log (``SESSION_NOT_FOUND``).
        Children are the sessions whose header names it as ``parentSession`` (forks, subagents);
        orphaned ones keep their header as written (a log is never rewritten).

        ``forget``, and every :meth:`on_deleted` callback, are called with each deleted id once its log is
        gone: the derived records (projection cache row, search index documents) are dropped there (a
        :class:`~agentlog.ProjectionCache` or ``SqliteSearch`` built on this coordinator subscribes
        itself). They are derived, so a failure only warns: readers never serve them for a session the
        store no longer lists, and ``reindex`` drops them.
        ``step`` is the backend's test hook (:data:`~agentlog.persistence.backend.DeleteStep`).
        ``listings`` is the store's listing when the caller has just read it (``gc`` deletes many
        sessions after one listing instead of one per delete); the children are found in it, so one
        created after it is not seen. By default the store is listed here.
        """
        if children not in DELETE_CHILDREN_MODES:
            raise InvalidOptionError(f"children must be one of {', '.join(DELETE_CHILDREN_MODES)}, got {children!r}")
        self._check_id(session_id)
        deleter = self.backend if isinstance(self.backend, DeletesSessions) else None
        if deleter is None:
            raise PersistenceError(
                f"the {self.backend.name} backend cannot delete sessions (it has no delete_session); "
                "copy the sessions to keep into a new store instead"
            )
        listed = {listing.id: listing for listing in (self.backend.list_sessions() if listings is None else listings)}
        index: dict[str, builtins.list[str]] = {}
        for listing in listed.values():
            parent = listing.header.get("parentSession") if listing.header else None
            if isinstance(parent, str) and parent != listing.id:
                index.setdefault(parent, []).append(listing.id)
        below = _subtree(index, session_id)
        if below and children == "refuse":
            shown = ", ".join(f'"{child}"' for child in below[:5]) + (" …" if len(below) > 5 else "")
            raise SessionHasChildrenError(
                f'session "{session_id}" has {len(below)} descendant session(s) ({shown}); delete them with it '
                '(children="delete", agentlog rm --with-children) or leave them without their parent '
                '(children="orphan", agentlog rm --orphan)',
                children=tuple(below),
            )
        targets = [*reversed(below), session_id] if children == "delete" else [session_id]
        locks: builtins.list[Any] = []
        try:
            for target in targets:
                locks.append(self._lock_for_delete(target))
            if session_id not in listed and self.backend.read_revision(session_id) is None:
                # Under its lock nothing can materialize the id: only leftovers of a crashed delete remain.
                deleter.delete_session(session_id, step)
                raise SessionNotFoundError(f'session "{session_id}" has no stored log to delete')
            deleted: builtins.list[str] = []
            for target in targets:
                deleter.delete_session(target, step)
                with self._cond:
                    self._cache.pop(target, None)
                    self._states.pop(target, None)
                deleted.append(target)
        finally:
            for lock in reversed(locks):
                lock.release()
        hooks = [*self._deleted_hooks, *forget]
        for target in deleted:
            for drop in hooks:
                try:
                    drop(target)
                except Exception as err:  # derived records are never needed for correctness
                    logger.warning('deleting the derived records of "%s" failed: %s', target, describe_error(err))
        orphaned = tuple(index.get(session_id, ())) if children == "orphan" else ()
        return DeleteResult(deleted=tuple(deleted), orphaned=orphaned)

    def on_deleted(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(session_id)`` after each session :meth:`delete` removes (returns the unsubscribe).

        How the derived stores built on this coordinator (the projection cache, the search index) drop
        their records of a deleted session at once; a failing callback only warns (see :meth:`delete`).
        """
        with self._mutex:
            self._deleted_hooks.append(callback)

        def unsubscribe() -> None:
            with self._mutex:
                if callback in self._deleted_hooks:
                    self._deleted_hooks.remove(callback)

        return unsubscribe

    def _lock_for_delete(self, session_id: str) -> Any:
        """The writer lock of a session about to be deleted; ``SESSION_LOCKED`` if it is open for writing."""
        with self._serialized(session_id):
            state = self._states.get(session_id)
            if (
                self._live_session(session_id) is not None
                or session_id in self._reserved
                or (state is not None and state.owner is not None)
            ):
                raise locked_error(session_id, holder_record(), lock="it live in this coordinator")
            return self.backend.lock_writer({"id": session_id})

    # -- public writes (ownerless) -----------------------------------------------------------------------
    def create(self, meta: Mapping[str, Any]) -> None:
        """Register a session's header without writing anything (the first append materializes it)."""
        try:
            header = thaw(snapshot_json(dict(meta)))
        except AgentlogError:
            raise InvalidOptionError("session metadata must be losslessly JSON-serializable") from None
        created = header.get("createdAt")
        if type(created) is not int or created < 0:
            raise InvalidOptionError("session metadata createdAt must be a non-negative safe integer")
        session_id = header.get("id")
        if not isinstance(session_id, str):
            raise InvalidOptionError("session metadata id must be a string")
        check_header_fields(header, session_id)
        self._check_id(session_id)
        with self._serialized(session_id):
            if session_id in self._states or session_id in self._reserved:
                raise PersistenceError(f'session "{session_id}" already exists in this backend')
            if self.backend.read_revision(session_id) is not None:
                raise PersistenceError(
                    f'session "{session_id}" already has a persisted log on disk; load/resume it instead of creating'
                )
            self._states[session_id] = _State(header, 0, False)

    def append(self, session_id: str, events: Sequence[Mapping[str, Any]]) -> None:
        """Durably append wire events to a session that is not live here (adopting it from storage)."""
        try:
            batch = [snapshot_json(dict(event)) for event in events]
        except AgentlogError:
            raise PersistenceError(
                "session event batch is not losslessly JSON-serializable because it contains non-JSON-serializable data"
            ) from None
        with self._serialized(session_id):
            legacy.assert_supported_events(session_id, batch)
            if not batch:
                return
            if session_id in self._reserved:
                raise PersistenceError(
                    f'cannot append session "{session_id}" while its persisted preparation is reserved'
                )
            state = self._states.get(session_id)
            if state is None:
                source = self._repaired_source(session_id)
                self._remember_ownerless(session_id, source)
                state = self._states[session_id]
            if state.owner is not None:
                raise SessionCollisionError(f'session "{session_id}" is live; append through the live Session')
            _check_contiguous(session_id, batch, state.cursor)
            lock = self.backend.lock_writer(state.meta)
            try:
                self._check_loads_back(session_id, state, batch)
                self._append_core(session_id, state, batch)
            finally:
                lock.release()

    def _check_loads_back(self, session_id: str, state: _State, batch: builtins.list[Any]) -> None:
        """Refuse a batch with which the session would no longer load: a session you can write is a
        session you can read.

        The stored prefix and the batch go through the load's own checks (identity and vocabulary, the
        seed rules of every event, registered validators, the surface transitions, the repair a load would
        add). That re-reads the stored log for each ownerless batch: these appends are administrative (an
        import's update, a backend without staging), never the live write path, which validates each
        event as it is appended.
        """
        stored = self.backend.load_stored(session_id) if state.materialized else None
        prefix = builtins.list(stored.events) if stored is not None else []
        candidate = _Candidate(state.meta, [*prefix, *thaw(batch)])
        try:
            events = self._interpret(session_id, candidate)
            Session.from_restore(session_id, events, state.meta, registry=self._registry)
            interrupted_turn_closers(events)
        except Exception as err:
            raise InvalidEventError(
                f'append to session "{session_id}" refused: the session would not load back with this batch '
                f"({describe_error(err)}); nothing was written. Fix the event, or append it through a live "
                "Session, which names the offending field"
            ) from err

    @property
    def stages_sessions(self) -> bool:
        """Whether :meth:`stage` keeps a session invisible until it is published (the backend stages), so a
        writer may check its input as it writes and discard on a refusal."""
        return self._stager is not None

    def stage(self, meta: Mapping[str, Any]) -> StagedSession:
        """A new session written batch by batch and published whole, or not at all (``agentlog import``).

        The header is checked and the id refused as :meth:`create` does; the batches go through the
        backend's ``stage_session`` (see :mod:`agentlog.persistence.backend`), so no reader lists the
        session before :meth:`StagedSession.publish` and a failure or crash before it leaves nothing. A
        backend without ``stage_session`` gets ordinary ownerless appends (the session is visible from the
        first batch and ``discard`` cannot remove it).
        """
        self.create(meta)
        session_id = meta["id"]
        try:
            staged = self._stager.stage_session(self._states[session_id].meta) if self._stager is not None else None
        except BaseException:
            self._states.pop(session_id, None)
            raise
        return StagedSession(self, session_id, staged)

    def _append_core(self, session_id: str, state: _State, events: Sequence[WireEvent]) -> None:
        legacy.assert_supported_events(session_id, events)
        if not events:
            return
        _check_contiguous(session_id, events, state.cursor)
        # A very large buffer (a bulk import, a long unflushed run) is written as several bounded
        # batches: memory stays proportional to the batch, and each one is durable on its own.
        for start in range(0, len(events), MAX_BATCH_EVENTS):
            part = events[start : start + MAX_BATCH_EVENTS]
            self.backend.append_batch(state.meta, part, state.materialized)
            state.materialized = True
            state.cursor += len(part)
        self._cache.pop(session_id, None)

    # -- the live write path -------------------------------------------------------------------------------
    def _on_created(self, session: Session) -> None:
        self._refuse_stored_id(session)
        self._init_for(session)

    def _refuse_stored_id(self, session: Session) -> None:
        """Creating a session over an id that already has a stored log fails at once
        (vetoing the creation), instead of colliding at the first flush. Resumed sessions and the
        live owner of the id pass; an ownerless registration without a stored log passes too. A
        session seeded with a prefix (``create(id, seed=loaded.events)``, the original's way to claim a
        stored log) is judged by the seed-covers-stored-prefix rule of :meth:`_attach` instead."""
        from ..errors import SessionExistsError

        session_id = session.id
        self._check_id(session_id)  # an id this backend cannot store: INVALID_SESSION_ID, before any I/O
        if session.first_live_seq > 0:
            return
        with self._serialized(session_id):
            reserved = self._reserved.get(session_id)
            if reserved is not None and reserved.session is session:
                return
            state = self._states.get(session_id)
            if state is not None and state.owner is session:
                return
            if self.backend.read_revision(session_id) is None:
                return
        raise SessionExistsError(
            f'session "{session_id}" already has a stored log in the {self.backend.name} store; '
            f'reopen it with coordinator.resume("{session_id}") instead of creating it, or create the new '
            "session under another id (store.create() without an id picks a unique one)"
        )

    def _init_for(self, session: Session) -> WriteBehind:
        live = self._live.get(id(session))
        if live is not None:
            return live
        live = WriteBehind(
            session,
            delay=self._delay,
            scheduler=self._scheduler,
            write=self._write_live_batch,
            reattach=self._retry_attach,
            store_name=self.backend.name,
        )
        session_id = session.id
        with self._serialized(session_id):
            reserved = self._reserved.get(session_id)
            if reserved is not None and reserved.session is not session:
                raise SessionCollisionError(
                    f'cannot publish session "{session_id}": persisted state already owns this identity'
                )
            # Fail at once (vetoing the publication) when another writer holds the session.
            live.writer_lock = self.backend.lock_writer(session.header)
            try:
                seed_from = self._attach(session, reserved is not None and reserved.session is session)
            except SessionLockedError:
                live.writer_lock.release()
                raise
            except AgentlogError as err:
                live.init_error = err
                seed_from = None
            self._live[id(session)] = live
        if seed_from is not None:
            tail = session.events[seed_from:]  # (a slice: a restored log's older chunks stay packed)
            if tail:
                live.enqueue(tail)
        return live

    def _attach(self, session: Session, prepared: bool) -> int:
        """Bind ``session`` as the owner of its id; return the seq from which its events must be written."""
        session_id = session.id
        state = self._states.get(session_id)
        if prepared:
            with self._cond:
                del self._reserved[session_id]
                self._cond.notify_all()
            assert state is not None and state.owner is None
            if session.first_live_seq != state.cursor:
                raise PersistenceError(f'session "{session_id}" preparation no longer matches its persistence state')
            state.owner = session
            return state.cursor
        if state is not None:
            if state.owner is session:
                return len(session.events)
            if state.owner is None:
                if state.meta.get("cwd") != session.header.get("cwd"):
                    raise SessionCollisionError(
                        f'session "{session_id}" is already persisted at a different cwd '
                        f"(persisted: {_js_opt(state.meta.get('cwd'))}, live: {_js_opt(session.header.get('cwd'))}) "
                        "(id collision)"
                    )
                if state.cursor:
                    self._require_prefix(
                        session,
                        state.cursor,
                        "is already persisted with "
                        f"{state.cursor} event(s) that do not match this live session (id collision)",
                    )
                state.owner = session
                return state.cursor
            other = self._live.get(id(state.owner))
            if not state.materialized and (other is None or not other.has_work):
                del self._states[session_id]
                state = None
            else:
                raise SessionCollisionError(
                    f'session "{session_id}" is already bound to a different live session in this backend '
                    "(id collision)"
                )
        stored = self.backend.load_stored(session_id)
        if stored is not None:
            return self._adopt(session, stored)
        if self.backend.read_revision(session_id) is not None:
            raise PersistenceError(f'session "{session_id}" already has a persisted log on disk')
        self._states[session_id] = _State(thaw(session.header), 0, False, session)
        return 0

    def _require_prefix(self, session: Session, count: int, problem: str) -> None:
        stored = self.backend.load_stored(session.id)
        events = legacy.normalize_stored_events(session.id, stored.events) if stored is not None else []
        if len(events) < count or not _seed_covers(session.events, events[:count]):
            raise SessionCollisionError(f'session "{session.id}" {problem}')

    def _adopt(self, session: Session, stored: Any) -> int:
        """A live session whose log already exists (a hot reload): its seed must cover the stored prefix."""
        session_id = session.id
        meta = stored.meta
        if meta.get("id") != session_id:
            raise SessionPersistenceCorruptionError(
                f'stored session identity mismatch: requested "{session_id}", header contains "{meta.get("id")}"'
            )
        if meta.get("cwd") != session.header.get("cwd"):
            raise SessionCollisionError(
                f'session "{session_id}" is already persisted at a different cwd '
                f"(persisted: {_js_opt(meta.get('cwd'))}, live: {_js_opt(session.header.get('cwd'))}) "
                "(id collision)"
            )
        events = self._interpret(session_id, stored)
        if not _seed_covers(session.events, events):
            raise SessionCollisionError(
                f'session "{session_id}" already has a persisted log on disk that does not match this live '
                "session (id collision)"
            )
        if stored.torn_marker is not None:
            self.backend.commit_repair(meta, stored.torn_marker, [])
        self._states[session_id] = _State(meta, len(events), True, session)
        return len(events)

    def _retry_attach(self, live: WriteBehind) -> bool:
        """Retry an attach that failed on a transient storage condition (disk full, I/O, out of memory).

        Such a failure is not remembered for the session's lifetime. Once the store
        is usable again the whole unstored tail (everything buffered since) is queued, so nothing
        buffered is dropped at close. Collisions and corruption stay final.
        """
        from ..errors import ResourceExhaustedError, StorageAccessError

        if not isinstance(live.init_error, (StorageAccessError, ResourceExhaustedError)):
            return False
        session = live.session
        with self._serialized(session.id):
            reserved = self._reserved.get(session.id)
            try:
                seed_from = self._attach(session, reserved is not None and reserved.session is session)
            except AgentlogError as err:
                live.init_error = err
                return False
            live.init_error = None
            live.replace_pending(session.events[seed_from:])
        return True

    def _on_event(self, session: Session, event: Event) -> None:
        live = self._live.get(id(session))
        if live is None:
            live = self._init_for(session)
            return  # initialization enqueued everything not yet stored, this event included
        if not live.retired:
            live.enqueue((event,))

    def _write_live_batch(self, live: WriteBehind, batch: builtins.list[Any]) -> None:
        session = live.session
        with self._serialized(session.id):
            state = self._states.get(session.id)
            if state is None or state.owner is not session:
                raise PersistenceError(f'session "{session.id}" lost its persistence state')
            fresh = [event for event in batch if event["seq"] >= state.cursor]
            self._append_core(session.id, state, fresh)

    def _on_flush(self, session: Session) -> None:
        self.flush(session)

    def flush(self, session: Session) -> None:
        """Make every event committed so far durable (a barrier); raise the first failure."""
        live = self._live.get(id(session))
        if live is None:
            live = self._init_for(session)
        live.flush()

    async def aflush(self, session: Session) -> None:
        """:meth:`flush` for asyncio code (the blocking write runs in a worker thread)."""
        import asyncio  # here, not at import: synchronous users of the coordinator never load it

        await asyncio.to_thread(self.flush, session)

    def _on_disposed(self, session: Session) -> None:
        live = self._live.get(id(session))
        if live is None:
            return
        self._retire(session, live)

    def _retire(self, session: Session, live: WriteBehind) -> None:
        """Flush a disposed session, then release its id. A write failure keeps it for ``close()`` to retry."""
        try:
            live.flush()
        except Exception as err:
            logger.warning('%s: session "%s" retirement failed: %s', self.backend.name, session.id, describe_error(err))
            if live.init_error is not None and live.writer_lock is not None:
                # It never owned the id (an id collision): its writer lock guards nothing, let others in.
                live.writer_lock.release()
                live.writer_lock = None
            return  # kept in the live set: close() retries and reports it
        with self._serialized(session.id):
            live.retired = True
            self._live.pop(id(session), None)
            state = self._states.get(session.id)
            if state is not None and state.owner is session:
                del self._states[session.id]
            if live.writer_lock is not None:
                live.writer_lock.release()
                live.writer_lock = None

    # -- teardown -------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop listening, drain every live buffer and in-flight operation, then close the backend."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._atexit)
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        errors: list[BaseException] = []
        try:
            for live in builtins.list(self._live.values()):
                try:
                    live.flush()  # retries a transient attach failure or raises it
                except Exception as err:
                    errors.append(err)
                if live.writer_lock is not None:
                    live.writer_lock.release()
                    live.writer_lock = None
            self._live.clear()
            with self._cond:  # wait for detached public operations (appends, loads) to finish
                while self._id_locks:
                    self._cond.wait(0.05)
            self._scheduler.close()
        finally:
            self.backend.close()
        if errors:
            raise PersistenceError(
                f"{self.backend.name} dispose failed: " + "; ".join(describe_error(e) for e in errors)
            ) from errors[0]

    def __enter__(self) -> PersistenceCoordinator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_contiguous(session_id: str, events: Sequence[Any], first_seq: int) -> None:
    """Refuse a batch whose seqs do not run on from ``first_seq`` (a caller's bug, never a repair case)."""
    for index, event in enumerate(events):
        # A committed kernel event (the live path: every event of every flush) skips the ABC check.
        seq = event.get("seq", UNDEFINED) if type(event) is Event or isinstance(event, Mapping) else UNDEFINED
        if seq != first_seq + index or type(seq) is not int:  # a missing seq is JavaScript's undefined
            raise PersistenceError(
                f'append seq mismatch for "{session_id}": expected {first_seq + index} at index {index}, '
                f"got {js_string(seq)}"
            )
