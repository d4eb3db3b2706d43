"""``@tool``: schemas from signatures and docstrings, call-time validation as the spec's tool errors.

Validation errors are checked through a real :class:`Agent` turn (the scripted in-process model and the
real ``openai`` client over HTTP to the local demo server), so what is asserted is what the log records
and what the model is sent back.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import inspect
import json
import keyword
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, NotRequired, Optional, TypedDict, Union

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentlog as al
from agentlog.agent import (
    Agent,
    AgentOptions,
    DecoratedTool,
    ToolContext,
    ToolDefinitionError,
    ToolOutcome,
    ToolRegistry,
    run_tool_call,
    tool,
)
from agentlog.kernel.events import TOOL_RESULT
from agentlog.llm.openai_compat import OpenAICompatibleProvider
from agentlog.testing import ScriptedProvider, text_reply, tool_call_reply
from agentlog.testing.demo_server import DemoModelServer, Reply
from agentlog.testing.demo_server import ToolCall as ScriptedCall


class Color(enum.Enum):
    """A paint colour."""

    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Box(TypedDict):
    """A box.

    Attributes:
        width: the width in cm
        depth: the depth in cm
    """

    width: int
    depth: NotRequired[float]


@dataclass
class Point:
    """A point on the plane.

    Args:
        x: abscissa
        y: ordinate
    """

    x: float
    y: float = 0.0
    tags: list[str] = field(default_factory=list)


def _schema_of(annotation: Any) -> dict[str, Any]:
    def body(value: Any) -> str:
        return "ok"

    body.__annotations__ = {"value": annotation, "return": str}
    return dict(tool(body).parameters["properties"]["value"])


SCHEMAS: list[tuple[Any, dict[str, Any]]] = [
    (str, {"type": "string"}),
    (int, {"type": "integer"}),
    (float, {"type": "number"}),
    (bool, {"type": "boolean"}),
    (None, {"type": "null"}),
    (Any, {}),
    (list[int], {"type": "array", "items": {"type": "integer"}}),
    (Sequence[str], {"type": "array", "items": {"type": "string"}}),
    (list, {"type": "array", "items": {}}),
    (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
    (
        tuple[int, str],
        {
            "type": "array",
            "prefixItems": [{"type": "integer"}, {"type": "string"}],
            "items": False,
            "minItems": 2,
            "maxItems": 2,
        },
    ),
    (set[str], {"type": "array", "items": {"type": "string"}, "uniqueItems": True}),
    (dict[str, float], {"type": "object", "additionalProperties": {"type": "number"}}),
    (dict, {"type": "object"}),
    (Optional[int], {"type": ["integer", "null"]}),  # noqa: UP045 - the spelling under test
    (int | None, {"type": ["integer", "null"]}),
    (Union[int, str], {"type": ["integer", "string"]}),  # noqa: UP007 - the spelling under test
    (list[int] | None, {"type": ["array", "null"], "items": {"type": "integer"}}),
    (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
    (Literal[1, "x"], {"type": ["integer", "string"], "enum": [1, "x"]}),
    (Literal["a"] | None, {"type": ["string", "null"], "enum": ["a", None]}),
    (Color, {"type": "string", "enum": ["red", "blue"], "description": "A paint colour."}),
    (Level, {"type": "integer", "enum": [1, 2]}),
    (Annotated[int, "how many"], {"type": "integer", "description": "how many"}),
    (
        Box,
        {
            "type": "object",
            "properties": {
                "width": {"type": "integer", "description": "the width in cm"},
                "depth": {"type": "number", "description": "the depth in cm"},
            },
            "required": ["width"],
            "additionalProperties": False,
            "description": "A box.",
        },
    ),
    (
        Point,
        {
            "type": "object",
            "properties": {
                "x": {"type": "number", "description": "abscissa"},
                "y": {"type": "number", "description": "ordinate", "default": 0.0},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["x"],
            "additionalProperties": False,
            "description": "A point on the plane.",
        },
    ),
]
# A union of two structured types is an anyOf of their own schemas.
SCHEMAS.append((list[Point] | Box, {"anyOf": [{"type": "array", "items": _schema_of(Point)}, _schema_of(Box)]}))


@pytest.mark.parametrize(("annotation", "expected"), SCHEMAS, ids=lambda v: repr(v)[:40])
def test_tool_decorator__schema_for_each_supported_type(annotation: Any, expected: dict[str, Any]) -> None:
    assert _schema_of(annotation) == expected


def test_tool_decorator__whole_schema_required_defaults_and_context_hidden() -> None:
    @tool
    def search(query: str, ctx: ToolContext, limit: int = 10, exact: bool = False, color: Color = Color.RED) -> str:
        """Search the notes."""
        return query

    assert isinstance(search, DecoratedTool)
    assert search.name == "search" and search.description == "Search the notes." and search.execution == "exclusive"
    assert dict(search.parameters) == {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "limit": {"type": "integer", "default": 10},
            "exact": {"type": "boolean", "default": False},
            "color": {"type": "string", "enum": ["red", "blue"], "description": "A paint colour.", "default": "red"},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    # The registry accepts it and the request header carries exactly this schema.
    registry = ToolRegistry([search])
    assert registry.schemas() == [
        {"name": "search", "description": "Search the notes.", "parameters": search.parameters}
    ]
    assert search("x", None) == "x"  # the decorated object still calls the function


def test_tool_decorator__keyword_form_overrides_name_description_execution() -> None:
    @tool(name="lookup-v2", description="Look a word up.", execution="parallel")
    async def lookup(word: str) -> str:
        """Ignored summary."""
        return word

    assert (lookup.name, lookup.description, lookup.execution) == ("lookup-v2", "Look a word up.", "parallel")


GOOGLE = """Resize an image.

    Keeps the aspect ratio.

    Args:
        path (str): Where the image is.
        width: The new width,
            in pixels.
        mode: How to resample.

    Returns:
        The new path.
    """

NUMPY = """Resize an image.

    Keeps the aspect ratio.

    Parameters
    ----------
    path : str
        Where the image is.
    width : int
        The new width,
        in pixels.
    mode : str, optional
        How to resample.

    Returns
    -------
    str
        The new path.
    """

REST = """Resize an image.

    Keeps the aspect ratio.

    :param path: Where the image is.
    :param int width: The new width,
        in pixels.
    :param mode: How to resample.
    :returns: The new path.
    """


@pytest.mark.parametrize("doc", [GOOGLE, NUMPY, REST], ids=["google", "numpy", "rest"])
def test_tool_decorator__docstring_styles_give_summary_and_parameter_descriptions(doc: str) -> None:
    def resize(path: str, width: int, mode: str = "bilinear") -> str:
        return path

    resize.__doc__ = doc
    made = tool(resize)
    assert made.description == "Resize an image.\n\nKeeps the aspect ratio."
    props = made.parameters["properties"]
    assert props["path"]["description"] == "Where the image is."
    assert props["width"]["description"] == "The new width, in pixels."
    assert props["mode"]["description"] == "How to resample."


class _Node:
    pass


@dataclass
class _Tree:
    children: list[_Tree]


def _star(*args: int) -> str:
    return ""


def _kwargs(**kwargs: int) -> str:
    return ""


def _unannotated(x) -> str:  # type: ignore[no-untyped-def]
    return ""


def _context_twice(a: ToolContext, b: ToolContext) -> str:
    return ""


class Floaty(enum.Enum):
    HALF = 0.5


@pytest.mark.parametrize(
    ("fn_or_annotation", "needle"),
    [
        (bytes, "unsupported annotation bytes"),
        (object, "unsupported annotation object"),
        (_Node, "unsupported annotation"),
        (Callable[[int], int], "unsupported annotation"),
        (dict[int, str], "keys are strings"),
        (Literal[1.5], "Literal values"),
        (Floaty, "Enum values must be str or int"),
        (_Tree, "recursive"),
        (list[bytes], "unsupported annotation bytes"),
        (_star, "*args"),
        (_kwargs, "**kwargs"),
        (_unannotated, "no type annotation"),
        (_context_twice, "more than one ToolContext"),
    ],
    ids=lambda v: getattr(v, "__name__", repr(v))[:30],
)
def test_tool_decorator__refuses_unsupported_annotations_at_decoration_time(fn_or_annotation: Any, needle: str) -> None:
    if (
        callable(fn_or_annotation)
        and getattr(fn_or_annotation, "__module__", None) == __name__
        and (fn_or_annotation.__name__.startswith("_") and not isinstance(fn_or_annotation, type))
    ):
        fn = fn_or_annotation
    else:

        def fn(value: Any) -> str:
            return ""

        fn.__annotations__ = {"value": fn_or_annotation}
    with pytest.raises(ToolDefinitionError) as caught:
        tool(fn)
    assert needle in str(caught.value)
    assert caught.value.code == "INVALID_TOOL"


def test_tool_decorator__refuses_bad_names_execution_and_unresolvable_annotations() -> None:
    def fine(x: int) -> str:
        return ""

    with pytest.raises(ToolDefinitionError, match="tool name"):
        tool(name="has space")(fine)
    with pytest.raises(ToolDefinitionError, match="execution"):
        tool(execution="sometimes")(fine)  # type: ignore[arg-type]

    def forward(x: NotDefinedAnywhere) -> str:  # type: ignore[name-defined]  # noqa: F821
        return ""

    with pytest.raises(ToolDefinitionError, match="cannot be resolved"):
        tool(forward)


# --- calls ---------------------------------------------------------------------------------------------


def _ctx() -> ToolContext:
    return ToolContext(session_id=None, cwd=Path.cwd())


def _call(made: DecoratedTool, arguments: Any) -> ToolOutcome:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return asyncio.run(run_tool_call(ToolRegistry([made]), "call-1", made.name, raw, _ctx()))


def test_tool_decorator__arguments_are_converted_to_the_annotated_types() -> None:
    seen: dict[str, Any] = {}

    @tool
    def paint(
        color: Color, level: Level, at: Point, box: Box, ratio: float, pair: tuple[int, str], tags: set[str]
    ) -> str:
        seen.update(color=color, level=level, at=at, box=box, ratio=ratio, pair=pair, tags=tags)
        return "painted"

    outcome = _call(
        paint,
        {
            "color": "blue",
            "level": 2,
            "at": {"x": 1, "tags": ["a"]},
            "box": {"width": 3},
            "ratio": 2,
            "pair": [1, "a"],
            "tags": ["b", "b"],
        },
    )
    assert not outcome.is_error and outcome.text_content == "painted"
    assert seen == {
        "color": Color.BLUE,
        "level": Level.HIGH,
        "at": Point(1.0, 0.0, ["a"]),
        "box": {"width": 3},
        "ratio": 2.0,
        "pair": (1, "a"),
        "tags": {"b"},
    }
    assert isinstance(seen["ratio"], float) and isinstance(seen["at"].x, float)


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({}, "$: missing required property 'color'"),
        ({"color": "green", "at": {"x": 1}}, "$.color: must be one of 'red', 'blue'"),
        ({"color": "red", "at": {"x": "1"}}, "$.at.x: expected number, got string"),
        ({"color": "red", "at": {"x": 1, "z": 2}}, "$.at: unexpected property 'z'"),
        ({"color": "red", "at": {"x": 1}, "extra": 1}, "$: unexpected property 'extra'"),
        ({"color": "red", "at": {"x": 1}, "pair": [1]}, "$.pair: expected exactly 2 items, got 1"),
        ({"color": "red", "at": {"x": 1}, "pair": [1, 2]}, "$.pair[1]: expected string, got integer"),
        ({"color": "red", "at": {"x": 1}, "maybe": "x"}, "$.maybe: expected integer or null, got string"),
        ({"color": "red", "at": {"x": 1}, "either": None}, "$.either: matches none of the allowed types"),
        ('{"color": "red", ', 'not valid JSON: {"color": "red", '),
    ],
)
def test_tool_decorator__invalid_arguments_are_the_spec_tool_error(arguments: Any, problem: str) -> None:
    ran = []

    @tool
    def place(
        color: Color,
        at: Point,
        pair: tuple[int, str] = (0, ""),
        maybe: int | None = None,
        either: list[int] | Box = (),  # type: ignore[assignment]
    ) -> str:
        ran.append(1)
        return "placed"

    outcome = _call(place, arguments)
    assert outcome.is_error and not ran
    assert outcome.error == {"name": "InvalidArgumentsError", "code": "INVALID_ARGUMENTS"}
    assert outcome.text_content.startswith('Error: invalid arguments for tool "place": ')
    assert problem in outcome.text_content


def test_tool_decorator__return_values_and_raising_bodies() -> None:
    @tool
    def give(kind: str) -> Any:
        if kind == "outcome":
            return ToolOutcome.text("custom", meta={"k": 1})
        if kind == "none":
            return None
        if kind == "json":
            return {"a": [1, 2]}
        if kind == "dataclass":
            return Point(1.0)
        if kind == "date":
            return datetime.date(2026, 1, 2)
        if kind == "object":
            return object()
        raise RuntimeError("boom")

    assert _call(give, {"kind": "outcome"}).meta == {"k": 1}
    assert _call(give, {"kind": "none"}).text_content == ""
    assert _call(give, {"kind": "json"}).text_content == '{"a":[1,2]}'
    assert json.loads(_call(give, {"kind": "dataclass"}).text_content) == {"x": 1.0, "y": 0.0, "tags": []}
    assert _call(give, {"kind": "date"}).text_content == '"2026-01-02"'
    bad = _call(give, {"kind": "object"})
    assert bad.is_error and bad.error == {"name": "ToolError", "code": "INVALID_TOOL_OUTCOME"}
    boom = _call(give, {"kind": "raise"})
    assert boom.is_error and boom.error == {"name": "RuntimeError", "code": "TOOL_ERROR"}
    assert boom.text_content == "Error: RuntimeError: boom"


def test_tool_decorator__async_bodies_run_on_the_loop_sync_bodies_in_a_worker_thread() -> None:
    threads: dict[str, int] = {}

    @tool
    async def slow(n: int, ctx: ToolContext) -> str:
        threads["async"] = threading.get_ident()
        await asyncio.sleep(0)
        return f"{n} {ctx.call_id}"

    @tool
    def blocking(n: int) -> str:
        threads["sync"] = threading.get_ident()
        return str(n * 2)

    async def main() -> tuple[ToolOutcome, ToolOutcome, int]:
        registry = ToolRegistry([slow, blocking])
        a = await run_tool_call(registry, "c-a", "slow", '{"n": 1}', _ctx())
        b = await run_tool_call(registry, "c-b", "blocking", '{"n": 2}', _ctx())
        return a, b, threading.get_ident()

    a, b, loop_thread = asyncio.run(main())
    assert a.text_content == "1 c-a" and b.text_content == "4"
    assert threads["async"] == loop_thread and threads["sync"] != loop_thread


# --- through a real agent turn --------------------------------------------------------------------------


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first addend.
        b: The second addend.
    """
    return a + b


def test_tool_decorator__validation_errors_reach_the_model_through_an_agent_turn() -> None:
    async def main() -> tuple[al.Session, ScriptedProvider]:
        store = al.SessionStore()
        al.SessionInvariants(store).install()
        session = store.create("tools")
        provider = ScriptedProvider(
            [
                tool_call_reply(("c1", "add", '{"a": 1, "b": "two"}')),
                tool_call_reply(("c2", "add", '{"a": 1, "b": 2}')),
                text_reply("1 + 2 = 3"),
            ]
        )
        agent = Agent(session, provider, AgentOptions(provider="scripted", model="m"), tools=ToolRegistry([add]))
        agent.send("add 1 and 2")
        outcomes = await agent.run()
        assert [o.reason for o in outcomes] == [{"kind": "completed"}]
        return session, provider

    session, provider = asyncio.run(main())
    results = [e["data"] for e in session.events if e["type"] == TOOL_RESULT]
    assert results[0]["error"] == {"name": "InvalidArgumentsError", "code": "INVALID_ARGUMENTS"}
    block = results[0]["message"]["content"][0]
    assert block["isError"] is True
    assert block["content"] == [
        {"type": "text", "text": 'Error: invalid arguments for tool "add": $.b: expected integer, got string'}
    ]
    assert "error" not in results[1] and results[1]["message"]["content"][0]["content"][0]["text"] == "3"
    # The model was sent the error as a tool result on the next request, and the schema in every request.
    second = provider.requests[1]
    sent = [b for m in second.messages for b in m["content"] if b.get("type") == "tool-result"]
    assert sent[0]["isError"] is True and "expected integer" in sent[0]["content"][0]["text"]
    assert [t["parameters"] for t in second.tools] == [add.parameters]


def test_tool_decorator__schema_and_error_over_http_with_the_openai_client(tmp_path: Path) -> None:
    script = [
        Reply(tool_calls=[ScriptedCall("add", {"a": 1}, id="call-1")]),
        Reply(text="It needs b."),
    ]

    async def main() -> tuple[al.Session, Any]:
        with DemoModelServer(script) as server:
            provider = OpenAICompatibleProvider(base_url=server.base_url, api_key="test", model="demo-model")
            store = al.SessionStore()
            session = store.create("http")
            agent = Agent(
                session, provider, AgentOptions(provider="deepseek", model="demo-model"), tools=ToolRegistry([add])
            )
            agent.send("add")
            await agent.run()
            return session, server.requests

    _session, requests = asyncio.run(main())
    wire_tool = requests[0].body["tools"][0]["function"]
    assert wire_tool["name"] == "add" and wire_tool["description"] == "Add two integers."
    assert wire_tool["parameters"]["properties"]["b"] == {"type": "integer", "description": "The second addend."}
    tool_message = next(m for m in requests[1].body["messages"] if m["role"] == "tool")
    assert tool_message["tool_call_id"] == "call-1"
    assert "missing required property 'b'" in json.dumps(tool_message["content"])


# --- properties -----------------------------------------------------------------------------------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


@tool
def echo(values: list[int] | None, label: Literal["x", "y"] = "x", weights: dict[str, float] | None = None) -> Any:
    return {"values": values, "label": label, "weights": weights}


def _fits(value: Any) -> bool:
    if not isinstance(value, dict) or set(value) - {"values", "label", "weights"} or "values" not in value:
        return False
    values, label, weights = value["values"], value.get("label", "x"), value.get("weights")
    ints = values is None or (
        isinstance(values, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in values)
    )
    floats = weights is None or (
        isinstance(weights, dict)
        and all(isinstance(w, (int, float)) and not isinstance(w, bool) for w in weights.values())
    )
    return ints and label in ("x", "y") and isinstance(label, str) and floats


ARGUMENTS = st.one_of(
    JSON,
    st.fixed_dictionaries(
        {"values": st.none() | st.lists(st.integers(-100, 100) | JSON, max_size=4)},
        optional={"label": st.sampled_from(["x", "y", "z"]) | JSON, "weights": st.none() | JSON},
    ),
)


@settings(max_examples=150, deadline=None)
@given(ARGUMENTS)
def test_tool_decorator__any_json_arguments_give_the_body_or_an_invalid_arguments_result(value: Any) -> None:
    outcome = _call(echo, value)
    if _fits(value):
        assert not outcome.is_error, outcome
        got = json.loads(outcome.text_content)
        expected_weights = value.get("weights")
        if expected_weights is not None:
            expected_weights = {k: float(v) for k, v in expected_weights.items()}
        assert got == {"values": value["values"], "label": value.get("label", "x"), "weights": expected_weights}
    else:
        assert outcome.is_error and outcome.error == {"name": "InvalidArgumentsError", "code": "INVALID_ARGUMENTS"}


@settings(max_examples=60, deadline=None)
@given(st.builds(Point, st.floats(-1e6, 1e6), st.floats(-1e6, 1e6), st.lists(st.text(max_size=4), max_size=3)))
def test_tool_decorator__dataclass_arguments_round_trip(point: Point) -> None:
    @tool
    def where(at: Point) -> Point:
        return at

    outcome = _call(where, {"at": {"x": point.x, "y": point.y, "tags": point.tags}})
    assert Point(**json.loads(outcome.text_content)) == point


# --- pydantic models and NewType -------------------------------------------------------------------------


def test_tool_decorator__pydantic_models_keep_their_schema_and_validate() -> None:
    import pydantic  # installed by the test extra (pydantic-ai-slim)

    class Address(pydantic.BaseModel):
        street: str
        number: int = pydantic.Field(ge=1)

    class Person(pydantic.BaseModel):
        name: str
        home: Address

    seen: list[Any] = []

    def register(person: Any) -> str:
        """Register a person.

        Args:
            person: Who to register.
        """
        seen.append(person)
        return person.name

    register.__annotations__ = {"person": Person, "return": str}
    made = tool(register)
    prop = made.parameters["properties"]["person"]
    assert prop["description"] == "Who to register."
    assert prop["properties"]["home"] == {"$ref": "#/$defs/Address"}
    assert made.parameters["$defs"]["Address"]["properties"]["number"]["minimum"] == 1
    ok = _call(made, {"person": {"name": "Ada", "home": {"street": "Main", "number": 3}}})
    assert ok.text_content == "Ada" and isinstance(seen[0], Person) and seen[0].home.number == 3
    bad = _call(made, {"person": {"name": "Ada", "home": {"street": "Main", "number": 0}}})
    assert bad.error == {"name": "InvalidArgumentsError", "code": "INVALID_ARGUMENTS"}
    assert "$.person.home.number: Input should be greater than or equal to 1" in bad.text_content
    assert len(seen) == 1


def test_tool_decorator__newtype_is_its_supertype() -> None:
    from typing import NewType

    UserId = NewType("UserId", int)

    def find(user: Any) -> str:
        return str(user)

    find.__annotations__ = {"user": UserId, "return": str}
    assert tool(find).parameters["properties"]["user"] == {"type": "integer"}


NAMES = st.lists(
    st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(lambda name: not keyword.iskeyword(name)),
    min_size=1,
    max_size=4,
    unique=True,
)  # parameter names: a keyword ("as", "if") is none
WORDS = st.lists(st.from_regex(r"[A-Za-z][a-z0-9]{0,6}", fullmatch=True), min_size=1, max_size=6).map(" ".join)


def _render(style: str, summary: str, described: dict[str, str]) -> str:
    lines = [summary, ""]
    if style == "google":
        lines.append("Args:")
        lines.extend(f"    {name}: {text}" for name, text in described.items())
    elif style == "numpy":
        lines.extend(["Parameters", "----------"])
        for name, text in described.items():
            lines.extend([f"{name} : int", f"    {text}"])
    else:
        lines.extend(f":param {name}: {text}" for name, text in described.items())
    return "\n".join(lines)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(["google", "numpy", "rest"]), WORDS, NAMES, st.data())
def test_tool_decorator__docstring_descriptions_round_trip(
    style: str, summary: str, names: list[str], data: Any
) -> None:
    described = {name: data.draw(WORDS) for name in names}

    def fn(**kwargs: Any) -> str:
        return ""

    # A function with exactly these int parameters, documented in ``style``.
    fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=int) for name in names]
    )
    fn.__annotations__ = dict.fromkeys(names, int)
    fn.__doc__ = _render(style, summary, described)
    made = tool(fn)
    assert made.description == summary
    assert {name: prop.get("description") for name, prop in made.parameters["properties"].items()} == described
