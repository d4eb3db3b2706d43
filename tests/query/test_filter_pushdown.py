"""The request's filters are placed inside both arms of the candidate UNION ALL (so highlight() runs only
for rows that pass them); the rows selected must be exactly those of the original's formulation, which
filters the union's rows afterwards. Checked against that formulation on the same index, for random
corpora of stored and live sessions and random session and event filters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.memory import MemoryBackend
from agentlog.query import SqliteSearch
from agentlog.query.normalize import build_event_where, build_session_where
from agentlog.query.sqlite import _pushed_down
from agentlog.testing.builders import APPEND, assistant_msg_data, intent, text_block, user_msg

_WORDS = st.sampled_from(["alpha", "beta", "gamma", "日志", "会话日志"])
_TEXT = st.lists(_WORDS, min_size=1, max_size=6).map(" ".join)

_SESSION_FILTER = st.one_of(
    st.builds(lambda v: {"kind": "id", "values": v}, st.lists(st.sampled_from(["s0", "s1", "s2", "s3"]), max_size=3)),
    st.builds(lambda v: {"kind": "cwd", "values": v}, st.lists(st.sampled_from(["/a", "/b", None]), max_size=2)),
    st.builds(
        lambda v: {"kind": "availability", "values": v}, st.lists(st.sampled_from(["live", "persisted"]), max_size=2)
    ),
    st.builds(
        lambda a, b: {"kind": "created-at", "from": min(a, b), "to": max(a, b)}, st.integers(0, 5), st.integers(0, 5)
    ),
)
_EVENT_FILTER = st.one_of(
    st.builds(lambda a, b: {"kind": "seq", "from": min(a, b), "to": max(a, b)}, st.integers(0, 6), st.integers(0, 6)),
    st.builds(
        lambda v: {"kind": "type", "values": v},
        st.lists(st.sampled_from(["user/message", "assistant/message"]), max_size=2),
    ),
    st.builds(
        lambda v: {"kind": "surface", "values": v},
        st.lists(st.sampled_from(["current", "shadowed", "log-only"]), max_size=2),
    ),
)


def _write(
    coordinator: PersistenceCoordinator, store: SessionStore, sid: str, index: int, texts: list[str], *, live: bool
) -> None:
    session = store.create(sid, meta={"createdAt": index, **({"cwd": "/a"} if index % 2 else {})})
    for number, text in enumerate(texts):
        if number % 2:
            session.append("assistant/message", assistant_msg_data([text_block(text)]), intent(APPEND))
        else:
            session.append("user/message", user_msg(text), intent(APPEND))
    coordinator.flush(session)
    if not live:
        store.dispose(session)


def _rows(search: SqliteSearch, sql: str, bindings: list[Any]) -> list[tuple[Any, ...]]:
    rows = search._require().execute(sql, bindings).fetchall()
    return sorted(tuple(row) for row in rows)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.tuples(st.lists(_TEXT, min_size=1, max_size=5), st.booleans()), min_size=1, max_size=4),
    st.sampled_from(["alpha", "beta gamma", "日志", "会话日志", "gamma"]),
    st.lists(_SESSION_FILTER, max_size=2),
    st.lists(_EVENT_FILTER, max_size=2),
    st.booleans(),
)
def test_filters_in_each_arm_select_the_rows_the_original_selects(
    tmp_path: Path,
    sessions: list[tuple[list[str], bool]],
    query: str,
    session_filters: list[dict[str, Any]],
    event_filters: list[dict[str, Any]],
    mounted: bool,
) -> None:
    store = SessionStore()
    coordinator = PersistenceCoordinator(store, MemoryBackend())
    for index, (texts, live) in enumerate(sessions):
        _write(coordinator, store, f"s{index}", index, texts, live=live)
    search = SqliteSearch(coordinator, path=":memory:")
    try:
        if not mounted:
            search.bind_persistence(None)
        search.search_sessions(query=query)  # reconcile
        visible = search.persistence is not None
        session_where = build_session_where(session_filters)
        event_where = build_event_where(event_filters)
        where = [part for part in (session_where.sql, event_where.sql) if part]
        filters = [*session_where.params, *event_where.params]
        selected, params, _path = search._candidates(query, visible)
        columns = "session_id, seq, type, time, surface, live, persisted, match_count, document_length"
        # every path (phrase, one term, CJK substring) places the filters in its arms
        pushed, bindings = _pushed_down(f"{selected} SELECT {columns} FROM matched", params, where, filters, visible)
        original_sql = selected.replace("{persisted_filters}", "").replace("{live_filters}", "")
        original = f"{original_sql} SELECT {columns} FROM matched" + (f" WHERE {' AND '.join(where)}" if where else "")
        got = _rows(search, pushed, bindings)
        assert got == _rows(search, original, [*params, *filters])
    finally:
        search.close()
        coordinator.close()
