"""Checkpoint barriers (persistence spec §6, checklist §8.13)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

import agentlog as al
from agentlog.agent.checkpoint import TOOL_ABORTED_BEFORE_DISPATCH, CheckpointPolicy, aborted_before_dispatch_result
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.memory import MemoryBackend


class DiskUnavailable(RuntimeError):
    pass


def _store_with_order() -> tuple[al.SessionStore, list[str]]:
    store = al.SessionStore()
    order: list[str] = []

    def flush(session: al.Session) -> None:
        order.append("flush:start")
        order.append("flush:end")

    store.on_flush(flush)
    return store, order


def test_checkpoint__awaits_flush_before_constructing_the_model_stream() -> None:  # spec 8.13 #319
    store, order = _store_with_order()
    session = store.create("s1")
    policy = CheckpointPolicy(store)

    async def adapter() -> AsyncIterator[str]:
        order.append("adapter")
        yield "token"

    async def run() -> list[str]:
        stream = policy.guard_stream(session, adapter)
        assert order == []  # lazy: nothing happens until iterated
        return [item async for item in stream]

    assert asyncio.run(run()) == ["token"]
    assert order == ["flush:start", "flush:end", "adapter"]


def test_checkpoint__request_without_live_session_is_not_checkpointed() -> None:  # spec 8.13 #320, #321
    store, order = _store_with_order()
    policy = CheckpointPolicy(store)
    policy.before_model_request(None)
    policy.before_model_request("no-such-session")
    detached = al.Session.create("detached")
    policy.before_model_request(detached)
    session = store.create("gone")
    store.dispose(session)
    policy.before_model_request(session)
    assert order == []


def test_checkpoint__rejected_flush_never_dispatches_the_adapter() -> None:  # spec 8.13 #322
    store = al.SessionStore()

    def failing(session: al.Session) -> None:
        raise DiskUnavailable("disk unavailable")

    store.on_flush(failing)
    session = store.create("s1")
    policy = CheckpointPolicy(store)
    called: list[bool] = []

    async def adapter() -> AsyncIterator[str]:
        called.append(True)
        yield "x"

    async def run() -> None:
        async for _ in policy.guard_stream(session, adapter):
            pass

    with pytest.raises(DiskUnavailable, match="disk unavailable"):
        asyncio.run(run())
    with pytest.raises(DiskUnavailable):
        policy.before_model_request(session)
    assert called == []


def test_checkpoint__flushes_before_a_top_level_tool_body() -> None:  # spec 8.13 #323
    store, order = _store_with_order()
    session = store.create("s1")
    policy = CheckpointPolicy(store)

    async def body() -> dict[str, Any]:
        order.append("tool")
        return {"content": [{"type": "text", "text": "ok"}]}

    result = asyncio.run(policy.arun_tool(session, body))
    assert result["content"][0]["text"] == "ok"
    assert order == ["flush:start", "flush:end", "tool"]
    assert policy.before_tool_body(session) is None


def test_checkpoint__cancellation_during_the_tool_checkpoint_prevents_dispatch() -> None:  # spec 8.13 #324
    store = al.SessionStore()
    cancel = threading.Event()
    store.on_flush(lambda session: cancel.set())  # the cancellation lands while the barrier runs
    session = store.create("s1")
    policy = CheckpointPolicy(store)
    ran: list[bool] = []

    async def body() -> dict[str, Any]:
        ran.append(True)
        return {}

    result = asyncio.run(policy.arun_tool(session, body, cancelled=cancel))
    assert result == aborted_before_dispatch_result()
    assert result["error"]["info"]["code"] == TOOL_ABORTED_BEFORE_DISPATCH
    assert result["content"] == [{"type": "text", "text": "Error: tool call aborted before dispatch"}]
    assert ran == []
    assert policy.before_tool_body(session, cancelled=lambda: True) == aborted_before_dispatch_result()


def test_checkpoint__rejected_tool_checkpoint_becomes_an_error_result() -> None:  # spec 8.13 #325
    store = al.SessionStore()

    def failing(session: al.Session) -> None:
        raise DiskUnavailable("disk unavailable")

    store.on_flush(failing)
    session = store.create("s1")
    ran: list[bool] = []

    async def body() -> dict[str, Any]:
        ran.append(True)
        return {}

    result = asyncio.run(CheckpointPolicy(store).arun_tool(session, body))
    assert result == {"content": [{"type": "text", "text": "Error: disk unavailable"}], "isError": True}
    assert ran == []


def test_checkpoint__nested_tool_dispatch_reuses_the_outer_checkpoint() -> None:  # spec 8.13 #326
    store, order = _store_with_order()
    session = store.create("s1")
    policy = CheckpointPolicy(store)
    assert policy.before_tool_body(session, nested=True) is None
    assert asyncio.run(policy.abefore_tool_body(session, nested=True)) is None
    assert order == []


def test_checkpoint__pre_step_flushes_the_agents_session() -> None:  # spec 8.13 #327
    store, order = _store_with_order()
    session = store.create("s1")
    policy = CheckpointPolicy(store)
    policy.before_step(session)
    asyncio.run(policy.abefore_step(session))
    assert order == ["flush:start", "flush:end"] * 2


def test_checkpoint__events_are_durable_before_the_tool_body_runs() -> None:
    store = al.SessionStore()
    backend = MemoryBackend()
    coordinator = PersistenceCoordinator(store, backend, batch_delay_ms=60_000)
    try:
        session = store.create("s1")
        session.append("turn/start", {"turn": 1})
        session.append("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "rm", "arguments": "{}"})
        seen: list[int] = []

        async def body() -> dict[str, Any]:
            stored = backend.load_stored("s1")
            assert stored is not None
            seen.append(len(stored.events))
            return {"content": []}

        asyncio.run(CheckpointPolicy(store).arun_tool(session, body))
        assert seen == [2]
    finally:
        coordinator.close()
