"""AgentlogSession under the real openai-agents Runner, against the local demo model over HTTP.

The model is the SDK's own ``OpenAIChatCompletionsModel`` with an ``AsyncOpenAI`` client pointed at
:class:`agentlog.testing.demo_server.DemoModelServer`; the demo server only streams, so the runs use
``Runner.run_streamed`` (the ported SDK session tests cover ``run`` and ``run_sync`` with the SDK's
scripted model). Crash tests kill a real child process with SIGKILL and resume in a second one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, SQLiteSession, function_tool, set_tracing_disabled
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai import AsyncOpenAI

import agentlog as al
from agentlog.errors import ConversionError, RecorderStateError, SessionLockedError
from agentlog.integrations.openai_agents import (
    CLEAR_SESSION_EVENT,
    ITEM_KEY,
    POP_ITEM_EVENT,
    AgentlogSession,
    items_of_message,
)
from agentlog.kernel.events import ASSISTANT_MESSAGE, TOOL_CALL, TOOL_RESULT, TURN_END, TURN_START
from agentlog.kernel.invariants import check_tool_pairing
from agentlog.kernel.repair import TOOL_OUTCOME_UNKNOWN_TEXT
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.memory import MemoryBackend, MemoryStorage
from agentlog.persistence.sqlite.backend import SqliteBackend
from agentlog.testing.demo_server import DemoModelServer, Hang, RecordedRequest, Reply, ToolCall

set_tracing_disabled(True)

SRC = str(Path(al.__file__).resolve().parents[1])


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _agent(base_url: str) -> Agent[Any]:
    model = OpenAIChatCompletionsModel(model="demo-model", openai_client=AsyncOpenAI(base_url=base_url, api_key="k"))
    return Agent(name="weather", instructions="Answer briefly.", model=model, tools=[get_weather])


async def _run(agent: Agent[Any], prompt: str, session: Any) -> Any:
    result = Runner.run_streamed(agent, prompt, session=session)
    async for _ in result.stream_events():
        pass
    return result.final_output


def _script() -> list[Any]:
    return [
        Reply(reasoning="Look it up.", tool_calls=[ToolCall("get_weather", {"city": "Paris"}, id="call-1")]),
        "It is sunny in Paris.",
        "You are welcome.",
    ]


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[PersistenceCoordinator]:
    store = al.SessionStore()
    al.SessionInvariants(store).install()  # every append the adapter makes must keep the relational rules
    coord = PersistenceCoordinator(store, JsonlBackend(str(tmp_path / "store")))
    yield coord
    coord.close()


def test_multi_turn_with_a_tool_gives_the_sdk_exactly_what_sqlite_session_gives(
    tmp_path: Path, coordinator: PersistenceCoordinator
) -> None:
    async def conversation(session: Any) -> tuple[list[Any], list[RecordedRequest], list[Any]]:
        with DemoModelServer(_script()) as server:
            agent = _agent(server.base_url)
            finals = [await _run(agent, "Weather in Paris?", session), await _run(agent, "Thanks!", session)]
            return finals, server.requests, await session.get_items()

    ours = AgentlogSession("conv-1", coordinator=coordinator)
    finals, requests, items = asyncio.run(conversation(ours))
    reference = SQLiteSession("conv-1", str(tmp_path / "reference.db"))
    ref_finals, ref_requests, ref_items = asyncio.run(conversation(reference))
    reference.close()

    assert finals == ref_finals == ["It is sunny in Paris.", "You are welcome."]
    assert items == ref_items  # ids, provider_data, annotations: the SDK's items come back verbatim
    assert [r.body["messages"] for r in requests] == [r.body["messages"] for r in ref_requests]
    third = requests[2].body["messages"]
    assert [message["role"] for message in third] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert third[3] == {"role": "tool", "tool_call_id": "call-1", "content": "sunny in Paris"}

    # The log reads as agentlog's own conversation: two turns, the call logged as started, the result paired.
    events = ours.session.events
    assert [e.data["reason"] for e in events if e.type == TURN_END] == [{"kind": "completed"}] * 2
    assert [e.data["turn"] for e in events if e.type == TURN_START] == [1, 2]
    assert [e.data["callId"] for e in events if e.type == TOOL_CALL] == ["call-1"]
    derived = ours.session.derive_messages()
    assert [block["type"] for message in derived for block in message["content"]] == [
        "text",
        "reasoning",
        "tool-call",
        "tool-result",
        "text",
        "text",
        "text",
    ]
    check_tool_pairing(derived)  # raises on an unpaired call or result
    ours.close()


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_add_items_is_durable_when_it_returns(tmp_path: Path, backend: Literal["jsonl", "sqlite"]) -> None:
    root = tmp_path / "store"
    item = {"role": "user", "content": "remember me"}

    def reader() -> Any:  # another backend instance over the same storage: what is on disk
        if backend == "sqlite":
            return SqliteBackend(str(root / "sessions.sqlite3"), read_only=True)
        return JsonlBackend(str(root), read_only=True)

    async def main() -> None:
        session = AgentlogSession("durable", root, backend=backend)
        await session.add_items([item])  # type: ignore[list-item]
        stored = reader().load_stored("durable")  # at once: no close, no sleep
        assert stored is not None
        messages = [e["data"] for e in stored.events if e["type"] == "user/message"]
        assert [message["source"][ITEM_KEY] for message in messages] == [item]
        session.close()
        with AgentlogSession("durable", root, backend=backend) as reopened:
            assert await reopened.get_items() == [item]

    asyncio.run(main())


def test_pop_and_clear_hide_items_from_the_model_but_the_log_keeps_them(coordinator: PersistenceCoordinator) -> None:
    history = [
        {"role": "user", "content": "one"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
        {"role": "assistant", "content": "two"},
    ]

    async def main() -> None:
        session = AgentlogSession("hide", coordinator=coordinator)
        await session.add_items(history)  # type: ignore[arg-type]
        before = session.session.seq
        assert await session.pop_item() == history[-1]
        assert await session.get_items() == history[:-1]
        await session.clear_session()
        assert await session.get_items() == []
        assert await session.pop_item() is None
        assert [e.type for e in session.session.events].count(POP_ITEM_EVENT) == 1
        assert [e.type for e in session.session.events].count(CLEAR_SESSION_EVENT) == 1
        # Nothing was deleted: the session as it was is still there.
        as_it_was = session.session.at(before).derive_messages()
        assert [item for message in as_it_was for item in items_of_message(message)] == history
        await session.add_items([{"role": "user", "content": "again"}])
        assert await session.get_items() == [{"role": "user", "content": "again"}]
        session.close()

    asyncio.run(main())


def test_popping_an_unanswered_call_answers_it_in_the_log_so_repair_never_resurrects_it(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"

    async def main() -> None:
        session = AgentlogSession("withdrawn", root)
        await session.add_items(
            [
                {"role": "user", "content": "go"},
                {"type": "function_call", "call_id": "c9", "name": "f", "arguments": "{}"},
            ]
        )  # type: ignore[list-item]
        assert (await session.pop_item() or {}).get("call_id") == "c9"
        session.close()
        reopened = AgentlogSession("withdrawn", root)  # a repair would run here if a call were left open
        assert await reopened.get_items() == [{"role": "user", "content": "go"}]
        results = [e for e in reopened.session.events if e.type == TOOL_RESULT]
        assert len(results) == 1  # the withdrawal's answer: logged, and shadowed with the call
        assert results[0].seq not in reopened.session.surface.nodes
        assert TURN_END in [e.type for e in reopened.session.events[results[0].seq :]]
        reopened.close()

    asyncio.run(main())


def test_a_bad_item_is_refused_naming_it_and_nothing_is_written(coordinator: PersistenceCoordinator) -> None:
    async def main() -> None:
        session = AgentlogSession("bad", coordinator=coordinator)
        good = {"role": "user", "content": "fine"}
        before = session.session.seq
        with pytest.raises(ConversionError) as refused:
            await session.add_items([good, {"role": "user", "content": float("nan")}])  # type: ignore[list-item]
        assert refused.value.index == 1 and refused.value.path == "$[1].content"
        with pytest.raises(ConversionError) as refused:
            await session.add_items([good, {"type": "function_call", "name": "f", "arguments": "{}"}])  # type: ignore[list-item]
        assert refused.value.index == 1 and refused.value.path == "$[1].call_id"
        assert session.session.seq == before
        await session.add_items([good])  # type: ignore[list-item]
        assert await session.get_items() == [good]
        session.close()
        with pytest.raises(RecorderStateError):
            await session.get_items()

    asyncio.run(main())


def test_messages_agentlog_wrote_itself_are_rendered_as_items(coordinator: PersistenceCoordinator) -> None:
    live = coordinator.store.create("native")
    live.append("turn/start", {"turn": 1})
    live.append("user/message", al.user_message("hi"), {"surfaceOp": "append"})
    live.append("step/start", {"turn": 1, "step": 1})
    call = al.tool_call_block("n1", "read_file", '{"path": "a"}')
    message = al.assistant_message([al.reasoning_block("hm"), al.text_block("Reading."), call], provider="p", model="m")
    live.append(ASSISTANT_MESSAGE, {"turn": 1, "step": 1, "message": message}, {"surfaceOp": "append"})
    live.append("tool/call", {"turn": 1, "step": 1, "callId": "n1", "name": "read_file", "arguments": '{"path": "a"}'})
    result = al.tool_result_message("n1", "contents")
    live.append(TOOL_RESULT, {"turn": 1, "step": 1, "message": result}, {"surfaceOp": "append"})
    live.append("step/end", {"turn": 1, "step": 1})
    live.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})

    async def main() -> None:
        session = AgentlogSession("native", coordinator=coordinator)  # live already: used as it is
        expected = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Reading."},
            {"type": "function_call", "call_id": "n1", "name": "read_file", "arguments": '{"path": "a"}'},
            {"type": "function_call_output", "call_id": "n1", "output": "contents"},
        ]
        assert await session.get_items() == expected
        assert await session.pop_item() == expected[-1]
        assert await session.pop_item() == expected[-2]  # one block of a message agentlog wrote
        assert await session.get_items() == expected[:2]
        session.close()
        assert coordinator.store.get("native") is live  # borrowed, so left live

    asyncio.run(main())


# --- crash and resume in real processes --------------------------------------------------------------

FIRST = textwrap.dedent(
    """
    import asyncio, sys
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI
    from agentlog.integrations.openai_agents import AgentlogSession

    set_tracing_disabled(True)
    root, base_url, prompt = sys.argv[1], sys.argv[2], sys.argv[3]

    @function_tool
    def get_weather(city: str) -> str:
        \"\"\"The weather in a city.\"\"\"
        return f"sunny in {city}"

    async def main():
        client = AsyncOpenAI(base_url=base_url, api_key="k")
        model = OpenAIChatCompletionsModel(model="demo-model", openai_client=client)
        agent = Agent(name="weather", instructions="Answer briefly.", model=model, tools=[get_weather])
        session = AgentlogSession("crashy", root)
        result = Runner.run_streamed(agent, prompt, session=session)
        async for _ in result.stream_events():
            pass
        print(result.final_output)
        print(__import__("json").dumps(await session.get_items()))
        session.close()

    asyncio.run(main())
    """
)


def _stored_types(root: Path, session_id: str) -> list[str]:
    stored = JsonlBackend(str(root), read_only=True).load_stored(session_id) if root.exists() else None
    return [] if stored is None else [event["type"] for event in stored.events]


def _kill_when(child: subprocess.Popen[bytes], ready: Any) -> None:
    try:
        deadline = time.monotonic() + 300  # a hang guard; the loop ends at the child's progress
        while not ready():
            assert time.monotonic() < deadline, "the child never got there"
            assert child.poll() is None, "the child exited on its own"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_a_second_process_resumes_the_conversation_after_kill_9_mid_run(tmp_path: Path) -> None:
    root = tmp_path / "store"
    first_script = [
        Reply(tool_calls=[ToolCall("get_weather", {"city": "Oslo"}, id="call-7")]),
        Hang(seconds=30),  # the second model call never answers: the run is mid-flight when it dies
    ]
    with DemoModelServer(first_script) as server:
        child = subprocess.Popen(
            [sys.executable, "-c", FIRST, str(root), server.base_url, "Weather in Oslo?"],
            env=_env(),
            stdout=subprocess.DEVNULL,
        )
        _kill_when(child, lambda: len(server.requests) == 2 and TOOL_RESULT in _stored_types(root, "crashy"))
    assert TURN_END not in _stored_types(root, "crashy")  # the run's turn was open when it died

    seen: list[Any] = []

    def answer(request: RecordedRequest) -> Any:
        seen.append(request.body["messages"])
        return Reply(text="Oslo was sunny; anything else?")

    with DemoModelServer([answer]) as server:
        second = subprocess.run(
            [sys.executable, "-c", FIRST, str(root), server.base_url, "And now?"],
            env=_env(),
            capture_output=True,
            timeout=300,
            check=True,
        )
    final, items_json = second.stdout.decode().strip().splitlines()[-2:]
    assert final == "Oslo was sunny; anything else?"
    assert [m["role"] for m in seen[0]] == ["system", "user", "assistant", "tool", "user"]
    assert seen[0][2]["tool_calls"][0]["id"] == "call-7"
    assert seen[0][3] == {"role": "tool", "tool_call_id": "call-7", "content": "sunny in Oslo"}
    items = json.loads(items_json)
    assert [item.get("type", "message") for item in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
        "message",
    ]

    stored = JsonlBackend(str(root), read_only=True).load_stored("crashy")
    assert stored is not None
    ends = [e["data"]["reason"] for e in stored.events if e["type"] == TURN_END]
    assert ends == [{"kind": "interrupted"}, {"kind": "completed"}]  # repair closed the killed run's turn


DANGLING = textwrap.dedent(
    """
    import asyncio, sys, time
    from agentlog.integrations.openai_agents import AgentlogSession

    async def main():
        session = AgentlogSession("dangling", sys.argv[1])
        await session.add_items([{"role": "user", "content": "Charge my card."}])
        await session.add_items([{"type": "function_call", "call_id": "pay-1", "name": "charge", "arguments": "{}"}])
        print("saved", flush=True)
        time.sleep(60)

    asyncio.run(main())
    """
)


def test_a_call_left_without_output_by_kill_9_reads_back_as_outcome_unknown(tmp_path: Path) -> None:
    root = tmp_path / "store"
    child = subprocess.Popen([sys.executable, "-c", DANGLING, str(root)], env=_env(), stdout=subprocess.PIPE)
    assert child.stdout is not None
    _kill_when(child, lambda: child.stdout.readline() == b"saved\n")  # type: ignore[union-attr]
    child.stdout.close()

    async def main() -> None:
        session = AgentlogSession("dangling", root)  # the open turn is repaired here
        items = await session.get_items()
        assert items[-1] == {"type": "function_call_output", "call_id": "pay-1", "output": TOOL_OUTCOME_UNKNOWN_TEXT}

        def answer(request: RecordedRequest) -> Any:
            calls = {c["id"] for m in request.body["messages"] for c in m.get("tool_calls") or []}
            answered = {m["tool_call_id"] for m in request.body["messages"] if m["role"] == "tool"}
            assert calls == answered == {"pay-1"}  # a well-formed request: the dangling call is answered
            return Reply(text="I will check whether the payment went through first.")

        with DemoModelServer([answer]) as server:
            final = await _run(_agent(server.base_url), "Did it work?", session)
        assert final == "I will check whether the payment went through first."
        session.close()

    asyncio.run(main())


# --- a property: any sequence of operations behaves like a list, keeps the invariants, and reloads ----

_CALL_IDS = st.sampled_from(["c1", "c2", "c3"])
_TEXT = st.text(max_size=12)
_ITEMS = st.one_of(
    st.builds(lambda t: {"role": "user", "content": t}, _TEXT),
    st.builds(lambda t: {"role": "developer", "content": [{"type": "input_text", "text": t}]}, _TEXT),
    st.builds(
        lambda t, i: {
            "id": i,
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": t, "annotations": [], "logprobs": []}],
        },
        _TEXT,
        _TEXT,
    ),
    st.builds(lambda c, a: {"type": "function_call", "call_id": c, "name": "f", "arguments": a}, _CALL_IDS, _TEXT),
    st.builds(lambda c, o: {"type": "function_call_output", "call_id": c, "output": o}, _CALL_IDS, _TEXT),
    st.builds(lambda t: {"id": "r", "type": "reasoning", "summary": [{"type": "summary_text", "text": t}]}, _TEXT),
    st.builds(lambda q: {"id": "w", "type": "web_search_call", "status": "completed", "action": {"query": q}}, _TEXT),
)
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(_ITEMS, min_size=1, max_size=4)),
        st.tuples(st.just("pop"), st.none()),
        st.tuples(st.just("clear"), st.none()),
        st.tuples(st.just("get"), st.integers(min_value=0, max_value=6)),
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_OPS)
def test_any_operations_behave_like_a_list_keep_the_invariants_and_reload(ops: list[Any]) -> None:
    storage = MemoryStorage()

    def open_session() -> tuple[AgentlogSession, PersistenceCoordinator]:
        store = al.SessionStore()
        al.SessionInvariants(store).install()  # a violation would veto an append and fail the operation
        coordinator = PersistenceCoordinator(store, MemoryBackend(storage))
        return AgentlogSession("prop", coordinator=coordinator), coordinator

    async def main() -> None:
        session, coordinator = open_session()
        expected: list[Any] = []
        for op, argument in ops:
            if op == "add":
                await session.add_items(argument)
                expected.extend(argument)
            elif op == "pop":
                assert await session.pop_item() == (expected.pop() if expected else None)
            elif op == "clear":
                await session.clear_session()
                expected.clear()
            else:
                assert await session.get_items(limit=argument) == (expected[-argument:] if argument else [])
        assert await session.get_items() == expected
        session.close()
        coordinator.close()
        reopened, coordinator = open_session()  # a repair of an open turn may answer a dangling call
        items = await reopened.get_items()
        assert items[: len(expected)] == expected
        assert all(item["type"] == "function_call_output" for item in items[len(expected) :])
        reopened.close()
        coordinator.close()

    asyncio.run(main())


# --- one writer per session: SESSION_LOCKED names the holder; wait= / timeout= wait for it -------------------

HOLD = textwrap.dedent(
    """
    import asyncio, sys
    from agentlog.integrations.openai_agents import AgentlogSession

    async def main():
        session = AgentlogSession("shared", sys.argv[1])
        if sys.argv[2] == "items":
            await session.add_items([{"role": "user", "content": "Hello from the holder."}])
        print("locked", flush=True)
        sys.stdin.readline()
        session.close()
        print("released", flush=True)

    asyncio.run(main())
    """
)


@pytest.fixture(params=["items", "empty"])
def lock_holder(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A child process holding ``shared`` open (with a stored item, or created and never written)."""
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path / "store"), request.param],
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "locked\n"
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


def _tell_release(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None
    child.stdin.write("\n")
    child.stdin.flush()


class _ReleaseWhenWaiting(logging.Handler):
    """Tells the holder to release once the adapter reports (``agentlog`` logger, INFO) that it waits."""

    def __init__(self, child: subprocess.Popen[str]) -> None:
        super().__init__(logging.INFO)
        self.child = child
        self.waited = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "waiting for it" in record.getMessage():
            self.waited += 1
            _tell_release(self.child)


def test_a_second_adapter_on_a_held_session_is_session_locked_naming_the_holder(
    lock_holder: subprocess.Popen[str], tmp_path: Path
) -> None:
    for options in ({}, {"timeout": 0.2}):
        with pytest.raises(SessionLockedError) as info:
            AgentlogSession("shared", tmp_path / "store", **options)  # type: ignore[arg-type]
        assert info.value.code == "SESSION_LOCKED"
        assert info.value.holder is not None and info.value.holder["pid"] == lock_holder.pid
        assert f"pid {lock_holder.pid} on host" in str(info.value) and "wait=True" in str(info.value)
        if options:
            assert "gave up after waiting 0.2 s" in str(info.value)


def test_an_adapter_with_wait_opens_the_session_once_the_holder_closes_it(
    lock_holder: subprocess.Popen[str], tmp_path: Path
) -> None:
    handler = _ReleaseWhenWaiting(lock_holder)
    log = logging.getLogger("agentlog")
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        session = AgentlogSession("shared", tmp_path / "store", wait=True, timeout=600)
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    try:
        assert handler.waited == 1  # it waited, and the holder was released only then
        assert lock_holder.stdout is not None and lock_holder.stdout.readline() == "released\n"
        items = asyncio.run(session.get_items())
        assert [item.get("content") for item in items] in ([], ["Hello from the holder."])
        asyncio.run(session.add_items([{"role": "user", "content": "And from the waiter."}]))
    finally:
        session.close()
    assert lock_holder.wait(60) == 0
