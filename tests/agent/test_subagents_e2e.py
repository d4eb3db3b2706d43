"""Delegation end to end: the real ``openai`` client against the local demo model server, a durable JSONL
store, a parent delegating to two children in parallel (one continuable), then a restart in which the
continuable child is continued from disk by its label."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import agentlog as al
from agentlog.agent.events import SUBAGENT_DESCRIPTOR
from agentlog.agent.loop import Agent, AgentOptions
from agentlog.agent.subagents import SubagentConfig
from agentlog.llm.openai_compat import OpenAICompatibleProvider
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.sqlite.backend import SqliteBackend
from agentlog.testing.demo_server import DemoModelServer, RecordedRequest, Reply
from agentlog.testing.demo_server import ToolCall as ScriptedCall


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def answer(request: RecordedRequest) -> Reply:
    """One model for every session: it tells parent and children apart by what they were asked."""
    messages = request.body["messages"]
    last = messages[-1]
    users = [_text(m["content"]) for m in messages if m["role"] == "user"]
    if last["role"] == "tool":
        return Reply(text="Summary: " + " | ".join(_text(m["content"]) for m in messages if m["role"] == "tool"))
    prompt = users[-1]
    if prompt == "research both":
        return Reply(
            tool_calls=[
                ScriptedCall("delegate", {"task": "find A"}, id="call-a"),
                ScriptedCall(
                    "delegate", {"task": "keep notes: alpha", "mode": "continuable", "label": "notes"}, id="call-n1"
                ),
            ]
        )
    if prompt == "one more note":
        return Reply(
            tool_calls=[
                ScriptedCall(
                    "delegate", {"task": "keep notes: beta", "mode": "continuable", "label": "notes"}, id="call-n2"
                )
            ]
        )
    if prompt == "find A":
        return Reply(text="A is 1")
    if prompt.startswith("keep notes: "):
        notes = [u.removeprefix("keep notes: ") for u in users if u.startswith("keep notes: ")]
        return Reply(text=f"notes so far: {', '.join(notes)}")
    return Reply(text=f"unexpected prompt {prompt!r}")


def _backend(root: Path, kind: str) -> Any:
    if kind == "sqlite":
        root.mkdir(parents=True, exist_ok=True)
        return SqliteBackend(str(root / "sessions.sqlite3"))
    return JsonlBackend(str(root))


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_a_parent_delegates_to_two_children_in_parallel_and_continues_one_after_a_restart(
    tmp_path: Path, kind: str
) -> None:
    root = tmp_path / "store"
    _delegate_restart_and_continue(tmp_path, lambda: _backend(root, kind))


def test_delegation_on_postgres_keeps_each_child_in_its_own_session(
    tmp_path: Path, pg_dsn: str, pg_schema: str
) -> None:
    from agentlog.persistence.postgres.backend import PostgresBackend

    _delegate_restart_and_continue(tmp_path, lambda: PostgresBackend(pg_dsn, schema=pg_schema))


def _delegate_restart_and_continue(tmp_path: Path, make_backend: Callable[[], Any]) -> None:

    async def turn(
        prompt: str, server: DemoModelServer
    ) -> tuple[list[Any], list[dict[str, Any]], dict[str, al.Session]]:
        store = al.SessionStore()
        coordinator = PersistenceCoordinator(store, make_backend())
        try:
            if prompt == "research both":
                session = store.create("lead", meta={"cwd": str(tmp_path)})
            else:
                session = coordinator.resume("lead")
            provider = OpenAICompatibleProvider(base_url=server.base_url, api_key="k", model="demo-model")
            agent = Agent(
                session,
                provider,
                AgentOptions(provider="deepseek", model="demo-model", system="You lead.", cwd=tmp_path),
                subagents=SubagentConfig(open_session=coordinator.resume),
            )
            agent.followup(prompt)
            outcomes = await agent.run()
            results = [al.thaw(e["data"]) for e in session.events if e["type"] == "tool/result"]
            children = {s.id: s for s in store.list() if s.header.get("parentSession") == "lead"}
            for child in children.values():
                store.flush(child)
            return outcomes, results, children
        finally:
            coordinator.close()

    with DemoModelServer([answer] * 8) as server:
        outcomes, results, children = asyncio.run(turn("research both", server))
        assert [o.reason for o in outcomes] == [{"kind": "completed"}]
        assert len(children) == 2
        texts = [r["message"]["content"][0]["content"][0]["text"] for r in results]
        assert texts == ["A is 1", "notes so far: alpha"]
        records = [r["meta"]["subagent"] for r in results]
        assert [r["mode"] for r in records] == ["one-shot", "continuable"]
        notes_id = records[1]["sessionId"]

        outcomes, results, children = asyncio.run(turn("one more note", server))
        assert [o.reason for o in outcomes] == [{"kind": "completed"}]
        last = results[-1]
        assert last["message"]["content"][0]["content"][0]["text"] == "notes so far: alpha, beta"
        assert last["meta"]["subagent"]["sessionId"] == notes_id and last["meta"]["subagent"]["resumed"] is True
        assert server.errors == []

    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, make_backend())
    try:
        notes = coordinator.resume(notes_id)
        header = notes.header
        assert (header["parentSession"], header["origin"], header["delegationDepth"]) == ("lead", "subagent", 1)
        types = [e["type"] for e in notes.events]
        assert types.count(SUBAGENT_DESCRIPTOR) == 1 and types.count("turn/end") == 2
        assert al.interrupted_turn_closers(notes.events) == []
    finally:
        coordinator.close()
