"""``Agent.stream``: the typed updates are the log's events, in log order, however the turn ends.

Every test compares what the stream yielded with :func:`update_from_event` over the events the session
recorded during the run (and, for the durable case, with the log reloaded from disk by a fresh
coordinator), so "the stream shows what the log says" is checked, not assumed.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentlog as al
from agentlog.agent import (
    Agent,
    AgentError,
    AgentOptions,
    AgentUpdate,
    AssistantMessage,
    ReasoningDelta,
    TextDelta,
    ToolCallStarted,
    ToolContext,
    ToolRegistry,
    ToolResult,
    TurnEnded,
    TurnStarted,
    tool,
    update_from_event,
)
from agentlog.errors import LlmError, StepLimitError
from agentlog.kernel.events import TURN_END
from agentlog.llm.openai_compat import OpenAICompatibleProvider
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing import ScriptedProvider, failure_reply, text_reply, tool_call_reply
from agentlog.testing.demo_server import DemoModelServer, ErrorReply, Reply
from agentlog.testing.demo_server import ToolCall as ScriptedCall


@tool  # exclusive (the default): each call's result is logged before the next call starts
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _logged(session: al.Session, after: int) -> list[AgentUpdate]:
    """The updates the log records from seq ``after`` on (what a replay of the stored session shows)."""
    return [u for e in session.events if e["seq"] >= after and (u := update_from_event(e)) is not None]


async def _collect(agent: Agent, prompt: str | None, **kw: Any) -> tuple[list[AgentUpdate], BaseException | None]:
    updates: list[AgentUpdate] = []
    try:
        async for update in agent.stream(prompt, **kw):
            updates.append(update)
    except Exception as err:
        return updates, err
    return updates, None


def _scripted_agent(script: list[Any], **kw: Any) -> tuple[al.Session, Agent]:
    store = al.SessionStore()
    al.SessionInvariants(store).install()
    session = store.create("s")
    options = AgentOptions(provider="scripted", model="m", max_steps=kw.pop("max_steps", 50))
    agent = Agent(session, ScriptedProvider(script), options, tools=kw.pop("tools", ToolRegistry([add])), **kw)
    return session, agent


def _kinds(updates: list[AgentUpdate]) -> list[str]:
    out: list[str] = []
    for update in updates:
        if not out or out[-1] != update.kind or update.kind not in ("text-delta", "reasoning-delta"):
            out.append(update.kind)
    return out


def test_stream__yields_exactly_the_logged_updates_across_tool_steps_over_http(tmp_path: Path) -> None:
    script = [
        Reply(
            reasoning="The user wants a sum.",
            text="Adding.",
            tool_calls=[ScriptedCall("add", {"a": 1, "b": 2}, id="c1"), ScriptedCall("add", {"a": "x"}, id="c2")],
            chunk_chars=4,
        ),
        Reply(text="The sum is 3; the second call was malformed.", chunk_chars=6),
    ]
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(tmp_path / "store")))

    async def main() -> tuple[list[AgentUpdate], BaseException | None, int]:
        with DemoModelServer(script) as server:
            provider = OpenAICompatibleProvider(base_url=server.base_url, api_key="t", model="demo-model")
            session = store.create("http")
            agent = Agent(
                session, provider, AgentOptions(provider="deepseek", model="demo-model"), tools=ToolRegistry([add])
            )
            start = len(session.events)
            updates, err = await _collect(agent, "add 1 and 2, then try a bad call")
            await agent.aflush()
            return updates, err, start

    updates, err, start = asyncio.run(main())
    session = store.get("http")
    assert err is None and session is not None
    assert updates == _logged(session, start)
    assert [u.seq for u in updates] == sorted({u.seq for u in updates})  # log order, no duplicates
    assert _kinds(updates) == [
        "turn-start",
        "reasoning-delta",
        "text-delta",
        "assistant-message",
        "tool-call",
        "tool-result",
        "tool-call",
        "tool-result",
        "text-delta",
        "assistant-message",
        "turn-end",
    ]
    first, second = [u for u in updates if isinstance(u, AssistantMessage)]
    assert "".join(u.text for u in updates if isinstance(u, ReasoningDelta)) == "The user wants a sum."
    assert "".join(u.text for u in updates if isinstance(u, TextDelta) and u.step == 1) == first.text == "Adding."
    assert "".join(u.text for u in updates if isinstance(u, TextDelta) and u.step == 2) == second.text
    calls = [u for u in updates if isinstance(u, ToolCallStarted)]
    results = [u for u in updates if isinstance(u, ToolResult)]
    assert [(c.call_id, c.name) for c in calls] == [("c1", "add"), ("c2", "add")]
    assert [r.call_id for r in results] == ["c1", "c2"]
    assert results[0].text == "3" and not results[0].is_error and results[0].error is None
    assert results[1].is_error and results[1].error == {"name": "InvalidArgumentsError", "code": "INVALID_ARGUMENTS"}
    end = updates[-1]
    assert isinstance(end, TurnEnded) and end.reason == {"kind": "completed"} and end.outcome.turn == 1
    assert isinstance(updates[0], TurnStarted) and updates[0].turn == 1
    # The durable log, reloaded by another coordinator, replays the very same updates.
    coordinator.close()
    reloaded = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(tmp_path / "store")))
    try:
        assert _logged(reloaded.resume("http"), start) == updates
    finally:
        reloaded.close()


def test_stream__an_error_turn_ends_with_its_turn_end_and_does_not_raise_by_default(tmp_path: Path) -> None:
    async def main() -> tuple[al.Session, list[AgentUpdate], BaseException | None, int]:
        with DemoModelServer([ErrorReply(401, "bad key")]) as server:
            provider = OpenAICompatibleProvider(base_url=server.base_url, api_key="t", model="m")
            store = al.SessionStore()
            session = store.create("err")
            agent = Agent(session, provider, AgentOptions(provider="deepseek", model="m"))
            start = len(session.events)
            updates, err = await _collect(agent, "hi")
            return session, updates, err, start

    session, updates, err, start = asyncio.run(main())
    assert err is None
    assert updates == _logged(session, start)
    assert [u.kind for u in updates] == ["turn-start", "turn-end"]
    end = updates[-1]
    assert isinstance(end, TurnEnded) and end.reason["kind"] == "error" and end.reason["error"]["code"] == "AUTH"


def test_stream__raise_on_error_raises_after_the_turn_end_update() -> None:
    session, agent = _scripted_agent([text_reply("partial", pieces=2, finish="stop"), failure_reply("AUTH")])

    async def main() -> tuple[list[AgentUpdate], BaseException | None, list[AgentUpdate], BaseException | None]:
        first = await _collect(agent, "one", raise_on_error=True)
        second = await _collect(agent, "two", raise_on_error=True)
        return (*first, *second)

    ok, ok_err, failed, err = asyncio.run(main())
    assert ok_err is None and isinstance(ok[-1], TurnEnded) and ok[-1].reason == {"kind": "completed"}
    assert isinstance(err, LlmError) and err.code == "AUTH"
    assert any("raise_on_error" in note for note in getattr(err, "__notes__", []))
    end = failed[-1]
    assert isinstance(end, TurnEnded) and end.turn == 2 and end.reason["kind"] == "error"
    assert session.events[-1]["type"] == TURN_END  # raised after the turn was closed in the log
    assert failed == _logged(session, failed[0].seq)


def test_stream__raise_on_error_from_the_constructor_and_its_per_call_override() -> None:
    script = [tool_call_reply(("c1", "add", '{"a": 1, "b": 2}')), tool_call_reply(("c2", "add", '{"a": 1, "b": 2}'))]
    session, agent = _scripted_agent(script, max_steps=1, raise_on_error=True)

    async def main() -> tuple[BaseException | None, list[Any]]:
        agent.send("loop forever")
        try:
            await agent.run()
        except StepLimitError as err:
            raised: BaseException | None = err
        else:
            raised = None
        agent.send("again")
        outcomes = await agent.run(raise_on_error=False)
        return raised, outcomes

    raised, outcomes = asyncio.run(main())
    assert isinstance(raised, StepLimitError)
    assert [o.reason["kind"] for o in outcomes] == ["error"]
    assert outcomes[0].reason["error"]["code"] == StepLimitError.code
    ends = [e["data"]["reason"]["kind"] for e in session.events if e["type"] == TURN_END]
    assert ends == ["error", "error"]


def test_stream__cancel_while_the_model_streams_ends_aborted_with_the_partial_text() -> None:
    session, agent = _scripted_agent([text_reply("one two three four five six", pieces=6)])

    async def main() -> tuple[list[AgentUpdate], int]:
        start = len(session.events)
        updates: list[AgentUpdate] = []
        async for update in agent.stream("talk", raise_on_error=True):
            updates.append(update)
            if isinstance(update, TextDelta) and len([u for u in updates if isinstance(u, TextDelta)]) == 2:
                agent.cancel()
        return updates, start

    updates, start = asyncio.run(main())
    assert updates == _logged(session, start)
    message = next(u for u in updates if isinstance(u, AssistantMessage))
    deltas = "".join(u.text for u in updates if isinstance(u, TextDelta))
    assert message.interrupted and message.text == deltas and deltas != "one two three four five six"
    end = updates[-1]
    assert isinstance(end, TurnEnded) and end.reason == {"kind": "aborted", "reason": {"kind": "user"}}


def test_stream__cancel_from_a_tool_answers_the_unstarted_call_as_aborted_before_dispatch() -> None:
    holder: dict[str, Agent] = {}

    @tool
    def stop(why: str, ctx: ToolContext) -> str:
        holder["agent"].cancel({"kind": "tool", "why": why})
        return f"stopping: {why}"

    script = [tool_call_reply(("c1", "stop", '{"why": "enough"}'), ("c2", "add", '{"a": 1, "b": 2}'))]
    session, agent = _scripted_agent(script, tools=ToolRegistry([stop, add]))
    holder["agent"] = agent

    async def main() -> tuple[list[AgentUpdate], int]:
        start = len(session.events)
        updates, err = await _collect(agent, "go")
        assert err is None
        return updates, start

    updates, start = asyncio.run(main())
    assert updates == _logged(session, start)
    pairs = [(u.kind, u.call_id) for u in updates if isinstance(u, (ToolCallStarted, ToolResult))]
    assert pairs == [("tool-call", "c1"), ("tool-result", "c1"), ("tool-call", "c2"), ("tool-result", "c2")]
    results = [u for u in updates if isinstance(u, ToolResult)]
    assert results[0].text == "stopping: enough" and not results[0].is_error
    assert results[1].error == {"name": "AbortError", "code": "ABORTED_BEFORE_DISPATCH"}
    assert results[1].text == "Error: tool call aborted before dispatch"
    end = updates[-1]
    assert isinstance(end, TurnEnded) and end.reason == {"kind": "aborted", "reason": {"kind": "tool", "why": "enough"}}


def test_stream__leaving_the_loop_early_cancels_and_closes_the_turn() -> None:
    session, agent = _scripted_agent([text_reply("a long answer that is never read to the end", pieces=10)])

    async def main() -> tuple[list[AgentUpdate], int]:
        start = len(session.events)
        seen: list[AgentUpdate] = []
        async with contextlib.aclosing(agent.stream("talk")) as updates:
            async for update in updates:
                seen.append(update)
                if isinstance(update, TextDelta):
                    break
        assert agent.idle
        return seen, start

    seen, start = asyncio.run(main())
    logged = _logged(session, start)
    assert logged[: len(seen)] == seen  # what was shown is a prefix of the log
    end = logged[-1]
    assert isinstance(end, TurnEnded) and end.reason["kind"] == "aborted"
    assert session.events[-1]["type"] == TURN_END


def test_stream__two_agents_on_one_store_each_see_only_their_own_session() -> None:
    store = al.SessionStore()
    one, two = store.create("one"), store.create("two")
    agents = [
        Agent(s, ScriptedProvider([text_reply(f"reply from {s.id}", pieces=4)]), AgentOptions(provider="p", model="m"))
        for s in (one, two)
    ]

    async def main() -> list[tuple[list[AgentUpdate], BaseException | None]]:
        return list(await asyncio.gather(*(_collect(agent, "hi") for agent in agents)))

    (first, e1), (second, e2) = asyncio.run(main())
    assert e1 is None and e2 is None
    assert first == _logged(one, 0) and second == _logged(two, 0)
    assert "".join(u.text for u in first if isinstance(u, TextDelta)) == "reply from one"
    assert "".join(u.text for u in second if isinstance(u, TextDelta)) == "reply from two"


def test_stream__refuses_a_session_that_is_not_live_and_a_second_concurrent_run() -> None:
    detached = al.Session.create("detached")
    agent = Agent(detached, ScriptedProvider([]), AgentOptions(provider="p", model="m"), durable=False)

    async def refused() -> None:
        async for _ in agent.stream("hi"):
            pass

    with pytest.raises(AgentError, match="not live in a store"):
        asyncio.run(refused())

    release = asyncio.Event()

    @tool
    async def gate() -> str:
        await release.wait()
        return "released"

    busy_session, busy = _scripted_agent(
        [tool_call_reply(("c1", "gate", "{}")), text_reply("done")], tools=ToolRegistry([gate])
    )

    async def twice() -> BaseException | None:
        release.clear()
        async with contextlib.aclosing(busy.stream("one")) as first:
            async for update in first:
                if isinstance(update, ToolCallStarted):
                    _, err = await _collect(busy, "meanwhile")  # the first run is parked in its tool
                    release.set()
        return err

    err = asyncio.run(twice())
    assert isinstance(err, AgentError) and "already running" in str(err)
    users = [e for e in busy_session.events if e["type"] == "user/message"]
    assert len(users) == 1  # the refused prompt was not queued behind the running turn


# --- property: any scripted run streams exactly its log ------------------------------------------------

CALL = st.tuples(st.integers(-5, 5), st.sampled_from(["2", '"two"', "null"]))
STEP = st.lists(CALL, min_size=1, max_size=3)
FINAL = st.one_of(
    st.tuples(st.just("text"), st.text(min_size=1, max_size=30), st.integers(1, 5)),
    st.tuples(st.just("fail"), st.sampled_from(["AUTH", "INVALID_REQUEST"]), st.just(1)),
)


@settings(max_examples=30, deadline=None)
@given(st.lists(STEP, max_size=3), FINAL, st.booleans())
def test_stream__any_run_streams_exactly_its_log(steps: list[Any], final: Any, raise_on_error: bool) -> None:
    script: list[Any] = []
    for number, calls in enumerate(steps):
        script.append(
            tool_call_reply(*((f"c{number}-{i}", "add", f'{{"a": {a}, "b": {b}}}') for i, (a, b) in enumerate(calls)))
        )
    kind, value, pieces = final
    script.append(text_reply(value, pieces=pieces) if kind == "text" else failure_reply(value))
    session, agent = _scripted_agent(script)

    updates, err = asyncio.run(_collect(agent, "go", raise_on_error=raise_on_error))
    assert updates == _logged(session, 0)
    end = updates[-1]
    assert isinstance(end, TurnEnded)
    assert end.reason["kind"] == ("completed" if kind == "text" else "error")
    assert (err is not None) == (kind == "fail" and raise_on_error)
    results = [u for u in updates if isinstance(u, ToolResult)]
    flat = [b for calls in steps for (_, b) in calls]
    assert [r.is_error for r in results] == [b != "2" for b in flat]
    if kind == "text":
        assert "".join(u.text for u in updates if isinstance(u, TextDelta)) == value
