"""SqliteSearch (runtime spec §4.3): the original's ``sqlite.spec.ts`` cases (§10.4) plus real-store tests.

Names follow the inventory (``test_10_4_<n>_...``). The original's Cordis plugin lifecycle maps to
constructing and closing :class:`SqliteSearch`; its ``AbortSignal`` maps to a ``threading.Event``-like
signal; its ``TestPersistence`` maps to :class:`FakePersistence`, a real :class:`PersistenceCoordinator`
whose ``list``/``inspect`` serve a scripted population and can interleave changes on purpose — the cases
are about those interleavings. Everything else is real: SQLite, the store, JSONL and SQLite backends.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time as _time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.errors import SessionNotFoundError, SessionQueryError
from agentlog.kernel.jsonvalue import FrozenDict, snapshot_json
from agentlog.kernel.store import SessionStore
from agentlog.persistence.backend import SessionListing
from agentlog.persistence.coordinator import PersistenceCoordinator, SessionSnapshot
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.memory import MemoryBackend
from agentlog.persistence.sqlite.backend import SqliteBackend
from agentlog.query.sqlite import SqliteSearch, default_index_path
from agentlog.testing.builders import APPEND, assistant_msg_data, intent, replace, seed_event, text_block, user_msg

# --- helpers ---------------------------------------------------------------------------------------------


def header(session_id: str, created_at: int = 1, **extra: Any) -> dict[str, Any]:
    return {"version": 0, "id": session_id, "createdAt": created_at, **extra}


def message_events(text: str, time: int = 1, seq: int = 0) -> list[dict[str, Any]]:
    return [seed_event("user/message", seq, user_msg(text), time=time, surfaceOp=APPEND)]


def code_of(call: Callable[[], Any]) -> str:
    with pytest.raises(SessionQueryError) as info:
        call()
    return info.value.code


class Flag:
    """A cancellation signal (the ``is_set`` protocol) that can record when it is consulted."""

    def __init__(self, *, on_check: Callable[[], None] | None = None) -> None:
        self._event = threading.Event()
        self.checks = 0
        self._on_check = on_check

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        self.checks += 1
        if self._on_check is not None:
            self._on_check()
        return self._event.is_set()


class Entries:
    """The scripted stored population, shared by every FakePersistence over it (the original's statics)."""

    def __init__(self) -> None:
        self.entries: dict[str, dict[str, Any]] = {}
        self.revisions: dict[str, int] = {}
        self.next_revision = 0

    def set(self, meta: dict[str, Any], events: list[dict[str, Any]]) -> None:
        self.entries[meta["id"]] = {"meta": json.loads(json.dumps(meta)), "events": json.loads(json.dumps(events))}
        self.next_revision += 1
        self.revisions[meta["id"]] = self.next_revision


class FakePersistence(PersistenceCoordinator):
    """A real coordinator whose listing and inspection serve :class:`Entries` and misbehave on cue.

    ``list`` reports ``SessionListing``\\ s with revision ``test:<n>``; hooks: ``list_gate`` (an Event the
    listing waits on), ``list_started`` (set when a listing starts), ``snapshot_effect`` (runs after the
    listing was computed), ``snapshot_override`` (replaces the listing), ``inspect_effect`` (runs during
    an inspection), ``load_effect`` (an external mutating repair through ``load``), ``failure`` (raised by
    every call). ``calls`` logs ``"list"``/``"inspect:<id>"`` in order.
    """

    created: ClassVar[list[FakePersistence]] = []
    # No revision listing: every reconciliation takes the spec's full observation (listing, inspections,
    # second listing), which is what the ported cases count; the fast path is tested on real stores.
    list_revisions = None  # type: ignore[assignment]

    def __init__(self, store: SessionStore, entries: Entries) -> None:
        super().__init__(store, MemoryBackend())
        FakePersistence.created.append(self)
        self.data = entries
        self.inspections: Counter[str] = Counter()
        self.loads: Counter[str] = Counter()
        self.lists = 0
        self.calls: list[str] = []
        self.list_gate: threading.Event | None = None
        self.list_started = threading.Event()
        self.snapshot_effect: Callable[[], None] | None = None
        self.snapshot_override: Callable[[], Any] | None = None
        self.inspect_effect: Callable[[dict[str, Any]], None] | None = None
        self.load_effect: Callable[[dict[str, Any]], None] | None = None
        self.failure: BaseException | None = None

    def list(self) -> Any:
        self.lists += 1
        self.calls.append("list")
        self.list_started.set()
        if self.list_gate is not None:
            self.list_gate.wait(30)
        if self.failure is not None:
            raise self.failure
        if self.snapshot_override is not None:
            listings = self.snapshot_override()
        else:
            listings = [
                SessionListing(
                    id=sid, header=json.loads(json.dumps(entry["meta"])), revision=f"test:{self.data.revisions[sid]}"
                )
                for sid, entry in sorted(self.data.entries.items())
            ]
        if self.snapshot_effect is not None:
            self.snapshot_effect()
        return listings

    def inspect(self, session_id: str) -> SessionSnapshot:
        self.inspections[session_id] += 1
        self.calls.append(f"inspect:{session_id}")
        if self.failure is not None:
            raise self.failure
        if session_id not in self.data.entries:
            raise SessionNotFoundError(f'session "{session_id}" not found')
        entry = self.data.entries[session_id]
        if self.inspect_effect is not None:
            effect, self.inspect_effect = self.inspect_effect, None
            effect(entry)
        return SessionSnapshot(FrozenDict(entry["meta"]), snapshot_json(entry["events"]))

    def load(self, session_id: str) -> SessionSnapshot:
        self.loads[session_id] += 1
        entry = self.data.entries[session_id]
        if self.load_effect is not None:
            effect, self.load_effect = self.load_effect, None
            effect(entry)
            self.data.next_revision += 1
            self.data.revisions[session_id] = self.data.next_revision
        return SessionSnapshot(FrozenDict(entry["meta"]), snapshot_json(entry["events"]))


@pytest.fixture(autouse=True)
def _close_doubles() -> Iterator[None]:
    """Close every coordinator double a test made (their write-behind scheduler and exit hook)."""
    yield
    while FakePersistence.created:
        FakePersistence.created.pop().close()


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    executor = ThreadPoolExecutor(max_workers=4)
    yield executor
    executor.shutdown(wait=True, cancel_futures=True)


_PROVIDER: list[Any] = []


@pytest.fixture(autouse=True)
def _provider(provider: Any) -> Iterator[None]:
    """Every search this module's helpers build is the test's provider's (SQLite, or PostgreSQL)."""
    _PROVIDER.append(provider)
    yield
    _PROVIDER.clear()


def live_search(store: SessionStore | None = None, **config: Any) -> SqliteSearch:
    search: SqliteSearch = _PROVIDER[-1].make(store=store or SessionStore(), **config)
    return search


def mounted(
    entries: list[tuple[dict[str, Any], list[dict[str, Any]]]] | None = None, **config: Any
) -> tuple[SqliteSearch, FakePersistence, Entries]:
    data = Entries()
    for meta, events in entries or []:
        data.set(meta, events)
    store = SessionStore()
    search = live_search(store, **config)
    persistence = FakePersistence(store, data)
    search.bind_persistence(persistence)
    return search, persistence, data


def ids(page: dict[str, Any]) -> list[str]:
    return [item["header"]["id"] for item in page["items"]]


def replace_cursor_offset(cursor: str, offset: object) -> str:
    payload = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    payload["offset"] = offset
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


def wait_blocked(future: Future[Any]) -> None:
    """The future has not completed (it is parked behind a gate the test holds)."""
    assert not future.done()


# --- SQLite session search (cases 1–18) -------------------------------------------------------------------


def test_10_4_1_defaults_and_validates_opening_policy_and_inspection_concurrency() -> None:
    search = live_search()
    assert search.open_at == "startup"
    assert search.persisted_inspect_concurrency == 4
    configured = live_search(open_at="first-search", persisted_inspect_concurrency=2)
    assert configured.open_at == "first-search"
    assert configured.persisted_inspect_concurrency == 2
    assert live_search(default_limit=20.0, max_limit=100.0).default_limit == 20  # JavaScript integers
    for concurrency in (0, 2**53):
        with pytest.raises(SessionQueryError) as info:
            live_search(persisted_inspect_concurrency=concurrency)
        assert info.value.code == "SESSION_QUERY_INVALID_CONFIG"
    assert code_of(lambda: live_search(open_at="later")) == "SESSION_QUERY_INVALID_CONFIG"


@pytest.mark.sqlite_only
def test_10_4_2_first_search_mode_mounts_and_closes_without_opening(tmp_path: Path) -> None:
    path = tmp_path / "unopened.db"
    search = SqliteSearch(store=SessionStore(), path=str(path), open_at="first-search")
    assert not path.exists()
    search.close()
    assert not path.exists()


@pytest.mark.sqlite_only
def test_10_4_3_never_mode_refuses_search_while_reads_and_traces_work(tmp_path: Path) -> None:
    path = tmp_path / "never-mode.db"
    store = SessionStore()
    search = SqliteSearch(store=store, path=str(path), open_at="never")
    assert search.open_at == "never"
    store.create("never-parent", seed=message_events("never opened needle"), meta={"createdAt": 10})
    store.create("never-child", meta={"parentSession": "never-parent", "createdAt": 20})
    assert code_of(lambda: search.search_sessions(query="needle")) == "SESSION_QUERY_SEARCH_DISABLED"
    assert (
        code_of(lambda: search.search_events(session_id="never-parent", query="needle"))
        == "SESSION_QUERY_SEARCH_DISABLED"
    )
    # Disabled before any normalization: even an invalid request reports the disabled search.
    assert code_of(lambda: search.search_sessions(query=3)) == "SESSION_QUERY_SEARCH_DISABLED"
    assert sorted(record["header"]["id"] for record in search.list_sessions()) == ["never-child", "never-parent"]
    lineage = search.trace_session("never-parent")
    assert lineage["complete"] is True
    assert [node["session"]["header"]["id"] for node in lineage["descendants"]] == ["never-child"]
    assert not path.exists()
    search.close()
    assert not path.exists()


def test_10_4_4_opens_once_on_first_search_and_reuses_readiness(monkeypatch: pytest.MonkeyPatch) -> None:
    search = live_search(open_at="first-search")
    opens = Counter[str]()
    original = search._open

    def counting() -> None:
        opens["open"] += 1
        original()

    monkeypatch.setattr(search, "_open", counting)
    assert search.search_sessions(query="first") == {"items": []}
    assert search.search_sessions(query="second") == {"items": []}
    assert opens["open"] == 1


def test_10_4_5_concurrent_first_searches_share_one_readiness(
    monkeypatch: pytest.MonkeyPatch, pool: ThreadPoolExecutor
) -> None:
    search = live_search(open_at="first-search")
    started, release = threading.Event(), threading.Event()
    opens = Counter[str]()
    original = search._open

    def gated() -> None:
        opens["open"] += 1
        started.set()
        release.wait(30)
        original()

    monkeypatch.setattr(search, "_open", gated)
    first = pool.submit(search.search_sessions, query="first")
    assert started.wait(30)
    second = pool.submit(search.search_sessions, query="second")
    wait_blocked(second)
    release.set()
    assert first.result(30) == {"items": []}
    assert second.result(30) == {"items": []}
    assert opens["open"] == 1


def test_10_4_6_two_character_unicode61_tokens_in_live_only_sessions() -> None:
    store = SessionStore()
    search = live_search(store, snippet_chars=20)
    session = store.create(
        "live", meta={"cwd": "/work", "createdAt": 10, "seedLength": 1, "delegationDepth": 2, "agentPreset": "minimal"}
    )
    session.append("user/message", user_msg("An AI helper"), intent(APPEND))
    full = header("live", 10, cwd="/work", seedLength=1, delegationDepth=2, agentPreset="minimal")
    page = search.search_events(session_id="live", query="AI")
    assert page["session"] == full
    assert [(item["sessionId"], item["seq"], item["snippet"]) for item in page["items"]] == [
        ("live", 0, "An AI helper")
    ]
    sessions = search.search_sessions(query="AI")
    assert [(item["header"], item["live"], item["persisted"]) for item in sessions["items"]] == [(full, True, False)]


def test_10_4_7_excludes_assistant_reasoning_and_indexes_visible_answer() -> None:
    store = SessionStore()
    search = live_search(store)
    session = store.create("reasoning")
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    blocks = [{"type": "reasoning", "text": "private-chain-marker"}, text_block("visible-answer-marker")]
    session.append("assistant/message", assistant_msg_data(blocks), intent(APPEND))
    assert search.search_sessions(query="private-chain-marker") == {"items": []}
    page = search.search_sessions(query="visible-answer-marker")
    assert [(item["header"]["id"], item["bestMatch"]["snippet"]) for item in page["items"]] == [
        ("reasoning", "visible-answer-marker")
    ]


def _surface_log() -> list[dict[str, Any]]:
    return [
        seed_event("user/message", 0, user_msg("needle original"), time=10, surfaceOp=APPEND),
        seed_event("turn/start", 1, {"turn": 1}, time=11),
        seed_event(
            "user/message",
            2,
            user_msg("needle summary", source={"kind": "plugin", "plugin": "test"}),
            time=12,
            surfaceOp=replace(0, 0),
            sourceEventSeqs=[0],
        ),
        seed_event(
            "turn/end",
            3,
            {"turn": 1, "reason": {"kind": "error", "error": {"message": "needle failure", "code": "UNKNOWN"}}},
            time=13,
        ),
    ]


def test_10_4_8_searches_all_surfaces_and_applies_metadata_before_ranking() -> None:
    store = SessionStore()
    search = live_search(store, default_limit=10, max_limit=20)
    store.create("a", seed=_surface_log(), meta={"cwd": "/a", "parentSession": "parent", "createdAt": 20})
    store.create("b", seed=message_events("needle peer", 12), meta={"createdAt": 20})
    every = search.search_events(session_id="a", query="needle")
    assert {item["surface"] for item in every["items"]} == {"current", "shadowed", "log-only"}
    narrowed = search.search_events(
        session_id="a",
        query="needle",
        filters=[
            {"kind": "seq", "from": 2, "to": 2},
            {"kind": "time", "from": 12, "to": 12},
            {"kind": "type", "values": ["user/message"]},
            {"kind": "surface", "values": ["current"]},
        ],
    )
    assert [(item["seq"], item["surface"]) for item in narrowed["items"]] == [(2, "current")]
    grouped = search.search_sessions(
        query="needle",
        session_filters=[
            {"kind": "id", "values": ["a"]},
            {"kind": "cwd", "values": ["/a"]},
            {"kind": "created-at", "from": 20, "to": 20},
            {"kind": "parent", "values": ["parent"]},
            {"kind": "availability", "values": ["live"]},
        ],
        event_filters=[{"kind": "surface", "values": ["shadowed"]}],
    )
    assert len(grouped["items"]) == 1
    item = grouped["items"][0]
    assert (item["header"]["id"], item["header"]["cwd"], item["header"]["parentSession"]) == ("a", "/a", "parent")
    assert (item["live"], item["persisted"], item["bestMatch"]["seq"], item["bestMatch"]["surface"]) == (
        True,
        False,
        0,
        "shadowed",
    )


def test_10_4_9_searches_at_the_fts5_outer_predicate_boundary_in_both_scopes() -> None:
    store = SessionStore()
    search = live_search(store)
    store.create("predicate-boundary", seed=message_events("needle"), meta={"cwd": "/work"})
    session_filters = [{"kind": "cwd", "values": ["/work", None]} for _ in range(14)]
    event_filters = [{"kind": "type", "values": ["user/message"]} for _ in range(13)]
    assert ids(search.search_sessions(query="needle", session_filters=session_filters)) == ["predicate-boundary"]
    page = search.search_events(session_id="predicate-boundary", query="needle", filters=event_filters)
    assert [(item["sessionId"], item["seq"]) for item in page["items"]] == [("predicate-boundary", 0)]


def test_10_4_10_rejects_unsupported_fts5_outer_predicate_counts() -> None:
    store = SessionStore()
    search = live_search(store)
    store.create("predicate-limit", seed=message_events("needle"))
    session_filters = [{"kind": "id", "values": ["predicate-limit"]} for _ in range(1_100)]
    event_filters = [{"kind": "type", "values": ["user/message"]} for _ in range(1_100)]
    invalid = "SESSION_QUERY_INVALID_FILTER"
    assert code_of(lambda: search.search_sessions(query="needle", session_filters=session_filters)) == invalid
    assert (
        code_of(lambda: search.search_events(session_id="predicate-limit", query="needle", filters=event_filters))
        == invalid
    )
    assert (
        code_of(
            lambda: search.search_sessions(
                query="needle", session_filters=session_filters[:7], event_filters=event_filters[:8]
            )
        )
        == invalid
    )
    assert (
        code_of(lambda: search.search_events(session_id="predicate-limit", query="needle", filters=event_filters[:14]))
        == invalid
    )


def test_10_4_11_literal_phrase_tokens_stable_ties_and_bounded_snippets() -> None:
    store = SessionStore()
    search = live_search(store, default_limit=10, max_limit=10, snippet_chars=5)
    for sid, text in (
        ("a", "😀😀 alpha beta BRAID 😀😀"),
        ("b", "alpha beta"),
        ("c", "alpha middle beta"),
        ("d", "alpha beta"),
        ("operator", "needle OR absent"),
        ("only", "needle only"),
        ("quote", 'say "needle" exactly'),
    ):
        store.create(sid, seed=message_events(text, 10), meta={"createdAt": 1})
    phrase = search.search_sessions(query="alpha beta")
    assert ids(phrase) == ["b", "d", "a"]
    assert all(len(item["bestMatch"]["snippet"]) <= 5 for item in phrase["items"])
    assert search.search_sessions(query="AI") == {"items": []}
    assert ids(search.search_sessions(query="needle OR absent")) == ["operator"]
    assert ids(search.search_sessions(query='say "needle"')) == ["quote"]
    assert search.search_sessions(query="*") == {"items": []}


def test_10_4_12_ranks_live_and_persisted_matches_on_one_contract() -> None:
    persisted = header("z-persisted")
    fillers = [(header(f"filler-{i}"), message_events("needle", 10)) for i in range(12)]
    search, _, _ = mounted([(persisted, message_events("needle needle", 10)), *fillers])
    search.store.create("a-live", seed=message_events("needle needle", 10), meta={"createdAt": 1})
    page = search.search_sessions(query="needle", session_filters=[{"kind": "id", "values": ["a-live", "z-persisted"]}])
    assert ids(page) == ["a-live", "z-persisted"]


def test_10_4_13_positions_snippets_across_diacritics_and_punctuation() -> None:
    store = SessionStore()
    search = live_search(store, snippet_chars=14)
    store.create("snippet", seed=message_events("long long long—café,\nnext value", 10))
    page = search.search_events(session_id="snippet", query="CAFE")
    assert len(page["items"]) == 1
    snippet = page["items"][0]["snippet"]
    assert "café" in snippet and "—" in snippet and "\n" not in snippet
    assert len(snippet) <= 14


def test_10_4_14_binds_cursors_to_requests_and_invalidates_within_session_pages_only_for_target_changes() -> None:
    store = SessionStore()
    search = live_search(store, default_limit=1, max_limit=5)
    target = store.create(
        "target",
        seed=[
            *message_events("needle one", 10),
            *message_events("needle two", 11, seq=1),
            *message_events("needle three", 12, seq=2),
        ],
    )
    store.create("other", seed=message_events("needle other", 10))
    event_page = search.search_events(session_id="target", query="needle", limit=1)
    session_page = search.search_sessions(query="needle", limit=1)
    assert isinstance(event_page.get("nextCursor"), str) and isinstance(session_page.get("nextCursor"), str)

    unsafe = replace_cursor_offset(event_page["nextCursor"], 1e100)
    assert (
        code_of(lambda: search.search_events(session_id="target", query="needle", limit=1, cursor=unsafe))
        == "SESSION_QUERY_INVALID_CURSOR"
    )

    keys = [(item["sessionId"], item["seq"]) for item in event_page["items"]]
    cursor = event_page.get("nextCursor")
    while cursor is not None:
        page = search.search_events(session_id="target", query="needle", limit=1, cursor=cursor)
        keys += [(item["sessionId"], item["seq"]) for item in page["items"]]
        cursor = page.get("nextCursor")
    assert len(keys) == 3 and len(set(keys)) == 3

    found = ids(session_page)
    cursor = session_page.get("nextCursor")
    while cursor is not None:
        page = search.search_sessions(query="needle", limit=1, cursor=cursor)
        found += ids(page)
        cursor = page.get("nextCursor")
    assert len(found) == 2 and len(set(found)) == 2

    store.create("unrelated", seed=message_events("needle unrelated", 20))
    kept = search.search_events(session_id="target", query="needle", limit=1, cursor=event_page["nextCursor"])
    assert [item["sessionId"] for item in kept["items"]] == ["target"]
    stale = "SESSION_QUERY_STALE_CURSOR"
    assert code_of(lambda: search.search_sessions(query="needle", limit=1, cursor=session_page["nextCursor"])) == stale
    assert (
        code_of(
            lambda: search.search_events(
                session_id="target", query="different", limit=1, cursor=event_page["nextCursor"]
            )
        )
        == "SESSION_QUERY_INVALID_CURSOR"
    )
    target.append("user/message", user_msg("needle four"), intent(APPEND))
    assert (
        code_of(
            lambda: search.search_events(session_id="target", query="needle", limit=1, cursor=event_page["nextCursor"])
        )
        == stale
    )


def test_10_4_15_invalidates_session_cursors_after_transient_topology_changes() -> None:
    store = SessionStore()
    search = live_search(store, default_limit=1, max_limit=5)
    store.create("first", seed=message_events("needle first"))
    store.create("second", seed=message_events("needle second"))
    page = search.search_sessions(query="needle", limit=1)
    persistence = FakePersistence(store, Entries())
    search.bind_persistence(persistence)
    search.bind_persistence(None)
    assert (
        code_of(lambda: search.search_sessions(query="needle", limit=1, cursor=page["nextCursor"]))
        == "SESSION_QUERY_STALE_CURSOR"
    )


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    "config",
    [
        {"path": ""},
        {"path": "   "},
        {"path": ":memory:", "default_limit": 0},
        {"path": ":memory:", "max_limit": 0},
        {"path": ":memory:", "default_limit": 10**100},
        {"path": ":memory:", "max_limit": 10**100},
        {"path": ":memory:", "snippet_chars": 0},
        {"path": ":memory:", "read_window_max": -1},
        {"path": ":memory:", "persisted_inspect_concurrency": 0},
        {"path": ":memory:", "persisted_inspect_concurrency": 2**53},
        {"path": ":memory:", "default_limit": 3, "max_limit": 2},
        {"path": ":memory:", "open_at": "later"},
        {"path": ":memory:", "journal_mode": "memory"},
        {"path": ":memory:", "default_limit": 2.5},
        {"path": ":memory:", "default_limit": True},
    ],
)
def test_10_4_16_rejects_invalid_direct_config(config: dict[str, Any]) -> None:
    assert code_of(lambda: SqliteSearch(store=SessionStore(), **config)) == "SESSION_QUERY_INVALID_CONFIG"


def test_10_4_16_rejects_invalid_requests_filters_and_cursors() -> None:
    store = SessionStore()
    search = live_search(store, default_limit=2, max_limit=3)
    store.create("valid", seed=message_events("needle"))
    for request, code in (
        ({"query": ""}, "SESSION_QUERY_INVALID_QUERY"),
        ({"query": "needle", "limit": 0}, "SESSION_QUERY_INVALID_LIMIT"),
        ({"query": "needle", "limit": 4}, "SESSION_QUERY_INVALID_LIMIT"),
        ({"query": "needle", "filters": [{"kind": "seq", "from": 2, "to": 1}]}, "SESSION_QUERY_INVALID_FILTER"),
        ({"query": "needle", "filters": [{"kind": "surface", "values": ["future"]}]}, "SESSION_QUERY_INVALID_FILTER"),
        ({"query": "bad\0query"}, "SESSION_QUERY_INVALID_QUERY"),
        ({"query": "needle", "filters": [{"kind": "future"}]}, "SESSION_QUERY_INVALID_FILTER"),
        ({"query": "needle", "filters": [{"kind": "text", "text": "needle"}]}, "SESSION_QUERY_INVALID_FILTER"),
        ({"query": "needle", "cursor": "not-json"}, "SESSION_QUERY_INVALID_CURSOR"),
        ({"query": "needle", "cursor": 7}, "SESSION_QUERY_INVALID_CURSOR"),
    ):
        with pytest.raises(SessionQueryError) as info:
            search.search_events(session_id="valid", **request)
        assert info.value.code == code, request
    for filters in (
        {"session_filters": [{"kind": "availability", "values": ["remote"]}]},
        {"session_filters": [{"kind": "future"}]},
        {"event_filters": [{"kind": "future"}]},
    ):
        with pytest.raises(SessionQueryError) as info:
            search.search_sessions(query="needle", **filters)
        assert info.value.code == "SESSION_QUERY_INVALID_FILTER"
    assert (
        code_of(lambda: search.search_events(session_id="absent", query="needle")) == "SESSION_QUERY_SESSION_NOT_FOUND"
    )


def test_10_4_17_rejects_aggregate_bindings_above_the_portable_variable_limit() -> None:
    store = SessionStore()
    search = live_search(store)
    store.create("binding-limit", seed=message_events("needle"))
    half = 16_383
    session_ids = [f"binding-{i}" for i in range(half)]
    assert (
        code_of(
            lambda: search.search_sessions(
                query="needle",
                session_filters=[{"kind": "id", "values": session_ids}],
                event_filters=[{"kind": "type", "values": ["user/message"] * half}],
            )
        )
        == "SESSION_QUERY_INVALID_FILTER"
    )
    assert (
        code_of(
            lambda: search.search_events(
                session_id="binding-limit",
                query="needle",
                filters=[
                    {"kind": "type", "values": ["user/message"] * half},
                    {"kind": "surface", "values": ["current"] * half},
                ],
            )
        )
        == "SESSION_QUERY_INVALID_FILTER"
    )


def test_10_4_18_rejects_one_125000_value_filter_list() -> None:
    search = live_search()
    values = [f"oversized-binding-{i}" for i in range(125_000)]
    assert (
        code_of(lambda: search.search_sessions(query="needle", session_filters=[{"kind": "id", "values": values}]))
        == "SESSION_QUERY_INVALID_FILTER"
    )


# --- reconciliation and source lifecycle (cases 19–38) ----------------------------------------------------


def test_10_4_19_owns_queued_request_and_filter_values_before_waiting(pool: ThreadPoolExecutor) -> None:
    durable = header("owned")
    search, persistence, _ = mounted([(durable, message_events("durable needle"))])
    persistence.list_gate = threading.Event()
    blocking = pool.submit(search.search_sessions, query="needle")
    assert persistence.list_started.wait(30)
    availability = ["persisted"]
    filters = [{"kind": "availability", "values": availability}]
    waiting = threading.Event()
    queued = pool.submit(
        search.search_sessions, query="needle", session_filters=filters, signal=Flag(on_check=waiting.set)
    )
    assert waiting.wait(30)  # the signal is first consulted after the request was copied
    availability[0] = "live"
    filters.append({"kind": "id", "values": []})
    persistence.list_gate.set()
    assert [item["header"] for item in blocking.result(30)["items"]] == [durable]
    assert [item["header"] for item in queued.result(30)["items"]] == [durable]


def test_10_4_20_mounts_dynamically_shadows_with_temp_live_rows_reveals_and_hides_on_unmount() -> None:
    shared = header("shared", 10, cwd="/work")
    durable = header("durable", 5)
    data = Entries()
    data.set(shared, message_events("persisted needle"))
    data.set(durable, message_events("durable needle"))
    store = SessionStore()
    search = live_search(store)
    assert search.search_sessions(query="durable") == {"items": []}
    persistence = FakePersistence(store, data)
    search.bind_persistence(persistence)
    page = search.search_sessions(query="durable")
    assert [(i["header"], i["live"], i["persisted"]) for i in page["items"]] == [(durable, False, True)]

    live = store.prepare("shared", meta={"createdAt": 10, "cwd": "/work"})
    live.append("user/message", user_msg("live needle"), intent(APPEND))
    detach = store.enter(live)
    store.announce(live)
    assert search.search_sessions(query="persisted") == {"items": []}
    page = search.search_sessions(query="live")
    assert [(i["header"], i["live"], i["persisted"]) for i in page["items"]] == [(shared, True, True)]
    detach()
    page = search.search_sessions(query="persisted")
    assert [(i["header"], i["live"], i["persisted"]) for i in page["items"]] == [(shared, False, True)]

    search.bind_persistence(None)
    assert search.search_sessions(query="durable") == {"items": []}
    assert (
        code_of(lambda: search.search_events(session_id="durable", query="needle")) == "SESSION_QUERY_SESSION_NOT_FOUND"
    )


def test_10_4_21_never_loads_a_persisted_log_while_the_session_is_live() -> None:
    shared = header("checkpointed-live", 10)
    data = Entries()
    data.set(shared, message_events("persisted needle"))
    store = SessionStore()
    search = live_search(store)
    live = store.prepare("checkpointed-live", seed=message_events("live needle"), meta={"createdAt": 10})
    detach = store.enter(live)
    store.announce(live)
    persistence = FakePersistence(store, data)
    search.bind_persistence(persistence)
    page = search.search_sessions(query="live", session_filters=[{"kind": "availability", "values": ["persisted"]}])
    assert [(i["header"], i["live"], i["persisted"]) for i in page["items"]] == [(shared, True, True)]
    assert persistence.loads["checkpointed-live"] == 0
    assert persistence.inspections["checkpointed-live"] == 0
    detach()
    page = search.search_sessions(query="persisted")
    assert [(i["header"], i["live"], i["persisted"]) for i in page["items"]] == [(shared, False, True)]
    assert persistence.loads["checkpointed-live"] == 0
    assert persistence.inspections["checkpointed-live"] == 1


def test_10_4_22_retries_when_a_live_owner_attaches_during_observation() -> None:
    search, persistence, _ = mounted()

    def attach() -> None:
        persistence.snapshot_effect = None
        search.store.create("attached", seed=message_events("attached needle"))

    persistence.snapshot_effect = attach
    assert ids(search.search_sessions(query="attached")) == ["attached"]


def test_10_4_23_cannot_crash_repair_when_live_ownership_begins_during_inspection() -> None:
    shared = header("attach-during-inspect", 10)
    persisted_events = message_events("persisted needle")
    search, persistence, data = mounted([(shared, persisted_events)])
    persistence.load_effect = lambda entry: entry.update(events=message_events("incorrect repair"))

    def attach(_entry: dict[str, Any]) -> None:
        search.store.create("attach-during-inspect", seed=message_events("live needle"), meta={"createdAt": 10})

    persistence.inspect_effect = attach
    page = search.search_sessions(query="live")
    assert [(i["header"], i["live"], i["persisted"]) for i in page["items"]] == [(shared, True, True)]
    assert persistence.loads["attach-during-inspect"] == 0
    assert data.entries["attach-during-inspect"]["events"] == persisted_events


def test_10_4_24_retries_when_one_live_owner_replaces_another_during_observation() -> None:
    data = Entries()
    store = SessionStore()
    search = live_search(store)
    first = store.prepare("first", seed=message_events("first needle"))
    detach_first = store.enter(first)
    store.announce(first)
    persistence = FakePersistence(store, data)
    search.bind_persistence(persistence)

    def swap() -> None:
        persistence.snapshot_effect = None
        detach_first()
        store.create("second", seed=message_events("second needle"))

    persistence.snapshot_effect = swap
    assert ids(search.search_sessions(query="second")) == ["second"]


def test_10_4_25_uses_the_reconciled_binding_through_the_query_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    durable = header("post-reconcile-unmount")
    events = [*message_events("durable needle", 1), *message_events("durable needle again", 2, seq=1)]
    search, _, _ = mounted([(durable, events)], default_limit=1, max_limit=2)
    original = search._reconcile

    def then_unmount(signal: Any, **kwargs: Any) -> Any:
        binding = original(signal, **kwargs)
        search.bind_persistence(None)
        return binding

    monkeypatch.setattr(search, "_reconcile", then_unmount)
    page = search.search_events(session_id="post-reconcile-unmount", query="needle", limit=1)
    assert [item["sessionId"] for item in page["items"]] == ["post-reconcile-unmount"]
    assert isinstance(page.get("nextCursor"), str)
    monkeypatch.undo()
    assert (
        code_of(lambda: search.search_events(session_id="post-reconcile-unmount", query="needle"))
        == "SESSION_QUERY_SESSION_NOT_FOUND"
    )


def test_10_4_26_discards_a_stale_list_rejection_when_persistence_unmounts(pool: ThreadPoolExecutor) -> None:
    search, persistence, _ = mounted([(header("racing"), message_events("durable needle"))])
    persistence.list_gate = threading.Event()
    pending = pool.submit(search.search_sessions, query="needle")
    assert persistence.list_started.wait(30)
    search.bind_persistence(None)
    persistence.failure = RuntimeError("stale backend rejection")
    persistence.list_gate.set()
    assert pending.result(30) == {"items": []}


def test_10_4_27_retries_against_a_replacement_after_the_prior_binding_rejects(pool: ThreadPoolExecutor) -> None:
    durable = header("replacement")
    search, prior, data = mounted([(durable, message_events("durable needle"))])
    prior.list_gate = threading.Event()
    pending = pool.submit(search.search_sessions, query="needle")
    assert prior.list_started.wait(30)
    search.bind_persistence(None)
    replacement = FakePersistence(search.store, data)
    search.bind_persistence(replacement)
    prior.failure = RuntimeError("stale prior binding")
    prior.list_gate.set()
    assert [item["header"] for item in pending.result(30)["items"]] == [durable]


def test_10_4_28_reloads_a_replacement_source_even_when_revisions_collide() -> None:
    durable = header("colliding-replacement")
    search, prior, data = mounted([(durable, message_events("old content"))])
    revision = data.revisions["colliding-replacement"]
    assert [item["header"] for item in search.search_sessions(query="old")["items"]] == [durable]
    search.bind_persistence(None)
    data.set(durable, message_events("new needle"))
    data.revisions["colliding-replacement"] = revision
    replacement = FakePersistence(search.store, data)
    search.bind_persistence(replacement)
    page = search.search_sessions(query="new needle")
    assert prior.inspections["colliding-replacement"] + replacement.inspections["colliding-replacement"] == 2
    assert [item["header"] for item in page["items"]] == [durable]
    assert search.search_sessions(query="old") == {"items": []}
    assert replacement.inspections["colliding-replacement"] == 1


def test_10_4_29_retries_when_a_successful_observation_belongs_to_an_unmounted_source() -> None:
    search, persistence, _ = mounted([(header("successful-unmount"), message_events("durable needle"))])

    def unmount_on_second_list() -> None:
        if persistence.lists == 2:
            search.bind_persistence(None)

    persistence.snapshot_effect = unmount_on_second_list
    assert search.search_sessions(query="needle") == {"items": []}
    assert persistence.lists == 2


def test_10_4_30_retries_when_the_snapshot_population_changes_during_observation() -> None:
    first, added = header("first"), header("added-during-list")
    search, persistence, data = mounted([(first, message_events("first needle"))])

    def add() -> None:
        persistence.snapshot_effect = None
        data.set(added, message_events("added needle"))

    persistence.snapshot_effect = add
    page = search.search_sessions(query="needle")
    assert sorted(ids(page)) == sorted(["added-during-list", "first"])
    assert persistence.inspections["first"] == 2
    assert persistence.inspections["added-during-list"] == 1


def test_10_4_31_fails_after_one_retry_when_snapshots_keep_changing() -> None:
    durable = header("continuous-mutation")
    search, persistence, data = mounted([(durable, message_events("durable needle"))])
    persistence.snapshot_effect = lambda: data.set(durable, message_events(f"durable needle {persistence.lists}"))
    with pytest.raises(SessionQueryError) as info:
        search.search_sessions(query="needle")
    assert info.value.code == "SESSION_QUERY_PERSISTENCE_FAILED"
    assert str(info.value) == "session-search persistence observation did not stabilize after one retry"
    assert persistence.lists == 4


class _RebindingStore(SessionStore):
    """A store whose first listing replaces the search's persistence binding (same service, new binding)."""

    search: SqliteSearch | None = None
    bumped = False

    def list(self) -> Any:
        if self.search is not None and not self.bumped:
            self.bumped = True
            persistence = self.search.persistence
            self.search.bind_persistence(None)
            self.search.bind_persistence(persistence)
        return super().list()


def test_10_4_32_retries_if_the_binding_changes_while_live_sessions_are_observed() -> None:
    durable = header("live-boundary-retry")
    data = Entries()
    data.set(durable, message_events("durable needle"))
    store = _RebindingStore()
    search = live_search(store)
    persistence = FakePersistence(store, data)
    search.bind_persistence(persistence)
    store.search = search
    assert [item["header"] for item in search.search_sessions(query="needle")["items"]] == [durable]
    assert persistence.inspections["live-boundary-retry"] == 2


def test_10_4_33_rejects_malformed_snapshots_and_preserves_typed_failures() -> None:
    durable = header("invalid-snapshot")
    search, persistence, _ = mounted([(durable, message_events("durable needle"))])
    for override in (
        lambda: "not-an-array",
        lambda: [SessionListing(id="invalid-snapshot", header=durable, revision=1)],  # type: ignore[arg-type]
        lambda: [
            SessionListing(id="invalid-snapshot", header=durable, revision="duplicate:1"),
            SessionListing(id="invalid-snapshot", header=durable, revision="duplicate:2"),
        ],
    ):
        persistence.snapshot_override = override
        assert code_of(lambda: search.search_sessions(query="needle")) == "SESSION_QUERY_PERSISTENCE_FAILED"
    persistence.snapshot_override = None
    typed = SessionQueryError("typed persistence failure", "SESSION_QUERY_PERSISTENCE_FAILED")
    persistence.failure = typed
    with pytest.raises(SessionQueryError) as info:
        search.search_sessions(query="needle")
    assert info.value is typed


def test_10_4_34_rejects_immutable_header_conflicts_between_live_and_persisted() -> None:
    shared = header("conflict", 10, delegationDepth=1)
    search, _, _ = mounted([(shared, message_events("persisted needle"))])
    search.store.create("conflict", seed=message_events("live needle"), meta={"createdAt": 10, "delegationDepth": 2})
    assert code_of(lambda: search.search_sessions(query="needle")) == "SESSION_QUERY_SOURCE_CONFLICT"


def _generations(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT id, generation FROM persisted_sessions ORDER BY id").fetchall())


@pytest.mark.sqlite_only
def test_10_4_35_preserves_unchanged_generations_while_reconciling_new_changed_and_deleted(tmp_path: Path) -> None:
    path = tmp_path / "search.db"
    unchanged, changed, deleted, added = header("unchanged"), header("changed"), header("deleted"), header("added")
    data = Entries()
    data.set(unchanged, message_events("unchanged needle"))
    data.set(changed, message_events("old needle"))
    data.set(deleted, message_events("deleted needle"))
    store = SessionStore()
    first = FakePersistence(store, data)
    search = SqliteSearch(first, path=str(path))
    search.search_sessions(query="needle")
    assert dict(first.inspections) == {"unchanged": 1, "changed": 1, "deleted": 1}
    search.search_sessions(query="needle")
    assert dict(first.inspections) == {"unchanged": 1, "changed": 1, "deleted": 1}
    search.close()
    first.close()
    before = _generations(path)

    del data.entries["deleted"]
    data.set(changed, message_events("changed needle"))
    data.set(added, message_events("added needle"))
    store = SessionStore()
    second = FakePersistence(store, data)
    search = SqliteSearch(second, path=str(path))
    assert sorted(ids(search.search_sessions(query="needle"))) == ["added", "changed", "unchanged"]
    assert dict(second.inspections) == {"changed": 1, "added": 1}
    search.close()
    second.close()
    after = _generations(path)
    assert after["unchanged"] == before["unchanged"]
    assert after["changed"] > before["changed"]
    assert "deleted" not in after and "added" in after


@pytest.mark.sqlite_only
def test_10_4_36_drops_connection_local_live_overlays_on_reopen_and_keeps_persistent_bases(tmp_path: Path) -> None:
    path = tmp_path / "search.db"
    shared = header("shared", 10)
    data = Entries()
    data.set(shared, message_events("persisted needle"))
    store = SessionStore()
    persistence = FakePersistence(store, data)
    store.create("shared", seed=message_events("live needle"), meta={"createdAt": 10})
    search = SqliteSearch(persistence, path=str(path))
    assert len(search.search_events(session_id="shared", query="live")["items"]) == 1
    search.close()
    persistence.close()

    store = SessionStore()
    again = FakePersistence(store, data)
    search = SqliteSearch(again, path=str(path))
    assert search.search_sessions(query="live") == {"items": []}
    page = search.search_sessions(query="persisted")
    assert [(i["header"], i["live"], i["persisted"]) for i in page["items"]] == [(shared, False, True)]
    assert again.inspections["shared"] == 1  # the first process never read it: it was live there
    search.close()


def test_10_4_37_refreshes_after_an_external_mutating_repair_without_loading() -> None:
    durable = header("repair")
    search, persistence, _ = mounted([(durable, message_events("before repair"))])
    assert [item["header"] for item in search.search_sessions(query="before")["items"]] == [durable]
    persistence.load_effect = lambda entry: entry.update(events=message_events("repaired needle"))
    persistence.load("repair")
    assert [item["header"] for item in search.search_sessions(query="repaired")["items"]] == [durable]
    assert persistence.inspections["repair"] == 2
    search.search_sessions(query="repaired")
    assert persistence.inspections["repair"] == 2
    assert persistence.loads["repair"] == 1


@pytest.mark.sqlite_only
def test_10_4_38_recovers_on_the_next_search_after_source_and_transaction_failures() -> None:
    search, persistence, _ = mounted([(header("durable"), message_events("durable needle"))])
    persistence.failure = RuntimeError("offline")
    failed = "SESSION_QUERY_PERSISTENCE_FAILED"
    assert code_of(lambda: search.search_sessions(query="needle")) == failed
    signal = Flag()
    assert code_of(lambda: search.search_sessions(query="needle", signal=signal)) == failed
    persistence.failure = OSError("still offline")
    assert code_of(lambda: search.search_sessions(query="needle", signal=signal)) == failed
    persistence.failure = None
    assert len(search.search_sessions(query="needle")["items"]) == 1

    live = search.store.create("live", seed=message_events("base"))
    search.search_events(session_id="live", query="base")
    assert search._conn is not None
    search._conn.execute("PRAGMA query_only = ON")
    live.append("user/message", user_msg("retry needle"), intent(APPEND))
    assert code_of(lambda: search.search_events(session_id="live", query="needle")) == "SESSION_QUERY_INDEX_FAILED"
    search._conn.execute("PRAGMA query_only = OFF")
    # seq 2: the one-event seed, its end-seed marker, then the live message.
    assert [item["seq"] for item in search.search_events(session_id="live", query="needle")["items"]] == [2]


# --- cancellation, close, real persistence (cases 46–57) -------------------------------------------------


def _run(search: SqliteSearch, scope: str, session_id: str, signal: Any = None) -> dict[str, Any]:
    if scope == "sessions":
        return search.search_sessions(query="needle", signal=signal)
    return search.search_events(session_id=session_id, query="needle", signal=signal)


@pytest.mark.parametrize("scope", ["sessions", "events"])
def test_10_4_46_consults_one_signal_around_both_lists_and_the_inspection(scope: str) -> None:
    """The backend calls take no signal here (they are synchronous): the one signal of the search is
    consulted before and after each of them, so every backend call is bracketed by checks."""
    sid = f"signal-{scope}"
    search, persistence, _ = mounted([(header(sid), message_events("signal needle"))])
    signal = Flag(on_check=lambda: persistence.calls.append("check"))
    assert len(_run(search, scope, sid, signal)["items"]) == 1
    calls = persistence.calls
    assert [c for c in calls if c != "check"] == ["list", f"inspect:{sid}", "list"]
    for index, call in enumerate(calls):
        if call != "check":
            assert calls[index - 1] == "check" and calls[index + 1] == "check"


@pytest.mark.parametrize("scope", ["sessions", "events"])
def test_10_4_47_starts_no_persistence_observation_for_a_pre_aborted_search(scope: str) -> None:
    sid = f"pre-aborted-{scope}"
    search, persistence, _ = mounted([(header(sid), message_events("needle"))])
    signal = Flag()
    signal.set()
    assert code_of(lambda: _run(search, scope, sid, signal)) == "SESSION_QUERY_ABORTED"
    assert persistence.calls == []


def test_10_4_48_awaits_a_listing_that_observes_cancellation_without_another_step(pool: ThreadPoolExecutor) -> None:
    search, persistence, _ = mounted([(header("cooperative-list-abort"), message_events("needle"))])
    signal = Flag()
    seen, cleanup = threading.Event(), threading.Event()

    def cooperative() -> None:
        persistence.snapshot_effect = None
        while not signal.is_set():
            threading.Event().wait(0.005)
        seen.set()
        cleanup.wait(30)

    persistence.snapshot_effect = cooperative
    pending = pool.submit(search.search_sessions, query="needle", signal=signal)
    assert persistence.list_started.wait(30)
    signal.set()
    assert seen.wait(30)
    wait_blocked(pending)
    assert persistence.calls == ["list"]
    cleanup.set()
    assert code_of(lambda: pending.result(30)) == "SESSION_QUERY_ABORTED"
    assert persistence.calls == ["list"]


def test_10_4_49_keeps_a_second_search_serialized_while_an_abort_ignoring_list_finishes(
    pool: ThreadPoolExecutor,
) -> None:
    search, persistence, _ = mounted([(header("serialized-list-abort"), message_events("needle"))])
    persistence.list_gate = threading.Event()
    signal = Flag()
    first = pool.submit(search.search_sessions, query="needle", signal=signal)
    assert persistence.list_started.wait(30)
    signal.set()
    second = pool.submit(search.search_events, session_id="serialized-list-abort", query="needle")
    wait_blocked(first)
    wait_blocked(second)
    assert persistence.calls == ["list"]
    persistence.list_gate.set()
    assert code_of(lambda: first.result(30)) == "SESSION_QUERY_ABORTED"
    assert [item["sessionId"] for item in second.result(30)["items"]] == ["serialized-list-abort"]


def test_10_4_50_awaits_an_abort_ignoring_inspection_and_starts_nothing_more(pool: ThreadPoolExecutor) -> None:
    search, persistence, _ = mounted(
        [
            (header("ignored-inspect-first"), message_events("first needle")),
            (header("ignored-inspect-second"), message_events("second needle")),
        ]
    )
    started, cleanup = threading.Event(), threading.Event()

    def ignoring(_entry: dict[str, Any]) -> None:
        started.set()
        cleanup.wait(30)

    persistence.inspect_effect = ignoring
    signal = Flag()
    pending = pool.submit(search.search_sessions, query="needle", signal=signal)
    assert started.wait(30)
    signal.set()
    wait_blocked(pending)
    cleanup.set()
    assert code_of(lambda: pending.result(30)) == "SESSION_QUERY_ABORTED"
    assert persistence.calls == ["list", "inspect:ignored-inspect-first"]


@pytest.mark.sqlite_only
def test_10_4_51_cancels_queued_and_in_flight_waits_without_committing(pool: ThreadPoolExecutor) -> None:
    search, persistence, data = mounted()
    persistence.list_gate = threading.Event()
    blocking = pool.submit(search.search_sessions, query="needle")
    assert persistence.list_started.wait(30)
    queued_signal = Flag()
    queued = pool.submit(search.search_sessions, query="needle", signal=queued_signal)
    queued_signal.set()
    assert code_of(lambda: queued.result(30)) == "SESSION_QUERY_ABORTED"  # cancelled while still queued
    persistence.list_gate.set()
    assert blocking.result(30) == {"items": []}

    data.set(header("uncommitted"), message_events("durable needle"))
    persistence.list_gate = threading.Event()
    persistence.list_started.clear()
    active_signal = Flag()
    active = pool.submit(search.search_sessions, query="needle", signal=active_signal)
    assert persistence.list_started.wait(30)
    active_signal.set()
    wait_blocked(active)
    persistence.list_gate.set()
    assert code_of(lambda: active.result(30)) == "SESSION_QUERY_ABORTED"
    assert search._conn is not None
    assert search._conn.execute("SELECT COUNT(*) FROM persisted_sessions").fetchone() == (0,)
    assert ids(search.search_sessions(query="needle")) == ["uncommitted"]


def test_10_4_52_normalizes_a_failed_readiness_into_an_index_error(monkeypatch: pytest.MonkeyPatch) -> None:
    search = live_search(open_at="first-search")

    def failing() -> None:
        raise RuntimeError("ready error")

    monkeypatch.setattr(search, "_open", failing)
    with pytest.raises(SessionQueryError) as info:
        search.search_sessions(query="needle")
    assert info.value.code == "SESSION_QUERY_INDEX_FAILED"
    assert str(info.value) == "session-search SQLite index failed to open: ready error"
    assert isinstance(info.value.__cause__, RuntimeError)


@pytest.mark.sqlite_only
def test_10_4_53_checks_cancellation_after_readiness_before_reconciliation_touches_sqlite(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    search = live_search(open_at="first-search")
    statements: list[str] = []
    signal = Flag()
    original = search._open

    def open_then_abort() -> None:
        original()
        assert search._conn is not None
        search._conn.set_trace_callback(statements.append)
        signal.set()

    monkeypatch.setattr(search, "_open", open_then_abort)
    assert code_of(lambda: search.search_sessions(query="needle", signal=signal)) == "SESSION_QUERY_ABORTED"
    assert statements == []


def test_10_4_54_close_waits_for_the_accepted_operation_and_rejects_queued_and_future_work(
    pool: ThreadPoolExecutor,
) -> None:
    search, persistence, _ = mounted()
    persistence.list_gate = threading.Event()
    accepted = pool.submit(search.search_sessions, query="needle")
    assert persistence.list_started.wait(30)
    queued = pool.submit(search.search_sessions, query="needle")
    closing = pool.submit(search.close)
    assert code_of(lambda: queued.result(30)) == "SESSION_QUERY_INDEX_FAILED"
    wait_blocked(closing)  # close waits for the accepted operation
    persistence.list_gate.set()
    assert accepted.result(30) == {"items": []}
    closing.result(30)
    with pytest.raises(SessionQueryError) as info:
        search.search_sessions(query="needle")
    closed = f"session-search {type(search)._engine} index is closed"  # the original's text names SQLite
    assert (info.value.code, str(info.value)) == ("SESSION_QUERY_INDEX_FAILED", closed)
    search.close()  # idempotent
    assert search._conn is None


def test_10_4_55_close_releases_the_optional_persistence_binding() -> None:
    """The original awaits its optional-persistence child fiber on disposal; here close() (after the
    accepted operation) releases the binding, and the inherited live reads keep working."""
    search, _, _ = mounted([(header("bound"), message_events("needle"))])
    search.store.create("live", seed=message_events("live needle"))
    search.search_sessions(query="needle")
    search.close()
    assert search.persistence is None
    assert [record["header"]["id"] for record in search.list_sessions()] == ["live"]


@pytest.mark.sqlite_only
def test_10_4_56_real_sqlite_persistence_backend_with_the_real_search(tmp_path: Path) -> None:
    backend = SqliteBackend(str(tmp_path / "canonical.db"))
    coordinator = PersistenceCoordinator(SessionStore(), backend)
    search = SqliteSearch(coordinator, path=str(tmp_path / "derived.db"))
    meta = header("real", 10, cwd="/work")
    coordinator.create(meta)
    coordinator.append("real", message_events("real SQLite needle"))
    page = search.search_sessions(query="SQLite needle")
    assert [(i["header"], i["persisted"], i["live"]) for i in page["items"]] == [(meta, True, False)]
    events = search.search_events(session_id="real", query="SQLite needle")
    assert events["session"] == meta
    assert [(i["sessionId"], i["seq"]) for i in events["items"]] == [("real", 0)]
    assert (
        code_of(lambda: search.search_events(session_id="absent", query="needle")) == "SESSION_QUERY_SESSION_NOT_FOUND"
    )
    search.close()
    loaded = coordinator.load("real")
    assert dict(loaded.meta) == meta and [event["seq"] for event in loaded.events] == [0]
    coordinator.close()


class _CountingCoordinator(PersistenceCoordinator):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.inspected = 0

    def inspect(self, session_id: str) -> SessionSnapshot:
        self.inspected += 1
        return super().inspect(session_id)


@pytest.mark.sqlite_only
def test_10_4_57_reconciles_colliding_revisions_when_reopened_against_another_sqlite_store(tmp_path: Path) -> None:
    index = str(tmp_path / "derived-collision.db")
    shared = header("same-id", 10)

    first = _CountingCoordinator(SessionStore(), SqliteBackend(str(tmp_path / "canonical-a.db")))
    first.create(shared)
    first.append("same-id", message_events("alpha source"))
    search = SqliteSearch(first, path=index)
    assert [i["header"] for i in search.search_sessions(query="alpha")["items"]] == [shared]
    assert first.inspected == 1
    search.close()
    first.close()

    reopened = _CountingCoordinator(SessionStore(), SqliteBackend(str(tmp_path / "canonical-a.db")))
    search = SqliteSearch(reopened, path=index)
    assert [i["header"] for i in search.search_sessions(query="alpha")["items"]] == [shared]
    assert reopened.inspected == 0
    search.close()
    reopened.close()

    second = _CountingCoordinator(SessionStore(), SqliteBackend(str(tmp_path / "canonical-b.db")))
    second.create(shared)
    second.append("same-id", message_events("bravo source"))
    search = SqliteSearch(second, path=index)
    assert [i["header"] for i in search.search_sessions(query="bravo")["items"]] == [shared]
    assert search.search_sessions(query="alpha") == {"items": []}
    assert second.inspected == 1
    search.close()
    second.close()


# --- real stores, crashes, rebuild, CJK companion, properties ----------------------------------------------


def _jsonl_store(root: Path, sessions: int, *, counting: bool = False) -> PersistenceCoordinator:
    cls = _CountingCoordinator if counting else PersistenceCoordinator
    coordinator = cls(SessionStore(), JsonlBackend(str(root)))
    for i in range(sessions):
        coordinator.create(header(f"s{i:03d}", 100 + i, cwd="/work"))
        coordinator.append(f"s{i:03d}", message_events(f"stored needle {i} " + "padding words " * 50, 10 + i))
    return coordinator


@pytest.mark.sqlite_only
def test_default_index_path_per_backend(tmp_path: Path) -> None:
    jsonl = JsonlBackend(str(tmp_path))
    assert default_index_path(jsonl) == f"{tmp_path}/.agentlog-search.sqlite3"
    sqlite_backend = SqliteBackend(str(tmp_path / "store.db"))
    assert default_index_path(sqlite_backend) == f"{tmp_path / 'store.db'}.search.sqlite3"
    assert default_index_path(SqliteBackend(":memory:")) is None
    assert default_index_path(MemoryBackend()) is None


@pytest.mark.sqlite_only
def test_reconciles_a_real_jsonl_store_by_revision_and_keeps_it_untouched(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    writer = _jsonl_store(root, 5)
    writer.close()
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}

    reader = _jsonl_store(root, 0, counting=True)
    assert isinstance(reader, _CountingCoordinator)
    index = default_index_path(reader.backend)
    assert index is not None
    search = SqliteSearch(reader, path=index)
    page = search.search_sessions(query="stored needle", limit=10)
    assert sorted(ids(page)) == [f"s{i:03d}" for i in range(5)]
    assert all(item["persisted"] and not item["live"] for item in page["items"])
    assert reader.inspected == 5
    search.search_sessions(query="needle")
    assert reader.inspected == 5  # unchanged revisions are never re-read
    # The index file in the store root is not a session: the listing stays clean.
    assert all(listing.ok for listing in reader.list()) and len(reader.list()) == 5
    after = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and p.parent != root}
    assert after == {p: b for p, b in before.items() if p.parent != root}

    # Another process appends: its revision changes, exactly that session is re-read.
    other = PersistenceCoordinator(SessionStore(), JsonlBackend(str(root)))
    other.append("s002", message_events("appended afterthought", 99, seq=1))
    other.close()
    hits = search.search_events(session_id="s002", query="afterthought")
    assert [item["seq"] for item in hits["items"]] == [1]
    assert reader.inspected == 6
    search.close()

    # Reopening the index against the unchanged store inspects nothing.
    again = _jsonl_store(root, 0, counting=True)
    assert isinstance(again, _CountingCoordinator)
    search = SqliteSearch(again, path=index)
    assert len(search.search_sessions(query="needle", limit=10)["items"]) == 5
    assert again.inspected == 0
    search.close()


@pytest.mark.sqlite_only
def test_a_damaged_stored_log_is_skipped_and_reported_not_fatal(tmp_path: Path) -> None:
    """A log damaged before its tail (SESSION_CORRUPT on inspect) leaves the corpus instead of failing every
    search; it is reported in ``skipped`` and not re-read while its revision stays the same."""
    root = tmp_path / "store"
    root.mkdir()
    writer = PersistenceCoordinator(SessionStore(), JsonlBackend(str(root), compression="none"))
    for i in range(3):
        writer.create(header(f"s{i:03d}", 100 + i, cwd="/work"))
        writer.append(
            f"s{i:03d}", [*message_events(f"needle {i}"), *message_events("more", seq=1), *message_events("end", seq=2)]
        )
    location = next(listing.location for listing in writer.list() if listing.id == "s001")
    assert location is not None
    writer.close()
    lines = Path(location).read_bytes().split(b"\n")
    lines[2] = b'{"type": "user/message", "seq": 1, broken'
    Path(location).write_bytes(b"\n".join(lines))

    reader = _CountingCoordinator(SessionStore(), JsonlBackend(str(root), compression="auto"))
    search = SqliteSearch(reader, path=str(tmp_path / "index.db"))
    assert sorted(ids(search.search_sessions(query="needle"))) == ["s000", "s002"]
    assert [(entry["sessionId"], entry["code"]) for entry in search.skipped] == [("s001", "SESSION_CORRUPT")]
    inspected = reader.inspected
    search.search_sessions(query="needle")
    assert reader.inspected == inspected  # a damaged log at the same revision is not re-read every search
    assert [entry["sessionId"] for entry in search.skipped] == ["s001"]
    assert code_of(lambda: search.search_events(session_id="s001", query="needle")) == "SESSION_QUERY_CORRUPT_SESSION"
    search.close()


_KILL_CHILD = textwrap.dedent(
    """
    import os, sys, time
    from agentlog.kernel.store import SessionStore
    from agentlog.persistence.coordinator import PersistenceCoordinator
    from agentlog.persistence.jsonl.backend import JsonlBackend
    from agentlog.query.sqlite import SqliteSearch

    root, index, marker = sys.argv[1:4]
    search = SqliteSearch(PersistenceCoordinator(SessionStore(), JsonlBackend(root)), path=index)

    def progress(done, total):
        if done == 5:
            with open(marker, "w") as handle:
                handle.write(str(total))
            time.sleep(600)  # killed here, inside the write transaction

    search.rebuild(progress)
    """
)


@pytest.mark.sqlite_only
def test_kill_9_during_reconciliation_leaves_a_consistent_index_the_next_search_repairs(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    coordinator = _jsonl_store(root, 20)
    index = str(tmp_path / "index.db")
    search = SqliteSearch(coordinator, path=index)
    assert len(search.search_sessions(query="needle", limit=100)["items"]) == 20
    search.close()
    coordinator.create(header("late", 500))
    coordinator.append("late", message_events("late needle"))
    coordinator.close()

    marker = tmp_path / "marker"
    child = subprocess.Popen([sys.executable, "-c", _KILL_CHILD, str(root), index, str(marker)])
    try:
        deadline = _time.monotonic() + 300  # a hang guard: the loop ends at the child's own marker
        while not (marker.exists() and marker.read_text()):
            if child.poll() is not None:
                pytest.fail(f"child exited early with {child.returncode}")
            if _time.monotonic() > deadline:
                pytest.fail("child never reached the write transaction")
            threading.Event().wait(0.01)
        os.kill(child.pid, 9)
    finally:
        child.wait(30)
    assert child.returncode == -9
    assert marker.read_text() == "21"

    # The interrupted transaction left nothing half-written: the rebuild's reset is all that committed.
    db = sqlite3.connect(f"file:{index}?mode=ro", uri=True)
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert db.execute("SELECT COUNT(*) FROM persisted_sessions").fetchone() == (0,)
    db.close()

    reader = PersistenceCoordinator(SessionStore(), JsonlBackend(str(root)))
    search = SqliteSearch(reader, path=index)
    found = ids(search.search_sessions(query="needle", limit=100))
    assert sorted(found) == sorted(["late", *(f"s{i:03d}" for i in range(20))])
    search.close()
    reader.close()


def test_rebuild_reindexes_everything_reports_progress_and_stales_cursors() -> None:
    entries = [(header(f"r{i}"), message_events(f"needle {i}")) for i in range(4)]
    search, persistence, _ = mounted(entries, default_limit=1)
    page = search.search_sessions(query="needle")
    assert sum(persistence.inspections.values()) == 4
    calls: list[tuple[int, int]] = []
    search.rebuild(lambda done, total: calls.append((done, total)))
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert sum(persistence.inspections.values()) == 8
    assert (
        code_of(lambda: search.search_sessions(query="needle", cursor=page["nextCursor"]))
        == "SESSION_QUERY_STALE_CURSOR"
    )
    assert len(search.search_sessions(query="needle", limit=10)["items"]) == 4


def _companion_rows(search: SqliteSearch, table: str) -> int:
    assert search._conn is not None
    return int(search._conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


@pytest.mark.sqlite_only
def test_cjk_queries_use_the_substring_companion_with_the_same_contract() -> None:
    search, _, data = mounted(
        [
            (header("zh-stored", 5), message_events("我们修复了会话日志的问题，会话日志很重要", 10)),
            (header("en-stored", 6), message_events("session log needle", 10)),
        ],
        default_limit=1,
        max_limit=10,
        snippet_chars=8,
    )
    live = search.store.create("ja-live", seed=message_events("ログを検索する会话日志", 11), meta={"createdAt": 7})
    # Only CJK-bearing documents are entered into the companion.
    search.search_sessions(query="needle")
    assert _companion_rows(search, "persisted_grams") == 1
    assert _companion_rows(search, "temp.live_grams") == 1

    # Three or more code points (trigram MATCH) and two code points (scan), both inside longer runs.
    for query in ("会话日志", "日志"):
        first = search.search_sessions(query=query)
        assert ids(first) == ["zh-stored"]  # two occurrences rank above one
        snippet = first["items"][0]["bestMatch"]["snippet"]
        assert len(snippet) <= 8 and query in snippet
        rest = search.search_sessions(query=query, cursor=first["nextCursor"])
        assert ids(rest) == ["ja-live"] and "nextCursor" not in rest
        item = rest["items"][0]
        assert (item["live"], item["persisted"], item["bestMatch"]["sessionId"]) == (True, False, "ja-live")
    # Metadata filters apply on the companion path as on the unicode61 path.
    only_live = search.search_sessions(query="日志", session_filters=[{"kind": "availability", "values": ["live"]}])
    assert ids(only_live) == ["ja-live"]
    events = search.search_events(session_id="zh-stored", query="日志", filters=[{"kind": "seq", "from": 0, "to": 0}])
    assert events["session"] == header("zh-stored", 5)
    assert [hit["seq"] for hit in events["items"]] == [0]
    assert search.search_sessions(query="日誌") == {"items": []}
    # Latin queries keep token semantics; a within-session cursor goes stale when its session changes.
    assert ids(search.search_sessions(query="log")) == ["en-stored"]
    page = search.search_events(session_id="ja-live", query="日志")
    assert "nextCursor" not in page
    live.append("user/message", user_msg("日志 again 日志"), intent(APPEND))
    assert search.search_events(session_id="ja-live", query="日志", limit=5)["items"][0]["seq"] == 2
    # Deleting a stored session deletes its companion rows.
    del data.entries["zh-stored"]
    assert ids(search.search_sessions(query="日志", limit=5)) == ["ja-live"]
    assert _companion_rows(search, "persisted_grams") == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 4), st.integers(0, 3)),
        min_size=1,
        max_size=12,
    ),
    st.integers(1, 5),
)
def test_property_pages_partition_the_ranked_result(docs: list[tuple[int, int, int]], limit: int) -> None:
    """Walking the cursors yields exactly the one-page result, in the ranking order (match count desc,
    length asc, time desc, seq desc), for every page size."""
    store = SessionStore()
    search = live_search(store, default_limit=limit, max_limit=100)
    events = []
    for seq, (needles, padding, time) in enumerate(docs):
        text = " ".join(["needle"] * needles + ["pad"] * padding) or "nothing"
        events += message_events(text, time, seq=seq)
    store.create("p", seed=events)
    whole = search.search_events(session_id="p", query="needle", limit=100)["items"]
    walked: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = search.search_events(session_id="p", query="needle", cursor=cursor)
        walked += page["items"]
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    assert walked == whole
    expected = sorted(
        (seq for seq, (needles, _, _) in enumerate(docs) if needles),
        key=lambda seq: (-docs[seq][0], docs[seq][0] * 7 + docs[seq][1] * 4, -docs[seq][2], -seq),
    )
    assert [hit["seq"] for hit in whole] == expected
    search.close()


@pytest.mark.sqlite_only
def test_a_second_process_changing_the_shared_index_stales_our_session_cursors(tmp_path: Path) -> None:
    """Two processes (two searches) share one index file: rows another one wrote move our corpus too."""
    root = tmp_path / "store"
    root.mkdir()
    writer = _jsonl_store(root, 3)
    index = str(tmp_path / "index.db")
    ours = SqliteSearch(PersistenceCoordinator(SessionStore(), JsonlBackend(str(root))), path=index, default_limit=1)
    page = ours.search_sessions(query="needle")
    writer.create(header("added", 900))
    writer.append("added", message_events("added needle"))
    theirs = SqliteSearch(PersistenceCoordinator(SessionStore(), JsonlBackend(str(root))), path=index)
    assert "added" in ids(theirs.search_sessions(query="needle", limit=10))
    theirs.close()
    assert (
        code_of(lambda: ours.search_sessions(query="needle", cursor=page["nextCursor"])) == "SESSION_QUERY_STALE_CURSOR"
    )
    assert len(ours.search_sessions(query="needle", limit=10)["items"]) == 4
    ours.close()
    writer.close()


def test_a_session_deleted_between_listing_and_inspection_is_retried_not_fatal() -> None:
    """Deviation from the original (which reports any inspect failure): a stored session that vanished
    after the listing named it is the corpus moving, so the observation is retried."""
    search, persistence, data = mounted(
        [(header("gone"), message_events("gone needle")), (header("kept"), message_events("kept needle"))]
    )

    def delete() -> None:
        persistence.snapshot_effect = None
        del data.entries["gone"]

    persistence.snapshot_effect = delete
    assert ids(search.search_sessions(query="needle")) == ["kept"]
    assert persistence.lists == 3  # the vanished session ends the first attempt at once


_WORDS = st.sampled_from(["needle", "pad", "other", "needle", "日志", "会话"])


@pytest.mark.sqlite_only
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.lists(st.lists(_WORDS, min_size=1, max_size=6), min_size=1, max_size=3), st.booleans()),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from(["needle", "日志", "日志会话"]),
)
def test_property_ranking_is_source_comparable_between_live_and_stored(
    corpus: list[tuple[list[list[str]], bool]], query: str
) -> None:
    """The same sessions rank identically whether each one is live or stored (any mix), on the unicode61
    and the substring path alike: the order keys never depend on the source."""
    sessions = []
    for index, (documents, _) in enumerate(corpus):
        events = []
        for seq, words in enumerate(documents):
            events += message_events(" ".join(words), 10 + seq % 2, seq=seq)
        sessions.append((header(f"s{index}", 5), events))

    def ranking(live_mask: list[bool]) -> list[tuple[str, int, str]]:
        data = Entries()
        store = SessionStore()
        for (meta, events), live in zip(sessions, live_mask, strict=True):
            if live:
                store.create(meta["id"], seed=events, meta={"createdAt": 5})
            else:
                data.set(meta, events)
        search = SqliteSearch(store=store, path=":memory:", max_limit=100)
        search.bind_persistence(FakePersistence(store, data))
        page = search.search_sessions(query=query, limit=100)
        search.close()
        while FakePersistence.created:
            FakePersistence.created.pop().close()
        return [(i["header"]["id"], i["bestMatch"]["seq"], i["bestMatch"]["snippet"]) for i in page["items"]]

    stored = ranking([False] * len(sessions))
    assert ranking([True] * len(sessions)) == stored
    assert ranking([live for _, live in corpus]) == stored
