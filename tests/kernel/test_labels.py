"""User metadata on a session: labels and tags are ignorable log events, checked on append and on load
alike, and ``create(meta=...)`` refuses a key the header has no field for instead of dropping it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentlog as al
from _postgres import drop_schema, fresh_schema
from agentlog.errors import (
    InvalidEventError,
    InvalidSeedError,
    SessionLabelError,
    SessionPersistenceCorruptionError,
    UnknownMetaKeyError,
)
from agentlog.kernel.labels import MAX_LABELS, MAX_TAGS, SESSION_LABELS, SESSION_TAGS
from agentlog.kernel.session import Session
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.memory import MemoryBackend, MemoryStorage
from agentlog.persistence.sqlite.backend import SqliteBackend


def _store() -> al.SessionStore:
    return al.SessionStore(now=lambda: 1_700_000_000_000)


def test_create_logs_labels_then_tags_as_ignorable_events_and_the_session_reads_them_back() -> None:
    session = _store().create("s", labels={"user": "bob", "project": "x"}, tags=["eval", "nightly", "eval"])
    assert [dict(event) for event in session.events] == [
        {"type": SESSION_LABELS, "seq": 0, "time": 1_700_000_000_000, "ignorable": True,
         "data": {"labels": {"user": "bob", "project": "x"}}},
        {"type": SESSION_TAGS, "seq": 1, "time": 1_700_000_000_000, "ignorable": True,
         "data": {"add": ["eval", "nightly"]}},
    ]  # fmt: skip
    assert session.labels == {"user": "bob", "project": "x"}
    assert session.tags == ["eval", "nightly"]
    assert "user" not in session.header and "labels" not in session.header


def test_later_changes_merge_remove_and_skip_what_changes_nothing() -> None:
    session = _store().create("s", labels={"user": "bob"}, tags=["eval"])
    assert session.set_labels({"user": "alice", "team": "core"}) is not None
    assert session.set_labels({"user": "alice"}) is None  # already so: nothing logged
    assert session.set_labels({"gone": None}) is None  # removing an absent key changes nothing
    assert session.remove_labels(["team"]) is not None
    assert session.add_tags(["eval"]) is None
    assert session.add_tags(["b", "a"]) is not None
    assert session.remove_tags(["eval", "missing"]) is not None
    assert session.remove_tags(["missing"]) is None
    assert session.labels == {"user": "alice"}
    assert session.tags == ["b", "a"]
    assert len(session.events) == 6


@pytest.mark.parametrize(
    ("labels", "tags", "needle"),
    [
        ({"": "x"}, None, "label key ''"),
        ({"has space": "x"}, None, "label key 'has space'"),
        ({"k" * 65: "x"}, None, "1-64 characters"),
        ({"ключ": "x"}, None, "label key"),
        ({"k": ""}, None, "1-256 characters"),
        ({"k": "v" * 257}, None, "1-256 characters, got 257"),
        ({"k": "a\nb"}, None, "U+000A"),
        ({"k": "a\u202eb"}, None, "U+202E"),
        ({"k": 3}, None, "must be a string, got int"),
        ({"k": None}, None, "removes none"),
        (None, ["a/b"], "tag 'a/b'"),
        (None, [""], "tag ''"),
        (None, "eval", "wrap it in a list"),
    ],
)
def test_a_bad_key_value_or_tag_is_a_typed_error_and_creates_nothing(labels: Any, tags: Any, needle: str) -> None:
    store = _store()
    with pytest.raises(SessionLabelError) as caught:
        store.create("s", labels=labels, tags=tags)
    assert caught.value.code == "SESSION_LABEL_INVALID"
    assert needle in str(caught.value)
    assert store.list() == []


def test_a_value_may_hold_spaces_and_any_printable_text() -> None:
    session = _store().create("s", labels={"title.note": "Bob's run — 第二", "a-b_c.d": "v" * 256})
    assert session.labels["title.note"] == "Bob's run — 第二"


def test_a_session_carries_at_most_64_labels_and_64_tags() -> None:
    session = _store().create(
        "s", labels={f"k{i}": "v" for i in range(MAX_LABELS)}, tags=[f"t{i}" for i in range(MAX_TAGS)]
    )
    before = len(session.events)
    with pytest.raises(SessionLabelError, match="would carry 65 labels"):
        session.set_labels({"one-more": "v"})
    with pytest.raises(SessionLabelError, match="would carry 65 tags"):
        session.add_tags(["one-more"])
    assert len(session.events) == before
    session.set_labels({"k0": None, "replacement": "v"})  # a swap stays within the cap
    assert len(session.labels) == MAX_LABELS
    with pytest.raises(SessionLabelError, match="at most 64"):
        _store().create("t", labels={f"k{i}": "v" for i in range(MAX_LABELS + 1)})


def test_append_refuses_a_bad_label_event_as_load_refuses_it() -> None:
    bad = {"labels": {"bad key": "x"}}
    session = _store().create("s")
    with pytest.raises(SessionLabelError, match="bad key"):
        session.append_custom(SESSION_LABELS, bad)
    for data in ({"add": []}, {"add": ["ok"], "other": 1}, {"remove": "x"}):
        with pytest.raises(SessionLabelError):
            session.append_custom(SESSION_TAGS, data)
    assert len(session.events) == 0
    stored = {"type": SESSION_LABELS, "seq": 0, "time": 5, "data": bad, "ignorable": True}
    with pytest.raises(InvalidSeedError, match="bad key"):
        Session.from_restore("s", [stored], {"version": 0, "id": "s", "createdAt": 1})


def test_unknown_meta_keys_are_refused_naming_the_header_fields_and_labels() -> None:
    store = _store()
    with pytest.raises(UnknownMetaKeyError) as caught:
        store.create("s", meta={"user": "bob", "title": "x", "cwd": "/w"})
    message = str(caught.value)
    assert caught.value.code == "UNKNOWN_META_KEY"
    assert "'user', 'title'" in message
    assert "createdAt, cwd, parentSession, seedLength, origin, delegationDepth, agentPreset" in message
    assert "labels=" in message
    assert store.list() == []
    with pytest.raises(UnknownMetaKeyError):
        store.scope().create("s", meta={"labels": {"user": "bob"}})
    assert store.create("s", meta={"cwd": "/w", "createdAt": 7}).header["createdAt"] == 7


def test_a_fork_inherits_the_labels_of_its_prefix_and_changes_its_own() -> None:
    store = _store()
    parent = store.create("p", labels={"user": "bob"}, tags=["eval"])
    child = store.fork("p", child_id="c")
    child.set_labels({"user": "carol"})
    assert child.labels == {"user": "carol"} and child.tags == ["eval"]
    assert parent.labels == {"user": "bob"}


# --- every backend: labels persist, and a stored bad one is refused on load ---------------------------

KINDS = ("jsonl", "sqlite", "postgres", "memory")


@pytest.fixture(params=KINDS)
def backend_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    kind = request.param
    memory = MemoryStorage()
    schema = fresh_schema() if kind == "postgres" else ""
    dsn = request.getfixturevalue("pg_dsn") if kind == "postgres" else ""

    def open_backend() -> Any:
        if kind == "jsonl":
            return JsonlBackend(str(tmp_path / "store"))
        if kind == "sqlite":
            return SqliteBackend(str(tmp_path / "sessions.db"))
        if kind == "postgres":
            from agentlog.persistence.postgres import PostgresBackend

            return PostgresBackend(dsn, schema=schema)
        return MemoryBackend(memory)

    yield open_backend
    if kind == "postgres":
        drop_schema(dsn, schema)


def test_labels_and_tags_survive_a_store_round_trip_and_further_changes(backend_factory: Any) -> None:
    store = _store()
    coordinator = PersistenceCoordinator(store, backend_factory())
    try:
        session = store.create("s", meta={"cwd": "/w"}, labels={"user": "bob"}, tags=["eval"])
        store.flush(session)
    finally:
        coordinator.close()
    store = _store()
    coordinator = PersistenceCoordinator(store, backend_factory())
    try:
        resumed = coordinator.resume("s")
        assert resumed.labels == {"user": "bob"} and resumed.tags == ["eval"]
        resumed.set_labels({"project": "x"})
        resumed.remove_tags(["eval"])
        store.flush(resumed)
    finally:
        coordinator.close()
    coordinator = PersistenceCoordinator(_store(), backend_factory())
    try:
        loaded = coordinator.load("s")
        ignorable = [
            event.get("ignorable") for event in loaded.events if event["type"] in (SESSION_LABELS, SESSION_TAGS)
        ]
        assert ignorable == [True] * 4
        from agentlog.kernel.labels import fold_labels

        assert fold_labels(loaded.events) == {"labels": {"user": "bob", "project": "x"}, "tags": []}
    finally:
        coordinator.close()


def test_a_stored_bad_label_event_is_refused_on_load(backend_factory: Any) -> None:
    coordinator = PersistenceCoordinator(_store(), backend_factory())
    try:
        meta = {"version": 0, "id": "z", "createdAt": 1}
        bad = [{"type": SESSION_LABELS, "seq": 0, "time": 5, "data": {"labels": {"k": "\x1b[31m"}}, "ignorable": True}]
        coordinator.create(meta)
        with pytest.raises(InvalidEventError, match="U\\+001B"):  # the ownerless append refuses it too
            coordinator.append("z", bad)
        coordinator.backend.append_batch(meta, bad, False)  # as a hand-edited or foreign file arrives
        with pytest.raises(SessionPersistenceCorruptionError, match="U\\+001B"):
            coordinator.load("z")
    finally:
        coordinator.close()
