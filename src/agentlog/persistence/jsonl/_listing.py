"""JSONL store: listing, every session from its header alone and every session's revision from a stat.

``list_sessions`` opens each log for its first line only (bounded by ``max_header_bytes``) and reports a
damaged or foreign header instead of failing; ``list_revisions`` reads no byte of a log.
"""

from __future__ import annotations

import os
import stat
from typing import Any, Final

from ...errors import (
    AgentlogError,
    InvalidSessionIdError,
    SessionFormatUnsupportedError,
    SessionPersistenceCorruptionError,
    StorageAccessError,
)
from ...kernel.jsoncodec import loads
from ..backend import SessionListing
from ..paths import MAX_ENCODED_ID_BYTES, decode_segment, encode_segment, encodes_verbatim
from ..storage_errors import storage_error
from ._decoding import _Decoding
from ._errors import _REMEDY, _typed_os_errors
from ._files import _exists, _not_a_directory, _open_regular, _revision
from ._scanner import header_too_long, parse_header_line
from ._zstdframes import FrameTooLargeError, decompress_frame

_HEADER_READ_CHUNK: Final = 8192


class _Listing(_Decoding):
    """Listing (a mixin of :class:`~agentlog.persistence.jsonl.backend.JsonlBackend`)."""

    def _read_header_line(self, fd: int, path: str) -> bytes:
        """The first line only (no full-log parse), in linear time and bounded by ``max_header_bytes``.

        Reads grow geometrically from 8 KiB and each read is searched once (raw) or the frame walk is
        repeated only per doubling (zstd), so a long header costs O(its size), never quadratic time.
        """
        cap = self.max_header_bytes
        # A zstd header frame may be slightly larger than its text (incompressible data, framing).
        limit = cap + 1 if not self._zstd else cap + cap // 64 + 1024
        buffer = bytearray()
        want = _HEADER_READ_CHUNK
        scanned = 0
        while True:
            chunk = os.read(fd, min(want, limit + 1 - len(buffer)))
            buffer += chunk
            want *= 2
            if self._zstd:
                scan = self._scan_frames(buffer, path, 1)
                if scan.frames:
                    start, end = scan.frames[0]
                    try:
                        text = decompress_frame(bytes(buffer[start:end]), start, min(self.max_frame_bytes, cap + 1))
                    except FrameTooLargeError:
                        raise self._located(header_too_long(cap + 1, cap), path) from None
                    except SessionPersistenceCorruptionError as err:
                        raise SessionPersistenceCorruptionError(
                            f"corrupt Zstandard session log: header frame failed validation — {path}, byte 0. "
                            f"{_REMEDY}",
                            location=path,
                            offset=0,
                        ) from err.__cause__
                    if not text.endswith(b"\n") or text.count(b"\n") != 1:
                        raise self._corrupt(
                            "corrupt Zstandard session log: first frame is not exactly one header line", path, 0
                        )
                    if len(text) - 1 > cap:
                        raise self._located(header_too_long(len(text) - 1, cap), path)
                    return text[:-1]
                if not chunk:
                    raise self._corrupt("empty or header-less Zstandard session log", path, 0)
            else:
                newline = buffer.find(b"\n", scanned)
                if newline >= 0:
                    if newline > cap:
                        raise self._located(header_too_long(newline, cap), path)
                    return bytes(buffer[:newline])
                scanned = len(buffer)
                if not chunk:
                    raise self._corrupt("empty or header-less session log", path, 0)
            if len(buffer) > limit - (1 if not self._zstd else 0):
                raise self._located(header_too_long(len(buffer), cap), path)

    def _list_one(self, path: str, dir_name: str) -> SessionListing | None:
        try:
            fd, st = _open_regular(path, os.O_RDONLY)
        except FileNotFoundError:
            return None  # no transcript (yet): a session directory holds nothing else we list
        except (OSError, StorageAccessError) as err:
            typed = err if isinstance(err, StorageAccessError) else storage_error(err, path)
            return SessionListing(
                id=decode_segment(dir_name),
                header=None,
                location=path,
                error_code=typed.code,
                error_message=typed.message,
            )
        line = b""
        meta: dict[str, Any] | None = None
        try:
            revision = _revision(st)
            try:
                line = self._read_header_line(fd, path)
                meta = parse_header_line(line, max_depth=self.max_depth)
                self._check_identity(path, meta, None)
            except SessionFormatUnsupportedError as err:
                raw = _loads_or_none(line, self.max_depth)
                header = raw if isinstance(raw, dict) else None
                raw_id = header.get("id") if header is not None else None
                return SessionListing(
                    id=raw_id if isinstance(raw_id, str) else decode_segment(dir_name),
                    header=header,
                    revision=revision,
                    location=path,
                    error_code=err.code,
                    error_message=f"{err.message} (raw log: {path})",
                )
            except SessionPersistenceCorruptionError as err:
                located = err if err.location is not None else self._located(err, path)
                return SessionListing(
                    id=meta["id"] if meta is not None else decode_segment(dir_name),
                    header=meta,
                    revision=revision,
                    location=path,
                    error_code=located.code,
                    error_message=located.message,
                )
            return SessionListing(id=meta["id"], header=meta, revision=revision, location=path)
        finally:
            os.close(fd)

    @_typed_os_errors
    def list_sessions(self) -> list[SessionListing]:
        """Every stored session from its header alone, sorted by id; never writes.

        A session whose header is damaged or foreign is reported with an ``error_code`` rather than
        hidden or allowed to fail the whole listing. Root-level misconfiguration (opposite encoding,
        flat legacy files, one id in two project directories) still raises: it is not one session's
        problem, and guessing would hide data.
        """
        listings: list[SessionListing] = []
        # Plain string joins: the root is absolute and every name is a single path component, and this
        # loop touches every stored session (os.path.join's generality shows up in the listing time).
        opposite_name = "/session" + self._opposite
        own_name = "/session" + self._suffix
        for project in self._project_dirs():
            project_path = f"{self.root}/{project}"
            links: list[str] = []
            names = self._session_dirs(project_path, links)
            for name in links:
                refusal = _not_a_directory(f"{project_path}/{name}", "session directory", "a symbolic link")
                listings.append(
                    SessionListing(
                        id=decode_segment(name),
                        header=None,
                        location=refusal.path,
                        error_code=refusal.code,
                        error_message=refusal.message,
                    )
                )
            for name in names:
                session_dir = f"{project_path}/{name}"
                opposite = session_dir + opposite_name
                if _exists(opposite):
                    raise self._mismatch(opposite)
                listing = self._list_one(session_dir + own_name, name)
                if listing is not None:
                    listings.append(listing)
        seen: set[str] = set()
        for listing in listings:
            if listing.header is not None:
                if listing.id in seen:
                    raise self._duplicate(listing.id)
                seen.add(listing.id)
        listings.sort(key=lambda item: (item.id, item.location or ""))
        return listings

    def _directory_id(self, name: str) -> str | None:
        """The session id whose directory is ``name``, or ``None`` when no id maps to it.

        Only a canonical name counts: ``load(id)`` reaches the directory ``encode_segment(id)`` and no
        other, so a hand-made name that merely decodes to an id (``a~0041`` for ``aA``) or an id this
        store refuses (a lone surrogate, too long) names nothing a reader could open by id.
        """
        if encodes_verbatim(name):
            return name if len(name) <= MAX_ENCODED_ID_BYTES else None
        session_id = decode_segment(name)
        try:
            self.validate_session_id(session_id)
        except InvalidSessionIdError:
            return None
        return session_id if encode_segment(session_id) == name else None

    @_typed_os_errors
    def list_revisions(self) -> dict[str, str]:
        """Every stored session's revision, by id, from a directory scan and a stat per log; never reads a byte.

        The search index reconciles against this on every search, where :meth:`list_sessions` (it opens
        and parses every header) costs too much. The revision is the one :meth:`read_revision` and
        :meth:`list_sessions` report (the same ``_revision`` of the same file's stat), and a session whose
        header is damaged is included: telling it apart needs the header, and the reader it is handed to
        reports the damage. Left out, as listing reports them without a revision and no load can open
        them: symbolic links in place of a session directory or a log, and logs that are not regular
        files. Directory names that no id encodes to are left out too (see :meth:`_directory_id`).

        The root-level refusals of :meth:`list_sessions` cost a stat at most, so they stay: a flat legacy
        file or an opposite-encoding log raises, and so does one id in two project directories — here
        whatever its header holds (listing raises only when both headers parse, but ``read_revision``
        and ``load`` of that id refuse it either way).
        """
        found: list[tuple[str, str]] = []
        seen: set[str] = set()
        opposite_name = "/session" + self._opposite
        own_name = "/session" + self._suffix
        lstat = os.lstat
        access = os.access
        is_regular = stat.S_ISREG
        ids = self._directory_ids
        for project in self._project_dirs():
            project_path = f"{self.root}/{project}"
            for name in self._session_dirs(project_path):
                session_dir = f"{project_path}/{name}"
                # access() answers "absent" without raising (this runs per session on every search); a
                # present opposite log is then confirmed with the listing's own check.
                if access(session_dir + opposite_name, os.F_OK, follow_symlinks=False) and _exists(
                    session_dir + opposite_name
                ):
                    raise self._mismatch(session_dir + opposite_name)
                try:
                    st = lstat(session_dir + own_name)
                except FileNotFoundError:
                    continue  # no transcript (yet)
                if name in ids:
                    session_id = ids[name]
                else:
                    session_id = ids[name] = self._directory_id(name)
                if session_id is None or not is_regular(st.st_mode):
                    continue
                if session_id in seen:
                    raise self._duplicate(session_id)
                seen.add(session_id)
                found.append((session_id, _revision(st)))
        found.sort()
        return dict(found)


def _loads_or_none(line: bytes, max_depth: int) -> Any:
    try:
        return loads(line, max_depth=max_depth)
    except AgentlogError:
        return None
