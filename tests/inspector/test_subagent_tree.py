"""The inspector's fork tree shows subagents: each node carries ``origin`` and ``delegationDepth``, so a
delegation's child is told from a fork of the same parent."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import agentlog as al
from agentlog.agent.loop import Agent, AgentOptions
from agentlog.agent.subagents import SubagentConfig
from agentlog.inspector.views import Inspector
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing.provider import ScriptedProvider, text_reply, tool_call_reply

from .stores import open_read_only


def _store_with_a_subagent_and_a_fork(root: Path) -> str:
    script = [
        tool_call_reply(("d1", "delegate", json.dumps({"task": "look"}))),
        text_reply("looked"),  # the subagent
        text_reply("done"),  # the lead
    ]
    sessions = al.SessionStore()
    coordinator = PersistenceCoordinator(sessions, JsonlBackend(str(root)))
    try:
        lead = sessions.create("lead", meta={"cwd": "/w"})
        agent = Agent(lead, ScriptedProvider(script), AgentOptions(provider="p", model="m"), subagents=SubagentConfig())
        agent.followup("delegate")
        asyncio.run(agent.run())
        sessions.fork(lead, child_id="lead-fork")
        child = next(s.id for s in sessions.list() if s.header.get("origin") == "subagent")
        for session in sessions.list():
            sessions.flush(session)
    finally:
        coordinator.close()
    return child


def test_the_fork_tree_marks_a_subagent_and_its_depth(tmp_path: Path) -> None:
    child = _store_with_a_subagent_and_a_fork(tmp_path)
    inspector = Inspector(open_read_only(tmp_path, "jsonl"))
    try:
        doc = inspector.fork_tree(child)
        assert doc["rootId"] == "lead" and doc["complete"]
        tree = doc["tree"]
        assert (tree["origin"], tree["delegationDepth"]) == (None, 0)
        nodes = {node["id"]: node for node in tree["children"]}
        assert set(nodes) == {child, "lead-fork"}
        assert (nodes[child]["origin"], nodes[child]["delegationDepth"]) == ("subagent", 1)
        assert (nodes["lead-fork"]["origin"], nodes["lead-fork"]["delegationDepth"]) == (None, 0)
        assert nodes["lead-fork"]["seedLength"] > 0 and nodes[child]["seedLength"] is None
    finally:
        inspector.close()
