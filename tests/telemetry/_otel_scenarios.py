"""Real agent runs for the span tests: a parent with a tool and a delegation, the child in its own session.

The model is scripted (it answers from the request), everything else is the real loop, store and, where
a test asks, a persisted backend. Every piece of content carries a canary so a test can prove it never
left when capture is off.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import agentlog as al
from agentlog.agent.loop import Agent, AgentOptions
from agentlog.agent.subagents import SubagentConfig
from agentlog.agent.tools import FunctionTool, ToolOutcome
from agentlog.llm.types import GenerateRequest, StreamChunk
from agentlog.testing.provider import text_reply, tool_call_reply

CANARY_PROMPT = "CANARY-PROMPT-7f3a"
CANARY_ANSWER = "CANARY-ANSWER-51bd"
CANARY_ARGS = "CANARY-ARGS-c0de"
CANARY_RESULT = "CANARY-RESULT-9e2f"
CANARY_CHILD = "CANARY-CHILD-a11c"
CANARY_SYSTEM = "CANARY-SYSTEM-b0b0"
CANARIES = (CANARY_PROMPT, CANARY_ANSWER, CANARY_ARGS, CANARY_RESULT, CANARY_CHILD, CANARY_SYSTEM)

USAGE = {"inputTokens": 100, "outputTokens": 20, "cacheReadTokens": 30, "cacheWriteTokens": 5, "reasoningTokens": 7}


class RoutedProvider:
    def __init__(self, route: Callable[[GenerateRequest], list[StreamChunk]]) -> None:
        self.route = route

    async def stream(
        self, request: GenerateRequest, *, signal: asyncio.Event | None = None
    ) -> AsyncIterator[StreamChunk]:
        for chunk in self.route(request):
            yield copy.deepcopy(chunk)
            await asyncio.sleep(0)


def _has_tool_result(request: GenerateRequest) -> bool:
    last = request.messages[-1]
    return last["role"] == "user" and any(b.get("type") == "tool-result" for b in last["content"])


def _tool_results(request: GenerateRequest) -> int:
    return sum(
        1 for m in request.messages for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool-result"
    )


def route(parent_id: str) -> Callable[[GenerateRequest], list[StreamChunk]]:
    """Parent: first a lookup tool call, then a delegation, then the answer. Child: one answer."""

    def answer(request: GenerateRequest) -> list[StreamChunk]:
        if request.session_id != parent_id:
            return text_reply(f"child answer {CANARY_CHILD}", usage={"inputTokens": 10, "outputTokens": 5})
        done = _tool_results(request)
        if done == 0:
            return tool_call_reply(("c1", "lookup", json.dumps({"q": CANARY_ARGS})), usage=USAGE)
        if done == 1:
            return tool_call_reply(("d1", "delegate", json.dumps({"task": "summarise"})), usage=USAGE)
        return text_reply(f"final {CANARY_ANSWER}", pieces=3, usage=USAGE)

    return answer


def lookup_tool() -> FunctionTool:
    async def lookup(args: dict[str, Any], ctx: Any) -> ToolOutcome:
        return ToolOutcome.text(f"found {CANARY_RESULT}")

    return FunctionTool(
        "lookup",
        "Look something up.",
        {"type": "object", "properties": {"q": {"type": "string"}}},
        lookup,
    )


def run_parent_with_child(
    store: al.SessionStore, parent_id: str = "parent", *, release_child: bool = False
) -> tuple[al.Session, al.Session]:
    """One turn of the parent: a tool call, a delegation (the child answers), the final answer.
    ``release_child``: the child's session is disposed as soon as its answer is in (before the parent's
    tool result names it)."""
    session = store.create(parent_id, meta={"cwd": "/work/project"})
    agent = Agent(
        session,
        RoutedProvider(route(parent_id)),
        AgentOptions(provider="deepseek", model="deepseek-chat", system=f"You help. {CANARY_SYSTEM}"),
        tools=[lookup_tool()],
        durable=False,
        subagents=SubagentConfig(default_provider="spawn", release_one_shot=release_child),
    )
    agent.followup(f"please {CANARY_PROMPT}")
    children: list[al.Session] = []
    unsubscribe = store.on_disposed(children.append)
    outcomes = asyncio.run(agent.run())
    unsubscribe()
    assert [o.reason for o in outcomes] == [{"kind": "completed"}]
    if release_child:
        (child,) = [s for s in children if s.header.get("parentSession") == parent_id]
    else:
        (child,) = [s for s in store.list() if s.header.get("parentSession") == parent_id]
    return session, child
