"""A one-term query is ranked from the term side table instead of highlight() over every matching
document; everything a caller sees — items, order, snippets, page boundaries — must equal the original's
formulation (forced here with ``_term_path = False``), for stored and live sessions, with filters."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.memory import MemoryBackend
from agentlog.query import SqliteSearch
from agentlog.testing.builders import APPEND, assistant_msg_data, intent, text_block, user_msg

_WORDS = st.sampled_from(["alpha", "Alpha", "ALPHA!", "café", "CAFE", "beta", "al-pha", "alphabet", "x"])
_TEXT = st.lists(_WORDS, min_size=1, max_size=8).map(" ".join)


def _pages(search: SqliteSearch, call: str, **request: Any) -> list[Any]:
    pages, cursor = [], None
    while True:
        page = getattr(search, call)(**request, limit=2, cursor=cursor)
        pages.append(page["items"])
        cursor = page.get("nextCursor")
        if cursor is None:
            return pages


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.tuples(st.lists(_TEXT, min_size=1, max_size=5), st.booleans()), min_size=1, max_size=4),
    st.sampled_from(["alpha", "cafe", "CAFÉ", "beta", "x", "alphabet", "pha"]),
    st.lists(
        st.one_of(
            st.just({"kind": "type", "values": ["user/message"]}),
            st.just({"kind": "seq", "from": 1, "to": 3}),
            st.just({"kind": "surface", "values": ["current"]}),
        ),
        max_size=2,
    ),
)
def test_the_term_path_serves_what_the_highlight_path_serves(
    provider: Any, sessions: list[tuple[list[str], bool]], query: str, event_filters: list[dict[str, Any]]
) -> None:
    store = SessionStore()
    coordinator = PersistenceCoordinator(store, MemoryBackend())
    for index, (texts, live) in enumerate(sessions):
        session = store.create(f"s{index}", meta={"createdAt": index % 2})
        for number, text in enumerate(texts):
            if number % 2:
                session.append("assistant/message", assistant_msg_data([text_block(text)]), intent(APPEND))
            else:
                session.append("user/message", user_msg(text), intent(APPEND))
        coordinator.flush(session)
        if not live:
            store.dispose(session)
    search = provider.make(coordinator, snippet_chars=12)
    try:
        assert search._single_term(query) is not None
        results = []
        for term_path in (True, False):
            search._term_path = term_path
            found = _pages(search, "search_sessions", query=query, event_filters=event_filters)
            within = [
                _pages(search, "search_events", session_id=f"s{index}", query=query, filters=event_filters)
                for index in range(len(sessions))
            ]
            results.append((found, within))
        assert results[0] == results[1]
    finally:
        search.close()
        coordinator.close()


def test_a_query_of_several_terms_or_none_takes_the_highlight_path(provider: Any) -> None:
    search = provider.make(store=SessionStore())
    try:
        assert search._single_term("alpha beta") is None
        assert search._single_term("*") is None
        assert search._single_term('"needle"') == "needle"
        assert search._single_term("Café!") == "cafe"
        assert search._single_term("日志") is None  # CJK: the substring companion answers
    finally:
        search.close()
