"""The delegation events' shapes (runtime spec §8 rows 5, 24, 31) and the header's lineage rules (§6.8):
refused on append with nothing written, refused on load, the original's shapes accepted both ways."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agentlog as al
from agentlog.agent.events import (
    APPROVAL_POLICY,
    SANDBOX_MODE,
    SUBAGENT_DESCRIPTOR,
    SUBAGENT_DESCRIPTOR_VERSION,
    register_validators,
)
from agentlog.errors import EventDataError, InvalidSeedError, SessionHeaderError
from agentlog.kernel.lineage import delegation_depth_of, is_depth
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend

GOOD_DESCRIPTORS: list[dict[str, Any]] = [
    {"version": 2, "mode": "one-shot", "provider": "fork"},
    {"version": 2, "mode": "one-shot", "provider": "spawn", "label": "list workspace files"},
    {"version": 2, "mode": "continuable", "provider": "spawn", "label": "execute"},
    {
        "version": 2,
        "mode": "continuable",
        "provider": "fork",
        "label": "planner",
        "agentProvider": "deepseek",
        "agentModel": "deepseek-chat",
        "persona": "You plan.",
        "toolFilter": {"allow": ["read_file", "list_dir"]},
    },
    # the original's ToolRestriction: allow and/or deny
    {"version": 2, "mode": "continuable", "provider": "in-process", "label": "x", "toolFilter": {"deny": ["bash"]}},
    {"version": 2, "mode": "continuable", "provider": "p", "label": "x", "toolFilter": {"allow": [], "deny": ["b"]}},
    # what agentlog wrote before it wrote the original's shape: a list of tool names
    {"version": 2, "mode": "continuable", "provider": "spawn", "label": "x", "toolFilter": ["read_file"]},
    # the original's parser asks strings, not non-empty ones
    {"version": 2, "mode": "one-shot", "provider": "", "label": ""},
]
BAD_DESCRIPTORS: list[tuple[Any, str]] = [
    ({"version": 3, "mode": "one-shot", "provider": "spawn"}, "unknown descriptor version 3"),
    ({"version": 1, "mode": "one-shot", "provider": "spawn"}, "unknown descriptor version 1"),
    ({"version": True, "mode": "one-shot", "provider": "spawn"}, "unknown descriptor version True"),
    ({"mode": "one-shot", "provider": "spawn"}, "unknown descriptor version None"),
    ({"version": 2, "mode": "forever", "provider": "spawn"}, 'mode must be "one-shot" or "continuable"'),
    ({"version": 2, "mode": "one-shot", "provider": 7}, "provider must be a string"),
    ({"version": 2, "mode": "continuable", "provider": "p", "label": "x", "toolFilter": "bash"}, "toolFilter must be"),
    ({"version": 2, "mode": "continuable", "provider": "p", "label": "x", "toolFilter": {}}, "allow and/or deny"),
    (
        {"version": 2, "mode": "continuable", "provider": "p", "label": "x", "toolFilter": {"allow": "bash"}},
        "toolFilter.allow must be an array of strings",
    ),
    (
        {"version": 2, "mode": "continuable", "provider": "p", "label": "x", "toolFilter": {"only": ["a"]}},
        "toolFilter has unknown field 'only'",
    ),
    ({"version": 2, "mode": "continuable", "provider": "spawn"}, "a continuable descriptor requires a label"),
    ({"version": 2, "mode": "one-shot", "provider": "spawn", "persona": "x"}, "persona belongs to continuable"),
    (
        {"version": 2, "mode": "continuable", "provider": "spawn", "label": "a", "agentModel": 7},
        "agentModel must be a string",
    ),
    ({"version": 2, "mode": "one-shot", "provider": "spawn", "extra": 1}, "unknown field 'extra'"),
    ([], "must be an object"),
]


def test_descriptor_vocabulary_is_the_catalogs() -> None:
    assert SUBAGENT_DESCRIPTOR == "subagent/descriptor" and SUBAGENT_DESCRIPTOR_VERSION == 2
    for name in (SUBAGENT_DESCRIPTOR, APPROVAL_POLICY, SANDBOX_MODE):
        assert name in al.KNOWN_SESSION_EVENT_TYPES


@pytest.mark.parametrize("data", GOOD_DESCRIPTORS)
def test_the_spec_descriptor_shapes_are_accepted(data: dict[str, Any]) -> None:
    session = al.SessionStore().create("child")
    event = session.append_custom(SUBAGENT_DESCRIPTOR, data)
    assert al.thaw(event["data"]) == data


@pytest.mark.parametrize(("data", "words"), BAD_DESCRIPTORS)
def test_a_bad_descriptor_is_refused_on_append_and_nothing_is_written(data: Any, words: str) -> None:
    session = al.SessionStore().create("child")
    with pytest.raises(EventDataError, match=words) as caught:
        session.append_custom(SUBAGENT_DESCRIPTOR, data)
    assert caught.value.code == "INVALID_EVENT_DATA"
    assert session.events == []


@pytest.mark.parametrize(
    ("etype", "data", "ok"),
    [
        (APPROVAL_POLICY, {"policy": "never", "source": "delegation"}, True),
        (APPROVAL_POLICY, {"policy": "ask"}, True),
        (APPROVAL_POLICY, {"policy": "sometimes"}, False),
        (APPROVAL_POLICY, {"policy": "never", "source": "user"}, False),
        (SANDBOX_MODE, {"mode": "workspace-write", "source": "delegation"}, True),
        (SANDBOX_MODE, {"mode": "read-only"}, True),
        (SANDBOX_MODE, {"mode": "anything-goes"}, False),
    ],
)
def test_policy_and_sandbox_shapes_are_checked_on_append(etype: str, data: dict[str, Any], ok: bool) -> None:
    session = al.SessionStore().create("child")
    if ok:
        session.append_custom(etype, data)
        assert len(session.events) == 1
    else:
        with pytest.raises(EventDataError):
            session.append_custom(etype, data)
        assert session.events == []


def test_a_bad_descriptor_in_a_seed_is_refused_at_its_index() -> None:
    seed = [{"type": SUBAGENT_DESCRIPTOR, "seq": 0, "time": 1, "data": {"version": 9, "mode": "x", "provider": "p"}}]
    store = al.SessionStore()
    with pytest.raises(InvalidSeedError, match=r"at index 0: .*unknown descriptor version 9"):
        store.create("child", seed=seed)
    assert store.get("child") is None


def _original_child(root: Path, descriptor: dict[str, Any]) -> None:
    """A child session as the original writes one: lineage header, delegated policy, descriptor in turn 1."""
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(root), compression="none"))
    meta = {"cwd": "/w", "parentSession": "parent", "origin": "subagent", "delegationDepth": 1}
    child = store.create("child", meta=meta)
    child.append_custom(APPROVAL_POLICY, {"policy": "never", "source": "delegation"})
    child.append(al.TURN_START, {"turn": 1})
    child.append_custom(SUBAGENT_DESCRIPTOR, descriptor)
    child.append(al.TURN_END, {"turn": 1, "reason": {"kind": "completed"}})
    store.flush(child)
    coordinator.close()


def test_a_stored_child_in_the_original_shapes_loads_with_its_lineage(tmp_path: Path) -> None:
    _original_child(tmp_path, GOOD_DESCRIPTORS[2])
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(tmp_path), compression="none"))
    try:
        child = coordinator.resume("child")
        header = child.header
        assert (header["parentSession"], header["origin"], header["delegationDepth"]) == ("parent", "subagent", 1)
        types = [e["type"] for e in child.events][:4]
        assert types == [APPROVAL_POLICY, "turn/start", SUBAGENT_DESCRIPTOR, "turn/end"]
    finally:
        coordinator.close()


def test_a_stored_descriptor_of_an_unknown_version_is_refused_on_load(tmp_path: Path) -> None:
    _original_child(tmp_path, GOOD_DESCRIPTORS[0])
    path = next(tmp_path.rglob("session.jsonl"))
    text = path.read_text()
    assert '"version":2' in text
    path.write_text(text.replace('"version":2', '"version":7'))
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(tmp_path), compression="none"))
    try:
        with pytest.raises(al.AgentlogError, match="unknown descriptor version 7"):
            coordinator.resume("child")
    finally:
        coordinator.close()


def test_another_registry_gets_the_validators_on_request() -> None:
    registry = al.EventTypes()
    register_validators(registry)
    with pytest.raises(EventDataError):
        registry.validate(SUBAGENT_DESCRIPTOR, {"version": 1})


@pytest.mark.parametrize("depth", [-1, 1.0, True, "1", 2**53])
def test_a_header_depth_that_is_not_a_safe_integer_is_refused_and_nothing_is_created(depth: Any) -> None:
    store = al.SessionStore()
    with pytest.raises(SessionHeaderError, match="delegationDepth"):
        store.create("child", meta={"parentSession": "p", "origin": "subagent", "delegationDepth": depth})
    assert store.get("child") is None
    assert not is_depth(depth)


def test_the_header_depth_is_authoritative_and_monotone() -> None:
    assert delegation_depth_of({}) == 0
    assert delegation_depth_of({"delegationDepth": 2}) == 2
    assert delegation_depth_of({"delegationDepth": 2}, 0) == 2  # a resumed child is never top-level again
    assert delegation_depth_of({"delegationDepth": 1}, 3) == 3
    assert delegation_depth_of({}, 1) == 1
