"""Subagent lineage in the read commands: ``ls`` (parent and depth, ``--tree``), ``show`` (parent and
children), ``stats`` (token use ``own`` and ``withChildren``, a fork's inherited prefix never counted twice)
and ``search --parent``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

import agentlog as al
from agentlog.agent.loop import Agent, AgentOptions
from agentlog.agent.subagents import SubagentConfig
from agentlog.cli.commands import app
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing.provider import ScriptedProvider, text_reply, tool_call_reply

runner = CliRunner()


def _usage(inp: int, out: int) -> al.TokenUsage:
    return {"inputTokens": inp, "outputTokens": out}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A lead session with one closed turn, then a turn delegating to a forked child and a spawned one."""
    root = tmp_path / "store"
    script = [
        text_reply("hello", usage=_usage(10, 5)),  # lead, turn 1
        tool_call_reply(("d1", "delegate", json.dumps({"task": "fork work", "provider": "fork"})), usage=_usage(1, 1)),
        text_reply("zebra from the fork", usage=_usage(100, 50)),  # the forked child
        tool_call_reply(("d2", "delegate", json.dumps({"task": "spawn work"})), usage=_usage(2, 2)),
        text_reply("zebra from the spawn", usage=_usage(7, 3)),  # the spawned child
        text_reply("summary without the word", usage=_usage(20, 5)),  # lead, end of turn 2
    ]
    sessions = al.SessionStore()
    coordinator = PersistenceCoordinator(sessions, JsonlBackend(str(root)))
    try:
        lead = sessions.create("lead", meta={"cwd": str(tmp_path)})
        agent = Agent(lead, ScriptedProvider(script), AgentOptions(provider="p", model="m"), subagents=SubagentConfig())

        async def main() -> None:
            agent.followup("hi")
            await agent.run()
            agent.followup("delegate twice")
            await agent.run()

        asyncio.run(main())
        for session in sessions.list():
            sessions.flush(session)
    finally:
        coordinator.close()
    return root


def _json(*args: str) -> Any:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.stdout + result.stderr
    return orjson.loads(result.stdout)


def _text(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.stdout + result.stderr
    return result.stdout


def _children(store: Path) -> list[dict[str, Any]]:
    rows = _json("ls", "--store", str(store))["sessions"]
    return sorted((r for r in rows if r["parentSession"] == "lead"), key=lambda r: r["createdAt"])


def test_ls_shows_parent_and_depth_and_the_tree_puts_children_under_their_parent(store: Path) -> None:
    children = _children(store)
    assert len(children) == 2
    assert {(r["origin"], r["delegationDepth"]) for r in children} == {("subagent", 1)}
    lead = next(r for r in _json("ls", "--store", str(store))["sessions"] if r["id"] == "lead")
    assert (lead["parentSession"], lead["origin"], lead["delegationDepth"]) == (None, None, 0)
    tree = _json("ls", "--store", str(store), "--tree")["sessions"]
    assert tree[0]["id"] == "lead" and tree[0]["level"] == 0
    assert {r["id"] for r in tree[1:]} == {r["id"] for r in children} and {r["level"] for r in tree[1:]} == {1}
    text = _text("ls", "--store", str(store), "--tree")
    assert "depth" in text and "└" in text


def test_show_names_the_parent_of_a_child_and_the_children_of_a_parent(store: Path) -> None:
    children = _children(store)
    document = _json("show", "lead", "--store", str(store))
    assert [c["id"] for c in document["children"]] == [r["id"] for r in children]
    assert {(c["origin"], c["delegationDepth"]) for c in document["children"]} == {("subagent", 1)}
    assert "subagents: " + ", ".join(r["id"] for r in children) in _text("show", "lead", "--store", str(store))
    heading = _text("show", children[0]["id"], "--store", str(store)).splitlines()[0]
    assert "subagent of lead at depth 1" in heading


def test_stats_rolls_up_the_childrens_tokens_separately_without_counting_a_fork_seed_twice(store: Path) -> None:
    document = _json("stats", "lead", "--store", str(store))
    tokens = document["lineage"]["tokens"]
    own = document["values"]["tokenUsage"]
    assert tokens["own"] == own
    assert own["uncachedInputTokens"] == 10 + 1 + 2 + 20 and own["outputTokens"] == 5 + 1 + 2 + 5
    fork, spawn = (c["usage"] for c in tokens["children"])
    assert fork["uncachedInputTokens"] == 100 and fork["outputTokens"] == 50  # not the 10/5 its seed inherited
    assert spawn["uncachedInputTokens"] == 7 and spawn["outputTokens"] == 3
    assert tokens["withChildren"]["uncachedInputTokens"] == 33 + 100 + 7
    assert tokens["withChildren"]["outputTokens"] == 13 + 50 + 3
    child_stats = _json("stats", tokens["children"][0]["id"], "--store", str(store))
    assert child_stats["lineage"]["parentSession"] == "lead" and child_stats["lineage"]["delegationDepth"] == 1
    assert child_stats["lineage"]["tokens"]["children"] == []
    text = _text("stats", "lead", "--store", str(store))
    assert "tokens: with children" in text and "subagent of" not in text


def test_search_parent_keeps_only_the_sessions_of_that_parent(store: Path) -> None:
    children = {r["id"] for r in _children(store)}
    everything = _json("search", "zebra", "--store", str(store))
    assert {item["bestMatch"]["sessionId"] for item in everything["items"]} >= children
    only = _json("search", "zebra", "--store", str(store), "--parent", "lead")
    assert {item["bestMatch"]["sessionId"] for item in only["items"]} == children
    assert _json("search", "zebra", "--store", str(store), "--parent", "nobody")["items"] == []


def test_export_carries_the_lineage_header_and_the_parent_result_naming_the_child(store: Path) -> None:
    child = _children(store)[0]["id"]
    exported = _json("export", child, "--store", str(store))
    header = exported["header"]
    assert (header["parentSession"], header["origin"], header["delegationDepth"]) == ("lead", "subagent", 1)
    assert "seedLength" in header  # the first child was forked
    lead = _json("export", "lead", "--store", str(store))
    records = [e["data"]["meta"]["subagent"] for e in lead["events"] if e["type"] == "tool/result"]
    assert records[0]["sessionId"] == child and records[0]["provider"] == "fork"
    first, last = records[0]["seqs"]
    assert exported["events"][first]["type"] == "turn/start"
    assert exported["events"][last]["type"] == "assistant/message"


def test_trace_of_a_delegated_result_names_the_child_and_its_answer(store: Path) -> None:
    lead = _json("export", "lead", "--store", str(store))
    result = next(e for e in lead["events"] if e["type"] == "tool/result")
    record = result["data"]["meta"]["subagent"]
    trace = _json("trace", "lead", "--seq", str(result["seq"]), "--store", str(store))
    assert trace["subagent"] == {"sessionId": record["sessionId"], "seqs": record["seqs"]}
    text = _text("trace", "lead", "--seq", str(result["seq"]), "--store", str(store))
    assert f"agentlog show {record['sessionId']} --at {record['seqs'][1]}" in text
    assert "subagent" not in _json("trace", "lead", "--seq", "0", "--store", str(store))
