"""Lineage and event tracing (runtime spec §4.1) against the original's ``session-query/tests/tracing.spec.ts``.

One test per case of the original, named after it, over a real coordinator on a real JSONL store and a
real SQLite store in ``tmp_path``. :class:`TraceBinding` stands in for the original's
``TracePersistence`` plugin: it forwards to the real coordinator, counts calls, fails on request and
can serve a log raw — the original's invalid-provenance cases are logs the real coordinator refuses
at ``inspect`` (it validates every event), so each is checked both ways: served raw, the engine's own
surface fold refuses it (``SESSION_QUERY_INVALID_SURFACE``); stored for real, the coordinator does
(``SESSION_QUERY_CORRUPT_SESSION``). Results are plain JSON copies: the original's "mutating a result
throws" becomes "mutating a result leaves the next trace unchanged".
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.errors import AgentlogError, SessionQueryError
from agentlog.kernel.jsonvalue import thaw
from agentlog.kernel.session import Session
from agentlog.kernel.store import SessionStore
from agentlog.persistence.backend import SessionListing
from agentlog.persistence.coordinator import PersistenceCoordinator, SessionSnapshot
from agentlog.persistence.jsonl import JsonlBackend
from agentlog.persistence.sqlite import SqliteBackend
from agentlog.query.engine import SessionQuery

APPEND = {"surfaceOp": "append"}


def meta(session_id: str, created_at: int = 1, **extra: Any) -> dict[str, Any]:
    return {"version": 0, "id": session_id, "createdAt": created_at, "delegationDepth": 0, **extra}


def user(text: str, *, kind: str = "user", plugin: str | None = None) -> dict[str, Any]:
    source: dict[str, Any] = {"kind": kind}
    if plugin is not None:
        source["plugin"] = plugin
    return {"id": f"user-{text}", "role": "user", "content": [{"type": "text", "text": text}], "source": source}


def assistant(text: str, *, step: int = 1) -> dict[str, Any]:
    message = {
        "id": f"assistant-{text}",
        "role": "assistant",
        "content": [{"type": "text", "text": text}] if text else [],
        "source": {"kind": "model", "provider": "mock", "model": "mock"},
    }
    return {"turn": 1, "step": step, "message": message}


def append_event(seq: int, sources: Any = None, **extra: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "user/message",
        "seq": seq,
        "time": seq + 1,
        "data": {**user(f"event {seq}"), "id": f"u{seq}"},
        "surfaceOp": "append",
    }
    if sources is not None:
        event["sourceEventSeqs"] = sources
    event.update(extra)
    return event


def replace(start: int, end: int, sources: list[int]) -> dict[str, Any]:
    return {"surfaceOp": {"op": "replace", "start": start, "end": end}, "sourceEventSeqs": sources}


class TraceBinding:
    """The real coordinator as the engine's persistence binding, counting calls and failing on request."""

    def __init__(self, coordinator: PersistenceCoordinator) -> None:
        self.real = coordinator
        self.store = coordinator.store
        self.backend = coordinator.backend
        self.list_calls = 0
        self.inspect_calls = 0
        self.list_failure: Exception | None = None
        self.inspect_failure: Exception | None = None
        self.patches: dict[str, dict[str, Any]] = {}
        self.raw: dict[str, tuple[dict[str, Any], list[Any]]] = {}

    def list(self) -> list[SessionListing]:
        self.list_calls += 1
        if self.list_failure is not None:
            raise self.list_failure
        listings = [copy.copy(listing) for listing in self.real.list()]
        listings += [SessionListing(id=key, header=thaw(header)) for key, (header, _) in self.raw.items()]
        for listing in listings:
            if listing.id in self.patches and listing.header is not None:
                listing.header = {**listing.header, **self.patches[listing.id]}
        return listings

    def inspect(self, session_id: str) -> SessionSnapshot:
        self.inspect_calls += 1
        if self.inspect_failure is not None:
            raise self.inspect_failure
        if session_id in self.raw:
            header, events = self.raw[session_id]
            return SessionSnapshot(copy.deepcopy(header), copy.deepcopy(events))  # type: ignore[arg-type]
        return self.real.inspect(session_id)


class World:
    def __init__(self, kind: str, root: Path) -> None:
        self.store = SessionStore()
        backend: Any = JsonlBackend(root / "jsonl") if kind == "jsonl" else SqliteBackend(root / "store.sqlite3")
        self.coordinator = PersistenceCoordinator(self.store, backend, batch_delay_ms=1)
        self.binding = TraceBinding(self.coordinator)
        self.query = SessionQuery(store=self.store)
        self.query.bind_persistence(self.binding)  # type: ignore[arg-type]

    def persist(self, header: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        self.coordinator.create(header)
        self.coordinator.append(header["id"], events)
        return dict(header)

    def persist_unloadable(self, header: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Write a log no load accepts straight through the backend (the coordinator refuses to write one)."""
        self.coordinator.backend.append_batch(dict(header), [dict(event) for event in events], False)
        return dict(header)


@pytest.fixture(params=["jsonl", "sqlite"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    made = World(request.param, tmp_path)
    yield made
    made.coordinator.close()


def code_of(call: Callable[[], Any]) -> str:
    with pytest.raises(SessionQueryError) as caught:
        call()
    return caught.value.code


def append_trace_events(session: Session) -> None:
    """seq 0-8: turn/start, step/start, chunk(2), user 3 citing 2, assistant 4 replacing 3 (citing 3, 2),
    user 5, step/end, step/start, assistant 8 replacing 4 (citing 2, 4)."""
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    session.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "d"}})
    session.append("user/message", user("original"), {"surfaceOp": "append", "sourceEventSeqs": [2]})
    session.append("assistant/message", assistant("summary one"), replace(3, 3, [3, 2]))
    session.append("user/message", user("context", kind="plugin", plugin="test"), APPEND)
    session.append("step/end", {"turn": 1, "step": 1})
    session.append("step/start", {"turn": 1, "step": 2})
    session.append("assistant/message", assistant("summary two", step=2), replace(4, 4, [2, 4]))


# --- session lineage tracing ---------------------------------------------------------------------------


def test_returns_complete_ancestry_deterministic_descendant_trees_and_detached_records(world: World) -> None:
    store = world.store
    root = store.create("root", meta={"createdAt": 0})
    parent = store.create("parent", meta={"createdAt": 1, "parentSession": root.id})
    target = store.create("target", meta={"createdAt": 2, "parentSession": parent.id})
    store.create("b", meta={"createdAt": 4, "parentSession": target.id})
    child_a = store.create("a", meta={"createdAt": 4, "parentSession": target.id})
    store.create("older", meta={"createdAt": 3, "parentSession": target.id})
    store.create("grandchild", meta={"createdAt": 5, "parentSession": child_a.id})

    trace = world.query.trace_session(target.id)
    assert trace["complete"] is True
    assert [record["header"]["id"] for record in trace["ancestors"]] == ["parent", "root"]
    assert trace["root"]["header"]["id"] == "root"
    assert [node["session"]["header"]["id"] for node in trace["descendants"]] == ["older", "a", "b"]
    assert [node["session"]["header"]["id"] for node in trace["descendants"][1]["descendants"]] == ["grandchild"]
    assert list(trace) == ["target", "ancestors", "descendants", "complete", "root"]

    trace["target"]["header"]["createdAt"] = 99
    trace["ancestors"][0]["header"]["createdAt"] = 99
    trace["root"]["header"]["createdAt"] = 99
    trace["descendants"][0]["session"]["header"]["createdAt"] = 99
    assert trace["ancestors"][1]["header"]["createdAt"] == 0  # root as ancestor and as root: two copies
    repeated = world.query.trace_session(target.id)
    assert repeated["target"]["header"]["createdAt"] == 2
    assert repeated["ancestors"][0]["header"]["createdAt"] == 1
    assert repeated["descendants"][0]["session"]["header"]["createdAt"] == 3


def test_represents_root_and_unresolved_parent_traces_explicitly(world: World) -> None:
    root = world.store.create("root", meta={"createdAt": 1})
    partial = world.store.create("partial", meta={"createdAt": 2, "parentSession": "outside"})

    rooted = world.query.trace_session(root.id)
    assert rooted["complete"] is True and rooted["root"]["header"]["id"] == root.id and rooted["ancestors"] == []
    unresolved = world.query.trace_session(partial.id)
    assert unresolved["complete"] is False
    assert unresolved["unresolvedParentId"] == "outside"
    assert unresolved["ancestors"] == [] and "root" not in unresolved


def test_rejects_target_connected_cycles_and_missing_targets(world: World) -> None:
    world.store.create("a", meta={"createdAt": 1, "parentSession": "b"})
    world.store.create("b", meta={"createdAt": 2, "parentSession": "a"})

    with pytest.raises(SessionQueryError, match=r'^session lineage contains a cycle at "a"$') as caught:
        world.query.trace_session("a")
    assert caught.value.code == "SESSION_QUERY_INVALID_LINEAGE"
    assert code_of(lambda: world.query.trace_session("missing")) == "SESSION_QUERY_SESSION_NOT_FOUND"


def test_uses_one_cross_corpus_observation_and_preserves_persistence_failure_semantics(world: World) -> None:
    durable = world.persist(meta("durable"), [append_event(0)])

    trace = world.query.trace_session(durable["id"])
    assert trace["target"]["live"] is False and trace["target"]["persisted"] is True
    assert trace["complete"] is True
    assert (world.binding.list_calls, world.binding.inspect_calls) == (1, 0)

    world.binding.list_failure = RuntimeError("unavailable")
    assert code_of(lambda: world.query.trace_session(durable["id"])) == "SESSION_QUERY_PERSISTENCE_FAILED"


def test_constructs_deeply_nested_descendants_without_consuming_the_call_stack(world: World) -> None:
    depth = 3_000
    parent = world.store.create("deep-0", meta={"createdAt": 0})
    for level in range(1, depth):
        parent = world.store.create(f"deep-{level}", meta={"createdAt": level, "parentSession": parent.id})

    trace = world.query.trace_session("deep-0")
    assert trace["complete"] is True
    nodes = trace["descendants"]
    for level in range(1, depth):
        assert len(nodes) == 1, f"lineage ended before depth {level}"
        assert nodes[0]["session"]["header"]["id"] == f"deep-{level}"
        nodes = nodes[0]["descendants"]
    assert nodes == []
    # ... and the deep end traces its whole ancestry the same way.
    deepest = world.query.trace_session(f"deep-{depth - 1}")
    assert len(deepest["ancestors"]) == depth - 1 and deepest["root"]["header"]["id"] == "deep-0"


# --- session event tracing ------------------------------------------------------------------------------


def test_returns_direct_replacement_and_cited_source_event_links_in_their_contract_order(world: World) -> None:
    session = world.store.create("trace")
    append_trace_events(session)
    query = world.query

    original = query.trace_event(session.id, 3)
    assert original["target"] == {
        "sessionId": session.id,
        "seq": 3,
        "type": "user/message",
        "time": session.events[3]["time"],
        "surface": "shadowed",
    }
    assert original["session"] == thaw(session.header)
    assert {key: original[key] for key in list(original)[2:]} == {
        "replacedBy": 4,
        "replacementChain": [4, 8],
        "replacedEventSeqs": [],
        "sourceEventSeqs": [2],
        "derivedEventSeqs": [4],
    }
    summary = query.trace_event(session.id, 4)
    assert (summary["replacedBy"], summary["replacementChain"], summary["replacedEventSeqs"]) == (8, [8], [3])
    assert (summary["sourceEventSeqs"], summary["derivedEventSeqs"]) == ([3, 2], [8])
    draft = query.trace_event(session.id, 2)
    assert draft["target"]["surface"] == "log-only" and "replacedBy" not in draft
    assert (draft["replacementChain"], draft["sourceEventSeqs"], draft["derivedEventSeqs"]) == ([], [], [3, 4, 8])
    final = query.trace_event(session.id, 8)
    assert final["target"]["surface"] == "current" and "replacedBy" not in final
    assert (final["replacementChain"], final["replacedEventSeqs"]) == ([], [4])
    assert (final["sourceEventSeqs"], final["derivedEventSeqs"]) == ([2, 4], [])


def test_returns_fresh_trace_arrays_and_target_records(world: World) -> None:
    session = world.store.create("detached")
    append_trace_events(session)

    first = world.query.trace_event(session.id, 4)
    first["target"]["time"] = -1
    for key in ("replacementChain", "replacedEventSeqs", "sourceEventSeqs", "derivedEventSeqs"):
        first[key].append(99)
    repeated = world.query.trace_event(session.id, 4)
    assert repeated["target"]["time"] != -1
    assert repeated["replacementChain"] == [8]
    assert repeated["replacedEventSeqs"] == [3]
    assert repeated["sourceEventSeqs"] == [3, 2]
    assert repeated["derivedEventSeqs"] == [8]
    assert session.events[4]["sourceEventSeqs"] == [3, 2]


def test_inspects_persisted_logs_once_prefers_live_logs_and_preserves_failures_and_conflicts(
    world: World, tmp_path: Path
) -> None:
    durable = world.persist(meta("shared", 1, cwd="/same"), [append_event(0)])

    traced = world.query.trace_event(durable["id"], 0)
    assert traced["target"]["type"] == "user/message" and traced["target"]["surface"] == "current"
    assert (world.binding.list_calls, world.binding.inspect_calls) == (1, 1)

    live = world.coordinator.resume(durable["id"])
    live.append("turn/start", {"turn": 1})
    message = live.append("user/message", user("live", kind="plugin", plugin="test"), APPEND)
    world.binding.list_failure = RuntimeError("list unavailable")
    world.binding.inspect_failure = RuntimeError("inspect unavailable")
    traced = world.query.trace_event(durable["id"], message["seq"])
    assert traced["target"]["type"] == "user/message"
    assert (world.binding.list_calls, world.binding.inspect_calls) == (1, 1)

    (tmp_path / "other").mkdir()
    other = World("sqlite" if isinstance(world.coordinator.backend, JsonlBackend) else "jsonl", tmp_path / "other")
    try:
        other.persist(durable, [append_event(0)])
        other.binding.list_failure = RuntimeError("list unavailable")
        assert code_of(lambda: other.query.trace_event(durable["id"], 0)) == "SESSION_QUERY_PERSISTENCE_FAILED"
        other.binding.list_failure = None
        other.binding.inspect_failure = RuntimeError("inspect unavailable")
        assert code_of(lambda: other.query.trace_event(durable["id"], 0)) == "SESSION_QUERY_PERSISTENCE_FAILED"
        other.binding.inspect_failure = None
        other.binding.patches[durable["id"]] = {"cwd": "/changed"}
        assert code_of(lambda: other.query.trace_event(durable["id"], 0)) == "SESSION_QUERY_SOURCE_CONFLICT"
    finally:
        other.coordinator.close()


def test_checks_target_existence_before_surface_or_source_event_analysis(world: World) -> None:
    malformed = [
        append_event(0),
        {
            "type": "assistant/message",
            "seq": 1,
            "time": 2,
            "data": assistant(""),
            "surfaceOp": {"op": "replace", "start": 9, "end": 9},
            "sourceEventSeqs": [],
        },
    ]
    world.binding.raw["bad-target"] = (meta("bad-target"), malformed)

    with pytest.raises(SessionQueryError, match=r'^session "bad-target" has no event at seq 9$') as caught:
        world.query.trace_event("bad-target", 9)
    assert caught.value.code == "SESSION_QUERY_EVENT_NOT_FOUND"
    with pytest.raises(SessionQueryError, match=r"^invalid session surface: ") as caught:
        world.query.trace_event("bad-target", 0)
    assert caught.value.code == "SESSION_QUERY_INVALID_SURFACE"


_CHUNK = {
    "type": "assistant/chunk",
    "seq": 0,
    "time": 1,
    "data": {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "d"}},
}

INVALID_SURFACE_LOGS: dict[str, list[dict[str, Any]]] = {
    "non-surface sources": [{"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}, "sourceEventSeqs": [0]}],
    "invalid source array": [append_event(0, "invalid")],
    "empty sources": [append_event(0, [])],
    "sparse sources": [append_event(0, [None])],
    "duplicate sources": [append_event(0), append_event(1, [0, 0])],
    "missing earlier source": [append_event(0), append_event(1, [-1])],
    "future source": [append_event(0, [1]), append_event(1)],
    "replacement without sources": [
        append_event(0),
        append_event(1, surfaceOp={"op": "replace", "start": 0, "end": 0}),
    ],
    "replacement missing a shadowed source": [
        _CHUNK,
        append_event(1),
        append_event(2, [0], surfaceOp={"op": "replace", "start": 1, "end": 1}),
    ],
}


@pytest.mark.parametrize("name", list(INVALID_SURFACE_LOGS))
def test_rejects_an_invalid_surface_log(world: World, name: str) -> None:
    events = INVALID_SURFACE_LOGS[name]
    world.binding.raw["invalid-provenance"] = (meta("invalid-provenance"), copy.deepcopy(events))
    assert code_of(lambda: world.query.trace_event("invalid-provenance", 0)) == "SESSION_QUERY_INVALID_SURFACE"
    # Stored for real, the coordinator's validating inspect refuses the log first (and the SQLite codec
    # cannot even encode a non-integer source list).
    try:
        world.persist_unloadable(meta("stored-invalid"), events)
    except AgentlogError:
        assert isinstance(world.coordinator.backend, SqliteBackend)
        return
    assert code_of(lambda: world.query.trace_event("stored-invalid", 0)) == "SESSION_QUERY_CORRUPT_SESSION"


def test_rejects_surface_op_on_a_non_surface_event_as_an_invalid_surface(world: World) -> None:
    events = [{"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}, "surfaceOp": "append"}]
    world.binding.raw["invalid-non-surface-op"] = (meta("invalid-non-surface-op"), events)
    assert code_of(lambda: world.query.trace_event("invalid-non-surface-op", 0)) == "SESSION_QUERY_INVALID_SURFACE"


def test_applies_the_same_surface_contract_to_list_events(world: World) -> None:
    world.binding.raw["list-regression"] = (meta("list-regression"), [append_event(0), append_event(1, [0, 0])])
    assert code_of(lambda: world.query.list_events("list-regression")) == "SESSION_QUERY_INVALID_SURFACE"
    assert code_of(lambda: world.query.read_surface("list-regression")) == "SESSION_QUERY_INVALID_SURFACE"


# --- properties --------------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(min_value=-1, max_value=12), min_size=1, max_size=12))
def test_lineage_of_any_parent_forest_is_consistent_with_the_parent_links(parents: list[int]) -> None:
    """For any parent assignment without cycles (a parent always has a smaller index), every session's
    trace lists its parent chain as ancestors, and every session appears exactly once in its root's tree."""
    store = SessionStore()
    ids = [f"s{index}" for index in range(len(parents))]
    for index, parent in enumerate(parents):
        session_meta: dict[str, Any] = {"createdAt": index}
        if 0 <= parent < index:
            session_meta["parentSession"] = ids[parent]
        elif parent == -1:
            session_meta["parentSession"] = "outside"  # a parent that is not in the corpus
        # a parent index at or after this one: a root (no cycles by construction)
        store.create(ids[index], meta=session_meta)
    query = SessionQuery(store=store)

    def walk(nodes: list[dict[str, Any]]) -> list[str]:
        found: list[str] = []
        stack = list(reversed(nodes))
        while stack:
            node = stack.pop()
            found.append(node["session"]["header"]["id"])
            stack.extend(reversed(node["descendants"]))
        return found

    for session_id in ids:
        trace = query.trace_session(session_id)
        chain: list[str] = []
        parent_id = store.get(session_id).header.get("parentSession")  # type: ignore[union-attr]
        while parent_id is not None and store.get(parent_id) is not None:
            chain.append(parent_id)
            parent_id = store.get(parent_id).header.get("parentSession")  # type: ignore[union-attr]
        assert [record["header"]["id"] for record in trace["ancestors"]] == chain
        assert trace["complete"] is (parent_id is None)
        top = chain[-1] if chain else session_id
        if trace["complete"]:
            assert trace["root"]["header"]["id"] == top
        else:
            assert trace["unresolvedParentId"] == parent_id
        tree = walk(query.trace_session(top)["descendants"])
        assert len(tree) == len(set(tree))
        if session_id != top:
            assert session_id in tree
        below = walk(trace["descendants"])
        for descendant in below:
            assert session_id in [r["header"]["id"] for r in query.trace_session(descendant)["ancestors"]]
