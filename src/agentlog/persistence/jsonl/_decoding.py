"""JSONL store: reading a whole log at one stable revision and decoding it (raw text or zstd frames).

The bytes of a log bracketed by two stats (so the revision names exactly what was read), the load
budget, and the decoders: a raw log's committed prefix, and ``readZstdPrefix`` (complete frames must be
flawless, only the last may be torn). A torn tail comes back as a :class:`TornMarker`.
"""

from __future__ import annotations

import bisect
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ...errors import ResourceExhaustedError, SessionPersistenceCorruptionError
from ...kernel._gc import gc_paused
from ...kernel.chunkrows import expand_items
from ...kernel.events import SessionHeader
from ...kernel.jsoncodec import dumps, loads
from ._errors import _R
from ._files import _FileChanged, _not_a_file, _open_regular, _read_fd, _revision, _stat_key
from ._layout import _Layout
from ._scanner import SessionLogScanner, header_too_long, line_slices, scan_log, scan_log_compact
from ._zstdframes import (
    ZSTD_MAGIC_BYTES,
    FrameScan,
    FrameTooLargeError,
    decompress_frame,
    decompress_torn_frame,
    scan_zstd_frames,
)


@dataclass(frozen=True)
class TornMarker:
    """What :meth:`JsonlBackend.commit_repair` removes: the file is cut at ``truncate_to``, then the
    complete records recovered from a torn zstd frame are re-appended as a fresh checksummed frame."""

    truncate_to: int
    recovered_events: list[dict[str, Any]] = field(default_factory=list)


class _Decoding(_Layout):
    """Stable whole-log reads and their decoders (a mixin of
    :class:`~agentlog.persistence.jsonl.backend.JsonlBackend`)."""

    def _stable(self, path: str, read: Callable[[int, os.stat_result], _R]) -> tuple[_R, os.stat_result] | None:
        """``read(fd, opened)`` of the file bracketed by two stats, retried until they agree (spec §4.7 step 3).

        The revision taken from the returned stat then names exactly the bytes ``read`` saw, which is what
        lets the coordinator compare it later to decide whether a cached view is still current. ``None``:
        no file. ``read`` may raise ``_FileChanged`` to start over.
        """
        while True:
            try:
                before = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                return None
            if not stat.S_ISREG(before.st_mode):
                raise _not_a_file(path, before.st_mode)
            self._check_budget(path, before.st_size)
            try:
                fd, opened = _open_regular(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                result = read(fd, opened)
            except _FileChanged:
                continue
            finally:
                os.close(fd)
            after = os.stat(path, follow_symlinks=False)
            if _stat_key(before) == _stat_key(after) == _stat_key(opened):
                return result, before

    def _read_stable(self, path: str) -> tuple[bytes, str] | None:
        """The whole file, with the revision naming exactly these bytes."""

        def read(fd: int, opened: os.stat_result) -> bytes:
            data = _read_fd(fd, opened.st_size)
            self._check_budget(path, len(data))
            return data

        found = self._stable(path, read)
        return None if found is None else (found[0], _revision(found[1]))

    def _check_budget(self, path: str, size: int, decoded: bool = False) -> None:
        if size > self.max_log_bytes:
            what = "decodes to" if decoded else "is"
            raise ResourceExhaustedError(
                f'session log "{path}" {what} {size} bytes, more than the {self.max_log_bytes}-byte load budget '
                "(max_log_bytes); nothing was read or modified. Open the store with a larger max_log_bytes if "
                "this machine has the memory (a load needs several times the log's size)"
            )

    def _scan_frames(
        self, data: bytes | bytearray, path: str, max_frames: int | None = None, *, stop_at_damage: bool = False
    ) -> FrameScan:
        try:
            return scan_zstd_frames(data, max_frames, stop_at_damage=stop_at_damage)
        except SessionPersistenceCorruptionError as err:
            raise self._located(err, path) from err

    def _limits(self) -> dict[str, int]:
        return {
            "max_line_bytes": self.max_line_bytes,
            "max_depth": self.max_depth,
            "max_header_bytes": self.max_header_bytes,
        }

    def _decode_raw(
        self, data: bytes, path: str, compact: bool = False
    ) -> tuple[SessionHeader, list[Any], TornMarker | None, int]:
        """``(meta, events, torn marker, event count)``; ``compact`` keeps packed rows as ChunkRun items."""
        try:
            result = (scan_log_compact if compact else scan_log)(data, **self._limits())
        except SessionPersistenceCorruptionError as err:
            raise self._located(err, path) from err
        marker = TornMarker(result.committed_bytes) if result.committed_bytes < len(data) else None
        return result.meta, result.events, marker, result.count

    def _header_scanner(self, view: memoryview, frame: tuple[int, int], path: str) -> SessionLogScanner:
        start, end = frame
        try:
            text = decompress_frame(view[start:end], start, min(self.max_frame_bytes, self.max_header_bytes + 1))
        except FrameTooLargeError:
            raise self._located(header_too_long(self.max_header_bytes + 1, self.max_header_bytes), path) from None
        except SessionPersistenceCorruptionError as err:
            raise self._located(err, path) from err
        if not text.endswith(b"\n") or text.count(b"\n") != 1:
            raise self._corrupt(
                "corrupt Zstandard session log: first frame is not exactly one header line", path, start
            )
        try:
            return SessionLogScanner(text, **self._limits())
        except SessionPersistenceCorruptionError as err:
            raise self._located(err, path, start) from err

    def _decode_zstd(
        self,
        data: bytes,
        path: str,
        damages: list[SessionPersistenceCorruptionError] | None = None,
        compact: bool = False,
    ) -> tuple[SessionHeader, list[Any], TornMarker | None, int]:
        """``readZstdPrefix`` (spec §4.7.2): complete frames must be flawless; only the last may be torn.

        With ``damages`` (a partial read), damage after the header ends the read instead of failing it:
        the events decoded so far are returned and the (located) damage is appended to ``damages``.
        Returns ``(meta, events, torn marker, event count)``; ``compact`` keeps packed rows as ChunkRun
        items (the count is then larger than the list).
        """
        scan = self._scan_frames(data, path, stop_at_damage=damages is not None)
        if not scan.frames:
            if scan.damage is not None:
                raise self._located(scan.damage, path)
            raise self._corrupt("empty or header-less Zstandard session log", path, 0)
        view = memoryview(data)
        scanner = self._header_scanner(view, scan.frames[0], path)
        if compact:
            scanner.keep_runs_packed()
        # Logical (decoded-text) start of each event frame, to report damage at its physical frame.
        logical_starts: list[int] = []
        physical_starts: list[int] = []

        def physical(logical: int | None) -> int:
            index = bisect.bisect_right(logical_starts, logical or 0) - 1
            return physical_starts[index] if index >= 0 else 0

        try:
            decoded = 0
            for start, end in scan.frames[1:]:
                try:
                    text = decompress_frame(view[start:end], start, self.max_frame_bytes)
                except SessionPersistenceCorruptionError as err:
                    raise self._located(err, path) from err
                decoded += len(text)
                self._check_budget(path, decoded, decoded=True)
                logical_starts.append(scanner.checkpoint().input_bytes)
                physical_starts.append(start)
                try:
                    scanner.write(text)
                except SessionPersistenceCorruptionError as err:
                    raise self._located(err, path, physical(err.offset)) from err
            if scan.damage is not None:
                raise self._located(scan.damage, path)
            checkpoint = scanner.checkpoint()
            if checkpoint.committed_bytes != checkpoint.input_bytes:
                raise self._corrupt(
                    "corrupt Zstandard session log: complete frame contains a torn JSONL record",
                    path,
                    physical(checkpoint.committed_bytes),
                )
            if scan.torn_start is None:
                result = scanner.finish()
                return result.meta, result.events, None, result.count
            torn = scan.torn_start
            later = self._frame_after(view, torn)
            if later is not None:
                raise self._corrupt(
                    f"corrupt Zstandard session log: frame at byte {torn} is incomplete, yet a complete frame "
                    f"follows at byte {later}",
                    path,
                    torn,
                )
            try:
                text = decompress_torn_frame(view[torn:], torn, self.max_frame_bytes)
                scanner.write(text)
            except SessionPersistenceCorruptionError as err:
                raise self._located(err, path, torn) from err
        except SessionPersistenceCorruptionError as err:
            if damages is None:
                raise
            damages.append(err)
            result = scanner.finish()
            return result.meta, result.events, None, result.count
        result = scanner.finish()
        # Detached copies: the coordinator may normalise the returned events in place, and the marker's
        # events are re-written verbatim by the repair (a compact read's runs expanded for it).
        recovered = [loads(dumps(event)) for event in expand_items(result.events[checkpoint.event_count :])]
        return result.meta, result.events, TornMarker(torn, recovered), result.count

    def _stream_zstd(
        self, data: bytes, path: str, batch_bytes: int
    ) -> tuple[SessionHeader, Iterator[list[Any]]] | None:
        """The header and the events of a flawless Zstandard log a batch at a time (packed runs kept
        packed), decoded as :meth:`_decode_zstd` decodes them but handed over every ``batch_bytes`` of
        decoded text; ``None`` when the log has anything a whole read must judge (no frame, damage, a
        torn last frame): the stream is only ever the whole read of a log that has none of those.
        Damage met while streaming raises as the whole read would (a consumer that must report it
        exactly reads the log whole)."""
        scan = self._scan_frames(data, path, stop_at_damage=True)
        if not scan.frames or scan.damage is not None or scan.torn_start is not None:
            return None
        view = memoryview(data)
        scanner = self._header_scanner(view, scan.frames[0], path)
        scanner.keep_runs_packed()

        def batches() -> Iterator[list[Any]]:
            decoded = 0
            pending = 0
            for start, end in scan.frames[1:]:
                text = decompress_frame(view[start:end], start, self.max_frame_bytes)
                decoded += len(text)
                self._check_budget(path, decoded, decoded=True)
                for offset in range(0, len(text), batch_bytes):  # (a big frame is written in slices)
                    with gc_paused():
                        scanner.write(text[offset : offset + batch_bytes])
                    pending += min(batch_bytes, len(text) - offset)
                    if pending >= batch_bytes:
                        pending = 0
                        yield scanner.take_events()
            checkpoint = scanner.checkpoint()
            if checkpoint.committed_bytes != checkpoint.input_bytes:
                raise self._corrupt(
                    "corrupt Zstandard session log: complete frame contains a torn JSONL record", path, 0
                )
            scanner.finish()
            yield scanner.take_events()

        return scanner.meta, batches()

    def _stream_raw(self, data: bytes, path: str, batch_bytes: int) -> tuple[SessionHeader, Iterator[list[Any]]]:
        """:meth:`_stream_zstd` for a raw log: written to the scanner in slices ending at line ends, as
        ``scan_log_compact`` writes it; a log that does not end at a line end (a torn tail) raises."""
        end = data.find(b"\n")
        if end < 0:
            raise self._corrupt("empty or header-less session log", path, 0)
        try:
            scanner = SessionLogScanner(data[: end + 1], **self._limits())
        except SessionPersistenceCorruptionError as err:
            raise self._located(err, path) from err
        scanner.keep_runs_packed()

        def batches() -> Iterator[list[Any]]:
            view = memoryview(data)
            for position, stop in line_slices(data, end + 1, batch_bytes):
                with gc_paused():
                    scanner.write(view[position:stop])
                yield scanner.take_events()
            result = scanner.finish()
            if result.committed_bytes != len(data):
                raise self._corrupt("session log does not end at a record's end", path, result.committed_bytes)
            yield scanner.take_events()

        return scanner.meta, batches()

    def _frame_after(self, view: memoryview, torn: int) -> int | None:
        """Where a complete, valid frame starts inside a supposedly torn final region, if anywhere.

        A crash can only tear the *last* write, so its region is a prefix of one frame. If a complete
        frame that decodes with a valid checksum follows, the "torn" frame is really a damaged earlier
        frame (e.g. a flipped block-size bit made it look longer) and truncating it would destroy
        committed batches. Raw blocks cannot hide the magic (0xFD never occurs in UTF-8), so a false
        positive needs a checksummed frame to appear by chance inside compressed bytes.
        """
        data = view.obj if isinstance(view.obj, bytes) else bytes(view)
        position = data.find(ZSTD_MAGIC_BYTES, torn + 1)
        while position >= 0:
            try:
                scan = scan_zstd_frames(view[position:], 1)
                if scan.frames:
                    end = position + scan.frames[0][1]
                    decompress_frame(view[position:end], position, self.max_frame_bytes)
                    return position
            except SessionPersistenceCorruptionError:
                pass
            position = data.find(ZSTD_MAGIC_BYTES, position + 1)
        return None

    def _read_log(self, session_id: str) -> tuple[str, bytes, str] | None:
        """``(path, bytes, revision)`` of the session's transcript read at one stable revision, or None."""
        self._preflight()
        path = self._find_log(session_id)
        if path is None:
            return None
        read = self._read_stable(path)
        if read is None:
            return None
        return path, read[0], read[1]
