"""In-memory backend: the reference implementation of the backend protocol.

It stores each event's JSON bytes (not the objects), so loads hand out fresh parsed graphs exactly as a
file or database backend would, and it is used to run the shared conformance suite without I/O.

What a memory "database" holds — the records, the writer locks and the store identity — is a
:class:`MemoryStorage`. Each ``MemoryBackend()`` gets a fresh one; ``MemoryBackend(storage)`` opens a
second instance over the same storage, which is how tests simulate a restart or a second process.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidSessionIdError, PersistenceError
from ..kernel.jsoncodec import dumps, loads
from .backend import DeleteStep, PartialRead, RawArtifact, SessionListing, StoredPrefix, WireEvent, event_json
from .writer_lock import holder_record, locked_error

_INCARNATIONS = itertools.count(1)
"""Every record's own number, never reused: a session deleted and created again under its id gets a
revision no earlier one had (``id(record)`` alone may be reused once the old record is collected)."""


class _Record:
    __slots__ = ("events", "header", "incarnation", "revision")

    def __init__(self, header: bytes) -> None:
        self.header = header
        self.events: list[bytes] = []
        self.revision = 0
        self.incarnation = next(_INCARNATIONS)


class MemoryStorage:
    """The state behind one in-memory store, shareable by several :class:`MemoryBackend` instances."""

    __slots__ = ("locks", "mutex", "records", "store_id")

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.records: dict[str, _Record] = {}
        self.locks: dict[str, dict[str, Any]] = {}  # id -> holder record
        self.store_id = uuid.uuid4().hex


class _Lock:
    def __init__(self, owner: MemoryBackend, session_id: str) -> None:
        self._owner = owner
        self._id = session_id
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            with self._owner._mutex:
                self._owner._locks.pop(self._id, None)


class MemoryBackend:
    name = "session-persistence-memory"
    supports_raw_artifacts = False

    def __init__(self, storage: MemoryStorage | None = None) -> None:
        if storage is None:
            storage = MemoryStorage()
        self.storage = storage
        self._mutex = storage.mutex
        self._records = storage.records
        self._locks = storage.locks
        self._store_id = storage.store_id
        self._incarnations = itertools.count(1)

    def _revision(self, session_id: str, record: _Record) -> str:
        return f"memory:{self._store_id}:{session_id}:{record.incarnation}:{record.revision}"

    def validate_session_id(self, session_id: object) -> None:
        """Any non-empty text of valid Unicode (the header is stored as UTF-8 JSON: no lone surrogates)."""
        if not isinstance(session_id, str) or not session_id:
            raise InvalidSessionIdError(f"session id must be a non-empty string, got {session_id!r}")
        if not session_id.isascii():
            try:
                session_id.encode("utf-8")
            except UnicodeEncodeError as err:
                raise InvalidSessionIdError(
                    f"session id holds a character the store cannot hold (a lone surrogate at index {err.start}); "
                    "use an id of valid Unicode text"
                ) from None

    def read_prefix(self, session_id: str) -> PartialRead | None:
        """Memory never holds damage: the whole log, ``damage=None``."""
        stored = self.load_stored(session_id)
        if stored is None:
            return None
        return PartialRead(meta=stored.meta, events=stored.events, revision=stored.revision)

    def load_stored(self, session_id: str) -> StoredPrefix[None] | None:
        with self._mutex:
            record = self._records.get(session_id)
            if record is None:
                return None
            header, lines, revision = record.header, list(record.events), self._revision(session_id, record)
        return StoredPrefix(meta=loads(header), events=[loads(line) for line in lines], revision=revision)

    def load_stored_from(self, session_id: str, from_seq: int) -> StoredPrefix[None] | None:
        """Seek read: only the events with ``seq >= from_seq`` are parsed (records are stored by seq)."""
        if type(from_seq) is not int or from_seq < 0:
            raise PersistenceError(f"fromSeq must be a non-negative safe integer, got {from_seq!r}")
        with self._mutex:
            record = self._records.get(session_id)
            if record is None:
                return None
            header, lines, revision = record.header, record.events[from_seq:], self._revision(session_id, record)
        return StoredPrefix(meta=loads(header), events=[loads(line) for line in lines], revision=revision)

    def read_revision(self, session_id: str) -> str | None:
        with self._mutex:
            record = self._records.get(session_id)
            return None if record is None else self._revision(session_id, record)

    def append_batch(self, meta: Mapping[str, Any], events: Sequence[WireEvent], materialized: bool) -> None:
        if not events:
            return
        session_id = meta["id"]
        lines = [event_json(event) for event in events]
        with self._mutex:
            record = self._records.get(session_id)
            if not materialized:
                if record is not None:
                    raise PersistenceError(
                        f'refusing to materialize "{session_id}": a log already exists (load/resume it instead)'
                    )
                record = self._records[session_id] = _Record(dumps(dict(meta)))
            elif record is None:
                raise PersistenceError(f'session "{session_id}" has no stored log to append to')
            expected = len(record.events)
            first = events[0]["seq"]
            if first != expected:
                raise PersistenceError(
                    f"session {session_id} append starts at seq {first}, stored next seq is {expected}"
                )
            record.events.extend(lines)
            record.revision += 1

    def commit_repair(self, meta: Mapping[str, Any], torn_marker: None, closers: Sequence[WireEvent]) -> None:
        if torn_marker is not None:
            raise PersistenceError("the memory backend never reports a torn tail")
        if closers:
            self.append_batch(meta, closers, True)

    def list_sessions(self) -> list[SessionListing]:
        with self._mutex:
            items = [(sid, rec.header, self._revision(sid, rec)) for sid, rec in self._records.items()]
        return [SessionListing(id=sid, header=loads(header), revision=rev) for sid, header, rev in sorted(items)]

    def list_revisions(self) -> dict[str, str]:
        """Every session's revision by id, sorted, without parsing a header (what listing reports)."""
        with self._mutex:
            return {sid: self._revision(sid, self._records[sid]) for sid in sorted(self._records)}

    def delete_session(self, session_id: str, step: DeleteStep | None = None) -> bool:
        """Drop the session's record (one dict removal under the storage's mutex: atomic for readers)."""
        self.validate_session_id(session_id)
        if step is not None:
            step("remove")
        with self._mutex:
            return self._records.pop(session_id, None) is not None

    def read_raw(self, session_id: str) -> RawArtifact | None:
        raise PersistenceError("this session persistence backend does not expose raw artifacts")

    def locate(self, meta: Mapping[str, Any]) -> str | None:
        return None

    def lock_writer(self, meta: Mapping[str, Any]) -> _Lock:
        session_id = meta["id"]
        self.validate_session_id(session_id)
        with self._mutex:
            if session_id in self._locks:
                raise locked_error(session_id, self._locks[session_id])
            self._locks[session_id] = holder_record()
        return _Lock(self, session_id)

    def stage_session(self, meta: Mapping[str, Any]) -> _Staged:
        """A new session kept aside until ``publish`` puts it in the storage whole."""
        self.validate_session_id(meta["id"])
        return _Staged(self, dict(meta))

    def close(self) -> None:
        return None

    # Test support: raw stored lines (what a file would hold), so tests can assert byte equality.
    def stored_lines(self, session_id: str) -> list[bytes]:
        with self._mutex:
            record = self._records.get(session_id)
            return [] if record is None else list(record.events)


class _Staged:
    """:meth:`MemoryBackend.stage_session`'s log: the batches' bytes, stored at ``publish``."""

    def __init__(self, owner: MemoryBackend, meta: dict[str, Any]) -> None:
        self._owner = owner
        self._meta = meta
        self._lines: list[bytes] | None = []

    def append(self, events: Sequence[WireEvent]) -> None:
        if self._lines is None:
            raise PersistenceError(f'the staged log of "{self._meta["id"]}" was already published or discarded')
        if events and events[0]["seq"] != len(self._lines):
            raise PersistenceError(
                f'staged append of "{self._meta["id"]}" starts at seq {events[0]["seq"]}, expected {len(self._lines)}'
            )
        self._lines.extend(event_json(event) for event in events)

    def publish(self) -> None:
        lines, self._lines = self._lines, None
        session_id = self._meta["id"]
        if not lines:
            raise PersistenceError(f'the staged log of "{session_id}" has no events to publish')
        with self._owner._mutex:
            if session_id in self._owner._records:
                raise PersistenceError(
                    f'refusing to materialize "{session_id}": a log already exists (load/resume it instead)'
                )
            record = self._owner._records[session_id] = _Record(dumps(self._meta))
            record.events.extend(lines)
            record.revision += 1

    def discard(self) -> None:
        self._lines = None
