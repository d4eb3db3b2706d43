"""``@tool``: a :class:`~agentlog.agent.tools.Tool` made from a typed Python function.

Why the schema comes from the signature: a hand-written JSON schema drifts from the function it
describes, and the model is then told one thing while the body expects another. Here the annotations
are the single source: :func:`tool` turns them into the JSON schema the model is shown *and* into the
validator that checks (and converts) the model's arguments before the body runs. The docstring gives
the descriptions (Google ``Args:``, NumPy ``Parameters`` and reST ``:param x:`` styles are read).

Why refusal happens at decoration time: an annotation with no faithful JSON form (``bytes``, a bare
class, ``Callable``, ``*args``) would otherwise surface mid-turn as a confusing tool error; raising
:class:`~agentlog.errors.ToolDefinitionError` at import time points at the function instead.

Why bad arguments are results, not exceptions: the model asked for something and must be told what
was wrong so it can try again. Arguments that do not fit become the same ``INVALID_ARGUMENTS`` tool
error :func:`~agentlog.agent.tools.run_tool_call` writes (``error: {name: "InvalidArgumentsError",
code: "INVALID_ARGUMENTS"}``, text ``Error: invalid arguments for tool "<name>": <path>: <problem>``),
and a raising body becomes ``TOOL_ERROR`` there too.

Supported parameter annotations (nesting allowed): ``str``, ``int``, ``float``, ``bool``, ``None``,
``Any`` (any JSON value), ``list[T]``, ``tuple[T, ...]``, ``tuple[A, B]``, ``set[T]``/``frozenset[T]``,
``dict[str, T]``, ``T | None``/``Optional[T]``, other unions, ``Literal[...]`` (strings, ints, bools,
None), :class:`enum.Enum` subclasses with str/int values, ``TypedDict`` classes, dataclasses,
pydantic models (recognised by ``model_json_schema``/``model_validate``; pydantic is not a dependency),
``typing.NewType`` aliases, and ``Annotated[T, "description"]``. A parameter annotated
:class:`~agentlog.agent.tools.ToolContext` is injected and never shown to the model. Sync functions run
in a worker thread so a slow body does not stall the event loop (streaming and ``cancel()`` keep
working); async functions run on the loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, overload

import orjson

from ..errors import ToolDefinitionError
from ..kernel.jsonvalue import is_json_value
from .tools import _TOOL_NAME, INVALID_ARGUMENTS, INVALID_TOOL_OUTCOME, ExecutionMode, ToolContext, ToolOutcome

__all__ = ["DecoratedTool", "tool"]

F = TypeVar("F", bound=Callable[..., Any])


class _Invalid(Exception):
    """One argument problem: where (a ``$.a.b[0]`` path) and what."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")


# --- the type nodes: one schema and one converter per annotation ----------------------------------


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _key_path(path: str, key: str) -> str:
    return f"{path}.{key}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) else f"{path}[{key!r}]"


class _Node:
    """A parameter type: its JSON schema and the check-and-convert of one JSON value."""

    def schema(self) -> dict[str, Any]:
        raise NotImplementedError

    def convert(self, value: Any, path: str) -> Any:
        raise NotImplementedError


@dataclass
class _Any(_Node):
    def schema(self) -> dict[str, Any]:
        return {}

    def convert(self, value: Any, path: str) -> Any:
        return value


@dataclass
class _Scalar(_Node):
    kind: str  # "string", "integer", "number", "boolean", "null"

    def schema(self) -> dict[str, Any]:
        return {"type": self.kind}

    def convert(self, value: Any, path: str) -> Any:
        got = _json_type(value)
        if got == self.kind:
            return value
        if self.kind == "number" and got == "integer":
            return float(value)  # JSON has one number type; the body was promised a float
        raise _Invalid(path, f"expected {self.kind}, got {got}")


@dataclass
class _Array(_Node):
    item: _Node
    build: Callable[[list[Any]], Any] = list
    unique: bool = False

    def schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "array", "items": self.item.schema()}
        if self.unique:
            schema["uniqueItems"] = True
        return schema

    def convert(self, value: Any, path: str) -> Any:
        if not isinstance(value, list):
            raise _Invalid(path, f"expected array, got {_json_type(value)}")
        items = [self.item.convert(item, f"{path}[{index}]") for index, item in enumerate(value)]
        try:
            return self.build(items)
        except TypeError as err:  # unhashable items for a set
            raise _Invalid(path, f"items cannot form a set: {err}") from None


@dataclass
class _Tuple(_Node):
    items: list[_Node]

    def schema(self) -> dict[str, Any]:
        count = len(self.items)
        return {
            "type": "array",
            "prefixItems": [item.schema() for item in self.items],
            "items": False,
            "minItems": count,
            "maxItems": count,
        }

    def convert(self, value: Any, path: str) -> Any:
        if not isinstance(value, list):
            raise _Invalid(path, f"expected array, got {_json_type(value)}")
        if len(value) != len(self.items):
            raise _Invalid(path, f"expected exactly {len(self.items)} items, got {len(value)}")
        return tuple(
            node.convert(item, f"{path}[{i}]") for i, (node, item) in enumerate(zip(self.items, value, strict=True))
        )


@dataclass
class _Dict(_Node):
    value: _Node

    def schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "object"}
        inner = self.value.schema()
        if inner:
            schema["additionalProperties"] = inner
        return schema

    def convert(self, value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise _Invalid(path, f"expected object, got {_json_type(value)}")
        return {key: self.value.convert(item, _key_path(path, key)) for key, item in value.items()}


@dataclass
class _Choice(_Node):
    """``Literal[...]`` (``members is None``) or an :class:`enum.Enum` (values map to members)."""

    values: list[Any]
    members: list[Any] | None = None
    description: str | None = None

    def schema(self) -> dict[str, Any]:
        kinds = list(dict.fromkeys(_json_type(v) for v in self.values))
        schema: dict[str, Any] = {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": list(self.values)}
        if self.description:
            schema["description"] = self.description
        return schema

    def convert(self, value: Any, path: str) -> Any:
        for index, allowed in enumerate(self.values):
            if _json_type(value) == _json_type(allowed) and value == allowed:
                return self.members[index] if self.members is not None else allowed
        raise _Invalid(path, f"must be one of {', '.join(repr(v) for v in self.values)}")


_NO_DEFAULT: Any = object()
"""An optional field whose default is not shown (a default factory, a non-JSON value, a TypedDict key)."""


@dataclass
class _Field:
    name: str
    node: _Node
    required: bool
    default: Any = _NO_DEFAULT
    description: str | None = None


def _property_schema(field: _Field) -> dict[str, Any]:
    schema = field.node.schema()
    if field.description:
        # A nested type's own description (an enum's docstring) yields to the parameter's.
        schema = {**schema, "description": field.description}
    if not field.required and field.default is not _NO_DEFAULT:
        schema = {**schema, "default": field.default}
    return schema


@dataclass
class _Object(_Node):
    """A TypedDict (``build is None``: the body gets a dict) or a dataclass (``build`` makes one)."""

    title: str
    fields: list[_Field]
    build: Callable[..., Any] | None = None
    description: str | None = None

    def schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {field.name: _property_schema(field) for field in self.fields},
        }
        required = [field.name for field in self.fields if field.required]
        if required:
            schema["required"] = required
        schema["additionalProperties"] = False
        if self.description:
            schema["description"] = self.description
        return schema

    def convert(self, value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise _Invalid(path, f"expected object, got {_json_type(value)}")
        known = {field.name for field in self.fields}
        for key in value:
            if key not in known:
                raise _Invalid(path, f"unexpected property {key!r}")
        out: dict[str, Any] = {}
        for field in self.fields:
            if field.name in value:
                out[field.name] = field.node.convert(value[field.name], _key_path(path, field.name))
            elif field.required:
                raise _Invalid(path, f"missing required property {field.name!r}")
        if self.build is None:
            return out
        try:
            return self.build(**out)
        except Exception as err:  # a __post_init__ that refuses the values is an argument problem
            raise _Invalid(path, f"{self.title}: {type(err).__name__}: {err}") from None


@dataclass
class _Union(_Node):
    options: list[_Node]

    def schema(self) -> dict[str, Any]:
        schemas = [option.schema() for option in self.options]
        if all(set(s) == {"type"} and isinstance(s["type"], str) for s in schemas):
            return {"type": list(dict.fromkeys(s["type"] for s in schemas))}  # int | str -> a type list
        others = [s for s in schemas if s != {"type": "null"}]
        if len(schemas) == 2 and len(others) == 1 and isinstance(others[0].get("type"), str):
            # ``T | None`` keeps T's schema with "null" added: the form every provider and
            # check_arguments understand (anyOf is not checked by the registry's basic validation).
            merged = {**others[0], "type": [others[0]["type"], "null"]}
            if "enum" in merged:
                merged["enum"] = [*merged["enum"], None]
            return merged
        return {"anyOf": schemas}

    def convert(self, value: Any, path: str) -> Any:
        problems = []
        for option in self.options:
            try:
                return option.convert(value, path)
            except _Invalid as err:
                problems.append(str(err).split(": ", 1)[1])
        raise _Invalid(path, "matches none of the allowed types (" + "; ".join(problems) + ")")


@dataclass
class _Described(_Node):
    inner: _Node
    description: str

    def schema(self) -> dict[str, Any]:
        return {**self.inner.schema(), "description": self.description}

    def convert(self, value: Any, path: str) -> Any:
        return self.inner.convert(value, path)


@dataclass
class _Model(_Node):
    """A pydantic model: the model's own schema; ``model_validate`` checks and builds the instance."""

    cls: type[Any]
    model_schema: dict[str, Any]

    def schema(self) -> dict[str, Any]:
        return dict(self.model_schema)

    def convert(self, value: Any, path: str) -> Any:
        try:
            return self.cls.model_validate(value)
        except Exception as err:
            errors = getattr(err, "errors", None)
            details = errors() if callable(errors) else None
            if isinstance(details, list) and details and isinstance(details[0], dict):
                first = details[0]
                where = path
                for part in first.get("loc", ()):
                    where = f"{where}[{part}]" if isinstance(part, int) else _key_path(where, str(part))
                raise _Invalid(where, str(first.get("msg", err))) from None
            raise _Invalid(path, f"{type(err).__name__}: {err}") from None


def _is_pydantic_model(annotation: Any) -> bool:
    return (
        isinstance(annotation, type)
        and callable(getattr(annotation, "model_json_schema", None))
        and callable(getattr(annotation, "model_validate", None))
    )


# --- annotation → node ----------------------------------------------------------------------------

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def _is_typeddict(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, dict) and hasattr(annotation, "__total__")


class _Builder:
    """Turns annotations into nodes, refusing what has no faithful JSON form (and recursive types)."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.active: list[Any] = []
        self.defs: dict[str, Any] = {}  # pydantic models' shared definitions, hoisted to the top level

    def refuse(self, annotation: Any, why: str) -> ToolDefinitionError:
        return ToolDefinitionError(f"{self.where}: unsupported annotation {_show(annotation)}: {why}")

    def node(self, annotation: Any) -> _Node:
        if annotation is Any:
            return _Any()
        if annotation is None:
            return _Scalar("null")
        try:
            scalar = _SCALARS.get(annotation)
        except TypeError:  # an unhashable annotation object is never one of the scalars
            scalar = None
        if scalar is not None:
            return _Scalar(scalar)
        origin = typing.get_origin(annotation)
        args = typing.get_args(annotation)
        if origin is typing.Annotated:
            inner = self.node(args[0])
            texts = [m.strip() for m in args[1:] if isinstance(m, str) and m.strip()]
            return _Described(inner, " ".join(texts)) if texts else inner
        if origin is Literal:
            values = list(args)
            for value in values:
                if not (value is None or isinstance(value, (str, int, bool))) or isinstance(value, enum.Enum):
                    raise self.refuse(annotation, f"Literal values must be str, int, bool or None, not {value!r}")
            return _Choice(values)
        if origin in (typing.Union, types.UnionType):
            return _Union([self.node(arg) for arg in args])
        if annotation in (list, Sequence, set, frozenset, tuple) or origin in (list, Sequence, set, frozenset):
            item = self.node(args[0]) if args else _Any()
            container = origin or annotation
            if container in (set, frozenset):
                return _Array(item, set if container is set else frozenset, unique=True)
            if container is tuple:
                return _Array(item, tuple)
            return _Array(item)
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return _Array(self.node(args[0]), tuple)
            if args == ((),):  # tuple[()]
                return _Tuple([])
            return _Tuple([self.node(arg) for arg in args])
        if annotation in (dict, Mapping) or origin in (dict, Mapping):
            if args:
                if args[0] is not str:
                    raise self.refuse(annotation, "JSON object keys are strings; use dict[str, T]")
                return _Dict(self.node(args[1]))
            return _Dict(_Any())
        if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
            return self.enum(annotation)
        if _is_typeddict(annotation) or (isinstance(annotation, type) and dataclasses.is_dataclass(annotation)):
            return self.record(annotation)
        if _is_pydantic_model(annotation):
            return self.model(annotation)
        supertype = getattr(annotation, "__supertype__", None)  # typing.NewType("UserId", int)
        if supertype is not None:
            return self.node(supertype)
        if isinstance(annotation, str):
            raise self.refuse(annotation, "a string annotation that could not be resolved")
        raise self.refuse(
            annotation,
            "use str, int, float, bool, list, tuple, set, dict[str, T], Optional, Literal, an Enum, "
            "a TypedDict or a dataclass",
        )

    def model(self, cls: type[Any]) -> _Node:
        """A pydantic model (duck-typed: agentlog does not depend on pydantic): its own JSON schema, with
        its ``$defs`` hoisted to the tool's top level so every ``#/$defs/...`` reference still resolves."""
        try:
            schema = dict(cls.model_json_schema())
        except Exception as err:
            raise self.refuse(cls, f"its model_json_schema() failed: {type(err).__name__}: {err}") from err
        for name, definition in (schema.pop("$defs", None) or {}).items():
            if name in self.defs and self.defs[name] != definition:
                raise self.refuse(cls, f"two different models are both named {name!r} in one tool")
            self.defs[name] = definition
        if not is_json_value(schema):
            raise self.refuse(cls, "its JSON schema is not plain JSON")
        return _Model(cls, schema)

    def enum(self, cls: type[enum.Enum]) -> _Node:
        members = list(cls)
        if not members:
            raise self.refuse(cls, "an Enum without members")
        values = [member.value for member in members]
        for value in values:
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                raise self.refuse(cls, f"Enum values must be str or int, not {value!r}")
        return _Choice(values, members, description=_summary(cls.__doc__) or None)

    def record(self, cls: type[Any]) -> _Node:
        if cls in self.active:
            raise self.refuse(cls, "a recursive type has no finite JSON schema here")
        self.active.append(cls)
        try:
            hints = _hints(cls, self)
            docs = parse_docstring(cls.__doc__).params
            fields: list[_Field] = []
            if dataclasses.is_dataclass(cls):
                for item in dataclasses.fields(cls):
                    if not item.init:
                        continue
                    if item.name not in hints:
                        raise self.refuse(cls, f"field {item.name!r} has no annotation")
                    node = self.node(hints[item.name])
                    if item.default is not dataclasses.MISSING:
                        fields.append(
                            _Field(item.name, node, False, _jsonable_default(item.default), docs.get(item.name))
                        )
                    elif item.default_factory is not dataclasses.MISSING:
                        fields.append(_Field(item.name, node, False, _NO_DEFAULT, docs.get(item.name)))
                    else:
                        fields.append(_Field(item.name, node, True, _NO_DEFAULT, docs.get(item.name)))
                build: Callable[..., Any] | None = cls
            else:
                required_keys = getattr(cls, "__required_keys__", frozenset(hints))
                for name, hint in hints.items():
                    hint, required = _strip_required(hint, name in required_keys)
                    fields.append(_Field(name, self.node(hint), required, _NO_DEFAULT, docs.get(name)))
                build = None
            description = _summary(cls.__doc__) if not _generated_doc(cls) else None
            return _Object(cls.__name__, fields, build, description)
        finally:
            self.active.pop()


def _generated_doc(cls: type[Any]) -> bool:
    """Dataclasses and TypedDicts get a synthesized docstring (the signature) when none is written."""
    doc = cls.__doc__
    if doc is None:
        return True
    return doc.startswith(f"{cls.__name__}(") or doc == dict.__doc__


def _strip_required(hint: Any, required: bool) -> tuple[Any, bool]:
    origin = typing.get_origin(hint)
    if origin is typing.Required:
        return typing.get_args(hint)[0], True
    if origin is typing.NotRequired:
        return typing.get_args(hint)[0], False
    return hint, required


def _show(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__qualname__
    return repr(annotation)


def _hints(obj: Any, builder: _Builder) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except Exception as err:
        raise ToolDefinitionError(
            f"{builder.where}: annotations cannot be resolved: {type(err).__name__}: {err} (string annotations, as "
            "under `from __future__ import annotations`, can name only module-level types)"
        ) from err


def _jsonable_default(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        value = value.value
    return value if is_json_value(value) else _NO_DEFAULT


# --- docstrings -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Docstring:
    """A docstring split into the summary (everything before the first section) and per-name texts."""

    summary: str
    params: dict[str, str]


_GOOGLE_HEADERS = ("args", "arguments", "parameters", "params", "attributes", "keyword args", "keyword arguments")
_GOOGLE_SECTIONS = frozenset(
    {*_GOOGLE_HEADERS, "returns", "return", "raises", "yields", "examples", "example", "note", "notes", "see also"}
    | {"warning", "warnings", "todo", "references"}
)
"""Headers that end the summary; only the parameter-like ones (``_GOOGLE_HEADERS``) are read for names."""
_GOOGLE_SECTION = re.compile(r"^\s*([A-Za-z][A-Za-z ]*):\s*$")
_GOOGLE_ITEM = re.compile(r"^(\*{0,2}[A-Za-z_]\w*)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_UNDERLINE = re.compile(r"^\s*-{3,}\s*$")
_NUMPY_ITEM = re.compile(r"^([A-Za-z_]\w*)\s*(?::.*)?$")
_REST_PARAM = re.compile(r"^:(?:param|parameter|arg|argument|key|keyword)\s+(?:[^:]*\s)?([A-Za-z_]\w*)\s*:\s*(.*)$")
_REST_FIELD = re.compile(r"^:\w[^:]*:")


def _summary(doc: str | None) -> str:
    return parse_docstring(doc).summary


def parse_docstring(doc: str | None) -> Docstring:
    """Read a Google, NumPy or reST docstring: its summary and its parameter descriptions.

    The summary is the text before the first recognised section (``Args:``, ``Returns:``, a NumPy
    underlined header, a ``:param:`` field), paragraphs kept; descriptions are joined onto one line.
    """
    if not doc:
        return Docstring("", {})
    lines = inspect.cleandoc(doc).splitlines()
    params: dict[str, str] = {}
    summary_end = len(lines)
    index = 0
    while index < len(lines):
        line = lines[index]
        stripped = line.strip()
        numpy = index + 1 < len(lines) and _NUMPY_UNDERLINE.match(lines[index + 1]) and stripped
        google = _GOOGLE_SECTION.match(line) if not line.startswith((" ", "\t")) else None
        if numpy:
            summary_end = min(summary_end, index)
            header = stripped.lower()
            index += 2
            body: list[str] = []
            while index < len(lines) and not (
                index + 1 < len(lines) and _NUMPY_UNDERLINE.match(lines[index + 1]) and lines[index].strip()
            ):
                body.append(lines[index])
                index += 1
            if header in ("parameters", "other parameters", "attributes", "keyword arguments"):
                _numpy_items(body, params)
            continue
        if google and google.group(1).strip().lower() in _GOOGLE_SECTIONS:
            summary_end = min(summary_end, index)
            header = google.group(1).strip().lower()
            index += 1
            body = []
            while index < len(lines) and (not lines[index].strip() or lines[index].startswith((" ", "\t"))):
                body.append(lines[index])
                index += 1
            if header in _GOOGLE_HEADERS:
                _google_items(body, params)
            continue
        if _REST_FIELD.match(stripped):
            summary_end = min(summary_end, index)
            match = _REST_PARAM.match(stripped)
            index += 1
            texts = [match.group(2).strip()] if match else []
            while index < len(lines) and lines[index].strip() and not _REST_FIELD.match(lines[index].strip()):
                texts.append(lines[index].strip())
                index += 1
            if match:
                params[match.group(1)] = " ".join(t for t in texts if t)
            continue
        index += 1
    summary = "\n".join(lines[:summary_end]).strip()
    return Docstring(summary, params)


def _google_items(body: list[str], params: dict[str, str]) -> None:
    indents = [len(line) - len(line.lstrip()) for line in body if line.strip()]
    if not indents:
        return
    base = min(indents)
    current: str | None = None
    for line in body:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        match = _GOOGLE_ITEM.match(line.strip()) if indent == base else None
        if match:
            current = match.group(1).lstrip("*")
            params[current] = match.group(2).strip()
        elif current is not None:
            params[current] = f"{params[current]} {line.strip()}".strip()


def _numpy_items(body: list[str], params: dict[str, str]) -> None:
    current: str | None = None
    for line in body:
        if not line.strip():
            continue
        if not line.startswith((" ", "\t")):
            match = _NUMPY_ITEM.match(line.strip())
            current = match.group(1) if match else None
            if current is not None:
                params[current] = ""
        elif current is not None:
            params[current] = f"{params[current]} {line.strip()}".strip()


# --- the tool -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Param:
    name: str
    node: _Node
    required: bool
    positional_only: bool


class DecoratedTool:
    """A :class:`~agentlog.agent.tools.Tool` made by :func:`tool`; calling it calls the function.

    ``run(args, ctx)`` validates and converts the model's arguments against the signature (a problem
    is the ``INVALID_ARGUMENTS`` tool error), injects the :class:`ToolContext` parameter if the function
    has one, runs the body (sync bodies in a worker thread) and turns its return value into a
    :class:`ToolOutcome`: a ``ToolOutcome`` as is, a ``str`` as one text block, ``None`` as an empty
    text, anything else orjson can write (JSON values, dataclasses, enums, dates, pydantic models)
    as its compact JSON text.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        execution: ExecutionMode = "exclusive",
    ) -> None:
        tool_name = fn.__name__ if name is None else name
        if not isinstance(tool_name, str) or not _TOOL_NAME.match(tool_name):
            raise ToolDefinitionError(f"tool name must match {_TOOL_NAME.pattern}: {tool_name!r}")
        if execution not in ("parallel", "exclusive"):
            raise ToolDefinitionError(f'tool "{tool_name}" execution must be "parallel" or "exclusive": {execution!r}')
        if description is not None and not isinstance(description, str):
            raise ToolDefinitionError(f'tool "{tool_name}" description must be a string')
        if not callable(fn):
            raise ToolDefinitionError(f'tool "{tool_name}": {fn!r} is not callable')
        where = f'tool "{tool_name}" ({getattr(fn, "__qualname__", fn)!r})'
        builder = _Builder(where)
        doc = parse_docstring(inspect.getdoc(fn))
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError) as err:
            raise ToolDefinitionError(f"{where}: no inspectable signature: {err}") from err
        hints = _hints(fn, builder)
        params: list[_Param] = []
        fields: list[_Field] = []
        context_name: str | None = None
        for parameter in signature.parameters.values():
            pname = parameter.name
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                raise ToolDefinitionError(f"{where}: *{pname} / **{pname} cannot be described to the model")
            if pname not in hints:
                hint_text = " (for a method, decorate the bound method: tool(obj.method))" if pname == "self" else ""
                raise ToolDefinitionError(f"{where}: parameter {pname!r} has no type annotation{hint_text}")
            hint = hints[pname]
            if hint is ToolContext or hint == ToolContext | None:
                if context_name is not None:
                    raise ToolDefinitionError(f"{where}: more than one ToolContext parameter")
                context_name = pname
                continue
            builder.where = f"{where}, parameter {pname!r}"
            node = builder.node(hint)
            required = parameter.default is inspect.Parameter.empty
            default = None if required else _jsonable_default(parameter.default)
            fields.append(_Field(pname, node, required, default, doc.params.get(pname)))
            params.append(_Param(pname, node, required, parameter.kind is parameter.POSITIONAL_ONLY))
        self._fn = fn
        self._params = params
        self._context = context_name
        self._async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)
        self._object = _Object(tool_name, fields)
        self._schema = self._object.schema()
        if builder.defs:
            self._schema["$defs"] = builder.defs
        self._name = tool_name
        self._description = doc.summary if description is None else description
        self._execution: ExecutionMode = execution
        functools.update_wrapper(self, fn)

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @property
    def parameters(self) -> Mapping[str, Any]:
        return self._schema

    @property
    def execution(self) -> ExecutionMode:
        return self._execution

    @property
    def function(self) -> Callable[..., Any]:
        """The decorated function itself."""
        return self._fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<tool {self._name!r} of {getattr(self._fn, '__qualname__', self._fn)!r}>"

    def validate(self, args: Any) -> dict[str, Any]:
        """The converted keyword arguments for ``args`` (the model's parsed JSON), or ``ValueError``
        naming the first problem as ``$.path: problem``."""
        try:
            return self._object.convert(args, "$")  # type: ignore[no-any-return]
        except _Invalid as err:
            raise ValueError(str(err)) from None

    async def run(self, args: Any, ctx: ToolContext) -> ToolOutcome:
        try:
            values = self._object.convert(args, "$")
        except _Invalid as err:
            return ToolOutcome.failure(
                f'invalid arguments for tool "{self._name}": {err}',
                code=INVALID_ARGUMENTS,
                name="InvalidArgumentsError",
            )
        positional = [values.pop(p.name) for p in self._params if p.positional_only and p.name in values]
        if self._context is not None:
            values[self._context] = ctx
        if self._async:
            result = await self._fn(*positional, **values)
        else:
            result = await asyncio.to_thread(self._fn, *positional, **values)
        return _outcome(self._name, result)


def _outcome(name: str, result: Any) -> ToolOutcome:
    """The body's return value as an outcome: only the text reaches the log, so any value orjson can
    write (dicts, lists, dataclasses, enums, datetimes, pydantic's ``model_dump()``…) is accepted."""
    if isinstance(result, ToolOutcome):
        return result
    if isinstance(result, str):
        return ToolOutcome.text(result)
    if result is None:
        return ToolOutcome.text("")
    if isinstance(result, (set, frozenset)):
        result = list(result)
    dump = getattr(result, "model_dump", None)  # a pydantic model
    if callable(dump) and not isinstance(result, type):
        result = dump(mode="json")
    try:
        return ToolOutcome.text(orjson.dumps(result).decode())
    except (TypeError, orjson.JSONEncodeError):
        return ToolOutcome.failure(
            f'tool "{name}" returned {type(result).__name__}; return a str, a ToolOutcome or a JSON value',
            code=INVALID_TOOL_OUTCOME,
            name="ToolError",
        )


@overload
def tool(fn: F, /) -> DecoratedTool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None, execution: ExecutionMode = "exclusive"
) -> Callable[[F], DecoratedTool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    execution: ExecutionMode = "exclusive",
) -> DecoratedTool | Callable[[Callable[..., Any]], DecoratedTool]:
    """Make a :class:`DecoratedTool` from a typed function: ``@tool`` or ``@tool(name=..., ...)``.

    ``name`` defaults to the function's name, ``description`` to its docstring's summary, and
    ``execution`` to ``"exclusive"`` (the safe default: pass ``"parallel"`` for a body that reads only).
    An annotation with no JSON form raises :class:`~agentlog.errors.ToolDefinitionError` here.
    """
    if fn is not None:
        return DecoratedTool(fn, name=name, description=description, execution=execution)

    def decorate(inner: Callable[..., Any]) -> DecoratedTool:
        return DecoratedTool(inner, name=name, description=description, execution=execution)

    return decorate
