"""The persisted projection cache (runtime spec §3): durable checkpoints of every projection unit's state.

One record per session, ``{identity: {createdAt, cwd?}, rows: {key: {ver, seq, val}}}``, kept in a
:mod:`~agentlog.projection.cache_storage` medium. The cache is a fold shortcut, never an authority: a row
is possibly stale (its ``seq`` says how stale) but never wrong, so

* live sessions are checkpointed on a write-behind — two mandatory points (``turn/end`` and session
  disposal) plus a count and an interval throttle in between — and every write is fail-soft: a failure
  logs a warning and the next write heals it;
* every write makes the log durable *before* the record lands ("log durable before cache"): a crash
  leaves the cache behind the log (a longer tail replay), never ahead of it;
* a record is bound to the log lifecycle it was folded from (header ``createdAt`` and ``cwd``): a
  recreated id or a swapped store cannot seed a value;
* a cold read (:meth:`ProjectionCache.cold_snapshot`) folds only the stored tail past the rows'
  anchored floor and falls back to one full re-read whenever a row cannot be trusted (version bump, a
  log that shrank under the row, a state the unit's schema rejects, an unrelated lifecycle, or — an
  agentlog addition — a stored event at the rows' cut that is not the one they were folded through).

Where the durable writes run: on one background thread per cache (:class:`BackgroundWriter`, the
default), so the appending thread — often an asyncio event loop — never waits for a flush or a cache
commit; the registry cut itself is taken on the appending thread, inside the event's dispatch, as the
original does. :class:`InlineWriter` runs them in the caller's thread (deterministic tests, one-shot
tools). The interval trigger uses ``loop.call_later`` when the arming thread runs an event loop and a
daemon ``threading.Timer`` otherwise (:func:`default_timer`); tests inject their own.

agentlog addition: a record also keeps the backend revision of the stored log when the rows are
known to be its complete fold (the write saw no event after its cut; a cold read saw the same revision
before and after reading). :meth:`ProjectionCache.cached_snapshot` with ``revision=`` serves a record
only for that exact stored log, which is how ``agentlog ls`` skips reading logs whose row is current.

agentlog addition: a record also keeps its *anchor* (:func:`anchor_of`), a digest of the event at
the rows' cut. The tail fold trusts the stored log up to the cut to be the log the rows were folded
from; a store restored from a backup and written on breaks that (same id, same header, an older log
continued differently), so the cold read checks the stored event at the cut against the anchor and
refolds the whole log when it differs. A record without an anchor (the original's, or written before
anchors were kept) is trusted as the original trusts it.

agentlog addition: every write also stores the record's *views* — what :meth:`ProjectionCache._serve`
computes from its rows (each row's ``[ver, seq]`` and the client-visible units' views), stamped with
the code that computed them (:func:`code_stamp`). :meth:`ProjectionCache.cached_snapshots` serves a
listing from those (one query over the listing columns, no state parsed, no view computed) with the
rows path's decisions: identity match, each unit's ``stateVersion``, host-only rows never served,
``asOfSeq`` the lowest served watermark, "current" all or nothing. Records without usable views
(another release's, or written before views were stored) are parsed from their rows as before.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import queue
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

import orjson

from .._version import __version__
from ..errors import (
    InvalidOptionError,
    NonJsonValueError,
    ProjectionCheckpointNotJsonError,
    ProjectionStateError,
    describe_error,
)
from ..kernel import jsoncodec
from ..kernel.events import TURN_END
from ..kernel.jsonvalue import snapshot_json, thaw
from ..kernel.session import Session, lock_of
from ..kernel.store import SessionStore
from .cache_storage import CacheRecord, CacheStorage, ServedViews, open_cache_storage
from .units import ProjectionUnit

__all__ = [
    "DEFAULT_WRITE_EVERY_EVENTS",
    "DEFAULT_WRITE_INTERVAL_MS",
    "NOT_LOSSLESS_JSON",
    "BackgroundWriter",
    "InlineWriter",
    "ProjectionCache",
    "anchor_of",
    "identity_matches",
    "identity_of",
]

logger = logging.getLogger("agentlog.projection.cache")

DEFAULT_WRITE_EVERY_EVENTS: Final = 200
DEFAULT_WRITE_INTERVAL_MS: Final = 5000
NOT_LOSSLESS_JSON: Final = (
    "projection checkpoint is not losslessly JSON-serializable (a unit state violates the plain-JSON contract)"
)

Checkpoint = Mapping[str, Mapping[str, Any]]
Cancel = Callable[[], None]
Timer = Callable[[float, Callable[[], None]], Cancel]
"""``timer(delay_ms, callback) -> cancel``: run ``callback`` once after ``delay_ms`` unless cancelled."""


class _Registry(Protocol):
    """The part of :class:`~agentlog.projection.registry.ProjectionRegistry` the cache uses."""

    @property
    def units(self) -> tuple[ProjectionUnit[Any, Any], ...]: ...

    def checkpoint(self, session: Session) -> dict[str, Any]: ...

    def restore_floor(self, checkpoint: Checkpoint) -> int | None: ...

    def view_checkpoint(self, checkpoint: Checkpoint) -> dict[str, Any]: ...

    def restore(self, checkpoint: Checkpoint, events: Sequence[Any], base_seq: int) -> Any: ...


class _Coordinator(Protocol):
    """What the cache needs of persistence: the flush barrier, the suffix read and the log revision."""

    @property
    def store(self) -> SessionStore: ...

    def flush(self, session: Session) -> None: ...

    def read_from(self, session_id: str, from_seq: int) -> Any: ...


@runtime_checkable
class _NotifiesDeletes(Protocol):
    """A coordinator that reports the sessions it deletes (``PersistenceCoordinator.on_deleted``)."""

    def on_deleted(self, callback: Callable[[str], None]) -> Callable[[], None]: ...


class Writer(Protocol):
    """Where the fail-soft durable writes run (``submit`` never raises for a job's failure)."""

    def submit(self, job: Callable[[], None]) -> None: ...

    def drain(self) -> None: ...

    def close(self) -> None: ...


class InlineWriter:
    """Runs every write in the submitting thread, at once."""

    def submit(self, job: Callable[[], None]) -> None:
        job()

    def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


class BackgroundWriter:
    """One daemon thread running the submitted writes in submission order (started on first use)."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._closed:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="agentlog-projection-cache", daemon=True)
                self._thread.start()
            self._queue.put(job)

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                job()
            except BaseException:  # jobs are fail-soft already; never let the thread die
                logger.exception("session projection cache: a background write raised")
            finally:
                self._queue.task_done()

    def drain(self) -> None:
        """Wait until every write submitted so far has finished (call it off the event loop)."""
        if self._thread is not None and threading.current_thread() is not self._thread:
            self._queue.join()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            if threading.current_thread() is not thread:
                thread.join()


def default_timer(delay_ms: float, callback: Callable[[], None]) -> Cancel:
    """``loop.call_later`` when this thread runs an event loop, else a daemon :class:`threading.Timer`."""
    import asyncio  # here, not at import: a synchronous reader of the cache never loads it

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        timer = threading.Timer(delay_ms / 1000.0, callback)
        timer.daemon = True
        timer.start()
        return timer.cancel
    handle = loop.call_later(delay_ms / 1000.0, callback)
    return handle.cancel


def identity_of(header: Mapping[str, Any]) -> dict[str, Any]:
    """The identity fields a record is bound to: ``{createdAt, cwd?}`` of the session header."""
    identity: dict[str, Any] = {"createdAt": header["createdAt"]}
    if header.get("cwd") is not None:
        identity["cwd"] = header["cwd"]
    return identity


def identity_matches(stored: Mapping[str, Any], expected: Mapping[str, Any]) -> bool:
    """Same ``createdAt`` and same ``cwd`` (absent equals absent; absent differs from present)."""
    return stored.get("createdAt") == expected.get("createdAt") and stored.get("cwd") == expected.get("cwd")


def anchor_of(seq: int, event: object) -> str | None:
    """The anchor of a cut at ``seq`` whose event there is ``event``: ``"<seq>:<digest>"``, ``"-1"`` for
    a cut before any event, ``None`` when ``event`` is not the event of that seq.

    The digest covers the whole event (seq, type, time, data and the optional fields), encoded with
    sorted keys so a live event and the same event read back from any backend agree; an event nested
    too deeply for that falls back to the gate's own encoding (deterministic, so it agrees too).
    """
    if seq < 0:
        return "-1"
    if not isinstance(event, Mapping) or event.get("seq") != seq:
        return None
    plain = thaw(event)
    try:
        text = orjson.dumps(plain, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        text = jsoncodec.dumps(plain)
    return f"{seq}:{hashlib.blake2b(text, digest_size=12).hexdigest()}"


def _anchored(anchor: str | None, events: Sequence[Any]) -> bool:
    """Whether ``events`` (a stored suffix, in seq order) hold the anchor's event unchanged.

    ``None`` (a record without an anchor) is trusted, as the original trusts every record; an anchor
    whose seq the suffix does not reach, or whose event differs, is not.
    """
    if anchor is None or anchor == "-1":
        return True
    seq_text, _, _ = anchor.partition(":")
    try:
        seq = int(seq_text)
    except ValueError:
        return False
    if not len(events):
        return False
    first = events[0].get("seq") if isinstance(events[0], Mapping) else None
    if type(first) is not int or not first <= seq < first + len(events):
        return False
    return anchor_of(seq, events[seq - first]) == anchor


def _natural(name: str, value: object) -> int:
    if type(value) is not int or value < 1:
        raise InvalidOptionError(f"{name} must be a natural number >= 1, got {value!r}")
    return value


def _field(result: Any, name: str) -> Any:
    return result[name] if isinstance(result, Mapping) else getattr(result, name)


@dataclass
class _Dirty:
    """Write-behind bookkeeping of one live session (dropped at disposal)."""

    session: Session
    pending: int = 0
    timer: Cancel | None = None
    timer_token: object | None = None


@dataclass(frozen=True)
class _Cut:
    """One registry checkpoint taken at a boundary, waiting to be made durable."""

    session: Session
    rows: dict[str, Any]
    identity: dict[str, Any]
    end_seq: int
    generation: int
    event: Any = None
    """The event at ``end_seq`` (``None`` for an empty log): the anchor is computed from it when the
    cut lands, off the appending thread."""


class ProjectionCache:
    """Persisted projection checkpoints for one store: the write-behind and the cold-read ladder.

    ``registry`` folds the units; ``coordinator`` is the store's
    :class:`~agentlog.persistence.PersistenceCoordinator` (its ``store`` is the store whose live sessions
    are checkpointed; flush barrier, ``read_from`` suffix reads, its backend's ``read_revision``);
    ``storage`` the medium. Both throttles default to the original's shipped values. Call
    :meth:`close` before closing the coordinator: it unsubscribes, cancels armed timers and waits for
    queued writes (it closes ``storage`` only with ``owns_storage``).
    """

    def __init__(
        self,
        registry: _Registry,
        coordinator: _Coordinator,
        storage: CacheStorage,
        *,
        write_every_events: int = DEFAULT_WRITE_EVERY_EVENTS,
        write_interval_ms: int = DEFAULT_WRITE_INTERVAL_MS,
        timer: Timer | None = None,
        writer: Writer | None = None,
        store: SessionStore | None = None,
        owns_storage: bool = False,
    ) -> None:
        self.write_every_events = _natural("writeEveryEvents", write_every_events)
        self.write_interval_ms = _natural("writeIntervalMs", write_interval_ms)
        self.registry = registry
        self.coordinator = coordinator
        self.storage = storage
        self.store: SessionStore = store if store is not None else coordinator.store
        self._timer: Timer = timer or default_timer
        self._writer: Writer = writer if writer is not None else BackgroundWriter()
        self._owns_storage = owns_storage
        self._lock = threading.RLock()
        self._dirty: dict[int, _Dirty] = {}
        self._generation = 0
        self._landed: dict[str, int] = {}
        self._closed = False
        # A cut taken inside an event's dispatch contains that event whatever the listener order: the
        # registry's checkpoint folds its cells up to the end of the session's log first.
        self._unsubscribe = [self.store.on_event(self._on_event), self.store.on_disposed(self._on_disposed)]
        if isinstance(coordinator, _NotifiesDeletes):  # a deleted session's record goes with its log
            self._unsubscribe.append(coordinator.on_deleted(self._forget))
        reference = weakref.ref(self)
        self._atexit = lambda: _drain_at_exit(reference)
        atexit.register(self._atexit)

    @classmethod
    def open(cls, registry: _Registry, coordinator: Any, **options: Any) -> ProjectionCache:
        """The cache of ``coordinator``'s store in the store's own medium (closed with the cache).

        :func:`~agentlog.projection.cache_storage.open_cache_storage` picks it from the backend: a
        file beside a JSONL or SQLite store, memory for in-process stores. ``options`` are the
        constructor's keyword arguments.
        """
        storage = open_cache_storage(coordinator.backend)
        return cls(registry, coordinator, storage, owns_storage=True, **options)

    # -- reads ------------------------------------------------------------------------------------
    def _record(self, session_id: str) -> CacheRecord | None:
        try:
            return self.storage.get(session_id)
        except Exception as err:  # the cache is never required: an unreadable record is an absent one
            logger.warning('session projection cache: read for "%s" failed: %s', session_id, describe_error(err))
            return None

    def _serve(
        self, record: CacheRecord | None, header: Mapping[str, Any], revision: str | None
    ) -> dict[str, Any] | None:
        if record is None or not identity_matches(record.identity, identity_of(header)):
            return None
        if record.views is not None and _usable_views(record.views, code_stamp()):
            return self._serve_views(ServedViews(record.identity, record.revision, record.views), header, revision)
        if revision is not None:
            # "Current" is all or nothing: a row of a since-bumped unit would leave a value out.
            return self._current_cut(record) if record.revision == revision else None
        values = self.registry.view_checkpoint(record.rows)
        if not values:
            return None
        # One cut: the lowest served watermark (under-claiming is safe under higher-seq-wins).
        as_of = min(int(record.rows[key]["seq"]) for key in values)
        return {"asOfSeq": as_of, "values": values}

    def _serve_views(
        self,
        stored: ServedViews,
        header: Mapping[str, Any],
        revision: str | None,
        units: tuple[ProjectionUnit[Any, Any], ...] | None = None,
    ) -> dict[str, Any] | None:
        """:meth:`_serve` from the views the writer computed from the same rows (no state parsed).

        The decisions are the rows path's: a row's ``[ver, seq]`` is the row's own, and a row with no
        view is one the unit's schema (or its view) rejected at write time — the same code rejects it
        again at read time (the caller checked the code stamp with :func:`_usable_views`). Every part
        used is shape-checked here; anything else in the blob is ignored. Values are plain JSON,
        decoded for this call only.
        """
        identity = stored.identity
        if (
            type(identity) is not dict
            or identity.get("createdAt") != header["createdAt"]
            or identity.get("cwd") != header.get("cwd")
        ):
            return None
        cuts: dict[str, Any] = stored.views["rows"]
        views: dict[str, Any] = stored.views["views"]
        values: dict[str, Any] = {}
        if units is None:
            units = self.registry.units
        if revision is not None:  # current only: every registered unit's row at one cut, every view present
            if stored.revision != revision or not units:
                return None
            seq: int | None = None
            for unit in units:
                at = _cut_seq(cuts.get(unit.key), unit.state_version)
                if at is None or (seq is not None and at != seq):
                    return None
                seq = at
                if unit.client_visible:
                    if unit.key not in views:
                        return None
                    values[unit.key] = views[unit.key]
            return {"asOfSeq": seq, "values": values}
        as_of: int | None = None
        for unit in units:
            if not unit.client_visible or unit.key not in views:
                continue  # host-only rows are never served
            at = _cut_seq(cuts.get(unit.key), unit.state_version)
            if at is not None:
                values[unit.key] = views[unit.key]
                as_of = at if as_of is None else min(as_of, at)
        return None if as_of is None else {"asOfSeq": as_of, "values": values}

    def cached_snapshot(self, header: Mapping[str, Any], *, revision: str | None = None) -> dict[str, Any] | None:
        """The listing read (spec §3.4): client values straight from the stored rows, no log read.

        ``header`` (a live or stored header) is the identity witness; ``None`` when no usable row
        exists for this lifecycle. With ``revision`` (a :class:`~agentlog.persistence.SessionListing`
        revision), only a record verified as the complete fold of exactly that stored log is served
        (every registered unit's row at one cut), with ``asOfSeq`` = that log's last seq.
        """
        return self._serve(self._record(str(header["id"])), header, revision)

    def cached_snapshots(
        self, listings: Iterable[Any], *, current_only: bool = False
    ) -> dict[str, dict[str, Any] | None]:
        """:meth:`cached_snapshot` for many listings (``agentlog ls``).

        ``listings`` are :class:`~agentlog.persistence.SessionListing`\\ s (or objects with ``id``,
        ``header``, ``revision``); with ``current_only`` a row is served only when its revision is the
        listing's. A listing without a header maps to ``None``. One query reads the listing columns
        (identity, revision, the stored views); only records without usable views (written by another
        release, or before views were stored) are read whole, in a second query, and parsed.
        """
        wanted = [listing for listing in listings]
        out: dict[str, dict[str, Any] | None] = {}
        usable = []
        for listing in wanted:
            if listing.header is None or (current_only and listing.revision is None):
                out[listing.id] = None
            else:
                usable.append(listing)
        try:
            stored = self.storage.get_views([listing.id for listing in usable])
        except Exception as err:
            logger.warning("session projection cache: listing read failed: %s", describe_error(err))
            stored = {}
        stamp, units = code_stamp(), self.registry.units
        plan = tuple((unit.key, unit.state_version, unit.client_visible) for unit in units)
        rest = []
        for listing in usable:
            found = stored.get(listing.id)
            if found is None or not _usable_views(found.views, stamp):
                rest.append(listing)
                continue
            if current_only:
                out[listing.id] = _serve_current(found, listing.header, listing.revision, plan)
            else:
                out[listing.id] = self._serve_views(found, listing.header, None, units)
        if rest:
            try:
                records = self.storage.get_many([listing.id for listing in rest])
            except Exception as err:
                logger.warning("session projection cache: listing read failed: %s", describe_error(err))
                records = {}
            for listing in rest:
                out[listing.id] = self._serve(
                    records.get(listing.id), listing.header, listing.revision if current_only else None
                )
        return out

    def _revision(self, session_id: str) -> str | None:
        backend = getattr(self.coordinator, "backend", None)
        read_revision = getattr(backend, "read_revision", None)
        if read_revision is None:
            return None
        try:
            revision = read_revision(session_id)
        except Exception:
            return None
        return revision if isinstance(revision, str) else None

    def cold_snapshot(self, session_id: str, *, strict: bool = False) -> dict[str, Any]:
        """Cold-read one persisted session's projections (spec §3.5): cached rows plus a bounded tail.

        Raises :class:`~agentlog.errors.SessionNotFoundError` when the session has no stored log. The
        refreshed checkpoint is written back: fail-soft (a warning), or with ``strict`` (``reindex
        --projections``, whose whole point is the write) raising the medium's typed error.
        """
        record = self._record(session_id)
        cached: Checkpoint = record.rows if record is not None else {}
        before = self._revision(session_id)
        if record is not None and record.revision is not None and record.revision == before:
            current = self._current_cut(record)
            if current is not None:
                return current  # verified against exactly this stored log: no log read at all
        floor = self.registry.restore_floor(cached)
        if floor is None:
            # No unit registered: nothing to fold, but an absent log still raises "not found".
            probe = self.coordinator.read_from(session_id, 0)
            events = probe.events
            return {"asOfSeq": int(events[-1]["seq"]) if len(events) else -1, "values": {}}
        tail = self.coordinator.read_from(session_id, floor)
        identity = identity_of(tail.meta)
        events = tail.events
        related = record is None or (
            identity_matches(record.identity, identity) and (not cached or _anchored(record.anchor, events))
        )
        try:
            if not related:
                raise _UnrelatedRecord(session_id)
            restored = self.registry.restore(cached, events, floor)
        except Exception:
            # An unrelated record (another lifecycle, or another log under the rows' cut), a row beyond
            # the supplied suffix or the log end, or a state the unit's schema rejects: one full read,
            # every unit refolded from its initial state.
            events = self.coordinator.read_from(session_id, 0).events
            restored = self.registry.restore({}, events, 0)
        revision = before if before is not None and self._revision(session_id) == before else None
        checkpoint = _field(restored, "checkpoint")
        snapshot: dict[str, Any] = dict(_field(restored, "snapshot"))
        anchor = anchor_of(int(snapshot["asOfSeq"]), events[-1] if len(events) else None)
        # The fold's own values are the refreshed rows' views (every row at its end): no recompute.
        if strict:
            record = self._record_of(identity, self._lossless(checkpoint), revision, anchor, snapshot["values"])
            self.storage.put(session_id, record)
        else:
            values = snapshot["values"]
            self._put_soft(session_id, identity, checkpoint, revision, anchor, "cold-read write-back", values)
        return snapshot

    def _current_cut(self, record: CacheRecord) -> dict[str, Any] | None:
        """The snapshot of a record verified complete for the stored log, if every unit can be served
        from it: each registered unit's row present, at its ``stateVersion``, all at one cut, and every
        client-visible view accepted. ``None`` sends the caller down the ordinary cold read."""
        units = self.registry.units
        if not units:
            return None
        seqs: set[int] = set()
        for unit in units:
            row = record.rows.get(unit.key)
            if row is None or row["ver"] != unit.state_version:
                return None
            seqs.add(row["seq"])
        if len(seqs) != 1:
            return None
        values = self.registry.view_checkpoint(record.rows)
        if any(unit.client_visible and unit.key not in values for unit in units):
            return None  # a row the unit's schema rejects: refold
        return {"asOfSeq": seqs.pop(), "values": values}

    # -- writes -----------------------------------------------------------------------------------
    @staticmethod
    def _lossless(rows: Mapping[str, Any]) -> dict[str, Any]:
        """A detached plain copy of ``rows``, or the typed refusal if a state is not lossless JSON."""
        try:
            detached: dict[str, Any] = thaw(snapshot_json(rows))
        except NonJsonValueError as err:
            raise ProjectionCheckpointNotJsonError(f"{NOT_LOSSLESS_JSON}: {err}") from err
        return detached

    def _views(self, rows: Checkpoint, served: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """The served form of ``rows`` stored beside them (see :class:`~agentlog.projection.cache_storage.ServedViews`):
        exactly what :meth:`_serve` would compute from them, so a listing read parses no state. ``None``
        (the reader then parses the rows) when a view cannot be computed. ``served``: the views, when
        the caller has them already (a cold read's fold at the rows' cut)."""
        try:
            if served is None:
                served = self.registry.view_checkpoint(rows)
            cuts = {key: [row["ver"], row["seq"]] for key, row in rows.items()}
            return {"code": code_stamp(), "rows": cuts, "views": thaw(served)}
        except Exception:
            return None

    def _record_of(
        self,
        identity: Mapping[str, Any],
        rows: dict[str, Any],
        revision: str | None,
        anchor: str | None,
        served: Mapping[str, Any] | None = None,
    ) -> CacheRecord:
        return CacheRecord(dict(identity), rows, revision, self._views(rows, served), anchor)

    def _put_soft(
        self,
        session_id: str,
        identity: Mapping[str, Any],
        rows: Mapping[str, Any],
        revision: str | None,
        anchor: str | None,
        what: str,
        served: Mapping[str, Any] | None = None,
    ) -> None:
        try:
            record = self._record_of(identity, self._lossless(rows), revision, anchor, served)
            self.storage.put(session_id, record)
        except Exception as err:
            logger.warning(
                'session projection cache: %s for "%s" failed (cache stays stale): %s',
                what,
                session_id,
                describe_error(err),
            )

    def _take_cut(self, session: Session) -> _Cut:
        """The registry checkpoint now, marked clean (the caller holds the session's lock)."""
        try:
            rows = self.registry.checkpoint(session)
        except ProjectionStateError as err:  # the registry refuses a non-JSON state when it is folded
            raise ProjectionCheckpointNotJsonError(f"{NOT_LOSSLESS_JSON}: {err}") from err
        with self._lock:
            self._mark_clean(session)
            self._generation += 1
            generation = self._generation
        end_seq = session.seq - 1
        event = session.events[end_seq] if end_seq >= 0 else None
        return _Cut(session, rows, identity_of(session.header), end_seq, generation, event)

    def _land(self, cut: _Cut) -> None:
        """Make the cut durable: flush the log first, then replace the record (not fail-soft)."""
        session = cut.session
        rows = self._lossless(cut.rows)  # refuse a non-JSON state before any I/O
        anchor = anchor_of(cut.end_seq, cut.event)
        live = self.store.get(session.id) is session
        if live:
            self.coordinator.flush(session)  # log durable before cache
        revision: str | None = None
        with lock_of(session):
            # Known complete only if no event followed the cut: the flush then made exactly it durable.
            exact = live and session.seq - 1 == cut.end_seq
            if exact:
                revision = self._revision(session.id)
        with self._lock:
            if self._landed.get(session.id, 0) > cut.generation:
                return  # a newer cut of this session already landed: never replace it with an older one
            if not live:
                # Disposed (detach, or disposed before this queued write ran): the store entry is gone,
                # so persistence's retirement drain made the log durable — unless it failed. Keep the
                # verified revision of an identical stored cut, or verify this one against the log.
                existing = self._record(session.id)
                if (
                    existing is not None
                    and existing.revision is not None
                    and identity_matches(existing.identity, cut.identity)
                    and existing.rows == rows
                    and existing.views is not None
                    and existing.anchor == anchor
                ):
                    self._landed[session.id] = cut.generation
                    return
                revision = self._verified_revision(cut, anchor)
            self.storage.put(session.id, self._record_of(cut.identity, rows, revision, anchor))
            self._landed[session.id] = cut.generation

    def _verified_revision(self, cut: _Cut, anchor: str | None) -> str | None:
        """The stored log's revision if it provably ends exactly at the cut — its last event is the cut's
        own (the anchor) — from one suffix read, else ``None``."""
        if cut.end_seq < 0:
            return None
        session_id = cut.session.id
        before = self._revision(session_id)
        if before is None:
            return None
        try:
            tail = self.coordinator.read_from(session_id, cut.end_seq)
        except Exception:
            return None
        events = tail.events
        if len(events) != 1 or events[0]["seq"] != cut.end_seq or identity_of(tail.meta) != cut.identity:
            return None
        if anchor is None or anchor_of(cut.end_seq, events[0]) != anchor:
            return None
        return before if self._revision(session_id) == before else None

    def write(self, session: Session) -> None:
        """Durably checkpoint ``session`` now, in this thread (not fail-soft).

        The cut is taken first; then the log is flushed through the coordinator (if the session is
        still live in the store) and only then is the record replaced. Raises
        :class:`~agentlog.errors.ProjectionCheckpointNotJsonError` for a unit state that is not lossless
        JSON, and whatever the flush or the medium raise.
        """
        with lock_of(session):
            cut = self._take_cut(session)
        self._land(cut)

    async def awrite(self, session: Session) -> None:
        """:meth:`write` for asyncio code (the cut now, the blocking part in a worker thread)."""
        import asyncio

        with lock_of(session):
            cut = self._take_cut(session)
        await asyncio.to_thread(self._land, cut)

    def _write_soft(self, session: Session, trigger: str) -> None:
        """Cut now (caller holds the session's lock), land on the writer; failures log and stay stale."""
        try:
            cut = self._take_cut(session)
        except Exception as err:
            self._warn(session, trigger, err)
            return

        def job() -> None:
            try:
                self._land(cut)
            except Exception as err:
                self._warn(session, trigger, err)

        self._writer.submit(job)

    @staticmethod
    def _warn(session: Session, trigger: str, err: BaseException) -> None:
        logger.warning(
            'session projection cache: %s write for "%s" failed (cache stays stale): %s',
            trigger,
            session.id,
            describe_error(err),
        )

    def drain(self) -> None:
        """Wait until every queued write has landed (or failed softly)."""
        self._writer.drain()

    async def adrain(self) -> None:
        """:meth:`drain` for asyncio code."""
        import asyncio

        await asyncio.to_thread(self._writer.drain)

    # -- write policy (spec §3.3) -----------------------------------------------------------------
    def _mark_clean(self, session: Session) -> None:
        state = self._dirty.get(id(session))
        if state is None:
            return
        state.pending = 0
        if state.timer is not None:
            state.timer()
            state.timer = None
            state.timer_token = None

    def _on_event(self, session: Session, event: Any) -> None:
        if self._closed:
            return
        if event["type"] == TURN_END:
            self._write_soft(session, TURN_END)  # the trigger label is the type name
            return
        with self._lock:
            state = self._dirty.get(id(session))
            if state is None:
                state = self._dirty[id(session)] = _Dirty(session)
            state.pending += 1
            if state.pending < self.write_every_events:
                if state.timer is None:
                    token = object()
                    state.timer_token = token
                    state.timer = self._timer(self.write_interval_ms, lambda: self._on_interval(session, token))
                return
        self._write_soft(session, "count threshold")

    def _on_interval(self, session: Session, token: object) -> None:
        with lock_of(session):
            with self._lock:
                state = self._dirty.get(id(session))
                if self._closed or state is None or state.timer_token is not token:
                    return  # cancelled, or superseded by a write that already took this cut
                state.timer = None
                state.timer_token = None
            self._write_soft(session, "interval")

    def _on_disposed(self, session: Session) -> None:
        if self._closed:
            return
        with lock_of(session):
            self._write_soft(session, "detach")
        with self._lock:
            self._mark_clean(session)
            self._dirty.pop(id(session), None)

    def _forget(self, session_id: str) -> None:
        with self._lock:
            self._landed.pop(session_id, None)
        self.storage.delete(session_id)

    def close(self) -> None:
        """Stop: unsubscribe, cancel every armed timer, wait for queued writes (plugin disposal)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for unsubscribe in self._unsubscribe:
                unsubscribe()
            for state in self._dirty.values():
                if state.timer is not None:
                    state.timer()
                    state.timer = None
                    state.timer_token = None
            self._dirty.clear()
        atexit.unregister(self._atexit)
        self._writer.drain()
        self._writer.close()
        if self._owns_storage:
            self.storage.close()

    def __enter__(self) -> ProjectionCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _usable_views(blob: object, stamp: str) -> bool:
    """Whether a stored views blob was written by this code and has its two tables."""
    return (
        type(blob) is dict
        and blob.get("code") == stamp
        and type(blob.get("rows")) is dict
        and type(blob.get("views")) is dict
    )


def _serve_current(
    stored: ServedViews, header: Mapping[str, Any], revision: str, plan: tuple[tuple[str, int, bool], ...]
) -> dict[str, Any] | None:
    """:meth:`ProjectionCache._serve_views` with a ``revision`` (current only), for a listing of many.

    The same decisions, with the units as ``(key, stateVersion, client_visible)`` taken once per listing
    and :func:`_cut_seq` inlined: ``agentlog ls`` makes this call once per stored session.
    """
    identity = stored.identity
    if (
        type(identity) is not dict
        or identity.get("createdAt") != header["createdAt"]
        or identity.get("cwd") != header.get("cwd")
        or stored.revision != revision
        or not plan
    ):
        return None
    cuts: dict[str, Any] = stored.views["rows"]
    views: dict[str, Any] = stored.views["views"]
    values: dict[str, Any] = {}
    seq: int | None = None
    for key, version, visible in plan:
        cut = cuts.get(key)
        if type(cut) is not list or len(cut) != 2 or type(cut[0]) is not int or cut[0] != version:
            return None
        at = cut[1]
        if type(at) is not int or at < -1 or (seq is not None and at != seq):
            return None
        seq = at
        if visible:
            if key not in views:
                return None
            values[key] = views[key]
    return {"asOfSeq": seq, "values": values}


def _cut_seq(cut: object, version: int) -> int | None:
    """The seq of a stored ``[ver, seq]`` at ``version``, else ``None``."""
    if type(cut) is not list or len(cut) != 2 or type(cut[0]) is not int or cut[0] != version:
        return None
    seq = cut[1]
    return seq if type(seq) is int and seq >= -1 else None


def code_stamp() -> str:
    """The code a stored view was computed by: views are served only to the same agentlog release (a
    unit's ``view`` may change between releases without a ``stateVersion`` bump; its rows stay valid)."""
    return f"agentlog {__version__}"


class _UnrelatedRecord(Exception):
    """Internal: the stored record belongs to another log lifecycle (never leaves this module)."""


def _drain_at_exit(reference: weakref.ReferenceType[ProjectionCache]) -> None:
    cache = reference()
    if cache is not None:
        try:
            cache.drain()
        except Exception:  # pragma: no cover - best effort at interpreter exit
            pass
