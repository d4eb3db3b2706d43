"""PostgresSearch: the same answers as SqliteSearch on any corpus, one index shared by every host.

The rest of the search contract is the parametrised suite (``provider`` in tests/query/conftest.py);
here: the property that both providers return the same pages on random corpora, a second host with no
local files finding the index built, the index schema's own rules, and recovery from database failures.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from psycopg import sql

from _postgres import drop_schema, fresh_schema, keepalive_for, keepalive_of
from agentlog.errors import SessionQueryError
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.memory import MemoryBackend
from agentlog.persistence.postgres import PostgresBackend
from agentlog.query import PostgresSearch, SqliteSearch
from agentlog.query.postgres import index_schema
from agentlog.query.provider import index_location, open_store_search
from agentlog.testing.builders import APPEND, assistant_msg_data, intent, text_block, user_msg

_WORDS = st.sampled_from(
    [
        "alpha",
        "Alpha",
        "ALPHA!",
        "al-pha",
        "alphabet",
        "beta",
        "café",
        "CAFE",
        "Café.",
        "x",
        "q1",
        "日志",
        "会话日志",
        "ログを確認",
        "itgc修复",
        "naïve",
        "NAIVE",
        "42",
        "\n",
    ]
)
_TEXT = st.lists(_WORDS, min_size=1, max_size=7).map(" ".join)
_QUERIES = st.one_of(
    _WORDS.filter(lambda word: word.strip() != ""),
    st.lists(_WORDS.filter(lambda word: word.strip() != ""), min_size=2, max_size=3).map(" ".join),
    st.sampled_from(
        # (one term repeated: overlapping occurrences merge into one mark; a mix: counted the general way)
        [
            "日",
            "志会",
            "ログ",
            "*",
            "alpha beta",
            "beta alpha",
            "cafe naive",
            "AI",
            "q1 q1",
            "q1 q1 q1",
            "alpha beta alpha",
        ]
    ),
)
_SESSION_FILTERS = st.lists(
    st.one_of(
        st.just({"kind": "availability", "values": ["live"]}),
        st.just({"kind": "availability", "values": ["persisted"]}),
        st.just({"kind": "id", "values": ["B", "a-1", "s2"]}),
        st.just({"kind": "created-at", "from": 1}),
        st.just({"kind": "cwd", "values": [None]}),
    ),
    max_size=2,
)
_EVENT_FILTERS = st.lists(
    st.one_of(
        st.just({"kind": "type", "values": ["user/message"]}),
        st.just({"kind": "seq", "from": 1, "to": 4}),
        st.just({"kind": "surface", "values": ["current"]}),
        st.just({"kind": "type", "values": []}),
    ),
    max_size=2,
)
_IDS = ("B", "a-1", "s2", "Z9", "b")


def _pages(search: SqliteSearch, call: str, **request: Any) -> list[Any]:
    """Every page of one request (items, and whether a next page was offered)."""
    pages, cursor = [], None
    while True:
        page = getattr(search, call)(**request, limit=2, cursor=cursor)
        cursor = page.get("nextCursor")
        pages.append((page.get("session"), page["items"], cursor is not None))
        if cursor is None:
            return pages


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(st.lists(_TEXT, min_size=1, max_size=5), st.booleans(), st.integers(0, 2)), min_size=1, max_size=5
    ),
    _QUERIES,
    _SESSION_FILTERS,
    _EVENT_FILTERS,
)
@example([(["q1 q1 q1 q1 x q1 q1", "q1 x q1 q1 q1"], False, 0), (["q1 q1"], True, 1)], "q1 q1", [], [])
@example([(["q1 q1 q1 q1 x q1 q1", "q1 x q1 q1 q1"], False, 0), (["q1 q1"], True, 1)], "q1 q1 q1", [], [])
@example([(["alpha beta alpha beta alpha", "beta alpha"], True, 0)], "alpha beta alpha", [], [])
def test_both_providers_return_the_same_pages_on_random_corpora(
    pg_dsn: str,
    sessions: list[tuple[list[str], bool, int]],
    query: str,
    session_filters: list[dict[str, Any]],
    event_filters: list[dict[str, Any]],
) -> None:
    store = SessionStore()
    coordinator = PersistenceCoordinator(store, MemoryBackend())
    for index, (texts, live, created) in enumerate(sessions):
        session = store.create(_IDS[index], meta={"createdAt": created})
        for number, text in enumerate(texts):
            if number % 2:
                session.append("assistant/message", assistant_msg_data([text_block(text)]), intent(APPEND))
            else:
                session.append("user/message", user_msg(text), intent(APPEND))
        coordinator.flush(session)
        if not live:
            store.dispose(session)
    schema = fresh_schema()
    sqlite = SqliteSearch(coordinator, path=":memory:", snippet_chars=9)
    postgres = PostgresSearch(coordinator, dsn=pg_dsn, schema=schema, snippet_chars=9)
    try:
        answers = []
        for search in (sqlite, postgres):
            request = {"query": query, "session_filters": session_filters, "event_filters": event_filters}
            answer = [_pages(search, "search_sessions", **request)]
            for index in range(len(sessions)):
                answer.append(
                    _pages(search, "search_events", session_id=_IDS[index], query=query, filters=event_filters)
                )
            answers.append(answer)
        assert answers[1] == answers[0]
    finally:
        sqlite.close()
        postgres.close()
        coordinator.close()
        drop_schema(pg_dsn, index_schema(schema))


# --- one index for every host ------------------------------------------------------------------------------


def _write(coordinator: PersistenceCoordinator, session_id: str, *texts: str, created: int = 1) -> None:
    session = coordinator.store.create(session_id, meta={"createdAt": created})
    for text in texts:
        session.append("user/message", user_msg(text), intent(APPEND))
    coordinator.flush(session)
    coordinator.store.dispose(session)


def _append(coordinator: PersistenceCoordinator, session_id: str, text: str) -> None:
    session = coordinator.resume(session_id)
    session.append("user/message", user_msg(text), intent(APPEND))
    coordinator.flush(session)
    coordinator.store.dispose(session)


class _Counted:
    """A coordinator's inspections, counted (what a search had to read from the store)."""

    def __init__(self, coordinator: PersistenceCoordinator, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original = coordinator.inspect

        def inspect(session_id: str) -> Any:
            self.count += 1
            return original(session_id)

        monkeypatch.setattr(coordinator, "inspect", inspect)


def _close_searches(*searches: SqliteSearch, then: PersistenceCoordinator) -> None:
    """Close each search and the coordinator it reads through, then ``then``."""
    for search in searches:
        assert search.persistence is not None
        coordinator = search.persistence
        search.close()
        coordinator.close()
    then.close()


def _ids(page: dict[str, Any]) -> list[str]:
    return [item["header"]["id"] for item in page["items"]]


def test_a_second_host_with_no_local_files_searches_the_index_the_first_built(
    pg_backends: Callable[..., PostgresBackend], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = PersistenceCoordinator(SessionStore(), pg_backends())
    _write(writer, "s1", "the migration plan", created=1)
    _write(writer, "s2", "a migration rollback", "日志会话", created=2)
    _write(writer, "s3", "nothing here", created=3)

    first = PersistenceCoordinator(SessionStore(), pg_backends(read_only=True))
    first_reads = _Counted(first, monkeypatch)
    host_a = open_store_search(first)
    assert isinstance(host_a, PostgresSearch)
    page_a = host_a.search_sessions(query="migration")
    assert _ids(page_a) == ["s1", "s2"] and first_reads.count == 3  # the shorter document first

    home = tmp_path / "host-b"
    home.mkdir()
    monkeypatch.chdir(home)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    second = PersistenceCoordinator(SessionStore(), pg_backends(read_only=True))
    second_reads = _Counted(second, monkeypatch)
    host_b = open_store_search(second)
    try:
        # The index is there: the second host reads no log, and answers the same.
        assert host_b.search_sessions(query="migration")["items"] == page_a["items"]
        assert _ids(host_b.search_sessions(query="会话")) == ["s2"]
        assert second_reads.count == 0

        # One session changes: whichever host searches first re-reads that one log, for both.
        _append(writer, "s3", "a late migration")
        assert _ids(host_b.search_sessions(query="late migration")) == ["s3"]
        assert second_reads.count == 1
        assert _ids(host_a.search_sessions(query="late migration")) == ["s3"]
        assert first_reads.count == 3
        assert [p for p in home.rglob("*") if p.is_file()] == []  # nothing on the second host's disk
    finally:
        host_b.close()
        host_a.close()
        second.close()
        first.close()
        writer.close()


def test_a_deleted_session_leaves_every_hosts_results(
    pg_dsn: str, pg_schema: str, pg_backends: Callable[..., PostgresBackend]
) -> None:
    writer = PersistenceCoordinator(SessionStore(), pg_backends())
    _write(writer, "keep", "needle kept")
    _write(writer, "gone", "needle gone")
    host_a = open_store_search(PersistenceCoordinator(SessionStore(), pg_backends(read_only=True)))
    host_b = open_store_search(PersistenceCoordinator(SessionStore(), pg_backends(read_only=True)))
    try:
        assert sorted(_ids(host_a.search_sessions(query="needle"))) == ["gone", "keep"]
        cursor = host_b.search_sessions(query="needle", limit=1)["nextCursor"]
        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # removed from the store by hand
            for table in ("events", "sessions"):
                column = "session_id" if table == "events" else "id"
                conn.execute(
                    sql.SQL("DELETE FROM {}.{} WHERE {} = 'gone'").format(
                        sql.Identifier(pg_schema), sql.Identifier(table), sql.Identifier(column)
                    )
                )
        assert _ids(host_a.search_sessions(query="needle")) == ["keep"]
        # Host B's cross-session cursor counted a corpus that moved (another host changed the index).
        with pytest.raises(SessionQueryError) as stale:
            host_b.search_sessions(query="needle", limit=1, cursor=cursor)
        assert stale.value.code == "SESSION_QUERY_STALE_CURSOR"
        assert _ids(host_b.search_sessions(query="needle")) == ["keep"]
    finally:
        _close_searches(host_a, host_b, then=writer)


def test_an_unchanged_store_is_not_listed_again_and_any_write_is_seen(
    pg_dsn: str, pg_schema: str, pg_backends: Callable[..., PostgresBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session rows' keys: a search of a store nobody wrote to answers from the last revision
    listing; an append, a delete, a re-created session or a row rewritten by hand is listed again —
    only the sessions that moved."""
    writer = PersistenceCoordinator(SessionStore(), pg_backends())
    _write(writer, "a", "needle one")
    _write(writer, "b", "needle two")
    backend = pg_backends(read_only=True)
    listings: list[list[str] | None] = []  # None: the whole store; else the ids listed again
    whole, some = backend.list_revisions, backend.list_revisions_of

    def counted() -> dict[str, str]:
        listings.append(None)
        return whole()

    def counted_of(session_ids: list[str]) -> dict[str, str]:
        listings.append(sorted(session_ids))
        return some(session_ids)

    monkeypatch.setattr(backend, "list_revisions", counted)
    monkeypatch.setattr(backend, "list_revisions_of", counted_of)
    reader = PersistenceCoordinator(SessionStore(), backend)
    search = open_store_search(reader)
    try:
        assert sorted(_ids(search.search_sessions(query="needle"))) == ["a", "b"]
        assert listings == [None]
        for _ in range(3):
            assert sorted(_ids(search.search_sessions(query="needle"))) == ["a", "b"]
        assert listings == [None]  # nothing moved: not listed again

        _append(writer, "a", "haystack")
        assert _ids(search.search_sessions(query="haystack")) == ["a"]
        assert listings == [None, ["a"]]
        writer.delete("b")
        assert _ids(search.search_sessions(query="needle")) == ["a"]
        assert listings == [None, ["a"]]  # a deleted row is simply gone from the keys
        _write(writer, "b", "needle again")
        assert _ids(search.search_sessions(query="again")) == ["b"]
        assert listings[-1] == ["b"]
        seen = len(listings)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # a row version the counters do not show
            conn.execute(sql.SQL("UPDATE {}.sessions SET revision = revision").format(sql.Identifier(pg_schema)))
        search.search_sessions(query="needle")
        assert listings[seen:] == [["a", "b"]]
        assert search.search_sessions(query="needle")["items"]
        assert len(listings) == seen + 1
    finally:
        search.close()
        reader.close()
        writer.close()


def test_the_provider_follows_the_store(pg_backends: Callable[..., PostgresBackend], tmp_path: Path) -> None:
    backend = pg_backends()
    postgres = PersistenceCoordinator(SessionStore(), backend)
    files = PersistenceCoordinator(SessionStore(), JsonlBackend(str(tmp_path / "store")))
    try:
        assert index_location(backend) == f"postgresql:{backend.schema}_search"
        assert index_location(files.backend) == str(tmp_path / "store" / ".agentlog-search.sqlite3")
        for coordinator, kind in ((postgres, PostgresSearch), (files, SqliteSearch)):
            search = open_store_search(coordinator, open_at="first-search")
            assert type(search) is kind
            search.close()
    finally:
        postgres.close()
        files.close()


# --- the index schema ----------------------------------------------------------------------------------------


def test_an_index_schema_holding_a_foreign_table_is_refused_untouched(pg_dsn: str, pg_schema: str) -> None:
    target = sql.Identifier(index_schema(pg_schema))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(target))
        conn.execute(sql.SQL("CREATE TABLE {}.stranger (x int)").format(target))
        conn.execute(sql.SQL("INSERT INTO {}.stranger VALUES (7)").format(target))
    with pytest.raises(SessionQueryError) as refused:
        PostgresSearch(store=SessionStore(), dsn=pg_dsn, schema=pg_schema)
    assert refused.value.code == "SESSION_QUERY_INDEX_FAILED"
    assert "stranger" in str(refused.value)
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute(sql.SQL("SELECT x FROM {}.stranger").format(target)).fetchall() == [(7,)]


def test_long_store_schema_names_get_a_distinct_index_schema() -> None:
    long_a, long_b = "a" * 60 + "x", "a" * 60 + "y"
    assert len(index_schema(long_a)) <= 63 and index_schema(long_a) != index_schema(long_b)
    assert index_schema("agentlog") == "agentlog_search"


def test_invalid_config_is_refused_before_connecting() -> None:
    for options in ({"dsn": None, "schema": "s"}, {"dsn": "postgresql://x", "schema": "Bad-Name"}):
        with pytest.raises(SessionQueryError) as refused:
            PostgresSearch(store=SessionStore(), **options)  # type: ignore[arg-type]
        assert refused.value.code == "SESSION_QUERY_INVALID_CONFIG"


# --- failures ---------------------------------------------------------------------------------------------------


def test_a_failed_write_commits_nothing_and_the_next_search_recovers(
    pg_dsn: str, pg_schema: str, pg_backends: Callable[..., PostgresBackend]
) -> None:
    writer = PersistenceCoordinator(SessionStore(), pg_backends())
    _write(writer, "s1", "needle")
    search = PostgresSearch(writer, dsn=pg_dsn, schema=pg_schema)
    try:
        search._require().execute("SET default_transaction_read_only = on")
        with pytest.raises(SessionQueryError) as failed:
            search.search_sessions(query="needle")
        assert failed.value.code == "SESSION_QUERY_INDEX_FAILED"
        with psycopg.connect(pg_dsn) as conn:
            rows = conn.execute(
                sql.SQL("SELECT count(*) FROM {}.persisted_sessions").format(sql.Identifier(index_schema(pg_schema)))
            ).fetchone()
        assert rows == (0,)
        search._require().execute("SET default_transaction_read_only = off")
        assert _ids(search.search_sessions(query="needle")) == ["s1"]
    finally:
        search.close()
        writer.close()


def test_a_lost_connection_fails_one_search_and_the_next_reconnects(
    pg_dsn: str, pg_schema: str, pg_backends: Callable[..., PostgresBackend]
) -> None:
    writer = PersistenceCoordinator(SessionStore(), pg_backends())
    _write(writer, "stored", "needle stored")
    live = writer.store.create("live", meta={"createdAt": 9})
    live.append("user/message", user_msg("needle live"), intent(APPEND))
    search = PostgresSearch(writer, dsn=pg_dsn, schema=pg_schema)
    try:
        assert sorted(_ids(search.search_sessions(query="needle"))) == ["live", "stored"]
        pid = search._require().info.backend_pid
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(SessionQueryError) as lost:
            search.search_sessions(query="needle")
        assert lost.value.code == "SESSION_QUERY_INDEX_FAILED"
        # A new connection: the stored rows are there, the live overlay is rebuilt.
        assert sorted(_ids(search.search_sessions(query="needle"))) == ["live", "stored"]
    finally:
        search.close()
        writer.close()


def test_the_search_connection_gives_up_on_a_silent_server_as_the_store_backend_does(
    pg_dsn: str, pg_schema: str, pg_backends: Callable[..., PostgresBackend]
) -> None:
    writer = PersistenceCoordinator(SessionStore(), pg_backends(call_timeout_s=6.0))
    search = PostgresSearch(writer)
    try:
        assert keepalive_of(search._require()) == keepalive_for(6, 2, 3, 12_000)
    finally:
        search.close()
        writer.close()


@pytest.mark.subprocess
def test_psycopg_is_not_imported_to_choose_a_provider_for_a_file_store(tmp_path: Path) -> None:
    """The optional driver stays optional: a file store's search never imports it."""
    import subprocess
    import sys

    code = (
        "import sys; import agentlog as al; from agentlog.query.provider import open_store_search;"
        "from agentlog.persistence.jsonl.backend import JsonlBackend;"
        "from agentlog.persistence.coordinator import PersistenceCoordinator;"
        f"c = PersistenceCoordinator(al.SessionStore(), JsonlBackend({str(tmp_path)!r}));"
        "s = open_store_search(c, open_at='first-search'); s.search_sessions(query='x'); s.close(); c.close();"
        "assert 'psycopg' not in sys.modules, 'psycopg imported'"
    )
    env = {**os.environ}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr


def test_rebuild_indexes_every_stored_session_again_for_every_host(
    pg_backends: Callable[..., PostgresBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = PersistenceCoordinator(SessionStore(), pg_backends())
    _write(writer, "s1", "needle one")
    _write(writer, "s2", "needle two")
    reader = PersistenceCoordinator(SessionStore(), pg_backends(read_only=True))
    reads = _Counted(reader, monkeypatch)
    search = open_store_search(reader)
    other = open_store_search(PersistenceCoordinator(SessionStore(), pg_backends(read_only=True)))
    try:
        assert sorted(_ids(search.search_sessions(query="needle"))) == ["s1", "s2"]
        cursor = other.search_sessions(query="needle", limit=1)["nextCursor"]
        progress: list[tuple[int, int]] = []
        search.rebuild(progress=lambda done, total: progress.append((done, total)))
        assert progress == [(1, 2), (2, 2)] and reads.count == 4
        assert sorted(_ids(search.search_sessions(query="needle"))) == ["s1", "s2"]
        with pytest.raises(SessionQueryError) as stale:  # the other host's corpus moved under its cursor
            other.search_sessions(query="needle", limit=1, cursor=cursor)
        assert stale.value.code == "SESSION_QUERY_STALE_CURSOR"
    finally:
        assert other.persistence is not None
        other_reader = other.persistence
        other.close()
        other_reader.close()
        search.close()
        reader.close()
        writer.close()


def test_its_errors_name_the_postgresql_index_not_sqlite(pg_dsn: str, pg_schema: str) -> None:
    """The provider shares the SQLite provider's checks; its messages must still name the engine it runs on."""
    with pytest.raises(SessionQueryError) as refused:
        PostgresSearch(store=SessionStore(), dsn=pg_dsn, schema=pg_schema, default_limit=0)
    assert refused.value.code == "SESSION_QUERY_INVALID_CONFIG"
    assert str(refused.value).startswith("session-search PostgreSQL config: defaultLimit")
    search = PostgresSearch(store=SessionStore(), dsn=pg_dsn, schema=pg_schema)
    search.close()
    with pytest.raises(SessionQueryError) as closed:
        search.search_sessions(query="needle")
    assert closed.value.code == "SESSION_QUERY_INDEX_FAILED"
    assert str(closed.value) == "session-search PostgreSQL index is closed"


def _doc_counts(dsn: str, store_schema: str) -> dict[str, int]:
    """Stored documents per session in the index, straight from its tables (one row per document)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            sql.SQL("SELECT session_id, count(*) FROM {}.persisted_docs GROUP BY session_id").format(
                sql.Identifier(index_schema(store_schema))
            )
        ).fetchall()
    return {str(sid): int(count) for sid, count in rows}


def test_many_moved_sessions_are_replaced_once_each_in_one_write(
    pg_dsn: str, pg_schema: str, pg_backends: Callable[..., PostgresBackend]
) -> None:
    """Enough moved sessions that the write begins while they are still read (the first index, and a
    second reconciliation replacing most of them): every session's documents are there exactly once."""
    writer = PersistenceCoordinator(SessionStore(), pg_backends())
    names = [f"m{index:02d}" for index in range(14)]
    for index, sid in enumerate(names):
        _write(writer, sid, f"needle first{index}", "shared words here", created=index)
    search = open_store_search(PersistenceCoordinator(SessionStore(), pg_backends(read_only=True)))
    try:
        assert sorted(_ids(search.search_sessions(query="needle", limit=50))) == names
        assert _doc_counts(pg_dsn, pg_schema) == dict.fromkeys(names, 2)
        for sid in names[:11]:
            _append(writer, sid, f"later {sid}")
        writer.delete(names[-1])
        assert sorted(_ids(search.search_sessions(query="later", limit=50))) == names[:11]
        assert _doc_counts(pg_dsn, pg_schema) == {**dict.fromkeys(names[:11], 3), **dict.fromkeys(names[11:13], 2)}
        assert _ids(search.search_sessions(query="first3")) == ["m03"]
        assert _ids(search.search_sessions(query="first13")) == []
    finally:
        _close_searches(search, then=writer)


def test_a_failure_while_copying_rolls_back_every_moved_session(
    pg_dsn: str, pg_schema: str, pg_backends: Callable[..., PostgresBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = PersistenceCoordinator(SessionStore(), pg_backends())
    names = [f"f{index:02d}" for index in range(12)]
    for index, sid in enumerate(names):
        _write(writer, sid, f"needle {sid}", created=index)
    search = PostgresSearch(writer, dsn=pg_dsn, schema=pg_schema)
    try:
        assert len(_ids(search.search_sessions(query="needle", limit=50))) == 12
        for sid in names[:10]:
            _append(writer, sid, f"update {sid}")
        before = _doc_counts(pg_dsn, pg_schema)
        original = PostgresSearch._copy_prepared

        def failing(self: PostgresSearch, conn: Any, prepared: Any) -> None:
            raise psycopg.OperationalError("the server went away mid-copy (injected)")

        monkeypatch.setattr(PostgresSearch, "_copy_prepared", failing)
        with pytest.raises(SessionQueryError) as failed:
            search.search_sessions(query="update")
        assert failed.value.code == "SESSION_QUERY_INDEX_FAILED"
        assert "injected" in str(failed.value)
        # Nothing of the failed write is visible: the moved sessions' old rows are all still there.
        assert _doc_counts(pg_dsn, pg_schema) == before == dict.fromkeys(names, 1)
        monkeypatch.setattr(PostgresSearch, "_copy_prepared", original)
        assert sorted(_ids(search.search_sessions(query="update", limit=50))) == names[:10]
        assert _doc_counts(pg_dsn, pg_schema) == {**dict.fromkeys(names[:10], 2), **dict.fromkeys(names[10:], 1)}
    finally:
        search.close()
        writer.close()


def test_a_store_that_moves_during_the_reads_is_read_again_without_duplicates(
    pg_dsn: str, pg_schema: str, pg_backends: Callable[..., PostgresBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer appends while the first index reads the sessions: the observation is unstable, its
    begun write is rolled back, and the retry indexes every session once, with the append."""
    import agentlog.query.postgres as provider

    writer = PersistenceCoordinator(SessionStore(), pg_backends())
    names = [f"w{index:02d}" for index in range(10)]
    for index, sid in enumerate(names):
        _write(writer, sid, f"needle {sid}", created=index)
    original = provider._inspect_one
    writes = []

    def inspect_while_writing(service: Any, sid: str) -> Any:
        if not writes:
            writes.append(sid)
            _append(writer, "w09", "written during the first index")
        return original(service, sid)

    monkeypatch.setattr(provider, "_inspect_one", inspect_while_writing)
    search = open_store_search(PersistenceCoordinator(SessionStore(), pg_backends(read_only=True)))
    try:
        assert _ids(search.search_sessions(query="during the first index")) == ["w09"]
        assert writes == ["w00"]
        assert _doc_counts(pg_dsn, pg_schema) == {**dict.fromkeys(names[:9], 1), "w09": 2}
    finally:
        _close_searches(search, then=writer)


def test_a_session_that_gained_a_turn_keeps_its_stored_rows_and_writes_only_the_new_ones(
    pg_dsn: str, pg_schema: str, pg_backends: Callable[..., PostgresBackend]
) -> None:
    writer = PersistenceCoordinator(SessionStore(), pg_backends())
    _write(writer, "grow", "needle first", "second words")
    _write(writer, "other", "needle elsewhere")
    search = open_store_search(PersistenceCoordinator(SessionStore(), pg_backends(read_only=True)))
    index = sql.Identifier(index_schema(pg_schema))

    def stored() -> dict[int, str]:
        with psycopg.connect(pg_dsn) as conn:
            rows = conn.execute(
                sql.SQL("SELECT doc, text FROM {}.persisted_docs WHERE session_id = 'grow'").format(index)
            ).fetchall()
        return {int(doc): str(text) for doc, text in rows}

    try:
        assert sorted(_ids(search.search_sessions(query="needle"))) == ["grow", "other"]
        before = stored()
        _append(writer, "grow", "third turn")
        assert _ids(search.search_sessions(query="third")) == ["grow"]
        after = stored()
        assert {doc: text for doc, text in after.items() if doc in before} == before  # kept as they were
        assert sorted(after.values()) == sorted([*before.values(), "third turn"])
        # A stored row that differs from the log's document (here altered by hand) is replaced.
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("UPDATE {}.persisted_docs SET text = 'altered' WHERE session_id = 'grow' AND text = %s").format(
                    index
                ),
                ("second words",),
            )
        _append(writer, "grow", "fourth turn")
        assert _ids(search.search_sessions(query="fourth")) == ["grow"]
        assert sorted(stored().values()) == ["fourth turn", "needle first", "second words", "third turn"]
        assert _ids(search.search_sessions(query="second")) == ["grow"]
        assert _ids(search.search_sessions(query="elsewhere")) == ["other"]
    finally:
        _close_searches(search, then=writer)


def test_sessions_read_one_at_a_time_keep_their_stored_rows_when_several_moved(
    pg_dsn: str, pg_schema: str, pg_backends: Callable[..., PostgresBackend]
) -> None:
    """With one reader (``persisted_inspect_concurrency=1``) every moved session is re-read in turn, and
    each keeps the rows that are as they were, however many moved."""
    writer = PersistenceCoordinator(SessionStore(), pg_backends())
    for sid in ("a", "b", "c"):
        _write(writer, sid, f"needle {sid}", "shared")
    search = PostgresSearch(writer, dsn=pg_dsn, schema=pg_schema, persisted_inspect_concurrency=1)
    index = sql.Identifier(index_schema(pg_schema))

    def stored() -> set[tuple[int, str]]:
        with psycopg.connect(pg_dsn) as conn:
            rows = conn.execute(sql.SQL("SELECT doc, text FROM {}.persisted_docs").format(index)).fetchall()
        return {(int(doc), str(text)) for doc, text in rows}

    try:
        assert sorted(_ids(search.search_sessions(query="needle"))) == ["a", "b", "c"]
        before = stored()
        _append(writer, "a", "later a")
        _append(writer, "b", "later b")
        assert sorted(_ids(search.search_sessions(query="later"))) == ["a", "b"]
        after = stored()
        assert before < after and {text for _doc, text in after - before} == {"later a", "later b"}
    finally:
        search.close()
        writer.close()
