"""Tools, their outcomes, and the scheduler that runs one step's tool calls (runtime spec §6.6).

The agent loop records what happened; this module only makes it happen. Everything here is pure
asyncio with no session knowledge: the loop appends ``tool/call`` from the scheduler's ``start``
callback and ``tool/result`` from the outcomes it gets back, so the log stays the single source of
truth and this module stays testable without a store.

Two rules shape the design:

- **A tool problem is a result, never an exception.** The model asked for something; whatever went
  wrong (an unknown tool, arguments that do not fit the schema, a crashing body) must go back to the
  model as an error result so it can correct itself, and the log must get a ``tool/result`` for every
  ``tool/call``. :func:`run_tool_call` therefore converts every tool problem into a :class:`ToolOutcome`
  with a stable error code; only the scheduler's own failures (a ``start`` callback that cannot append)
  propagate, and then no result is fabricated.
- **Model order is the order of record.** Calls start in model order (so ``tool/call`` events are in
  model order) and results are returned and committed in model order, however the bodies interleave.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from ..errors import NonJsonValueError
from ..errors import ToolConflictError as ToolConflictError
from ..errors import ToolDefinitionError as ToolDefinitionError
from ..errors import ToolSchedulerError as ToolSchedulerError
from ..kernel.events import Message, ToolErrorIdentity, ToolResultData, ToolSchema
from ..kernel.jsoncodec import JsonDecodeError, loads
from ..kernel.jsonvalue import is_json_value, snapshot_json
from ..kernel.messages import tool_result_message
from .checkpoint import aborted_before_dispatch_result

ExecutionMode = Literal["parallel", "exclusive"]
"""``exclusive`` tools run alone (they change state others may read); ``parallel`` tools may overlap."""

DEFAULT_MAX_PARALLEL = 10
"""The spec's default ``maxParallelToolCalls``."""

# Stable error codes of the outcomes this module produces.
UNKNOWN_TOOL = "UNKNOWN_TOOL"
INVALID_ARGUMENTS = "INVALID_ARGUMENTS"
TOOL_ERROR = "TOOL_ERROR"
INVALID_TOOL_OUTCOME = "INVALID_TOOL_OUTCOME"
TOOL_ABORTED = "ABORTED"
"""A started body stopped early because the call's cancel signal fired (distinct from never starting)."""

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


# --- outcome and context ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What a tool call produced, before the loop turns it into a ``tool/result`` event.

    ``content`` holds wire content blocks (``text_block(...)`` and friends). ``error`` is the stable
    identity ``{name, code}`` recorded on the event so callers branch on codes, not on texts. ``meta``
    is optional lossless JSON for UIs and audits (``None`` means absent). ``additional_contexts`` are
    user messages the loop splices into the next step. ``concludes_turn`` asks the loop to end the turn
    after this batch; the spec honours it only on a successful result.
    """

    content: tuple[dict[str, Any], ...]
    is_error: bool = False
    error: ToolErrorIdentity | None = None
    meta: Any = None
    additional_contexts: tuple[Message, ...] = ()
    concludes_turn: bool = False

    def __post_init__(self) -> None:
        # Accept any sequence from callers but keep the outcome itself immutable.
        if not isinstance(self.content, tuple):
            object.__setattr__(self, "content", tuple(self.content))
        if not isinstance(self.additional_contexts, tuple):
            object.__setattr__(self, "additional_contexts", tuple(self.additional_contexts))

    @classmethod
    def text(
        cls,
        text: str,
        *,
        meta: Any = None,
        additional_contexts: Sequence[Message] = (),
        concludes_turn: bool = False,
    ) -> ToolOutcome:
        """A successful outcome holding one text block."""
        return cls(
            ({"type": "text", "text": text},),
            meta=meta,
            additional_contexts=tuple(additional_contexts),
            concludes_turn=concludes_turn,
        )

    @classmethod
    def failure(cls, message: str, *, code: str, name: str = "ToolError", meta: Any = None) -> ToolOutcome:
        """An error outcome; the text is ``Error: <message>`` like the canonical aborted result."""
        return cls(
            ({"type": "text", "text": f"Error: {message}"},),
            is_error=True,
            error={"name": name, "code": code},
            meta=meta,
        )

    @property
    def text_content(self) -> str:
        """The text blocks joined with newlines (what a human or a test usually wants to read)."""
        return "\n".join(b["text"] for b in self.content if b.get("type") == "text" and isinstance(b.get("text"), str))

    def result_message(self, call_id: str, *, id: str | None = None) -> Message:
        """The model-facing ``ToolResultMessage``; ``isError`` is written only for errors."""
        return tool_result_message(call_id, list(self.content), is_error=True if self.is_error else None, id=id)

    def result_data(self, call_id: str, *, turn: int, step: int, id: str | None = None) -> ToolResultData:
        """The ``tool/result`` event data ``{turn, step, message, error?, meta?}`` for this outcome."""
        data: ToolResultData = {"turn": turn, "step": step, "message": self.result_message(call_id, id=id)}
        if self.error is not None:
            data["error"] = {"name": self.error["name"], "code": self.error["code"]}
        if self.meta is not None:
            data["meta"] = self.meta
        return data


def aborted_before_dispatch_outcome() -> ToolOutcome:
    """The canonical outcome of a call cancelled before its body started.

    Built from :func:`agentlog.checkpoint.aborted_before_dispatch_result` so the texts and codes the
    checkpoint barrier and the scheduler write can never drift apart.
    """
    result = aborted_before_dispatch_result()
    info = result["error"]["info"]
    return ToolOutcome(tuple(result["content"]), is_error=True, error={"name": info["name"], "code": info["code"]})


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool body may know about the call it serves.

    ``cancel`` is the step's abort signal: a body that can take long must watch it and stop early
    (``run_command`` kills its process group). ``call_id`` is per call; the scheduler derives each call's
    context from one batch context with :meth:`for_call`.
    """

    session_id: str | None
    cwd: Path
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    turn: int = 0
    step: int = 0
    call_id: str = ""

    @property
    def cancelled(self) -> bool:
        return self.cancel.is_set()

    def for_call(self, call_id: str) -> ToolContext:
        return self if call_id == self.call_id else replace(self, call_id=call_id)


class Tool(Protocol):
    """A tool the model can call.

    ``parameters`` is the JSON schema of the arguments object (sent to the model verbatim, and used by
    :func:`run_tool_call` to refuse arguments that miss required keys or have the wrong types before
    the body runs). ``run`` receives the parsed arguments and returns a :class:`ToolOutcome`; raising is
    allowed but becomes an error outcome.
    """

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> Mapping[str, Any]: ...

    @property
    def execution(self) -> ExecutionMode: ...

    async def run(self, args: Any, ctx: ToolContext) -> ToolOutcome: ...


ToolBody = Callable[[Any, ToolContext], Awaitable[ToolOutcome]]


@dataclass(frozen=True, slots=True)
class FunctionTool:
    """A :class:`Tool` made from an async function, for tools that need no state of their own."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    body: ToolBody
    execution: ExecutionMode = "exclusive"

    async def run(self, args: Any, ctx: ToolContext) -> ToolOutcome:
        return await self.body(args, ctx)


# --- registry -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Entry:
    tool: Tool
    parameters: dict[str, Any]  # frozen snapshot: what the model was shown is what gets validated


class ToolRegistry:
    """The tools offered to the model, in registration order (the order the request header records).

    Definitions are checked when registered, not when the model first calls them, so a bad tool fails
    at start-up instead of mid-turn; the parameter schema is snapshotted then, so a tool that mutates
    its own schema later cannot desynchronise the request header from the validation.
    """

    def __init__(self, tools: Sequence[Tool] = ()) -> None:
        self._entries: dict[str, _Entry] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> Tool:
        name = tool.name
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise ToolDefinitionError(f"tool name must match {_TOOL_NAME.pattern}: {name!r}")
        if name in self._entries:
            raise ToolConflictError(f'a tool named "{name}" is already registered')
        if not isinstance(tool.description, str):
            raise ToolDefinitionError(f'tool "{name}" description must be a string')
        if tool.execution not in ("parallel", "exclusive"):
            raise ToolDefinitionError(f'tool "{name}" execution must be "parallel" or "exclusive": {tool.execution!r}')
        raw_parameters = tool.parameters
        try:
            # A read-only Mapping is fine as input; the snapshot is a frozen plain-JSON copy either way.
            parameters = snapshot_json(dict(raw_parameters) if isinstance(raw_parameters, Mapping) else raw_parameters)
        except NonJsonValueError as err:
            raise ToolDefinitionError(f'tool "{name}" parameters are not lossless JSON: {err}') from err
        if not isinstance(parameters, dict) or parameters.get("type") != "object":
            raise ToolDefinitionError(f'tool "{name}" parameters must be a JSON schema of type "object"')
        self._entries[name] = _Entry(tool, parameters)
        return tool

    def get(self, name: str) -> Tool | None:
        entry = self._entries.get(name)
        return entry.tool if entry is not None else None

    def parameters_of(self, name: str) -> Mapping[str, Any] | None:
        """The frozen schema snapshot taken at registration (``None`` for an unknown name)."""
        entry = self._entries.get(name)
        return entry.parameters if entry is not None else None

    def execution_of(self, name: str) -> ExecutionMode:
        """A call's scheduling mode; unknown names count as exclusive (the safe default)."""
        entry = self._entries.get(name)
        return "parallel" if entry is not None and entry.tool.execution == "parallel" else "exclusive"

    def names(self) -> list[str]:
        return list(self._entries)

    def schemas(self) -> list[ToolSchema]:
        """``[{name, description, parameters}]`` in registration order, for the request header."""
        return [
            {"name": name, "description": entry.tool.description, "parameters": entry.parameters}
            for name, entry in self._entries.items()
        ]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Tool]:
        return (entry.tool for entry in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)


# --- arguments ------------------------------------------------------------------------------------


def parse_arguments(raw: str) -> Any:
    """The spec's argument parsing: ``""`` → ``{}``, valid JSON → its value, anything else → ``raw``.

    Invalid JSON is passed on rather than refused so a tool whose schema accepts a string can still
    interpret it; :func:`run_tool_call` refuses it for object-typed schemas.
    """
    value, _ = _parse(raw)
    return value


def _parse(raw: str) -> tuple[Any, bool]:
    """``(value, True)`` for empty or valid JSON text, ``(raw, False)`` otherwise."""
    if raw == "":
        return {}, True
    try:
        return loads(raw), True
    except JsonDecodeError:
        return raw, False


_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def _type_name(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _JSON_TYPES[name](value):
            return name
    return type(value).__name__


def _key_path(path: str, key: str) -> str:
    return f"{path}.{key}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) else f"{path}[{key!r}]"


def check_arguments(value: Any, schema: Mapping[str, Any], path: str = "$") -> str | None:
    """The first way ``value`` violates ``schema``'s basics, or ``None``.

    Only the keywords that catch real model mistakes are checked (``type``, ``required``,
    ``properties``, ``additionalProperties: false``, ``items``, ``enum``, ``minimum``, ``maximum``);
    unknown keywords are ignored rather than refused, so a richer schema never blocks a valid call.
    """
    expected = schema.get("type")
    if isinstance(expected, str):
        expected = [expected]
    if isinstance(expected, list):
        known = [t for t in expected if isinstance(t, str) and t in _JSON_TYPES]
        if known and not any(_JSON_TYPES[t](value) for t in known):
            return f"{path}: expected {' or '.join(known)}, got {_type_name(value)}"
    enum = schema.get("enum")
    if isinstance(enum, list) and not any(_type_name(value) == _type_name(e) and value == e for e in enum):
        return f"{path}: must be one of {', '.join(repr(e) for e in enum)}"
    if _JSON_TYPES["number"](value):
        minimum = schema.get("minimum")
        if _JSON_TYPES["number"](minimum) and value < minimum:
            return f"{path}: must be >= {minimum}"
        maximum = schema.get("maximum")
        if _JSON_TYPES["number"](maximum) and value > maximum:
            return f"{path}: must be <= {maximum}"
    if isinstance(value, dict):
        required = schema.get("required")
        if isinstance(required, list):
            for key in required:
                if isinstance(key, str) and key not in value:
                    return f"{path}: missing required property {key!r}"
        properties = schema.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        additional = schema.get("additionalProperties")
        for key, item in value.items():
            sub = properties.get(key)
            if isinstance(sub, Mapping):
                problem = check_arguments(item, sub, _key_path(path, key))
            elif additional is False:
                problem = f"{path}: unexpected property {key!r}"
            elif isinstance(additional, Mapping):
                problem = check_arguments(item, additional, _key_path(path, key))
            else:
                problem = None
            if problem is not None:
                return problem
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for index, item in enumerate(value):
                problem = check_arguments(item, items, f"{path}[{index}]")
                if problem is not None:
                    return problem
    return None


# --- running one call -----------------------------------------------------------------------------


def _describe(err: BaseException) -> str:
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _outcome_problem(outcome: object) -> str | None:
    """Why an outcome cannot become a ``tool/result`` (the event gate would refuse it later, mid-commit)."""
    if not isinstance(outcome, ToolOutcome):
        return f"the tool returned {type(outcome).__name__}, not a ToolOutcome"
    for block in outcome.content:
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            return "every content block must be a dict with a string 'type'"
    if not is_json_value(list(outcome.content)):
        return "the content is not lossless JSON"
    if outcome.meta is not None and not is_json_value(outcome.meta):
        return "the meta is not lossless JSON"
    for message in outcome.additional_contexts:
        if not isinstance(message, dict) or message.get("role") != "user" or not is_json_value(message):
            return "additional contexts must be user messages made of lossless JSON"
    if outcome.error is not None and not (
        isinstance(outcome.error, dict)
        and isinstance(outcome.error.get("name"), str)
        and isinstance(outcome.error.get("code"), str)
    ):
        return "the error identity must be {name: str, code: str}"
    return None


async def run_tool_call(
    registry: ToolRegistry, call_id: str, name: str, raw_arguments: str, ctx: ToolContext
) -> ToolOutcome:
    """Run one call and return its outcome; never raises for a tool problem.

    Order of checks: a cancel signal already set → the canonical ABORTED_BEFORE_DISPATCH outcome (the
    body never runs); unknown name → ``UNKNOWN_TOOL``; arguments that do not fit the registered schema
    (including non-JSON text for an object schema) → ``INVALID_ARGUMENTS``; a raising body →
    ``TOOL_ERROR`` naming the exception; a malformed outcome → ``INVALID_TOOL_OUTCOME``. Cancelling the
    task running this coroutine still cancels it (that is the caller's decision, not a tool problem).
    """
    ctx = ctx.for_call(call_id)
    if ctx.cancel.is_set():
        return aborted_before_dispatch_outcome()
    tool = registry.get(name)
    schema = registry.parameters_of(name)
    if tool is None or schema is None:
        known = registry.names()
        listing = f"known tools: {', '.join(known)}" if known else "no tools are registered"
        return ToolOutcome.failure(f'unknown tool "{name}"; {listing}', code=UNKNOWN_TOOL, name="UnknownToolError")
    if not isinstance(raw_arguments, str):
        return ToolOutcome.failure(
            f'invalid arguments for tool "{name}": expected raw JSON text, got {type(raw_arguments).__name__}',
            code=INVALID_ARGUMENTS,
            name="InvalidArgumentsError",
        )
    args, parsed = _parse(raw_arguments)
    if not parsed and schema.get("type") == "object":
        excerpt = raw_arguments if len(raw_arguments) <= 200 else raw_arguments[:200] + "…"
        return ToolOutcome.failure(
            f'invalid arguments for tool "{name}": not valid JSON: {excerpt}',
            code=INVALID_ARGUMENTS,
            name="InvalidArgumentsError",
        )
    problem = check_arguments(args, schema)
    if problem is not None:
        return ToolOutcome.failure(
            f'invalid arguments for tool "{name}": {problem}', code=INVALID_ARGUMENTS, name="InvalidArgumentsError"
        )
    try:
        outcome = await tool.run(args, ctx)
    except asyncio.CancelledError as err:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # our own task is being cancelled: not a tool problem
        return ToolOutcome.failure(_describe(err), code=TOOL_ERROR, name=type(err).__name__)
    except Exception as err:
        return ToolOutcome.failure(_describe(err), code=TOOL_ERROR, name=type(err).__name__)
    bad = _outcome_problem(outcome)
    if bad is not None:
        return ToolOutcome.failure(
            f'tool "{name}" produced an invalid outcome: {bad}', code=INVALID_TOOL_OUTCOME, name="ToolError"
        )
    return outcome


# --- scheduling a batch ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model requested: its id, tool name and raw argument text (never re-serialized)."""

    call_id: str
    name: str
    arguments: str

    @classmethod
    def from_block(cls, block: Mapping[str, Any]) -> ToolCall:
        """From a wire ``tool-call`` content block of an assistant message."""
        return cls(block["id"], block["name"], block["arguments"])


@dataclass(frozen=True, slots=True)
class CallResult:
    """A call's outcome. ``started`` is False for calls cancelled before they started: ``start`` was never
    called for them, so the loop appends both their ``tool/call`` and their (aborted) ``tool/result``."""

    call: ToolCall
    outcome: ToolOutcome
    started: bool


def batch_concludes_turn(results: Sequence[CallResult]) -> bool:
    """Whether the turn ends after this batch: some *successful* result set ``concludes_turn``."""
    return any(r.outcome.concludes_turn and not r.outcome.is_error for r in results)


async def schedule_calls(
    calls: Sequence[ToolCall],
    registry: ToolRegistry,
    start: Callable[[ToolCall], Awaitable[object]],
    max_parallel: int = DEFAULT_MAX_PARALLEL,
    *,
    context: ToolContext,
    commit: Callable[[CallResult], Awaitable[object]] | None = None,
) -> list[CallResult]:
    """Run one step's calls per spec §6.6 and return their results in model order.

    - Calls are walked in model order. An ``exclusive`` call waits for every started call to finish,
      runs alone, and finishes before the next call starts. A ``parallel`` call joins a rolling pool of
      at most ``max_parallel`` running calls that continues over the following calls while they are
      parallel (each call's mode is re-checked just before it starts).
    - ``start(call)`` is awaited just before a call's body is launched, strictly in model order; the loop
      appends ``tool/call`` there. ``commit(result)``, if given, is awaited in model order as soon as a
      result and all earlier ones are known, so results become durable promptly; it is never awaited
      concurrently with ``start``.
    - Cancellation is ``context.cancel``: once set, no further call starts; started calls run to their
      end (their bodies see the signal); every unstarted call gets the canonical aborted outcome with
      ``started=False``. Started calls always precede unstarted ones, as the spec's abort order needs.
    - If ``start``/``commit`` raises, or a call task fails unexpectedly, nothing more starts, started
      calls are awaited and their real results committed (unless ``commit`` is what failed), and the
      error propagates without fabricated results. If this coroutine itself is cancelled, the running
      calls are cancelled too.
    """
    if isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1:
        raise ToolSchedulerError(f"max_parallel must be a positive integer: {max_parallel!r}")
    cancel = context.cancel
    count = len(calls)
    tasks: list[asyncio.Task[ToolOutcome] | None] = [None] * count
    results: list[CallResult] = []
    running: set[asyncio.Task[ToolOutcome]] = set()
    commit_failed = False

    async def flush() -> None:
        nonlocal commit_failed
        # Hand over every result whose predecessors are all known, in model order.
        while len(results) < count:
            task = tasks[len(results)]
            if task is None or not task.done():
                return
            result = CallResult(calls[len(results)], task.result(), True)
            results.append(result)
            if commit is not None:
                try:
                    await commit(result)
                except BaseException:
                    commit_failed = True
                    raise

    async def launch(index: int) -> asyncio.Task[ToolOutcome]:
        call = calls[index]
        await start(call)
        task = asyncio.create_task(
            run_tool_call(registry, call.call_id, call.name, call.arguments, context.for_call(call.call_id)),
            name=f"tool-call:{call.call_id}",
        )
        tasks[index] = task
        running.add(task)
        return task

    async def wait_any(watch_cancel: bool) -> None:
        # Wait until a running call finishes (or, while waiting for a pool slot, the cancel signal fires).
        waiters: set[asyncio.Future[Any]] = set(running)
        cancel_waiter: asyncio.Task[Any] | None = None
        if watch_cancel:
            cancel_waiter = asyncio.ensure_future(cancel.wait())
            waiters.add(cancel_waiter)
        try:
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if cancel_waiter is not None:
                cancel_waiter.cancel()
        running.difference_update(done)
        await flush()

    async def drain() -> None:
        while running:
            await wait_any(watch_cancel=False)

    try:
        index = 0
        while index < count and not cancel.is_set():
            if registry.execution_of(calls[index].name) == "parallel":
                while len(running) >= max_parallel and not cancel.is_set():
                    await wait_any(watch_cancel=True)
                if cancel.is_set():
                    break
                await launch(index)
                await flush()
            else:
                await drain()  # the barrier: an exclusive call never overlaps an earlier one
                if cancel.is_set():
                    break
                await launch(index)
                await drain()
            index += 1
        await drain()
    except asyncio.CancelledError:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        raise
    except BaseException:
        # Internal failure: stop dispatching and let started calls finish. Their real results are still
        # handed over (unless handing over is what failed); nothing is fabricated for the others.
        await asyncio.gather(*running, return_exceptions=True)
        if not commit_failed:
            with contextlib.suppress(Exception):
                await flush()
        raise

    await flush()
    while len(results) < count:
        result = CallResult(calls[len(results)], aborted_before_dispatch_outcome(), False)
        results.append(result)
        if commit is not None:
            await commit(result)
    return results
