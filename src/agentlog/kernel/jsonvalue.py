"""The lossless-JSON gate: validate, copy and freeze in one non-recursive pass.

Everything that enters a session's log passes through :func:`snapshot_json`. The gate guarantees
three things at once, in a single walk over the value:

* the value is JSON that survives a round trip through any conforming writer/reader unchanged
  (so ``NaN``, infinities, ``-0.0``, integers beyond the JavaScript safe range, lone surrogates,
  tuples, sets, non-string keys and arbitrary objects are refused, with the path to the culprit);
* the result is detached from the caller (later mutation of the input changes nothing);
* the result is deeply immutable (:class:`FrozenDict` / :class:`FrozenList`), while still being a
  real ``dict`` / ``list`` so it compares equal to plain containers and ``orjson`` serializes it
  natively without a conversion step.

The walk uses an explicit stack so nesting depth is bounded by :data:`MAX_JSON_DEPTH` (99,999 levels,
what a stored event can nest and still be read back), never by the interpreter's recursion limit (the
original accepts 20,000-deep values; so do we).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, NoReturn, TypeAlias

from .. import _accel
from ..errors import FrozenError, NonJsonValueError
from .jsoncodec import DEFAULT_MAX_DEPTH

JsonValue: TypeAlias = Any
"""A lossless JSON value (None, bool, int, float, str, list, dict with str keys)."""

MAX_SAFE_INTEGER = 2**53 - 1
_NEG_SAFE = -MAX_SAFE_INTEGER
_INF = math.inf
_NEG_INF = -math.inf

# Cycles can only be detected against the ancestor path. Tracking the path costs a set operation per
# container, so it starts only below this depth: a cyclic value descends forever, so it always gets
# there, and the precise first repetition is then located once for the error message.
_CYCLE_TRACK_DEPTH = 64

MAX_JSON_DEPTH = DEFAULT_MAX_DEPTH - 1  # 99,999
"""The deepest nesting (containers inside containers) the gate accepts. Readers parse a stored record
to at most 100,000 levels (``jsoncodec.DEFAULT_MAX_DEPTH``) and an event's envelope adds one level to
its data, so anything deeper could be written but never read back: it is refused here, on append."""


def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise FrozenError(f"{type(self).__name__} is immutable: committed session data cannot be modified")


class FrozenDict(dict[str, Any]):
    """A ``dict`` that refuses mutation. Equal to, and serialized like, a plain dict."""

    __slots__ = ()

    __setitem__ = _refuse
    __delitem__ = _refuse
    __ior__ = _refuse
    clear = _refuse
    pop = _refuse
    popitem = _refuse
    setdefault = _refuse
    update = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (dict(self),))

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        return self



class FrozenList(list[Any]):
    """A ``list`` that refuses mutation. Equal to, and serialized like, a plain list."""

    __slots__ = ()

    __setitem__ = _refuse
    __delitem__ = _refuse
    __iadd__ = _refuse
    __imul__ = _refuse
    append = _refuse
    extend = _refuse
    insert = _refuse
    pop = _refuse
    remove = _refuse
    clear = _refuse
    sort = _refuse
    reverse = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (list(self),))

    def __copy__(self) -> FrozenList:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenList:
        return self



EMPTY_FROZEN_DICT = FrozenDict()

# Container types the gate walks. Subclasses that agentlog itself defines (the frozen event) are added
# by their module; any other dict/list subclass is refused because it may carry behaviour or state
# that a JSON round trip would drop.
_DICT_TYPES: set[type] = {dict, FrozenDict}
_LIST_TYPES: set[type] = {list, FrozenList}


def register_frozen_dict_type(cls: type) -> None:
    """Let the gate accept an agentlog-owned ``FrozenDict`` subclass as a plain JSON object."""
    _DICT_TYPES.add(cls)
    _configure_speedups()


def _is_text_ok(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def json_quote(text: str) -> str:
    """``text`` as a double-quoted JSON string literal (lone surrogates escaped, never raising)."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif code < 0x20 or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _format_key(key: object) -> str:
    if isinstance(key, int):
        return f"[{key}]"
    text = str(key)
    if text.isidentifier():
        return f".{text}"
    return "[" + json_quote(text) + "]"


def _path_of(stack: list[tuple[Any, Any, Any, Any]], last: object = None, has_last: bool = False) -> str:
    parts = ["$"]
    for _src, _it, out, key in stack:
        parts.append(_format_key(len(out) if key is _LIST else key))
    if has_last:
        parts.append(_format_key(last))
    return "".join(parts)


def _scalar_reason(value: object) -> str | None:
    """Why a non-container value is not lossless JSON, or None if it is fine."""
    t = type(value)
    if value is None or t is bool:
        return None
    if t is str:
        return None if _is_text_ok(value) else "string contains a lone surrogate (not encodable as UTF-8)"  # type: ignore[arg-type]
    if t is int:
        if _NEG_SAFE <= value <= MAX_SAFE_INTEGER:  # type: ignore[operator]
            return None
        return f"integer {value} is outside the safe range ±(2**53-1)"
    if t is float:
        if value != value:
            return "NaN is not representable in JSON"
        if value == _INF or value == _NEG_INF:
            return f"{value} is not representable in JSON"
        if value == 0.0 and math.copysign(1.0, value) < 0:
            return "-0.0 would be rewritten to 0 by JSON"
        return None
    if t is tuple:
        return "tuple is not a JSON array (use a list)"
    if isinstance(value, dict):
        return f"{t.__name__} is a dict subclass, not a plain JSON object"
    if isinstance(value, list):
        return f"{t.__name__} is a list subclass, not a plain JSON array"
    return f"{t.__module__}.{t.__qualname__} is not a JSON value"


class _ListFrame:
    """Sentinel used as the frame key of list frames."""


_LIST: Any = _ListFrame()


_TOO_DEEP = (
    f"nested deeper than {MAX_JSON_DEPTH:,} levels, which no reader would load back "
    "(flatten the value or store it as a string)"
)


def _fail(stack: list[tuple[Any, Any, Any, Any]], reason: str, last: object = None, has_last: bool = False) -> NoReturn:
    path = _path_of(stack, last, has_last)
    raise NonJsonValueError(f"{path}: {reason}", path=path, reason=reason)


def _fail_cycle(stack: list[tuple[Any, Any, Any, Any]], child: object, child_key: object) -> NoReturn:
    # Locate the shallowest position where an object re-enters its own ancestry.
    objs = [frame[0] for frame in stack] + [child]
    first: dict[int, int] = {}
    for pos, obj in enumerate(objs):
        if id(obj) in first:
            trimmed = stack[:pos]
            path = _path_of(trimmed)
            origin = _path_of(stack[: first[id(obj)]])
            reason = f"cycle: the value at {path} is its own ancestor {origin}"
            raise NonJsonValueError(f"{path}: {reason}", path=path, reason=reason)
        first[id(obj)] = pos
    _fail(stack, "cycle detected", child_key, True)  # pragma: no cover - the loop always finds it


def snapshot_json(value: object) -> Any:
    """Return a detached, deeply frozen copy of ``value``, or raise :class:`NonJsonValueError`.

    Scalars are returned as they are (they are immutable); containers are copied. Aliased
    sub-values (a DAG) are copied once per occurrence; cycles are refused.
    """
    t = type(value)
    if t in _DICT_TYPES or t in _LIST_TYPES:
        return snapshot_container(value)
    reason = _scalar_reason(value)
    if reason is not None:
        raise NonJsonValueError(f"$: {reason}", path="$", reason=reason)
    return value


# --- the accelerator ------------------------------------------------------------------------------
#
# Nearly every value an agent logs is small and shallow and entirely valid. For those, a plain
# recursive copy is markedly faster in CPython than the explicit-stack walk. The accelerator handles
# only that case: at the first thing it does not like (an invalid or unusual value, or more than
# _FAST_DEPTH levels) it gives up and the canonical iterative walk below redoes the whole value, so
# results and error messages are exactly the walk's, and no input can exhaust the interpreter stack.

_FAST_DEPTH = 24


class _GiveUp(Exception):
    pass


_GIVE_UP = _GiveUp()


def _fast_dict(src: Any, depth: int) -> FrozenDict:
    if depth > _FAST_DEPTH:
        raise _GIVE_UP
    out = {}
    for k, v in src.items():
        if k.__class__ is not str:
            raise _GIVE_UP
        if not k.isascii():
            k.encode("utf-8")
        tv = v.__class__
        if tv is str:
            if not v.isascii():
                v.encode("utf-8")
        elif tv is int:
            if v > MAX_SAFE_INTEGER or v < _NEG_SAFE:
                raise _GIVE_UP
        elif tv in _DICT_TYPES:
            v = _fast_dict(v, depth + 1)
        elif tv in _LIST_TYPES:
            v = _fast_list(v, depth + 1)
        elif tv is float:
            if v - v != 0.0 or (v == 0.0 and math.copysign(1.0, v) < 0.0):
                raise _GIVE_UP
        elif v is not None and tv is not bool:
            raise _GIVE_UP
        out[k] = v
    return FrozenDict(out)


def _fast_list(src: Any, depth: int) -> FrozenList:
    if depth > _FAST_DEPTH:
        raise _GIVE_UP
    out = []
    for v in src:
        tv = v.__class__
        if tv is str:
            if not v.isascii():
                v.encode("utf-8")
        elif tv is int:
            if v > MAX_SAFE_INTEGER or v < _NEG_SAFE:
                raise _GIVE_UP
        elif tv in _DICT_TYPES:
            v = _fast_dict(v, depth + 1)
        elif tv in _LIST_TYPES:
            v = _fast_list(v, depth + 1)
        elif tv is float:
            if v - v != 0.0 or (v == 0.0 and math.copysign(1.0, v) < 0.0):
                raise _GIVE_UP
        elif v is not None and tv is not bool:
            raise _GIVE_UP
        out.append(v)
    return FrozenList(out)


def _py_snapshot_container(src: Any) -> Any:
    try:
        return _fast_dict(src, 0) if type(src) in _DICT_TYPES else _fast_list(src, 0)
    except (_GiveUp, UnicodeEncodeError, RecursionError):
        return _snapshot_container(src)


def _c_snapshot_container(src: Any) -> Any:
    result = _c_snapshot(src)
    if result is _GIVE_UP:
        return _snapshot_container(src)
    return result


# The C accelerator (agentlog/_speedups.c, loaded and version-checked by agentlog._accel) does the same as
# the Python accelerator, and additionally builds the frozen containers untracked by the cycle collector.
# AGENTLOG_PURE_PYTHON=1 disables it.
ACCELERATED = _accel.ACCELERATED
_c_snapshot: Any = _accel.snapshot
_c_configure: Any = _accel.configure
_c_seal: Any = _accel.seal
_c_freeze_owned_tree: Any = _accel.freeze_owned_tree


def _configure_speedups() -> None:
    if _c_configure is not None:
        _c_configure(
            FrozenDict,
            FrozenList,
            tuple(t for t in _DICT_TYPES if t is not dict),
            tuple(t for t in _LIST_TYPES if t is not list),
            _GIVE_UP,
        )


_configure_speedups()

snapshot_container = _c_snapshot_container if ACCELERATED else _py_snapshot_container
"""Gate for a value already known to be a dict or list of an accepted type (the append hot path)."""


def seal_as(cls: type, record: dict[str, Any]) -> Any:
    """An instance of the frozen dict subclass ``cls`` holding ``record``'s (already frozen) items."""
    if _c_seal is not None:
        return _c_seal(cls, record)
    return cls(record)


def _snapshot_container(root: Any) -> Any:
    dict_types = _DICT_TYPES
    list_types = _LIST_TYPES
    frozen_dict = FrozenDict
    frozen_list = FrozenList
    safe = MAX_SAFE_INTEGER
    neg_safe = _NEG_SAFE
    inf = _INF
    neg_inf = _NEG_INF
    list_key = _LIST
    stack: list[tuple[Any, Any, Any, Any]] = []
    deep_ids: set[int] = set()
    track = _CYCLE_TRACK_DEPTH

    src: Any = root
    out: Any
    it: Iterator[Any]
    is_dict = type(root) in dict_types
    if is_dict:
        out = {}
        it = iter(root.items())
    else:
        out = []
        it = iter(root)

    while True:
        if is_dict:
            for k, v in it:
                if type(k) is not str:
                    _fail(stack, f"object key {k!r} ({type(k).__name__}) is not a string")
                if not k.isascii() and not _is_text_ok(k):
                    _fail(stack, f"object key {k!r} contains a lone surrogate")
                tv = type(v)
                if tv is str:
                    if not v.isascii() and not _is_text_ok(v):
                        _fail(stack, "string contains a lone surrogate (not encodable as UTF-8)", k, True)
                    out[k] = v
                elif tv is int:
                    if v > safe or v < neg_safe:
                        _fail(stack, f"integer {v} is outside the safe range ±(2**53-1)", k, True)
                    out[k] = v
                elif v is None or tv is bool:
                    out[k] = v
                elif tv is float:
                    if v != v or v == inf or v == neg_inf or (v == 0.0 and math.copysign(1.0, v) < 0):
                        _fail(stack, _scalar_reason(v) or "invalid float", k, True)
                    out[k] = v
                elif tv in dict_types:
                    stack.append((src, it, out, k))
                    if len(stack) >= track:
                        if id(v) in deep_ids:
                            _fail_cycle(stack, v, k)
                        if len(stack) >= MAX_JSON_DEPTH:
                            _fail(stack, _TOO_DEEP)
                        deep_ids.add(id(src))
                    src = v
                    out = {}
                    it = iter(v.items())
                    break
                elif tv in list_types:
                    stack.append((src, it, out, k))
                    if len(stack) >= track:
                        if id(v) in deep_ids:
                            _fail_cycle(stack, v, k)
                        if len(stack) >= MAX_JSON_DEPTH:
                            _fail(stack, _TOO_DEEP)
                        deep_ids.add(id(src))
                    src = v
                    out = []
                    it = iter(v)
                    is_dict = False
                    break
                else:
                    _fail(stack, _scalar_reason(v) or "not a JSON value", k, True)
            else:
                result: Any = frozen_dict(out)
                if not stack:
                    return result
                if len(stack) >= track:
                    deep_ids.discard(id(stack[-1][0]))
                src, it, out, key = stack.pop()
                if key is list_key:
                    out.append(result)
                    is_dict = False
                else:
                    out[key] = result
        else:
            for v in it:
                tv = type(v)
                if tv is str:
                    if not v.isascii() and not _is_text_ok(v):
                        _fail(stack, "string contains a lone surrogate (not encodable as UTF-8)", len(out), True)
                    out.append(v)
                elif tv is int:
                    if v > safe or v < neg_safe:
                        _fail(stack, f"integer {v} is outside the safe range ±(2**53-1)", len(out), True)
                    out.append(v)
                elif v is None or tv is bool:
                    out.append(v)
                elif tv is float:
                    if v != v or v == inf or v == neg_inf or (v == 0.0 and math.copysign(1.0, v) < 0):
                        _fail(stack, _scalar_reason(v) or "invalid float", len(out), True)
                    out.append(v)
                elif tv in dict_types:
                    stack.append((src, it, out, list_key))
                    if len(stack) >= track:
                        if id(v) in deep_ids:
                            _fail_cycle(stack, v, len(out))
                        if len(stack) >= MAX_JSON_DEPTH:
                            _fail(stack, _TOO_DEEP)
                        deep_ids.add(id(src))
                    src = v
                    out = {}
                    it = iter(v.items())
                    is_dict = True
                    break
                elif tv in list_types:
                    stack.append((src, it, out, list_key))
                    if len(stack) >= track:
                        if id(v) in deep_ids:
                            _fail_cycle(stack, v, len(out))
                        if len(stack) >= MAX_JSON_DEPTH:
                            _fail(stack, _TOO_DEEP)
                        deep_ids.add(id(src))
                    src = v
                    out = []
                    it = iter(v)
                    break
                else:
                    _fail(stack, _scalar_reason(v) or "not a JSON value", len(out), True)
            else:
                result = frozen_list(out)
                if not stack:
                    return result
                if len(stack) >= track:
                    deep_ids.discard(id(stack[-1][0]))
                src, it, out, key = stack.pop()
                if key is list_key:
                    out.append(result)
                else:
                    out[key] = result
                    is_dict = True


def is_json_value(value: object) -> bool:
    """True when :func:`snapshot_json` would accept ``value``."""
    try:
        snapshot_json(value)
    except NonJsonValueError:
        return False
    return True


def thaw(value: Any) -> Any:
    """Return a plain, mutable deep copy of a JSON value (frozen or not). Iterative."""
    if not isinstance(value, (dict, list)):
        return value
    root: Any = {} if isinstance(value, dict) else []
    work: list[tuple[Any, Any]] = [(value, root)]
    while work:
        src, dst = work.pop()
        if isinstance(src, dict):
            for k, v in src.items():
                if isinstance(v, (dict, list)):
                    child: Any = {} if isinstance(v, dict) else []
                    dst[k] = child
                    work.append((v, child))
                else:
                    dst[k] = v
        else:
            for v in src:
                if isinstance(v, (dict, list)):
                    child = {} if isinstance(v, dict) else []
                    dst.append(child)
                    work.append((v, child))
                else:
                    dst.append(v)
    return root


def freeze_tree(value: Any) -> Any:
    """Frozen equivalent of an exclusively owned, freshly parsed JSON graph (no validation).

    The restore path's counterpart of :func:`snapshot_json`: persistence hands over graphs that came
    straight from a JSON parser, so their leaves need no checks, only freezing. With the accelerator the
    containers are frozen in place (no copy); the returned value is then ``value`` itself.
    """
    if _c_freeze_owned_tree is not None and (type(value) is dict or type(value) is list):
        result = _c_freeze_owned_tree(value)
        if result is not _GIVE_UP:
            return result
    return freeze_in_place(value)


def freeze_in_place(value: Any) -> Any:
    """Freeze an exclusively owned graph of plain containers, returning the frozen equivalent.

    Python cannot freeze a ``dict`` in place, so "in place" means: each container is replaced by a
    frozen container holding the very same children, without validating or copying scalars. Used by
    the restore path, whose graphs come straight from a JSON parser and are owned by nobody else.
    Iterative, so any depth works.
    """
    t = type(value)
    if t is not dict and t is not list:
        return value
    # Post-order: children are frozen before their parent is rebuilt around them. ``active`` holds the
    # containers on the current path, so a (non-JSON) cyclic graph is refused instead of looping.
    active: set[int] = {id(value)}
    stack: list[tuple[Any, Iterator[Any], Any]] = []
    src: Any = value
    it: Iterator[Any] = iter(list(value.items()) if t is dict else list(enumerate(value)))
    while True:
        for key, child in it:
            ct = type(child)
            if ct is dict or ct is list:
                if id(child) in active:
                    raise NonJsonValueError("$: cycle: a restored value contains itself", path="$", reason="cycle")
                active.add(id(child))
                stack.append((src, it, key))
                src = child
                it = iter(list(child.items()) if ct is dict else list(enumerate(child)))
                break
        else:
            active.discard(id(src))
            frozen: Any = FrozenDict(src) if type(src) is dict else FrozenList(src)
            if not stack:
                return frozen
            parent, it, key = stack.pop()
            # The parent is still a plain container owned by us: swap in the frozen child.
            parent[key] = frozen
            src = parent
