"""The JSONL backend in both its encodings: raw lines (``compression="none"``) and Zstandard frames.

Spec ``persistence.md`` §4 (raw: checklist §8.6; Zstandard: §4.4, checklists §8.7 and §8.8), plus
format-level extras, in three parts: the raw encoding's own cases (the byte layout of lines), the
Zstandard encoding's own cases (the byte layout of frames), and the cases that hold for either encoding,
parametrised over it (the ``jenv`` fixture: ``jsonl-none`` and ``jsonl-zstd``).

Every test works on real files under ``tmp_path``. The only interpositions are the ones the reference
tests use too: ``os.fsync`` fails to inject a disk error, and a few ``os.stat`` *spies* that delegate to
the real call but first change the file for real (to simulate a concurrent writer between two stats).
Tests named after a checklist item carry ``# spec 8.6 #<n>`` / ``# spec 8.7 #<n>`` / ``# spec 8.8``. Zstandard
frames are built with the ``zstandard`` library or byte by byte from RFC 8878's layout.
"""
from __future__ import annotations

import errno
import json
import os
import random
import stat
import string
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zstandard

from _full_disk import small_tmpfs
from agentlog.errors import (
    AgentlogError,
    InvalidSessionIdError,
    PersistenceError,
    ResourceExhaustedError,
    SessionFormatUnsupportedError,
    SessionLockedError,
    SessionPersistenceCorruptionError,
    SessionTailChangedError,
    StorageAccessError,
    StoreNotFoundError,
)
from agentlog.kernel.jsoncodec import dumps, loads
from agentlog.persistence.backend import Backend, PartialRead
from agentlog.persistence.jsonl._scanner import SessionLogScanner, scan_log
from agentlog.persistence.jsonl._zstdframes import compress_frame, decompress_frame, decompress_torn_frame
from agentlog.persistence.jsonl.backend import (
    AppendRollbackError,
    JsonlBackend,
    TornMarker,
    detect_compression,
    encode_segment,
    project_key,
    scan_zstd_frames,
)
from agentlog.testing import builders

from .conftest import (
    APPEND_INTENT,
    SID,
    BackendFactory,
    Harness,
    append_closed_turn,
    chunk_event,
    live_meta,
    step_start,
    turn_start,
    user_data,
    user_event,
)

CWD = "/home/me/app"
META: dict[str, Any] = {"version": 0, "id": "s1", "createdAt": 1000, "cwd": CWD}
HEADER = b'{"type":"session","version":0,"id":"s1","createdAt":1000,"cwd":"/home/me/app","delegationDepth":0}'


# --- builders ----------------------------------------------------------------------------------------


def ev(kind: str, seq: int, data: Any = None, **extra: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"type": kind, "seq": seq, "time": 1000 + seq, "data": {} if data is None else data}
    event.update(extra)
    return event


def chunk(seq: int, text: str, turn: int = 1, step: int = 1) -> dict[str, Any]:
    return ev(
        "assistant/chunk", seq, {"turn": turn, "step": step, "chunk": {"type": "text-delta", "index": 0, "text": text}}
    )


def user(seq: int, text: str = "hi") -> dict[str, Any]:
    message = {"id": f"m{seq}", "role": "user", "content": [{"type": "text", "text": text}], "source": {"kind": "user"}}
    return ev("user/message", seq, message, surfaceOp="append")


def open_turn(turn: int = 1, first: int = 0) -> list[dict[str, Any]]:
    """Eight events of a turn whose step is still open (what a crash mid-turn leaves)."""
    s = first
    return [
        ev("turn/start", s, {"turn": turn}),
        user(s + 1),
        ev("step/start", s + 2, {"turn": turn, "step": 1}),
        chunk(s + 3, "Hel", turn),
        chunk(s + 4, "lo ", turn),
        chunk(s + 5, "you", turn),
        ev("llm/retry", s + 6, {"attempt": 1}),
        ev("assistant/message", s + 7, {"turn": turn, "step": 1, "text": "Hello you"}, surfaceOp="append"),
    ]


def closed_turn(turn: int = 1, first: int = 0) -> list[dict[str, Any]]:
    events = open_turn(turn, first)
    n = first + len(events)
    return [
        *events,
        ev("step/end", n, {"turn": turn, "step": 1}),
        ev("turn/end", n + 1, {"turn": turn, "reason": {"kind": "completed"}}),
    ]


def closers(first: int, turn: int = 1) -> list[dict[str, Any]]:
    return [
        ev("step/end", first, {"turn": turn, "step": 1}),
        ev("turn/end", first + 1, {"turn": turn, "reason": {"kind": "interrupted"}}),
    ]


def make(tmp_path: Path, **options: Any) -> JsonlBackend:
    options.setdefault("compression", "none")
    return JsonlBackend(tmp_path / "root", **options)


def path_of(backend: JsonlBackend, meta: dict[str, Any] = META) -> Path:
    location = backend.locate(meta)
    assert location is not None
    return Path(location)


def place(backend: JsonlBackend, content: bytes, *, session_id: str = "s1", cwd: str | None = CWD) -> Path:
    """Write a hand-built artifact where the layout (§4.2) puts it."""
    project = "_no-cwd" if cwd is None else project_key(cwd)
    path = Path(backend.root) / project / encode_segment(session_id) / ("session" + backend._suffix)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def text(*records: Any) -> bytes:
    return b"".join((r if isinstance(r, bytes) else dumps(r)) + b"\n" for r in records)


def header(**fields: Any) -> dict[str, Any]:
    record: dict[str, Any] = {"type": "session", "version": 0, "id": "s1", "createdAt": 1000, "cwd": CWD}
    record.update(fields)
    record.setdefault("delegationDepth", 0)
    return record


def seqs(events: list[Any]) -> list[int]:
    return [e["seq"] for e in events]


def stat_spy(monkeypatch: pytest.MonkeyPatch, target: Path, on_call: dict[int, Callable[[], None]]) -> list[int]:
    """Count ``os.stat`` calls on ``target``; before the n-th call, run ``on_call[n]`` (a real change)."""
    real = os.stat
    calls: list[int] = []

    def spy(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if os.fspath(path) == str(target):
            calls.append(1)
            action = on_call.get(len(calls))
            if action is not None:
                action()
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", spy)
    return calls


def fail_fsync(monkeypatch: pytest.MonkeyPatch, which: Callable[[int], bool], *, files_only: bool = False) -> list[int]:
    """Make the n-th ``os.fsync`` fail when ``which(n)`` (counting only regular files if ``files_only``)."""
    real = os.fsync
    calls: list[int] = []

    def failing(fd: int) -> None:
        if files_only and not stat.S_ISREG(os.fstat(fd).st_mode):
            real(fd)
            return
        calls.append(fd)
        if which(len(calls)):
            raise OSError(errno.EIO, "injected fsync failure")
        real(fd)

    monkeypatch.setattr(os, "fsync", failing)
    return calls


# --- protocol ----------------------------------------------------------------------------------------


def test_jsonl__implements_the_backend_protocol(tmp_path: Path) -> None:
    backend = make(tmp_path)
    assert isinstance(backend, Backend)
    assert backend.name == "session-persistence-jsonl"
    assert backend.supports_raw_artifacts is True


# --- format helpers (§8.6 #136-#144) ---------------------------------------------------------------------


def test_jsonl__encode_segment_neutralizes_traversal_separators_and_absolute_paths() -> None:  # spec 8.6 #136
    assert encode_segment("..") == "~002E~002E"
    assert encode_segment(".") == "~002E"
    assert encode_segment("a/b") == "a~002Fb"
    assert encode_segment("/etc/passwd") == "~002Fetc~002Fpasswd"
    assert encode_segment("a\\b") == "a~005Cb"
    assert encode_segment("a\0b") == "a~0000b"
    assert encode_segment("a~b") == "a~007Eb"
    assert encode_segment("Safe-id_1.2") == "Safe-id_1.2"
    assert encode_segment("../x") == "..~002Fx"  # no separator survives, so ".." here is just a name


def test_jsonl__encode_segment_is_injective_over_utf16_including_lone_surrogates() -> None:  # spec 8.6 #137
    assert encode_segment("\ud800") == "~D800"
    assert encode_segment("\udc00") == "~DC00"
    assert encode_segment("\ud800") != encode_segment("\udc00")
    assert encode_segment("~002F") == "~007E002F"
    assert encode_segment("~002F") != encode_segment("/")
    assert encode_segment("😀") == "~D83D~DE00"  # each half of the pair separately
    assert encode_segment("é") == "~00E9"


def test_jsonl__encode_segment_rejects_an_empty_id() -> None:  # spec 8.6 #138
    with pytest.raises(ValueError, match="empty"):
        encode_segment("")


def test_jsonl__project_key_normalizes_project_paths_into_bounded_readable_names() -> None:  # spec 8.6 #139
    assert project_key("/Users/me/code/harness") == "--Users-me-code-harness--"
    assert project_key("C:\\code\\agent") == "--C-code-agent--"
    assert project_key("/开发/~agent") == "--~5F00~53D1-~007Eagent--"
    assert project_key("/") == "--root--"
    assert project_key("/a/b-c") == project_key("/a-b/c")
    long_key = project_key("/" + "x" * 1000)
    assert len(long_key) == 255 and long_key == "--" + "x" * 251 + "--"
    with pytest.raises(ValueError, match="empty"):
        project_key("")


def test_jsonl__resolves_a_relative_custom_root_before_locating_a_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # spec 8.6 #140
    monkeypatch.chdir(tmp_path)
    backend = JsonlBackend("relative-root", compression="none")
    monkeypatch.chdir("/")
    location = backend.locate(META)
    assert location == str(tmp_path / "relative-root" / "--home-me-app--" / "s1" / "session.jsonl")


def test_jsonl__refuses_a_structurally_foreign_future_header_as_unsupported_not_corrupt(
    tmp_path: Path,
) -> None:  # spec 8.6 #141
    backend = make(tmp_path)
    path = place(backend, text({"type": "session", "version": 42, "id": "s1"}, ev("turn/start", 0)))
    with pytest.raises(SessionFormatUnsupportedError, match="upgrade the harness") as info:
        backend.load_stored("s1")
    assert f" (raw log: {path})" in str(info.value)
    assert info.value.location == str(path)


def test_jsonl__keeps_a_non_object_header_line_a_corruption_not_a_format_refusal(
    tmp_path: Path,
) -> None:  # spec 8.6 #142
    backend = make(tmp_path)
    place(backend, b"42\n")
    with pytest.raises(SessionPersistenceCorruptionError, match="first line is not a session header"):
        backend.load_stored("s1")


def test_jsonl__names_a_foreign_version_header_by_its_stringified_non_string_id(
    tmp_path: Path,
) -> None:  # spec 8.6 #143
    backend = make(tmp_path)
    place(backend, text({"type": "session", "version": 42, "id": 123}))
    with pytest.raises(SessionFormatUnsupportedError, match='session "123" uses log format v42'):
        backend.load_stored("s1")


def test_jsonl__points_a_format_refusal_at_the_raw_log_path(tmp_path: Path) -> None:  # spec 8.6 #144
    backend = make(tmp_path)
    backend.append_batch({**META, "version": 7}, [ev("turn/start", 0)], False)
    path = path_of(backend)
    with pytest.raises(SessionFormatUnsupportedError, match=r"v7, but this harness reads only v0") as info:
        backend.load_stored("s1")
    assert str(info.value).endswith(f" (raw log: {path})")
    older = make(tmp_path / "older")
    older.append_batch({**META, "version": -1}, [ev("turn/start", 0)], False)
    with pytest.raises(SessionFormatUnsupportedError, match="older than the supported v0"):
        older.load_stored("s1")


# --- durability and crash semantics (§8.6 #145-#170) ------------------------------------------------------


def test_jsonl__lazy_materialization_writes_nothing_until_the_first_append(tmp_path: Path) -> None:  # spec 8.6 #145
    backend = make(tmp_path)
    location = path_of(backend)
    assert location.is_absolute()
    assert not (tmp_path / "root").exists()
    assert backend.load_stored("s1") is None and backend.list_sessions() == []
    backend.append_batch(META, [], False)  # an empty batch stays lazy
    assert not (tmp_path / "root").exists()
    backend.append_batch(META, [ev("turn/start", 0)], False)
    assert location.is_file()
    assert [listing.id for listing in backend.list_sessions()] == ["s1"]


def test_jsonl__read_raw_returns_the_stored_artifact_text_verbatim(tmp_path: Path) -> None:  # spec 8.6 #146
    backend = make(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    raw = backend.read_raw("s1")
    assert raw is not None
    assert raw.filename == "session.jsonl"
    assert raw.content == path_of(backend).read_text()
    assert raw.content.split("\n")[0] == HEADER.decode()
    assert raw.meta == {"version": 0, "id": "s1", "createdAt": 1000, "cwd": CWD, "delegationDepth": 0}


def test_jsonl__read_raw_is_none_for_an_absent_session(tmp_path: Path) -> None:  # spec 8.6 #147
    assert make(tmp_path).read_raw("nope") is None


def test_jsonl__read_raw_rejects_a_corrupt_header_line(tmp_path: Path) -> None:  # spec 8.6 #148
    backend = make(tmp_path)
    place(backend, b'{"type":"session",\n')
    with pytest.raises(SessionPersistenceCorruptionError, match="corrupt session log"):
        backend.read_raw("s1")


def test_jsonl__read_raw_retries_when_the_file_revision_changes_during_the_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # spec 8.6 #149
    backend = make(tmp_path)
    backend.append_batch(META, open_turn(), False)
    path = path_of(backend)
    extra = dumps(ev("step/end", 8, {"turn": 1, "step": 1})) + b"\n"

    def concurrent_append() -> None:
        with open(path, "ab") as handle:
            handle.write(extra)

    calls = stat_spy(monkeypatch, path, {3: concurrent_append})  # discovery, before, after(changed) ...
    raw = backend.read_raw("s1")
    assert raw is not None and raw.content.endswith(extra.decode())
    assert len(calls) == 5  # one discovery stat + two stable-read attempts of two stats each


def test_jsonl__keeps_the_same_location_on_resume_and_gives_a_fork_its_own(tmp_path: Path) -> None:  # spec 8.6 #150
    backend = make(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    resumed = make(tmp_path)
    assert resumed.locate(META) == backend.locate(META)
    fork = {**META, "id": "s1-fork", "parentSession": "s1", "seedLength": 10}
    assert resumed.locate(fork) != backend.locate(META)
    resumed.append_batch(fork, closed_turn(), False)
    assert path_of(backend).read_bytes().startswith(HEADER)  # the parent's log is untouched


def test_jsonl__round_trip_is_byte_identical(tmp_path: Path) -> None:  # spec 8.6 #151
    backend = make(tmp_path)
    events = [
        ev("turn/start", 0, {"turn": 1}),
        chunk(1, "a"),
        chunk(2, "b"),  # a run of two stays verbatim
        ev(
            "assistant/message", 3, {"text": "ab", "n": 1.5, "u": "é\u2028"}, sourceEventSeqs=[1, 2], surfaceOp="append"
        ),
    ]
    backend.append_batch(META, events, False)
    assert path_of(backend).read_bytes() == HEADER + b"\n" + b"".join(dumps(e) + b"\n" for e in events)
    stored = backend.load_stored("s1")
    assert stored is not None and stored.events == events and stored.torn_marker is None
    assert [dumps(e) for e in stored.events] == [dumps(e) for e in events]


def test_jsonl__source_qualifies_revisions_across_roots_and_keeps_reopen_identity(
    tmp_path: Path,
) -> None:  # spec 8.6 #152
    first = make(tmp_path)
    first.append_batch(META, closed_turn(), False)
    reopened = make(tmp_path)
    assert reopened.read_revision("s1") == first.read_revision("s1")
    other = make(tmp_path / "other")
    place(other, path_of(first).read_bytes())
    assert other.read_revision("s1") != first.read_revision("s1")
    before = first.read_revision("s1")
    first.append_batch(META, [ev("turn/start", 10, {"turn": 2})], True)
    assert first.read_revision("s1") != before


def test_jsonl__binds_a_full_stored_prefix_to_the_same_revision_as_a_lightweight_read(
    tmp_path: Path,
) -> None:  # spec 8.6 #153
    backend = make(tmp_path)
    assert backend.read_revision("s1") is None
    backend.append_batch(META, closed_turn(), False)
    stored = backend.load_stored("s1")
    assert stored is not None and stored.revision == backend.read_revision("s1")
    st = os.stat(path_of(backend))
    assert stored.revision == f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def test_jsonl__retries_a_full_prefix_read_when_the_file_revision_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # spec 8.6 #154
    backend = make(tmp_path)
    backend.append_batch(META, open_turn(), False)
    path = path_of(backend)

    def concurrent_append() -> None:
        with open(path, "ab") as handle:
            handle.write(dumps(ev("step/end", 8, {"turn": 1, "step": 1})) + b"\n")

    calls = stat_spy(monkeypatch, path, {3: concurrent_append})
    stored = backend.load_stored("s1")
    monkeypatch.undo()
    assert stored is not None and seqs(stored.events) == list(range(9))
    assert len(calls) == 5
    assert stored.revision == backend.read_revision("s1")


def test_jsonl__handles_revision_stat_races_after_log_discovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # spec 8.6 #155 (the abort and invalid-path parts have no Python counterpart)
    backend = make(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    path = path_of(backend)
    stat_spy(monkeypatch, path, {2: path.unlink})  # removed between discovery and the revision stat
    assert backend.read_revision("s1") is None


def test_jsonl__omits_a_snapshot_artifact_removed_after_discovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # spec 8.6 #156
    backend = make(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    path = path_of(backend)
    opposite = path.parent / "session.jsonl.zstd"
    stat_spy(monkeypatch, opposite, {1: path.unlink})  # the encoding probe runs just before the open
    assert backend.list_sessions() == []


def test_jsonl__persists_a_forked_child_seed_header(tmp_path: Path) -> None:  # spec 8.6 #162
    backend = make(tmp_path)
    fork = {"version": 0, "id": "child", "createdAt": 2000, "cwd": CWD, "parentSession": "s1", "seedLength": 3}
    seed = [ev("turn/start", 0, {"turn": 1}), user(1), ev("turn/end", 2, {"turn": 1}), ev("session/end-seed", 3)]
    backend.append_batch(fork, seed, False)
    first_line = path_of(backend, fork).read_bytes().split(b"\n")[0]
    assert first_line == (
        b'{"type":"session","version":0,"id":"child","createdAt":2000,"cwd":"/home/me/app",'
        b'"parentSession":"s1","seedLength":3,"delegationDepth":0}'
    )
    stored = backend.load_stored("child")
    assert stored is not None and stored.events == seed
    assert stored.meta["parentSession"] == "s1" and stored.meta["seedLength"] == 3


def test_jsonl__crash_recovery_preserves_the_interrupted_turn_and_closes_it(tmp_path: Path) -> None:  # spec 8.6 #163
    backend = make(tmp_path)
    backend.append_batch(META, open_turn(), False)
    path = path_of(backend)
    committed = path.stat().st_size
    with open(path, "ab") as handle:
        handle.write(b'{"type":"assistant/chunk","seq":8,"ti')  # the spec's raw torn-tail injector
    stored = backend.load_stored("s1")
    assert stored is not None
    assert seqs(stored.events) == list(range(8))
    assert stored.torn_marker == TornMarker(committed, [])
    backend.commit_repair(stored.meta, stored.torn_marker, closers(8))
    repaired = backend.load_stored("s1")
    assert repaired is not None and repaired.torn_marker is None
    assert seqs(repaired.events) == list(range(10))
    assert repaired.events[-1]["data"]["reason"] == {"kind": "interrupted"}
    backend.append_batch(META, [ev("turn/start", 10, {"turn": 2})], True)
    final = backend.load_stored("s1")
    assert final is not None and seqs(final.events) == list(range(11))


def test_jsonl__committed_events_are_never_rewritten_only_the_crash_tail(tmp_path: Path) -> None:  # spec 8.6 #164
    backend = make(tmp_path)
    backend.append_batch(META, open_turn(), False)
    path = path_of(backend)
    original = path.read_bytes()
    with open(path, "ab") as handle:
        handle.write(b'{"type":"assistant/chunk","seq":8,"ti')
    stored = backend.load_stored("s1")
    assert stored is not None
    backend.commit_repair(stored.meta, stored.torn_marker, closers(8))
    repaired = path.read_bytes()
    assert repaired.startswith(original)
    assert repaired[len(original) :] == b"".join(dumps(e) + b"\n" for e in closers(8))


def test_jsonl__a_failed_append_truncates_partial_bytes_so_a_retry_has_no_seq_gap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # spec 8.6 #165
    backend = make(tmp_path)
    backend.append_batch(META, open_turn(), False)
    path = path_of(backend)
    before = path.read_bytes()
    fail_fsync(monkeypatch, lambda n: n == 1)  # the append's fsync fails; the rollback's succeeds
    with pytest.raises(StorageAccessError, match="injected fsync failure"):
        backend.append_batch(META, closers(8), True)
    assert path.read_bytes() == before
    monkeypatch.undo()
    backend.append_batch(META, closers(8), True)
    stored = backend.load_stored("s1")
    assert stored is not None and seqs(stored.events) == list(range(10))


def test_jsonl__reports_both_the_append_failure_and_a_failed_rollback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # spec 8.6 #166
    backend = make(tmp_path)
    backend.append_batch(META, open_turn(), False)
    path = path_of(backend)
    fail_fsync(monkeypatch, lambda n: True)
    with pytest.raises(AppendRollbackError, match=f'failed to roll back append to "{path}"') as info:
        backend.append_batch(META, closers(8), True)
    assert isinstance(info.value, PersistenceError)
    assert len(info.value.errors) == 2
    assert all(isinstance(err, OSError) for err in info.value.errors)
    assert "injected fsync failure" in str(info.value)


def test_jsonl__load_returns_fresh_meta_and_events_without_backend_pathing(tmp_path: Path) -> None:  # spec 8.6 #167
    backend = make(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    stored = backend.load_stored("s1")
    assert stored is not None
    assert set(stored.meta) == {"version", "id", "createdAt", "cwd", "delegationDepth"}
    stored.meta["cwd"] = "/elsewhere"
    stored.events[0]["data"]["turn"] = 99
    again = backend.load_stored("s1")
    assert again is not None and again.meta["cwd"] == CWD and again.events[0]["data"]["turn"] == 1
    backend.append_batch(META, [ev("turn/start", 10, {"turn": 2})], True)
    assert path_of(backend).read_bytes().endswith(dumps(ev("turn/start", 10, {"turn": 2})) + b"\n")


def test_jsonl__rejects_a_mismatched_header_before_repairing_either_log(tmp_path: Path) -> None:  # spec 8.6 #168
    backend = make(tmp_path)
    b_meta = {**META, "id": "identity-b"}
    backend.append_batch(b_meta, open_turn(), False)
    b_path = path_of(backend, b_meta)
    a_path = place(backend, b_path.read_bytes() + b'{"type":"assistant/chunk","seq":8,"ti', session_id="identity-a")
    snapshot = (a_path.read_bytes(), b_path.read_bytes())
    with pytest.raises(
        SessionPersistenceCorruptionError, match='requested id "identity-a" does not match header id "identity-b"'
    ):
        backend.load_stored("identity-a")
    assert (a_path.read_bytes(), b_path.read_bytes()) == snapshot


@pytest.mark.parametrize("session_id", ["../../etc", "/abs", "a\x00b", ".", "..", "a/../../b", "~", "\\x"])
def test_jsonl__path_traversal_session_ids_are_neutralized(tmp_path: Path, session_id: str) -> None:  # spec 8.6 #170
    backend = make(tmp_path)
    meta = {**META, "id": session_id}
    backend.append_batch(meta, closed_turn(), False)
    root = (tmp_path / "root").resolve()
    location = Path(backend.locate(meta) or "")
    assert location.resolve().is_relative_to(root)
    assert location.parent.parent.parent == root  # exactly <root>/<project>/<segment>/
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]  # nothing written beside the root
    stored = backend.load_stored(session_id)
    assert stored is not None and stored.meta["id"] == session_id
    assert [listing.id for listing in backend.list_sessions()] == [session_id]


def test_jsonl__concurrent_sessions_do_not_cross_buffers(tmp_path: Path) -> None:  # spec 8.6 #171
    backend = make(tmp_path)
    ids = [f"s{i}" for i in range(6)]

    def writer(session_id: str) -> None:
        meta = {**META, "id": session_id}
        backend.append_batch(meta, open_turn(), False)
        for turn in range(2, 6):
            backend.append_batch(meta, closed_turn(turn, (turn - 1) * 10 - 2)[:10], True)

    threads = [threading.Thread(target=writer, args=(sid,)) for sid in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for session_id in ids:
        stored = backend.load_stored(session_id)
        assert stored is not None and stored.meta["id"] == session_id
        assert seqs(stored.events) == list(range(48))


# --- scanLog unit (§8.6 #172-#190) -----------------------------------------------------------------------


def test_jsonl__scanlog_requires_exactly_one_newline_terminated_header_record() -> None:  # spec 8.6 #172
    for bad in (b"", HEADER, HEADER + b"\n" + HEADER + b"\n"):
        with pytest.raises(SessionPersistenceCorruptionError, match="header-less"):
            SessionLogScanner(bad)
    with pytest.raises(SessionPersistenceCorruptionError, match="header-less"):
        scan_log(HEADER)


def test_jsonl__scanlog_handles_empty_writes_boundary_newlines_torn_fragments_and_completion() -> None:  # spec 8.6 #173
    scanner = SessionLogScanner(HEADER + b"\n")
    line = dumps(ev("turn/start", 0, {"turn": 1}))
    scanner.write(b"")
    scanner.write(line)
    assert scanner.checkpoint().committed_bytes == len(HEADER) + 1
    scanner.write(b"\n")
    scanner.write(b'{"type":"turn/')  # torn fragment
    result = scanner.finish()
    assert result.committed_bytes == len(HEADER) + 1 + len(line) + 1
    assert seqs(result.events) == [0]
    with pytest.raises(RuntimeError, match="finished"):
        scanner.write(b"x")


def test_jsonl__scanlog_keeps_scanning_after_a_tolerable_corrupt_suffix_until_a_turn_end(
    tmp_path: Path,
) -> None:  # spec 8.6 #174
    base = HEADER + b"\n" + dumps(ev("turn/start", 0)) + b"\n"
    result = scan_log(base + b"{corrupt\n" + b'{"type":"step/st')  # the defect is the last complete line
    assert seqs(result.events) == [0] and result.committed_bytes == len(base)
    # Issue 7 (13): a complete record after the defect makes it damage inside the committed log.
    with pytest.raises(SessionPersistenceCorruptionError, match="a complete record follows it at line 3") as info:
        scan_log(base + b"{corrupt\n" + dumps(ev("step/start", 2)) + b"\n")
    assert info.value.offset == len(base)
    gap_row_with_turn_end = dumps(ev("turn/end", 5)) + b"\n"
    with pytest.raises(SessionPersistenceCorruptionError, match="seq gap in committed region at line 2"):
        scan_log(base + gap_row_with_turn_end)


def test_jsonl__scanlog_incrementally_scans_records_split_across_reusable_chunks() -> None:  # spec 8.6 #175
    scanner = SessionLogScanner(HEADER + b"\n")
    line = dumps(ev("user/message", 0, {"text": "héllo 😀"})) + b"\n"
    cut = line.index("😀".encode()) + 2  # inside the 4-byte UTF-8 sequence
    buffer = bytearray(line[:cut])
    scanner.write(buffer)
    buffer[:] = b"\xff" * len(buffer)  # the caller reuses its buffer
    scanner.write(memoryview(line[cut:]))
    checkpoint = scanner.checkpoint()
    assert checkpoint.input_bytes == len(HEADER) + 1 + len(line)
    assert checkpoint.committed_bytes == checkpoint.input_bytes
    assert checkpoint.event_count == 1
    assert scanner.finish().events[0]["data"]["text"] == "héllo 😀"


def test_jsonl__scanlog_rejects_a_header_less_or_empty_log(tmp_path: Path) -> None:  # spec 8.6 #176
    for content in (b"", b"\n"[:0], b'{"type":"session"'):
        with pytest.raises(SessionPersistenceCorruptionError, match="empty or header-less session log"):
            scan_log(content)
    backend = make(tmp_path)
    place(backend, b"")
    with pytest.raises(SessionPersistenceCorruptionError, match="empty or header-less session log"):
        backend.load_stored("s1")


def test_jsonl__scanlog_rejects_a_corrupt_header_line() -> None:  # spec 8.6 #177
    with pytest.raises(SessionPersistenceCorruptionError, match="header line is not valid JSON"):
        scan_log(b'{"type":"session",\n')


def test_jsonl__scanlog_rejects_a_non_session_first_line() -> None:  # spec 8.6 #178
    with pytest.raises(SessionPersistenceCorruptionError, match="first line is not a session header"):
        scan_log(dumps(ev("turn/start", 0)) + b"\n")


@pytest.mark.parametrize("created_at", [b"1.5", b"-1", b"9007199254740992", b'"1000"', b"true"])
def test_jsonl__scanlog_rejects_a_header_with_an_invalid_created_at(created_at: bytes) -> None:  # spec 8.6 #179
    line = b'{"type":"session","version":0,"id":"s1","createdAt":' + created_at + b',"delegationDepth":0}\n'
    with pytest.raises(SessionPersistenceCorruptionError, match="first line is not a session header"):
        scan_log(line)


@pytest.mark.parametrize("zero", [b"-0", b"-0.0"])
def test_jsonl__scanlog_rejects_a_header_with_negative_zero_created_at(zero: bytes) -> None:  # spec 8.6 #180
    line = b'{"type":"session","version":0,"id":"s1","createdAt":' + zero + b',"delegationDepth":0}\n'
    with pytest.raises(SessionPersistenceCorruptionError, match="first line is not a session header"):
        scan_log(line)
    assert scan_log(line.replace(zero, b"0")).meta["createdAt"] == 0


@pytest.mark.parametrize("depth", [None, b'"1"', b"1.5", b"-1"])
def test_jsonl__scanlog_rejects_a_header_with_an_invalid_delegation_depth(depth: bytes | None) -> None:  # spec 8.6 #181
    tail = b"" if depth is None else b',"delegationDepth":' + depth
    line = b'{"type":"session","version":0,"id":"s1","createdAt":1000' + tail + b"}\n"
    with pytest.raises(SessionPersistenceCorruptionError, match="first line is not a session header"):
        scan_log(line)


def test_jsonl__scanlog_rejects_a_header_with_negative_zero_delegation_depth() -> None:  # spec 8.6 #182
    line = b'{"type":"session","version":0,"id":"s1","createdAt":1000,"delegationDepth":-0}\n'
    with pytest.raises(SessionPersistenceCorruptionError, match="first line is not a session header"):
        scan_log(line)


def test_jsonl__round_trips_the_agent_preset_a_session_was_composed_from(tmp_path: Path) -> None:  # spec 8.6 #183
    backend = make(tmp_path)
    meta = {**META, "origin": "subagent", "delegationDepth": 2, "agentPreset": "reviewer"}
    backend.append_batch(meta, closed_turn(), False)
    stored = backend.load_stored("s1")
    assert stored is not None
    assert stored.meta == {
        "version": 0,
        "id": "s1",
        "createdAt": 1000,
        "cwd": CWD,
        "origin": "subagent",
        "delegationDepth": 2,
        "agentPreset": "reviewer",
    }
    assert list(stored.meta) == ["version", "id", "createdAt", "cwd", "origin", "delegationDepth", "agentPreset"]


def test_jsonl__scanlog_rejects_a_header_whose_agent_preset_is_not_a_string() -> None:  # spec 8.6 #184
    with pytest.raises(SessionPersistenceCorruptionError, match="first line is not a session header"):
        scan_log(dumps(header(agentPreset=7)) + b"\n")


def test_jsonl__scanlog_a_seq_gap_after_the_last_turn_end_bounds_the_preserved_tail() -> None:  # spec 8.6 #185
    kept = HEADER + b"\n" + dumps(ev("turn/end", 0)) + b"\n"
    result = scan_log(kept + dumps(ev("turn/start", 5)) + b"\n" + b'{"type":"tur')
    assert seqs(result.events) == [0]
    assert result.committed_bytes == len(kept)


def test_jsonl__scanlog_rejects_gap_before_committed_turn_end() -> None:  # spec 8.6 #186
    content = text(HEADER, ev("turn/start", 0), ev("step/start", 2), ev("step/end", 3), ev("turn/end", 4))
    with pytest.raises(
        SessionPersistenceCorruptionError, match=r"seq gap in committed region at line 2 \(expected 1, got 2\)"
    ):
        scan_log(content)


def test_jsonl__scanlog_rejects_a_corrupt_line_before_a_committed_turn_end() -> None:  # spec 8.6 #187
    content = text(HEADER, ev("turn/start", 0), b"{not json", ev("step/start", 1), ev("turn/end", 2))
    with pytest.raises(SessionPersistenceCorruptionError, match="unparsable committed event at line 2") as info:
        scan_log(content)
    assert info.value.offset == len(HEADER) + 1 + len(dumps(ev("turn/start", 0))) + 1


def test_jsonl__scanlog_a_header_only_log_preserves_nothing() -> None:  # spec 8.6 #188
    result = scan_log(HEADER + b"\n")
    assert result.events == [] and result.committed_bytes == len(HEADER) + 1
    assert result.meta["id"] == "s1"


def test_jsonl__scanlog_a_corrupt_line_after_the_last_turn_end_bounds_the_preserved_tail() -> None:  # spec 8.6 #189
    kept = text(HEADER, ev("turn/start", 0), ev("turn/end", 1))
    result = scan_log(kept + b"{oops\n")
    assert seqs(result.events) == [0, 1] and result.committed_bytes == len(kept)
    with pytest.raises(SessionPersistenceCorruptionError, match="not a torn tail"):  # issue 7 (13)
        scan_log(kept + b"{oops\n" + dumps(ev("turn/start", 2)) + b"\n")


def test_jsonl__scanlog_tolerates_a_seq_gap_after_a_turn_end() -> None:  # spec 8.6 #190
    kept = text(HEADER, ev("turn/start", 0), ev("turn/end", 1))
    result = scan_log(kept + text(ev("turn/start", 3)))
    assert seqs(result.events) == [0, 1] and result.committed_bytes == len(kept)
    with pytest.raises(SessionPersistenceCorruptionError, match=r"seq gap .*not a torn tail"):  # issue 7 (13)
        scan_log(kept + text(ev("turn/start", 3), ev("user/message", 4)))


# --- default packed chunk rows (§8.6 #191-#197) -----------------------------------------------------------


def streamed_turn(first: int = 0, turn: int = 1, deltas: int = 5) -> list[dict[str, Any]]:
    s = first
    events = [ev("turn/start", s, {"turn": turn}), ev("step/start", s + 1, {"turn": turn, "step": 1})]
    events += [chunk(s + 2 + k, f"t{k} ", turn) for k in range(deltas)]
    n = s + 2 + deltas
    events += [
        ev("assistant/message", n, {"turn": turn, "step": 1, "text": "..."}, surfaceOp="append"),
        ev("step/end", n + 1, {"turn": turn, "step": 1}),
        ev("turn/end", n + 2, {"turn": turn, "reason": {"kind": "completed"}}),
    ]
    return events


def line_tags(path: Path) -> list[str]:
    return [loads(line)["type"] for line in path.read_bytes().split(b"\n")[1:-1]]


def test_jsonl__writes_a_delta_run_as_one_text_chunks_row_by_default(tmp_path: Path) -> None:  # spec 8.6 #191
    backend = make(tmp_path)
    events = streamed_turn()
    backend.append_batch(META, events, False)
    assert line_tags(path_of(backend)) == [
        "turn/start",
        "step/start",
        "text-chunks",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    row = loads(path_of(backend).read_bytes().split(b"\n")[3])
    assert row == {
        "type": "text-chunks",
        "seq0": 2,
        "time0": 1002,
        "data": {"turn": 1, "step": 1, "index": 0, "dt": [1, 1, 1, 1], "texts": ["t0 ", "t1 ", "t2 ", "t3 ", "t4 "]},
    }
    stored = backend.load_stored("s1")
    assert stored is not None and stored.events == events


def test_jsonl__pack_chunks_false_writes_one_event_per_line(tmp_path: Path) -> None:  # spec 8.6 #192
    backend = make(tmp_path, pack_chunks=False)
    events = streamed_turn()
    backend.append_batch(META, events, False)
    assert line_tags(path_of(backend)) == [e["type"] for e in events]
    stored = make(tmp_path).load_stored("s1")  # reading always decodes rows, whatever the write switch
    assert stored is not None and stored.events == events


def test_jsonl__loads_a_mixed_file_of_verbatim_lines_then_packed_appends(tmp_path: Path) -> None:  # spec 8.6 #193
    make(tmp_path, pack_chunks=False).append_batch(META, streamed_turn(), False)
    packed = make(tmp_path)
    second = streamed_turn(first=10, turn=2)
    packed.append_batch(META, second, True)
    assert line_tags(path_of(packed)).count("text-chunks") == 1
    stored = packed.load_stored("s1")
    assert stored is not None and stored.events == streamed_turn() + second


def test_jsonl__scanlog_a_packed_row_advances_the_seq_cursor_by_its_whole_run() -> None:  # spec 8.6 #194
    row = {
        "type": "text-chunks",
        "seq0": 1,
        "time0": 1001,
        "data": {"turn": 1, "step": 1, "index": 0, "dt": [1, 1], "texts": ["a", "b", "c"]},
    }
    result = scan_log(text(HEADER, ev("turn/start", 0), row, ev("turn/end", 4)))
    assert seqs(result.events) == [0, 1, 2, 3, 4]
    assert [e["data"]["chunk"]["text"] for e in result.events[1:4]] == ["a", "b", "c"]


def test_jsonl__scanlog_a_malformed_packed_row_in_the_committed_region_rejects(tmp_path: Path) -> None:  # spec 8.6 #195
    row = {
        "type": "text-chunks",
        "seq0": 1,
        "time0": 1001,
        "data": {"turn": 1, "step": 1, "index": 0, "dt": [1], "texts": ["a", "b", "c"]},
    }
    with pytest.raises(SessionPersistenceCorruptionError, match="unparsable committed event at line 2"):
        scan_log(text(HEADER, ev("turn/start", 0), row, ev("turn/end", 4)))


def test_jsonl__scanlog_a_packed_row_with_a_seq_gap_after_the_last_turn_end_drops_the_whole_row() -> (
    None
):  # spec 8.6 #196
    kept = text(HEADER, ev("turn/start", 0), ev("turn/end", 1))
    row = {
        "type": "text-chunks",
        "seq0": 4,
        "time0": 1004,
        "data": {"turn": 1, "step": 1, "index": 0, "dt": [1, 1], "texts": ["a", "b", "c"]},
    }
    result = scan_log(kept + text(ev("turn/start", 2), row) + b'{"type":"turn/st')
    assert seqs(result.events) == [0, 1, 2]
    assert result.committed_bytes == len(kept) + len(dumps(ev("turn/start", 2))) + 1


def test_jsonl__unpacked_event_lines_are_byte_identical_to_the_pre_packing_layout(
    tmp_path: Path,
) -> None:  # spec 8.6 #197
    backend = make(tmp_path, pack_chunks=False)
    events = streamed_turn()
    backend.append_batch(META, events, False)
    assert path_of(backend).read_bytes() == HEADER + b"\n" + b"\n".join(dumps(e) for e in events) + b"\n"


# --- listing and discovery edge cases (§8.6 #200-#225) ---------------------------------------------------


def test_jsonl__list_discovers_sessions_across_multiple_project_directories(tmp_path: Path) -> None:  # spec 8.6 #200
    backend = make(tmp_path)
    backend.append_batch({**META, "id": "a", "cwd": "/p/one"}, closed_turn(), False)
    backend.append_batch({**META, "id": "b", "cwd": "/p/two"}, closed_turn(), False)
    no_cwd = {"version": 0, "id": "c", "createdAt": 5}
    backend.append_batch(no_cwd, closed_turn(), False)
    listings = backend.list_sessions()
    assert [(item.id, item.ok) for item in listings] == [("a", True), ("b", True), ("c", True)]
    assert listings[2].header == {"version": 0, "id": "c", "createdAt": 5, "delegationDepth": 0}
    assert Path(listings[2].location or "").parent.parent.name == "_no-cwd"
    assert all(item.revision == backend.read_revision(item.id) for item in listings)


def test_jsonl__groups_sessions_whose_cwd_paths_normalize_to_the_same_project_directory(
    tmp_path: Path,
) -> None:  # spec 8.6 #201
    backend = make(tmp_path)
    backend.append_batch({**META, "id": "x", "cwd": "/a/b-c"}, closed_turn(), False)
    backend.append_batch({**META, "id": "y", "cwd": "/a-b/c"}, closed_turn(), False)
    assert [p.name for p in (tmp_path / "root").iterdir()] == ["--a-b-c--"]
    listings = backend.list_sessions()
    assert [(item.id, item.header and item.header["cwd"]) for item in listings] == [("x", "/a/b-c"), ("y", "/a-b/c")]


def test_jsonl__list_on_an_empty_root_returns_nothing(tmp_path: Path) -> None:  # spec 8.6 #202
    (tmp_path / "root").mkdir()
    assert make(tmp_path).list_sessions() == []


def test_jsonl__keeps_the_transcript_in_an_extensible_session_owned_directory(tmp_path: Path) -> None:  # spec 8.6 #203
    backend = make(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    session_dir = path_of(backend).parent
    (session_dir / "notes.txt").write_text("x")
    (session_dir / "attachments").mkdir()
    (session_dir / "session.jsonl.1a2b3c4d5e6f.tmp").write_text("stray temp")
    (session_dir.parent / "README").write_text("x")
    (session_dir.parent / "empty-dir").mkdir()
    assert [item.id for item in backend.list_sessions()] == ["s1"]
    stored = backend.load_stored("s1")
    assert stored is not None and len(stored.events) == 10


def test_jsonl__rejects_the_obsolete_flat_file_layout(tmp_path: Path) -> None:  # spec 8.6 #204
    backend = make(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    flat = path_of(backend).parent.parent / "old.jsonl"
    flat.write_bytes(HEADER + b"\n")
    with pytest.raises(PersistenceError, match="unsupported flat-file layout"):
        backend.list_sessions()
    with pytest.raises(PersistenceError, match="unsupported flat-file layout"):
        make(tmp_path).load_stored("s1")  # the root preflight walks every project directory


def test_jsonl__rejects_a_compressed_obsolete_flat_file_artifact_during_targeted_lookup(
    tmp_path: Path,
) -> None:  # spec 8.6 #205
    backend = JsonlBackend(tmp_path / "root", compression="zstd")
    assert backend.load_stored("s1") is None  # the cached root preflight saw an empty root
    project = tmp_path / "root" / project_key(CWD)
    project.mkdir(parents=True)
    (project / "s1.jsonl.zstd").write_bytes(b"")
    with pytest.raises(PersistenceError, match=r"s1\.jsonl\.zstd\" uses the unsupported flat-file layout"):
        backend.load_stored("s1")
    with pytest.raises(PersistenceError, match="unsupported flat-file layout"):
        backend.read_revision("s1")


def test_jsonl__list_reports_empty_and_non_header_session_logs(tmp_path: Path) -> None:  # spec 8.6 #206
    # The reference skips these silently; the Python contract reports them instead of hiding them.
    backend = make(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    place(backend, b"", session_id="empty")
    place(backend, dumps(ev("turn/start", 0)) + b"\n", session_id="no-header")
    place(backend, HEADER, session_id="unterminated")
    listings = {item.id: item for item in backend.list_sessions()}
    assert listings["s1"].ok
    for name in ("empty", "no-header", "unterminated"):
        assert listings[name].error_code == "SESSION_CORRUPT" and listings[name].header is None
    assert "first line is not a session header" in (listings["no-header"].error_message or "")
    assert "empty or header-less session log" in (listings["empty"].error_message or "")


def test_jsonl__list_reads_a_header_line_longer_than_the_8kb_read_chunk(tmp_path: Path) -> None:  # spec 8.6 #207
    backend = make(tmp_path)
    place(backend, text(header(pad="p" * 9000), ev("turn/start", 0)))
    (listing,) = backend.list_sessions()
    assert listing.ok and listing.header == {
        "version": 0,
        "id": "s1",
        "createdAt": 1000,
        "cwd": CWD,
        "delegationDepth": 0,
    }


@pytest.mark.parametrize("field", ["sandboxMode", "approvalPolicy"])
def test_jsonl__rejects_the_retired_policy_header_field(tmp_path: Path, field: str) -> None:  # spec 8.6 #208
    backend = make(tmp_path)
    place(backend, text(header(**{field: "x"}), ev("turn/start", 0)))
    with pytest.raises(SessionFormatUnsupportedError, match="retired policy baseline fields"):
        backend.load_stored("s1")
    (listing,) = backend.list_sessions()
    assert listing.error_code == "SESSION_FORMAT_UNSUPPORTED"
    assert "retired policy baseline fields" in (listing.error_message or "")


def test_jsonl__list_rejects_a_header_whose_cwd_does_not_identify_its_physical_log(
    tmp_path: Path,
) -> None:  # spec 8.6 #209
    backend = make(tmp_path)
    place(backend, text(header(cwd="/somewhere/else"), ev("turn/start", 0)))
    (listing,) = backend.list_sessions()
    assert listing.error_code == "SESSION_CORRUPT" and "and cwd identify" in (listing.error_message or "")
    assert listing.header is not None and listing.header["cwd"] == "/somewhere/else"
    with pytest.raises(SessionPersistenceCorruptionError, match="and cwd identify"):
        backend.load_stored("s1")


def test_jsonl__accepts_an_alternate_project_path_only_when_it_identifies_the_same_log(
    tmp_path: Path,
) -> None:  # spec 8.6 #210
    backend = make(tmp_path)
    real = place(backend, text(header(cwd="/alias/proj"), ev("turn/start", 0)), cwd="/real/proj")
    (tmp_path / "root" / project_key("/alias/proj")).symlink_to(real.parent.parent.name)
    stored = backend.load_stored("s1")
    assert stored is not None and stored.meta["cwd"] == "/alias/proj"
    (listing,) = backend.list_sessions()  # the symlinked alias directory itself is not traversed
    assert listing.ok and listing.location == str(real)


def test_jsonl__list_rejects_a_session_header_whose_id_cannot_name_a_storage_path(
    tmp_path: Path,
) -> None:  # spec 8.6 #211
    backend = make(tmp_path)
    place(backend, text(header(id=""), ev("turn/start", 0)), session_id="x")
    (listing,) = backend.list_sessions()
    assert listing.error_code == "SESSION_CORRUPT"
    assert "header id cannot name a storage path" in (listing.error_message or "")


def test_jsonl__load_and_list_reject_one_id_materialized_in_multiple_project_directories(
    tmp_path: Path,
) -> None:  # spec 8.6 #212
    backend = make(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    backend.append_batch({**META, "cwd": "/other"}, closed_turn(), False)
    with pytest.raises(
        PersistenceError, match='duplicate JSONL session id "s1" appears in multiple project directories'
    ):
        backend.load_stored("s1")
    with pytest.raises(PersistenceError, match="duplicate JSONL session id"):
        backend.list_sessions()


def test_jsonl__list_returns_nothing_when_the_root_does_not_exist(tmp_path: Path) -> None:  # spec 8.6 #217
    backend = make(tmp_path)
    assert backend.list_sessions() == [] and backend.load_stored("s1") is None and backend.read_revision("s1") is None


def test_jsonl__construction_rejects_an_existing_root_that_is_not_a_directory(tmp_path: Path) -> None:  # spec 8.6 #218
    (tmp_path / "root").write_text("file")
    with pytest.raises(StorageAccessError) as info:  # issue 7 (18): typed, not a bare OSError
        make(tmp_path)
    assert info.value.code == "STORAGE_NOT_A_DIRECTORY" and info.value.path == str(tmp_path / "root")


def test_jsonl__list_surfaces_a_root_that_becomes_unusable_after_construction(tmp_path: Path) -> None:  # spec 8.6 #219
    backend = make(tmp_path)
    (tmp_path / "root").write_text("file")
    with pytest.raises(StorageAccessError) as info:
        backend.list_sessions()
    assert info.value.code == "STORAGE_NOT_A_DIRECTORY"


def test_jsonl__per_id_lookup_surfaces_non_enoent_storage_errors(tmp_path: Path) -> None:  # spec 8.6 #220
    backend = make(tmp_path)
    session_dir = path_of(backend).parent
    session_dir.parent.mkdir(parents=True)
    session_dir.write_text("a file where the session directory belongs")
    with pytest.raises(StorageAccessError) as info:
        backend.load_stored("s1")
    assert info.value.code == "STORAGE_NOT_A_DIRECTORY" and info.value.path == str(session_dir)


def test_jsonl__materialization_surfaces_a_project_directory_storage_fault(tmp_path: Path) -> None:  # spec 8.6 #221
    backend = make(tmp_path)
    project = path_of(backend).parent.parent
    project.parent.mkdir(parents=True)
    project.write_text("a file where the project directory belongs")
    with pytest.raises(StorageAccessError) as info:
        backend.append_batch(META, closed_turn(), False)
    assert info.value.code == "STORAGE_NOT_A_DIRECTORY" and info.value.path == str(project)


def test_jsonl__a_fresh_instance_adopts_a_disk_only_session_and_repairs_its_crash_tail(
    tmp_path: Path,
) -> None:  # spec 8.6 #222
    make(tmp_path).append_batch(META, open_turn()[:6], False)
    path = path_of(make(tmp_path))
    with open(path, "ab") as handle:
        handle.write(b'{"type":"assistant/chunk","seq":6,"ti')
    fresh = make(tmp_path)
    stored = fresh.load_stored("s1")
    assert stored is not None and seqs(stored.events) == list(range(6))
    fresh.commit_repair(stored.meta, stored.torn_marker, closers(6))
    final = fresh.load_stored("s1")
    assert final is not None and seqs(final.events) == list(range(8)) and final.torn_marker is None


def test_jsonl__an_open_turn_without_turn_end_is_preserved_on_load(tmp_path: Path) -> None:  # spec 8.6 #223
    backend = make(tmp_path)
    place(backend, text(HEADER, ev("turn/start", 0, {"turn": 1}), ev("step/start", 1, {"turn": 1, "step": 1})))
    stored = backend.load_stored("s1")
    assert stored is not None and seqs(stored.events) == [0, 1] and stored.torn_marker is None


def test_jsonl__lookup_finds_an_id_stored_under_a_different_project_directory(tmp_path: Path) -> None:  # spec 8.6 #224
    backend = make(tmp_path)
    backend.append_batch({**META, "cwd": "/other/project"}, closed_turn(), False)
    stored = backend.load_stored("s1")  # ids are unique per root, whatever cwd the caller has in mind
    assert stored is not None and stored.meta["cwd"] == "/other/project"


def test_jsonl__a_failed_materialization_leaves_nothing_and_can_be_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # spec 8.6 #225
    backend = make(tmp_path)
    fail_fsync(monkeypatch, lambda n: True, files_only=True)  # the temp file's fsync fails
    with pytest.raises(StorageAccessError, match="injected"):
        backend.append_batch(META, closed_turn(), False)
    monkeypatch.undo()
    session_dir = path_of(backend).parent
    assert list(session_dir.iterdir()) == []  # neither the log nor the temp file
    backend.append_batch(META, closed_turn(), False)
    stored = backend.load_stored("s1")
    assert stored is not None and seqs(stored.events) == list(range(10))


# --- beyond the checklist ----------------------------------------------------------------------------------


def test_jsonl__materialization_refuses_an_existing_log(tmp_path: Path) -> None:
    backend = make(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    before = path_of(backend).read_bytes()
    with pytest.raises(PersistenceError, match='refusing to materialize "s1": a log already exists on disk'):
        make(tmp_path).append_batch(META, closed_turn(), False)
    assert path_of(backend).read_bytes() == before
    assert sorted(p.name for p in path_of(backend).parent.iterdir()) == ["session.jsonl"]


def test_jsonl__publishes_the_first_batch_with_owner_only_permissions(tmp_path: Path) -> None:
    backend = make(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    path = path_of(backend)
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


def test_jsonl__appending_to_a_vanished_log_is_refused_instead_of_creating_a_headerless_file(tmp_path: Path) -> None:
    backend = make(tmp_path)
    with pytest.raises(PersistenceError, match="no stored log to append to"):
        backend.append_batch(META, closed_turn(), True)
    assert not (tmp_path / "root").exists()


def test_jsonl__refuses_a_relative_or_empty_cwd_before_any_io(tmp_path: Path) -> None:
    backend = make(tmp_path)
    for cwd in ("relative/dir", ""):
        with pytest.raises(PersistenceError, match="absolute path"):
            backend.append_batch({**META, "cwd": cwd}, closed_turn(), False)
        with pytest.raises(PersistenceError, match="absolute path"):
            backend.locate({**META, "cwd": cwd})
    assert not (tmp_path / "root").exists()


def test_jsonl__a_second_writer_lock_on_the_same_session_is_refused(tmp_path: Path) -> None:
    first = make(tmp_path)
    second = make(tmp_path)
    lock = first.lock_writer(META)
    with pytest.raises(SessionLockedError, match='session "s1" is already open for writing') as info:
        second.lock_writer(META)
    assert info.value.code == "SESSION_LOCKED"
    with pytest.raises(SessionLockedError):
        first.lock_writer(META)  # even the same instance: locks belong to open file descriptions
    other = second.lock_writer({**META, "id": "s2"})  # other sessions are independent
    lock.release()
    lock.release()  # idempotent
    again = second.lock_writer(META)
    again.release()
    other.release()
    assert sorted(p.name for p in (tmp_path / "root" / ".locks").iterdir()) == ["s1.lock", "s2.lock"]
    assert second.list_sessions() == []  # the lock directory is never taken for a project


def test_jsonl__a_20000_deep_event_value_round_trips(tmp_path: Path) -> None:
    backend = make(tmp_path)
    deep: Any = "leaf"
    for _ in range(20_000):
        deep = [deep]
    event = ev("tool/result", 0, {"value": deep})
    backend.append_batch(META, [event], False)
    stored = backend.load_stored("s1")
    assert stored is not None
    assert dumps(stored.events[0]) == dumps(event)


def test_jsonl__a_line_nested_beyond_max_depth_is_a_typed_corruption_even_in_the_tail(tmp_path: Path) -> None:
    backend = make(tmp_path, max_depth=1500)
    deep: Any = 0
    for _ in range(2000):
        deep = [deep]
    place(backend, text(HEADER, ev("turn/end", 0), ev("user/message", 1, deep)))
    before = path_of(backend).read_bytes()
    with pytest.raises(SessionPersistenceCorruptionError, match="nests deeper than 1500 levels") as info:
        backend.load_stored("s1")
    assert "max_depth" in str(info.value)
    assert path_of(backend).read_bytes() == before


def test_jsonl__a_line_longer_than_max_line_bytes_is_a_typed_corruption(tmp_path: Path) -> None:
    backend = make(tmp_path, max_line_bytes=300)
    place(backend, text(HEADER, ev("user/message", 0, {"text": "x" * 400}), ev("turn/end", 1)))
    with pytest.raises(SessionPersistenceCorruptionError, match="line limit") as info:
        backend.load_stored("s1")
    assert info.value.offset == len(HEADER) + 1


def test_jsonl__truncating_the_last_line_at_every_offset_loads_the_committed_prefix(tmp_path: Path) -> None:
    backend = make(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    tail = [*streamed_turn(first=10, turn=2)[:1], user(11, "ünïcode text to cut")]
    backend.append_batch(META, tail, True)
    path = path_of(backend)
    full = path.read_bytes()
    last_start = full.rindex(b"\n", 0, len(full) - 1) + 1
    for size in range(len(full) - 1, last_start - 1, -1):
        os.truncate(path, size)
        stored = backend.load_stored("s1")
        assert stored is not None
        assert seqs(stored.events) == list(range(11)), size
        expected = None if size == last_start else TornMarker(last_start, [])
        assert stored.torn_marker == expected, size
    os.truncate(path, last_start + 5)
    stored = backend.load_stored("s1")
    assert stored is not None
    backend.commit_repair(stored.meta, stored.torn_marker, [])
    assert path.read_bytes() == full[:last_start]


def test_jsonl__invalid_utf8_is_damage_at_its_byte_offset(tmp_path: Path) -> None:  # issue 7 (8): never replaced
    backend = make(tmp_path)
    line = b'{"type":"user/message","seq":0,"time":1,"data":"a\xffb"}\n'
    place(backend, HEADER + b"\n" + line)
    with pytest.raises(SessionPersistenceCorruptionError, match="not UTF-8") as info:
        backend.load_stored("s1")
    assert info.value.offset == len(HEADER) + 1 + line.index(b"\xff")


def test_jsonl__load_stored_and_listing_never_write(tmp_path: Path) -> None:
    backend = make(tmp_path)
    backend.append_batch(META, open_turn(), False)
    path = path_of(backend)
    with open(path, "ab") as handle:
        handle.write(b"{broken\n" + dumps(ev("turn/end", 9)) + b"\n")
    before = (path.read_bytes(), os.stat(path).st_mtime_ns)
    for _ in range(2):
        with pytest.raises(SessionPersistenceCorruptionError, match="unparsable committed event at line 7") as info:
            backend.load_stored("s1")
        assert info.value.location == str(path)
        assert "The file was not modified" in str(info.value)
        assert backend.list_sessions()[0].ok  # listing reads the header only
        assert backend.read_revision("s1") is not None
    assert (path.read_bytes(), os.stat(path).st_mtime_ns) == before


# --- fixtures built by hand from the spec's byte layout ----------------------------------------------------


def test_jsonl__fixture_raw_log_with_a_text_chunks_row_loads_to_the_expected_events(tmp_path: Path) -> None:
    backend = make(tmp_path)
    place(
        backend,
        HEADER + b"\n"
        b'{"type":"turn/start","seq":0,"time":1000,"data":{"turn":1}}\n'
        b'{"type":"step/start","seq":1,"time":1001,"data":{"turn":1,"step":1}}\n'
        b'{"type":"text-chunks","seq0":2,"time0":1002,"data":{"turn":1,"step":1,"index":0,"dt":[5,-2],'
        b'"texts":["Hel","lo"," world"]}}\n'
        b'{"type":"step/end","seq":5,"time":1010,"data":{"turn":1,"step":1}}\n'
        b'{"type":"turn/end","seq":6,"time":1011,"data":{"turn":1,"reason":{"kind":"completed"}}}\n',
    )
    stored = backend.load_stored("s1")
    assert stored is not None and stored.torn_marker is None
    assert stored.meta == {"version": 0, "id": "s1", "createdAt": 1000, "cwd": CWD, "delegationDepth": 0}
    assert stored.events[2:5] == [
        {
            "type": "assistant/chunk",
            "seq": 2,
            "time": 1002,
            "data": {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "Hel"}},
        },
        {
            "type": "assistant/chunk",
            "seq": 3,
            "time": 1007,
            "data": {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "lo"}},
        },
        {
            "type": "assistant/chunk",
            "seq": 4,
            "time": 1005,
            "data": {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": " world"}},
        },
    ]
    assert seqs(stored.events) == list(range(7))


# === the Zstandard encoding's own cases (spec ``persistence.md`` §4.4, checklists §8.7 and §8.8) ============
#
# Frames are built with the ``zstandard`` library or byte by byte from RFC 8878's layout.


MAGIC = bytes.fromhex("28b52ffd")


def make_zstd(tmp_path: Path, **options: Any) -> JsonlBackend:
    options.setdefault("compression", "zstd")
    return JsonlBackend(tmp_path / "root", **options)


def frame(data: bytes, **options: Any) -> bytes:
    options.setdefault("write_checksum", True)
    return zstandard.ZstdCompressor(level=3, **options).compress(data)


def frames_of(path: Path) -> list[bytes]:
    data = path.read_bytes()
    scan = scan_zstd_frames(data)
    assert scan.torn_start is None
    return [data[start:end] for start, end in scan.frames]


def plain(frame_bytes: bytes) -> bytes:
    return zstandard.ZstdDecompressor().decompressobj().decompress(frame_bytes)


def raw_block(payload: bytes, last: bool) -> bytes:
    header_value = (len(payload) << 3) | (0 << 1) | int(last)
    return header_value.to_bytes(3, "little") + payload


def rle_block(byte: int, size: int, last: bool) -> bytes:
    header_value = (size << 3) | (1 << 1) | int(last)
    return header_value.to_bytes(3, "little") + bytes([byte])


# --- Zstandard frame structure (§8.7 #229, #235, #236) -----------------------------------------------------


def test_zstd__scans_concatenated_checksummed_frames_and_honors_a_frame_limit() -> None:  # spec 8.7 #229
    parts = [frame(b"a\n"), frame(b"bb\n" * 50), frame(b"ccc\n")]
    data = b"".join(parts)
    scan = scan_zstd_frames(data)
    ends = [sum(map(len, parts[: i + 1])) for i in range(3)]
    assert scan.frames == [(0, ends[0]), (ends[0], ends[1]), (ends[1], ends[2])] and scan.torn_start is None
    assert scan_zstd_frames(data, 1).frames == [(0, ends[0])]
    assert all(part[4] & 0x04 for part in parts)  # the content-checksum flag is set on every frame
    assert all(part[:4] == MAGIC for part in parts)
    empty = scan_zstd_frames(b"")
    assert empty.frames == [] and empty.torn_start is None


def test_zstd__distinguishes_incomplete_frame_regions_from_invalid_complete_structure() -> None:  # spec 8.7 #235
    whole = MAGIC + bytes([0x20, 0x05]) + raw_block(b"hello", True)  # single segment, 1-byte FCS
    assert scan_zstd_frames(whole).frames == [(0, len(whole))]
    for cut in range(1, len(whole)):  # partial magic, descriptor, header, block header, payload
        scan = scan_zstd_frames(whole[:cut])
        assert scan.frames == [] and scan.torn_start == 0, cut
    with pytest.raises(SessionPersistenceCorruptionError, match="invalid frame magic at byte 0"):
        scan_zstd_frames(b"\x00" * 8)
    skippable = (0x184D2A50).to_bytes(4, "little") + (0).to_bytes(4, "little")
    with pytest.raises(SessionPersistenceCorruptionError, match="invalid frame magic at byte 0"):
        scan_zstd_frames(skippable)
    for reserved in (0x08, 0x10):
        with pytest.raises(SessionPersistenceCorruptionError, match="reserved frame-header bit at byte 4"):
            scan_zstd_frames(MAGIC + bytes([0x20 | reserved, 0x05]) + raw_block(b"hello", True))
    reserved_block = ((5 << 3) | (3 << 1) | 1).to_bytes(3, "little") + b"hello"
    with pytest.raises(SessionPersistenceCorruptionError, match="reserved block type at byte 6") as info:
        scan_zstd_frames(MAGIC + bytes([0x20, 0x05]) + reserved_block)
    assert info.value.offset == 6
    second = len(whole)
    with pytest.raises(SessionPersistenceCorruptionError, match=f"invalid frame magic at byte {second}"):
        scan_zstd_frames(whole + b"JUNK")


@pytest.mark.parametrize(
    ("descriptor", "header_bytes"),
    [
        (0x00, 1),  # window byte, no dictionary id, no content size
        (0x21, 1 + 1),  # single segment: 1-byte dictionary id, 1-byte content size
        (0x42, 1 + 2 + 2),  # window byte, 2-byte dictionary id, 2-byte content size
        (0x83, 1 + 4 + 4),  # window byte, 4-byte dictionary id, 4-byte content size
        (0xE3, 4 + 8),  # single segment, 4-byte dictionary id, 8-byte content size
    ],
)
def test_zstd__covers_standard_header_variants_rle_blocks_multiple_blocks_and_checksums(
    descriptor: int, header_bytes: int
) -> None:  # spec 8.7 #236
    blocks = raw_block(b"abc", False) + rle_block(ord("x"), 10, True)  # RLE payload is one byte
    whole = MAGIC + bytes([descriptor]) + b"\x00" * header_bytes + blocks
    assert scan_zstd_frames(whole).frames == [(0, len(whole))]
    assert scan_zstd_frames(whole[:-1]).torn_start == 0
    checked = MAGIC + bytes([descriptor | 0x04]) + b"\x00" * header_bytes + blocks + b"\x01\x02\x03\x04"
    assert scan_zstd_frames(checked).frames == [(0, len(checked))]
    missing_checksum_byte = scan_zstd_frames(checked[:-1])
    assert missing_checksum_byte.frames == [] and missing_checksum_byte.torn_start == 0


def test_zstd__decodes_hand_built_frames_without_content_size_or_checksum() -> None:
    no_size = MAGIC + bytes([0x00, 0x00]) + raw_block(b"abc", False) + rle_block(ord("x"), 10, True)
    assert decompress_frame(no_size, 0, 1000) == b"abc" + b"x" * 10
    with pytest.raises(SessionPersistenceCorruptionError, match="decompresses to more than 12 bytes"):
        decompress_frame(no_size, 0, 12)


# --- default Zstandard encoding (§8.7 #237-#252) ------------------------------------------------------------


def test_zstd__writes_jsonl_zstd_by_default_with_one_header_frame_and_one_first_batch_frame(
    tmp_path: Path,
) -> None:  # spec 8.7 #237
    backend = JsonlBackend(tmp_path / "root")
    events = closed_turn()
    backend.append_batch(META, events, False)
    path = path_of(backend)
    assert path.name == "session.jsonl.zstd" and not path.with_name("session.jsonl").exists()
    assert path.read_bytes()[:4] == MAGIC
    header_frame, batch_frame = frames_of(path)
    assert plain(header_frame) == HEADER + b"\n"
    stored = backend.load_stored("s1")
    assert stored is not None and stored.events == events
    none_root = JsonlBackend(tmp_path / "plain", compression="none")
    none_root.append_batch(META, events, False)
    assert plain(header_frame) + plain(batch_frame) == path_of(none_root).read_bytes()


def test_zstd__read_raw_decodes_the_compressed_artifact_back_to_the_original_jsonl_text(
    tmp_path: Path,
) -> None:  # spec 8.7 #238
    backend = make_zstd(tmp_path)
    plain_backend = JsonlBackend(tmp_path / "plain", compression="none")
    for target in (backend, plain_backend):
        target.append_batch(META, streamed_turn(), False)
        target.append_batch(META, streamed_turn(10, 2), True)
    raw = backend.read_raw("s1")
    assert raw is not None and raw.filename == "session.jsonl"
    assert raw.content == path_of(plain_backend).read_text()
    assert raw.content.count("text-chunks") == 2


def test_zstd__read_raw_rejects_a_present_artifact_that_carries_no_frame(tmp_path: Path) -> None:  # spec 8.7 #239
    backend = make_zstd(tmp_path)
    place(backend, b"")
    with pytest.raises(SessionPersistenceCorruptionError, match="empty or header-less Zstandard session log"):
        backend.read_raw("s1")


def test_zstd__resolves_the_defaults_without_any_options(tmp_path: Path) -> None:  # spec 8.7 #240
    backend = JsonlBackend(tmp_path / "root")
    assert backend.compression == "zstd" and backend.pack_chunks is True
    backend.append_batch(META, streamed_turn(), False)
    _, batch = frames_of(path_of(backend))
    assert b'"type":"text-chunks"' in plain(batch)


def test_zstd__appends_one_frame_per_durable_batch_without_rewriting_prior_bytes(
    tmp_path: Path,
) -> None:  # spec 8.7 #241
    backend = make_zstd(tmp_path)
    backend.append_batch(META, open_turn(), False)
    path = path_of(backend)
    before = path.read_bytes()
    backend.append_batch(META, closers(8), True)
    after = path.read_bytes()
    assert after.startswith(before)
    assert len(frames_of(path)) == 3
    assert plain(frames_of(path)[2]) == b"".join(dumps(e) + b"\n" for e in closers(8))


def test_zstd__lists_from_a_multi_chunk_header_frame_without_decoding_a_corrupt_event_frame(
    tmp_path: Path,
) -> None:  # spec 8.7 #242
    backend = make_zstd(tmp_path)
    cwd = "/" + os.urandom(12_000).hex()  # a 24 KB cwd: the header frame spans several 8 KiB reads
    meta = {**META, "cwd": cwd}
    backend.append_batch(meta, closed_turn(), False)
    path = path_of(backend, meta)
    header_frame, batch = frames_of(path)
    assert len(header_frame) > 8192
    path.write_bytes(header_frame + batch[:-1] + bytes([batch[-1] ^ 0xFF]))  # break the event frame's checksum
    (listing,) = backend.list_sessions()
    assert listing.ok and listing.header is not None and listing.header["cwd"] == cwd
    with pytest.raises(SessionPersistenceCorruptionError, match=r"frame at byte \d+ failed validation"):
        backend.load_stored("s1")
    assert backend.locate(meta) == listing.location


def torn_injection(first_seq: int) -> bytes:
    """The spec's zstd injector: a checksummed frame with one 300,000-character chunk line, torn."""
    records = [
        ev("turn/start", first_seq, {"turn": 2}),
        ev("step/start", first_seq + 1, {"turn": 2, "step": 1}),
        chunk(first_seq + 2, "z" * 300_000, turn=2),
    ]
    whole = frame(text(*records))
    return whole[: len(whole) - 8]  # inside the final block: its last bytes and the checksum are missing


def test_zstd__preserves_complete_records_from_a_torn_frame_and_reencodes_them_with_closers(
    tmp_path: Path,
) -> None:  # spec 8.7 #246
    backend = make_zstd(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    path = path_of(backend)
    committed = path.read_bytes()
    with open(path, "ab") as handle:
        handle.write(torn_injection(10))
    stored = backend.load_stored("s1")
    assert stored is not None
    assert seqs(stored.events) == list(range(12))
    marker = stored.torn_marker
    assert isinstance(marker, TornMarker) and marker.truncate_to == len(committed)
    assert [e["type"] for e in marker.recovered_events] == ["turn/start", "step/start"]
    assert marker.recovered_events == stored.events[10:] and marker.recovered_events[0] is not stored.events[10]
    backend.commit_repair(stored.meta, marker, closers(12, turn=2))
    repaired = path.read_bytes()
    assert repaired.startswith(committed)
    scan = scan_zstd_frames(repaired)
    assert scan.torn_start is None and len(scan.frames) == 3
    assert plain(repaired[len(committed) :]) == text(*stored.events[10:], *closers(12, turn=2))
    final = backend.load_stored("s1")
    assert final is not None and final.torn_marker is None and seqs(final.events) == list(range(14))


def test_zstd__drops_a_frame_torn_in_its_header_before_it_produced_plaintext(tmp_path: Path) -> None:  # spec 8.7 #247
    backend = make_zstd(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    path = path_of(backend)
    committed = path.read_bytes()
    with open(path, "ab") as handle:
        handle.write(frame(text(ev("turn/start", 10)))[:6])
    stored = backend.load_stored("s1")
    assert stored is not None and stored.torn_marker == TornMarker(len(committed), [])
    backend.commit_repair(stored.meta, stored.torn_marker, [])
    assert path.read_bytes() == committed


def test_zstd__recovers_complete_events_when_eof_tears_only_the_final_checksum(tmp_path: Path) -> None:  # spec 8.7 #248
    backend = make_zstd(tmp_path)
    backend.append_batch(META, open_turn(), False)
    path = path_of(backend)
    committed = path.stat().st_size
    with open(path, "ab") as handle:
        handle.write(frame(text(*closers(8)))[:-1])
    stored = backend.load_stored("s1")
    assert stored is not None and seqs(stored.events) == list(range(10))
    assert stored.torn_marker == TornMarker(committed, closers(8))


def test_zstd__rejects_a_complete_frame_containing_a_torn_jsonl_record(tmp_path: Path) -> None:  # spec 8.7 #249
    backend = make_zstd(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    path = path_of(backend)
    tail_start = path.stat().st_size
    with open(path, "ab") as handle:
        handle.write(frame(dumps(ev("turn/start", 10)) + b"\n" + b'{"type":"step/start","seq":11'))
    with pytest.raises(SessionPersistenceCorruptionError, match="complete frame contains a torn JSONL record") as info:
        backend.load_stored("s1")
    assert info.value.offset == tail_start
    for defect in (b"{bad json}\n", dumps(ev("turn/start", 12)) + b"\n"):  # a defect or a gap, no turn/end
        place(backend, path.read_bytes()[:tail_start] + frame(defect))
        with pytest.raises(SessionPersistenceCorruptionError, match="complete frame contains a torn JSONL record"):
            backend.load_stored("s1")


def test_zstd__rolls_back_a_checksummed_append_frame_when_fsync_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # spec 8.7 #250
    backend = make_zstd(tmp_path)
    backend.append_batch(META, open_turn(), False)
    path = path_of(backend)
    before = path.read_bytes()
    fail_fsync(monkeypatch, lambda n: n == 1)
    with pytest.raises(StorageAccessError, match="injected fsync failure"):
        backend.append_batch(META, closers(8), True)
    assert path.read_bytes() == before
    monkeypatch.undo()
    backend.append_batch(META, closers(8), True)
    stored = backend.load_stored("s1")
    assert stored is not None and seqs(stored.events) == list(range(10)) and len(frames_of(path)) == 3


def test_zstd__reports_empty_incomplete_and_non_header_artifacts_and_rejects_malformed_header_frames(
    tmp_path: Path,
) -> None:  # spec 8.7 #251 (the reference skips the first three; the Python contract reports them)
    backend = make_zstd(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    place(backend, b"", session_id="empty")
    place(backend, frame(HEADER + b"\n")[:10], session_id="incomplete")
    place(backend, frame(b'{"type":"note"}\n'), session_id="non-header")
    place(backend, frame(HEADER + b"\n" + HEADER + b"\n"), session_id="multi-line")
    listings = {item.id: item for item in backend.list_sessions()}
    assert listings["s1"].ok
    assert "empty or header-less Zstandard session log" in (listings["empty"].error_message or "")
    assert "empty or header-less Zstandard session log" in (listings["incomplete"].error_message or "")
    assert "first line is not a session header" in (listings["non-header"].error_message or "")
    assert "first frame is not exactly one header line" in (listings["multi-line"].error_message or "")
    assert all(listings[name].error_code == "SESSION_CORRUPT" for name in listings if name != "s1")
    with pytest.raises(SessionPersistenceCorruptionError, match="first frame is not exactly one header line"):
        backend.load_stored("multi-line")


def test_zstd__rejects_missing_empty_and_checksum_corrupt_header_frames_on_targeted_reads(
    tmp_path: Path,
) -> None:  # spec 8.7 #252
    backend = make_zstd(tmp_path)
    batch = frame(text(*closed_turn()))
    place(backend, b"")
    with pytest.raises(SessionPersistenceCorruptionError, match="empty or header-less Zstandard session log"):
        backend.load_stored("s1")
    place(backend, frame(b"") + batch)
    with pytest.raises(SessionPersistenceCorruptionError, match="first frame is not exactly one header line"):
        backend.load_stored("s1")
    corrupt_header = bytearray(frame(HEADER + b"\n"))
    corrupt_header[-2] ^= 0xFF
    place(backend, bytes(corrupt_header) + batch)
    with pytest.raises(SessionPersistenceCorruptionError, match="frame at byte 0 failed validation"):
        backend.load_stored("s1")
    (listing,) = backend.list_sessions()
    assert listing.error_code == "SESSION_CORRUPT"
    assert "header frame failed validation" in (listing.error_message or "")


# --- encoding selection (§8.7 #253-#255) -------------------------------------------------------------------


def test_zstd__rejects_roots_owned_by_the_opposite_encoding_in_both_directions(tmp_path: Path) -> None:  # spec 8.7 #253
    JsonlBackend(tmp_path / "raw", compression="none").append_batch(META, closed_turn(), False)
    JsonlBackend(tmp_path / "zst", compression="zstd").append_batch(META, closed_turn(), False)
    wrong_zstd = JsonlBackend(tmp_path / "raw", compression="zstd")
    with pytest.raises(PersistenceError, match=r'uses \.jsonl, but this backend is configured for compression "zstd"'):
        wrong_zstd.load_stored("s1")
    with pytest.raises(PersistenceError, match='configured for compression "zstd"'):
        wrong_zstd.list_sessions()
    wrong_none = JsonlBackend(tmp_path / "zst", compression="none")
    with pytest.raises(
        PersistenceError, match=r'uses \.jsonl\.zstd, but this backend is configured for compression "none"'
    ):
        wrong_none.load_stored("other-id")  # the root preflight refuses every operation on a foreign root


def test_zstd__rechecks_targeted_artifacts_and_listing_after_an_initially_empty_root(
    tmp_path: Path,
) -> None:  # spec 8.7 #254
    backend = make_zstd(tmp_path)
    assert backend.load_stored("s1") is None  # preflight passes (and is cached) on the empty root
    JsonlBackend(tmp_path / "root", compression="none").append_batch(META, closed_turn(), False)
    for operation in (lambda: backend.load_stored("s1"), lambda: backend.read_revision("s1"), backend.list_sessions):
        with pytest.raises(PersistenceError, match=r"uses \.jsonl, but"):
            operation()


def test_zstd__refuses_materialization_when_an_opposite_artifact_appears_after_create(
    tmp_path: Path,
) -> None:  # spec 8.7 #255
    backend = make_zstd(tmp_path)
    assert backend.load_stored("s1") is None
    JsonlBackend(tmp_path / "root", compression="none").append_batch(META, closed_turn(), False)
    with pytest.raises(PersistenceError, match=r"uses \.jsonl, but"):
        backend.append_batch(META, closed_turn(), False)
    assert not path_of(backend).exists()


# --- §8.8 compat ----------------------------------------------------------------------------------------------


def test_zstd__round_trips_concatenated_checksummed_frames_through_the_library_api(
    tmp_path: Path,
) -> None:  # spec 8.8 #256
    backend = make_zstd(tmp_path)
    backend.append_batch(META, open_turn(), False)
    backend.append_batch(META, closers(8), True)
    data = path_of(backend).read_bytes()
    scan = scan_zstd_frames(data)
    assert [data[start : start + 4].hex() for start, _ in scan.frames] == ["28b52ffd"] * 3
    library = b"".join(plain(data[start:end]) for start, end in scan.frames)
    ours = b"".join(decompress_frame(data[start:end], start, 1 << 20) for start, end in scan.frames)
    assert library == ours and library.startswith(HEADER + b"\n")
    reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    assert reader.read() == library  # the library decodes the concatenation as one stream, too
    last_start, last_end = scan.frames[-1]
    torn = data[: last_end - 1]
    torn_scan = scan_zstd_frames(torn)
    assert torn_scan.torn_start == last_start and len(torn_scan.frames) == 2
    assert decompress_torn_frame(torn[last_start:], last_start, 1 << 20) == plain(data[last_start:last_end])


# --- beyond the checklist --------------------------------------------------------------------------------------


def test_zstd__truncating_the_last_frame_at_every_offset_loads_the_committed_prefix(tmp_path: Path) -> None:
    backend = make_zstd(tmp_path)
    committed_events = closed_turn()
    backend.append_batch(META, committed_events, False)
    tail_events = [
        ev("turn/start", 10, {"turn": 2}),
        ev("step/start", 11, {"turn": 2, "step": 1}),
        *(chunk(12 + k, f"w{k} ", 2) for k in range(4)),
        ev("tool/call", 16, {"callId": "c", "args": "x" * 40}),
    ]
    backend.append_batch(META, tail_events, True)
    path = path_of(backend)
    full = path.read_bytes()
    last_start, last_end = scan_zstd_frames(full).frames[-1]
    everything = committed_events + tail_events
    recovered_counts = []
    for size in range(last_end - 1, last_start - 1, -1):
        os.truncate(path, size)
        stored = backend.load_stored("s1")
        assert stored is not None, size
        assert stored.events == everything[: len(stored.events)], size
        assert len(stored.events) >= len(committed_events), size
        if size == last_start:
            assert stored.torn_marker is None
        else:
            marker = stored.torn_marker
            assert isinstance(marker, TornMarker) and marker.truncate_to == last_start, size
            assert marker.recovered_events == stored.events[len(committed_events) :], size
        recovered_counts.append(len(stored.events))
    assert recovered_counts[0] == len(everything)  # torn only in the checksum: every record recovered
    assert recovered_counts == sorted(recovered_counts, reverse=True)
    path.write_bytes(full[: last_start + (last_end - last_start) // 2])
    stored = backend.load_stored("s1")
    assert stored is not None
    backend.commit_repair(stored.meta, stored.torn_marker, [])
    repaired = backend.load_stored("s1")
    assert repaired is not None and repaired.torn_marker is None and repaired.events == stored.events
    assert path.read_bytes()[:last_start] == full[:last_start]


def test_zstd__flipping_any_byte_of_an_earlier_frame_is_a_typed_corruption_and_changes_nothing(tmp_path: Path) -> None:
    backend = make_zstd(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    backend.append_batch(META, streamed_turn(10, 2), True)
    backend.append_batch(META, closed_turn(3, 20), True)
    path = path_of(backend)
    full = path.read_bytes()
    frames = scan_zstd_frames(full).frames
    assert len(frames) == 4
    header_end = frames[0][1]
    for position in range(frames[-1][0]):  # every byte of every complete, non-last frame
        damaged = bytearray(full)
        damaged[position] ^= 0xFF
        path.write_bytes(damaged)
        with pytest.raises(SessionPersistenceCorruptionError) as info:
            backend.load_stored("s1")
        assert info.value.location == str(path), position
        (listing,) = backend.list_sessions()  # listing decodes the header frame only, and never raises
        if position < header_end:
            assert listing.error_code == "SESSION_CORRUPT", position
        assert path.read_bytes() == bytes(damaged), position


def test_zstd__a_torn_region_followed_by_a_complete_frame_is_committed_damage(tmp_path: Path) -> None:
    backend = make_zstd(tmp_path)
    backend.append_batch(META, open_turn(), False)
    path = path_of(backend)
    committed = path.read_bytes()
    later = frame(text(*closers(8)))
    # A frame whose raw block claims 5000 bytes: scanning it swallows the complete frame after it.
    swallowing = MAGIC + bytes([0x20, 0xFF]) + ((5000 << 3) | 1).to_bytes(3, "little")
    place(backend, committed + swallowing + b"partial payload" + later)
    with pytest.raises(SessionPersistenceCorruptionError, match="is incomplete, yet a complete frame follows"):
        backend.load_stored("s1")


def test_zstd__a_frame_decoding_beyond_max_frame_bytes_is_a_typed_corruption(tmp_path: Path) -> None:
    backend = make_zstd(tmp_path, max_frame_bytes=4096)
    backend.append_batch(META, open_turn(), False)
    path = path_of(backend)
    committed = path.read_bytes()
    big = text(ev("user/message", 8, {"text": "x" * 10_000}))
    for variant in (frame(big), frame(big, write_content_size=False)):  # declared and undeclared sizes
        place(backend, committed + variant)
        with pytest.raises(SessionPersistenceCorruptionError, match="decompresses to more than 4096 bytes") as info:
            backend.load_stored("s1")
        assert info.value.offset == len(committed) and "max_frame_bytes" in str(info.value)
    huge = frame(text(ev("user/message", 8, {"text": os.urandom(100_000).hex()})))
    place(backend, committed + huge[:-6])  # a torn frame is bounded too (its first 128 KiB block is whole)
    with pytest.raises(SessionPersistenceCorruptionError, match="decompresses to more than 4096 bytes"):
        backend.load_stored("s1")
    assert path.read_bytes() == committed + huge[:-6]


def test_zstd__fixture_concatenated_library_frames_load_to_the_expected_events(tmp_path: Path) -> None:
    backend = make_zstd(tmp_path)
    row = (
        b'{"type":"text-chunks","seq0":2,"time0":1002,"data":{"turn":1,"step":1,"index":0,"dt":[1,1],'
        b'"texts":["a","b","c"]}}\n'
    )
    content = (
        frame(HEADER + b"\n")
        + frame(b'{"type":"turn/start","seq":0,"time":1000,"data":{"turn":1}}\n', write_checksum=False)
        + frame(
            b'{"type":"step/start","seq":1,"time":1001,"data":{"turn":1,"step":1}}\n' + row, write_content_size=False
        )
        + zstandard.ZstdCompressor(level=19, write_checksum=True).compress(
            b'{"type":"step/end","seq":5,"time":1005,"data":{"turn":1,"step":1}}\n'
            b'{"type":"turn/end","seq":6,"time":1006,"data":{"turn":1,"reason":{"kind":"completed"}}}\n'
        )
    )
    place(backend, content)
    stored = backend.load_stored("s1")
    assert stored is not None and stored.torn_marker is None
    assert stored.meta == {"version": 0, "id": "s1", "createdAt": 1000, "cwd": CWD, "delegationDepth": 0}
    assert seqs(stored.events) == list(range(7))
    assert [e["data"]["chunk"]["text"] for e in stored.events[2:5]] == ["a", "b", "c"]
    assert stored.events[4] == {
        "type": "assistant/chunk",
        "seq": 4,
        "time": 1004,
        "data": {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "c"}},
    }


def test_zstd__fixture_a_multi_block_streamed_frame_loads(tmp_path: Path) -> None:
    backend = make_zstd(tmp_path)
    events = [ev("user/message", i, {"text": os.urandom(2000).hex()}) for i in range(200)]  # ~800 KB, many blocks
    compressor = zstandard.ZstdCompressor(level=3, write_checksum=True)
    body = compressor.compressobj()
    stream = body.compress(text(*events)) + body.flush()
    assert stream[4] & 0x20 == 0  # not single-segment: carries a window descriptor
    place(backend, frame(HEADER + b"\n") + stream)
    stored = backend.load_stored("s1")
    assert stored is not None and stored.events == events


def test_zstd__read_raw_omits_a_torn_final_frame(tmp_path: Path) -> None:
    backend = make_zstd(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    path = path_of(backend)
    complete = b"".join(plain(part) for part in frames_of(path))
    with open(path, "ab") as handle:
        handle.write(torn_injection(10))
    raw = backend.read_raw("s1")
    assert raw is not None and raw.content.encode() == complete


# === either encoding: the regressions of issue 7's defects, over raw lines and Zstandard frames ==========
#
# The JSONL backends (raw and zstd frames), the memory backend and the coordinator's load path; each
# section is named after its defect number.
#
# Real files and real file-system conditions only: a small tmpfs for a full disk, a tmpfs remounted
# read-only, a child process that drops root for permission checks (root bypasses them), FIFOs, symlinks,
# device nodes and ``RLIMIT_AS`` in a child process for memory pressure; all cleaned up afterwards.


JSONL_KINDS = ["jsonl-none", "jsonl-zstd"]


@pytest.fixture(params=JSONL_KINDS)
def jenv(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(BackendFactory(request.param, tmp_path))
    yield harness
    harness.close()


def _zstd(env: Harness) -> bool:
    return env.kind == "jsonl-zstd"


def log_path(env: Harness, session_id: str = SID) -> Path:
    location = env.backend().locate(builders.header(session_id))
    assert location is not None
    return Path(location)


def write_log(env: Harness, *batches: list[bytes], session_id: str = SID) -> Path:
    """A hand-built artifact at the layout's place: the header, then each batch of lines (one zstd frame
    per batch). Lines are given without their newline; ``None``-free bytes only."""
    path = log_path(env, session_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    head = dumps({"type": "session", **builders.header(session_id)}) + b"\n"
    texts = [b"".join(line + b"\n" for line in batch) for batch in batches]
    if _zstd(env):
        path.write_bytes(compress_frame(head) + b"".join(compress_frame(text) for text in texts))
    else:
        path.write_bytes(head + b"".join(texts))
    return path


def lines(*events: dict[str, Any]) -> list[bytes]:
    return [dumps(event) for event in events]


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every file below ``root`` with its bytes (symlinks by their target): "nothing was touched"."""
    found: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            found[str(path)] = "->" + os.readlink(path)
        elif path.is_file():
            found[str(path)] = path.read_bytes()
    return found


def store_root(env: Harness) -> Path:
    return Path(env.factory.root)


def persist_closed_turn(env: Harness, session_id: str = SID, *, turns: int = 1) -> None:
    coordinator = env.coordinator()
    session = coordinator.store.create(session_id, meta=live_meta())
    for turn in range(1, turns + 1):
        append_closed_turn(session, turn)
    coordinator.store.flush(session)
    coordinator.close()


@pytest.fixture
def tmpfs() -> Iterator[Path]:
    """A 64 KiB tmpfs (a real, tiny file system: full disks and read-only remounts)."""
    with small_tmpfs("64k", mode="0755") as mount:
        yield mount


def tmpfs_env(kind: str, mount: Path) -> Harness:
    factory = BackendFactory(kind, mount)
    factory.root = mount / "store"
    factory._args = (str(factory.root),)
    return Harness(factory)


# --- 8: bytes that are not UTF-8 are damage at their offset -------------------------------------------


def test_non_utf8_bytes_in_a_committed_record_are_corruption_at_their_byte_offset(jenv: Harness) -> None:
    good = builders.closed_turn(0)
    bad = dumps(good[1]).replace(b"question-1", b"quest\xffon-1")
    path = write_log(jenv, [dumps(good[0]), bad, *lines(*good[2:])])
    before = path.read_bytes()
    for read in (jenv.backend().load_stored, jenv.coordinator().load, jenv.coordinator().resume):
        with pytest.raises(SessionPersistenceCorruptionError, match="not UTF-8") as info:
            read(SID)
        assert info.value.code == "SESSION_CORRUPT"
    raw = jenv.backend()
    with pytest.raises(SessionPersistenceCorruptionError) as info:
        raw.load_stored(SID)
    if _zstd(jenv):  # the damaged frame (the second one) is named by its physical offset
        assert info.value.offset == len(compress_frame(dumps({"type": "session", **builders.header()}) + b"\n"))
    else:
        assert info.value.offset == before.index(b"\xff")
    assert path.read_bytes() == before


def test_non_utf8_bytes_in_the_last_record_or_the_header_are_corruption_too(jenv: Harness) -> None:
    good = builders.closed_turn(0)
    path = write_log(jenv, [*lines(*good[:-1]), dumps(good[-1]).replace(b"completed", b"compl\xc3eted")])
    before = path.read_bytes()
    with pytest.raises(SessionPersistenceCorruptionError, match="not UTF-8"):
        jenv.coordinator().resume(SID)  # the last complete record is committed: never cut as a torn tail
    assert path.read_bytes() == before
    head = dumps({"type": "session", **builders.header()}).replace(b'"s1"', b'"s\xfe1"')
    path.write_bytes(compress_frame(head + b"\n") if _zstd(jenv) else head + b"\n")
    with pytest.raises(SessionPersistenceCorruptionError):
        jenv.backend().load_stored(SID)
    (listing,) = jenv.backend().list_sessions()
    assert listing.error_code == "SESSION_CORRUPT"


# --- 12: memory pressure is never corruption -------------------------------------------------------------

_MEMORY_CHILD = r"""
import json, os, resource, sys
from agentlog import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
root, compression, extra = sys.argv[1], sys.argv[2], int(sys.argv[3])
backend = JsonlBackend(root, compression=compression)
with open("/proc/self/statm") as handle:
    used = int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
resource.setrlimit(resource.RLIMIT_AS, (used + extra, used + extra))
try:
    PersistenceCoordinator(SessionStore(), backend).resume("s1")
    out = {"ok": True}
except BaseException as err:
    out = {"ok": False, "type": type(err).__name__, "code": getattr(err, "code", None),
           "repaired": "after its repair was committed" in str(err)}
sys.stdout.write(json.dumps(out) + "\n")
sys.stdout.flush()
os._exit(0)
"""


def _many_events(count: int) -> list[dict[str, Any]]:
    events = [turn_start(0), user_event(1, "q"), step_start(2)]
    events += [chunk_event(seq, f"x{seq}") for seq in range(3, count)]
    return events


def test_out_of_memory_while_loading_is_resource_exhausted_and_nothing_is_touched(jenv: Harness) -> None:
    """Under address-space limits from too small to enough, a resume never crashes (the parser is not
    allocation-safe: a parse that might not fit is refused before it starts) and either loads (and
    repairs) or refuses typed, touching nothing. The limits are dense where the parse's peak is near the
    room left (a CI child once died of SIGSEGV there)."""
    backend = jenv.backend()
    backend.pack_chunks = False  # one line per event: the parse needs far more memory than the file
    events = _many_events(120_000)
    for start in range(0, len(events), 8192):
        backend.append_batch(builders.header(), events[start : start + 8192], start > 0)
    path = log_path(jenv)
    with path.open("ab") as handle:  # an open turn and a torn tail: a resume would repair (truncate)
        handle.write(compress_frame(b'{"type":"assistant/chunk"')[:9] if _zstd(jenv) else b'{"type":"assis')
    before = path.read_bytes()
    results = []
    for extra in [*range(12 << 20, 40 << 20, 1 << 20), *range(40 << 20, 160 << 20, 8 << 20)]:
        child = subprocess.run(
            [sys.executable, "-c", _MEMORY_CHILD, str(store_root(jenv)), jenv.kind.split("-")[1], str(extra)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert child.returncode == 0, (extra, child.stderr[-2000:])  # no crash
        result = json.loads(child.stdout.strip().splitlines()[-1])
        assert result["ok"] or result["code"] == "RESOURCE_EXHAUSTED", (extra, result)
        if path.read_bytes() != before:
            # The load fitted and committed its repair (the resume then loaded, or ran out reading it back
            # or starting its write-behind thread, and said so): the repaired log is valid, as an
            # unlimited load finds nothing left to repair. The next child gets the torn log again.
            assert result["ok"] or result["repaired"] or result["code"] == "RESOURCE_EXHAUSTED"
            repaired = path.read_bytes()
            jenv.coordinator().load(SID)
            assert path.read_bytes() == repaired
            path.write_bytes(before)
        else:
            assert not result["ok"], (extra, result)  # a resume that loaded has repaired the torn tail
        results.append(result)
    assert {"ok": False, "type": "ResourceExhaustedError", "code": "RESOURCE_EXHAUSTED", "repaired": False} in results
    assert any(result["ok"] for result in results), results  # the largest limits are enough


def test_a_log_beyond_the_load_budget_is_refused_before_it_is_read(jenv: Harness) -> None:
    persist_closed_turn(jenv, turns=3)
    path = log_path(jenv)
    before = path.read_bytes()
    small = JsonlBackend(store_root(jenv), compression=jenv.factory._kwargs["compression"], max_log_bytes=256)
    with pytest.raises(ResourceExhaustedError, match="max_log_bytes") as info:
        small.load_stored(SID)
    assert info.value.code == "RESOURCE_EXHAUSTED" and isinstance(info.value, MemoryError)
    with pytest.raises(ResourceExhaustedError):
        jenv.coordinator(backend=small).resume(SID)
    assert path.read_bytes() == before
    assert jenv.backend().load_stored(SID) is not None


# --- 13: only an incomplete final record is a torn tail ----------------------------------------------------


def _open_turn_lines(count: int) -> list[dict[str, Any]]:
    return [turn_start(0), user_event(1, "q"), step_start(2), *(chunk_event(s, f"c{s}") for s in range(3, count))]


@pytest.mark.parametrize("damage", ["unparsable", "missing", "not-an-event"])
def test_repair_keeps_records_after_damage(jenv: Harness, damage: str) -> None:
    events = _open_turn_lines(40)
    encoded = lines(*events)
    if damage == "unparsable":
        encoded[17] = encoded[17][:-9] + b"#garbage}"
    elif damage == "missing":
        del encoded[17]
    else:
        encoded[17] = b"[17]"
    path = write_log(jenv, encoded[:10], encoded[10:])
    before = path.read_bytes()
    with pytest.raises(SessionPersistenceCorruptionError, match="not a torn tail") as info:
        jenv.backend().load_stored(SID)
    assert info.value.offset is not None and info.value.location == str(path)
    for read in (jenv.coordinator().resume, jenv.coordinator().load, jenv.coordinator().inspect):
        with pytest.raises(SessionPersistenceCorruptionError):
            read(SID)
    assert path.read_bytes() == before  # no committed record was cut


def test_damage_inside_a_torn_zstd_frame_with_records_after_it_is_corruption(tmp_path: Path) -> None:
    env = Harness(BackendFactory("jsonl-zstd", tmp_path))
    try:
        rng = random.Random(13)
        big = ["".join(rng.choice(string.ascii_letters) for _ in range(200_000)) for _ in range(3)]
        tail = [b"{damaged", *(dumps(chunk_event(4 + k, text)) for k, text in enumerate(big))]
        path = write_log(env, lines(*_open_turn_lines(4)))
        torn = compress_frame(b"".join(line + b"\n" for line in tail))
        with path.open("ab") as handle:
            handle.write(torn[: len(torn) * 3 // 4])  # a crash cut the last write short
        before = path.read_bytes()
        with pytest.raises(SessionPersistenceCorruptionError, match="not a torn tail"):
            env.backend().load_stored(SID)
        with pytest.raises(SessionPersistenceCorruptionError):
            env.coordinator().resume(SID)
        assert path.read_bytes() == before
    finally:
        env.close()


def test_an_incomplete_final_record_is_still_a_torn_tail(jenv: Harness) -> None:
    path = write_log(jenv, lines(*_open_turn_lines(8)))
    with path.open("ab") as handle:
        handle.write(compress_frame(dumps(chunk_event(8, "torn")) + b"\n")[:12] if _zstd(jenv) else b'{"type":"as')
    session = jenv.coordinator().resume(SID)
    assert builders.seqs(session.events)[:8] == list(range(8))
    assert [event["type"] for event in session.events][8:] == ["step/end", "turn/end", "session/end-seed"]


# --- 14: a second writer after the lock file vanished ---------------------------------------------------


def test_second_writer_after_lock_file_vanished_is_refused_not_interleaved(jenv: Harness) -> None:
    persist_closed_turn(jenv)
    first = jenv.coordinator()
    a = first.resume(SID)
    for lock in (store_root(jenv) / ".locks").iterdir():
        lock.unlink()  # someone "cleaned up" the lock directory while A is live
    second = jenv.coordinator()
    b = second.resume(SID)  # nothing stops B now: it takes a brand-new lock file
    append_closed_turn(b, 2)
    second.store.flush(b)
    path = log_path(jenv)
    after_b = path.read_bytes()
    a.append("turn/start", {"turn": 2})
    with pytest.raises(SessionTailChangedError, match="another writer appended") as info:
        first.store.flush(a)
    assert info.value.code == "SESSION_TAIL_CHANGED"
    assert path.read_bytes() == after_b  # nothing written by the stale writer
    loaded = jenv.coordinator().load(SID)  # B's log, intact and loadable
    assert [dict(event) for event in loaded.events] == [dict(event) for event in b.events]


def test_a_writer_whose_reader_saw_an_older_tail_is_refused(jenv: Harness) -> None:
    persist_closed_turn(jenv)
    reader = jenv.backend()
    stored = reader.load_stored(SID)
    assert stored is not None
    persist_more = jenv.backend()
    persist_more.load_stored(SID)
    persist_more.append_batch(builders.header(), [turn_start(6, 2)], True)
    with pytest.raises(SessionTailChangedError):
        reader.append_batch(builders.header(), [turn_start(6, 2)], True)
    with pytest.raises(AgentlogError):  # an append that does not continue the stored seq
        persist_more.append_batch(builders.header(), [turn_start(9, 2)], True)
    assert builders.seqs(jenv.backend().load_stored(SID).events) == list(range(7))  # type: ignore[union-attr]


# --- 17: symlinks and special files ------------------------------------------------------------------


def test_symlinked_session_directory_is_neither_read_nor_written(jenv: Harness, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    outside = Harness(BackendFactory(jenv.kind, elsewhere))
    try:
        persist_closed_turn(outside)
        real_dir = log_path(outside).parent
    finally:
        outside.close()
    outside_before = snapshot(elsewhere)
    link = log_path(jenv).parent
    link.parent.mkdir(parents=True)
    link.symlink_to(real_dir, target_is_directory=True)
    with pytest.raises(StorageAccessError, match="symbolic link") as info:
        jenv.backend().load_stored(SID)
    assert info.value.code == "STORAGE_NOT_A_DIRECTORY" and info.value.path == str(link)
    with pytest.raises(StorageAccessError):
        jenv.coordinator().resume(SID)
    (listing,) = jenv.backend().list_sessions()  # reported, not hidden
    assert listing.id == SID and listing.error_code == "STORAGE_NOT_A_DIRECTORY"
    coordinator = jenv.coordinator()
    with pytest.raises(StorageAccessError):  # at create, or at the latest at the first flush
        session = coordinator.store.create(SID, meta=live_meta())
        append_closed_turn(session, 1)
        coordinator.store.flush(session)
    with pytest.raises(StorageAccessError):
        jenv.backend().append_batch(builders.header(), builders.closed_turn(0), False)
    assert snapshot(elsewhere) == outside_before  # nothing outside the store was read into or written


def _in_thread(target: Any, *args: Any) -> Any:
    """Run ``target`` in a thread that must finish within 10 s (a FIFO open would hang forever)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = target(*args)
        except BaseException as err:
            outcome["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(10)
    return thread, outcome


@pytest.mark.parametrize("special", ["fifo", "dev-zero-symlink", "char-device", "symlinked-log", "directory"])
def test_special_file_at_the_log_path_is_refused_without_hanging(jenv: Harness, special: str) -> None:
    persist_closed_turn(jenv)
    path = log_path(jenv)
    real = path.with_name("real-log")
    path.rename(real)
    if special == "fifo":
        os.mkfifo(path)
    elif special == "dev-zero-symlink":
        path.symlink_to("/dev/zero")
    elif special == "char-device":
        try:
            os.mknod(path, 0o600 | 0o020000, os.makedev(1, 5))  # S_IFCHR: what /dev/zero is
        except OSError as err:
            pytest.skip(f"cannot create a device node here: {err}")
    elif special == "symlinked-log":
        path.symlink_to(real)
    else:
        path.mkdir()
    backend = jenv.backend()
    try:
        for operation in (
            lambda: backend.load_stored(SID),
            lambda: backend.read_raw(SID),
            lambda: backend.append_batch(builders.header(), [turn_start(6, 2)], True),
            lambda: jenv.coordinator().resume(SID),
        ):
            thread, outcome = _in_thread(operation)
            assert not thread.is_alive(), f"{special}: the operation hangs"
            error = outcome.get("error")
            assert isinstance(error, StorageAccessError), outcome
            assert error.code == "STORAGE_NOT_A_FILE" and error.path == str(path)
        thread, outcome = _in_thread(backend.list_sessions)
        assert not thread.is_alive()
        (listing,) = outcome["value"]
        assert listing.error_code == "STORAGE_NOT_A_FILE"
    finally:
        if special == "fifo" and path.exists():  # release any reader that did block
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
    assert real.read_bytes()  # the real log was never touched
    if special == "symlinked-log":
        assert JsonlBackend  # the link's target is the intact log, never read through the link


# --- 18: operating-system refusals are typed -----------------------------------------------------------------


def test_disk_full_during_flush_is_storage_full_and_the_retry_has_no_gap(tmpfs: Path) -> None:
    for kind in JSONL_KINDS:
        env = tmpfs_env(kind, tmpfs)
        try:
            coordinator = env.coordinator(batch_delay_ms=60_000)
            session = coordinator.store.create(f"full-{kind}", meta=live_meta())
            append_closed_turn(session, 1)
            coordinator.store.flush(session)
            path = log_path(env, f"full-{kind}")
            before = path.read_bytes()
            filler = tmpfs / "filler"
            fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                while True:
                    os.write(fd, b"\0" * 1024)
            except OSError:
                pass  # the file system is full
            finally:
                os.close(fd)
            rng = random.Random(18)
            session.append("turn/start", {"turn": 2})
            text = "".join(rng.choice(string.ascii_letters) for _ in range(20_000))
            session.append("user/message", user_data(text, msg_id="big"), APPEND_INTENT)
            with pytest.raises(StorageAccessError) as info:
                coordinator.store.flush(session)
            assert info.value.code == "STORAGE_FULL" and info.value.path == str(path)
            assert "free space" in info.value.message
            assert path.read_bytes() == before  # rolled back
            filler.unlink()
            coordinator.store.flush(session)  # the buffered batch is retried, no seq gap
            coordinator.close()
            assert builders.seqs(env.coordinator().load(f"full-{kind}").events) == list(range(9))
        finally:
            env.close()
            for leftover in tmpfs.iterdir():
                subprocess.run(["rm", "-rf", str(leftover)], check=True)


def test_read_only_file_system_at_resume_and_create_is_storage_read_only(tmpfs: Path) -> None:
    envs = [tmpfs_env(kind, tmpfs / kind) for kind in JSONL_KINDS]
    try:
        for env in envs:
            persist_closed_turn(env)
            path = log_path(env)
            with path.open("ab") as handle:  # a torn tail: resume would need to repair
                handle.write(b"\x28\xb5\x2f\xfd\x64" if env.kind == "jsonl-zstd" else b'{"type":"tu')
        before = snapshot(tmpfs)
        remount = subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], capture_output=True, text=True)
        if remount.returncode != 0:
            pytest.skip(f"remounting read-only is not permitted here: {remount.stderr.strip()}")
        try:
            for env in envs:
                assert len(env.coordinator().inspect(SID).events) == 6  # reading still works
                with pytest.raises(StorageAccessError) as info:
                    env.coordinator().resume(SID)
                assert info.value.code == "STORAGE_READ_ONLY" and "remount" in info.value.message
                coordinator = env.coordinator()
                with pytest.raises(StorageAccessError) as info:
                    created = coordinator.store.create("fresh", meta=live_meta())
                    append_closed_turn(created, 1)
                    coordinator.store.flush(created)
                assert info.value.code == "STORAGE_READ_ONLY"
                with pytest.raises(StorageAccessError) as info:
                    env.backend().append_batch(builders.header("other"), builders.closed_turn(0), False)
                assert info.value.code == "STORAGE_READ_ONLY"
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(tmpfs)], capture_output=True)
        assert snapshot(tmpfs) == before
    finally:
        for env in envs:
            env.close()


def test_store_root_or_locks_that_is_a_file_is_not_a_directory(jenv: Harness, tmp_path: Path) -> None:
    root_file = tmp_path / "root-file"
    root_file.write_text("not a store")
    with pytest.raises(StorageAccessError) as info:
        JsonlBackend(root_file)
    assert info.value.code == "STORAGE_NOT_A_DIRECTORY" and info.value.path == str(root_file)
    persist_closed_turn(jenv)
    locks = store_root(jenv) / ".locks"
    subprocess.run(["rm", "-rf", str(locks)], check=True)
    locks.write_text("not a directory")
    before = log_path(jenv).read_bytes()
    with pytest.raises(StorageAccessError) as info:
        jenv.coordinator().resume(SID)
    assert info.value.code == "STORAGE_NOT_A_DIRECTORY" and info.value.path == str(locks)
    with pytest.raises(StorageAccessError):
        jenv.coordinator().store.create("s2", meta=live_meta())
    assert log_path(jenv).read_bytes() == before
    assert len(jenv.coordinator().inspect(SID).events) == 6  # reads need no lock


_UNPRIVILEGED_CHILD = r"""
import json, os, sys
from agentlog import SessionStore
from agentlog.errors import AgentlogError
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
"".encode("utf-16-le")  # codecs load lazily: load them while the interpreter's files are readable
os.setgid(65534)  # imports above ran as root (the interpreter's own files may be private to root)
os.setuid(65534)
backend = JsonlBackend(sys.argv[1], compression=sys.argv[2])
out = {}
for name, call in (
    ("load", lambda: backend.load_stored("s1")),
    ("resume", lambda: PersistenceCoordinator(SessionStore(), backend).resume("s1")),
    ("list", lambda: [(l.error_code, l.location) for l in backend.list_sessions()]),
):
    try:
        out[name] = {"ok": call()}
    except AgentlogError as err:
        out[name] = {"code": err.code, "path": getattr(err, "path", None)}
    except BaseException as err:
        out[name] = {"untyped": repr(err)}
print(json.dumps(out, default=str))
"""


def test_permission_denied_file_is_storage_permission_denied(jenv: Harness) -> None:
    base = Path(tempfile.mkdtemp(prefix="agentlog-perm-"))
    try:
        base.chmod(0o755)
        env = Harness(BackendFactory(jenv.kind, base))
        try:
            persist_closed_turn(env)
            path = log_path(env)
        finally:
            env.close()
        for directory in (base / "jsonl-root", path.parent.parent, path.parent):
            directory.chmod(0o755)  # nobody can traverse to the file ...
        path.chmod(0o000)  # ... but not read it
        before = path.read_bytes()
        child = subprocess.run(
            [sys.executable, "-c", _UNPRIVILEGED_CHILD, str(base / "jsonl-root"), jenv.kind.split("-")[1]],
            capture_output=True,
            text=True,
            timeout=300,
            cwd="/",
        )
        if child.returncode != 0 and "Operation not permitted" in child.stderr:
            pytest.skip("cannot drop privileges to uid 65534 here (root bypasses permission checks)")
        assert child.returncode == 0, child.stderr[-2000:]
        out = json.loads(child.stdout)
        assert out["load"] == {"code": "STORAGE_PERMISSION_DENIED", "path": str(path)}
        assert out["resume"]["code"] == "STORAGE_PERMISSION_DENIED"
        assert out["list"] == {"ok": [["STORAGE_PERMISSION_DENIED", str(path)]]}
        assert path.read_bytes() == before
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=True)


# --- 19: a malformed event inside the open turn is a typed refusal on every backend ----------------------


def _stored_fingerprint(env: Harness) -> Any:
    if env.kind.startswith("jsonl"):
        return snapshot(store_root(env))
    if env.kind == "sqlite":
        import sqlite3

        con = sqlite3.connect(env.factory.db_path)
        try:
            return con.execute("SELECT * FROM events ORDER BY 1, 2").fetchall()
        finally:
            con.close()
    return env.backend().stored_lines(SID)


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "step/start", "seq": 3, "time": 1003, "data": {}},  # repair would read data["step"]
        {"type": "turn/start", "seq": 3, "time": 1003, "data": "x"},  # repair would index a string
        {"type": "tool/call", "seq": 3, "data": {"callId": "c"}},  # no time: repair reads last["time"]
    ],
    ids=["step-without-step", "data-not-an-object", "no-time"],
)
def test_malformed_envelope_in_the_open_turn_is_typed_and_untouched(env: Harness, bad: Any) -> None:
    backend = env.backend()
    try:
        backend.append_batch(builders.header(), [turn_start(0), user_event(1, "q"), step_start(2), bad], False)
    except (AgentlogError, KeyError):
        pytest.skip(f"{env.kind} cannot store this malformed event at all")
    before = _stored_fingerprint(env)
    coordinator = env.coordinator()
    for read in (coordinator.load, coordinator.inspect, coordinator.resume, coordinator.view):
        with pytest.raises(SessionPersistenceCorruptionError, match="failed validation"):
            read(SID)
    assert _stored_fingerprint(env) == before


# --- 21 (ls): header reading is linear and capped --------------------------------------------------------


def test_ls_reads_a_huge_header_line_in_linear_time_with_a_typed_cap(jenv: Harness) -> None:
    path = write_log(jenv, lines(*builders.closed_turn(0)))
    huge = dumps({"type": "session", **builders.header(), "agentPreset": "p" * (8 << 20)}) + b"\n"
    path.write_bytes(compress_frame(huge) if _zstd(jenv) else huge)
    (listing,) = jenv.backend().list_sessions()  # 8 MiB: one linear pass, then the typed cap
    assert listing.error_code == "SESSION_CORRUPT" and "max_header_bytes" in (listing.error_message or "")
    with pytest.raises(SessionPersistenceCorruptionError, match="max_header_bytes"):
        jenv.backend().load_stored(SID)
    roomy = JsonlBackend(store_root(jenv), compression=jenv.factory._kwargs["compression"], max_header_bytes=16 << 20)
    (listing,) = roomy.list_sessions()
    assert listing.ok and listing.header is not None and len(listing.header["agentPreset"]) == 8 << 20


# --- 4 (JSONL and memory): ids a store cannot hold -------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", *JSONL_KINDS])
@pytest.mark.parametrize(
    "bad_id", ["x" * 5000, "é" * 60, "lone-\ud800-surrogate"], ids=["5000", "escaped", "surrogate"]
)
def test_an_id_the_store_cannot_hold_is_invalid_session_id_at_create_and_read(
    kind: str, bad_id: str, tmp_path: Path
) -> None:
    env = Harness(BackendFactory(kind, tmp_path))
    try:
        if kind == "memory" and bad_id != "lone-\ud800-surrogate":
            env.coordinator().store.create(bad_id, meta=live_meta())  # memory holds any valid text
            return
        coordinator = env.coordinator()
        # A lone surrogate is not JSON text at all: the kernel's JSON gate refuses it first (typed too).
        refusal = AgentlogError if "\ud800" in bad_id else InvalidSessionIdError
        with pytest.raises(refusal) as info:
            coordinator.create(builders.header(bad_id))
        if refusal is InvalidSessionIdError:
            assert info.value.code == "INVALID_SESSION_ID" and "250-byte limit" in info.value.message
        with pytest.raises(refusal):
            coordinator.store.create(bad_id, meta=live_meta())
        for read in (coordinator.load, coordinator.inspect, coordinator.resume, coordinator.view):
            with pytest.raises(InvalidSessionIdError):
                read(bad_id)
        with pytest.raises(InvalidSessionIdError):
            coordinator.read_from(bad_id, 0)
        if kind != "memory":
            assert not store_root(env).exists() or not any(store_root(env).rglob("session.jsonl*"))
    finally:
        env.close()


def test_the_longest_storable_id_round_trips(jenv: Harness) -> None:
    longest = "i" * 250
    persist_closed_turn(jenv, longest)
    assert len(jenv.coordinator().load(longest).events) == 6
    with pytest.raises(InvalidSessionIdError, match="250-byte limit"):
        jenv.coordinator().load(longest + "i")


# --- for the command line: read-only stores, encoding detection, partial reads --------------------------------


def test_read_only_backend_creates_nothing_and_names_a_missing_store(jenv: Harness, tmp_path: Path) -> None:
    missing = tmp_path / "typo"
    with pytest.raises(StoreNotFoundError, match="does not exist") as info:
        JsonlBackend(missing, read_only=True)
    assert info.value.code == "STORE_NOT_FOUND" and not missing.exists()
    persist_closed_turn(jenv)
    path = log_path(jenv)
    with path.open("ab") as handle:
        handle.write(b"\x28\xb5\x2f" if _zstd(jenv) else b'{"ty')  # a torn tail a writer would repair
    before = snapshot(store_root(jenv))
    reader = JsonlBackend(store_root(jenv), compression="auto", read_only=True)
    coordinator = jenv.coordinator(backend=reader)
    assert [listing.id for listing in coordinator.list()] == [SID]
    assert len(coordinator.inspect(SID).events) == 6
    with pytest.raises(StorageAccessError) as info:
        coordinator.resume(SID)
    assert info.value.code == "STORAGE_READ_ONLY"
    with pytest.raises(StorageAccessError):
        reader.append_batch(builders.header("new"), builders.closed_turn(0), False)
    assert snapshot(store_root(jenv)) == before  # not even a lock file


def test_auto_compression_reads_a_store_whatever_its_encoding(jenv: Harness, tmp_path: Path) -> None:
    persist_closed_turn(jenv)
    expected = "zstd" if _zstd(jenv) else "none"
    assert detect_compression(store_root(jenv)) == expected
    auto = JsonlBackend(store_root(jenv), compression="auto", read_only=True)
    assert auto.compression == expected
    assert [listing.id for listing in auto.list_sessions()] == [SID]
    assert detect_compression(tmp_path / "nowhere") is None
    assert JsonlBackend(tmp_path / "empty", compression="auto").compression == "zstd"


def test_read_prefix_returns_the_valid_prefix_and_names_the_damage(jenv: Harness) -> None:
    events = _open_turn_lines(30)
    encoded = lines(*events)
    encoded[20] = b"{damaged"
    path = write_log(jenv, encoded[:12], encoded[12:])
    before = path.read_bytes()
    partial = jenv.backend().read_prefix(SID)
    assert isinstance(partial, PartialRead)
    assert partial.meta["id"] == SID and builders.seqs(partial.events) == list(range(20))
    assert isinstance(partial.damage, SessionPersistenceCorruptionError)
    assert partial.damage.location == str(path)
    if _zstd(jenv):  # the damaged frame starts after the header frame and the first batch frame
        assert partial.damage.offset is not None and partial.damage.offset > 0
    else:
        assert partial.damage.offset == before.index(b"{damaged")
    via = jenv.coordinator().read_prefix(SID)
    assert builders.seqs(via.events) == builders.seqs(partial.events) and via.damage is not None
    intact = jenv.coordinator()
    persist_closed_turn(jenv, "s2")
    clean = intact.read_prefix("s2")
    assert clean.damage is None and clean.torn_offset is None and len(clean.events) == 6
    assert path.read_bytes() == before
    assert jenv.backend().read_prefix("absent") is None
