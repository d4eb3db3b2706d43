"""The openai-agents SDK's own session tests, ported to run against AgentlogSession.

Source: github.com/openai/openai-agents-python at 7f7a44f8d, ``tests/memory/test_session.py`` and
``tests/memory/test_session_limit.py``. Ported are the tests of behaviour any ``Session`` must have
(they were written against ``SQLiteSession``); each keeps its original name after ``test_`` and its
assertions, with the session built by :func:`_session` instead of ``SQLiteSession(id, db_path)``.
Runner tests use the SDK's own deterministic model (``agents.testing.ScriptedModel``), as the originals
do, across ``Runner.run``, ``run_sync`` and ``run_streamed``.

Left out, as SQLite internals rather than protocol: corrupt-row skipping, connection and file-lock
bookkeeping, rollback and quarantine tests, ``_await_mutation`` unit tests. Adapted (said at each test):
the failed-add test expects agentlog's ``ConversionError`` (the original expects ``TypeError`` from
``json.dumps``), and the post-commit cancellation test cancels during the durability wait (the
original pauses inside a patched SQLite commit).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from pathlib import Path
from typing import Any, cast

import pytest
from agents import Agent, RunConfig, Runner, SessionSettings, TResponseInputItem, set_tracing_disabled
from agents.testing import ScriptedModel
from agents.testing import assistant_message as get_text_message

from agentlog.errors import ConversionError
from agentlog.integrations.openai_agents import AgentlogSession
from agentlog.persistence.jsonl.backend import JsonlBackend

set_tracing_disabled(True)

RUNNER_METHODS = ["run", "run_sync", "run_streamed"]


def _session(tmp_path: Path, session_id: str, **options: Any) -> AgentlogSession:
    return AgentlogSession(session_id, tmp_path / "store", **options)


def _run_sync_wrapper(agent: Any, input_data: Any, **kwargs: Any) -> Any:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return Runner.run_sync(agent, input_data, **kwargs)
    finally:
        loop.close()


async def run_agent_async(runner_method: str, agent: Any, input_data: Any, **kwargs: Any) -> Any:
    if runner_method == "run":
        return await Runner.run(agent, input_data, **kwargs)
    if runner_method == "run_sync":
        return await asyncio.to_thread(_run_sync_wrapper, agent, input_data, **kwargs)
    result = Runner.run_streamed(agent, input_data, **kwargs)
    async for _ in result.stream_events():
        pass
    return result


# --- tests/memory/test_session.py ------------------------------------------------------------------


@pytest.mark.parametrize("runner_method", RUNNER_METHODS)
def test_session_memory_basic_functionality_parametrized(tmp_path: Path, runner_method: str) -> None:
    async def main() -> None:
        session = _session(tmp_path, "test_session_123")
        model = ScriptedModel()
        agent = Agent(name="test", model=model)
        model.enqueue([get_text_message("San Francisco")])
        result1 = await run_agent_async(
            runner_method, agent, "What city is the Golden Gate Bridge in?", session=session
        )
        assert result1.final_output == "San Francisco"
        model.enqueue([get_text_message("California")])
        result2 = await run_agent_async(runner_method, agent, "What state is it in?", session=session)
        assert result2.final_output == "California"
        last_input = model.calls[-1].input
        assert len(last_input) > 1
        session.close()

    asyncio.run(main())


@pytest.mark.parametrize("runner_method", RUNNER_METHODS)
def test_session_memory_different_sessions_parametrized(tmp_path: Path, runner_method: str) -> None:
    async def main() -> None:
        model = ScriptedModel()
        agent = Agent(name="test", model=model)
        session_1 = _session(tmp_path, "session_1")
        model.enqueue([get_text_message("I like cats")])
        result1 = await run_agent_async(runner_method, agent, "I like cats", session=session_1)
        assert result1.final_output == "I like cats"
        session_2 = _session(tmp_path, "session_2")
        model.enqueue([get_text_message("I like dogs")])
        result2 = await run_agent_async(runner_method, agent, "I like dogs", session=session_2)
        assert result2.final_output == "I like dogs"
        model.enqueue([get_text_message("Yes, you mentioned cats")])
        result3 = await run_agent_async(runner_method, agent, "What did I say I like?", session=session_1)
        assert result3.final_output == "Yes, you mentioned cats"
        assert [item.get("content") for item in model.calls[-1].input if item.get("role") == "user"] == [
            "I like cats",
            "What did I say I like?",
        ]
        session_1.close()
        session_2.close()

    asyncio.run(main())


def test_sqlite_session_memory_direct(tmp_path: Path) -> None:
    async def main() -> None:
        session = _session(tmp_path, "direct_test")
        items: list[TResponseInputItem] = [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi there!"},
        ]
        await session.add_items(items)
        retrieved = await session.get_items()
        assert len(retrieved) == 2
        assert retrieved[0].get("role") == "user"
        assert retrieved[0].get("content") == "Hello"
        assert retrieved[1].get("role") == "assistant"
        assert retrieved[1].get("content") == "Hi there!"
        await session.clear_session()
        assert len(await session.get_items()) == 0
        session.close()

    asyncio.run(main())


def test_sqlite_session_closed_rejects_empty_add_items(tmp_path: Path) -> None:
    session = _session(tmp_path, "closed_empty_add_test")
    session.close()
    with pytest.raises(RuntimeError, match="is closed"):
        asyncio.run(session.add_items([]))


def test_sqlite_session_memory_pop_item(tmp_path: Path) -> None:
    async def main() -> None:
        session = _session(tmp_path, "pop_test")
        assert await session.pop_item() is None
        items: list[TResponseInputItem] = [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi there!"},
            {"role": "user", "content": "How are you?"},
        ]
        await session.add_items(items)
        assert len(await session.get_items()) == 3
        popped = await session.pop_item()
        assert popped is not None
        assert popped.get("role") == "user"
        assert popped.get("content") == "How are you?"
        retrieved_after_pop = await session.get_items()
        assert len(retrieved_after_pop) == 2
        assert retrieved_after_pop[-1].get("content") == "Hi there!"
        popped2 = await session.pop_item()
        assert popped2 is not None
        assert popped2.get("role") == "assistant"
        assert popped2.get("content") == "Hi there!"
        popped3 = await session.pop_item()
        assert popped3 is not None
        assert popped3.get("role") == "user"
        assert popped3.get("content") == "Hello"
        assert await session.pop_item() is None
        assert len(await session.get_items()) == 0
        session.close()

    asyncio.run(main())


def test_session_memory_pop_different_sessions(tmp_path: Path) -> None:
    async def main() -> None:
        session_1 = _session(tmp_path, "session_1")
        session_2 = _session(tmp_path, "session_2")
        await session_1.add_items([{"role": "user", "content": "Session 1 message"}])
        await session_2.add_items(
            [{"role": "user", "content": "Session 2 message 1"}, {"role": "user", "content": "Session 2 message 2"}]
        )
        popped = await session_2.pop_item()
        assert popped is not None
        assert popped.get("content") == "Session 2 message 2"
        session_1_items = await session_1.get_items()
        assert len(session_1_items) == 1
        assert session_1_items[0].get("content") == "Session 1 message"
        session_2_items = await session_2.get_items()
        assert len(session_2_items) == 1
        assert session_2_items[0].get("content") == "Session 2 message 1"
        session_1.close()
        session_2.close()

    asyncio.run(main())


def test_sqlite_session_get_items_with_limit(tmp_path: Path) -> None:
    async def main() -> None:
        session = _session(tmp_path, "count_test")
        items: list[TResponseInputItem] = [
            {"role": "user", "content": "Message 1"},
            {"role": "assistant", "content": "Response 1"},
            {"role": "user", "content": "Message 2"},
            {"role": "assistant", "content": "Response 2"},
            {"role": "user", "content": "Message 3"},
            {"role": "assistant", "content": "Response 3"},
        ]
        await session.add_items(items)
        all_items = await session.get_items()
        assert len(all_items) == 6
        assert all_items[0].get("content") == "Message 1"
        assert all_items[-1].get("content") == "Response 3"
        latest_2 = await session.get_items(limit=2)
        assert [item.get("content") for item in latest_2] == ["Message 3", "Response 3"]
        latest_4 = await session.get_items(limit=4)
        assert [item.get("content") for item in latest_4] == ["Message 2", "Response 2", "Message 3", "Response 3"]
        latest_10 = await session.get_items(limit=10)
        assert len(latest_10) == 6
        assert latest_10[0].get("content") == "Message 1"
        assert latest_10[-1].get("content") == "Response 3"
        assert len(await session.get_items(limit=0)) == 0
        session.close()

    asyncio.run(main())


@pytest.mark.parametrize("runner_method", RUNNER_METHODS)
def test_session_memory_appends_list_input_by_default(tmp_path: Path, runner_method: str) -> None:
    async def main() -> None:
        session = _session(tmp_path, "test_validation_parametrized")
        model = ScriptedModel()
        agent = Agent(name="test", model=model)
        initial_history: list[TResponseInputItem] = [
            {"role": "user", "content": "Earlier message"},
            {"role": "assistant", "content": "Saved reply"},
        ]
        await session.add_items(initial_history)
        list_input = [{"role": "user", "content": "Test message"}]
        model.enqueue([get_text_message("This should run")])
        await run_agent_async(runner_method, agent, list_input, session=session)
        assert model.calls[-1].input == initial_history + list_input
        session.close()

    asyncio.run(main())


@pytest.mark.parametrize("runner_method", RUNNER_METHODS)
def test_session_callback_prepared_input(tmp_path: Path, runner_method: str) -> None:
    async def main() -> None:
        model = ScriptedModel()
        agent = Agent(name="test", model=model)
        session = _session(tmp_path, "session_1")
        initial_history: list[TResponseInputItem] = [
            {"role": "user", "content": "Hello there."},
            {"role": "assistant", "content": "Hi, I'm here to assist you."},
        ]
        try:
            await session.add_items(initial_history)

            def filter_assistant_messages(history: list[Any], new_input: list[Any]) -> list[Any]:
                return [item for item in history if item["role"] == "user"] + new_input

            new_turn_input = [{"role": "user", "content": "What your name?"}]
            model.enqueue([get_text_message("I'm gpt-4o")])
            await run_agent_async(
                runner_method,
                agent,
                new_turn_input,
                session=session,
                run_config=RunConfig(session_input_callback=filter_assistant_messages),
            )
            assert len(model.calls[-1].input) == 2
            assert model.calls[-1].input == [initial_history[0], new_turn_input[0]]
        finally:
            session.close()

    asyncio.run(main())


@pytest.mark.parametrize("runner_method", RUNNER_METHODS)
def test_session_callback_repeating_history_does_not_grow_session(tmp_path: Path, runner_method: str) -> None:
    async def main() -> None:
        model = ScriptedModel()
        agent = Agent(name="test", model=model)
        session = _session(tmp_path, "session_repeat")

        def repeat_first(history: list[Any], new_input: list[Any]) -> list[Any]:
            if not history:
                return new_input
            return [*history, history[0], *new_input]

        try:
            for turn in range(3):
                model.enqueue([get_text_message(f"assistant {turn}")])
                await run_agent_async(
                    runner_method,
                    agent,
                    f"user {turn}",
                    session=session,
                    run_config=RunConfig(session_input_callback=repeat_first),
                )
            stored = await session.get_items()
            user_messages = [item for item in stored if item.get("role") == "user"]
            assert [item.get("content") for item in user_messages] == ["user 0", "user 1", "user 2"]
            assert len(stored) == 6
        finally:
            session.close()

    asyncio.run(main())


def test_sqlite_session_unicode_content(tmp_path: Path) -> None:
    async def main() -> None:
        session = _session(tmp_path, "unicode_test")
        await session.add_items(
            [
                {"role": "user", "content": "こんにちは"},
                {"role": "assistant", "content": "😊👍"},
                {"role": "user", "content": "Привет"},
            ]
        )
        retrieved = await session.get_items()
        assert [item.get("content") for item in retrieved] == ["こんにちは", "😊👍", "Привет"]
        session.close()

    asyncio.run(main())


def test_sqlite_session_special_characters_and_sql_injection(tmp_path: Path) -> None:
    async def main() -> None:
        session = _session(tmp_path, "special_chars_test")
        contents = [
            "O'Reilly",
            "DROP TABLE sessions;",
            '"SELECT * FROM users WHERE name = "admin";"',
            "Robert'); DROP TABLE students;--",
            "Normal message",
        ]
        roles = ["user", "assistant", "user", "assistant", "user"]
        await session.add_items(
            [cast(TResponseInputItem, {"role": r, "content": c}) for r, c in zip(roles, contents, strict=True)]
        )
        retrieved = await session.get_items()
        assert len(retrieved) == len(contents)
        assert [item.get("content") for item in retrieved] == contents
        session.close()

    asyncio.run(main())


def test_sqlite_session_concurrent_access(tmp_path: Path) -> None:
    session = _session(tmp_path, "concurrent_test")
    items: list[TResponseInputItem] = [{"role": "user", "content": f"Message {i}"} for i in range(10)]

    def add_item(item: TResponseInputItem) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop.run_until_complete(session.add_items([item]))
        loop.close()

    with concurrent.futures.ThreadPoolExecutor(max_workers=5) as executor:
        list(executor.map(add_item, items))  # (the original drops the results; errors must surface here)

    retrieved = asyncio.run(session.get_items())
    assert {item.get("content") for item in retrieved} == {f"Message {i}" for i in range(10)}
    session.close()


def test_sqlite_session_failed_add_items_releases_write_lock(tmp_path: Path) -> None:
    """Adapted: the refusal is agentlog's ConversionError (the original expects json.dumps' TypeError)."""

    async def main() -> None:
        session = _session(tmp_path, "rollback_test")
        unserializable = cast(TResponseInputItem, {"role": "user", "content": object()})
        with pytest.raises(ConversionError):
            await session.add_items([unserializable])
        assert JsonlBackend(str(tmp_path / "store"), read_only=True).load_stored("rollback_test") is None
        await session.add_items([{"role": "user", "content": "after failure"}])
        assert [item.get("content") for item in await session.get_items()] == ["after failure"]
        session.close()

    asyncio.run(main())


def test_session_add_items_exception_propagates_in_streamed(tmp_path: Path) -> None:
    async def main() -> None:
        session = _session(tmp_path, "test_exception_session")

        async def _failing_add_items(_items: Any) -> None:
            raise RuntimeError("Simulated session.add_items failure")

        session.add_items = _failing_add_items  # type: ignore[method-assign]
        model = ScriptedModel()
        agent = Agent(name="test", model=model)
        model.enqueue([get_text_message("This should not be reached")])
        result = Runner.run_streamed(agent, "Hello", session=session)

        async def consume_stream() -> None:
            async for _event in result.stream_events():
                pass

        with pytest.raises(RuntimeError, match=r"Simulated session\.add_items failure"):
            await asyncio.wait_for(consume_stream(), timeout=30.0)
        session.close()

    asyncio.run(main())


def test_session_settings_default(tmp_path: Path) -> None:
    session = _session(tmp_path, "default_settings_test")
    assert isinstance(session.session_settings, SessionSettings)
    assert session.session_settings.limit is None
    session.close()


def test_session_settings_constructor(tmp_path: Path) -> None:
    session = _session(tmp_path, "constructor_settings_test", session_settings=SessionSettings(limit=5))
    assert session.session_settings is not None
    assert session.session_settings.limit == 5
    session.close()


def test_session_settings_constructor_normalizes_dictionary(tmp_path: Path) -> None:
    session = _session(tmp_path, "dictionary_settings_test", session_settings={"limit": 0})
    assert isinstance(session.session_settings, SessionSettings)
    assert session.session_settings.limit == 0
    assert session.session_settings.resolve({"limit": 4}).limit == 4
    session.close()


def test_session_settings_rejects_unknown_dictionary_fields(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="Unknown session settings: limitt"):
        _session(tmp_path, "invalid_settings_test", session_settings={"limitt": 1})


def test_get_items_uses_session_settings_limit(tmp_path: Path) -> None:
    async def main() -> None:
        session = _session(tmp_path, "uses_settings_limit_test", session_settings=SessionSettings(limit=3))
        await session.add_items([{"role": "user", "content": f"Message {i}"} for i in range(5)])
        retrieved = await session.get_items()
        assert [item.get("content") for item in retrieved] == ["Message 2", "Message 3", "Message 4"]
        session.close()

    asyncio.run(main())


def test_get_items_explicit_limit_overrides_session_settings(tmp_path: Path) -> None:
    async def main() -> None:
        session = _session(tmp_path, "explicit_override_test", session_settings=SessionSettings(limit=5))
        await session.add_items([{"role": "user", "content": f"Message {i}"} for i in range(10)])
        retrieved = await session.get_items(limit=2)
        assert [item.get("content") for item in retrieved] == ["Message 8", "Message 9"]
        session.close()

    asyncio.run(main())


def test_runner_with_session_settings_override(tmp_path: Path) -> None:
    async def main() -> None:
        session = _session(tmp_path, "runner_override_test", session_settings=SessionSettings(limit=100))
        await session.add_items([{"role": "user", "content": f"Turn {i}"} for i in range(10)])
        model = ScriptedModel()
        agent = Agent(name="test", model=model)
        model.enqueue([get_text_message("Got it")])
        await Runner.run(
            agent, "New question", session=session, run_config=RunConfig(session_settings=SessionSettings(limit=2))
        )
        history_items = [item for item in model.calls[-1].input if item.get("content") != "New question"]
        assert len(history_items) == 2
        session.close()

    asyncio.run(main())


@pytest.mark.parametrize("operation", ["add", "pop", "clear"])
def test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome(tmp_path: Path, operation: str) -> None:
    """Adapted: the caller is cancelled (twice) while the mutation waits for durability; the change is
    made exactly once and is on disk, and the cancellation still propagates."""

    async def main() -> None:
        session = _session(tmp_path, f"post_commit_{operation}")
        item: TResponseInputItem = {"role": "user", "content": "once"}
        if operation != "add":
            await session.add_items([item])
        mutation: asyncio.Task[Any]
        if operation == "add":
            mutation = asyncio.create_task(session.add_items([item]))
        elif operation == "pop":
            mutation = asyncio.create_task(session.pop_item())
        else:
            mutation = asyncio.create_task(session.clear_session())
        await asyncio.sleep(0)  # the task has appended and now awaits the flush barrier
        mutation.cancel()
        await asyncio.sleep(0)
        mutation.cancel()
        with pytest.raises(asyncio.CancelledError):
            await mutation
        assert mutation.cancelled()
        assert await session.get_items() == ([item] if operation == "add" else [])
        session.close()
        reopened = _session(tmp_path, f"post_commit_{operation}")  # and it was durable
        assert await reopened.get_items() == ([item] if operation == "add" else [])
        reopened.close()

    asyncio.run(main())


# --- tests/memory/test_session_limit.py ---------------------------------------------------------------


@pytest.mark.parametrize("runner_method", RUNNER_METHODS)
def test_session_limit_parameter(tmp_path: Path, runner_method: str) -> None:
    async def main() -> None:
        session = _session(tmp_path, "limit_test")
        model = ScriptedModel()
        agent = Agent(name="test", model=model)
        for i in (1, 2, 3):
            model.enqueue([get_text_message(f"Reply {i}")])
            await run_agent_async(runner_method, agent, f"Message {i}", session=session)
        assert len(await session.get_items()) == 6
        model.enqueue([get_text_message("Reply 4")])
        await run_agent_async(
            runner_method,
            agent,
            "Message 4",
            session=session,
            run_config=RunConfig(session_settings=SessionSettings(limit=2)),
        )
        last_input = model.calls[-1].input
        assert len(last_input) == 3
        assert last_input[0].get("content") == "Message 3"
        assert last_input[1].get("content")[0]["text"] == "Reply 3"
        assert last_input[2].get("content") == "Message 4"
        session.close()

    asyncio.run(main())


@pytest.mark.parametrize("runner_method", RUNNER_METHODS)
def test_session_limit_drops_unmatched_history_function_call_output(tmp_path: Path, runner_method: str) -> None:
    async def main() -> None:
        session = _session(tmp_path, "limit_tool_pair")
        history = cast(
            list[TResponseInputItem],
            [
                {"role": "user", "content": "What is the weather?"},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "It is sunny.", "annotations": []}],
                },
            ],
        )
        await session.add_items(history)
        assert await session.get_items(limit=2) == history[-2:]
        model = ScriptedModel()
        model.enqueue([get_text_message("Tomorrow is sunny too.")])
        agent = Agent(name="test", model=model)
        await run_agent_async(
            runner_method,
            agent,
            "What about tomorrow?",
            session=session,
            run_config=RunConfig(session_settings=SessionSettings(limit=2)),
        )
        assert model.calls[-1].input == [history[-1], {"role": "user", "content": "What about tomorrow?"}]
        session.close()

    asyncio.run(main())


@pytest.mark.parametrize("runner_method", RUNNER_METHODS)
def test_session_limit_zero(tmp_path: Path, runner_method: str) -> None:
    async def main() -> None:
        session = _session(tmp_path, "limit_zero_test")
        model = ScriptedModel()
        agent = Agent(name="test", model=model)
        for i in (1, 2):
            model.enqueue([get_text_message(f"Reply {i}")])
            await run_agent_async(runner_method, agent, f"Message {i}", session=session)
        model.enqueue([get_text_message("Reply 3")])
        await run_agent_async(
            runner_method,
            agent,
            "Message 3",
            session=session,
            run_config=RunConfig(session_settings=SessionSettings(limit=0)),
        )
        last_input = model.calls[-1].input
        assert len(last_input) == 1
        assert last_input[0].get("content") == "Message 3"
        session.close()

    asyncio.run(main())


@pytest.mark.parametrize("runner_method", RUNNER_METHODS)
def test_session_limit_none_gets_all_history(tmp_path: Path, runner_method: str) -> None:
    async def main() -> None:
        session = _session(tmp_path, "limit_none_test")
        model = ScriptedModel()
        agent = Agent(name="test", model=model)
        for i in range(1, 6):
            model.enqueue([get_text_message(f"Reply {i}")])
            await run_agent_async(runner_method, agent, f"Message {i}", session=session)
        assert len(await session.get_items()) == 10
        model.enqueue([get_text_message("Reply 6")])
        await run_agent_async(
            runner_method,
            agent,
            "Message 6",
            session=session,
            run_config=RunConfig(session_settings=SessionSettings(limit=None)),
        )
        last_input = model.calls[-1].input
        assert len(last_input) == 11
        assert last_input[0].get("content") == "Message 1"
        assert last_input[-1].get("content") == "Message 6"
        session.close()

    asyncio.run(main())


@pytest.mark.parametrize("runner_method", RUNNER_METHODS)
def test_session_limit_larger_than_history(tmp_path: Path, runner_method: str) -> None:
    async def main() -> None:
        session = _session(tmp_path, "limit_large_test")
        model = ScriptedModel()
        agent = Agent(name="test", model=model)
        model.enqueue([get_text_message("Reply 1")])
        await run_agent_async(runner_method, agent, "Message 1", session=session)
        model.enqueue([get_text_message("Reply 2")])
        await run_agent_async(
            runner_method,
            agent,
            "Message 2",
            session=session,
            run_config=RunConfig(session_settings=SessionSettings(limit=100)),
        )
        last_input = model.calls[-1].input
        assert len(last_input) == 3
        assert last_input[0].get("content") == "Message 1"
        assert last_input[1].get("content")[0]["text"] == "Reply 1"
        assert last_input[2].get("content") == "Message 2"
        session.close()

    asyncio.run(main())
