"""A JSONL store in which agentlog ran a parent delegating to a fork child, a spawn child and a
continuable child (for ``load_check.mjs``: does the original load each of them?).

Usage: PYTHONPATH=$PWD/src python benchmarks/original/make_subagent_store.py <root>
Prints one JSON line: {"root", "parent", "children": {"fork"|"spawn"|"continuable": id}}.

The parent ("lead", cwd ``/work/project``) answers one turn, switches its sandbox to ``workspace-write``
(so the children get the delegated ``sandbox/mode`` too), then in a second turn calls ``delegate`` three
times: a fork child, a spawn child, and a continuable fork child labelled ``notes`` with a tool filter and
a persona. A scripted in-process model answers every session from the request it is sent.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import agentlog as al
from agentlog.agent.events import SANDBOX_MODE
from agentlog.agent.loop import Agent, AgentOptions
from agentlog.agent.subagents import SubagentConfig
from agentlog.agent.tools import FunctionTool, ToolOutcome, ToolRegistry
from agentlog.llm.types import GenerateRequest, StreamChunk
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing import text_reply, tool_call_reply


def _last_user_text(request: GenerateRequest) -> str:
    for message in reversed(request.messages):
        if message["role"] == "user":
            texts = [b.get("text", "") for b in message["content"] if b.get("type") == "text"]
            if texts:
                return "\n".join(texts)
    return ""


def _route(request: GenerateRequest) -> list[StreamChunk]:
    last = request.messages[-1]
    if last["role"] == "user" and any(b.get("type") == "tool-result" for b in last["content"]):
        return text_reply("all three answered", usage={"inputTokens": 30, "outputTokens": 4})
    prompt = _last_user_text(request)
    if prompt == "hello":
        return text_reply("hi, I lead", usage={"inputTokens": 5, "outputTokens": 3})
    if prompt == "delegate three":
        calls = [
            ("call-fork", {"task": "summarise so far", "provider": "fork"}),
            ("call-spawn", {"task": "find A", "provider": "spawn"}),
            (
                "call-notes",
                {
                    "task": "keep notes: alpha",
                    "mode": "continuable",
                    "label": "notes",
                    "provider": "fork",
                    "tools": ["lookup"],
                    "persona": "You keep notes.",
                },
            ),
        ]
        return tool_call_reply(*((cid, "delegate", json.dumps(args)) for cid, args in calls))
    return text_reply(f"child did: {prompt}", usage={"inputTokens": 10, "outputTokens": 5})


class _Model:
    async def stream(
        self, request: GenerateRequest, *, signal: asyncio.Event | None = None
    ) -> AsyncIterator[StreamChunk]:
        for chunk in _route(request):
            yield chunk
            await asyncio.sleep(0)


async def _lookup(args: Any, ctx: Any) -> ToolOutcome:
    return ToolOutcome.text("found")


async def _main(root: str) -> dict[str, Any]:
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(root))
    try:
        session = store.create("lead", meta={"cwd": "/work/project"})
        tools = ToolRegistry([FunctionTool("lookup", "look up", {"type": "object", "properties": {}}, _lookup)])
        agent = Agent(
            session,
            _Model(),
            AgentOptions(provider="deepseek", model="demo-model", system="You lead."),
            tools=tools,
            subagents=SubagentConfig(),
        )
        agent.followup("hello")
        await agent.run()
        session.append_custom(SANDBOX_MODE, {"mode": "workspace-write"})
        agent.followup("delegate three")
        await agent.run()
        children: dict[str, str] = {}
        for event in session.events:
            if event["type"] == "tool/result":
                record = event["data"]["meta"]["subagent"]
                kind = "continuable" if record["mode"] == "continuable" else record["provider"]
                children[kind] = record["sessionId"]
        for live in store.list():
            store.flush(live)
        return {"root": root, "parent": session.id, "children": children}
    finally:
        coordinator.close()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_main(sys.argv[1]))))
