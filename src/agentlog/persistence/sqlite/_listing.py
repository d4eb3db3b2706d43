"""SQLite store: listing, every session's header and every session's revision, one SELECT each."""

from __future__ import annotations

import sqlite3
from typing import Any, Final

from ...errors import SessionFormatUnsupportedError, SessionPersistenceCorruptionError
from ...kernel.jsonvalue import MAX_SAFE_INTEGER
from ..backend import SessionListing
from . import _codec as codec
from ._connection import _TAIL_COLUMNS, _Connection
from ._schema import SQL

_KNOWN_INCARNATIONS_MAX: Final = 65536


class _Listing(_Connection):
    """Listing (a mixin of :class:`~agentlog.persistence.sqlite.backend.SqliteBackend`)."""

    _known_incarnations: set[str]

    def _listing_rows(self, statement: str) -> list[tuple[Any, ...]]:
        """All rows of a whole-store listing statement (none before the database exists), typed errors."""

        def run(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            if self._pristine:
                return []
            try:
                return self._fetchall(conn, SQL[statement], ())
            except BaseException as err:
                failure = self._typed(err, "list")
                if failure is err:
                    raise
                raise failure from err

        rows: list[tuple[Any, ...]] = self._locked_read(run)
        return rows

    def list_sessions(self) -> list[SessionListing]:
        """Every stored session's header, sorted by id; a damaged row is reported, never fatal."""

        rows = self._listing_rows("select_sessions_with_tail")
        location = self.path
        decode = codec.decode_session_row
        listings: list[SessionListing] = []
        for row in rows:
            try:
                header, incarnation, revision = decode(row[:-_TAIL_COLUMNS])
            except codec.StorageRowError as err:
                sid = row[0]
                if isinstance(sid, codec.InvalidText):
                    sid = sid.raw.decode("utf-8", "backslashreplace")  # named, never silently replaced
                listings.append(
                    SessionListing(
                        id=sid if isinstance(sid, str) else repr(sid),
                        header=None,
                        location=location,
                        error_code=SessionPersistenceCorruptionError.code,
                        error_message=f'stored session "{sid}" has invalid metadata: {err}',
                    )
                )
                continue
            listing = SessionListing(
                id=header["id"],
                header=header,
                revision=self._revision(incarnation, revision, row[-_TAIL_COLUMNS:]),
                location=location,
            )
            version = header["version"]
            if version != 0:
                listing.error_code = SessionFormatUnsupportedError.code
                listing.error_message = _version_refusal(header["id"], version)
            listings.append(listing)
        listings.sort(key=_listing_id)
        return listings

    def list_revisions(self) -> dict[str, str]:
        """Every stored session's revision string, by id, from one SELECT of the id and revision columns
        (and each session's tail row, which the revision's digest covers).

        The search index reconciles against this on every search, so it neither rebuilds nor validates
        headers as :meth:`list_sessions` does; the strings are the ones listing and :meth:`read_revision`
        report. A row whose header columns are damaged is included (the reader it is handed to reports
        the damage); one whose id or revision columns are themselves invalid — listing reports it without
        a revision, and no read can name it — is left out.
        """

        rows = self._listing_rows("select_session_revisions_with_tail")
        known = self._known_incarnations  # an incarnation is fixed for a session's life: check it once
        is_uuid = codec.is_uuid
        found: list[tuple[str, str]] = []
        for sid, incarnation, revision, *tail in rows:
            if type(sid) is not str or not sid or type(revision) is not int or not 0 <= revision <= MAX_SAFE_INTEGER:
                continue
            if incarnation not in known:
                if not is_uuid(incarnation):
                    continue
                if len(known) < _KNOWN_INCARNATIONS_MAX:
                    known.add(incarnation)
            found.append((sid, self._revision(incarnation, revision, tail)))
        found.sort()
        return dict(found)


def _listing_id(listing: SessionListing) -> str:
    return listing.id


def _version_refusal(session_id: str, version: int) -> str:
    """``sessionFormatVersionRefusal`` (spec §3.8), for listings of foreign-version sessions."""
    if version > 0:
        return (
            f'session "{session_id}" uses log format v{version}, but this harness reads only v0: the log was '
            "written by a newer harness — upgrade the harness to open it"
        )
    return (
        f'session "{session_id}" uses log format v{version}, older than the supported v0, and this build ships '
        "no upgrade path for it"
    )
