"""The gate's accelerators agree exactly with the canonical iterative walk.

agentlog has three implementations of one function: the canonical explicit-stack walk, a Python
recursive accelerator for shallow values, and an optional C accelerator. Both accelerators may only
*give up* (the walk then decides); they must never accept what the walk refuses, refuse what it
accepts, or build a different copy.
"""

from __future__ import annotations

import gc
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _json_strategies import ALL_BAD, json_mismatch, json_values, maybe_json_values, nest_dicts, nest_lists
from agentlog import Event, FrozenDict, FrozenList, NonJsonValueError
from agentlog.kernel import jsonvalue as jv

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _outcome(fn: Any, value: Any) -> tuple[str, Any]:
    try:
        return ("ok", fn(value))
    except NonJsonValueError as err:
        return ("err", (err.path, err.reason))


def _implementations() -> list[Any]:
    impls = [jv._py_snapshot_container]
    if jv.ACCELERATED:
        impls.append(jv._c_snapshot_container)
    return impls


def _assert_frozen_types(value: Any) -> None:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            assert type(node) is FrozenDict
            stack.extend(node.values())
        elif isinstance(node, list):
            assert type(node) is FrozenList
            stack.extend(node)


def _agree(value: Any) -> None:
    expected = _outcome(jv._snapshot_container, value)
    for impl in _implementations():
        actual = _outcome(impl, value)
        assert actual[0] == expected[0], (impl.__name__, actual, expected)
        if expected[0] == "ok":
            assert json_mismatch(actual[1], expected[1]) is None
            _assert_frozen_types(actual[1])
        else:
            assert actual[1] == expected[1]


@SETTINGS
@given(st.lists(json_values(), max_size=4) | st.dictionaries(st.text(max_size=6), json_values(), max_size=4))
def test_gate_paths__accelerators_copy_valid_values_exactly_like_the_walk(value: Any) -> None:
    _agree(value)


@SETTINGS
@given(st.lists(maybe_json_values, max_size=4) | st.dictionaries(st.text(max_size=5), maybe_json_values, max_size=4))
def test_gate_paths__accelerators_refuse_exactly_what_the_walk_refuses(value: Any) -> None:
    _agree(value)


@pytest.mark.parametrize("name", [case[0] for case in ALL_BAD])
def test_gate_paths__every_bad_leaf_is_refused_with_the_walks_path(name: str) -> None:
    make = {case[0]: case[1] for case in ALL_BAD}[name]
    _agree({"ok": [1, "two", {"three": [make()]}]})


@pytest.mark.parametrize("depth", [1, 23, 24, 25, 47, 48, 49, 200])
def test_gate_paths__depth_boundaries_give_identical_results(depth: int) -> None:
    _agree(nest_lists(depth))
    _agree(nest_dicts(depth))
    cyclic: list[Any] = []
    node = cyclic
    for _ in range(depth):
        child: list[Any] = []
        node.append(child)
        node = child
    node.append(cyclic)
    _agree(cyclic)


def test_gate_paths__frozen_and_event_inputs_are_copied_into_plain_frozen_containers() -> None:
    event = jv.snapshot_json({"type": "t", "seq": 0, "time": 1, "data": {"a": [1]}})
    sealed = Event(event)
    _agree({"event": sealed, "frozen": event, "list": FrozenList([1, 2])})


def test_gate_paths__c_built_containers_are_not_tracked_by_the_cycle_collector() -> None:
    # The project's install builds the accelerator; AGENTLOG_PURE_PYTHON=1 runs the suite without it.
    pure = bool(os.environ.get("AGENTLOG_PURE_PYTHON"))
    assert jv.ACCELERATED is not pure
    copy = jv.snapshot_json({"a": [1, {"b": "c"}], "d": {}})
    tracked = [gc.is_tracked(copy), gc.is_tracked(copy["a"]), gc.is_tracked(copy["a"][1])]
    assert tracked == [pure, pure, pure]
    # They are still real, frozen containers.
    assert copy == {"a": [1, {"b": "c"}], "d": {}}
    with pytest.raises(TypeError):
        copy["a"].append(2)  # type: ignore[attr-defined]


def test_gate_paths__surrogates_in_wide_strings_are_refused_by_every_path() -> None:
    for text in ["\ud800", "€\udfff", "😀\ud834x", "é\udc00"]:
        _agree({"k": text})
        _agree({text: 1})
        _agree([text])
    for text in ["€uro", "😀", "é", "中文"]:
        _agree({"k": text, text: [text]})


@SETTINGS
@given(st.lists(json_values(), max_size=4) | st.dictionaries(st.text(max_size=6), json_values(), max_size=4))
def test_gate_paths__freeze_tree_matches_the_python_freeze(value: Any) -> None:
    expected = jv.freeze_in_place(jv.thaw(value))
    actual = jv.freeze_tree(jv.thaw(value))
    assert json_mismatch(actual, expected) is None
    _assert_frozen_types(actual)


@pytest.mark.parametrize("depth", [10, 47, 48, 49, 20_000])
def test_gate_paths__freeze_tree_handles_any_depth(depth: int) -> None:
    frozen = jv.freeze_tree(nest_dicts(depth, leaf=[1, {"x": None}]))
    node = frozen
    for _ in range(depth):
        assert type(node) is FrozenDict
        node = node["a"]
    assert node == [1, {"x": None}]
    assert type(node) is FrozenList


def test_gate_paths__freeze_tree_keeps_a_container_with_a_foreign_object_visible_to_the_collector() -> None:
    class Foreign:
        pass

    frozen = jv.freeze_tree({"plain": [1, 2], "foreign": [Foreign()]})
    assert not gc.is_tracked(frozen["plain"]) or not jv.ACCELERATED
    assert gc.is_tracked(frozen["foreign"])
    assert gc.is_tracked(frozen)


def test_gate_paths__a_stale_accelerator_build_is_not_used_and_says_how_to_rebuild() -> None:
    """A compiled module whose VERSION is not the one this source expects runs nothing: pure Python, one warning."""
    from agentlog import _accel

    speedups = pytest.importorskip("agentlog._speedups")  # (built even when AGENTLOG_PURE_PYTHON=1 skips it)
    assert speedups.VERSION == _accel.EXPECTED_VERSION  # the build in this tree is current
    current, other = _accel.EXPECTED_VERSION, _accel.EXPECTED_VERSION + 1
    stale = rf"stale build \(VERSION {current}, this agentlog expects {other}\).*rebuild"
    with pytest.warns(RuntimeWarning, match=stale) as seen:
        assert _accel.check_build(speedups, expected=other) is None
    assert len(seen) == 1
    assert _accel.check_build(speedups) is speedups


def test_gate_paths__the_accelerator_is_all_or_nothing() -> None:
    """Either every C function is bound (a current build) or none is (pure Python): no mixed older build."""
    from agentlog import _accel

    functions = [name for name in _accel.__all__ if name not in ("ACCELERATED", "EXPECTED_VERSION", "check_build")]
    bound = {name: getattr(_accel, name) is not None for name in functions}
    assert set(bound.values()) == {_accel.ACCELERATED}
    assert _accel.ACCELERATED is not bool(os.environ.get("AGENTLOG_PURE_PYTHON"))  # the project's install builds it
