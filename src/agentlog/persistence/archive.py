"""Archive a stored session into a JSONL store before it is deleted, and prove the copy is whole.

An archive directory is an ordinary JSONL store (uncompressed: plain text a person can read) plus a
manifest, ``archive-manifest.jsonl``, with one line per archived session::

    {"id": "s1", "events": 42, "sha256": "…", "archivedAt": 1733339195123, "source": "session-persistence-sqlite"}

``sha256`` is the digest of the session's logical content — its header and every stored event, each as
its canonical JSON line (:func:`session_digest`) — computed from the source and again from the copy read
back through the JSONL backend: the archive is written only when the two are equal, so what is archived
is exactly what was stored, whichever backend held it (a JSONL, SQLite or PostgreSQL log holds the same
logical content in different bytes). The copy is staged and published whole (a crash leaves no
half-written archived session), and the stored prefix is archived as stored: an interrupted turn is not
closed, a torn tail is left out.

Restoring is reading the archive as a store: ``agentlog --store DIR ls`` / ``show`` / ``export`` work on it
as is; moving ``DIR/<project>/<id>/`` back under a JSONL store's root restores the session there.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from ..errors import PersistenceError, SessionNotFoundError
from ..kernel.jsoncodec import dumps
from .backend import Backend, event_json
from .jsonl.backend import JsonlBackend
from .storage_errors import storage_error

__all__ = ["MANIFEST_NAME", "ArchivedSession", "archive_session", "session_digest"]

MANIFEST_NAME: Final = "archive-manifest.jsonl"
_BATCH: Final = 4096


@dataclass(frozen=True)
class ArchivedSession:
    """One session copied into an archive: its id, event count, content digest and manifest line's time."""

    id: str
    events: int
    sha256: str
    archived_at: int
    source: str

    def manifest(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "events": self.events,
            "sha256": self.sha256,
            "archivedAt": self.archived_at,
            "source": self.source,
        }


def session_digest(meta: Mapping[str, Any], events: Iterable[Mapping[str, Any]]) -> tuple[str, int]:
    """The SHA-256 (hex) of a session's logical content and its event count: the header's JSON line, then
    each event's, in seq order. Equal for the same session in any backend (the bytes of a log differ)."""
    digest = hashlib.sha256(dumps(dict(meta)) + b"\n")
    count = 0
    for event in events:
        digest.update(event_json(event) + b"\n")
        count += 1
    return digest.hexdigest(), count


def archive_session(source: Backend, archive: JsonlBackend, session_id: str) -> ArchivedSession:
    """Copy ``session_id``'s stored log from ``source`` into ``archive``, verify it and record it.

    The copy is verified by reading it back through ``archive`` (a fresh read, not a cache) and
    comparing digests; a mismatch is a ``PersistenceError`` and the copy is left for inspection. A
    session already in the archive is accepted when its digest is the source's (a rerun after a crash
    between archiving and deleting), else refused.
    """
    stored = source.load_stored(session_id)
    if stored is None:
        raise SessionNotFoundError(f'session "{session_id}" has no stored log to archive')
    expected, count = session_digest(stored.meta, stored.events)
    existing = archive.load_stored(session_id)
    if existing is None:
        staged = archive.stage_session(stored.meta)
        try:
            for start in range(0, len(stored.events), _BATCH):
                staged.append(stored.events[start : start + _BATCH])
            staged.publish()
        except BaseException:
            staged.discard()
            raise
        existing = archive.load_stored(session_id)
    found = session_digest(existing.meta, existing.events)[0] if existing is not None else None
    if found != expected:
        raise PersistenceError(
            f'the archived copy of session "{session_id}" in "{archive.root}" differs from the stored log '
            f"(sha256 {found} instead of {expected}); the session was not deleted. Remove or rename that copy "
            "and archive again"
        )
    record = ArchivedSession(session_id, count, expected, time.time_ns() // 1_000_000, source.name)
    _append_manifest(archive.root, record)
    return record


def _append_manifest(root: str, record: ArchivedSession) -> None:
    path = os.path.join(root, MANIFEST_NAME)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, orjson.dumps(record.manifest()) + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as err:
        raise storage_error(err, path, "record the archived session in the archive manifest") from err
