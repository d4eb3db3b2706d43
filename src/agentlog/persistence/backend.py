"""The narrow backend protocol every storage implementation provides.

The coordinator owns every policy (batching, ordering, repair, validation, caching); a backend only
moves bytes. That keeps each backend small enough to be checked by one shared conformance suite, and a
new backend (PostgreSQL, say) implements these primitives and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, runtime_checkable

from ..errors import PersistenceError, SessionPersistenceCorruptionError
from ..kernel.events import Event, SessionHeader
from ..kernel.jsoncodec import dumps

if TYPE_CHECKING:
    from typing_extensions import TypeVar

    TornT = TypeVar("TornT", default=Any)
else:
    from typing import TypeVar

    TornT = TypeVar("TornT")  # (3.11's TypeVar takes no default; only the type checker reads it)
"""A backend's torn-marker type: what its ``load_stored`` reports and its ``commit_repair`` takes back
(``TornMarker`` for JSONL; ``None`` for a backend whose logs cannot tear). A bare ``Backend`` (any backend)
leaves it open (``Any``)."""

WireEvent = Mapping[str, Any]
"""An event in wire form: an :class:`~agentlog.events.Event` or a plain dict with the same keys."""


@dataclass
class StoredPrefix(Generic[TornT]):
    """The valid contiguous stored prefix of one session, freshly parsed (owned by the caller).

    ``meta`` is the session header as stored (a plain dict, typed as the kernel's
    :class:`~agentlog.kernel.events.SessionHeader`; the coordinator checks it again on restore).

    ``torn_marker`` is ``None`` when the stored artifact ends cleanly; otherwise it is the backend's
    private description of the torn tail (of its marker type ``TornT``) that :meth:`Backend.commit_repair`
    must remove.
    """

    meta: SessionHeader
    events: list[dict[str, Any]]
    revision: str
    torn_marker: TornT | None = None


@dataclass
class PartialRead:
    """What :meth:`Backend.read_prefix` salvages: the valid contiguous prefix up to the first damage.

    ``meta`` is the session header as stored (as in :class:`StoredPrefix`).

    ``damage`` is the typed error a full load would raise (``None`` when the log is intact); its
    ``location`` names the file or database and ``offset`` the byte offset (JSONL: in the file; for a
    zstd log, of the damaged frame) or row where the damage was found. ``torn_offset`` is where an
    (intact log's) incomplete final record starts, which a resume would remove; ``events`` exclude it.
    """

    meta: SessionHeader
    events: list[dict[str, Any]]
    revision: str
    damage: SessionPersistenceCorruptionError | None = None
    torn_offset: int | None = None


@dataclass
class SessionListing:
    """One stored session as listing sees it. A damaged or foreign header is reported, not hidden."""

    id: str
    header: dict[str, Any] | None
    revision: str | None = None
    location: str | None = None
    error_code: str | None = None
    error_message: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error_code is None


@dataclass
class RawArtifact:
    meta: SessionHeader
    filename: str
    content: str


class WriterLock(Protocol):
    def release(self) -> None: ...


class StagedLog(Protocol):
    """A new session's log written batch by batch that no reader sees until :meth:`publish`.

    What ``stage_session`` returns (see the optional methods of :class:`Backend`). ``append`` takes
    contiguous batches from seq 0; ``publish`` makes the whole log durable and visible at once (the header
    and every batch, or nothing); ``discard`` (and a crash before ``publish``) leaves no listed session.
    Bulk writers that must be all-or-nothing (``agentlog import``) write through it.
    """

    def append(self, events: Sequence[WireEvent]) -> None: ...

    def publish(self) -> None: ...

    def discard(self) -> None: ...


class StagedGuard:
    """The open/closed state a staged log shares across backends (the JSONL and SQLite staged logs).

    ``publish`` and ``discard`` set ``_closed``; every later ``append`` or ``publish`` is refused. A batch
    must start at ``_next_seq`` (the staged log is written from seq 0, contiguously).
    """

    _meta: Mapping[str, Any]
    _closed: bool
    _next_seq: int

    def _check_open(self) -> None:
        if self._closed:
            raise PersistenceError(f'the staged log of "{self._meta["id"]}" was already published or discarded')

    def _check_next(self, events: Sequence[WireEvent]) -> None:
        if events[0]["seq"] != self._next_seq:
            raise PersistenceError(
                f'staged append of "{self._meta["id"]}" starts at seq {events[0]["seq"]}, expected {self._next_seq}'
            )


@runtime_checkable
class Backend(Protocol[TornT]):
    """Storage primitives. All methods are synchronous and may block on I/O.

    Generic in the backend's torn-marker type (:data:`TornT`): ``Backend[TornMarker]`` is a JSONL backend,
    a bare ``Backend`` any backend."""

    name: str

    def load_stored(self, session_id: str) -> StoredPrefix[TornT] | None:
        """The valid stored prefix, or ``None`` when no artifact exists. Never writes."""
        ...

    def read_revision(self, session_id: str) -> str | None:
        """The current revision without loading the log; ``None`` when absent."""
        ...

    def append_batch(self, meta: Mapping[str, Any], events: Sequence[WireEvent], materialized: bool) -> None:
        """Durably append a contiguous batch; the first batch materializes the header atomically with it."""
        ...

    def commit_repair(self, meta: Mapping[str, Any], torn_marker: TornT | None, closers: Sequence[WireEvent]) -> None:
        """Remove the torn tail named by ``torn_marker`` (if any), then append ``closers``."""
        ...

    def list_sessions(self) -> list[SessionListing]:
        """Every materialized session, headers only (no full-log parse), sorted by id."""
        ...

    def locate(self, meta: Mapping[str, Any]) -> str | None:
        """Where the session's artifact lives (pure, no I/O); ``None`` when not file-based."""
        ...

    def lock_writer(self, meta: Mapping[str, Any]) -> WriterLock:
        """Take the advisory single-writer lock of a session, or raise ``SessionLockedError`` at once."""
        ...

    def close(self) -> None: ...


# --- optional capabilities -------------------------------------------------------------------------------
#
# A backend provides any of these by defining the method; nothing is registered or inherited. The
# coordinator, the tail and the derived-file placement ask ``isinstance(backend, Capability)`` (the
# protocols are runtime-checkable: the check is for the method's presence, as ``getattr`` was) and fall
# back to the plain primitives above when the answer is no, so a minimal backend stays minimal.


@runtime_checkable
class ValidatesSessionIds(Protocol):
    """A backend that cannot store every non-empty string as an id (a length or byte limit)."""

    def validate_session_id(self, session_id: str) -> None:
        """Raise ``InvalidSessionIdError`` (``INVALID_SESSION_ID``), naming the limit, for an id this
        backend cannot store; called before create and every read."""
        ...


@runtime_checkable
class SalvagesPrefix(Protocol):
    """A backend that can read the valid prefix of a damaged log (``agentlog export --partial``)."""

    def read_prefix(self, session_id: str) -> PartialRead | None:
        """The salvageable prefix up to the first damage; never writes; ``None`` when no artifact exists."""
        ...


@runtime_checkable
class SeeksStored(Protocol[TornT]):
    """A backend that can read a log's suffix at a cost of the suffix rather than the log."""

    def load_stored_from(self, session_id: str, from_seq: int) -> StoredPrefix[TornT] | None:
        """The events with ``seq >= from_seq`` of the valid stored prefix (``torn_marker`` always ``None``,
        never writes; ``None`` when no artifact exists).

        It must return what ``load_stored`` would, sliced at ``from_seq``, for a log whose records before
        the span are intact (damage before the span may go unseen). ``PersistenceCoordinator.read_from``
        uses it when present and reads the whole log otherwise.
        """
        ...


@dataclass(frozen=True)
class StoredStream:
    """A whole stored log read a batch at a time (:class:`StreamsStored`): the header, the revision the
    bytes were read at, and the events in batches (packed chunk runs kept packed, as a compact read
    keeps them), each batch handed over so that the parsed log never exists whole."""

    meta: SessionHeader
    revision: str
    batches: Iterator[list[Any]]


def batched_pages(
    pages: Iterator[tuple[list[Any], int]], batch_bytes: int, unchanged: Callable[[], bool], changed: str, location: str
) -> Iterator[list[Any]]:
    """A :class:`StoredStream`'s batches from pages of rows read at different moments: ``(events, stored
    bytes)`` pages joined into batches of about ``batch_bytes``. Committed rows are never rewritten, so the
    pages are the log of the revision read first unless the session changed meanwhile (an append, a
    deletion): ``unchanged()`` is asked once the pages are exhausted, and ``False`` raises
    :class:`~agentlog.errors.SessionTailChangedError` with ``changed`` (where: ``location``)."""
    from ..errors import SessionTailChangedError

    pending: list[Any] = []
    size = 0
    for events, stored in pages:
        pending.extend(events)
        size += stored
        if size >= batch_bytes:
            yield pending
            pending, size = [], 0
    if pending:
        yield pending
    if not unchanged():
        raise SessionTailChangedError(changed, location=location)


@runtime_checkable
class StreamsStored(Protocol):
    """A backend that can hand over a flawless log's events a batch at a time (every built-in backend: JSONL
    reads the file once at one revision; SQLite and PostgreSQL read pages of rows, and refuse a session that
    changed between them with :class:`~agentlog.errors.SessionTailChangedError`)."""

    def stream_stored(self, session_id: str, batch_bytes: int = ...) -> StoredStream | None:
        """The log's events in batches of about ``batch_bytes`` of stored text, the events ``load_stored``
        returns under ``compact_chunk_runs()``, in order; ``None`` when there is no log or when it has
        anything only the whole read judges (a torn tail, damage found before streaming). Damage met
        while streaming raises, and so does a log that changed while it was streamed (where the batches
        are read at different moments); a caller that reports either reads the log whole.
        Never writes."""
        ...


@runtime_checkable
class ProbesTornTail(Protocol):
    """A backend whose logs can tear (a crash cuts a file's last write short) and that can tell a torn
    tail from the log's end alone, without the whole read (the JSONL backend)."""

    def probe_torn_tail(self, session_id: str) -> bool:
        """Whether ``load_stored`` would report a torn tail (a marker) for this log, reading only its end.

        ``False`` for a log that ends cleanly, an absent one, and one with damage near its end (the whole
        read tells damage). Never writes.
        """
        ...


@runtime_checkable
class ListsRevisions(Protocol):
    """A backend that can list every session's revision without reading a header or a log byte."""

    def list_revisions(self) -> dict[str, str]:
        """Every stored session's id mapped to its current revision, sorted by id.

        Exactly the string ``list_sessions`` and ``read_revision`` report for it, from a directory scan
        and a stat per log, or one SELECT of ids and revision columns. It is what the search index
        reconciles against on every search, so it must cost far less than ``list_sessions``: a session
        whose header is damaged may be included (only its header would tell), a session ``list_sessions``
        reports without a revision (a refused symlink, a row whose revision columns are invalid) is left
        out, and root-level misconfiguration that ``list_sessions`` raises for raises here too when
        checking it costs no extra read. ``PersistenceCoordinator.list_revisions`` uses it when present
        and builds the map from ``list_sessions`` otherwise.
        """
        ...


@runtime_checkable
class StagesSessions(Protocol):
    """A backend that can write a new session that stays invisible until it is published whole."""

    def stage_session(self, meta: Mapping[str, Any]) -> StagedLog:
        """A staged new session (JSONL: a temporary file linked into place; SQLite and PostgreSQL: one
        transaction on a connection of its own). A crash before ``publish`` leaves nothing any reader
        lists. The id must have no stored log (``publish`` refuses one that appeared meanwhile).
        ``PersistenceCoordinator.stage`` falls back to ordinary appends (published at the first batch)
        for a backend without it."""
        ...


DeleteStep = Callable[[str], None]
"""A test hook of :meth:`DeletesSessions.delete_session`: called with a step's name just before the step
runs (the crash tests SIGKILL the process there and check that the store holds the whole session or
nothing). The steps are the backend's own (JSONL: ``tombstone``, ``unlink``, ``rmdir``; SQLite and
PostgreSQL: ``begin``, ``events``, ``session``, ``commit``; memory: ``remove``)."""


@runtime_checkable
class DeletesSessions(Protocol):
    """A backend that can remove a stored session, all at once (``PersistenceCoordinator.delete``)."""

    def delete_session(self, session_id: str, step: DeleteStep | None = None) -> bool:
        """Remove the session's stored log: ``True`` when there was one, ``False`` when there was none.

        Atomic for every reader: a reader (in any process) sees the whole session or none of it, and a
        crash at any point leaves one or the other (JSONL: the log is renamed to an unlisted tombstone,
        then unlinked; SQLite and PostgreSQL: one transaction). The caller holds the session's writer
        lock (``lock_writer``); the backend does not take it. Leftovers of a crash between the rename
        and the unlink (an unlisted tombstone) are removed by the next ``delete_session`` of that id.
        """
        ...


@runtime_checkable
class WaitsForChange(Protocol):
    """A backend that can signal a commit to a session (PostgreSQL: ``LISTEN``), so a tail need not poll."""

    def wait_for_change(self, session_id: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a commit to ``session_id``: ``True`` when one was signalled (since
        the previous call or within the wait), ``False`` on timeout.

        Only a hint: the first call starts listening (a commit just before it is not reported) and the
        caller re-reads after every wait, whatever it returns. ``agentlog.persistence.tail`` waits here
        between reads when the backend has it and sleeps its poll interval otherwise.
        """
        ...


@runtime_checkable
class ReadsRawArtifacts(Protocol):
    """A backend that can return a stored artifact's logical text (JSONL; a test and inspection aid).

    Not part of :class:`Backend`: nothing in the library reads raw artifacts. The built-in backends
    without raw artifacts define it to raise ``PersistenceError`` (the spec's text), and say so with
    ``supports_raw_artifacts = False``.
    """

    supports_raw_artifacts: bool

    def read_raw(self, session_id: str) -> RawArtifact | None:
        """The stored artifact's logical text, ``None`` when absent (backends without raw artifacts raise)."""
        ...


@runtime_checkable
class PlacesDerivedFiles(Protocol):
    """A backend that says where the derived files of its store (projection cache, search index) live.

    The derived files are SQLite files the upper layers write and rebuild at will; the backend only
    names their place. ``derived_directory()`` is the (created) directory to put them in under their
    plain names, or ``None`` when the store keeps them beside itself under its own names
    (``derived_path``) or has no place on disk (a memory store). ``derived_path(name, suffix)`` is where
    a derived file lives beside the store: ``name`` is its file name in a store directory (JSONL),
    ``suffix`` what is appended to a store file (SQLite); ``None`` when there is no such place.
    """

    def derived_directory(self) -> str | None: ...

    def derived_path(self, name: str, suffix: str) -> str | None: ...


@runtime_checkable
class IdentifiesStore(Protocol):
    """A backend that can say which store it opens, so the derived files are bound to the store, not a copy.

    A derived file beside the store (the projection cache) records the identity it was built for and is
    rebuilt when the store it finds has another, so a cache file copied along with a store, or left
    behind by a store deleted and recreated at the same path, is never trusted. The upper layers ask
    ``isinstance(backend, IdentifiesStore)``; a backend without it binds its derived files to the backend
    instance (they are rebuilt by every process).
    """

    def store_identity(self) -> str | None:
        """Which store this backend opens: equal for every backend over the same store (in any process) and
        different for any other store, or ``None`` while the store holds nothing yet (no root directory,
        no database). ``<kind>:<key>``: ``jsonl:<real root>:<inode>`` (a JSONL store has no id of its
        own), ``sqlite-store:<the database's random store id>``, ``postgres:<host-cache key>``
        (:mod:`agentlog.persistence.host_cache`)."""
        ...


_CHECKS_IDS: dict[type, bool] = {}
"""Per backend class, whether it has ``validate_session_id``: a runtime protocol check costs
microseconds, and the coordinator asks before every read (a capability is a method of the class)."""


def validate_session_id(backend: object, session_id: object) -> None:
    """Run the backend's optional id check (a backend without one accepts every non-empty string)."""
    kind = type(backend)
    checks = _CHECKS_IDS.get(kind)
    if checks is None:
        checks = _CHECKS_IDS[kind] = isinstance(backend, ValidatesSessionIds)
    if checks:
        backend.validate_session_id(session_id)  # type: ignore[attr-defined]  # checked just above


def check_reader_limits(**limits: object) -> None:
    """Refuse non-positive reader limits (frame, line and nesting caps) with the option's name."""
    for label, limit in limits.items():
        if type(limit) is not int or limit < 1:
            raise ValueError(f"{label} must be a positive integer, got {limit!r}")


def event_json(event: WireEvent) -> bytes:
    """The event's JSON bytes, serialized once.

    A committed event that already carries its bytes (someone asked for ``json_bytes``) reuses them.
    Otherwise the bytes are produced here without being cached on the event: once durable they are
    never needed again, and keeping them would double the memory of a long session.
    """
    if type(event) is Event:
        cached = event.cached_json_bytes()
        if cached is not None:
            return cached
    return dumps(event)
