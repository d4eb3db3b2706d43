"""The projection commands: ``ls`` from the cache, ``stats``, ``title``, ``reindex --projections``, and
``run``/``resume`` keeping the cache current and titling new sessions.

Sessions are recorded by the real ``run`` command against the local scripted ``DemoModelServer`` (real
HTTP, real client) or written directly through a coordinator with a fixed clock when a test needs exact
times; every store is a temporary directory. "No log read" is observed, not assumed: the coordinator's
reads are replaced by a spy (or a refusal) while the command runs.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

import agentlog as al
from _full_disk import fill, small_tmpfs
from agentlog.cli.commands import app
from agentlog.cli.projection_commands import LAST_ACTIVITY_UNIT, attach_projections
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.sqlite.backend import SqliteBackend
from agentlog.projection.cache_storage import cache_path_for
from agentlog.projection.registry import ProjectionRegistry
from agentlog.testing.demo_server import DemoModelServer, Reply, ToolCall, Usage

runner = CliRunner()

BACKENDS = ["jsonl", "sqlite"]

PROMPT = "What does \x1b[31mnotes.txt\x1b[0m say about the release plan?"
FALLBACK = "What does notes.txt say about"  # five words of the normalized prompt


def _script() -> list[Reply]:
    return [
        Reply(
            text="Reading.",
            tool_calls=[ToolCall("read_file", {"path": "notes.txt"}, id="call-1")],
            usage=Usage(100, 20),
        ),
        Reply(text="It says 42.", usage=Usage(150, 10)),
    ]


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DEEPSEEK_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    directory = tmp_path / "work"
    directory.mkdir()
    (directory / "notes.txt").write_text("the answer is 42\n")
    return directory


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


def _invoke(*args: str) -> Result:
    return runner.invoke(app, list(args))


def _json(*args: str) -> Any:
    result = _invoke(*args, "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    return orjson.loads(result.stdout)


def _record(store: Path, work: Path, kind: str, session_id: str = "s1", prompt: str = PROMPT) -> None:
    with DemoModelServer(_script()) as server:
        result = _invoke(
            "run", prompt, "--store", str(store), "--backend", kind, "--base-url", server.base_url,
            "--cwd", str(work), "--session-id", session_id,
        )  # fmt: skip
    assert result.exit_code == 0, result.output + result.stderr


def _backend(store: Path, kind: str) -> Any:
    if kind == "sqlite":
        store.mkdir(parents=True, exist_ok=True)
        return SqliteBackend(str(store / "sessions.sqlite3"))
    return JsonlBackend(str(store), compression="zstd")


def _rows(store: Path, kind: str = "jsonl", *extra: str) -> dict[str, dict[str, Any]]:
    document = _json("ls", "--store", str(store), "--backend", kind, *extra)
    return {row["id"]: row for row in document["sessions"]}


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
    """Every ``PersistenceCoordinator.read_from(session_id, from_seq)`` made while the test runs."""
    calls: list[tuple[str, int]] = []
    original = PersistenceCoordinator.read_from

    def spy(self: PersistenceCoordinator, session_id: str, from_seq: int) -> Any:
        calls.append((session_id, from_seq))
        return original(self, session_id, from_seq)

    monkeypatch.setattr(PersistenceCoordinator, "read_from", spy)
    yield calls


def _append_turn(store: Path, kind: str, session_id: str, turn: int) -> None:
    """A closed turn with one step, appended to the stored log by a coordinator with no cache attached."""
    sessions = al.SessionStore()
    coordinator = PersistenceCoordinator(sessions, _backend(store, kind))
    try:
        session = coordinator.resume(session_id)
        session.append("turn/start", {"turn": turn})
        session.append("user/message", al.user_message("and again", id=f"u{turn}"), {"surfaceOp": "append"})
        session.append("step/start", {"turn": turn, "step": 1})
        message = al.assistant_message(
            [al.text_block("again")], provider="deepseek", model="deepseek-chat", id=f"a{turn}"
        )
        session.append("assistant/message", {"turn": turn, "step": 1, "message": message}, {"surfaceOp": "append"})
        session.append("step/end", {"turn": turn, "step": 1})
        session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
        sessions.flush(session)
        sessions.dispose(session)
    finally:
        coordinator.close()


def _clock(when: int) -> Callable[[], int]:
    return lambda: when


def _write_direct(
    store: Path, ids_and_times: list[tuple[str, int]], *, cached: bool, cwd: str = "/work/project"
) -> None:
    """Sessions with a title and one event at a known time each (``cached``: with the CLI's projections)."""
    for session_id, when in ids_and_times:
        sessions = al.SessionStore(now=_clock(when))
        coordinator = PersistenceCoordinator(sessions, _backend(store, "jsonl"))
        projections = attach_projections(coordinator) if cached else None
        session = sessions.create(session_id, meta={"cwd": cwd})
        session.append(
            "session/title", {"title": f"title of {session_id}", "messageSeqs": [], "source": {"kind": "user"}}
        )
        sessions.flush(session)
        if projections is not None:
            projections.checkpoint(session)
        sessions.dispose(session)
        if projections is not None:
            projections.close()
        coordinator.close()


def _write_kind(store: Path, kind: str, ids_and_times: list[tuple[str, int]]) -> None:
    """:func:`_write_direct` (without the cache) into a store of either kind."""
    for session_id, when in ids_and_times:
        sessions = al.SessionStore(now=_clock(when))
        coordinator = PersistenceCoordinator(sessions, _backend(store, kind))
        session = sessions.create(session_id, meta={"cwd": "/work/project"})
        session.append(
            "session/title", {"title": f"title of {session_id}", "messageSeqs": [], "source": {"kind": "user"}}
        )
        sessions.flush(session)
        sessions.dispose(session)
        coordinator.close()


# --- run titles the session and fills the cache; ls serves it --------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
def test_run_titles_the_session_and_ls_shows_title_turns_tokens_and_last_activity(
    store: Path, work: Path, kind: str
) -> None:
    """``run`` appends the fallback title after the first prompt and leaves a current cache record:
    ``ls`` reports title, turns, tokens (the four usage buckets added up), events and last activity."""
    _record(store, work, kind)
    row = _rows(store, kind)["s1"]
    events = _json("show", "s1", "--store", str(store), "--backend", kind, "--log")["events"]
    titles = [event for event in events if event["type"] == "session/title"]
    assert [event["data"]["title"] for event in titles] == [FALLBACK]
    assert titles[0]["data"]["source"] == {"kind": "fallback"}
    assert row["title"] == FALLBACK
    assert row["turns"] == 1
    assert row["tokenUsage"] == {
        "uncachedInputTokens": 250,
        "outputTokens": 30,
        "cacheReadTokens": 0,
        "cacheWriteTokens": 0,
    }
    assert row["tokens"] == 280
    assert row["events"] == len(events)
    assert row["lastActivity"] == events[-1]["time"]
    assert cache_path_for(_backend(store, kind)) is not None
    assert os.path.isfile(str(cache_path_for(_backend(store, kind))))


@pytest.mark.parametrize("kind", BACKENDS)
def test_ls_serves_a_current_cache_row_without_reading_the_log(
    store: Path, work: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record ``run`` wrote is bound to the stored revision: ``ls`` serves it with every log read
    refused (a read would fail the command's figures, which would then be ``null``)."""
    _record(store, work, kind)
    expected = _rows(store, kind)["s1"]

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("ls read a log")

    monkeypatch.setattr(PersistenceCoordinator, "read_from", refuse)
    monkeypatch.setattr(PersistenceCoordinator, "view", refuse)
    row = _rows(store, kind)["s1"]
    assert row == expected and row["title"] == FALLBACK and row["turns"] == 1


@pytest.mark.parametrize("kind", BACKENDS)
def test_ls_refreshes_a_stale_row_from_the_tail_and_writes_it_back(
    store: Path, work: Path, kind: str, reads: list[tuple[str, int]]
) -> None:
    """A turn appended by a host without the cache makes the row stale: ``ls`` reads only the tail past
    the row (from its anchored floor, not seq 0), shows the new figures, and the next ``ls`` reads nothing."""
    _record(store, work, kind)
    before = _rows(store, kind)["s1"]
    _append_turn(store, kind, "s1", 2)
    reads.clear()
    after = _rows(store, kind)["s1"]
    assert after["turns"] == 2 and after["events"] > before["events"]
    assert after["title"] == FALLBACK
    assert [session for session, _ in reads] == ["s1"]
    assert reads[0][1] > 0  # the tail, not the whole log
    reads.clear()
    assert _rows(store, kind)["s1"] == after
    assert reads == []


def test_ls_cold_reads_a_session_missing_from_an_existing_cache(store: Path, reads: list[tuple[str, int]]) -> None:
    """A session written without the cache has no row: ``ls`` folds its log once and stores the row."""
    _write_direct(store, [("cached", 1_700_000_000_000)], cached=True)
    _write_direct(store, [("uncached", 1_700_000_001_000)], cached=False)
    rows = _rows(store)
    assert rows["uncached"]["title"] == "title of uncached"
    assert rows["cached"]["title"] == "title of cached"
    assert reads == [("uncached", 0)]
    reads.clear()
    _rows(store)
    assert reads == []


def test_ls_without_a_cache_folds_each_log_in_memory_and_creates_nothing(
    store: Path, reads: list[tuple[str, int]]
) -> None:
    """A store that never had a cache (its logs written by code that keeps none): ``ls`` folds each log
    in memory and shows its true figures, and creates no cache file (nor does ``stats``)."""
    _write_direct(store, [("s0", 1_700_000_000_000)], cached=False)
    row = _rows(store)["s0"]
    assert row["title"] == "title of s0" and row["turns"] == 0 and row["events"] == 1
    assert row["lastActivity"] == 1_700_000_000_000
    assert row["tokens"] == 0  # no model step at all: nothing was spent (known), not unknown
    assert reads == [("s0", 0)]
    stats = _json("stats", "s0", "--store", str(store))
    assert stats["values"]["title"] == "title of s0"
    assert not (store / ".projections.sqlite").exists()


def test_ls_never_serves_a_row_of_another_log_lifecycle(store: Path) -> None:
    """A session id deleted and recreated (other ``cwd``) keeps the old record in the cache: ``ls``
    must not show the old title for the new log."""
    _write_direct(store, [("s0", 1_700_000_000_000)], cached=True)
    assert _rows(store)["s0"]["title"] == "title of s0"
    for path in store.glob("*/s0"):
        for child in path.iterdir():
            child.unlink()
        path.rmdir()
    sessions = al.SessionStore(now=lambda: 1_700_000_005_000)
    coordinator = PersistenceCoordinator(sessions, _backend(store, "jsonl"))
    session = sessions.create("s0", meta={"cwd": "/elsewhere"})
    session.append("turn/start", {"turn": 1})
    sessions.flush(session)
    sessions.dispose(session)
    coordinator.close()
    row = _rows(store)["s0"]
    assert row["cwd"] == "/elsewhere"
    assert row["title"] is None and row["events"] == 1 and row["lastActivity"] == 1_700_000_005_000


@pytest.mark.parametrize(
    ("kind", "restore"), [("sqlite", "copy-over"), ("sqlite", "replace"), ("jsonl", "copy-over"), ("jsonl", "replace")]
)
def test_ls_and_stats_of_a_store_restored_from_a_backup_show_the_restored_logs_figures(
    store: Path, work: Path, kind: str, restore: str
) -> None:
    """A store restored from a backup goes back to an earlier log, which the next batch continues
    differently: a cached row folded from the log the restore threw away must not be served, nor
    seed the fold of the restored one. Two turns are written, the log is backed up, a title is set and
    ``ls`` caches that row; the backup is restored (copied over the file in place, or renamed over it)
    and one batch of three turns is appended: ``ls`` and ``stats`` show the stored log's figures.

    (SQLite: the restored database repeats the incarnation and the counter of the revision the row
    was verified against; both stores: the row's cut lies inside the restored log.)"""
    from agentlog.cli.projection_commands import cli_registry

    _record(store, work, kind)
    _append_turn(store, kind, "s1", 2)
    if kind == "sqlite":
        (log,) = [store / "sessions.sqlite3"]
        assert not Path(str(log) + "-wal").exists()  # closed cleanly: the file alone is a backup
    else:
        (log,) = store.glob("*/s1/session.jsonl.zstd")
    backup = log.read_bytes()
    backend = ["--store", str(store), "--backend", kind]
    assert _json("title", "s1", "Title before restore", *backend)["title"] == "Title before restore"
    cached = _rows(store, kind)["s1"]
    assert cached["title"] == "Title before restore" and cached["turns"] == 2
    if restore == "copy-over":
        with open(log, "r+b") as fh:
            fh.write(backup)
            fh.truncate()
    else:
        staged = log.with_name("restored.tmp")
        staged.write_bytes(backup)
        staged.chmod(0o600)
        os.replace(staged, log)
    sessions = al.SessionStore()
    coordinator = PersistenceCoordinator(sessions, _backend(store, kind))
    try:
        session = coordinator.resume("s1")
        for turn in (3, 4, 5):
            for type_, data, intent in _turn_events(turn):
                session.append(type_, data, intent)
        sessions.flush(session)  # one batch
        expected = cli_registry().snapshot(session)
        sessions.dispose(session)
    finally:
        coordinator.close()
    values = expected["values"]
    assert values["title"] == FALLBACK and values["sessionStats"]["turns"] == 5
    row = _rows(store, kind)["s1"]
    assert row["title"] == FALLBACK
    assert row["turns"] == 5
    assert row["events"] == expected["asOfSeq"] + 1
    assert row["lastActivity"] == values["lastActivity"]
    assert _json("stats", "s1", *backend)["values"] == values


# --- order, paging and the table ---------------------------------------------------------------------------


def test_ls_sorts_newest_first_and_the_cursor_continues_in_that_order(store: Path) -> None:
    """Last activity decides the order (newest first), ties by id; ``--cursor`` continues after an id."""
    _write_direct(
        store,
        [("a", 1_700_000_001_000), ("b", 1_700_000_003_000), ("c", 1_700_000_002_000), ("d", 1_700_000_003_000)],
        cached=True,
    )
    document = _json("ls", "--store", str(store), "--limit", "2")
    assert [row["id"] for row in document["sessions"]] == ["b", "d"]
    assert document["nextCursor"] == "d"
    rest = _json("ls", "--store", str(store), "--limit", "2", "--cursor", "d")
    assert [row["id"] for row in rest["sessions"]] == ["c", "a"]
    assert rest["nextCursor"] is None


def test_ls_table_keeps_full_ids_and_titles_when_not_a_terminal(store: Path) -> None:
    """Piped, the table is as wide as its longest cell: a long id and its title are printed whole."""
    long_id = "session-" + "x" * 70
    _write_direct(store, [(long_id, 1_700_000_000_000)], cached=True)
    result = runner.invoke(app, ["ls", "--store", str(store)], env={"COLUMNS": "60"})
    assert result.exit_code == 0, result.output
    assert long_id in result.stdout and f"title of {long_id}" in result.stdout
    assert "…" not in result.stdout
    assert "last activity" in result.stdout and "2023-11-14 22:13:20" in result.stdout


# --- stats ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
def test_stats_json_is_the_snapshot_with_every_units_view(store: Path, work: Path, kind: str) -> None:
    """``stats --json`` carries every unit's view, in registration order, at the log's last seq."""
    _record(store, work, kind)
    document = _json("stats", "s1", "--store", str(store), "--backend", kind)
    events = _json("show", "s1", "--store", str(store), "--backend", kind, "--log")["events"]
    assert document["sessionId"] == "s1" and document["asOfSeq"] == events[-1]["seq"]
    values = document["values"]
    keys = ["tokenUsage", "contextPressure", "contextBreakdown", "sessionStats", "title", LAST_ACTIVITY_UNIT.key]
    assert list(values) == [*keys, "usageSteps", "labels", "lastTurn"]
    assert values["labels"] == {"labels": {}, "tags": []}
    assert values["lastTurn"] == "ended"  # the recorded turn completed
    assert values["usageSteps"] == 2  # both steps reported their usage: the token figures are known
    assert values["sessionStats"]["turns"] == 1 and values["sessionStats"]["steps"] == 2
    assert set(values["sessionStats"]) == {
        "turns",
        "steps",
        "llmMs",
        "toolMs",
        "ttftMs",
        "ttftSteps",
        "decodeMs",
        "decodeTokens",
    }
    assert values["tokenUsage"]["outputTokens"] == 30
    assert values["title"] == FALLBACK


def test_stats_table_is_readable(store: Path, work: Path) -> None:
    _record(store, work, "jsonl")
    result = _invoke("stats", "s1", "--store", str(store))
    assert result.exit_code == 0, result.stderr
    for label in ("title", FALLBACK, "turns", "steps", "time in the model", "time in tools", "tokens: total", "280"):
        assert label in result.stdout, label


def test_stats_of_a_missing_session_is_session_not_found(store: Path) -> None:
    _write_direct(store, [("s0", 1_700_000_000_000)], cached=True)
    result = _invoke("stats", "nope", "--store", str(store), "--json")
    assert result.exit_code == 1
    assert orjson.loads(result.stderr)["error"]["code"] == "SESSION_NOT_FOUND"


# --- title ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
def test_title_rename_is_a_pinned_user_title_appended_durably(store: Path, work: Path, kind: str) -> None:
    """``title ID NEW`` appends a normalized ``{kind: user}`` title; ``ls`` shows it at once (the cache
    record was rewritten), and a later prompt does not replace the pinned title."""
    _record(store, work, kind)
    backend = ["--store", str(store), "--backend", kind]
    renamed = _json("title", "s1", "Release\u00a0plan \x1b[1mreview\x1b[0m", *backend)
    assert renamed["title"] == "Release plan review" and renamed["source"] == {"kind": "user"}
    assert renamed["messageSeqs"] == []
    shown = _json("title", "s1", *backend)
    assert shown == renamed
    assert _rows(store, kind)["s1"]["title"] == "Release plan review"
    with DemoModelServer([Reply(text="Sure.")]) as server:
        result = _invoke("resume", "s1", "one more question", *backend, "--base-url", server.base_url)
    assert result.exit_code == 0, result.output + result.stderr
    assert _json("title", "s1", *backend)["title"] == "Release plan review"
    assert _rows(store, kind)["s1"]["turns"] == 2
    verify = _json("verify", *backend)
    assert verify["ok"] is True


def test_title_shows_untitled_and_the_text_output(store: Path) -> None:
    _write_direct(store, [("s0", 1_700_000_000_000)], cached=False)
    sessions = al.SessionStore()
    coordinator = PersistenceCoordinator(sessions, _backend(store, "jsonl"))
    bare = sessions.create("bare", meta={"cwd": "/w"})
    bare.append("turn/start", {"turn": 1})
    sessions.flush(bare)
    sessions.dispose(bare)
    coordinator.close()
    assert _json("title", "bare", "--store", str(store))["title"] is None
    assert _invoke("title", "bare", "--store", str(store)).stdout.strip() == "(untitled)  (none)"
    assert _invoke("title", "s0", "--store", str(store)).stdout.strip() == "title of s0  (user)"


def test_title_refuses_an_empty_rename_and_appends_nothing(store: Path) -> None:
    _write_direct(store, [("s0", 1_700_000_000_000)], cached=True)
    before = _json("show", "s0", "--store", str(store), "--log")["events"]
    result = _invoke("title", "s0", " \u200b\x1b[0m ", "--store", str(store), "--json")
    assert result.exit_code == 1
    assert orjson.loads(result.stderr)["error"]["code"] == "SESSION_TITLE_INVALID"
    after = _json("show", "s0", "--store", str(store), "--log")["events"]
    assert [e["type"] for e in after if e["type"] != "session/end-seed"] == [e["type"] for e in before]
    assert _json("title", "s0", "--store", str(store))["title"] == "title of s0"


def test_title_of_a_missing_session_is_session_not_found(store: Path) -> None:
    _write_direct(store, [("s0", 1_700_000_000_000)], cached=True)
    for argv in (["title", "nope"], ["title", "nope", "New"]):
        result = _invoke(*argv, "--store", str(store), "--json")
        assert result.exit_code == 1
        assert orjson.loads(result.stderr)["error"]["code"] == "SESSION_NOT_FOUND"


# --- reindex ---------------------------------------------------------------------------------------------------


def test_reindex_rebuilds_a_damaged_cache_and_reports_every_session(store: Path) -> None:
    """A cache file overwritten with garbage is dropped and rebuilt from the logs; ``ls`` then serves
    every session from the rebuilt file."""
    _write_direct(store, [("a", 1_700_000_001_000), ("b", 1_700_000_002_000)], cached=True)
    (store / ".projections.sqlite").write_bytes(b"not a database at all" * 100)
    summary = _json("reindex", "--projections", "--store", str(store))
    assert summary == {
        "sessions": 2,
        "indexed": 2,
        "failed": [],
        "cache": str((store / ".projections.sqlite").absolute()),
    }
    rows = _rows(store)
    assert rows["a"]["title"] == "title of a" and rows["b"]["title"] == "title of b"
    text = _invoke("reindex", "--projections", "--store", str(store))
    assert text.exit_code == 0 and "projection cache rebuilt: 2 of 2 sessions" in text.stdout


def test_reindex_reports_an_unreadable_log_and_exits_1(store: Path) -> None:
    _write_direct(store, [("a", 1_700_000_001_000), ("b", 1_700_000_002_000)], cached=False)
    (log,) = store.glob("*/b/session.jsonl.zstd")
    data = bytearray(log.read_bytes())
    data[-8] ^= 0xFF
    log.write_bytes(bytes(data))
    result = _invoke("reindex", "--projections", "--store", str(store), "--json")
    assert result.exit_code == 1
    summary = orjson.loads(result.stdout)
    assert summary["indexed"] == 1 and [item["id"] for item in summary["failed"]] == ["b"]
    assert summary["failed"][0]["error"]["code"] == "SESSION_CORRUPT"
    rows = _rows(store)
    assert rows["a"]["title"] == "title of a" and rows["b"]["title"] is None and rows["b"]["error"] is None


def test_reindex_needs_projections(store: Path) -> None:
    _write_direct(store, [("a", 1_700_000_001_000)], cached=False)
    result = _invoke("reindex", "--store", str(store), "--json")
    assert result.exit_code == 1
    assert orjson.loads(result.stderr)["error"]["code"] == "INVALID_OPTION"
    assert not (store / ".projections.sqlite").exists()


def test_reindex_of_a_missing_store_is_store_not_found(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    result = _invoke("reindex", "--projections", "--store", str(missing), "--json")
    assert result.exit_code == 1
    assert orjson.loads(result.stderr)["error"]["code"] == "STORE_NOT_FOUND"
    assert not missing.exists()


def _files(store: Path) -> dict[str, bytes]:
    """Every file of the store but the projection cache's."""
    return {
        str(path.relative_to(store)): path.read_bytes()
        for path in sorted(store.rglob("*"))
        if path.is_file() and "projections.sqlite" not in path.name
    }


@pytest.mark.parametrize("kind", BACKENDS)
def test_reindex_projections_on_a_full_disk_is_a_typed_storage_full_error_and_leaves_the_logs(kind: str) -> None:
    """A store on a really full file system: ``reindex --projections`` cannot build the cache file. That
    is ``STORAGE_FULL`` naming the file and the remedy (``--json``: the error document), never a
    traceback; the logs are untouched, and with space freed the same command rebuilds the cache."""
    with small_tmpfs() as disk:
        store = disk / "store"
        _write_kind(store, kind, [("a", 1_700_000_001_000), ("b", 1_700_000_002_000)])
        before = _files(store)
        filler = fill(disk)
        result = _invoke("reindex", "--projections", "--store", str(store), "--backend", kind, "--json")
        assert result.exit_code == 1, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        error = orjson.loads(result.stderr)["error"]
        assert error["code"] == "STORAGE_FULL", error
        assert "projections.sqlite" in error["message"] and "free space" in error["message"]
        text = _invoke("reindex", "--projections", "--store", str(store), "--backend", kind)
        assert text.exit_code == 1 and "STORAGE_FULL" in text.stderr and "Traceback" not in text.output
        assert _files(store) == before
        filler.unlink()
        summary = _json("reindex", "--projections", "--store", str(store), "--backend", kind)
        assert summary["indexed"] == 2 and summary["failed"] == []
        assert _rows(store, kind)["b"]["title"] == "title of b"


# --- property: whatever the cache holds, ls shows the fold of the stored log ----------------------------------


def _turn_events(turn: int) -> list[tuple[str, Any, dict[str, Any] | None]]:
    message = al.assistant_message(
        [al.text_block(f"answer {turn}")], provider="deepseek", model="deepseek-chat", id=f"a{turn}"
    )
    return [
        ("turn/start", {"turn": turn}, None),
        ("user/message", al.user_message(f"question {turn}", id=f"u{turn}"), {"surfaceOp": "append"}),
        ("step/start", {"turn": turn, "step": 1}, None),
        ("assistant/message", {"turn": turn, "step": 1, "message": message}, {"surfaceOp": "append"}),
        ("step/end", {"turn": turn, "step": 1}, None),
        ("turn/end", {"turn": turn, "reason": {"kind": "completed"}}, None),
    ]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    turns=st.integers(min_value=1, max_value=4),
    cut=st.integers(min_value=0, max_value=30),
    titles=st.lists(st.sampled_from(["alpha", "beta", "gamma"]), max_size=3),
)
def test_property_ls_figures_equal_a_fresh_fold_whatever_the_cache_row(
    tmp_path_factory: pytest.TempPathFactory, turns: int, cut: int, titles: list[str]
) -> None:
    """A log written with the cache attached up to a random event, then continued by a host without
    it (the row goes stale at a random point, mid-turn included): ``ls`` shows exactly the figures of a
    fresh fold of the stored log — the cache is possibly stale, never wrong — and so does ``stats``."""
    from agentlog.cli.projection_commands import cli_registry

    store = tmp_path_factory.mktemp("prop") / "store"
    plan: list[tuple[str, Any, dict[str, Any] | None]] = []
    for turn in range(1, turns + 1):
        plan += _turn_events(turn)
        if titles and turn <= len(titles):
            plan.append(
                ("session/title", {"title": titles[turn - 1], "messageSeqs": [], "source": {"kind": "user"}}, None)
            )
    cut = min(cut, len(plan))
    sessions = al.SessionStore()
    coordinator = PersistenceCoordinator(sessions, _backend(store, "jsonl"))
    projections = attach_projections(coordinator)
    session = sessions.create("p", meta={"cwd": "/w"})
    for type_, data, intent in plan[:cut]:
        session.append(type_, data, intent)
    sessions.flush(session)
    projections.checkpoint(session)
    projections.close()  # detached: the rest reaches the log only
    for type_, data, intent in plan[cut:]:
        session.append(type_, data, intent)
    sessions.flush(session)
    expected = cli_registry().snapshot(session)
    sessions.dispose(session)
    coordinator.close()
    row = _rows(store)["p"]
    values = expected["values"]
    assert row["events"] == expected["asOfSeq"] + 1
    assert row["title"] == values["title"]
    assert row["turns"] == values["sessionStats"]["turns"] == turns
    assert values["usageSteps"] == 0  # these steps report no usage: the zero buckets are no figure
    assert row["tokenUsage"] is None and row["tokens"] is None
    assert row["lastActivity"] == values["lastActivity"]
    assert _json("stats", "p", "--store", str(store))["values"] == values


@pytest.mark.parametrize("kind", BACKENDS)
def test_ls_serves_the_stored_views_and_a_cache_without_views_the_same(
    store: Path, work: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run`` stores the served views beside the rows: ``ls`` shows them without viewing a single row
    (``view_checkpoint`` refused); a cache written before views were stored (views columns empty)
    gives the very same rows from the parsed rows — and neither reads a log."""
    _record(store, work, kind)
    expected = _rows(store, kind)["s1"]

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("not expected on this path")

    with monkeypatch.context() as patch:
        patch.setattr(PersistenceCoordinator, "read_from", refuse)
        patch.setattr(ProjectionRegistry, "view_checkpoint", refuse)
        assert _rows(store, kind)["s1"] == expected
    conn = sqlite3.connect(str(cache_path_for(_backend(store, kind))))
    try:
        assert conn.execute("SELECT count(*) FROM sessions WHERE views IS NOT NULL").fetchone()[0] == 1
        conn.execute("UPDATE sessions SET views = NULL, views_digest = NULL")
        conn.commit()
    finally:
        conn.close()
    monkeypatch.setattr(PersistenceCoordinator, "read_from", refuse)
    assert _rows(store, kind)["s1"] == expected


def test_ls_of_a_sqlite_store_with_a_cache_creates_no_wal_beside_the_store(store: Path, work: Path) -> None:
    """Opening the cache reads the store's id from its database: a read-only ``ls`` must not leave
    ``-wal``/``-shm`` files beside a cleanly closed SQLite store (a plain ``mode=ro`` connection would)."""
    _record(store, work, "sqlite")
    database = store / "sessions.sqlite3"
    assert not Path(f"{database}-wal").exists() and not Path(f"{database}-shm").exists()
    assert _rows(store, "sqlite")["s1"]["turns"] == 1
    assert not Path(f"{database}-wal").exists() and not Path(f"{database}-shm").exists()
