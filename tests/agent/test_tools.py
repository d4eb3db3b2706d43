"""The tool layer's contract (runtime spec §6.6): argument parsing, error outcomes, and the scheduler.

Ordering is asserted with events and logs, never with wall-clock timing, so the tests are exact and
fast: a body that must overlap another waits for an event only the other can set (a guard timeout
turns a missing overlap into a failure instead of a hang).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import agentlog as al
from agentlog.agent import (
    CallResult,
    FunctionTool,
    ToolCall,
    ToolConflictError,
    ToolContext,
    ToolDefinitionError,
    ToolOutcome,
    ToolRegistry,
    ToolSchedulerError,
    aborted_before_dispatch_outcome,
    batch_concludes_turn,
    parse_arguments,
    run_tool_call,
    schedule_calls,
)
from agentlog.agent.checkpoint import TOOL_ABORTED_BEFORE_DISPATCH, aborted_before_dispatch_result
from agentlog.kernel.jsonvalue import is_json_value

GUARD = 5.0  # seconds; only ever reached when the behaviour under test is broken

OBJECT: dict[str, Any] = {"type": "object", "properties": {}}


def _run(coro: Awaitable[Any]) -> Any:
    async def guarded() -> Any:
        return await asyncio.wait_for(coro, GUARD)

    return asyncio.run(guarded())


async def _settle() -> None:
    """Let every ready task run until the loop is quiet (no timers involved)."""
    for _ in range(50):
        await asyncio.sleep(0)


def _ctx(cancel: asyncio.Event | None = None) -> ToolContext:
    return ToolContext("s1", Path.cwd(), cancel if cancel is not None else asyncio.Event(), turn=1, step=1)


def _tool(name: str, body: Callable[[Any, ToolContext], Awaitable[ToolOutcome]], **kw: Any) -> FunctionTool:
    return FunctionTool(name, f"the {name} tool", kw.pop("parameters", OBJECT), body, **kw)


async def _ok(args: Any, ctx: ToolContext) -> ToolOutcome:
    return ToolOutcome.text(f"ok {ctx.call_id}")


class Harness:
    """Probe tools that log their lifecycle and can be held open until the test releases them."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.active = 0
        self.max_active = 0
        self.gates: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.entered: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.ended: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.committed: list[CallResult] = []
        self.registry = ToolRegistry([self.probe("par", "parallel"), self.probe("exc", "exclusive")])

    def probe(self, name: str, execution: Any) -> FunctionTool:
        async def body(args: Any, ctx: ToolContext) -> ToolOutcome:
            cid = ctx.call_id
            self.log.append(f"body:{cid}")
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.entered[cid].set()
            try:
                if args.get("hold"):
                    await self.gates[cid].wait()
                after = args.get("after")
                if after:
                    await self.ended[after].wait()
            finally:
                self.active -= 1
                self.log.append(f"end:{cid}")
                self.ended[cid].set()
            return ToolOutcome.text(f"done {cid}")

        return _tool(name, body, execution=execution)

    async def start(self, call: ToolCall) -> None:
        self.log.append(f"start:{call.call_id}")

    async def commit(self, result: CallResult) -> None:
        self.log.append(f"commit:{result.call.call_id}")
        self.committed.append(result)

    def index(self, entry: str) -> int:
        return self.log.index(entry)


def _calls(*specs: tuple[str, str, str]) -> list[ToolCall]:
    return [ToolCall(cid, name, args) for cid, name, args in specs]


# --- parse_arguments ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", {}),
        ('{"a": 1, "b": [true, null]}', {"a": 1, "b": [True, None]}),
        ('"text"', "text"),
        ("3", 3),
        ("not json", "not json"),
        ("[1,]", "[1,]"),
        ("NaN", "NaN"),
        ("  ", "  "),  # only the empty string means "no arguments"
        ('{"a": 1', '{"a": 1'),
    ],
)
def test_parse_arguments__follows_the_spec(raw: str, expected: Any) -> None:
    assert parse_arguments(raw) == expected


# --- registry ---------------------------------------------------------------------------------------


def test_registry__schemas_in_registration_order_and_frozen() -> None:
    params: dict[str, Any] = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    registry = ToolRegistry([_tool("b_tool", _ok, parameters=params), _tool("a_tool", _ok)])
    schemas = registry.schemas()
    assert [s["name"] for s in schemas] == ["b_tool", "a_tool"]
    assert schemas[0] == {"name": "b_tool", "description": "the b_tool tool", "parameters": params}
    assert is_json_value(schemas)
    params["required"].append("y")  # the caller's dict changing later does not change what was registered
    assert registry.schemas()[0]["parameters"]["required"] == ["x"]
    with pytest.raises(al.FrozenError):
        schemas[0]["parameters"]["required"].append("z")
    assert registry.names() == ["b_tool", "a_tool"] and len(registry) == 2 and "a_tool" in registry
    assert registry.get("missing") is None
    assert registry.execution_of("missing") == "exclusive"


def test_registry__duplicate_name_is_a_typed_conflict_and_changes_nothing() -> None:
    first = _tool("dup", _ok)
    registry = ToolRegistry([first])
    with pytest.raises(ToolConflictError, match='"dup" is already registered') as info:
        registry.register(_tool("dup", _ok, execution="parallel"))
    assert isinstance(info.value, al.AgentlogError) and info.value.code == "TOOL_CONFLICT"
    assert registry.get("dup") is first and len(registry) == 1


@pytest.mark.parametrize(
    ("name", "parameters", "execution"),
    [
        ("has space", OBJECT, "exclusive"),
        ("", OBJECT, "exclusive"),
        ("ok", {"type": "string"}, "exclusive"),
        ("ok", {"type": "object", "default": float("nan")}, "exclusive"),
        ("ok", OBJECT, "sometimes"),
    ],
)
def test_registry__refuses_definitions_providers_would_refuse(name: str, parameters: Any, execution: Any) -> None:
    registry = ToolRegistry()
    with pytest.raises(ToolDefinitionError) as info:
        registry.register(_tool(name, _ok, parameters=parameters, execution=execution))
    assert info.value.code == "INVALID_TOOL" and len(registry) == 0


# --- run_tool_call ---------------------------------------------------------------------------------


def test_run_tool_call__passes_parsed_arguments_and_the_call_id() -> None:
    seen: list[tuple[Any, str]] = []

    async def body(args: Any, ctx: ToolContext) -> ToolOutcome:
        seen.append((args, ctx.call_id))
        return ToolOutcome.text("fine", meta={"n": 1})

    registry = ToolRegistry([_tool("echo", body)])
    outcome = _run(run_tool_call(registry, "c7", "echo", "", _ctx()))
    assert seen == [({}, "c7")]
    assert outcome == ToolOutcome.text("fine", meta={"n": 1}) and not outcome.is_error


def test_run_tool_call__unknown_tool_names_it_and_lists_the_known_ones() -> None:
    registry = ToolRegistry([_tool("alpha", _ok), _tool("beta", _ok)])
    outcome = _run(run_tool_call(registry, "c1", "gamma", "{}", _ctx()))
    assert outcome.is_error and outcome.error == {"name": "UnknownToolError", "code": "UNKNOWN_TOOL"}
    assert outcome.text_content == 'Error: unknown tool "gamma"; known tools: alpha, beta'
    empty = _run(run_tool_call(ToolRegistry(), "c1", "gamma", "{}", _ctx()))
    assert "no tools are registered" in empty.text_content


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "count": {"type": "integer", "minimum": 1},
        "mode": {"enum": ["a", "b"]},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["path"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("raw", "detail"),
    [
        ("not json at all", "not valid JSON: not json at all"),
        ('{"path": "x"', 'not valid JSON: {"path": "x"'),
        ("[1, 2]", "$: expected object, got array"),
        ("{}", "$: missing required property 'path'"),
        ('{"path": 3}', "$.path: expected string, got integer"),
        ('{"path": "x", "count": true}', "$.count: expected integer, got boolean"),
        ('{"path": "x", "count": 1.5}', "$.count: expected integer, got number"),
        ('{"path": "x", "count": 0}', "$.count: must be >= 1"),
        ('{"path": "x", "mode": "c"}', "$.mode: must be one of 'a', 'b'"),
        ('{"path": "x", "tags": ["a", 2]}', "$.tags[1]: expected string, got integer"),
        ('{"path": "x", "extra": 1}', "$: unexpected property 'extra'"),
    ],
)
def test_run_tool_call__invalid_arguments_never_reach_the_body(raw: str, detail: str) -> None:
    ran: list[Any] = []

    async def body(args: Any, ctx: ToolContext) -> ToolOutcome:
        ran.append(args)
        return ToolOutcome.text("ran")

    registry = ToolRegistry([_tool("strict", body, parameters=SCHEMA)])
    outcome = _run(run_tool_call(registry, "c1", "strict", raw, _ctx()))
    assert ran == []
    assert outcome.is_error and outcome.error == {"name": "InvalidArgumentsError", "code": "INVALID_ARGUMENTS"}
    assert outcome.text_content == f'Error: invalid arguments for tool "strict": {detail}'


def test_run_tool_call__valid_arguments_pass_the_schema() -> None:
    registry = ToolRegistry([_tool("strict", _ok, parameters=SCHEMA)])
    raw = '{"path": "x", "count": 2, "mode": "b", "tags": ["t"]}'
    assert not _run(run_tool_call(registry, "c1", "strict", raw, _ctx())).is_error


def test_run_tool_call__a_raising_body_becomes_an_error_outcome() -> None:
    class DiskOnFire(RuntimeError):
        pass

    async def body(args: Any, ctx: ToolContext) -> ToolOutcome:
        raise DiskOnFire("sector 7 is melting")

    async def silent(args: Any, ctx: ToolContext) -> ToolOutcome:
        raise KeyError

    registry = ToolRegistry([_tool("boom", body), _tool("silent", silent)])
    outcome = _run(run_tool_call(registry, "c1", "boom", "{}", _ctx()))
    assert outcome.is_error and outcome.error == {"name": "DiskOnFire", "code": "TOOL_ERROR"}
    assert outcome.text_content == "Error: DiskOnFire: sector 7 is melting"
    assert _run(run_tool_call(registry, "c1", "silent", "{}", _ctx())).text_content == "Error: KeyError"


def test_run_tool_call__malformed_outcomes_are_caught_before_they_reach_the_log() -> None:
    async def not_an_outcome(args: Any, ctx: ToolContext) -> Any:
        return "just a string"

    async def bad_meta(args: Any, ctx: ToolContext) -> ToolOutcome:
        return ToolOutcome.text("x", meta={"when": float("inf")})

    async def bad_context(args: Any, ctx: ToolContext) -> ToolOutcome:
        return ToolOutcome.text("x", additional_contexts=[al.assistant_message("hi", provider="p", model="m")])

    registry = ToolRegistry([_tool("a", not_an_outcome), _tool("b", bad_meta), _tool("c", bad_context)])
    for name in ("a", "b", "c"):
        outcome = _run(run_tool_call(registry, "c1", name, "{}", _ctx()))
        assert outcome.is_error and outcome.error is not None and outcome.error["code"] == "INVALID_TOOL_OUTCOME"


def test_run_tool_call__cancelled_before_start_is_the_canonical_aborted_result() -> None:
    ran: list[str] = []

    async def body(args: Any, ctx: ToolContext) -> ToolOutcome:
        ran.append("ran")
        return ToolOutcome.text("ran")

    async def scenario() -> ToolOutcome:
        cancel = asyncio.Event()
        cancel.set()
        return await run_tool_call(ToolRegistry([_tool("t", body)]), "c1", "t", "{}", _ctx(cancel))

    outcome = _run(scenario())
    assert ran == []
    canonical = aborted_before_dispatch_result()
    assert outcome == aborted_before_dispatch_outcome()
    assert list(outcome.content) == canonical["content"] and outcome.is_error
    assert outcome.error == {"name": "AbortError", "code": TOOL_ABORTED_BEFORE_DISPATCH}
    data = outcome.result_data("c1", turn=1, step=1)
    assert data["error"] == {"name": "AbortError", "code": "ABORTED_BEFORE_DISPATCH"}
    assert data["message"]["content"][0]["content"] == [
        {"type": "text", "text": "Error: tool call aborted before dispatch"}
    ]
    assert data["message"]["content"][0]["isError"] is True


def test_outcome__result_data_has_the_wire_shape() -> None:
    ok = ToolOutcome.text("hello", meta={"k": [1]})
    data = ok.result_data("c9", turn=2, step=3, id="m1")
    assert data == {
        "turn": 2,
        "step": 3,
        "message": al.tool_result_message("c9", "hello", id="m1"),
        "meta": {"k": [1]},
    }
    failed = ToolOutcome.failure("nope", code="X_CODE", name="XError").result_data("c9", turn=2, step=3, id="m2")
    assert failed["error"] == {"name": "XError", "code": "X_CODE"}
    assert failed["message"] == al.tool_result_message("c9", "Error: nope", is_error=True, id="m2")


def test_batch_concludes_turn__only_successful_results_count() -> None:
    call = ToolCall("c1", "t", "{}")
    done = CallResult(call, ToolOutcome.text("bye", concludes_turn=True), True)
    failed = CallResult(call, ToolOutcome(({"type": "text", "text": "x"},), is_error=True, concludes_turn=True), True)
    plain = CallResult(call, ToolOutcome.text("x"), True)
    assert batch_concludes_turn([plain, done])
    assert not batch_concludes_turn([plain, failed])


# --- scheduler ---------------------------------------------------------------------------------------


def test_schedule__parallel_calls_really_overlap() -> None:
    async def scenario() -> tuple[Harness, list[CallResult]]:
        h = Harness()
        all_in = asyncio.Event()

        async def body(args: Any, ctx: ToolContext) -> ToolOutcome:
            h.active += 1
            h.max_active = max(h.max_active, h.active)
            if h.active == 3:
                all_in.set()
            await all_in.wait()  # deadlocks (guard timeout) unless all three run at once
            return ToolOutcome.text(ctx.call_id)

        registry = ToolRegistry([_tool("p", body, execution="parallel")])
        calls = _calls(("a", "p", "{}"), ("b", "p", "{}"), ("c", "p", "{}"))
        return h, await schedule_calls(calls, registry, h.start, context=_ctx())

    h, results = _run(scenario())
    assert h.max_active == 3
    assert [r.outcome.text_content for r in results] == ["a", "b", "c"]
    assert all(r.started for r in results)


def test_schedule__rolling_pool_never_exceeds_the_limit_and_refills_per_slot() -> None:
    async def scenario() -> Harness:
        h = Harness()
        calls = _calls(*((f"c{i}", "par", '{"hold": true}') for i in range(5)))
        batch = asyncio.create_task(
            schedule_calls(calls, h.registry, h.start, max_parallel=2, context=_ctx(), commit=h.commit)
        )
        await h.entered["c0"].wait()
        await h.entered["c1"].wait()
        await _settle()
        assert "start:c2" not in h.log  # the pool is full
        h.gates["c1"].set()  # free one slot while c0 keeps running
        await h.entered["c2"].wait()
        await _settle()
        assert h.active == 2 and "end:c0" not in h.log  # rolling: c2 started before c0 ended
        assert "start:c3" not in h.log
        assert h.committed == []  # c1 finished, but c0 (earlier in model order) has not
        for cid in ("c0", "c2", "c3", "c4"):
            h.gates[cid].set()
        results = await batch
        assert [r.call.call_id for r in results] == [f"c{i}" for i in range(5)]
        return h

    h = _run(scenario())
    assert h.max_active == 2
    assert [r.call.call_id for r in h.committed] == [f"c{i}" for i in range(5)]


def test_schedule__exclusive_call_is_a_barrier() -> None:
    async def scenario() -> Harness:
        h = Harness()
        calls = _calls(
            ("p0", "par", "{}"),
            ("p1", "par", "{}"),
            ("x2", "exc", "{}"),
            ("p3", "par", '{"after": "p4"}'),  # finishes only once p4 has run: p3 and p4 overlap
            ("p4", "par", '{"hold": true}'),
        )
        batch = asyncio.create_task(schedule_calls(calls, h.registry, h.start, context=_ctx(), commit=h.commit))
        await h.entered["p4"].wait()
        h.gates["p4"].set()
        await batch
        return h

    h = _run(scenario())
    i = h.index
    assert i("end:p0") < i("start:x2") and i("end:p1") < i("start:x2")  # nothing earlier overlaps x2
    assert i("end:x2") < i("start:p3")  # nothing later overlaps x2
    assert i("body:p4") < i("end:p3")  # the pool after the barrier is parallel again
    assert h.max_active == 2
    assert [e for e in h.log if e.startswith("start:")] == [f"start:{c}" for c in ("p0", "p1", "x2", "p3", "p4")]
    assert [r.call.call_id for r in h.committed] == ["p0", "p1", "x2", "p3", "p4"]


def test_schedule__results_and_commits_in_model_order_whatever_finishes_first() -> None:
    async def scenario() -> tuple[Harness, list[CallResult]]:
        h = Harness()
        # a waits for b, b waits for c: they finish c, b, a.
        calls = _calls(("a", "par", '{"after": "b"}'), ("b", "par", '{"after": "c"}'), ("c", "par", '{"hold": true}'))
        batch = asyncio.create_task(schedule_calls(calls, h.registry, h.start, context=_ctx(), commit=h.commit))
        await h.entered["c"].wait()
        h.gates["c"].set()
        return h, await batch

    h, results = _run(scenario())
    assert [e for e in h.log if e.startswith("end:")] == ["end:c", "end:b", "end:a"]
    assert [r.call.call_id for r in results] == ["a", "b", "c"]
    assert [r.outcome.text_content for r in results] == ["done a", "done b", "done c"]
    assert [e for e in h.log if e.startswith("commit:")] == ["commit:a", "commit:b", "commit:c"]
    assert h.committed == results


def test_schedule__start_is_awaited_in_model_order_before_each_body() -> None:
    async def scenario() -> Harness:
        h = Harness()
        calls = _calls(("a", "par", "{}"), ("b", "exc", "{}"), ("c", "par", "{}"), ("d", "par", "{}"), ("e", "x", "{}"))
        await schedule_calls(calls, h.registry, h.start, context=_ctx())
        return h

    h = _run(scenario())
    starts = [e for e in h.log if e.startswith("start:")]
    assert starts == ["start:a", "start:b", "start:c", "start:d", "start:e"]
    for cid in "abcd":
        assert h.index(f"start:{cid}") < h.index(f"body:{cid}")


def test_schedule__unknown_tool_in_a_batch_is_an_error_result_and_a_barrier() -> None:
    async def scenario() -> tuple[Harness, list[CallResult]]:
        h = Harness()
        calls = _calls(("a", "par", "{}"), ("b", "nope", "{}"), ("c", "par", "not json"))
        return h, await schedule_calls(calls, h.registry, h.start, context=_ctx())

    h, results = _run(scenario())
    assert [r.outcome.error["code"] if r.outcome.error else None for r in results] == [
        None,
        "UNKNOWN_TOOL",
        "INVALID_ARGUMENTS",
    ]
    assert h.index("end:a") < h.index("start:b")


def test_schedule__abort_mid_batch_drains_started_and_aborts_the_rest() -> None:
    async def scenario() -> tuple[Harness, list[CallResult]]:
        h = Harness()
        cancel = asyncio.Event()

        async def interrupted(args: Any, ctx: ToolContext) -> ToolOutcome:
            h.log.append(f"body:{ctx.call_id}")
            cancel.set()  # the user presses Ctrl-C while this call runs
            await _settle()
            h.log.append(f"end:{ctx.call_id}")
            return ToolOutcome.text("finished anyway")

        h.registry.register(_tool("slow", interrupted))
        calls = _calls(("x0", "exc", "{}"), ("x1", "slow", "{}"), ("x2", "exc", "{}"), ("p3", "par", "{}"))
        return h, await schedule_calls(calls, h.registry, h.start, context=_ctx(cancel), commit=h.commit)

    h, results = _run(scenario())
    assert [(r.call.call_id, r.started) for r in results] == [("x0", True), ("x1", True), ("x2", False), ("p3", False)]
    assert results[1].outcome.text_content == "finished anyway"
    for r in results[2:]:
        assert r.outcome == aborted_before_dispatch_outcome()
    assert "start:x2" not in h.log and "body:x2" not in h.log and "body:p3" not in h.log
    assert h.committed == results


def test_schedule__abort_while_waiting_for_a_pool_slot() -> None:
    async def scenario() -> tuple[Harness, list[CallResult]]:
        h = Harness()
        cancel = asyncio.Event()
        calls = _calls(("p0", "par", '{"hold": true}'), ("p1", "par", "{}"), ("p2", "par", "{}"))
        batch = asyncio.create_task(schedule_calls(calls, h.registry, h.start, max_parallel=1, context=_ctx(cancel)))
        await h.entered["p0"].wait()
        cancel.set()
        await _settle()
        assert not batch.done()  # p0 is still running: started calls are drained, not dropped
        h.gates["p0"].set()
        return h, await batch

    h, results = _run(scenario())
    assert [r.started for r in results] == [True, False, False]
    assert results[0].outcome.text_content == "done p0"
    assert "start:p1" not in h.log


def test_schedule__cancel_between_start_and_body_is_aborted_before_dispatch() -> None:
    async def scenario() -> tuple[Harness, list[CallResult]]:
        h = Harness()
        cancel = asyncio.Event()

        async def start(call: ToolCall) -> None:
            await h.start(call)
            if call.call_id == "b":
                cancel.set()  # lands after tool/call was appended, before the body

        calls = _calls(("a", "exc", "{}"), ("b", "exc", "{}"), ("c", "exc", "{}"))
        return h, await schedule_calls(calls, h.registry, start, context=_ctx(cancel))

    h, results = _run(scenario())
    assert [r.started for r in results] == [True, True, False]
    assert results[1].outcome == aborted_before_dispatch_outcome()
    assert "body:b" not in h.log


def test_schedule__a_failing_start_stops_dispatch_and_fabricates_nothing() -> None:
    class AppendFailed(RuntimeError):
        pass

    async def scenario() -> Harness:
        h = Harness()

        async def start(call: ToolCall) -> None:
            if call.call_id == "p1":
                raise AppendFailed("log is read-only")
            await h.start(call)

        calls = _calls(("p0", "par", '{"hold": true}'), ("p1", "par", "{}"), ("p2", "par", "{}"))
        batch = asyncio.create_task(schedule_calls(calls, h.registry, start, context=_ctx(), commit=h.commit))
        await h.entered["p0"].wait()
        await _settle()
        assert not batch.done()  # waits for the started call before raising
        h.gates["p0"].set()
        with pytest.raises(AppendFailed):
            await batch
        return h

    h = _run(scenario())
    assert "end:p0" in h.log and "body:p2" not in h.log
    assert [r.call.call_id for r in h.committed] == ["p0"]  # p0's real result only; nothing for p1, p2


def test_schedule__a_failing_commit_is_not_retried() -> None:
    class DiskFull(OSError):
        pass

    async def scenario() -> Harness:
        h = Harness()

        async def commit(result: CallResult) -> None:
            h.committed.append(result)
            raise DiskFull("no space")

        calls = _calls(("a", "exc", "{}"), ("b", "exc", "{}"))
        with pytest.raises(DiskFull):
            await schedule_calls(calls, h.registry, h.start, context=_ctx(), commit=commit)
        return h

    h = _run(scenario())
    assert [r.call.call_id for r in h.committed] == ["a"] and "start:b" not in h.log


def test_schedule__cancelling_the_scheduler_cancels_running_calls() -> None:
    async def scenario() -> Harness:
        h = Harness()
        calls = _calls(("p0", "par", '{"hold": true}'), ("p1", "par", '{"hold": true}'))
        batch = asyncio.create_task(schedule_calls(calls, h.registry, h.start, context=_ctx()))
        await h.entered["p1"].wait()
        batch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await batch
        return h

    h = _run(scenario())
    assert h.active == 0 and {"end:p0", "end:p1"} <= set(h.log)


def test_schedule__refuses_a_nonpositive_pool() -> None:
    async def noop(call: ToolCall) -> None:
        return None

    with pytest.raises(ToolSchedulerError):
        _run(schedule_calls([], ToolRegistry(), noop, max_parallel=0, context=_ctx()))
    assert _run(schedule_calls([], ToolRegistry(), noop, context=_ctx())) == []


def test_schedule__drives_a_real_session_log() -> None:
    """How the loop will use it: tool/call at start, tool/result at commit; the invariants hold."""

    async def scenario() -> al.Session:
        h = Harness()
        store = al.SessionStore()
        al.SessionInvariants(store).install()
        session = store.create("s1")
        session.append("turn/start", {"turn": 1})
        session.append("step/start", {"turn": 1, "step": 1})
        calls = _calls(("c1", "par", '{"after": "c2"}'), ("c2", "par", '{"hold": true}'), ("c3", "exc", "{}"))
        blocks = [al.tool_call_block(c.call_id, c.name, c.arguments) for c in calls]
        msg = al.assistant_message(blocks, provider="p", model="m")
        session.append("assistant/message", {"turn": 1, "step": 1, "message": msg}, {"surfaceOp": "append"})
        call_seqs: dict[str, int] = {}

        async def start(call: ToolCall) -> None:
            data = {"turn": 1, "step": 1, "callId": call.call_id, "name": call.name, "arguments": call.arguments}
            call_seqs[call.call_id] = session.append("tool/call", data).seq

        async def commit(result: CallResult) -> None:
            if not result.started:
                await start(result.call)
            data = result.outcome.result_data(result.call.call_id, turn=1, step=1)
            intent = {"surfaceOp": "append", "sourceEventSeqs": [call_seqs[result.call.call_id]]}
            session.append("tool/result", data, intent)

        batch = asyncio.create_task(schedule_calls(calls, h.registry, start, context=_ctx(), commit=commit))
        await h.entered["c2"].wait()
        h.gates["c2"].set()
        await batch
        session.append("step/end", {"turn": 1, "step": 1})
        session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        return session

    session = _run(scenario())

    def tool_event(e: al.Event) -> str:
        call_id = e.data["callId"] if e.type == "tool/call" else e.data["message"]["source"]["callId"]
        return f"{e.type}:{call_id}"

    # c2 finished before c1, yet c1's result is committed first; c3 (exclusive) starts after both.
    assert [tool_event(e) for e in session.events if e.type.startswith("tool/")] == [
        "tool/call:c1",
        "tool/call:c2",
        "tool/result:c1",
        "tool/result:c2",
        "tool/call:c3",
        "tool/result:c3",
    ]
    assert al.interrupted_turn_closers(session.events) == []
    assert len(session.derive_messages()) == 4
