"""Subagent sessions the original wrote (``tests/fixtures/original-subagent``, made with its npm packages):
agentlog loads each one as the original does (header, event order, derived messages), lists the children
under their parent, and reads the continuable child's descriptor in the original's shape."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

import agentlog as al
from agentlog.agent.events import APPROVAL_POLICY, SANDBOX_MODE, SUBAGENT_DESCRIPTOR
from agentlog.cli.commands import app
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend

FIXTURE = Path(__file__).parent.parent / "fixtures" / "original-subagent"
ORIGINAL: dict[str, dict[str, Any]] = {
    record["id"]: record for record in map(orjson.loads, (FIXTURE / "original_load.jsonl").read_bytes().splitlines())
}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    shutil.copytree(FIXTURE / "store", root)
    return root


@pytest.mark.parametrize("session_id", ["lead", "child-fork-oneshot", "child-spawn-continuable"])
def test_agentlog_loads_the_originals_subagent_session_as_the_original_does(store: Path, session_id: str) -> None:
    original = ORIGINAL[session_id]
    assert original["ok"] is True and len(original["messages"]) >= 2
    coordinator = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(store), compression="none"))
    try:
        session = coordinator.resume(session_id)
        header = al.thaw(session.header)
        assert header == original["header"] and list(header) == list(original["header"])  # same keys, same order
        types = [e["type"] for e in session.events]
        assert types[-1] == "session/end-seed"  # the marker a restore appends, which load_check drops
        assert types[:-1] == original["types"]
        assert al.thaw(session.derive_messages()) == original["messages"]
    finally:
        coordinator.close()


def test_the_originals_children_carry_its_policy_and_descriptor_layouts(store: Path) -> None:
    coordinator = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(store), compression="none"))
    try:
        fork = coordinator.resume("child-fork-oneshot")
        types = [e["type"] for e in fork.events]
        seed = fork.header["seedLength"]
        assert types[seed : seed + 3] == ["session/end-seed", SANDBOX_MODE, APPROVAL_POLICY]
        at = types.index(SUBAGENT_DESCRIPTOR)
        assert types[at - 1] == "turn/start" and types[at + 1] == "step/start"

        notes = coordinator.resume("child-spawn-continuable")
        assert [e["type"] for e in notes.events[:4]] == [
            SUBAGENT_DESCRIPTOR,
            "session/end-seed",
            SANDBOX_MODE,
            APPROVAL_POLICY,
        ]
        assert al.thaw(notes.events[0]["data"])["toolFilter"] == {"allow": ["read_file"], "deny": ["bash"]}
    finally:
        coordinator.close()


def test_ls_tree_lists_the_originals_children_under_their_parent(store: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["ls", "--store", str(store), "--tree", "--json"])
    assert result.exit_code == 0, result.stdout + result.stderr
    rows = orjson.loads(result.stdout)["sessions"]
    assert (rows[0]["id"], rows[0]["level"]) == ("lead", 0)
    children = {r["id"]: r for r in rows[1:]}
    assert set(children) == {"child-fork-oneshot", "child-spawn-continuable"}
    for row in children.values():
        assert (row["level"], row["parentSession"], row["origin"], row["delegationDepth"]) == (1, "lead", "subagent", 1)
