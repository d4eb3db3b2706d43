"""Delegation to subagents (runtime spec §6.8): the child's header, seed, delegated policy and descriptor,
one-shot and continuable children, tool filters and route overrides, parallel delegations, the depth cap,
the parent's tool result naming the child's session and answer, and cooperative cancellation."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import agentlog as al
from agentlog.agent.events import APPROVAL_POLICY, SANDBOX_MODE, SUBAGENT_DESCRIPTOR
from agentlog.agent.loop import Agent, AgentOptions, SubagentUpdate
from agentlog.agent.subagents import SubagentConfig, child_session_meta, fork_seed
from agentlog.agent.tools import FunctionTool, ToolOutcome, ToolRegistry
from agentlog.errors import InvalidAgentOptionError, SubagentDepthError, SubagentLabelError
from agentlog.llm.types import GenerateRequest, StreamChunk, failure_chunk
from agentlog.testing.provider import text_reply, tool_call_reply

Route = Callable[[GenerateRequest], list[StreamChunk]]


class RoutedProvider:
    """A model that answers each request from the request itself (parallel children ask in any order)."""

    def __init__(self, route: Route, gate: Callable[[GenerateRequest], Any] | None = None) -> None:
        self.route = route
        self.gate = gate
        self.requests: list[GenerateRequest] = []

    async def stream(
        self, request: GenerateRequest, *, signal: asyncio.Event | None = None
    ) -> AsyncIterator[StreamChunk]:
        self.requests.append(request)
        if self.gate is not None:
            waiter = self.gate(request)
            if waiter is not None:
                waiting = asyncio.ensure_future(waiter)
                pending = {waiting}
                if signal is not None:  # a real provider stops waiting for the server when aborted
                    pending.add(asyncio.ensure_future(signal.wait()))
                _done, rest = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in rest:
                    task.cancel()
        for chunk in self.route(request):
            if signal is not None and signal.is_set():
                yield failure_chunk({"message": "aborted", "code": "ABORTED"})
                return
            yield copy.deepcopy(chunk)
            await asyncio.sleep(0)


def last_user_text(request: GenerateRequest) -> str:
    for message in reversed(request.messages):
        if message["role"] == "user":
            texts = [b.get("text", "") for b in message["content"] if b.get("type") == "text"]
            if texts:
                return "\n".join(texts)
    return ""


def has_tool_result(request: GenerateRequest) -> bool:
    last = request.messages[-1]
    return last["role"] == "user" and any(b.get("type") == "tool-result" for b in last["content"])


def delegate_call(call_id: str, **args: Any) -> tuple[str, str, str]:
    return (call_id, "delegate", json.dumps(args))


def echo_child(request: GenerateRequest) -> list[StreamChunk]:
    return text_reply(f"child did: {last_user_text(request)}", usage={"inputTokens": 10, "outputTokens": 5})


def make_parent(
    route: Route,
    *,
    config: SubagentConfig | None = None,
    tools: ToolRegistry | None = None,
    store: al.SessionStore | None = None,
    gate: Callable[[GenerateRequest], Any] | None = None,
    session_id: str = "parent",
) -> tuple[Agent, RoutedProvider, al.SessionStore]:
    store = store or al.SessionStore()
    al.SessionInvariants(store).install()
    session = store.create(session_id, meta={"cwd": "/work/project"})
    provider = RoutedProvider(route, gate)
    agent = Agent(
        session,
        provider,
        AgentOptions(provider="deepseek", model="demo-model", system="You are the parent."),
        tools=tools,
        durable=False,
        subagents=config or SubagentConfig(),
    )
    return agent, provider, store


def children_of(store: al.SessionStore, parent: str) -> list[al.Session]:
    return [s for s in store.list() if s.header.get("parentSession") == parent]


def parent_route(*calls: tuple[str, str, str]) -> Route:
    """The parent delegates once (``calls``), then answers with what its tools returned."""

    def route(request: GenerateRequest) -> list[StreamChunk]:
        if request.session_id != "parent":
            return echo_child(request)
        if has_tool_result(request):
            return text_reply("parent done")
        return tool_call_reply(*calls)

    return route


def tool_results(session: al.Session) -> list[dict[str, Any]]:
    return [al.thaw(e["data"]) for e in session.events if e["type"] == "tool/result"]


# --- one-shot spawn through the tool ----------------------------------------------------------------------


def test_delegate_tool_runs_a_spawned_child_in_its_own_linked_session() -> None:
    agent, _provider, store = make_parent(parent_route(delegate_call("d1", task="count the files")))
    agent.followup("please delegate")
    outcomes = asyncio.run(agent.run())
    assert [o.reason for o in outcomes] == [{"kind": "completed"}]
    (child,) = children_of(store, "parent")
    header = child.header
    assert {k: header[k] for k in ("cwd", "parentSession", "origin", "delegationDepth")} == {
        "cwd": "/work/project",
        "parentSession": "parent",
        "origin": "subagent",
        "delegationDepth": 1,
    }
    assert "seedLength" not in header  # spawn: no seed
    types = [e["type"] for e in child.events]
    assert types[0] == APPROVAL_POLICY  # the delegated policy first: a spawn child has no seed, so no end-seed
    assert al.thaw(child.events[0]["data"]) == {"policy": "never", "source": "delegation"}
    assert SANDBOX_MODE not in types  # the parent set none
    assert types.count(SUBAGENT_DESCRIPTOR) == 1
    descriptor_at = types.index(SUBAGENT_DESCRIPTOR)
    assert types.index("turn/start") < descriptor_at < types.index("request/header")  # first turn, before the request
    assert al.thaw(child.events[descriptor_at]["data"]) == {"version": 2, "mode": "one-shot", "provider": "spawn"}
    (result,) = tool_results(agent.session)
    text = result["message"]["content"][0]["content"][0]["text"]
    assert text == "child did: count the files"
    record = result["meta"]["subagent"]
    assert record["sessionId"] == child.id and record["depth"] == 1 and record["mode"] == "one-shot"
    first, last = record["seqs"]
    assert child.events[first]["type"] == "turn/start"
    assert child.events[last]["type"] == "assistant/message"
    assert child.events[last]["data"]["message"]["content"][0]["text"] == text  # the answer is exactly there
    assert child.events[-1]["type"] == "turn/end" and child.events[-1]["data"]["reason"] == {"kind": "completed"}


def test_the_child_runs_without_the_delegate_tool_at_the_default_depth_cap() -> None:
    agent, provider, _ = make_parent(parent_route(delegate_call("d1", task="x")))
    agent.followup("go")
    asyncio.run(agent.run())
    parent_requests = [r for r in provider.requests if r.session_id == "parent"]
    child_requests = [r for r in provider.requests if r.session_id != "parent"]
    assert "delegate" in [t["name"] for t in parent_requests[0].tools]
    assert "delegate" not in [t["name"] for t in child_requests[0].tools]


# --- fork ---------------------------------------------------------------------------------------------------


def test_fork_seeds_the_child_with_the_parent_prefix_up_to_its_last_turn_end() -> None:
    def route(request: GenerateRequest) -> list[StreamChunk]:
        if request.session_id != "parent":
            return echo_child(request)
        prompt = last_user_text(request)
        if prompt == "remember: the code word is tulip":
            return text_reply("noted")
        if has_tool_result(request):
            return text_reply("parent done")
        return tool_call_reply(delegate_call("d1", task="what is the code word?", provider="fork"))

    agent, provider, store = make_parent(route)
    agent.followup("remember: the code word is tulip")
    asyncio.run(agent.run())
    boundary = len(agent.session.events)
    assert agent.session.events[-1]["type"] == "turn/end"
    agent.followup("now delegate")
    asyncio.run(agent.run())
    (child,) = children_of(store, "parent")
    assert child.header["seedLength"] == boundary
    assert [al.thaw(e) for e in child.events[:boundary]] == [al.thaw(e) for e in agent.session.events[:boundary]]
    assert child.events[boundary]["type"] == "session/end-seed"
    types = [e["type"] for e in child.events]
    assert types[boundary + 1] == APPROVAL_POLICY  # the delegated policy comes after the seed
    child_request = next(r for r in provider.requests if r.session_id == child.id)
    texts = [
        last_user_text(GenerateRequest.from_config({"provider": "p", "model": "m"}, [m]))
        for m in child_request.messages
    ]
    assert "remember: the code word is tulip" in texts  # the closed turn is inherited
    assert "now delegate" not in texts  # the in-flight turn never is
    descriptor = next(e for e in child.events[boundary:] if e["type"] == SUBAGENT_DESCRIPTOR)
    assert descriptor["data"]["provider"] == "fork"


def test_fork_seed_and_child_meta_are_the_spec_rules() -> None:
    store = al.SessionStore()
    parent = store.create("p", meta={"cwd": "/c", "agentPreset": "coder"})
    assert fork_seed(parent) == []
    assert child_session_meta(parent, 1, 0) == {
        "cwd": "/c",
        "agentPreset": "coder",
        "parentSession": "p",
        "origin": "subagent",
        "delegationDepth": 1,
    }
    parent.append(al.TURN_START, {"turn": 1})
    parent.append(al.TURN_END, {"turn": 1, "reason": {"kind": "completed"}})
    parent.append(al.TURN_START, {"turn": 2})
    assert [e["type"] for e in fork_seed(parent)] == ["turn/start", "turn/end"]  # never the open turn 2
    assert child_session_meta(parent, 2, 2)["seedLength"] == 2


def test_the_parent_explicit_sandbox_mode_is_delegated() -> None:
    agent, _, store = make_parent(parent_route(delegate_call("d1", task="x")))
    agent.session.append_custom(SANDBOX_MODE, {"mode": "workspace-write"})
    agent.followup("go")
    asyncio.run(agent.run())
    (child,) = children_of(store, "parent")
    assert [e["type"] for e in child.events[:2]] == [SANDBOX_MODE, APPROVAL_POLICY]  # the original's order
    assert al.thaw(child.events[0]["data"]) == {"mode": "workspace-write", "source": "delegation"}


# --- parallel ------------------------------------------------------------------------------------------------


def test_parallel_delegations_in_one_step_run_concurrently_each_in_its_own_session() -> None:
    started: set[str] = set()
    both = asyncio.Event()

    def gate(request: GenerateRequest) -> Any:
        if request.session_id == "parent":
            return None
        started.add(request.session_id or "")
        if len(started) == 2:
            both.set()
        return asyncio.wait_for(both.wait(), 10)  # each child waits until the other one is in flight too

    route = parent_route(delegate_call("a", task="task A"), delegate_call("b", task="task B"))
    agent, _, store = make_parent(route, gate=gate)
    agent.followup("two things")
    outcomes = asyncio.run(agent.run())
    assert outcomes[0].reason == {"kind": "completed"}
    children = children_of(store, "parent")
    assert len(children) == 2 and len(started) == 2
    results = tool_results(agent.session)
    assert [r["message"]["content"][0]["content"][0]["text"] for r in results] == [
        "child did: task A",
        "child did: task B",
    ]  # committed in model order whatever order the children finished in
    assert {r["meta"]["subagent"]["sessionId"] for r in results} == {c.id for c in children}


# --- continuable ----------------------------------------------------------------------------------------------


def test_a_continuable_child_is_resumed_by_its_label_on_a_later_delegation() -> None:
    def route(request: GenerateRequest) -> list[StreamChunk]:
        if request.session_id != "parent":
            seen = [
                last_user_text(GenerateRequest.from_config({"provider": "p", "model": "m"}, [m]))
                for m in request.messages
            ]
            return text_reply(f"I have seen {len([s for s in seen if s.startswith('note')])} notes")
        if has_tool_result(request):
            return text_reply("ok")
        prompt = last_user_text(request)
        return tool_call_reply(delegate_call(f"c-{prompt}", task=f"note {prompt}", mode="continuable", label="notes"))

    agent, _, store = make_parent(route)
    for prompt in ("one", "two"):
        agent.followup(prompt)
        asyncio.run(agent.run())
    (child,) = children_of(store, "parent")
    results = tool_results(agent.session)
    assert [r["message"]["content"][0]["content"][0]["text"] for r in results] == [
        "I have seen 1 notes",
        "I have seen 2 notes",
    ]
    assert [r["meta"]["subagent"]["sessionId"] for r in results] == [child.id, child.id]
    assert results[1]["meta"]["subagent"].get("resumed") is True
    types = [e["type"] for e in child.events]
    assert types.count(SUBAGENT_DESCRIPTOR) == 1 and types.count(APPROVAL_POLICY) == 1
    assert types.count("turn/end") == 2
    # a continuable child's descriptor is its creation seed (the original's seedDescriptorTurn), between turns
    assert types[:3] == [SUBAGENT_DESCRIPTOR, "session/end-seed", APPROVAL_POLICY]
    assert al.thaw(child.events[0]["data"]) == {
        "version": 2,
        "mode": "continuable",
        "provider": "spawn",
        "label": "notes",
        "agentProvider": "deepseek",  # the resolved route is recorded, as the original does
        "agentModel": "demo-model",
    }
    first, _last = results[1]["meta"]["subagent"]["seqs"]
    assert child.events[first]["data"] == {"turn": 2}


def test_a_continuable_fork_childs_seed_is_the_prefix_then_its_descriptor_as_the_original_stages_it() -> None:
    agent, _, store = make_parent(lambda request: text_reply("parent answer"))
    agent.followup("first")
    asyncio.run(agent.run())
    prefix = len(agent.session.events)  # the parent's log ends at its turn/end

    async def api() -> Any:
        return await agent.delegate("x", mode="continuable", provider="fork", label="n")

    child = store.get(asyncio.run(api()).session_id)
    assert child is not None
    assert child.header["seedLength"] == prefix  # the inherited prefix only
    types = [e["type"] for e in child.events]
    # seedDescriptorTurn: Session.create(prefix) adds its end-seed, then the descriptor; the child's create
    # closes that seed with its own end-seed; the delegated policy follows
    assert types[prefix : prefix + 4] == ["session/end-seed", SUBAGENT_DESCRIPTOR, "session/end-seed", APPROVAL_POLICY]
    assert types.count(SUBAGENT_DESCRIPTOR) == 1


def test_a_continuable_delegation_without_a_label_is_an_error_result_and_nothing_is_created() -> None:
    agent, _, store = make_parent(parent_route(delegate_call("d1", task="x", mode="continuable")))
    agent.followup("go")
    asyncio.run(agent.run())
    (result,) = tool_results(agent.session)
    assert result["error"] == {"name": "InvalidAgentOptionError", "code": "INVALID_AGENT_OPTION"}
    assert children_of(store, "parent") == []


def test_a_label_that_names_another_parents_child_is_refused_and_nothing_is_written() -> None:
    def route(request: GenerateRequest) -> list[StreamChunk]:
        if request.session_id not in ("parent", "fork-of-parent"):
            return echo_child(request)
        if has_tool_result(request):
            return text_reply("ok")
        return tool_call_reply(delegate_call("c1", task="note", mode="continuable", label="notes"))

    agent, _, store = make_parent(route)
    agent.followup("one")
    asyncio.run(agent.run())
    forked = store.fork(agent.session, child_id="fork-of-parent")  # inherits the result naming "notes"
    other = Agent(forked, agent.provider, agent.options, durable=False, subagents=SubagentConfig())
    before = {s.id: len(s.events) for s in store.list()}

    async def api() -> None:
        await other.delegate("again", mode="continuable", label="notes")

    with pytest.raises(SubagentLabelError, match="not a subagent of session") as caught:
        asyncio.run(api())
    assert caught.value.code == "SUBAGENT_LABEL_CONFLICT"
    assert {s.id: len(s.events) for s in store.list()} == before


# --- depth cap -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1, True, 1.5, 2**53, "1"])
def test_max_depth_must_be_a_non_negative_safe_integer(bad: Any) -> None:
    with pytest.raises(InvalidAgentOptionError, match="max_depth must be a non-negative safe integer"):
        SubagentConfig(max_depth=bad)


def test_a_delegation_past_max_depth_is_a_typed_refusal_and_nothing_is_written() -> None:
    agent, _provider, store = make_parent(parent_route(), config=SubagentConfig(max_depth=0))
    assert "delegate" not in agent.tools  # an agent at the cap is not offered the tool

    async def api() -> None:
        await agent.delegate("x")

    with pytest.raises(SubagentDepthError, match="past max_depth 0") as caught:
        asyncio.run(api())
    assert caught.value.code == "SUBAGENT_DEPTH_EXCEEDED"
    assert store.list() == [agent.session] and agent.session.events == []


def test_a_resumed_child_keeps_its_recorded_depth_and_is_refused_past_the_cap() -> None:
    store = al.SessionStore()
    child = store.create("c", meta={"parentSession": "p", "origin": "subagent", "delegationDepth": 2})
    agent = Agent(
        child,
        RoutedProvider(echo_child),
        AgentOptions(provider="p", model="m"),
        durable=False,
        subagents=SubagentConfig(max_depth=2),
    )
    assert agent.subagents is not None and agent.subagents.depth == 2
    assert "delegate" not in agent.tools

    async def api() -> None:
        await agent.delegate("deeper")

    with pytest.raises(SubagentDepthError):
        asyncio.run(api())


def test_a_deeper_cap_lets_the_child_delegate_to_a_grandchild() -> None:
    def route(request: GenerateRequest) -> list[StreamChunk]:
        sid = request.session_id
        if has_tool_result(request):
            return text_reply("relayed: " + request.messages[-1]["content"][0]["content"][0]["text"])
        if sid == "parent" or last_user_text(request) == "ask the grandchild":
            task = "ask the grandchild" if sid == "parent" else "leaf work"
            return tool_call_reply(delegate_call(f"d-{task}", task=task))
        return echo_child(request)

    agent, _, store = make_parent(route, config=SubagentConfig(max_depth=2))
    agent.followup("go deep")
    asyncio.run(agent.run())
    (child,) = children_of(store, "parent")
    (grandchild,) = children_of(store, child.id)
    assert grandchild.header["delegationDepth"] == 2
    (result,) = tool_results(agent.session)
    assert result["message"]["content"][0]["content"][0]["text"] == "relayed: child did: leaf work"


# --- tool filter and route override -----------------------------------------------------------------------------


def _tools() -> ToolRegistry:
    async def body(args: Any, ctx: Any) -> ToolOutcome:
        return ToolOutcome.text("ok")

    schema = {"type": "object", "properties": {}}
    return ToolRegistry([FunctionTool("alpha", "a", schema, body), FunctionTool("beta", "b", schema, body)])


def test_a_tool_filter_narrows_the_child_tools_and_a_model_override_changes_its_route() -> None:
    route = parent_route(delegate_call("d1", task="x", tools=["beta"], model="small-model"))
    agent, provider, store = make_parent(route, tools=_tools())
    agent.followup("go")
    asyncio.run(agent.run())
    (child,) = children_of(store, "parent")
    request = next(r for r in provider.requests if r.session_id == child.id)
    assert [t["name"] for t in request.tools] == ["beta"]
    assert request.model == "small-model"
    assert child.request_header()["config"]["model"] == "small-model"


def test_a_continuable_childs_tool_filter_is_recorded_as_the_originals_restriction_and_rules_a_reopened_child() -> None:
    agent, provider, store = make_parent(parent_route(), tools=_tools())

    async def api() -> Any:
        return await agent.delegate("x", mode="continuable", label="n", tool_filter=["beta"])

    first = asyncio.run(api())
    child = store.get(first.session_id)
    assert child is not None
    assert al.thaw(child.events[0]["data"])["toolFilter"] == {"allow": ["beta"]}  # {allow?, deny?}, as the original
    # a fresh parent agent (no live children) reopens the child from its descriptor alone
    parent2 = Agent(
        agent.session,
        provider,
        agent.options,
        tools=_tools(),
        durable=False,
        subagents=SubagentConfig(open_session=lambda sid: store.get(sid)),  # type: ignore[arg-type,return-value]
    )

    async def again() -> Any:
        return await parent2.delegate("y", mode="continuable", label="n")

    second = asyncio.run(again())
    assert second.session_id == first.session_id and second.resumed
    request = [r for r in provider.requests if r.session_id == child.id][-1]
    assert [t["name"] for t in request.tools] == ["beta"]


def test_a_tool_filter_naming_an_unknown_tool_is_an_error_result_and_nothing_is_created() -> None:
    agent, _, store = make_parent(parent_route(delegate_call("d1", task="x", tools=["gamma"])), tools=_tools())
    agent.followup("go")
    asyncio.run(agent.run())
    (result,) = tool_results(agent.session)
    assert result["error"]["code"] == "INVALID_AGENT_OPTION"
    assert "gamma" in result["message"]["content"][0]["content"][0]["text"]
    assert children_of(store, "parent") == []


def test_a_provider_override_uses_the_named_provider_and_an_unknown_one_is_refused() -> None:
    other = RoutedProvider(lambda r: text_reply("from the other provider"))
    agent, _, store = make_parent(parent_route(), config=SubagentConfig(providers={"other": other}))

    async def api() -> Any:
        return await agent.delegate("x", mode="continuable", label="o", agent_provider="other", agent_model="m2")

    result = asyncio.run(api())
    assert result.answer == "from the other provider" and other.requests[0].model == "m2"
    (child,) = children_of(store, "parent")
    descriptor = next(e for e in child.events if e["type"] == SUBAGENT_DESCRIPTOR)
    assert descriptor["data"]["agentProvider"] == "other" and descriptor["data"]["agentModel"] == "m2"

    async def unknown() -> Any:
        return await agent.delegate("x", agent_provider="nobody")

    with pytest.raises(InvalidAgentOptionError, match='no provider named "nobody"'):
        asyncio.run(unknown())
    assert len(children_of(store, "parent")) == 1


# --- API, stream, cancellation ------------------------------------------------------------------------------------


def test_agent_delegate_returns_the_answer_and_the_child_session() -> None:
    agent, _, store = make_parent(parent_route())

    async def api() -> Any:
        return await agent.delegate("summarise", provider="spawn")

    result = asyncio.run(api())
    (child,) = children_of(store, "parent")
    assert (result.session_id, result.answer, result.completed, result.depth) == (
        child.id,
        "child did: summarise",
        True,
        1,
    )
    assert child.events[result.seqs[1]]["type"] == "assistant/message"


def test_an_agent_without_subagents_cannot_delegate() -> None:
    store = al.SessionStore()
    agent = Agent(store.create("s"), RoutedProvider(echo_child), AgentOptions(provider="p", model="m"), durable=False)

    async def api() -> None:
        await agent.delegate("x")

    with pytest.raises(InvalidAgentOptionError, match="cannot delegate"):
        asyncio.run(api())


def test_stream_yields_the_childs_progress_wrapped_with_its_session() -> None:
    agent, _, store = make_parent(parent_route(delegate_call("d1", task="stream me")))

    async def consume() -> list[Any]:
        return [u async for u in agent.stream("go")]

    updates = asyncio.run(consume())
    (child,) = children_of(store, "parent")
    wrapped = [u for u in updates if isinstance(u, SubagentUpdate)]
    assert wrapped and {u.session_id for u in wrapped} == {child.id}
    assert {u.parent_session for u in wrapped} == {"parent"} and {u.depth for u in wrapped} == {1}
    assert next(u.update.kind for u in wrapped) == "turn-start" and wrapped[-1].update.kind == "turn-end"
    texts = "".join(u.update.text for u in wrapped if u.update.kind == "text-delta")
    assert texts == "child did: stream me"


def test_cancelling_the_parent_turn_cancels_the_running_child_which_closes_its_turn() -> None:
    state: dict[str, Any] = {}

    def gate(request: GenerateRequest) -> Any:
        if request.session_id == "parent":
            return None
        state["child"].set()
        return asyncio.sleep(30)  # the child's model hangs until the parent is cancelled

    route = parent_route(delegate_call("d1", task="slow"))
    agent, _, store = make_parent(route, gate=gate)

    async def main() -> Any:
        state["child"] = asyncio.Event()
        agent.followup("go")
        run = asyncio.create_task(agent.run())
        await asyncio.wait_for(state["child"].wait(), 10)
        agent.cancel()
        return await asyncio.wait_for(run, 10)

    outcomes = asyncio.run(main())
    assert outcomes[0].reason["kind"] == "aborted"
    (child,) = children_of(store, "parent")
    last = al.thaw(child.events[-1])
    assert last["type"] == "turn/end" and last["data"]["reason"] == {"kind": "aborted", "reason": {"kind": "parent"}}
    assert al.interrupted_turn_closers(agent.session.events) == []
    (result,) = tool_results(agent.session)
    assert result["meta"]["subagent"]["sessionId"] == child.id  # the parent's result still names the child


def test_release_one_shot_disposes_a_finished_child_which_its_store_has_persisted(tmp_path: Path) -> None:
    from agentlog.persistence.coordinator import PersistenceCoordinator
    from agentlog.persistence.jsonl.backend import JsonlBackend

    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(tmp_path)))
    try:
        session = store.create("parent")
        agent = Agent(
            session,
            RoutedProvider(echo_child),
            AgentOptions(provider="p", model="m"),
            subagents=SubagentConfig(release_one_shot=True),
        )

        async def api() -> Any:
            return await agent.delegate("persist me")

        result = asyncio.run(api())
        assert store.get(result.session_id) is None  # released: no longer live, its lock given back
        child = coordinator.resume(result.session_id)  # ... and complete on disk
        assert child.header["parentSession"] == "parent"
        assert child.events[result.seqs[1]]["data"]["message"]["content"][0]["text"] == "child did: persist me"
    finally:
        coordinator.close()


def test_a_parent_that_is_not_live_in_a_store_cannot_have_children() -> None:
    store = al.SessionStore()
    session = store.create("parent")
    agent = Agent(
        session,
        RoutedProvider(echo_child),
        AgentOptions(provider="p", model="m"),
        durable=False,
        subagents=SubagentConfig(),
    )
    store.dispose(session)

    async def api() -> None:
        await agent.delegate("x")

    with pytest.raises(al.AgentlogError) as caught:
        asyncio.run(api())
    assert caught.value.code == "SESSION_NOT_FOUND"
    assert store.list() == []


def test_the_embedding_depth_only_raises_the_headers_depth() -> None:
    store = al.SessionStore()
    top = store.create("top")
    agent = Agent(
        top,
        RoutedProvider(echo_child),
        AgentOptions(provider="p", model="m"),
        durable=False,
        subagents=SubagentConfig(subagent_depth=1, max_depth=1),
    )
    assert agent.subagents is not None and agent.subagents.depth == 1 and "delegate" not in agent.tools
    child = store.create("c", meta={"parentSession": "top", "origin": "subagent", "delegationDepth": 3})
    deep = Agent(
        child,
        RoutedProvider(echo_child),
        AgentOptions(provider="p", model="m"),
        durable=False,
        subagents=SubagentConfig(subagent_depth=1, max_depth=5),
    )
    assert deep.subagents is not None and deep.subagents.depth == 3


def test_the_child_header_has_the_original_create_order() -> None:
    """``{version, id, createdAt, cwd?, parentSession?, seedLength?, origin?, delegationDepth?, agentPreset?}``:
    the order the original's store writes a created header in, so either implementation reads the other's."""

    def route(request: GenerateRequest) -> list[StreamChunk]:
        if request.session_id != "parent":
            return echo_child(request)
        if last_user_text(request) == "first":
            return text_reply("ok")
        if has_tool_result(request):
            return text_reply("done")
        return tool_call_reply(delegate_call("d1", task="x", provider="fork"))

    agent, _, store = make_parent(route)
    for prompt in ("first", "second"):
        agent.followup(prompt)
        asyncio.run(agent.run())
    (child,) = children_of(store, "parent")
    assert list(child.header) == [
        "version",
        "id",
        "createdAt",
        "cwd",
        "parentSession",
        "seedLength",
        "origin",
        "delegationDepth",
    ]
