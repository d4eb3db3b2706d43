"""The query commands: ``search`` (cross-session and ``--session``), ``trace`` (lineage and ``--seq``
provenance) and ``reindex --search``.

Every store is a real JSONL or SQLite store in a temporary directory, written through a real
coordinator; every command runs through Typer's ``CliRunner`` (a fresh ``SqliteSearch`` per command, as
in separate processes), so the command's own cursor is what pages. The index file is observed on disk:
``search`` and ``reindex --search`` create it, no other command does.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

import agentlog as al
from agentlog.cli.commands import app
from agentlog.cli.query_commands import (
    decode_cli_cursor,
    encode_cli_cursor,
    highlight_spans,
    highlighted,
)
from agentlog.errors import SessionQueryError
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.sqlite.backend import SqliteBackend

runner = CliRunner()

BACKENDS = ["jsonl", "sqlite"]
Turn = tuple[str, str]  # (user text, assistant text)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


def _backend(store: Path, kind: str) -> Any:
    if kind == "sqlite":
        store.mkdir(parents=True, exist_ok=True)
        return SqliteBackend(str(store / "sessions.sqlite3"))
    return JsonlBackend(str(store), compression="zstd")


def _index(store: Path, kind: str) -> Path:
    return store / ("sessions.sqlite3.search.sqlite3" if kind == "sqlite" else ".agentlog-search.sqlite3")


def _turn(session: al.Session, number: int, user: str, answer: str) -> None:
    session.append("turn/start", {"turn": number})
    session.append("user/message", al.user_message(user, id=f"u{number}"), {"surfaceOp": "append"})
    session.append("step/start", {"turn": number, "step": 1})
    message = al.assistant_message([al.text_block(answer)], provider="deepseek", model="deepseek-chat", id=f"a{number}")
    session.append("assistant/message", {"turn": number, "step": 1, "message": message}, {"surfaceOp": "append"})
    session.append("step/end", {"turn": number, "step": 1})
    session.append("turn/end", {"turn": number, "reason": {"kind": "completed"}})


def _write(
    store: Path,
    kind: str,
    session_id: str,
    turns: Sequence[Turn],
    *,
    cwd: str = "/work/a",
    when: int = 1_700_000_000_000,
    extra: Callable[[al.Session], None] | None = None,
) -> None:
    """One stored session of closed turns (a fixed clock, so ranking ties are by seq and id)."""
    sessions = al.SessionStore(now=lambda: when)
    coordinator = PersistenceCoordinator(sessions, _backend(store, kind))
    try:
        session = sessions.create(session_id, meta={"cwd": cwd})
        for number, (user, answer) in enumerate(turns, start=1):
            _turn(session, number, user, answer)
        if extra is not None:
            extra(session)
        sessions.flush(session)
        sessions.dispose(session)
    finally:
        coordinator.close()


def _summarize(session: al.Session) -> None:
    """A compaction-style replacement: seqs 1..3 (the first prompt and answer) become one summary."""
    summary = al.user_message("Summary: the database migration ran in staging", id="summary")
    session.append(
        "user/message", summary, {"surfaceOp": {"op": "replace", "start": 1, "end": 3}, "sourceEventSeqs": [1, 3]}
    )


def _lineage(store: Path, kind: str) -> None:
    """parent (with a summary replacing its first turn) → child → grandchild, and an unrelated session."""
    sessions = al.SessionStore(now=lambda: 1_700_000_000_000)
    coordinator = PersistenceCoordinator(sessions, _backend(store, kind))
    try:
        parent = sessions.create("parent", meta={"cwd": "/work/a"})
        _turn(parent, 1, "where did the agent run that migration?", "It ran the database migration in staging.")
        _turn(parent, 2, "会话日志在哪里", "日志保存在会话目录里。")
        _summarize(parent)
        sessions.flush(parent)
        child = sessions.fork(parent, child_id="child")
        _turn(child, 3, "and the rollback plan for the migration?", "Rollback: restore the snapshot.")
        sessions.flush(child)
        grandchild = sessions.fork(child, child_id="grandchild")
        sessions.flush(grandchild)
        other = sessions.create("other", meta={"cwd": "/work/b"})
        _turn(other, 1, "alpha beta gamma", "café crème with alpha beta")
        sessions.flush(other)
        for session in (parent, child, grandchild, other):
            sessions.dispose(session)
    finally:
        coordinator.close()


def _invoke(*args: str) -> Result:
    return runner.invoke(app, list(args))


def _json(*args: str) -> Any:
    result = _invoke(*args, "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    return orjson.loads(result.stdout)


def _error(*args: str) -> dict[str, Any]:
    result = _invoke(*args, "--json")
    assert result.exit_code == 1, result.stdout + result.stderr
    assert result.stdout == ""
    error: dict[str, Any] = orjson.loads(result.stderr)["error"]
    assert error["message"]
    return error


def _at(store: Path, kind: str) -> list[str]:
    return ["--store", str(store), "--backend", kind]


def _files(store: Path) -> dict[str, bytes]:
    """Every file of the store but the search index (and the locks directory, which readers never use)."""
    out = {}
    for path in sorted(store.rglob("*")):
        if path.is_file() and "search.sqlite3" not in path.name and ".agentlog-search" not in path.name:
            out[str(path.relative_to(store))] = path.read_bytes()
    return out


# --- search ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
def test_search_finds_hits_across_sessions_with_the_seq_to_open_and_creates_the_index(store: Path, kind: str) -> None:
    _lineage(store, kind)
    before = _files(store)
    assert not _index(store, kind).exists()
    result = _invoke("search", "migration", *_at(store, kind))
    assert result.exit_code == 0, result.stdout + result.stderr
    for session_id in ("parent", "child", "grandchild"):
        assert session_id in result.stdout
    assert "other" not in result.stdout
    assert "open a hit: agentlog show " in result.stdout and " --at " in result.stdout
    assert "agentlog trace " in result.stdout and " --seq " in result.stdout
    assert _index(store, kind).is_file()
    assert _files(store) == before  # the store itself is untouched: only the index was written


@pytest.mark.parametrize("kind", BACKENDS)
def test_search_json_prints_the_result_shape(store: Path, kind: str) -> None:
    _lineage(store, kind)
    document = _json("search", "alpha beta", *_at(store, kind))
    assert set(document) == {"items", "skipped"}  # one hit: no nextCursor
    assert document["skipped"] == []
    (item,) = document["items"]
    assert set(item) == {"header", "live", "persisted", "bestMatch"}
    assert item["header"]["id"] == "other" and item["header"]["cwd"] == "/work/b"
    assert item["live"] is False and item["persisted"] is True
    hit = item["bestMatch"]
    assert set(hit) == {"sessionId", "seq", "type", "time", "surface", "snippet"}
    assert hit["sessionId"] == "other" and hit["surface"] == "current"
    assert "alpha beta" in hit["snippet"]


@pytest.mark.parametrize("kind", BACKENDS)
def test_search_with_session_searches_its_events(store: Path, kind: str) -> None:
    _lineage(store, kind)
    document = _json("search", "migration", "--session", "parent", *_at(store, kind))
    assert document["session"]["id"] == "parent"
    hits = document["items"]
    assert {hit["sessionId"] for hit in hits} == {"parent"}
    assert all(set(hit) == {"sessionId", "seq", "type", "time", "surface", "snippet"} for hit in hits)
    assert {hit["seq"] for hit in hits} == {1, 3, 12}  # the prompt, the answer and the summary
    table = _invoke("search", "migration", "--session", "parent", *_at(store, kind))
    assert table.exit_code == 0 and "hits in session parent" in table.stdout and "shadowed" in table.stdout


@pytest.mark.parametrize("kind", BACKENDS)
def test_search_snippets_have_the_index_default_length(store: Path, kind: str) -> None:
    """``search`` cuts snippets where the original engine and :class:`SqliteSearch` do (240 code points,
    defined once): a page of the command and of the index over the same store show the same snippets."""
    from agentlog.query.sqlite import SNIPPET_CHARS, SqliteSearch

    words = " ".join(f"w{n:03d}" for n in range(150))  # 749 code points, the match in the middle
    _write(store, kind, "long", [(f"{words[:300]} needle {words[300:]}", "ok")])
    sessions = _json("search", "needle", *_at(store, kind))
    events = _json("search", "needle", "--session", "long", *_at(store, kind))
    (snippet,) = {item["bestMatch"]["snippet"] for item in sessions["items"]} | {
        hit["snippet"] for hit in events["items"]
    }
    assert SNIPPET_CHARS == 240
    assert len(snippet) == SNIPPET_CHARS and "needle" in snippet
    coordinator = PersistenceCoordinator(al.SessionStore(), _backend(store, kind))
    search = SqliteSearch(coordinator, path=":memory:")
    try:
        assert search.search_events(session_id="long", query="needle")["items"][0]["snippet"] == snippet
    finally:
        search.close()
        coordinator.close()


def test_search_surface_and_type_filters(store: Path) -> None:
    _lineage(store, "jsonl")
    shadowed = _json("search", "migration", "--session", "parent", "--surface", "shadowed", *_at(store, "jsonl"))
    assert [(hit["seq"], hit["surface"]) for hit in shadowed["items"]] == [(1, "shadowed"), (3, "shadowed")]
    current = _json("search", "migration", "--session", "parent", "--surface", "current", *_at(store, "jsonl"))
    assert [hit["seq"] for hit in current["items"]] == [12]
    answers = _json("search", "migration", "--type", "assistant/message", *_at(store, "jsonl"))
    assert {item["bestMatch"]["type"] for item in answers["items"]} == {"assistant/message"}
    both = _json(
        "search", "migration", "--session", "parent", "--type", "assistant/message", "--type", "tool/result",
        "--surface", "current", "--surface", "shadowed", *_at(store, "jsonl"),
    )  # fmt: skip
    assert [hit["seq"] for hit in both["items"]] == [3]
    error = _error("search", "migration", "--surface", "hidden", *_at(store, "jsonl"))
    assert error["code"] == "SESSION_QUERY_INVALID_FILTER"


def test_search_cwd_filter(store: Path) -> None:
    _lineage(store, "jsonl")
    document = _json("search", "alpha", "--cwd", "/work/b", *_at(store, "jsonl"))
    assert [item["header"]["id"] for item in document["items"]] == ["other"]
    assert _json("search", "migration", "--cwd", "/work/b", *_at(store, "jsonl")) == {"items": [], "skipped": []}
    many = _json("search", "migration", "--cwd", "/work/b", "--cwd", "/work/a", *_at(store, "jsonl"))
    assert {item["header"]["id"] for item in many["items"]} == {"parent", "child", "grandchild"}
    assert _error("search", "x", "--cwd", "/w", "--session", "parent", *_at(store, "jsonl"))["code"] == "INVALID_OPTION"


def test_search_chinese_query_matches_inside_a_longer_run(store: Path) -> None:
    _lineage(store, "jsonl")
    document = _json("search", "日志", "--session", "parent", *_at(store, "jsonl"))
    assert [hit["seq"] for hit in document["items"]]
    assert all("日志" in hit["snippet"] for hit in document["items"])
    table = _invoke("search", "日志", *_at(store, "jsonl"))
    assert table.exit_code == 0 and "parent" in table.stdout


def _many(store: Path, kind: str, count: int) -> None:
    for index in range(count):
        _write(store, kind, f"s{index:02d}", [(f"the needle number {index} " + "padding " * index, "ok")])


@pytest.mark.parametrize("kind", BACKENDS)
def test_search_cursor_pages_through_every_hit_once(store: Path, kind: str) -> None:
    _many(store, kind, 7)
    seen: list[str] = []
    pages = 0
    argv = ["search", "needle", "--limit", "3", *_at(store, kind)]
    cursor: list[str] = []
    while True:
        document = _json(*argv, *cursor)
        pages += 1
        seen += [item["header"]["id"] for item in document["items"]]
        if "nextCursor" not in document:
            break
        assert len(document["items"]) == 3
        cursor = ["--cursor", document["nextCursor"]]
    assert pages == 3
    assert seen == [f"s{index:02d}" for index in range(7)]  # ranked by the shorter text first
    # The same within one session's events.
    _write(store, kind, "long", [(f"needle {n}", f"needle again {n}") for n in range(4)])
    events: list[int] = []
    cursor = []
    while True:
        document = _json("search", "needle", "--session", "long", "--limit", "3", *_at(store, kind), *cursor)
        events += [hit["seq"] for hit in document["items"]]
        if "nextCursor" not in document:
            break
        cursor = ["--cursor", document["nextCursor"]]
    assert sorted(events) == sorted(set(events)) and len(events) == 8


def test_search_table_prints_how_to_get_the_next_page(store: Path) -> None:
    _many(store, "jsonl", 3)
    result = _invoke("search", "needle", "--limit", "2", "--store", str(store))
    assert result.exit_code == 0
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("more: ")]
    argv = line.removeprefix("more: agentlog ").split(" ")
    assert argv[:4] == ["search", "needle", "--limit", "2"] and argv[-2] == "--cursor"
    follow = _json(*argv)
    assert [item["header"]["id"] for item in follow["items"]] == ["s02"]


def test_search_cursor_of_another_request_or_forged_is_invalid(store: Path) -> None:
    _many(store, "jsonl", 3)
    first = _json("search", "needle", "--limit", "1", *_at(store, "jsonl"))
    cursor = first["nextCursor"]
    for argv in (
        ["search", "padding", "--limit", "1", "--cursor", cursor],
        ["search", "needle", "--limit", "2", "--cursor", cursor],
        ["search", "needle", "--limit", "1", "--type", "user/message", "--cursor", cursor],
        ["search", "needle", "--limit", "1", "--cursor", "not a cursor"],
        ["search", "needle", "--limit", "1", "--cursor", cursor[:-3]],
    ):
        assert _error(*argv, *_at(store, "jsonl"))["code"] == "SESSION_QUERY_INVALID_CURSOR", argv
    # Whitespace in the query is normalized before the request is compared.
    assert _json("search", "  needle ", "--limit", "1", "--cursor", cursor, *_at(store, "jsonl"))["items"]


def test_search_cursor_goes_stale_when_the_corpus_changes_before_its_page(store: Path) -> None:
    _many(store, "jsonl", 4)
    first = _json("search", "needle", "--limit", "2", *_at(store, "jsonl"))
    # A session whose text is only the word: it ranks first, so the page boundary moved.
    _write(store, "jsonl", "best", [("needle", "ok")])
    error = _error("search", "needle", "--limit", "2", "--cursor", first["nextCursor"], *_at(store, "jsonl"))
    assert error["code"] == "SESSION_QUERY_STALE_CURSOR"
    fresh = _json("search", "needle", "--limit", "2", *_at(store, "jsonl"))
    assert fresh["items"][0]["header"]["id"] == "best"


def test_search_bad_input_is_a_typed_error_and_creates_no_index(store: Path) -> None:
    _lineage(store, "jsonl")
    cases = [
        (["search", "   "], "SESSION_QUERY_INVALID_QUERY"),
        (["search", "a\x00b"], "SESSION_QUERY_INVALID_QUERY"),
        (["search", "x", "--limit", "0"], "SESSION_QUERY_INVALID_LIMIT"),
        (["search", "x", "--limit", "101"], "SESSION_QUERY_INVALID_LIMIT"),
        (["search", "x", "--cursor", ""], "SESSION_QUERY_INVALID_CURSOR"),
    ]
    for argv, code in cases:
        assert _error(*argv, *_at(store, "jsonl"))["code"] == code, argv
    assert not _index(store, "jsonl").exists()
    assert (
        _error("search", "x", "--session", "nobody", *_at(store, "jsonl"))["code"] == "SESSION_QUERY_SESSION_NOT_FOUND"
    )
    human = _invoke("search", "   ", *_at(store, "jsonl"))
    assert human.exit_code == 1 and "SESSION_QUERY_INVALID_QUERY" in human.stderr


@pytest.mark.parametrize("command", [["search", "x"], ["trace", "s"], ["reindex", "--search"]])
def test_query_commands_on_a_missing_store_are_store_not_found_and_create_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    missing = tmp_path / "missing"
    for kind in BACKENDS:
        assert _error(*command, *_at(missing, kind))["code"] == "STORE_NOT_FOUND"
        assert not missing.exists()


def test_search_reports_a_damaged_log_and_searches_the_others(store: Path) -> None:
    _write(store, "jsonl", "good", [("needle here", "ok")])
    _write(store, "jsonl", "bad", [("needle there", "ok")])
    (log,) = store.glob("*/bad/session.jsonl.zstd")
    data = bytearray(log.read_bytes())
    data[-8] ^= 0xFF
    log.write_bytes(bytes(data))
    document = _json("search", "needle", *_at(store, "jsonl"))
    assert [item["header"]["id"] for item in document["items"]] == ["good"]
    assert [item["id"] for item in document["skipped"]] == ["bad"]
    table = _invoke("search", "needle", *_at(store, "jsonl"))
    assert table.exit_code == 0 and "could not be read" in table.stderr and "bad" in table.stderr


def test_search_json_names_the_sessions_it_left_out_and_warns_on_stderr(store: Path) -> None:
    """A page of a store where one zstd log of many is damaged (one flipped byte): the document carries
    the left-out session as ``skipped: [{id, code, message}]`` and stderr names it, with and without
    --json; the other sessions are searched and paged as usual."""
    for number in range(30):
        _write(store, "jsonl", f"s{number:02d}", [(f"shared words {number}", "ok")])
    (log,) = store.glob("*/s17/session.jsonl.zstd")
    data = bytearray(log.read_bytes())
    data[len(data) // 2] ^= 0x01
    log.write_bytes(bytes(data))
    for extra in ([], ["--session", "s03"]):
        result = _invoke("search", "shared", *extra, *_at(store, "jsonl"), "--json")
        assert result.exit_code == 0, result.stdout + result.stderr
        document = orjson.loads(result.stdout)
        if not extra:
            assert len(document["items"]) == 20 and "nextCursor" in document
            assert "s17" not in {item["header"]["id"] for item in document["items"]}
            (skipped,) = document["skipped"]
            assert set(skipped) == {"id", "code", "message"}
            assert skipped["id"] == "s17" and skipped["code"] == "SESSION_CORRUPT" and skipped["message"]
            assert "could not be read" in result.stderr and "s17" in result.stderr
            assert "SESSION_CORRUPT" in result.stderr
            rest = _json("search", "shared", *_at(store, "jsonl"), "--cursor", document["nextCursor"])
            assert len(rest["items"]) == 9 and rest["skipped"] == document["skipped"]
        else:
            assert document["skipped"] == [] and result.stderr == ""  # another session's damage is not its own
    table = _invoke("search", "shared", *_at(store, "jsonl"))
    assert table.exit_code == 0 and "could not be read" in table.stderr and "s17" in table.stderr


# --- read-only commands never create the index -----------------------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
def test_ls_show_trace_and_other_readers_do_not_create_the_index(store: Path, kind: str) -> None:
    _lineage(store, kind)
    for argv in (
        ["ls"],
        ["show", "parent"],
        ["show", "parent", "--log"],
        ["export", "parent"],
        ["verify"],
        ["stats", "parent"],
        ["title", "parent"],
        ["trace", "child"],
        ["trace", "parent", "--seq", "1"],
    ):
        result = _invoke(*argv, *_at(store, kind))
        assert result.exit_code == 0, (argv, result.stdout + result.stderr)
        assert not _index(store, kind).exists(), argv
    _json("search", "migration", *_at(store, kind))
    assert _index(store, kind).is_file()


# --- trace -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
def test_trace_prints_the_lineage_tree(store: Path, kind: str) -> None:
    _lineage(store, kind)
    document = _json("trace", "child", *_at(store, kind))
    assert document["target"]["header"]["id"] == "child"
    assert [record["header"]["id"] for record in document["ancestors"]] == ["parent"]
    assert document["complete"] is True and document["root"]["header"]["id"] == "parent"
    assert [node["session"]["header"]["id"] for node in document["descendants"]] == ["grandchild"]
    lines = _invoke("trace", "child", *_at(store, kind)).stdout.splitlines()
    (root,) = [n for n, line in enumerate(lines) if "parent" in line]
    (target,) = [n for n, line in enumerate(lines) if "child" in line and "grand" not in line]
    (leaf,) = [n for n, line in enumerate(lines) if "grandchild" in line]
    assert root < target < leaf and "this session" in lines[target]
    assert lines[target].index("child") > lines[root].index("parent")  # nested one level deeper


def test_trace_with_a_missing_parent_says_so(store: Path) -> None:
    sessions = al.SessionStore()
    coordinator = PersistenceCoordinator(sessions, _backend(store, "jsonl"))
    orphan = sessions.create("orphan", meta={"cwd": "/w", "parentSession": "gone", "seedLength": 0})
    _turn(orphan, 1, "hello", "hi")
    sessions.flush(orphan)
    sessions.dispose(orphan)
    coordinator.close()
    document = _json("trace", "orphan", *_at(store, "jsonl"))
    assert document["complete"] is False and document["unresolvedParentId"] == "gone"
    text = _invoke("trace", "orphan", *_at(store, "jsonl")).stdout
    assert "gone" in text and "not in this store" in text


@pytest.mark.parametrize("kind", BACKENDS)
def test_trace_seq_prints_the_provenance_of_one_event(store: Path, kind: str) -> None:
    _lineage(store, kind)
    shadowed = _json("trace", "parent", "--seq", "1", *_at(store, kind))
    assert shadowed["target"] == {**shadowed["target"], "sessionId": "parent", "seq": 1, "surface": "shadowed"}
    assert shadowed["replacedBy"] == 12 and shadowed["replacementChain"] == [12]
    assert shadowed["derivedEventSeqs"] == [12] and shadowed["session"]["id"] == "parent"
    summary = _json("trace", "parent", "--seq", "12", *_at(store, kind))
    assert summary["replacedEventSeqs"] == [1, 3] and summary["sourceEventSeqs"] == [1, 3]
    assert summary["replacementChain"] == [] and "replacedBy" not in summary
    text = _invoke("trace", "parent", "--seq", "1", *_at(store, kind)).stdout
    assert "replaced by: 12 user/message" in text and "derived (later events citing it): 12 user/message" in text
    text = _invoke("trace", "parent", "--seq", "12", *_at(store, kind)).stdout
    assert "1 user/message, 3 assistant/message" in text


def test_trace_bad_input_is_a_typed_error(store: Path) -> None:
    _lineage(store, "jsonl")
    assert _error("trace", "nobody", *_at(store, "jsonl"))["code"] == "SESSION_QUERY_SESSION_NOT_FOUND"
    assert _error("trace", "parent", "--seq", "999", *_at(store, "jsonl"))["code"] == "SESSION_QUERY_EVENT_NOT_FOUND"
    assert not _index(store, "jsonl").exists()


def _continue(store: Path, kind: str, session_id: str, number: int, user: str, answer: str) -> None:
    """One more closed turn, appended in one batch by a host that resumes the stored session."""
    sessions = al.SessionStore(now=lambda: 1_700_000_000_000)
    coordinator = PersistenceCoordinator(sessions, _backend(store, kind))
    try:
        session = coordinator.resume(session_id)
        _turn(session, number, user, answer)
        sessions.flush(session)
        sessions.dispose(session)
    finally:
        coordinator.close()


def _hits(store: Path, kind: str, query: str) -> list[str]:
    return [item["header"]["id"] for item in _json("search", query, *_at(store, kind))["items"]]


@pytest.mark.parametrize("kind", BACKENDS)
def test_search_of_a_store_restored_from_a_backup_finds_the_restored_logs_words_only(store: Path, kind: str) -> None:
    """The search index keeps a session's documents while its revision is unchanged. A store restored
    from a backup and continued by one batch (a SQLite database then repeats the revision counter the
    index saw for the discarded log; the same clock, so only the content differs) must be searched as
    it is: the discarded turn's words are gone, the new turn's words are found."""
    _write(store, kind, "s1", [("where is the release plan?", "in notes.txt")])
    log = store / "sessions.sqlite3" if kind == "sqlite" else next(store.glob("*/s1/session.jsonl.zstd"))
    backup = log.read_bytes()
    _continue(store, kind, "s1", 2, "what about the pineapple budget?", "pineapple: 42")
    assert _hits(store, kind, "pineapple") == ["s1"]
    with open(log, "r+b") as fh:
        fh.write(backup)
        fh.truncate()
    _continue(store, kind, "s1", 2, "what about the mango budget?", "mango: 42")
    assert _hits(store, kind, "mango") == ["s1"]
    assert _hits(store, kind, "pineapple") == []


# --- reindex --search ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
def test_reindex_search_drops_and_rebuilds_the_index(store: Path, kind: str) -> None:
    _lineage(store, kind)
    index = _index(store, kind)
    junk = b"not a database at all" * 100
    index.write_bytes(junk)  # not provably an index: refused untouched, the message says what to do
    refused = _error("reindex", "--search", *_at(store, kind))
    assert refused["code"] == "SESSION_QUERY_INDEX_FAILED" and "delete it to rebuild" in refused["message"]
    assert index.read_bytes() == junk
    index.unlink()
    assert _json("search", "alpha", *_at(store, kind))["items"]  # a real index now
    data = bytearray(index.read_bytes())
    data[100:] = b"\xff" * (len(data) - 100)  # ours (header and application id intact) but damaged
    index.write_bytes(bytes(data))
    summary = _json("reindex", "--search", *_at(store, kind))
    assert summary == {"sessions": 4, "indexed": 4, "failed": [], "index": str(index.absolute())}
    assert index.is_file() and index.read_bytes()[:16] == b"SQLite format 3\x00"
    assert [item["header"]["id"] for item in _json("search", "alpha", *_at(store, kind))["items"]] == ["other"]
    text = _invoke("reindex", "--search", *_at(store, kind))
    assert text.exit_code == 0 and "search index rebuilt: 4 of 4 sessions" in text.stdout


def test_reindex_with_both_rebuilds_both_and_reports_a_damaged_log(store: Path) -> None:
    _write(store, "jsonl", "good", [("needle here", "ok")])
    _write(store, "jsonl", "bad", [("needle there", "ok")])
    (log,) = store.glob("*/bad/session.jsonl.zstd")
    data = bytearray(log.read_bytes())
    data[-8] ^= 0xFF
    log.write_bytes(bytes(data))
    result = _invoke("reindex", "--projections", "--search", *_at(store, "jsonl"), "--json")
    assert result.exit_code == 1
    document = orjson.loads(result.stdout)
    assert set(document) == {"projections", "search"}
    assert document["projections"]["indexed"] == 1 and document["projections"]["cache"]
    search = document["search"]
    assert search["sessions"] == 2 and search["indexed"] == 1
    assert [item["id"] for item in search["failed"]] == ["bad"]
    assert search["failed"][0]["error"]["code"]
    assert os.path.isfile(search["index"])
    assert _error("reindex", *_at(store, "jsonl"))["code"] == "INVALID_OPTION"


# --- highlighting and the command's cursor (pure) --------------------------------------------------------


def test_highlight_follows_the_index_semantics() -> None:
    assert highlight_spans("the BRAID and the AI", "ai") == [(18, 20)]
    assert highlight_spans("a café crème", "CAFE") == [(2, 6)]
    assert highlight_spans("alpha middle beta, alpha beta", "alpha beta") == [(19, 29)]
    assert highlight_spans("会话日志和日志", "日志") == [(2, 4), (5, 7)]
    assert highlight_spans("fix ITGC修复 now", "itgc修复") == [(4, 10)]
    assert highlight_spans("…nothing here", "needle") == []
    shown = highlighted("[b]x[/b] needle \\", "needle")
    assert shown.plain == "[b]x[/b] needle \\"  # markup brackets and a trailing backslash shown as they are
    assert [(span.start, span.end, str(span.style)) for span in shown.spans] == [(9, 15, "bold yellow")]


_SHOWN = st.characters(blacklist_categories=("Cc", "Cs"))
"""What a snippet can hold on screen (the index turns whitespace into spaces; a terminal drops controls)."""


@given(
    st.text(st.one_of(_SHOWN, st.sampled_from("[]\\/ 日志")), max_size=60),
    st.text(st.one_of(_SHOWN, st.sampled_from("[]\\ 日志")), min_size=1, max_size=8),
)
def test_highlighted_markup_renders_back_to_the_snippet(snippet: str, query: str) -> None:
    """Whatever the snippet holds (markup brackets and backslashes included), the table shows exactly its
    text, and the highlighted spans are ordered, disjoint and inside it."""
    shown = highlighted(snippet, query)
    assert shown.plain == snippet
    assert [(span.start, span.end) for span in shown.spans] == highlight_spans(snippet, query)
    spans = highlight_spans(snippet, query)
    assert all(0 <= start < end <= len(snippet) for start, end in spans)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))


@given(st.text(min_size=1, max_size=20), st.integers(1, 2**53 - 2), st.text(max_size=10), st.integers(0, 2**53 - 2))
def test_cli_cursor_round_trips_and_is_bound_to_its_request(digest: str, offset: int, session: str, seq: int) -> None:
    cursor = encode_cli_cursor(digest, offset, (session, seq))
    assert decode_cli_cursor(cursor, digest) == (offset, (session, seq))
    with pytest.raises(SessionQueryError) as info:
        decode_cli_cursor(cursor, digest + "x")
    assert info.value.code == "SESSION_QUERY_INVALID_CURSOR"


def test_search_and_reindex_refuse_a_foreign_index_file_untouched(store: Path) -> None:
    """A database of another application at the index path is never adopted, modified or deleted, not
    even by ``reindex --search``: the error names the file, and once the user moves it away the rebuild works."""
    import sqlite3

    _lineage(store, "jsonl")
    index = _index(store, "jsonl")
    foreign = sqlite3.connect(index)
    foreign.execute("PRAGMA application_id = 12345")
    foreign.execute("CREATE TABLE notes (body TEXT)")
    foreign.commit()
    foreign.close()
    before = index.read_bytes()
    assert _error("search", "migration", *_at(store, "jsonl"))["code"] == "SESSION_QUERY_INDEX_FAILED"
    assert index.read_bytes() == before
    refused = _error("reindex", "--search", *_at(store, "jsonl"))
    assert refused["code"] == "SESSION_QUERY_INDEX_FAILED"
    assert str(index) in refused["message"]
    assert index.read_bytes() == before
    index.rename(index.with_name("notes.sqlite3"))
    assert _json("reindex", "--search", *_at(store, "jsonl"))["indexed"] == 4
    assert _json("search", "alpha", *_at(store, "jsonl"))["items"][0]["header"]["id"] == "other"
