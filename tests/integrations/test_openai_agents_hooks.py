"""``AgentlogRunHooks`` under the real openai-agents Runner (the SDK's chat-completions model, the real
``openai`` client, the local demo model over HTTP): the request header the SDK never hands a session,
and a tool call logged before its body runs, down to a ``kill -9`` inside the body."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, SQLiteSession, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from openai import AsyncOpenAI

import agentlog as al
from agentlog.errors import RecorderStateError
from agentlog.integrations.openai_agents import AgentlogRunHooks, AgentlogSession
from agentlog.interop import session_to_openai_chat
from agentlog.kernel.invariants import check_tool_pairing
from agentlog.kernel.repair import TOOL_OUTCOME_UNKNOWN_TEXT
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing.demo_server import DemoModelServer, Reply, ToolCall

set_tracing_disabled(True)

SRC = str(Path(al.__file__).resolve().parents[1])


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _agent(base_url: str) -> Agent[Any]:
    model = OpenAIChatCompletionsModel(model="demo-model", openai_client=AsyncOpenAI(base_url=base_url, api_key="k"))
    return Agent(name="weather", instructions="Answer briefly.", model=model, tools=[get_weather])


async def _run(agent: Agent[Any], prompt: str, session: Any, hooks: Any = None) -> Any:
    result = Runner.run_streamed(agent, prompt, session=session, hooks=hooks)
    async for _ in result.stream_events():
        pass
    return result.final_output


def _script() -> list[Any]:
    return [
        Reply(reasoning="Look it up.", tool_calls=[ToolCall("get_weather", {"city": "Paris"}, id="call-1")]),
        "It is sunny in Paris.",
        "You are welcome.",
    ]


def test_hooks__the_sdk_gets_the_same_items_and_the_log_gains_the_header_and_the_loops_order(tmp_path: Path) -> None:
    store = al.SessionStore()
    al.SessionInvariants(store).install()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(tmp_path / "store")))

    async def conversation(session: Any, hooks: Any) -> tuple[list[Any], list[Any], list[Any]]:
        with DemoModelServer(_script()) as server:
            agent = _agent(server.base_url)
            finals = [await _run(agent, p, session, hooks) for p in ("Weather in Paris?", "Thanks!")]
            return finals, [r.body["messages"] for r in server.requests], await session.get_items()

    ours = AgentlogSession("hooked", coordinator=coordinator)
    finals, requests, items = asyncio.run(conversation(ours, AgentlogRunHooks(ours)))
    reference = SQLiteSession("hooked", str(tmp_path / "reference.db"))
    ref_finals, ref_requests, ref_items = asyncio.run(conversation(reference, None))
    reference.close()
    assert finals == ref_finals == ["It is sunny in Paris.", "You are welcome."]
    assert items == ref_items  # the SDK's save of an item the hooks logged writes nothing a second time
    assert requests == ref_requests

    log = ours.session
    header = log.request_header()
    assert header["system"] == "Answer briefly."
    assert header["config"] == {"provider": "openai-agents", "model": "demo-model"}
    assert [t["name"] for t in header["tools"]] == ["get_weather"]
    assert header["tools"][0]["parameters"]["properties"] == {"city": {"title": "City", "type": "string"}}
    types = [e.type for e in log.events]
    assert types.count("request/header") == 1  # before the first model call; unchanged after it
    turn_one = types[: types.index("turn/end") + 1]
    assert [t for t in turn_one if t != "request/context"] == [
        "turn/start",
        "step/start",  # the model call's step, opened by the hooks before the request ...
        "request/header",  # ... with its header (a streamed run saves its input after that, into this step)
        "user/message",
        "assistant/message",  # the reasoning item
        "assistant/message",  # the function_call item, logged when the model returned it ...
        "tool/call",  # ... with its call, durable before the SDK ran the tool
        "tool/result",
        "step/end",
        "step/start",  # the second model call's step, opened by the hooks before the request
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    check_tool_pairing(log.derive_messages())
    body = session_to_openai_chat(log)  # what `agentlog export --to openai-chat` writes
    assert body["model"] == "demo-model"
    assert body["messages"][0] == {"role": "system", "content": "Answer briefly."}
    assert [t["function"]["name"] for t in body["tools"]] == ["get_weather"]
    ours.close()
    coordinator.close()


def test_hooks__need_an_agentlog_session() -> None:
    try:
        AgentlogRunHooks(object())  # type: ignore[arg-type]
    except RecorderStateError as err:
        assert "AgentlogSession" in str(err)
    else:
        raise AssertionError("AgentlogRunHooks accepted something that is not an AgentlogSession")


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI
    from agentlog.integrations.openai_agents import AgentlogRunHooks, AgentlogSession

    set_tracing_disabled(True)
    root, base_url = sys.argv[1], sys.argv[2]

    @function_tool
    def deploy(target: str) -> str:
        "Deploys the target (takes a while)."
        print("body-started", flush=True)  # the parent kills the process once it reads this
        sys.stdin.read()  # blocks: the parent never writes
        return "deployed"

    async def main():
        client = AsyncOpenAI(base_url=base_url, api_key="k")
        model = OpenAIChatCompletionsModel(model="demo-model", openai_client=client)
        agent = Agent(name="ops", instructions="You deploy things.", model=model, tools=[deploy])
        session = AgentlogSession("killed", root)
        result = Runner.run_streamed(agent, "Deploy to production.", session=session, hooks=AgentlogRunHooks(session))
        async for _ in result.stream_events():
            pass

    asyncio.run(main())
    """
)


def test_hooks__kill_9_inside_a_tool_body_leaves_the_call_answered_outcome_unknown_on_reopen(tmp_path: Path) -> None:
    root = tmp_path / "store"
    script = [Reply(text="Deploying.", tool_calls=[ToolCall("deploy", {"target": "prod"}, id="d1")])]
    env = {**os.environ, "PYTHONPATH": SRC}
    with DemoModelServer(script) as server:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(root), server.base_url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert child.stdout is not None
            line = child.stdout.readline()  # the child's own report: the tool body is running
            assert line == "body-started\n", f"the child did not reach the tool body (exit {child.poll()})"
            os.kill(child.pid, signal.SIGKILL)
            assert child.wait(60) == -signal.SIGKILL
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            for pipe in (child.stdin, child.stdout):
                if pipe is not None:
                    pipe.close()

    stored = JsonlBackend(str(root), read_only=True).load_stored("killed")
    assert stored is not None
    call = next(e for e in stored.events if e["type"] == "tool/call")
    assert (call["data"]["callId"], call["data"]["name"]) == ("d1", "deploy")
    assert "turn/end" not in [e["type"] for e in stored.events]

    async def reopen() -> None:
        session = AgentlogSession("killed", root)  # the open turn is repaired here
        try:
            closers = [al.thaw(e) for e in session.session.events][len(stored.events) : len(stored.events) + 3]
            assert [c["type"] for c in closers] == ["tool/result", "step/end", "turn/end"]
            assert closers[0]["data"]["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
            assert closers[0]["sourceEventSeqs"] == [call["seq"]]
            assert closers[2]["data"]["reason"] == {"kind": "interrupted"}
            items = await session.get_items()
            assert items[0] == {"content": "Deploy to production.", "role": "user"}
            assert [item.get("type") for item in items[1:]] == ["message", "function_call", "function_call_output"]
            assert items[-1] == {"type": "function_call_output", "call_id": "d1", "output": TOOL_OUTCOME_UNKNOWN_TEXT}
            assert session.session.request_header()["system"] == "You deploy things."
        finally:
            session.close()

    asyncio.run(reopen())


@pytest.mark.parametrize("runner_method", ["run", "run_streamed"])
def test_hooks__runner_run_and_run_streamed_give_the_sdk_what_sqlite_session_gives(
    tmp_path: Path, runner_method: str
) -> None:
    async def conversation(session: Any, hooks: Any) -> tuple[list[Any], list[Any]]:
        model = ScriptedModel()  # the SDK's own deterministic model, as its session tests use
        agent = Agent(name="w", instructions="Be brief.", model=model, tools=[get_weather])
        model.enqueue([function_call("get_weather", {"city": "Paris"}, call_id="c1")])
        model.enqueue([assistant_message("Sunny.")])
        model.enqueue([assistant_message("Bye.")])
        for prompt in ("Weather?", "Thanks."):
            if runner_method == "run":
                await Runner.run(agent, prompt, session=session, hooks=hooks)
            else:
                await _run(agent, prompt, session, hooks)
        return await session.get_items(), [call.input for call in model.calls]

    store = al.SessionStore()
    al.SessionInvariants(store).install()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(tmp_path / "store")))
    ours = AgentlogSession("scripted", coordinator=coordinator)
    items, inputs = asyncio.run(conversation(ours, AgentlogRunHooks(ours)))
    reference = SQLiteSession("scripted", str(tmp_path / "reference.db"))
    assert (items, inputs) == asyncio.run(conversation(reference, None))
    reference.close()
    events = list(ours.session.events)
    assert [e["data"]["reason"] for e in events if e["type"] == "turn/end"] == [{"kind": "completed"}] * 2
    header_at = next(e["seq"] for e in events if e["type"] == "request/header")
    reply_at = next(e["seq"] for e in events if e["type"] == "assistant/message")
    assert header_at < reply_at and ours.session.request_header()["system"] == "Be brief."
    ours.close()
    coordinator.close()


def test_hooks__a_run_whose_model_call_failed_leaves_the_next_run_its_own_turn(tmp_path: Path) -> None:
    async def main() -> AgentlogSession:
        session = AgentlogSession("failing", tmp_path / "store")
        hooks = AgentlogRunHooks(session)
        model = ScriptedModel()
        agent = Agent(name="w", instructions="Be brief.", model=model)
        with pytest.raises(Exception):  # noqa: B017 - the script is empty: the SDK's own "unexpected call" error
            await Runner.run(agent, "First?", session=session, hooks=hooks)
        model.enqueue([assistant_message("Second answer.")])
        await Runner.run(agent, "Second?", session=session, hooks=hooks)
        return session

    session = asyncio.run(main())
    events = list(session.session.events)
    second = next(e for e in events if e["type"] == "user/message" and e["data"]["content"][0]["text"] == "Second?")
    starts = [e for e in events if e["type"] == "turn/start"]
    assert [e["data"]["turn"] for e in starts] == [1, 2]
    assert starts[1]["seq"] < second["seq"]  # the second run's input opened its own turn
    assert [e["data"]["reason"]["kind"] for e in events if e["type"] == "turn/end"][-1] == "completed"
    session.close()
