"""A Claude Code transcript is a tree (``parentUuid``): after a rewind or an edited prompt, the abandoned
branch stays in the file. The session is the active branch (the chain up from the last conversation
record); each abandoned branch that starts at a prompt becomes a fork of it at that turn boundary, so the
model-facing messages never hold the abandoned turns and nothing of the file is lost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from agentlog.cli.commands import app
from agentlog.errors import TranscriptError
from agentlog.interop.transcripts import IMPORT_DONE, import_transcript
from agentlog.kernel.events import TURN_END
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "transcripts"
REWIND = FIXTURES / "claude-code-rewind.jsonl"
LINEAR = FIXTURES / "claude-code.jsonl"


def _coordinator(root: Path) -> PersistenceCoordinator:
    return PersistenceCoordinator(SessionStore(), JsonlBackend(str(root)))


def _import(root: Path, path: Path, **options: Any) -> Any:
    coordinator = _coordinator(root)
    try:
        return import_transcript(coordinator, "claude-code", path, **options)
    finally:
        coordinator.close()


def _texts(view: Any) -> list[tuple[str, str]]:
    out = []
    for message in view.derive_messages():
        text = "".join(b.get("text", "") for b in message["content"] if b.get("type") == "text")
        out.append((message["role"], text))
    return out


def test_the_session_is_the_active_branch_and_the_abandoned_one_is_a_fork(tmp_path: Path) -> None:
    root = tmp_path / "store"
    report = _import(root, REWIND, session_id="math")
    assert report.forks == ["math-branch-1"]
    assert report.to_json()["forks"] == ["math-branch-1"]
    coordinator = _coordinator(root)
    try:
        main = coordinator.view("math")
        assert _texts(main) == [
            ("user", "What is 2+2?"),
            ("assistant", "4"),
            ("user", "And 5+5?"),
            ("assistant", "10"),
            ("user", "Thanks"),
            ("assistant", "You're welcome"),
        ]
        fork = coordinator.view("math-branch-1")
        assert _texts(fork) == [("user", "What is 2+2?"), ("assistant", "4"), ("user", "And 3+3?"), ("assistant", "6")]
        header = fork.header
        assert header["parentSession"] == "math" and "origin" not in header
        seed = header["seedLength"]
        # forked at the closed first turn: the seed is the parent's prefix, byte for byte
        assert list(fork.events[:seed]) == list(main.events[:seed])
        assert main.events[seed - 1]["type"] == TURN_END
        assert fork.events[seed]["type"] == "session/end-seed"
        assert fork.events[-1]["type"] == IMPORT_DONE and fork.events[-1]["data"]["branch"] is True
    finally:
        coordinator.close()


def test_a_linear_transcript_makes_no_fork(tmp_path: Path) -> None:
    report = _import(tmp_path / "store", LINEAR, session_id="cc")
    assert report.forks == [] and "forks" not in report.to_json()


def test_the_abandoned_branch_never_reaches_the_exported_messages(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _import(root, REWIND, session_id="math")
    runner = CliRunner()
    result = runner.invoke(app, ["export", "math", "--to", "anthropic", "--store", str(root)])
    assert result.exit_code == 0, result.stderr
    assert "3+3" not in result.stdout and "5+5" in result.stdout


def test_ls_tree_shows_the_fork_under_the_session_and_import_names_it(tmp_path: Path) -> None:
    root = tmp_path / "store"
    runner = CliRunner()
    result = runner.invoke(app, ["import", str(REWIND), "--from", "claude-code", "--store", str(root), "--id", "math"])
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "abandoned branches imported as forks: math-branch-1" in result.stdout
    listed = runner.invoke(app, ["ls", "--store", str(root), "--json"])
    rows = orjson.loads(listed.stdout)["sessions"]
    assert {row["id"] for row in rows} == {"math", "math-branch-1"}


def test_a_bad_record_on_an_abandoned_branch_refuses_the_whole_import(tmp_path: Path) -> None:
    records = [json.loads(line) for line in REWIND.read_text().splitlines()]
    records[3]["message"]["content"] = 7  # a2, on the abandoned branch
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    root = tmp_path / "store"
    with pytest.raises(TranscriptError, match="line 4"):
        _import(root, path, session_id="math")
    backend = JsonlBackend(str(root))
    try:
        assert backend.list_sessions() == []
    finally:
        backend.close()


def test_a_regenerated_answer_is_kept_aside_not_forked(tmp_path: Path) -> None:
    """A branch that does not start at a prompt (an answer generated again) is no turn boundary: its
    records are kept verbatim as ``import/record`` in the session, off the surface."""
    records = [json.loads(line) for line in REWIND.read_text().splitlines()]
    retry = dict(records[1], uuid="a1x", message=dict(records[1]["message"], id="msg_m1x"))
    retry["message"]["content"] = [{"type": "text", "text": "four"}]
    path = tmp_path / "retry.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [records[0], retry, *records[1:]]))
    report = _import(tmp_path / "store", path, session_id="math")
    assert report.to_json()["keptRecords"]["assistant (abandoned branch)"] == 1
    coordinator = _coordinator(tmp_path / "store")
    try:
        assert ("assistant", "four") not in _texts(coordinator.view("math"))
    finally:
        coordinator.close()


# ---------------------------------------------------------------- any tree of rewinds

@st.composite
def _rewind_trees(draw: st.DrawFn) -> list[int | None]:
    """The turn each turn's prompt follows (``None``: the first turn): the previous one, or an earlier one
    after a rewind. Turn ``i`` is a prompt ``p{i}`` and its answer ``a{i}``, written in turn order."""
    count = draw(st.integers(1, 9))
    parents: list[int | None] = [None]
    for turn in range(1, count):
        parents.append(draw(st.one_of(st.just(turn - 1), st.integers(0, turn - 1))))
    return parents


def _tree_lines(parents: list[int | None]) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for turn, parent in enumerate(parents):
        stamp = f"2025-09-01T10:{turn:02d}:00.000Z"
        base = {"isSidechain": False, "sessionId": "s", "cwd": "/w", "timestamp": stamp}
        follows = None if parent is None else f"a{parent}"
        prompt = {"role": "user", "content": f"prompt {turn}"}
        lines.append({**base, "type": "user", "uuid": f"p{turn}", "parentUuid": follows, "message": prompt})
        lines.append({**base, "type": "assistant", "uuid": f"a{turn}", "parentUuid": f"p{turn}",
                      "message": {"id": f"m{turn}", "role": "assistant", "model": "claude-x",
                                  "content": [{"type": "text", "text": f"answer {turn}"}]}})
    return lines


def _chain(parents: list[int | None], turn: int) -> list[int]:
    chain: list[int] = []
    node: int | None = turn
    while node is not None:
        chain.append(node)
        node = parents[node]
    return chain[::-1]


def _chain_texts(turns: list[int]) -> list[tuple[str, str]]:
    return [pair for t in turns for pair in (("user", f"prompt {t}"), ("assistant", f"answer {t}"))]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parents=_rewind_trees())
def test_any_tree_of_rewinds_imports_its_active_chain_and_one_fork_per_abandoned_branch(
    tmp_path_factory: pytest.TempPathFactory, parents: list[int | None]
) -> None:
    root = tmp_path_factory.mktemp("tree")
    path = root / "t.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in _tree_lines(parents)))
    report = _import(root / "store", path, session_id="s")
    last = len(parents) - 1
    active = _chain(parents, last)
    # each abandoned subtree hangs off the active chain at a prompt; its fork follows its last-written leaf
    roots = sorted(t for t in range(len(parents)) if t not in active and parents[t] in active)
    descendants = {r: [t for t in range(len(parents)) if r in _chain(parents, t)] for r in roots}
    followed = {r: _chain(parents, max(descendants[r])) for r in roots}
    aside = sum(len(set(descendants[r]) - set(followed[r])) for r in roots)
    assert report.forks == [f"s-branch-{n}" for n in range(1, len(roots) + 1)]
    assert report.kept_records.get("user (abandoned branch)", 0) == aside
    coordinator = _coordinator(root / "store")
    try:
        main = coordinator.view("s")
        assert _texts(main) == _chain_texts(active)
        for fork_id, r in zip(report.forks, roots, strict=True):
            fork = coordinator.view(fork_id)
            assert _texts(fork) == _chain_texts(followed[r])
            seed = fork.header["seedLength"]
            assert list(fork.events[:seed]) == list(main.events[:seed])
    finally:
        coordinator.close()
