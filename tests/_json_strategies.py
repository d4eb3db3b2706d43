"""Shared helpers for the lossless-JSON gate tests (spec §5, checklist §19.9).

* Hypothesis strategies for valid JSON values, "maybe-invalid" values and bad leaves.
* An iterative, strict structural comparison (types, key order, float bits) that works on
  20,000-deep values where ``==`` would hit CPython's recursion limit.
* A renderer for the gate's error paths (``$``, ``.key``, ``[i]``, ``["b c"]``).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import math
import re
import struct
from collections import Counter, OrderedDict, UserDict, UserList, defaultdict, deque, namedtuple
from collections.abc import Callable, Iterator
from decimal import Decimal
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from hypothesis import strategies as st

MAX_SAFE = 2**53 - 1


# --------------------------------------------------------------------------- exotic value types


class DictSub(dict):  # type: ignore[type-arg]
    """A dict subclass that is not agentlog's FrozenDict (JS: object with a custom prototype)."""


class ListSub(list):  # type: ignore[type-arg]
    """A list subclass that is not agentlog's FrozenList (JS: Array subclass / forged prototype)."""


class Custom:
    """A class instance (JS: `new ExoticObject()`)."""

    def __init__(self) -> None:
        self.value = 1


@dataclasses.dataclass
class DataRecord:
    value: int = 1


class MyStr(str):
    """JS boxed primitive analogue: `new String('x')`."""


class MyInt(int):
    """JS boxed primitive analogue: `new Number(1)`."""


class MyFloat(float):
    """JS boxed primitive analogue: `new Number(1.5)`."""


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    LOW = 1


class Tag(enum.StrEnum):
    A = "a"


Point = namedtuple("Point", "x y")


def _decorated_list() -> ListSub:
    value = ListSub([1])
    value.extra = True  # type: ignore[attr-defined]  # JS: array with an extra own property
    return value


def _decorated_dict() -> DictSub:
    value = DictSub(value=1)
    value.hidden = True  # type: ignore[attr-defined]  # JS: object with a non-enumerable property
    return value


# (id, factory, key_level) — key_level=True marks values whose defect is a *key* of the dict itself, so
# the error path may name the dict or the dict plus a key segment.
BadCase = tuple[str, Callable[[], Any], bool]

BAD_SCALARS: list[BadCase] = [
    ("nan", lambda: float("nan"), False),
    ("negative_nan", lambda: -float("nan"), False),
    ("inf", lambda: float("inf"), False),
    ("neg_inf", lambda: float("-inf"), False),
    ("negative_zero", lambda: -0.0, False),
    ("int_above_safe", lambda: 2**53, False),
    ("int_below_safe", lambda: -(2**53), False),
    ("huge_int", lambda: 10**30, False),
    ("lone_high_surrogate", lambda: "\ud800", False),
    ("lone_low_surrogate_inside", lambda: "a\udfffb", False),
    ("reversed_surrogate_pair", lambda: "\udc00\ud800", False),
    ("boxed_str_subclass", lambda: MyStr("x"), False),
    ("boxed_int_subclass", lambda: MyInt(1), False),
    ("boxed_float_subclass", lambda: MyFloat(1.5), False),
    ("int_enum", lambda: Level.LOW, False),
    ("str_enum", lambda: Tag.A, False),
    ("enum_member", lambda: Color.RED, False),
    ("decimal", lambda: Decimal("1.5"), False),
    ("fraction", lambda: Fraction(1, 3), False),
    ("complex", lambda: complex(1, 2), False),
    ("bytes", lambda: b"x", False),
    ("bytearray", lambda: bytearray(b"x"), False),
    ("memoryview", lambda: memoryview(b"x"), False),
    ("datetime", lambda: _dt.datetime(2024, 1, 1), False),
    ("date", lambda: _dt.date(2024, 1, 1), False),
    ("ellipsis", lambda: ..., False),
    ("object_sentinel", lambda: object(), False),
    ("function", lambda: lambda: None, False),
    ("builtin_function", lambda: len, False),
    ("class_object", lambda: int, False),
    ("custom_instance", lambda: Custom(), False),
    ("dataclass_instance", lambda: DataRecord(), False),
    ("range", lambda: range(3), False),
    ("iterator", lambda: iter([1]), False),
]

BAD_CONTAINERS: list[BadCase] = [
    ("tuple", lambda: (1, 2), False),
    ("empty_tuple", lambda: (), False),
    ("namedtuple", lambda: Point(1, 2), False),
    ("set", lambda: {1}, False),
    ("empty_set", lambda: set(), False),
    ("frozenset", lambda: frozenset({"a"}), False),
    ("dict_subclass", lambda: DictSub(value=1), False),
    ("decorated_dict_subclass", _decorated_dict, False),
    ("list_subclass", lambda: ListSub([1]), False),
    ("decorated_list_subclass", _decorated_list, False),
    ("ordered_dict", lambda: OrderedDict(value=1), False),
    ("defaultdict", lambda: defaultdict(list), False),
    ("counter", lambda: Counter("ab"), False),
    ("mapping_proxy", lambda: MappingProxyType({"value": 1}), False),
    ("user_dict", lambda: UserDict({"value": 1}), False),
    ("user_list", lambda: UserList([1]), False),
    ("deque", lambda: deque([1]), False),
    ("tuple_of_valid_json", lambda: ("a", 1), False),
]

BAD_KEYS: list[BadCase] = [
    ("int_key", lambda: {1: "x"}, True),
    ("none_key", lambda: {None: "x"}, True),
    ("tuple_key", lambda: {(1, 2): "x"}, True),
    ("bool_key", lambda: {True: "x"}, True),
    ("float_key", lambda: {1.5: "x"}, True),
    ("bytes_key", lambda: {b"k": "x"}, True),
    ("mixed_str_and_int_keys", lambda: {"ok": 1, 2: "x"}, True),
    ("lone_surrogate_key", lambda: {"\ud800": "x"}, True),
]

ALL_BAD: list[BadCase] = BAD_SCALARS + BAD_CONTAINERS + BAD_KEYS


# --------------------------------------------------------------------------- error paths

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def render_path(segments: tuple[str | int, ...]) -> str:
    """`$`, `.key` for identifier keys, `[i]` for list indexes (the contract's `$.a[0]["b c"]` form)."""
    out = ["$"]
    for seg in segments:
        if isinstance(seg, int):
            out.append(f"[{seg}]")
        else:
            assert _IDENT.match(seg), "helpers only render identifier keys"
            out.append(f".{seg}")
    return "".join(out)


def path_names(actual: str, expected: str, *, key_level: bool) -> bool:
    """True when `actual` names the value at `expected` (or, for key defects, one of its keys)."""
    if actual == expected:
        return True
    return key_level and (actual.startswith(expected + "[") or actual.startswith(expected + "."))


# --------------------------------------------------------------------------- strict comparison


def _float_bits(x: float) -> bytes:
    return struct.pack("<d", x)


def _render_chain(chain: Any) -> str:
    parts: list[str] = []
    while chain is not None:
        chain, seg = chain
        parts.append(f"[{seg!r}]")
    return "$" + "".join(reversed(parts))


def json_mismatch(a: Any, b: Any) -> str | None:
    """Iteratively compare two JSON-ish values.

    Dicts must have the same keys in the same order; lists the same length; scalars the same exact
    type (bool is not int, int is not float) and value; floats the same bit pattern. Frozen
    containers count as dicts/lists. Returns None when equal, else a description of the first
    difference (never a repr of the whole value, so it is safe on 20,000-deep inputs).
    """
    stack: list[tuple[Any, Any, Any]] = [(a, b, None)]
    while stack:
        x, y, chain = stack.pop()
        if isinstance(x, dict) or isinstance(y, dict):
            if not (isinstance(x, dict) and isinstance(y, dict)):
                return f"{_render_chain(chain)}: {type(x).__name__} vs {type(y).__name__}"
            if list(x.keys()) != list(y.keys()):
                return f"{_render_chain(chain)}: keys {list(x.keys())!r} vs {list(y.keys())!r}"
            for key in x:
                stack.append((x[key], y[key], (chain, key)))
        elif isinstance(x, list) or isinstance(y, list):
            if not (isinstance(x, list) and isinstance(y, list)):
                return f"{_render_chain(chain)}: {type(x).__name__} vs {type(y).__name__}"
            if len(x) != len(y):
                return f"{_render_chain(chain)}: length {len(x)} vs {len(y)}"
            for i, (p, q) in enumerate(zip(x, y, strict=True)):
                stack.append((p, q, (chain, i)))
        elif type(x) is not type(y):
            return f"{_render_chain(chain)}: type {type(x).__name__} vs {type(y).__name__}"
        elif type(x) is float:
            if _float_bits(x) != _float_bits(y):
                return f"{_render_chain(chain)}: float {x!r} vs {y!r} (bits differ)"
        elif x != y:
            return f"{_render_chain(chain)}: {x!r} vs {y!r}"
    return None


def iter_containers(value: Any) -> Iterator[Any]:
    """Every dict/list inside `value` (root included), iteratively."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(node.values())
        elif isinstance(node, list):
            yield node
            stack.extend(node)


def all_ids(value: Any) -> set[int]:
    return {id(c) for c in iter_containers(value)}


def nest_lists(depth: int, leaf: Any = "leaf") -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def nest_dicts(depth: int, leaf: Any = "leaf", key: str = "a") -> Any:
    value = leaf
    for _ in range(depth):
        value = {key: value}
    return value


def is_negative_zero(x: float) -> bool:
    return x == 0 and math.copysign(1.0, x) < 0


# --------------------------------------------------------------------------- strategies

safe_ints = st.integers(min_value=-MAX_SAFE, max_value=MAX_SAFE)
finite_floats = st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: not is_negative_zero(x))
# st.text() never produces surrogate code points by default.
json_scalars = st.none() | st.booleans() | safe_ints | finite_floats | st.text(max_size=12)


def json_values(keys: st.SearchStrategy[str] | None = None, max_leaves: int = 25) -> st.SearchStrategy[Any]:
    key_strategy = keys if keys is not None else st.text(max_size=8)
    return st.recursive(
        json_scalars,
        lambda children: st.lists(children, max_size=5) | st.dictionaries(key_strategy, children, max_size=5),
        max_leaves=max_leaves,
    )


# Keys that every reasonable "identifier" rule renders as `.key` (no Python/JS keyword starts with "k").
ident_keys = st.from_regex(r"k[a-z0-9_]{0,5}", fullmatch=True)

bad_leaf_cases = st.sampled_from(ALL_BAD)

bad_leaves = bad_leaf_cases.map(lambda case: case[1]())

maybe_json_values = st.recursive(
    json_scalars | bad_leaves,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=6), children, max_size=4)
        | st.dictionaries(st.integers(-3, 3) | st.none(), children, min_size=1, max_size=2)
        | st.tuples(children)
        | st.lists(children, max_size=3).map(ListSub)
        | st.dictionaries(st.text(max_size=4), children, max_size=3).map(DictSub)
    ),
    max_leaves=15,
)
