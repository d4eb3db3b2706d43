"""The recorder writes what the agent loop writes (compared event by event against the real ``Agent``),
closes every turn on every exit path, refuses misuse before writing, and leaves sessions that replay,
``at(seq)`` and ``fork`` understand."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentlog as al
from agentlog.agent.loop import Agent, AgentOptions
from agentlog.agent.tools import FunctionTool, ToolContext, ToolOutcome, ToolRegistry, aborted_before_dispatch_outcome
from agentlog.errors import LlmError, RecorderStateError
from agentlog.interop.recorder import Recorder
from agentlog.kernel.invariants import check_tool_pairing
from agentlog.kernel.repair import interrupted_tool_result_data
from agentlog.llm.openai_compat import OpenAICompatibleProvider, serialize_messages
from agentlog.llm.replay import ReplayProvider
from agentlog.testing.demo_server import DemoModelServer, Reply, Usage
from agentlog.testing.demo_server import ToolCall as ScriptedCall
from agentlog.testing.provider import ScriptedProvider, failure_reply, text_reply, tool_call_reply

ECHO_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
SYSTEM = "You are terse."


def _echo_registry() -> ToolRegistry:
    async def body(args: Any, ctx: ToolContext) -> ToolOutcome:
        return ToolOutcome.text(f"echo: {args['text']}")

    registry = ToolRegistry()
    registry.register(FunctionTool("echo", "Echo the text back.", ECHO_SCHEMA, body))
    return registry


def _tools() -> list[dict[str, Any]]:
    return [al.thaw(schema) for schema in _echo_registry().schemas()]


def _store() -> al.SessionStore:
    store = al.SessionStore()
    al.SessionInvariants(store).install()  # every turn/step/tool relation is checked at its append
    return store


def _normalized(events: Sequence[Any]) -> list[dict[str, Any]]:
    """Events modulo what differs between two runs: times, message ids, and the agent's inbox events
    (the recorder has no inbox); seqs are renumbered over what is kept so references still line up."""
    kept = [al.thaw(e) for e in events if not e["type"].startswith("agent/inbox/")]
    renumber = {e["seq"]: index for index, e in enumerate(kept)}
    out = []
    for event in kept:
        event["seq"] = renumber[event["seq"]]
        event.pop("time")
        if "sourceEventSeqs" in event:
            event["sourceEventSeqs"] = [renumber[s] for s in event["sourceEventSeqs"]]
        data = event["data"]
        if isinstance(data, dict):
            message = data.get("message") if "message" in data else data if "role" in data else None
            if isinstance(message, dict) and "id" in message:
                message["id"] = "<id>"
        out.append(event)
    return out


def _balanced(session: Any) -> None:
    """The transcript a crash-free reader expects: every turn and step closed, every call answered."""
    events = session.events
    assert al.interrupted_turn_closers(events) == []
    check_tool_pairing(session.derive_messages(), session.id, events)
    starts = [e["data"]["turn"] for e in events if e["type"] == "turn/start"]
    ends = [e["data"]["turn"] for e in events if e["type"] == "turn/end"]
    assert starts == ends
    assert sum(e["type"] == "step/start" for e in events) == sum(e["type"] == "step/end" for e in events)


def _run_agent(provider: Any, prompts: list[str], **options: Any) -> al.Session:
    store = _store()
    session = store.create("agent")

    async def main() -> None:
        agent = Agent(
            session,
            provider,
            AgentOptions(provider="p", model="m", system=SYSTEM, **options),
            tools=_echo_registry(),
        )
        for prompt in prompts:
            agent.followup(prompt)
            outcomes = await agent.run()
            assert all(o.reason["kind"] == "completed" for o in outcomes)

    asyncio.run(main())
    return session


# --- equivalence with the agent loop ----------------------------------------------------------------------


def test_recorder__whole_replies_write_exactly_what_the_agent_writes_for_the_same_conversation() -> None:
    usage1 = al.token_usage(12, 5)
    usage2 = al.token_usage(20, 3, cache_read_tokens=7)
    script = [
        tool_call_reply(
            ("c1", "echo", '{"text": "a"}'), ("c2", "echo", '{"text": "b"}'), text="Echoing.", usage=usage1
        ),
        text_reply("Done: a and b.", usage=usage2),
        text_reply("Bye."),
    ]
    agent_session = _run_agent(ScriptedProvider(script), ["echo a and b", "thanks"])

    store = _store()
    session = store.create("recorded")
    rec = Recorder(session, provider="p", model="m", system=SYSTEM, tools=_tools())
    with rec.turn("echo a and b") as t:
        t.assistant(
            "Echoing.", tool_calls=[("c1", "echo", '{"text": "a"}'), ("c2", "echo", {"text": "b"})], usage=usage1
        )
        for call_id in ("c1", "c2"):
            with t.tool(call_id) as call:
                call.result(f"echo: {call.args['text']}")
        t.assistant("Done: a and b.", usage=usage2)
    assert t.outcome == {"kind": "completed"}
    with rec.turn("thanks") as t2:
        t2.assistant("Bye.")

    assert _normalized(session.events) == _normalized(agent_session.events)
    _balanced(session)


def _chat(client: openai.OpenAI, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
    return client.chat.completions.create(
        model="m",
        messages=[{"role": "system", "content": SYSTEM}, *messages],  # type: ignore[list-item]
        tools=[{"type": "function", "function": tool} for tool in tools],  # type: ignore[misc]
        stream=True,
        stream_options={"include_usage": True},
    )


def test_recorder__an_openai_sdk_stream_fed_chunk_by_chunk_matches_the_agent_on_the_same_server() -> None:
    usage = Usage(prompt_tokens=30, completion_tokens=9, cached_tokens=4, reasoning_tokens=2)
    script = [
        Reply(
            reasoning="The user wants an echo.",
            text="Calling echo now.",
            tool_calls=[ScriptedCall("echo", {"text": "hello world"}, id="call-A")],
            usage=usage,
            chunk_chars=5,
        ),
        Reply(text="It said: echo: hello world.", usage=usage, chunk_chars=4),
    ]
    with DemoModelServer(script) as server:
        provider = OpenAICompatibleProvider(base_url=server.base_url, api_key="k", model="m")
        agent_session = _run_agent(provider, ["echo hello world"])
        agent_bodies = [r.body for r in server.requests]

    with DemoModelServer(script) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k")
        store = _store()
        session = store.create("recorded")
        tools = _tools()
        rec = Recorder(session, provider="p", model="m", system=SYSTEM, tools=tools)
        with rec.turn("echo hello world") as t:
            while True:  # the user's own loop: call the model, feed its stream, run the tools
                with t.stream() as s:
                    for chunk in _chat(client, serialize_messages(session.derive_messages()), tools):
                        s.openai(chunk)
                if not t.open_calls:
                    break
                for call_id in t.open_calls:
                    with t.tool(call_id) as call:
                        call.result(f"echo: {call.args['text']}")
        own_bodies = [r.body for r in server.requests]

    assert _normalized(session.events) == _normalized(agent_session.events)
    # and what the user's loop sent is what the agent sent, message for message
    assert [b["messages"] for b in own_bodies] == [b["messages"] for b in agent_bodies]
    _balanced(session)


def test_recorder__streamed_deltas_assemble_into_the_message_the_loop_would_store() -> None:
    store = _store()
    session = store.create("s")
    rec = Recorder(session, provider="p", model="m")
    with rec.turn("go") as t:
        with t.stream() as s:
            s.reasoning("think")
            s.reasoning("ing")
            s.text("Hel")
            s.text("lo")
            s.tool_call("k1", "echo", '{"te')
            s.tool_call("k1", arguments='xt": "x"}')
            s.usage(al.token_usage(3, 4))
        assert s.message["content"] == [
            {"type": "reasoning", "text": "thinking"},
            {"type": "text", "text": "Hello"},
            {"type": "tool-call", "id": "k1", "name": "echo", "arguments": '{"text": "x"}'},
        ]
        t.tool_result("k1", "x")
        t.assistant("ok")
    chunks = [e["data"]["chunk"] for e in session.events if e["type"] == "assistant/chunk"]
    assert chunks[-1] == {"type": "finish", "reason": {"kind": "stop"}}
    first_call = chunks[: next(i for i, c in enumerate(chunks) if c["type"] == "finish") + 1]
    assert first_call[-2:] == [
        {"type": "usage", "usage": {"inputTokens": 3, "outputTokens": 4}},
        {"type": "finish", "reason": {"kind": "tool-calls"}},
    ]
    assert al.thaw(session.events[-1]["data"]) == {"turn": 1, "reason": {"kind": "completed"}}
    _balanced(session)


# --- every exit path closes what it opened ------------------------------------------------------------------


def _recorded(body: Callable[[Any], None], *, prompt: str = "go") -> tuple[al.Session, Any, BaseException | None]:
    store = _store()
    session = store.create("s")
    rec = Recorder(session, provider="p", model="m", tools=_tools())
    raised: BaseException | None = None
    turn = rec.turn(prompt)
    try:
        with turn as t:
            body(t)
    except BaseException as err:
        raised = err
    _balanced(session)
    return session, turn, raised


def _two_calls(t: Any) -> None:
    t.assistant("two", tool_calls=[("c1", "echo", '{"text": "1"}'), ("c2", "echo", '{"text": "2"}')])


def test_recorder__an_interrupt_inside_a_tool_body_answers_it_outcome_unknown_and_the_rest_not_dispatched() -> None:
    def body(t: Any) -> None:
        _two_calls(t)
        with t.tool("c1"):
            raise KeyboardInterrupt

    session, turn, raised = _recorded(body)
    assert isinstance(raised, KeyboardInterrupt)
    assert turn.outcome == {"kind": "aborted", "reason": {"kind": "user"}}
    tail = [al.thaw(e) for e in session.events[-6:]]
    assert [e["type"] for e in tail] == ["tool/call", "tool/result", "tool/call", "tool/result", "step/end", "turn/end"]
    unknown = interrupted_tool_result_data(
        "c1", started=True, turn=1, step=1, message_id=tail[1]["data"]["message"]["id"]
    )
    assert tail[1]["data"] == al.thaw(unknown) and tail[1]["sourceEventSeqs"] == [tail[0]["seq"]]
    # the call never started gets the agent's canonical ABORTED_BEFORE_DISPATCH result, word for word
    expected = aborted_before_dispatch_outcome().result_data("c2", turn=1, step=1, id=tail[3]["data"]["message"]["id"])
    assert tail[3]["data"] == al.thaw(expected)
    assert tail[2]["data"] == {"turn": 1, "step": 1, "callId": "c2", "name": "echo", "arguments": '{"text": "2"}'}


def test_recorder__a_raising_tool_body_is_recorded_as_the_scheduler_records_it_and_the_turn_ends_in_error() -> None:
    def body(t: Any) -> None:
        _two_calls(t)
        with t.tool("c1"):
            raise ValueError("disk full")

    session, turn, raised = _recorded(body)
    assert isinstance(raised, ValueError)
    result = next(e for e in session.events if e["type"] == "tool/result")
    assert al.thaw(result["data"]["error"]) == {"name": "ValueError", "code": "TOOL_ERROR"}
    assert result["data"]["message"]["content"][0]["content"] == [
        {"type": "text", "text": "Error: ValueError: disk full"}
    ]
    assert turn.outcome == {"kind": "error", "error": {"message": "ValueError: disk full", "code": "UNKNOWN"}}


def test_recorder__a_model_failure_ends_the_turn_with_the_failure_as_the_loop_records_it() -> None:
    def body(t: Any) -> None:
        raise LlmError("slow down", code="RATE_LIMIT", status=429)

    session, turn, raised = _recorded(body)
    assert isinstance(raised, LlmError)
    assert turn.outcome == {"kind": "error", "error": al.thaw(raised.failure)}
    assert [e["type"] for e in session.events][-2:] == ["step/end", "turn/end"]


def test_recorder__an_interrupted_stream_keeps_its_text_as_an_interrupted_message() -> None:
    def body(t: Any) -> None:
        with t.stream() as s:
            s.text("partial answ")
            s.tool_call("c9", "echo", '{"te')
            raise KeyboardInterrupt

    session, turn, _ = _recorded(body)
    message = next(e for e in session.events if e["type"] == "assistant/message")
    assert message["data"]["interrupted"] is True
    assert al.thaw(message["data"]["message"]["content"]) == [{"type": "text", "text": "partial answ"}]
    assert not any(e["type"] == "tool/call" for e in session.events)  # the cut-off call was never requested
    assert turn.outcome["kind"] == "aborted"


def test_recorder__asyncio_cancellation_of_the_task_ends_the_turn_aborted() -> None:
    store = _store()
    session = store.create("s")
    rec = Recorder(session, provider="p", model="m", tools=_tools())
    started = asyncio.Event()

    async def user_loop() -> None:
        with rec.turn("go") as t:
            _two_calls(t)
            t.tool_call("c1")
            started.set()
            await asyncio.sleep(60)  # the tool body, cancelled

    async def main() -> None:
        task = asyncio.create_task(user_loop())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    _balanced(session)
    ends = [al.thaw(e["data"]) for e in session.events if e["type"] == "turn/end"]
    assert ends == [{"turn": 1, "reason": {"kind": "aborted", "reason": {"kind": "user"}}}]
    codes = [e["data"]["error"]["code"] for e in session.events if e["type"] == "tool/result"]
    assert codes == ["TOOL_OUTCOME_UNKNOWN", "ABORTED_BEFORE_DISPATCH"]


def test_recorder__abort_ends_the_turn_at_once_with_its_cause_and_the_block_writes_nothing_more() -> None:
    def body(t: Any) -> None:
        _two_calls(t)
        t.tool_result("c1", "fine")
        t.abort({"kind": "user", "note": "stop"})
        with pytest.raises(RecorderStateError, match="already ended"):
            t.tool_result("c2", "late")

    session, turn, raised = _recorded(body)
    assert raised is None
    assert turn.outcome == {"kind": "aborted", "reason": {"kind": "user", "note": "stop"}}
    assert [
        e["data"]["error"]["code"] for e in session.events if e["type"] == "tool/result" and "error" in e["data"]
    ] == ["ABORTED_BEFORE_DISPATCH"]


def test_recorder__leaving_a_turn_with_unanswered_calls_closes_it_and_raises() -> None:
    def body(t: Any) -> None:
        _two_calls(t)
        t.tool_result("c1", "one")

    _, turn, raised = _recorded(body)
    assert isinstance(raised, RecorderStateError) and "c2" in str(raised)
    assert turn.outcome["kind"] == "error" and turn.outcome["error"]["code"] == "RECORDER_STATE"


def test_recorder__max_tokens_drops_the_cut_off_calls_and_ends_the_turn_with_max_tokens() -> None:
    def body(t: Any) -> None:
        message = t.assistant("cut", tool_calls=[("c1", "echo", '{"te')], finish="max-tokens")
        assert [b["type"] for b in message["content"]] == ["text"]
        assert t.open_calls == []

    _, turn, raised = _recorded(body)
    assert raised is None and turn.outcome == {"kind": "max-tokens"}


def test_recorder__steering_input_opens_the_next_step_and_turn_numbers_continue() -> None:
    store = _store()
    session = store.create("s")
    rec = Recorder(session, provider="p", model="m")
    with rec.turn("one") as t:
        t.assistant("first")
        t.user("actually, more")
        assert t.step == 2
        t.assistant("second")
    rec2 = Recorder(session, provider="p", model="m2")  # a new loop instance on the same session
    with rec2.turn("two") as t2:
        t2.assistant("third")
    assert t2.number == 2
    headers = [al.thaw(e["data"]) for e in session.events if e["type"] == "request/header"]
    assert [h["reason"] for h in headers] == ["initial", "resume"]
    assert headers[1]["header"]["config"] == {"provider": "p", "model": "m2"}
    _balanced(session)


# --- misuse is refused before anything is written -----------------------------------------------------------

MISUSES: list[tuple[str, Callable[[Any], Any], str]] = [
    ("result for an unknown call", lambda t: t.tool_result("nope", "x"), "did not ask"),
    ("second result", lambda t: (t.tool_result("c1", "x"), t.tool_result("c1", "y")), "already has its result"),
    ("reply with open calls", lambda t: t.assistant("again"), "without a result"),
    ("stream with open calls", lambda t: t.stream().__enter__(), "without a result"),
    ("started twice", lambda t: (t.tool_call("c1"), t.tool_call("c1")), "already started"),
    ("empty reply", lambda t: (t.tool_result("c1", "1"), t.tool_result("c2", "2"), t.assistant()), "needs text"),
    (
        "bad call shape",
        lambda t: (t.tool_result("c1", "1"), t.tool_result("c2", "2"), t.assistant(tool_calls=[3])),
        "tool_calls",
    ),
    (
        "duplicate call id",
        lambda t: (t.tool_result("c1", "1"), t.tool_result("c2", "2"), t.assistant(tool_calls=[("c1", "echo", "{}")])),
        "twice",
    ),
    ("bad error", lambda t: t.tool_result("c1", "x", error=42), "error must be"),
    (
        "bad content block",
        lambda t: (
            t.tool_result("c1", "1"),
            t.tool_result("c2", "2"),
            t.assistant(content=[{"type": "tool-call", "id": "c3", "arguments": "{}"}]),
        ),
        "string id and name",
    ),
]


@pytest.mark.parametrize(("label", "misuse", "match"), MISUSES, ids=[m[0] for m in MISUSES])
def test_recorder__misuse_raises_recorder_state_error_and_appends_nothing(
    label: str, misuse: Callable[[Any], Any], match: str
) -> None:
    store = _store()
    session = store.create("s")
    rec = Recorder(session, provider="p", model="m")
    with rec.turn("go") as t:
        _two_calls(t)
        before = len(session.events)
        with pytest.raises(RecorderStateError, match=match):
            misuse(t)
        # the refused call wrote nothing; what succeeded before it in the same lambda may have
        if label in ("result for an unknown call", "reply with open calls", "stream with open calls", "bad error"):
            assert len(session.events) == before
        if label == "bad content block":
            assert len(session.events) == before + 4  # the two results (and their tool/call) only
        for call_id in t.open_calls:
            t.tool_result(call_id, "done")
    _balanced(session)


def test_recorder__turn_inside_a_turn_and_writes_after_the_end_are_refused() -> None:
    store = _store()
    session = store.create("s")
    rec = Recorder(session, provider="p", model="m")
    with rec.turn("go") as t:
        with pytest.raises(RecorderStateError, match="still open"):
            rec.turn("nested")
        t.assistant("hi")
    count = len(session.events)
    with pytest.raises(RecorderStateError, match="already ended"):
        t.assistant("late")
    with pytest.raises(RecorderStateError, match="entered only once"):
        t.__enter__()
    with pytest.raises(RecorderStateError, match="user message"):
        rec.turn({"role": "assistant", "content": []})
    assert len(session.events) == count


def test_recorder__a_session_ending_inside_an_open_turn_is_refused_until_it_is_repaired() -> None:
    session = al.Session.create("raw")
    session.append(al.TURN_START, {"turn": 1})
    with pytest.raises(RecorderStateError, match=r"coordinator\.resume"):
        Recorder(session, provider="p", model="m").turn("go").__enter__()
    assert len(session.events) == 1


# --- replay, at(seq) and fork on recorded sessions ---------------------------------------------------------


def _record_two_turns(session: al.Session) -> None:
    rec = Recorder(session, provider="p", model="m", system=SYSTEM, tools=_tools())
    with rec.turn("echo a") as t:
        t.assistant("Echoing.", tool_calls=[("c1", "echo", '{"text": "a"}')], usage=al.token_usage(5, 2))
        t.tool_result("c1", "echo: a")
        t.assistant("It said a.")
    with rec.turn("and b?") as t:
        t.assistant(reasoning="b next", text="Echoing b.", tool_calls=[("c2", "echo", '{"text": "b"}')])
        with t.tool("c2") as call:
            call.result(f"echo: {call.args['text']}")
        t.assistant("It said b.")


def test_recorder__a_recorded_session_replays_through_the_real_agent_without_a_model() -> None:
    store = _store()
    recorded = store.create("recorded")
    _record_two_turns(recorded)
    replay = ReplayProvider(recorded)
    assert len(replay.calls) == 4
    agent_session = _run_agent(replay, ["echo a", "and b?"])  # every request checked against the recording
    assert replay.remaining == 0
    assert _normalized(agent_session.events) == _normalized(recorded.events)


def test_recorder__at_every_seq_derives_paired_messages_and_a_fork_at_a_turn_end_continues() -> None:
    store = _store()
    session = store.create("recorded")
    _record_two_turns(session)
    first_end = next(e["seq"] for e in session.events if e["type"] == "turn/end")
    for event in session.events:
        view = session.at(event["seq"])
        messages = view.derive_messages()
        if not al.interrupted_turn_closers(view.events):
            check_tool_pairing(messages)
    assert [m["role"] for m in session.at(first_end).derive_messages()] == ["user", "assistant", "user", "assistant"]
    child = store.fork(session, first_end, "child")
    rec = Recorder(child, provider="p", model="m", system=SYSTEM, tools=_tools())
    with rec.turn("something else") as t:
        t.assistant("Sure.")
    assert t.number == 2
    _balanced(child)
    assert [m["content"][0].get("text") for m in child.derive_messages()][-2:] == ["something else", "Sure."]


# --- property: any conversation, cut by any exception anywhere, leaves a balanced log ---------------------

_steps = st.lists(
    st.tuples(
        st.text(max_size=6),
        st.integers(min_value=0, max_value=3),  # tool calls in this reply
        st.booleans(),  # streamed
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=_steps,
    cut=st.one_of(st.none(), st.integers(min_value=0, max_value=40)),
    kind=st.sampled_from(["exc", "kbd", "abort"]),
)
def test_recorder__property_any_conversation_cut_anywhere_leaves_a_balanced_log(
    steps: list[tuple[str, int, bool]], cut: int | None, kind: str
) -> None:
    store = _store()
    session = store.create("p")
    rec = Recorder(session, provider="p", model="m", flush=False)
    ops = 0

    class Cut(Exception):
        pass

    def tick(t: Any) -> None:
        nonlocal ops
        ops += 1
        if cut is not None and ops == cut:
            if kind == "abort":
                t.abort()
                raise Cut
            raise KeyboardInterrupt if kind == "kbd" else Cut

    turn = rec.turn("start")
    try:
        with turn as t:
            for number, (text, calls, streamed) in enumerate(steps):
                ids = [f"s{number}-c{i}" for i in range(calls)]
                tick(t)
                if streamed:
                    with t.stream() as s:
                        s.text(text or "-")
                        tick(t)
                        for call_id in ids:
                            s.tool_call(call_id, "echo", json.dumps({"text": text}))
                else:
                    t.assistant(text or "-", tool_calls=[(c, "echo", "{}") for c in ids])
                for call_id in ids:
                    tick(t)
                    t.tool_call(call_id)
                    tick(t)
                    t.tool_result(call_id, "r")
    except (Cut, KeyboardInterrupt):
        pass
    _balanced(session)
    assert turn.closed and turn.outcome is not None
    if cut is None or cut > ops:
        assert turn.outcome == {"kind": "completed"}


def test_recorder__the_docs_example_path(tmp_path: Path) -> None:
    """A plain-store user on a real JSONL store: record, reload in a fresh store, continue."""
    from agentlog.persistence.coordinator import PersistenceCoordinator
    from agentlog.persistence.jsonl.backend import JsonlBackend

    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(tmp_path)))
    session = store.create("mine")
    _record_two_turns(session)
    coordinator.close()
    store2 = al.SessionStore()
    coordinator2 = PersistenceCoordinator(store2, JsonlBackend(str(tmp_path)))
    try:
        resumed = coordinator2.resume("mine")
        count = len(session.events)
        assert _normalized(resumed.events)[:count] == _normalized(session.events)
        assert [e["type"] for e in resumed.events[count:]] == ["session/end-seed"]  # the resume marker only
        with Recorder(resumed, provider="p", model="m").turn("third") as t:
            t.assistant("ok")
        assert t.number == 3
        _balanced(resumed)
    finally:
        coordinator2.close()


def test_recorder__a_failed_model_call_caught_inside_the_turn_is_retried_in_the_same_step() -> None:
    store = _store()
    session = store.create("s")
    rec = Recorder(session, provider="p", model="m")
    failure = {"message": "overloaded", "code": "SERVER"}
    with rec.turn("hi") as t:
        with pytest.raises(LlmError) as caught, t.stream() as s:
            s.chunk({"type": "finish", "reason": {"kind": "error", "failure": failure}})
        assert caught.value.code == "SERVER"
        with t.stream() as s:
            s.text("ok")
        assert t.step == 1
    assert t.outcome == {"kind": "completed"}
    assert [c.complete for c in ReplayProvider(session).calls] == [True, True]  # both attempts replay
    _balanced(session)


def test_recorder__a_turn_refused_on_entry_or_never_entered_does_not_block_the_next_one() -> None:
    session = al.Session.create("raw")
    session.append(al.TURN_START, {"turn": 1})
    rec = Recorder(session, provider="p", model="m")
    with pytest.raises(RecorderStateError, match="open turn"):
        rec.turn("go").__enter__()
    session.append(al.TURN_END, {"turn": 1, "reason": {"kind": "completed"}})  # repaired by hand
    rec.turn("never entered")
    first, second = rec.turn("a"), rec.turn("b")
    with first as t:
        with pytest.raises(RecorderStateError, match="still open"):
            second.__enter__()
        t.assistant("hi")
    assert t.number == 2
    _balanced(session)


def _agent_outcome_session(script: list[Any], prompt: str) -> tuple[al.Session, Any]:
    store = _store()
    session = store.create("agent")

    async def main() -> Any:
        agent = Agent(session, ScriptedProvider(script), AgentOptions(provider="p", model="m", system=SYSTEM))
        agent.followup(prompt)
        return await agent.run()

    outcomes = asyncio.run(main())
    return session, outcomes[0].reason


def test_recorder__a_max_tokens_reply_matches_the_agent_event_for_event() -> None:
    agent_session, reason = _agent_outcome_session([text_reply("cut sh", finish="max-tokens")], "long please")
    assert reason == {"kind": "max-tokens"}
    session = _store().create("recorded")
    with Recorder(session, provider="p", model="m", system=SYSTEM).turn("long please") as t:
        t.assistant("cut sh", finish="max-tokens")
    assert t.outcome == reason
    assert _normalized(session.events) == _normalized(agent_session.events)


def test_recorder__a_failed_model_call_streamed_raw_matches_the_agent_event_for_event() -> None:
    agent_session, reason = _agent_outcome_session([failure_reply("AUTH", "bad key")], "hi")
    assert reason["kind"] == "error" and reason["error"]["code"] == "AUTH"
    session = _store().create("recorded")
    with pytest.raises(LlmError), Recorder(session, provider="p", model="m", system=SYSTEM).turn("hi") as t:
        with t.stream() as s:
            for chunk in failure_reply("AUTH", "bad key"):  # the provider's chunks, logged verbatim
                s.chunk(chunk)
    assert t.outcome == reason
    assert _normalized(session.events) == _normalized(agent_session.events)
