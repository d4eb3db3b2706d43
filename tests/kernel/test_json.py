"""Lossless JSON gate: spec core-session.md §5 and conformance checklist §19.9 (items 178–188).

JavaScript-only notions are mapped to their closest Python behaviour:
* other realms / forged prototypes / Array subclasses  → dict/list subclasses, mapping/sequence look-alikes
  (only agentlog's own FrozenDict/FrozenList are accepted besides plain dict/list);
* null-prototype records                                → agentlog's FrozenDict (other accepted dict type);
* BigInt                                                → ints outside ±(2**53 − 1);
* symbols / functions                                   → sentinels, callables, class objects;
* boxed primitives (`new Number(1)`)                    → str/int/float subclasses and enums;
* sparse / decorated arrays, hidden properties          → list/dict subclasses (carrying attributes).
"""

from __future__ import annotations

import copy
import struct
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _json_strategies import (
    ALL_BAD,
    all_ids,
    ident_keys,
    is_negative_zero,
    iter_containers,
    json_mismatch,
    json_values,
    maybe_json_values,
    nest_dicts,
    nest_lists,
    path_names,
    render_path,
)
from agentlog import (
    MAX_SAFE_INTEGER,
    FrozenDict,
    FrozenError,
    FrozenList,
    NonJsonValueError,
    is_json_value,
    snapshot_json,
    thaw,
)

DEEP = 20_000


def _reject(value: Any) -> NonJsonValueError:
    """snapshot_json must refuse `value`; returns the error for path assertions."""
    with pytest.raises(NonJsonValueError) as info:
        snapshot_json(value)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.code == "NON_JSON_VALUE"
    assert isinstance(err.path, str) and err.path.startswith("$")
    return err


def _assert_deep_frozen(value: Any) -> None:
    for container in iter_containers(value):
        assert isinstance(container, FrozenDict | FrozenList), type(container)


# --------------------------------------------------------------------------------------------- 19.9


# spec 19.9 #178
def test_json__copies_scalar_vocabulary_and_rejects_unsupported_scalars() -> None:
    accepted = [
        None,
        True,
        False,
        "text",
        "",
        "😀 é \u0000",
        1.25,
        -1.5,
        0.0,
        1.0,
        1e308,
        5e-324,
        -1e-300,
        0,
        1,
        -1,
        MAX_SAFE_INTEGER,
        -MAX_SAFE_INTEGER,
        1e300,
    ]
    assert MAX_SAFE_INTEGER == 2**53 - 1
    for value in accepted:
        copied = snapshot_json(value)
        assert json_mismatch(copied, value) is None, value
    assert snapshot_json(True) is True
    assert snapshot_json(False) is False
    assert snapshot_json(None) is None

    # -0 / NaN / ±Infinity / BigInt (≙ int beyond ±(2**53-1)) / function / symbol (≙ sentinel object).
    rejected = [
        -0.0,
        float("nan"),
        float("inf"),
        float("-inf"),
        2**53,
        -(2**53),
        2**64,
        lambda: None,
        object(),
        complex(1, 0),
    ]
    for value in rejected:
        err = _reject(value)
        assert err.path == "$", (value, err.path)


# spec 19.9 #179
def test_json__recursively_detaches_containers_dag_aliases_copied_independently() -> None:
    shared = {"value": 1}
    frozen_record = snapshot_json({"shared": {"value": 1}})  # stands in for a null-prototype record
    source = {"list": [frozen_record, shared, shared], "alias": shared, "z": [shared, [shared]]}

    snapshot = snapshot_json(source)
    shared["value"] = 2
    source["list"].append("later")  # type: ignore[attr-defined]
    source["new"] = True

    expected = {
        "list": [{"shared": {"value": 1}}, {"value": 1}, {"value": 1}],
        "alias": {"value": 1},
        "z": [{"value": 1}, [{"value": 1}]],
    }
    assert json_mismatch(snapshot, expected) is None
    assert snapshot is not source
    assert snapshot["list"] is not source["list"]
    assert snapshot["alias"] is not shared
    # Aliases are copied independently: no two containers of the copy are the same object …
    containers = list(iter_containers(snapshot))
    assert len({id(c) for c in containers}) == len(containers)
    # … and none of them is a plain container of the input.
    plain_ids = {id(c) for c in iter_containers(source) if type(c) in (dict, list)}
    assert not ({id(c) for c in containers} & plain_ids)
    assert type(snapshot) is FrozenDict
    assert type(snapshot["list"][0]) is FrozenDict
    _assert_deep_frozen(snapshot)


# spec 19.9 #180 (closest Python equivalent of "intrinsic containers from another realm": agentlog's own
# FrozenDict/FrozenList are the other accepted container family; they are accepted and copied into the
# canonical frozen form)
def test_json__accepts_frozen_containers_as_input() -> None:
    frozen = snapshot_json({"object": {"nested": [1]}, "array": [2, {"ok": True}]})
    assert isinstance(frozen, FrozenDict)
    assert is_json_value(frozen) is True
    assert is_json_value(frozen["object"]) is True
    assert is_json_value(frozen["array"]) is True
    again = snapshot_json(frozen)
    assert json_mismatch(again, {"object": {"nested": [1]}, "array": [2, {"ok": True}]}) is None
    array_copy = snapshot_json(frozen["array"])
    assert isinstance(array_copy, FrozenList)
    assert array_copy == [2, {"ok": True}]
    _assert_deep_frozen(again)
    # Frozen values nested inside plain containers (the usual "feed committed data back" case).
    mixed = snapshot_json({"plain": [frozen, frozen["array"]]})
    assert mixed == {"plain": [frozen, [2, {"ok": True}]]}
    _assert_deep_frozen(mixed)


# spec 19.9 #182 (20,000-deep lists AND dicts; a recursive walk would raise RecursionError)
def test_json__accepts_deeply_nested_values_without_recursion() -> None:
    for build in (nest_lists, nest_dicts):
        value = build(DEEP)
        assert is_json_value(value) is True
        snapshot = snapshot_json(value)
        assert json_mismatch(snapshot, value) is None
        cursor: Any = snapshot
        for _ in range(DEEP):
            assert isinstance(cursor, FrozenList | FrozenDict)
            cursor = cursor[0] if isinstance(cursor, list) else cursor["a"]
        assert cursor == "leaf"
        # Frozen deep values are accepted as input too.
        assert json_mismatch(snapshot_json(snapshot), value) is None

    # A bad leaf at the bottom is still found, with its full path.
    err = _reject(nest_lists(DEEP, leaf=float("nan")))
    assert err.path == "$" + "[0]" * DEEP
    err = _reject(nest_dicts(DEEP, leaf=(1,)))
    assert err.path == "$" + ".a" * DEEP
    assert is_json_value(nest_dicts(DEEP, leaf=-0.0)) is False

    # A cycle closing 20,000 levels down is found too.
    root: dict[str, Any] = {}
    cursor = root
    for _ in range(DEEP):
        nxt: dict[str, Any] = {}
        cursor["a"] = nxt
        cursor = nxt
    cursor["a"] = root
    err = _reject(root)
    assert err.path == "$" + ".a" * (DEEP + 1)
    assert is_json_value(root) is False


# spec 19.9 #183 (exotic containers, decorated "arrays", invalid children; each wrapped below a valid
# parent so the error path must name the offending value)
@pytest.mark.parametrize(("case_id", "factory", "key_level"), ALL_BAD, ids=[c[0] for c in ALL_BAD])
def test_json__rejects_exotic_containers_and_invalid_children(
    case_id: str, factory: Any, key_level: bool
) -> None:
    err = _reject(factory())
    assert path_names(err.path, "$", key_level=key_level), err.path

    err = _reject({"a": [0, factory()]})
    assert path_names(err.path, "$.a[1]", key_level=key_level), err.path

    err = _reject([{"ok": [1, 2.5, "x", None]}, {"b": {"c": [True, factory()]}}])
    assert path_names(err.path, "$[1].b.c[1]", key_level=key_level), err.path


def _cycle_dict_self() -> tuple[Any, str]:
    d: dict[str, Any] = {"x": 1}
    d["self"] = d
    return d, "$.self"


def _cycle_list_self() -> tuple[Any, str]:
    lst: list[Any] = [1]
    lst.append(lst)
    return lst, "$[1]"


def _cycle_dict_list_dict() -> tuple[Any, str]:
    d: dict[str, Any] = {"a": [0]}
    d["a"].append(d)
    return d, "$.a[1]"


def _cycle_list_dict_list() -> tuple[Any, str]:
    lst: list[Any] = [{"x": None}]
    lst[0]["x"] = lst
    return lst, "$[0].x"


def _cycle_to_middle_ancestor() -> tuple[Any, str]:
    inner: dict[str, Any] = {"c": [1]}
    root = {"b": inner}
    inner["c"].append(inner)
    return root, "$.b.c[1]"


def _cycle_below_valid_root() -> tuple[Any, str]:
    d: dict[str, Any] = {}
    d["self"] = d
    return {"a": [0, d]}, "$.a[1].self"


CYCLES = [
    ("dict_self", _cycle_dict_self),
    ("list_self", _cycle_list_self),
    ("dict_list_dict", _cycle_dict_list_dict),
    ("list_dict_list", _cycle_list_dict_list),
    ("to_middle_ancestor", _cycle_to_middle_ancestor),
    ("below_valid_root", _cycle_below_valid_root),
]


# spec 19.9 #183 (cycles: an object that is its own ancestor on the current path)
@pytest.mark.parametrize("build", [c[1] for c in CYCLES], ids=[c[0] for c in CYCLES])
def test_json__rejects_cycles_direct_and_indirect(build: Any) -> None:
    value, path = build()
    err = _reject(value)
    assert err.path == path


# spec 19.9 #184 (closest Python equivalent of a literal `__proto__` key: keys that name Python
# attributes/methods stay ordinary data keys and do not change the copy's type or behaviour)
def test_json__preserves_special_keys_as_ordinary_data() -> None:
    source = {
        "__proto__": {"safe": True},
        "__class__": "not a class",
        "__dict__": 1,
        "items": 2,
        "keys": [3],
        "__setitem__": None,
        "constructor": "Object",
    }
    snapshot = snapshot_json(source)
    assert type(snapshot) is FrozenDict
    assert list(snapshot.keys()) == list(source)
    assert snapshot["__proto__"] == {"safe": True}
    assert snapshot["__class__"] == "not a class"
    assert snapshot["items"] == 2
    assert next(iter(snapshot.items())) == ("__proto__", {"safe": True})
    assert json_mismatch(snapshot, source) is None
    assert json_mismatch(thaw(snapshot), source) is None


# spec 19.9 #186
def test_is_json_value__recognizes_supported_scalars_and_rejects_lossy_scalars() -> None:
    for value in (None, False, True, "text", 1.25, 0, MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 0.0):
        assert is_json_value(value) is True, value
    # -0, NaN, ±Infinity, BigInt (≙ unsafe int), function, symbol (≙ sentinel object)
    for value in (-0.0, float("nan"), float("inf"), float("-inf"), 2**53, -(2**53), lambda: None, object()):
        assert is_json_value(value) is False, value


# spec 19.9 #187 (null-prototype record ≙ FrozenDict)
def test_is_json_value__accepts_lists_dicts_and_frozen_records() -> None:
    frozen_record = snapshot_json({"value": True})
    assert is_json_value([1, {"nested": None}, frozen_record]) is True
    assert is_json_value({"value": [1, 2]}) is True
    assert is_json_value(frozen_record) is True
    assert is_json_value([]) is True
    assert is_json_value({}) is True
    shared = [1]
    assert is_json_value({"a": shared, "b": [shared, shared]}) is True  # DAG, not a cycle


# spec 19.9 #188
@pytest.mark.parametrize(("case_id", "factory", "key_level"), ALL_BAD, ids=[c[0] for c in ALL_BAD])
def test_is_json_value__rejects_exotic_values_invalid_children_and_cycles(
    case_id: str, factory: Any, key_level: bool
) -> None:
    assert is_json_value(factory()) is False
    assert is_json_value([factory()]) is False
    assert is_json_value({"value": factory()}) is False
    assert is_json_value({"ok": [1, {"deep": [factory()]}]}) is False
    for _, build in CYCLES:
        assert is_json_value(build()[0]) is False


# ------------------------------------------------------------------------ gate contract (§0, §5.4)


def test_json__error_path_quotes_non_identifier_keys() -> None:
    # contract example: `$.a[0]["b c"]`
    err = _reject({"a": [{"b c": float("nan")}]})
    assert err.path == '$.a[0]["b c"]'


# spec §0 "frozen" / §5.4: the copy is deep-frozen; every mutator raises FrozenError (a TypeError)
def test_json__snapshot_is_deep_frozen_every_mutator_raises() -> None:
    assert issubclass(FrozenError, TypeError)
    source = {"a": 1, "inner": {"b": 2}, "list": [3, 1, 2, [4]]}
    snapshot = snapshot_json(source)
    _assert_deep_frozen(snapshot)

    dict_mutators = [
        lambda d: d.__setitem__("x", 1),
        lambda d: d.__setitem__("a", 99),
        lambda d: d.__delitem__("a"),
        lambda d: d.clear(),
        lambda d: d.pop("a"),
        lambda d: d.pop("missing", None),
        lambda d: d.popitem(),
        lambda d: d.setdefault("x", 1),
        lambda d: d.setdefault("a"),
        lambda d: d.update({"x": 1}),
        lambda d: d.update(x=1),
        lambda d: d.update(),
        lambda d: d.__ior__({"x": 1}),
    ]
    list_mutators = [
        lambda lst: lst.__setitem__(0, 99),
        lambda lst: lst.__setitem__(slice(0, 1), [99]),
        lambda lst: lst.__delitem__(0),
        lambda lst: lst.__delitem__(slice(0, 2)),
        lambda lst: lst.append(5),
        lambda lst: lst.extend([5]),
        lambda lst: lst.extend([]),
        lambda lst: lst.insert(0, 5),
        lambda lst: lst.pop(),
        lambda lst: lst.pop(0),
        lambda lst: lst.remove(3),
        lambda lst: lst.clear(),
        lambda lst: lst.sort(),
        lambda lst: lst.reverse(),
        lambda lst: lst.__iadd__([5]),
        lambda lst: lst.__imul__(2),
    ]
    for target in (snapshot, snapshot["inner"]):
        for mutate in dict_mutators:
            with pytest.raises(FrozenError):
                mutate(target)
    for target in (snapshot["list"], snapshot["list"][3]):
        for mutate in list_mutators:
            with pytest.raises(FrozenError):
                mutate(target)

    # operator forms
    d = snapshot
    with pytest.raises(FrozenError):
        d["x"] = 1
    with pytest.raises(FrozenError):
        del d["a"]
    with pytest.raises(FrozenError):
        d |= {"x": 1}
    lst = snapshot["list"]
    with pytest.raises(FrozenError):
        lst[0] = 1
    with pytest.raises(FrozenError):
        lst[1:] = []
    with pytest.raises(FrozenError):
        del lst[0]
    with pytest.raises(FrozenError):
        lst += [1]
    with pytest.raises(FrozenError):
        lst *= 2
    with pytest.raises((AttributeError, TypeError)):
        snapshot.extra = 1  # type: ignore[attr-defined]
    with pytest.raises((AttributeError, TypeError)):
        lst.extra = 1  # type: ignore[attr-defined]

    # Nothing changed; still equal to the plain source; non-mutating operators still work.
    assert snapshot == source
    assert json_mismatch(snapshot, source) is None
    assert snapshot | {"x": 1} == {**source, "x": 1}
    assert [*lst, 9] == [3, 1, 2, [4], 9]
    assert orjson.dumps(snapshot) == orjson.dumps(source)


# spec §5 "detached copy": mutating the input afterwards changes nothing
def test_json__snapshot_is_detached_from_later_input_mutation() -> None:
    source: dict[str, Any] = {"a": [1, {"b": "c"}], "d": {"e": [None]}}
    expected = copy.deepcopy(source)
    snapshot = snapshot_json(source)
    source["a"][1]["b"] = "changed"
    source["a"].append(2)
    source["d"]["e"].clear()
    source["new"] = 1
    del source["d"]
    assert json_mismatch(snapshot, expected) is None


# contract: thaw(value) → plain mutable deep copy
def test_json__thaw_returns_plain_mutable_containers_equal_to_input() -> None:
    source = {"a": [1, {"b": [2.5, None, True]}], "c": {}, "d": "x"}
    frozen = snapshot_json(source)
    thawed = thaw(frozen)
    assert json_mismatch(thawed, source) is None
    for container in iter_containers(thawed):
        assert type(container) in (dict, list), type(container)
    assert not (all_ids(thawed) & all_ids(frozen))
    thawed["a"].append(3)
    thawed["a"][1]["b"][0] = 9
    thawed["new"] = True
    assert json_mismatch(frozen, source) is None  # the frozen source is untouched

    plain = {"k": [1, {"m": 2}]}
    plain_thawed = thaw(plain)
    assert plain_thawed == plain
    assert not (all_ids(plain_thawed) & all_ids(plain))
    assert thaw(snapshot_json([1, [2]])) == [1, [2]]
    assert type(thaw(snapshot_json([1, [2]]))) is list
    assert thaw(5) == 5
    assert thaw("s") == "s"
    assert thaw(None) is None


# ------------------------------------------------------------------------------ hypothesis properties

_PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _float_bits_equal(a: float, b: float) -> bool:
    return struct.pack("<d", a) == struct.pack("<d", b)


@_PROPERTY_SETTINGS
@given(json_values())
def test_json_property__accepted_values_survive_orjson_round_trip(value: Any) -> None:
    snapshot = snapshot_json(value)
    assert is_json_value(value) is True
    assert json_mismatch(snapshot, value) is None
    _assert_deep_frozen(snapshot)
    encoded = orjson.dumps(snapshot)
    assert encoded == orjson.dumps(value)
    assert json_mismatch(orjson.loads(encoded), value) is None  # equal, same types, floats bit-identical


@_PROPERTY_SETTINGS
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_json_property__finite_floats_round_trip_bit_identical_except_negative_zero(x: float) -> None:
    if is_negative_zero(x):
        assert is_json_value(x) is False
        _reject(x)
        return
    copied = snapshot_json(x)
    assert type(copied) is float and _float_bits_equal(copied, x)
    back = orjson.loads(orjson.dumps(copied))
    assert type(back) is float and _float_bits_equal(back, x)


@_PROPERTY_SETTINGS
@given(maybe_json_values)
def test_json_property__is_json_value_agrees_with_snapshot(value: Any) -> None:
    accepted = is_json_value(value)
    assert isinstance(accepted, bool)
    try:
        snapshot = snapshot_json(value)
    except NonJsonValueError:
        assert accepted is False
        return
    assert accepted is True
    assert json_mismatch(snapshot, value) is None
    assert json_mismatch(orjson.loads(orjson.dumps(snapshot)), value) is None


def _positions(value: Any) -> list[tuple[tuple[str | int, ...], Any]]:
    """(path segments, container) for every container in `value`, iteratively."""
    out: list[tuple[tuple[str | int, ...], Any]] = []
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), value)]
    while stack:
        segs, node = stack.pop()
        if isinstance(node, dict):
            out.append((segs, node))
            stack.extend(((*segs, k), v) for k, v in node.items())
        elif isinstance(node, list):
            out.append((segs, node))
            stack.extend(((*segs, i), v) for i, v in enumerate(node))
    return out


@_PROPERTY_SETTINGS
@given(base=json_values(keys=ident_keys, max_leaves=20), data=st.data())
def test_json_property__one_injected_bad_leaf_is_rejected_at_its_path(base: Any, data: st.DataObject) -> None:
    value = copy.deepcopy(base)
    case_id, factory, key_level = data.draw(st.sampled_from(ALL_BAD), label="bad leaf")
    bad = factory()
    positions = _positions(value)
    choice = data.draw(st.integers(0, len(positions)), label="position")
    if choice == len(positions):
        value, segs = bad, ()
    else:
        segs, container = positions[choice]
        if isinstance(container, dict):
            if container and data.draw(st.booleans(), label="replace existing"):
                key = data.draw(st.sampled_from(list(container)), label="key")
            else:
                key = data.draw(ident_keys, label="new key")
            container[key] = bad
            segs = (*segs, key)
        else:
            if container and data.draw(st.booleans(), label="replace existing"):
                index = data.draw(st.integers(0, len(container) - 1), label="index")
                container[index] = bad
            else:
                index = data.draw(st.integers(0, len(container)), label="insert at")
                container.insert(index, bad)
            segs = (*segs, index)
    expected = render_path(segs)
    assert is_json_value(value) is False
    err = _reject(value)
    assert path_names(err.path, expected, key_level=key_level), (case_id, err.path, expected)
