"""The ``labels`` projection unit: its fold of any sequence of label and tag changes is what a plain
reference model of the same operations holds, its state survives a JSON checkpoint, and the commands'
registry serves it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import agentlog as al
from agentlog.errors import ProjectionRowError
from agentlog.kernel.labels import fold_labels
from agentlog.projection.labels import LABELS_KEY, LABELS_UNIT, labels_match
from agentlog.projection.listing import command_registry

KEYS = st.sampled_from(["user", "project", "team", "a.b", "x-y_z"])
VALUES = st.sampled_from(["bob", "alice", "x", "Bob's run", "第二"])
TAGS = st.sampled_from(["eval", "nightly", "flaky", "v1.2"])

OPS = st.one_of(
    st.tuples(st.just("set"), st.dictionaries(KEYS, st.one_of(st.none(), VALUES), max_size=4)),
    st.tuples(st.just("remove_labels"), st.lists(KEYS, max_size=3)),
    st.tuples(st.just("add"), st.lists(TAGS, max_size=3)),
    st.tuples(st.just("remove_tags"), st.lists(TAGS, max_size=3)),
    st.tuples(st.just("other"), st.just(None)),
)


def _apply(model: dict[str, Any], op: str, arg: Any) -> None:
    """The reference model: a dict of labels and an insertion-ordered list of tags."""
    labels, tags = model["labels"], model["tags"]
    if op == "set":
        for key, value in arg.items():
            if value is None:
                labels.pop(key, None)
            else:
                labels[key] = value
    elif op == "remove_labels":
        for key in arg:
            labels.pop(key, None)
    elif op == "add":
        tags.extend(tag for tag in dict.fromkeys(arg) if tag not in tags)
    elif op == "remove_tags":
        model["tags"] = [tag for tag in tags if tag not in arg]


@given(st.lists(OPS, max_size=25))
def test_the_fold_of_random_label_and_tag_changes_is_the_reference_model(ops: list[tuple[str, Any]]) -> None:
    session = al.SessionStore().create("s")
    model: dict[str, Any] = {"labels": {}, "tags": []}
    for op, arg in ops:
        if op == "set":
            session.set_labels(arg)
        elif op == "remove_labels":
            session.remove_labels(arg)
        elif op == "add":
            session.add_tags(arg)
        elif op == "remove_tags":
            session.remove_tags(arg)
        else:
            session.append("todo/write", {"todos": []})
        _apply(model, op, arg)
    state = LABELS_UNIT.fold(session.events)
    assert state == model
    assert list(state["labels"]) == list(model["labels"])  # first-set order, too
    assert fold_labels(session.events) == model
    assert session.labels == model["labels"] and session.tags == model["tags"]
    # the state is what a checkpoint row stores: it reads back from JSON unchanged
    assert LABELS_UNIT.parse_state(orjson.loads(orjson.dumps(state))) == model
    # and a fold continued from any checkpoint reaches the same state
    events = list(session.events)
    for cut in range(0, len(events) + 1, 3):
        assert LABELS_UNIT.fold_from(LABELS_UNIT.fold(events[:cut]), events[cut:]) == model


def test_an_event_that_is_no_label_change_returns_the_state_itself() -> None:
    session = al.SessionStore().create("s")
    event = session.append("todo/write", {"todos": []})
    state = LABELS_UNIT.initial()
    assert LABELS_UNIT.reduce(state, event) is state


@pytest.mark.parametrize(
    "bad",
    [None, [], {"labels": {}}, {"labels": {"bad key": "v"}, "tags": []}, {"labels": {}, "tags": ["a b"]},
     {"labels": {"k": ""}, "tags": []}, {"labels": {}, "tags": "eval"}, {"labels": {}, "tags": [], "x": 1}],
)  # fmt: skip
def test_a_checkpoint_state_that_is_not_valid_metadata_is_refused(bad: object) -> None:
    with pytest.raises(ProjectionRowError, match="labels projection state is invalid"):
        LABELS_UNIT.parse_state(bad)


def test_the_commands_registry_serves_the_labels_view() -> None:
    store = al.SessionStore()
    registry = command_registry(store)
    try:
        session = store.create("s", labels={"user": "bob"}, tags=["eval"])
        values = registry.snapshot(session)["values"]
        assert values[LABELS_KEY] == {"labels": {"user": "bob"}, "tags": ["eval"]}
    finally:
        registry.dispose()


def test_filters_and_over_every_label_and_tag() -> None:
    labels, tags = {"user": "bob", "project": "x"}, ["eval"]
    assert labels_match(labels, tags, [("user", "bob"), ("project", "x")], ["eval"])
    assert labels_match(labels, tags, [], [])
    assert not labels_match(labels, tags, [("user", "alice")], [])
    assert not labels_match(labels, tags, [("user", "bob")], ["eval", "nightly"])
