"""``PersistenceCoordinator.read_from`` seeks: a tail read costs the tail, and answers what the whole read did.

Every backend has a seek read (``load_stored_from``): SQLite by index, memory by slicing its records,
JSONL raw by reading lines backwards from the end of the file, JSONL zstd by locating the trailing
frames backwards. The reference in every property here is the behaviour before seeking existed: the
same storage read through a coordinator whose backend hides ``load_stored_from``, which reads the
whole log and slices it. The properties draw logs with current and legacy shapes, packed chunk runs
(several batch partitions), ignorable unknown events, torn tails of every kind, and damage.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.errors import AgentlogError, InvalidOptionError, SessionNotFoundError
from agentlog.kernel.chunkrows import decode_storage_record
from agentlog.kernel.events import ASSISTANT_MESSAGE, TOOL_RESULT, USER_MESSAGE
from agentlog.kernel.jsoncodec import dumps, loads
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl import _zstdframes
from agentlog.persistence.jsonl._zstdframes import ZSTD_MAGIC_BYTES, compress_frame, frame_ends_at, scan_zstd_frames
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.memory import MemoryBackend, MemoryStorage
from agentlog.persistence.sqlite.backend import SqliteBackend
from agentlog.testing.builders import (
    SID,
    assistant_data,
    chunk_event,
    ev,
    header,
    step_end,
    step_start,
    tool_call_event,
    tool_result_data,
    turn_end,
    turn_start,
    user_data,
)

KINDS = ("memory", "jsonl-none", "jsonl-zstd", "sqlite")
FILE_KINDS = ("jsonl-none", "jsonl-zstd")


# --- storage of one example ----------------------------------------------------------------------------


class _WholeOnly:
    """A backend without a seek read: what ``read_from`` did before (whole read, then slice)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "load_stored_from":
            raise AttributeError(name)
        return getattr(self._inner, name)


class _Storage:
    """One storage location of ``kind`` and a factory of backend instances over it."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind = kind
        self.root = root
        self.memory = MemoryStorage()

    def backend(self) -> Any:
        if self.kind == "memory":
            return MemoryBackend(self.memory)
        if self.kind == "sqlite":
            return SqliteBackend(str(self.root / "sessions.sqlite3"))
        return JsonlBackend(str(self.root / "jsonl"), compression="zstd" if self.kind == "jsonl-zstd" else "none")

    def path(self) -> Path:
        backend = self.backend()
        try:
            located = backend.locate(header(SID))
        finally:
            backend.close()
        assert located is not None
        return Path(located)


def write(storage: _Storage, events: list[dict[str, Any]], cuts: list[int]) -> None:
    """Append ``events`` in the batches ``cuts`` delimits (each batch one frame / one transaction)."""
    backend = storage.backend()
    try:
        bounds = [0, *sorted({c for c in cuts if 0 < c < len(events)}), len(events)]
        for index, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            backend.append_batch(header(SID), events[lo:hi], index > 0)
    finally:
        backend.close()


Outcome = tuple[Any, ...]


def outcome(read: Callable[[], Any]) -> Outcome:
    """What a read answered: the header and event bytes, or the error's type and message."""
    try:
        snapshot = read()
    except AgentlogError as err:
        return ("error", type(err).__name__, str(err))
    return ("ok", dumps(snapshot.meta), [dumps(event) for event in snapshot.events])


class _Readers:
    """A seeking coordinator and a whole-reading one over the same storage."""

    def __init__(self, storage: _Storage) -> None:
        self.seek = PersistenceCoordinator(SessionStore(), storage.backend())
        self.whole = PersistenceCoordinator(SessionStore(), _WholeOnly(storage.backend()))

    def both(self, from_seq: int) -> tuple[Outcome, Outcome]:
        return (
            outcome(lambda: self.seek.read_from(SID, from_seq)),
            outcome(lambda: self.whole.read_from(SID, from_seq)),
        )

    def close(self) -> None:
        self.seek.close()
        self.whole.close()


def storage_of(kind: str) -> Iterator[_Storage]:
    with tempfile.TemporaryDirectory() as tmp:
        yield _Storage(kind, Path(tmp))


# --- drawn logs ----------------------------------------------------------------------------------------

TEXT = [{"type": "text", "text": "hello"}]


@st.composite
def logs(draw: st.DrawFn, *, legacy: bool = True) -> list[dict[str, Any]]:
    """A session log: closed turns (the last may stay open) with chunk runs, tools and legacy shapes."""
    events: list[dict[str, Any]] = []

    def add(event: dict[str, Any]) -> int:
        events.append(event)
        return int(event["seq"])

    old = st.booleans() if legacy else st.just(False)
    for turn in range(1, draw(st.integers(1, 4)) + 1):
        add(turn_start(len(events), turn))
        if draw(old):
            add(ev(USER_MESSAGE, len(events), {"content": TEXT, "source": {"kind": "user"}}, surfaceOp="append"))
        else:
            add(ev(USER_MESSAGE, len(events), user_data(f"q{turn}", msg_id=f"u{turn}"), surfaceOp="append"))
        if draw(st.integers(0, 5)) == 0:
            return events  # a turn left open by a crash
        add(step_start(len(events), turn))
        for _ in range(draw(st.integers(0, 7))):
            add(chunk_event(len(events), f"c{len(events)}", turn=turn))
        if draw(st.booleans()):
            add(ev("plugin/observation", len(events), {"k": 1}, ignorable=True))
        if draw(old):
            data = {"turn": turn, "step": 1, "content": TEXT, "provenance": {"provider": "p", "model": "m"}}
            add(ev(ASSISTANT_MESSAGE, len(events), data, surfaceOp="append"))
        else:
            data = assistant_data("hi", turn=turn, msg_id=f"a{turn}")
            add(ev(ASSISTANT_MESSAGE, len(events), data, surfaceOp="append"))
        if draw(st.booleans()):
            call = f"call-{turn}"
            add(tool_call_event(len(events), call, turn=turn))
            if draw(old):  # pre-identity, and perhaps replaced: the replacement inherits the target's id
                result = {"turn": turn, "step": 1, "callId": call, "content": TEXT, "isError": False}
                target = add(ev(TOOL_RESULT, len(events), result, surfaceOp="append"))
                if draw(st.booleans()):
                    replace = {"op": "replace", "start": target, "end": target}
                    add(ev(TOOL_RESULT, len(events), result, surfaceOp=replace, sourceEventSeqs=[target]))
            else:
                add(ev(TOOL_RESULT, len(events), tool_result_data(call, turn=turn, msg_id=f"r{turn}")))
        add(step_end(len(events), turn))
        add(turn_end(len(events), turn))
    return events


def cuts() -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(1, 60), max_size=6)


# --- damage ------------------------------------------------------------------------------------------


def record_spans(storage: _Storage) -> list[tuple[int, int, int, int]]:
    """``(first_seq, last_seq, start, end)`` of each record after the header: lines (raw) or frames (zstd)."""
    data = storage.path().read_bytes()
    spans = []
    if storage.kind == "jsonl-none":
        start = data.index(b"\n") + 1
        while start < len(data):
            end = data.index(b"\n", start) + 1
            decoded = decode_storage_record(loads(data[start : end - 1]))
            spans.append((decoded[0]["seq"], decoded[-1]["seq"], start, end))
            start = end
        return spans
    for start, end in scan_zstd_frames(data).frames[1:]:
        text = zstandard.ZstdDecompressor().decompressobj().decompress(data[start:end])
        decoded = [e for line in text.splitlines() for e in decode_storage_record(loads(line))]
        spans.append((decoded[0]["seq"], decoded[-1]["seq"], start, end))
    return spans


TORN = ("fragment", "gap-line", "gap-turn-end", "torn-record-frame")


def tear(storage: _Storage, how: str, next_seq: int) -> None:
    """Append one kind of crash damage (or, for ``gap-turn-end``, committed damage) at the end of the log."""
    path = storage.path()
    zstd = storage.kind == "jsonl-zstd"
    if how == "fragment":
        line = dumps(chunk_event(next_seq, "x" * 3000)) + b"\n"
        tail = compress_frame(line)[:40] if zstd else line[:25]
    elif how == "torn-record-frame":  # a complete frame that ends inside a record
        line = dumps(chunk_event(next_seq, "tail"))
        tail = compress_frame(line) if zstd else line
    else:
        etype = "turn/end" if how == "gap-turn-end" else "assistant/chunk"
        line = dumps(ev(etype, next_seq + 5, {"turn": 1, "reason": {"kind": "completed"}})) + b"\n"
        tail = compress_frame(line) if zstd else line
    with open(path, "ab") as fh:
        fh.write(tail)


def damage(storage: _Storage, seq: int) -> None:
    """Damage the record (raw line / zstd frame) that holds ``seq``; later records stay intact."""
    path = storage.path()
    data = bytearray(path.read_bytes())
    for first, last, start, end in record_spans(storage):
        if first <= seq <= last:
            if storage.kind == "jsonl-none":
                data[start : end - 1] = b'{"type":' + b"x" * max(0, end - 1 - start - 8)
            else:
                data[end - 2] ^= 0x55  # inside the checksum: the frame no longer verifies
            path.write_bytes(bytes(data))
            return
    raise AssertionError(f"no record holds seq {seq}")


# --- properties ------------------------------------------------------------------------------------------

SETTINGS = settings(max_examples=35, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("kind", KINDS)
@SETTINGS
@given(log=logs(), batches=cuts(), torn=st.sampled_from((None, *TORN)))
def test_seek_read_answers_what_the_whole_read_sliced_answered(
    kind: str, log: list[dict[str, Any]], batches: list[int], torn: str | None
) -> None:
    """For every ``from_seq`` in ``[0, len+2]``: the same header and events, or the same error.

    Covers packed chunk runs in several partitions, legacy shapes that need the prefix (the seek then
    reads the whole log), ignorable unknown events, and on JSONL every torn tail: a fragment, a
    defective last line, a committed ``turn/end`` gap (an error), a complete frame ending mid-record.
    """
    for storage in storage_of(kind):
        write(storage, log, batches)
        if torn is not None and kind in FILE_KINDS:
            tear(storage, torn, len(log))
        readers = _Readers(storage)
        try:
            for from_seq in range(len(log) + 3):
                sought, whole = readers.both(from_seq)
                assert sought == whole, from_seq
        finally:
            readers.close()


@pytest.mark.parametrize("kind", KINDS)
@SETTINGS
@given(log=logs(legacy=False), batches=cuts(), torn=st.sampled_from((None, "fragment", "gap-line")))
def test_backend_seek_equals_the_whole_stored_prefix_sliced(
    kind: str, log: list[dict[str, Any]], batches: list[int], torn: str | None
) -> None:
    """``load_stored_from`` itself: the header, revision and events ``load_stored`` gives, sliced, no marker.

    Only a torn zstd frame (or damage) makes the seek read the whole log: on an intact log, a raw log
    with a torn tail, and for every ``from_seq >= 1``, the whole read is never called.
    """
    for storage in storage_of(kind):
        write(storage, log, batches)
        if torn is not None and kind in FILE_KINDS:
            tear(storage, torn, len(log))
        backend = storage.backend()
        seeker = storage.backend()
        if torn is None or kind != "jsonl-zstd":
            seeker.__class__ = type("Guarded", (_NoWholeRead, type(seeker)), {})
        try:
            try:
                whole = backend.load_stored(SID)
            except AgentlogError as err:  # a zstd frame holding a defective line is committed damage
                for from_seq in range(1, len(log) + 3):
                    with pytest.raises(type(err)) as raised:
                        backend.load_stored_from(SID, from_seq)
                    assert str(raised.value) == str(err)
                return
            for from_seq in range(1, len(log) + 3):
                sought = seeker.load_stored_from(SID, from_seq)
                assert sought.meta == whole.meta
                assert sought.revision == whole.revision
                assert sought.torn_marker is None
                assert [dumps(e) for e in sought.events] == [dumps(e) for e in whole.events[from_seq:]]
            assert [dumps(e) for e in backend.load_stored_from(SID, 0).events] == [dumps(e) for e in whole.events]
            assert seeker.load_stored_from("absent", 3) is None
        finally:
            backend.close()
            seeker.close()


PROBLEMS = ("damage", "unknown-type", "mode-set")


@pytest.mark.parametrize("kind", KINDS)
@SETTINGS
@given(log=logs(legacy=False), batches=cuts(), problem=st.sampled_from(PROBLEMS), data=st.data())
def test_a_problem_in_the_suffix_is_reported_as_the_whole_read_reports_it(
    kind: str, log: list[dict[str, Any]], batches: list[int], problem: str, data: st.DataObject
) -> None:
    """A damaged record or a refused event at seq ``p``: every ``from_seq <= p`` gets the whole read's
    answer; a ``from_seq`` past it may instead get the intact suffix (records before the span are not
    read, as SQLite's seek read does not read them), never anything else."""
    if problem == "damage" and kind not in FILE_KINDS:
        return  # memory holds no damage; SQLite's damaged rows are covered by its own seek tests
    at = data.draw(st.integers(0, len(log) - 1), label="problem seq")
    for clean in storage_of(kind):
        write(clean, log, batches)
        reference = _Readers(clean)
        for storage in storage_of(kind):
            stored = list(log)
            if problem == "unknown-type":
                stored[at] = ev("plugin/unknown", at, {"k": 1})
            elif problem == "mode-set":
                stored[at] = ev("mode/set", at, {"mode": "x"})
            write(storage, stored, batches)
            if problem == "damage":
                damage(storage, at)
            readers = _Readers(storage)
            try:
                for from_seq in range(len(log) + 3):
                    sought, whole = readers.both(from_seq)
                    if from_seq <= at:
                        assert sought == whole, from_seq
                    elif sought != whole:
                        assert whole[0] == "error"
                        assert sought == reference.both(from_seq)[1], from_seq
            finally:
                readers.close()
        reference.close()


# --- the cost is the suffix's ----------------------------------------------------------------------------


def _noise(n: int) -> str:
    """Text that compresses poorly, so a zstd log is large too."""
    return hashlib.sha256(str(n).encode()).hexdigest()


def long_log(turns: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for turn in range(1, turns + 1):
        s = len(events)
        events += [turn_start(s, turn), ev(USER_MESSAGE, s + 1, user_data(f"q{turn}", msg_id=f"u{turn}"))]
        chunks = [chunk_event(s + 3 + k, _noise(s + k), turn=turn) for k in range(20)]
        events += [step_start(s + 2, turn), *chunks]
        events += [ev(ASSISTANT_MESSAGE, s + 23, assistant_data(_noise(s), turn=turn, msg_id=f"a{turn}"))]
        events += [step_end(s + 24, turn), turn_end(s + 25, turn)]
    return events


class _NoWholeRead:
    """Fails the test if the whole log is read."""

    def load_stored(self, session_id: str) -> Any:
        raise AssertionError("the whole log was read")


@pytest.fixture(params=KINDS)
def big(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[_Storage, list[dict[str, Any]]]]:
    storage = _Storage(request.param, tmp_path)
    log = long_log(300)  # 7,800 events, one batch per turn
    write(storage, log, list(range(26, len(log), 26)))
    yield storage, log


def test_a_tail_read_never_reads_the_whole_log(big: tuple[_Storage, list[dict[str, Any]]]) -> None:
    """``read_from(len - 26)`` on every backend is served by the seek read alone (the whole read fails)."""
    storage, log = big
    backend = storage.backend()
    backend.__class__ = type("Guarded", (_NoWholeRead, type(backend)), {})
    coordinator = PersistenceCoordinator(SessionStore(), backend)
    try:
        tail = coordinator.read_from(SID, len(log) - 26)
        assert [e["seq"] for e in tail.events] == list(range(len(log) - 26, len(log)))
        assert [dumps(e) for e in tail.events] == [dumps(e) for e in log[-26:]]
    finally:
        coordinator.close()


@pytest.mark.parametrize("kind", FILE_KINDS)
def test_a_jsonl_tail_read_reads_a_bounded_part_of_the_file(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes read (and zstd frames decoded) for a one-turn tail do not grow with the log."""
    storage = _Storage(kind, tmp_path)
    log = long_log(600)
    write(storage, log, list(range(26, len(log), 26)))
    size = storage.path().stat().st_size
    read: list[int] = []
    decoded: list[int] = []
    real_pread, real_decompress = os.pread, _zstdframes.decompress_frame

    def pread(fd: int, length: int, offset: int) -> bytes:
        chunk = real_pread(fd, length, offset)
        read.append(len(chunk))
        return chunk

    def decompress(frame: Any, start: int, max_bytes: int) -> bytes:
        decoded.append(start)
        return real_decompress(frame, start, max_bytes)

    monkeypatch.setattr(os, "pread", pread)
    monkeypatch.setattr("agentlog.persistence.jsonl._decoding.decompress_frame", decompress)  # the header frame
    monkeypatch.setattr("agentlog.persistence.jsonl._seek.decompress_frame", decompress)
    backend = storage.backend()
    try:
        tail = backend.load_stored_from(SID, len(log) - 26)
    finally:
        backend.close()
    assert [e["seq"] for e in tail.events] == list(range(len(log) - 26, len(log)))
    assert sum(read) <= 2 * 64 * 1024 < size // 4
    if kind == "jsonl-zstd":
        assert len(decoded) <= 3  # the header frame, the last batch and the one before it at most


def test_a_legacy_shape_in_the_suffix_reads_the_whole_log(tmp_path: Path) -> None:
    """A legacy replacement inherits an id from before the span, so the read falls back to the whole log."""
    storage = _Storage("sqlite", tmp_path)
    result = {"turn": 1, "step": 1, "callId": "c", "content": TEXT, "isError": False}
    log = [
        turn_start(0),
        ev(USER_MESSAGE, 1, user_data("q", msg_id="u1"), surfaceOp="append"),
        step_start(2),
        tool_call_event(3, "c"),
        ev(TOOL_RESULT, 4, result, surfaceOp="append"),
        ev(TOOL_RESULT, 5, result, surfaceOp={"op": "replace", "start": 4, "end": 4}, sourceEventSeqs=[4]),
        step_end(6),
        turn_end(7),
    ]
    write(storage, log, [])
    calls: list[str] = []
    backend = storage.backend()
    whole = backend.load_stored

    def counted(session_id: str) -> Any:
        calls.append(session_id)
        return whole(session_id)

    backend.load_stored = counted
    coordinator = PersistenceCoordinator(SessionStore(), backend)
    try:
        suffix = coordinator.read_from(SID, 5)
        assert suffix.events[0]["data"]["message"]["id"] == f"legacy-message:{SID}:4"
        assert calls == [SID]
        assert [e["seq"] for e in coordinator.read_from(SID, 6).events] == [6, 7]
        assert calls == [SID]  # a current-format suffix is served by the seek alone
    finally:
        coordinator.close()


# --- edges ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_edges_of_the_seek(kind: str, tmp_path: Path) -> None:
    """Past the end is empty, an absent session is not found, a non-safe ``from_seq`` is refused."""
    storage = _Storage(kind, tmp_path)
    log = long_log(2)
    write(storage, log, [26])
    coordinator = PersistenceCoordinator(SessionStore(), storage.backend())
    try:
        assert list(coordinator.read_from(SID, len(log)).events) == []
        assert list(coordinator.read_from(SID, 2**53 - 1).events) == []
        assert [e["seq"] for e in coordinator.read_from(SID, len(log) - 1).events] == [len(log) - 1]
        with pytest.raises(SessionNotFoundError, match='session "absent" not found'):
            coordinator.read_from("absent", 4)
        for bad in (2**53, -1, True, 1.0):
            with pytest.raises(InvalidOptionError, match="readFrom fromSeq must be a non-negative safe integer"):
                coordinator.read_from(SID, bad)  # type: ignore[arg-type]
    finally:
        coordinator.close()


def test_a_magic_number_inside_a_frame_is_not_taken_for_a_frame_start() -> None:
    """Only a structurally complete frame ending exactly at the next frame's start is accepted."""
    frame = compress_frame(b'{"type":"x","seq":0}\n' * 50)
    planted = frame[:-8] + ZSTD_MAGIC_BYTES + frame[-4:]  # the magic bytes near the end of the payload
    fake = len(planted) - 8
    assert planted.rfind(ZSTD_MAGIC_BYTES) == fake
    assert not frame_ends_at(planted, fake, len(planted))
    assert frame_ends_at(frame + frame, len(frame), 2 * len(frame))
    assert not frame_ends_at(frame + frame, 0, 2 * len(frame))  # two frames are not one


@pytest.mark.parametrize("kind", FILE_KINDS)
def test_a_file_that_changes_under_the_seek_is_read_again(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A short read (the file shrank or was replaced mid-read) restarts the seek instead of misplacing bytes."""
    storage = _Storage(kind, tmp_path)
    log = long_log(4)
    write(storage, log, [26, 52, 78])
    real_pread = os.pread
    calls: list[int] = []

    def pread(fd: int, length: int, offset: int) -> bytes:
        calls.append(offset)
        if len(calls) == 2:  # the header was read; the tail is gone (as if truncated meanwhile)
            return b""
        return real_pread(fd, length, offset)

    monkeypatch.setattr(os, "pread", pread)
    backend = storage.backend()
    try:
        tail = backend.load_stored_from(SID, len(log) - 30)
    finally:
        backend.close()
    assert len(calls) > 3 and calls[2] == 0  # the seek started over from the header
    assert [dumps(e) for e in tail.events] == [dumps(e) for e in log[-30:]]


@pytest.mark.parametrize("kind", FILE_KINDS)
@SETTINGS
@given(log=logs(), batches=cuts(), torn=st.sampled_from((None, *TORN)))
def test_the_torn_tail_probe_answers_what_the_whole_read_reports(
    kind: str, log: list[dict[str, Any]], batches: list[int], torn: str | None
) -> None:
    """``probe_torn_tail`` reads only the log's end, yet says exactly whether ``load_stored`` reports a torn
    tail (a marker) for every log that loads: a fragment, a defective last line, a torn zstd frame, an
    intact log. For a log the whole read refuses it answers ``False`` (damage is the whole read's to tell)."""
    for storage in storage_of(kind):
        write(storage, log, batches)
        if torn is not None:
            tear(storage, torn, len(log))
        backend = storage.backend()
        prober = storage.backend()
        prober.__class__ = type("Guarded", (_NoWholeRead, type(prober)), {})
        try:
            try:
                marker = backend.load_stored(SID).torn_marker
            except AgentlogError:
                assert prober.probe_torn_tail(SID) is False
                continue
            assert prober.probe_torn_tail(SID) is (marker is not None)
            assert prober.probe_torn_tail("absent") is False
        finally:
            backend.close()
            prober.close()
