"""JSONL storage backend: one append-only transcript file per session (spec §4).

Layout: ``<root>/--<project_key(cwd)>--/<encode_segment(id)>/session.jsonl[.zstd]`` (``_no-cwd`` instead
of the project directory when the header has no cwd). The file holds one header line, then storage
records (events verbatim, or packed chunk rows, see :mod:`agentlog.chunkrows`), either as plain text
(``compression="none"``) or as a concatenation of independent checksummed Zstandard frames, one per
durable batch (``compression="zstd"``, the default).

Durability model, and why it is safe without a journal:

* The first batch is published atomically together with the header: written and fsynced under a
  temporary name, then ``link``-ed into place (``link`` fails with EEXIST instead of overwriting, so a
  racing writer cannot clobber a published log). A crash leaves either no log or a complete one.
* Every later batch is appended at EOF and fsynced; a failed write or fsync truncates back to the prior
  size, so the caller can retry the same batch without a seq gap. Prior bytes are never rewritten.
* A crash can therefore only leave a torn *tail*: an incomplete final record (or a defective last
  complete line). Reading keeps the committed prefix and reports the tail in a :class:`TornMarker`;
  only :meth:`JsonlBackend.commit_repair` ever truncates. Damage inside the committed region (a
  checksum failure in an earlier frame, a defective record with any complete record after it, a
  record readable only by replacing bytes that are not UTF-8) raises
  :class:`~agentlog.errors.SessionPersistenceCorruptionError` and leaves the file untouched;
  :meth:`JsonlBackend.read_prefix` salvages the prefix before it.
* Before every append (under the writer lock) the file must still be the inode, size and next seq this
  instance last wrote or read, so a second writer that slipped past a removed lock file is refused
  (:class:`~agentlog.errors.SessionTailChangedError`) instead of interleaving batches.

This module is the backend's core (construction, loads, appends, repair); the other parts are mixins
and helpers in private modules of their own: ``_files`` (file-system helpers), ``_errors`` (error
mapping), ``_layout`` (paths, discovery, identity, directories, the writer lock), ``_decoding`` (stable
whole-log reads and their decoders), ``_seek`` (seek reads), ``_listing`` (listing) and ``_staging``
(staged sessions).
"""

from __future__ import annotations

import errno
import os
import secrets
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, cast

from ...errors import (
    AppendRollbackError,
    PersistenceError,
    SessionFormatUnsupportedError,
    SessionPersistenceCorruptionError,
    SessionTailChangedError,
    StoreNotFoundError,
    describe_error,
)
from ...kernel._gc import gc_paused
from ...kernel.chunkrows import compact_runs_requested, pack_chunk_runs
from ...kernel.events import SessionHeader
from ...kernel.jsoncodec import DEFAULT_MAX_DEPTH, dumps
from ..backend import (
    DeleteStep,
    PartialRead,
    RawArtifact,
    StoredPrefix,
    StoredStream,
    WireEvent,
    check_reader_limits,
    event_json,
)
from ..paths import MAX_ENCODED_ID_BYTES, encode_segment, project_key
from ..storage_errors import storage_error
from ..store_identity import directory_identity
from ._decoding import TornMarker
from ._errors import _typed_os_errors
from ._files import (
    _O_CLOEXEC,
    _O_NOFOLLOW,
    _O_SAFE,
    _SUFFIXES,
    LOGICAL_FILENAME,
    _fsync_dir,
    _lexists,
    _not_a_directory,
    _open_regular,
    _revision,
    _write_all,
    detect_compression,
)
from ._layout import _Tail
from ._listing import _Listing
from ._scanner import (
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_LINE_BYTES,
    header_line,
    parse_header_line,
    scan_log_prefix,
)
from ._seek import _WHOLE, _Seeking
from ._staging import _StagedLog, _Staging
from ._zstdframes import compress_frame, decompress_frame, scan_zstd_frames

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_MAX_HEADER_BYTES",
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_MAX_LOG_BYTES",
    "MAX_ENCODED_ID_BYTES",
    "AppendRollbackError",
    "JsonlBackend",
    "TornMarker",
    "detect_compression",
    "encode_segment",
    "project_key",
    "scan_zstd_frames",
]

DEFAULT_MAX_FRAME_BYTES: Final = 256 * 1024 * 1024
DEFAULT_MAX_LOG_BYTES: Final = 2 * 1024 * 1024 * 1024
"""What one load may read: the file's size and, for zstd, its decoded text (a typed refusal beyond)."""


class JsonlBackend(_Seeking, _Listing, _Staging):
    """File-per-session backend (spec §4). Thread-safe; every method may block on I/O.

    ``max_frame_bytes`` caps one frame's decompressed size, ``max_line_bytes`` one line, ``max_depth``
    one line's nesting (as in :func:`agentlog.jsoncodec.loads`, which always accepts what orjson parses
    natively, i.e. up to 1024 levels), ``max_header_bytes`` the header line. A stored file beyond a limit
    is refused with a typed :class:`~agentlog.errors.SessionPersistenceCorruptionError` instead of
    exhausting memory; the limits protect readers only, writers never check them.

    ``max_log_bytes`` is the load budget: a log whose file (or, for zstd, decoded text) is larger is
    refused with :class:`~agentlog.errors.ResourceExhaustedError` before it is read. Loading needs
    roughly 5-10 times the log's size in memory; running out of memory anyway is the same typed error,
    and nothing is ever truncated or repaired because of it.

    ``compression="auto"`` uses the encoding of the logs already in the store (zstd for an empty store).
    ``read_only=True`` never creates a directory or a file (and refuses writes and writer locks with
    ``STORAGE_READ_ONLY``); a missing root is then :class:`~agentlog.errors.StoreNotFoundError`.

    Operating-system refusals are :class:`~agentlog.errors.StorageAccessError` (code names the cause,
    message the path and the remedy). Logs are opened only as regular files inside the store: never
    through a symbolic link (a symlinked session directory is refused), never blocking on a FIFO.
    Before every append the file's identity, size and next seq must be the ones this instance last
    wrote or read (:class:`~agentlog.errors.SessionTailChangedError` otherwise: another writer).
    """

    name = "session-persistence-jsonl"
    supports_raw_artifacts = True

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        compression: Literal["zstd", "none", "auto"] = "zstd",
        pack_chunks: bool = True,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_depth: int = DEFAULT_MAX_DEPTH,
        max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
        max_log_bytes: int = DEFAULT_MAX_LOG_BYTES,
        read_only: bool = False,
    ) -> None:
        if compression not in _SUFFIXES and compression != "auto":
            raise ValueError(f'compression must be "zstd", "none" or "auto", got {compression!r}')
        check_reader_limits(
            max_frame_bytes=max_frame_bytes,
            max_line_bytes=max_line_bytes,
            max_depth=max_depth,
            max_header_bytes=max_header_bytes,
            max_log_bytes=max_log_bytes,
        )
        # Resolved once, so a later chdir cannot move the store (and locate() stays pure).
        self.root = os.path.abspath(os.fspath(root))
        self.read_only = read_only
        self.max_header_bytes = max_header_bytes
        self.max_log_bytes = max_log_bytes
        self._tails: dict[str, _Tail] = {}
        self._check_root()
        if compression == "auto":
            compression = detect_compression(self.root) or "zstd"
        self.compression: Literal["zstd", "none"] = compression
        self.pack_chunks = pack_chunks
        self.max_frame_bytes = max_frame_bytes
        self.max_line_bytes = max_line_bytes
        self.max_depth = max_depth
        self._zstd = compression == "zstd"
        self._suffix = _SUFFIXES[compression]
        self._opposite = _SUFFIXES["none" if self._zstd else "zstd"]
        # Directory name -> session id (or None): a pure function of the name, memoized because the
        # revision listing decodes every session's name on every search.
        self._directory_ids: dict[str, str | None] = {}
        self._mutex = threading.Lock()
        self._preflight_error: str | None = None
        self._preflight_done = False

    def _check_root(self) -> None:
        """A root that exists but cannot be listed (a regular file, EACCES) is a configuration error
        worth reporting at construction; a missing root is created by the first materialization (or,
        read-only, is :class:`StoreNotFoundError`)."""
        try:
            with os.scandir(self.root):
                pass
        except FileNotFoundError:
            if self.read_only:
                raise StoreNotFoundError(
                    f'session store "{self.root}" does not exist (nothing was created); check the --store path'
                ) from None
        except NotADirectoryError:
            raise _not_a_directory(self.root, "session store root", "a file") from None
        except OSError as err:
            raise storage_error(err, self.root) from err

    # --- reading -------------------------------------------------------------------------------

    @_typed_os_errors
    def load_stored(self, session_id: str) -> StoredPrefix[TornMarker] | None:
        """The valid stored prefix (spec §4.7). Never writes; damage raises, a torn tail is reported."""
        found = self._read_log(session_id)
        if found is None:
            return None
        path, data, revision = found
        # The coordinator's cold load asks for packed runs to stay packed (kernel.chunkrows.ChunkRun
        # items, each validated like its expansion); every other caller gets one event per item.
        compact = compact_runs_requested()
        try:
            with gc_paused():
                if self._zstd:
                    meta, events, marker, count = self._decode_zstd(data, path, compact=compact)
                else:
                    meta, events, marker, count = self._decode_raw(data, path, compact)
        except SessionFormatUnsupportedError as err:
            raise SessionFormatUnsupportedError(f"{err.message} (raw log: {path})", location=path) from None
        self._check_identity(path, meta, session_id)
        self._remember_tail(path, revision, count, marker)
        return StoredPrefix(meta=meta, events=events, revision=revision, torn_marker=marker)

    @_typed_os_errors
    def stream_stored(self, session_id: str, batch_bytes: int = 1 << 21) -> StoredStream | None:
        """The log's events a batch at a time (:class:`~agentlog.persistence.backend.StreamsStored`): the
        file is read once at one stable revision (for zstd a tenth of its text), then decoded and parsed
        about ``batch_bytes`` of text at a time, each batch handed over as it is parsed. Never writes."""
        found = self._read_log(session_id)
        if found is None:
            return None
        path, data, revision = found
        streamed = (
            self._stream_zstd(data, path, batch_bytes) if self._zstd else self._stream_raw(data, path, batch_bytes)
        )
        if streamed is None:
            return None
        meta, batches = streamed
        self._check_identity(path, meta, session_id)
        return StoredStream(meta=meta, revision=revision, batches=batches)

    @_typed_os_errors
    def load_stored_from(self, session_id: str, from_seq: int) -> StoredPrefix[TornMarker] | None:
        """Seek read: the stored events with ``seq >= from_seq``, reading the file backwards from its end.

        Only the header and the records from the last one that starts below ``from_seq`` are read and
        parsed (raw: lines found block by block from the end; zstd: the trailing frames, located by
        their magic numbers and accepted only when their structure ends exactly where the next frame
        starts and their checksum holds), so a tail read of a long log costs the tail. A torn tail is
        left out as :meth:`load_stored` leaves it out. Whenever the span holds anything unusual (a
        defect, a torn zstd frame, no record below ``from_seq``) the whole log is read and sliced, so
        damage inside the span raises exactly what :meth:`load_stored` raises. Records before the span
        are not read: damage there is not seen (as SQLite's seek read does not see it). Never writes.
        """
        if type(from_seq) is not int or from_seq < 0:
            raise PersistenceError(f"fromSeq must be a non-negative safe integer, got {from_seq!r}")
        self._preflight()
        path = self._find_log(session_id)
        found = None if path is None else self._seek_stable(path, from_seq)
        if found is None:
            return None
        if found is _WHOLE:
            stored = self.load_stored(session_id)
            if stored is not None:
                stored = StoredPrefix(meta=stored.meta, events=stored.events[from_seq:], revision=stored.revision)
            return stored
        assert path is not None and isinstance(found, StoredPrefix)
        self._check_identity(path, found.meta, session_id)
        return found

    @_typed_os_errors
    def read_prefix(self, session_id: str) -> PartialRead | None:
        """The valid stored prefix up to the first damage, and where that damage is (``None`` if absent).

        For salvage (``agentlog export --partial``): unlike :meth:`load_stored`, damage after the header
        does not raise; ``damage`` is the typed error a load would raise (``offset`` = byte offset in the
        file, for zstd of the damaged frame). A torn tail is left out of ``events`` and reported as
        ``torn_offset``. A damaged header, a foreign or a future-format log still raise. Never writes.
        """
        found = self._read_log(session_id)
        if found is None:
            return None
        path, data, revision = found
        damages: list[SessionPersistenceCorruptionError] = []
        try:
            with gc_paused():
                if self._zstd:
                    meta, events, marker, _ = self._decode_zstd(data, path, damages)
                    torn = None if marker is None else marker.truncate_to
                else:
                    try:
                        result, damage = scan_log_prefix(data, **self._limits())
                    except SessionPersistenceCorruptionError as err:
                        raise self._located(err, path) from err
                    if damage is not None:
                        damages.append(self._located(damage, path))
                    meta, events = result.meta, result.events
                    torn = result.committed_bytes if damage is None and result.committed_bytes < len(data) else None
        except SessionFormatUnsupportedError as err:
            raise SessionFormatUnsupportedError(f"{err.message} (raw log: {path})", location=path) from None
        self._check_identity(path, meta, session_id)
        return PartialRead(
            meta=meta, events=events, revision=revision, damage=damages[0] if damages else None, torn_offset=torn
        )

    @_typed_os_errors
    def read_revision(self, session_id: str) -> str | None:
        self._preflight()
        path = self._find_log(session_id)
        if path is None:
            return None
        try:
            return _revision(os.stat(path, follow_symlinks=False))
        except FileNotFoundError:
            return None

    @_typed_os_errors
    def read_raw(self, session_id: str) -> RawArtifact | None:
        """The decoded logical text, exactly as stored (packed rows, key order); a torn frame is omitted."""
        found = self._read_log(session_id)
        if found is None:
            return None
        path, data, _ = found
        if self._zstd:
            scan = self._scan_frames(data, path)
            if not scan.frames:
                raise self._corrupt("empty or header-less Zstandard session log", path, 0)
            view = memoryview(data)
            try:
                text = b"".join(decompress_frame(view[s:e], s, self.max_frame_bytes) for s, e in scan.frames)
            except SessionPersistenceCorruptionError as err:
                raise self._located(err, path) from err
        else:
            text = data
        newline = text.find(b"\n")
        first = text if newline < 0 else text[:newline]
        try:
            meta = parse_header_line(first, max_depth=self.max_depth)
        except SessionFormatUnsupportedError as err:
            raise SessionFormatUnsupportedError(f"{err.message} (raw log: {path})", location=path) from None
        except SessionPersistenceCorruptionError:
            meta = None
        if meta is None or meta["id"] != session_id:
            raise self._corrupt(f'corrupt session log: invalid header line in "{path}"', path, 0)
        try:
            content = text.decode("utf-8")
        except UnicodeDecodeError as err:
            where = "decoded " if self._zstd else ""
            raise self._corrupt(
                f"corrupt session log: bytes that are not UTF-8 at {where}byte {err.start}", path, err.start
            ) from None
        return RawArtifact(meta=cast("SessionHeader", meta), filename=LOGICAL_FILENAME, content=content)

    # --- writing -------------------------------------------------------------------------------

    def _batch_text(self, events: Sequence[WireEvent]) -> bytes:
        """One batch's logical text, newline-terminated: one bytes object built by a single join.

        Verbatim events reuse their cached JSON bytes; only packed rows are serialized here. Packing
        returns verbatim events as the very same objects, in order, so identity tells them apart.
        """
        if self.pack_chunks:
            records = pack_chunk_runs(events)
            if len(records) == len(events):
                lines = [event_json(event) for event in events]
            else:
                lines = []
                index = 0
                count = len(events)
                for record in records:
                    if index < count and record is events[index]:
                        lines.append(event_json(record))
                        index += 1
                    else:
                        lines.append(dumps(record))
                        data: Any = record["data"]
                        index += len(data["texts"] if "texts" in data else data["args"])
        else:
            lines = [event_json(event) for event in events]
        lines.append(b"")
        return b"\n".join(lines)

    @_typed_os_errors
    def append_batch(self, meta: Mapping[str, Any], events: Sequence[WireEvent], materialized: bool) -> None:
        """Durably append one batch; the first one publishes header and batch atomically (spec §4.5–4.6)."""
        if not events:
            return
        self._refuse_write("append")
        path = self._log_path(meta)
        self._preflight()
        body = self._batch_text(events)
        first = events[0]["seq"]
        if materialized:
            self._append_lines(path, body, meta["id"], first, len(events))
        else:
            self._materialize(meta, path, body, first + len(events))

    # --- the stored tail (one fstat per append) ---------------------------------------------------

    def _remember_tail(self, path: str, revision: str, next_seq: int, marker: TornMarker | None) -> None:
        dev, ino, size = (int(part) for part in revision.split(":")[:3])
        if marker is None:
            tail = _Tail(dev, ino, size, next_seq)
        else:
            tail = _Tail(dev, ino, size, None, (marker.truncate_to, next_seq - len(marker.recovered_events)))
        with self._mutex:
            self._tails[path] = tail

    def _expected_tail(self, path: str) -> _Tail:
        """The tail this instance last wrote or read; learned from the file on a first write."""
        with self._mutex:
            tail = self._tails.get(path)
        if tail is None:
            found = self._read_stable(path)
            if found is None:
                raise FileNotFoundError(errno.ENOENT, "no stored log", path)
            data, revision = found
            with gc_paused():
                _, _, marker, count = self._decode_zstd(data, path) if self._zstd else self._decode_raw(data, path)
            self._remember_tail(path, revision, count, marker)
            with self._mutex:
                tail = self._tails[path]
        return tail

    def _check_tail(self, path: str, st: os.stat_result, first_seq: int | None, tail: _Tail) -> None:
        if (st.st_dev, st.st_ino, st.st_size) != (tail.dev, tail.ino, tail.size):
            raise SessionTailChangedError(
                f'session log "{path}" changed since this writer last wrote or read it (expected {tail.size} bytes '
                f"in inode {tail.ino}, found {st.st_size} bytes in inode {st.st_ino}): another writer appended to "
                "it (was its lock file removed?). Nothing was written; close this writer and resume the session "
                "to continue from what is stored",
                location=path,
            )
        if tail.next_seq is None:
            raise SessionTailChangedError(
                f'session log "{path}" has an unrepaired torn tail; resume the session (which repairs it) before '
                "appending. Nothing was written",
                location=path,
            )
        if first_seq is not None and first_seq != tail.next_seq:
            raise PersistenceError(
                f'session log "{path}" append starts at seq {first_seq}, stored next seq is {tail.next_seq}; '
                "nothing was written"
            )

    def _first_content(self, meta: Mapping[str, Any], body: bytes) -> bytes:
        """The header and the first batch, as the start of a new log file."""
        header = dumps(header_line(meta)) + b"\n"
        return compress_frame(header) + compress_frame(body) if self._zstd else header + body

    def _open_temp(self, meta: Mapping[str, Any], path: str, suffix: str = ".tmp") -> tuple[str, int]:
        """Create the directories of a new log and its temporary file (``<log>.<hex><suffix>``, which no
        reader lists); refuse when a log (of either encoding) already exists."""
        session_dir = os.path.dirname(path)
        opposite = os.path.join(session_dir, "session" + self._opposite)
        self._mkdir_durable(self.root, "session store root")
        self._mkdir_durable(os.path.dirname(session_dir), "project directory")
        self._mkdir_durable(session_dir, "session directory")
        if _lexists(opposite):
            raise self._mismatch(opposite)
        if _lexists(path):
            raise PersistenceError(_refusal(meta))
        temp = f"{path}.{secrets.token_hex(6)}{suffix}"
        return temp, os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | _O_CLOEXEC | _O_NOFOLLOW, 0o600)

    def _publish_temp(self, meta: Mapping[str, Any], temp: str, path: str) -> None:
        """``link`` the fsynced temporary file into place (unlike rename, never replaces a log another
        writer published), then make the directory entry durable."""
        try:
            os.link(temp, path)
        except FileExistsError as err:
            raise PersistenceError(_refusal(meta)) from err
        _fsync_dir(os.path.dirname(path))

    def _materialize(self, meta: Mapping[str, Any], path: str, body: bytes, next_seq: int) -> None:
        content = self._first_content(meta, body)
        temp, fd = self._open_temp(meta, path)
        try:
            try:
                _write_all(fd, content)
                os.fsync(fd)
                st = os.fstat(fd)
            except OSError as err:
                raise storage_error(err, path) from err
            finally:
                os.close(fd)
            self._publish_temp(meta, temp, path)
        finally:
            try:
                os.unlink(temp)
            except OSError:
                pass
        with self._mutex:
            self._tails[path] = _Tail(st.st_dev, st.st_ino, st.st_size, next_seq)

    def _append_lines(self, path: str, body: bytes, session_id: str, first_seq: int | None, count: int) -> None:
        """``appendLines``: write + fsync at EOF, or roll back to the prior size so a retry is clean.

        Under the writer lock, the file must still end where this instance last saw it end.
        """
        payload = compress_frame(body) if self._zstd else body
        try:
            tail = self._expected_tail(path)
            fd, st = _open_regular(path, os.O_WRONLY | os.O_APPEND)
        except FileNotFoundError as err:
            # Unlike the reference (which would create a header-less file), a vanished log is an error.
            raise PersistenceError(f'session "{session_id}" has no stored log to append to ({path})') from err
        size = st.st_size
        try:
            self._check_tail(path, st, first_seq, tail)
        except BaseException:
            os.close(fd)
            raise
        try:
            _write_all(fd, payload)
            os.fsync(fd)
        except BaseException as err:
            os.close(fd)
            self._roll_back(path, size, err)
            if isinstance(err, OSError):
                raise storage_error(err, path) from err
            raise
        os.close(fd)
        with self._mutex:
            self._tails[path] = _Tail(
                tail.dev, tail.ino, size + len(payload), None if tail.next_seq is None else tail.next_seq + count
            )

    @staticmethod
    def _roll_back(path: str, size: int, err: BaseException) -> None:
        """Truncate a failed append's partial bytes; if even that fails, report both errors."""
        try:
            fd = os.open(path, os.O_RDWR | _O_SAFE)
            try:
                os.ftruncate(fd, size)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as rollback_err:
            raise AppendRollbackError(
                f'failed to roll back append to "{path}": {describe_error(err)}; '
                f"rollback: {describe_error(rollback_err)}",
                (err, rollback_err),
            ) from err

    @_typed_os_errors
    def commit_repair(
        self, meta: Mapping[str, Any], torn_marker: TornMarker | None, closers: Sequence[WireEvent]
    ) -> None:
        """Cut the torn tail, then append recovered events + closers as ONE batch (spec §4.8).

        Two fsynced steps, not atomic: a crash between them leaves a shorter but valid log, and the next
        load simply recomputes the closers. The file must still be the one this instance read.
        """
        self._refuse_write("repair the session log")
        path = self._log_path(meta)
        batch: list[WireEvent] = []
        if torn_marker is not None:
            if not isinstance(torn_marker, TornMarker):
                raise PersistenceError(f"not a JSONL torn marker: {torn_marker!r}")
            tail = self._expected_tail(path)
            fd, st = _open_regular(path, os.O_RDWR)
            try:
                if tail.cut is None or tail.cut[0] != torn_marker.truncate_to:
                    raise SessionTailChangedError(
                        f'session log "{path}" changed since its torn tail was read; nothing was truncated. Load '
                        "the session again",
                        location=path,
                    )
                self._check_tail(path, st, None, _Tail(tail.dev, tail.ino, tail.size, tail.cut[1]))
                os.ftruncate(fd, torn_marker.truncate_to)
                os.fsync(fd)
            finally:
                os.close(fd)
            with self._mutex:
                self._tails[path] = _Tail(tail.dev, tail.ino, torn_marker.truncate_to, tail.cut[1])
            batch.extend(torn_marker.recovered_events)
        batch.extend(closers)
        if batch:
            self._append_lines(path, self._batch_text(batch), meta["id"], batch[0]["seq"], len(batch))

    # --- misc ----------------------------------------------------------------------------------

    def locate(self, meta: Mapping[str, Any]) -> str | None:
        """The absolute transcript path (pure: no I/O; the file may not exist yet)."""
        return self._log_path(meta)

    def derived_directory(self) -> str | None:
        """Derived files live in the root under their own names (:meth:`derived_path`), not a directory."""
        return None

    def derived_path(self, name: str, suffix: str) -> str | None:
        """``<root>/<name>``: the listing ignores files in the root, and a dot-name is never a project."""
        return os.path.join(self.root, name)

    @_typed_os_errors
    def stage_session(self, meta: Mapping[str, Any]) -> _StagedLog:
        """A new session written into a temporary file that is linked into place whole at ``publish``.

        The file is written like a log (a zstd frame per batch) but fsynced once, before the link: until
        then no reader lists it, and a crash leaves only an unlisted ``*.import.tmp`` file in the session
        directory. Its writer holds an ``flock`` on it; each new staging first removes the files of such
        writers that died (:meth:`_sweep_staged`).
        """
        self._refuse_write("stage a session")
        path = self._log_path(meta)
        self._preflight()
        if _lexists(path):
            raise PersistenceError(_refusal(meta))
        self._sweep_staged()
        return _StagedLog(self, dict(meta), path)

    @_typed_os_errors
    def delete_session(self, session_id: str, step: DeleteStep | None = None) -> bool:
        """Remove the log: rename it to an unlisted tombstone (``session.jsonl.deleted``), then unlink it.

        The rename is the commit point: before it every reader sees the whole log, after it none lists or
        opens it (listing and loading look for ``session.jsonl`` only). A crash after the rename leaves
        the tombstone, which this method removes the next time it runs for the id (whether or not a new
        log exists by then). The session directory goes too when nothing else is in it.
        """
        self._refuse_write("delete a session")
        self._preflight()
        encoded = self._encoded_id(session_id)
        path = self._find_log(session_id)
        if path is not None:
            if step is not None:
                step("tombstone")
            os.rename(path, path + TOMBSTONE_SUFFIX)
            _fsync_dir(os.path.dirname(path))
            with self._mutex:
                self._tails.pop(path, None)
        # This delete's tombstone, and what an earlier one killed after its rename left (a tombstone, an
        # empty session directory), in whichever project directory it was.
        for project in self._project_dirs():
            session_dir = f"{self.root}/{project}/{encoded}"
            if not _lexists(session_dir) or any(_lexists(f"{session_dir}/session{s}") for s in _SUFFIXES.values()):
                continue
            for suffix in _SUFFIXES.values():
                tombstone = f"{session_dir}/session{suffix}{TOMBSTONE_SUFFIX}"
                if _lexists(tombstone):
                    if step is not None:
                        step("unlink")
                    os.unlink(tombstone)
            if step is not None:
                step("rmdir")
            try:
                os.rmdir(session_dir)  # not fsynced: an empty directory a crash brings back lists nothing
            except OSError:
                continue  # something else lives there (a staged import); the directory lists nothing
        return path is not None

    def close(self) -> None:
        """Nothing to release: every file handle is closed by the operation that opened it."""

    def store_identity(self) -> str | None:
        """``jsonl:<real root>:<inode>`` (:class:`~..backend.IdentifiesStore`); ``None`` before the root exists."""
        return directory_identity(self.root)


TOMBSTONE_SUFFIX: Final = ".deleted"
"""What a deleted log is renamed to before it is unlinked (listing and loading never look at it)."""


def _refusal(meta: Mapping[str, Any]) -> str:
    return f'refusing to materialize "{meta["id"]}": a log already exists on disk (load/resume it instead)'
