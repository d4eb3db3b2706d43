"""JSONL backend, raw encoding (spec ``persistence.md`` §4, checklist §8.6) plus format-level extras.

Every test works on real files under ``tmp_path``. The only interpositions are the ones the reference
tests use too: ``os.fsync`` fails to inject a disk error, and a few ``os.stat`` *spies* that delegate to
the real call but first change the file for real (to simulate a concurrent writer between two stats).
Tests named after a checklist item carry ``# spec 8.6 #<n>``.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentlog.errors import (
    PersistenceError,
    SessionFormatUnsupportedError,
    SessionLockedError,
    SessionPersistenceCorruptionError,
    StorageAccessError,
)
from agentlog.kernel.jsoncodec import dumps, loads
from agentlog.persistence.backend import Backend
from agentlog.persistence.jsonl._scanner import SessionLogScanner, scan_log
from agentlog.persistence.jsonl.backend import (
    AppendRollbackError,
    JsonlBackend,
    TornMarker,
    encode_segment,
    project_key,
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
