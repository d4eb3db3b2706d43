"""The agent commands of ``agentlog`` (run, resume, show, replay, fork) through typer's runner.

The model is the local scripted ``DemoModelServer`` reached over real HTTP by the real client; every
store is a temporary directory.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

import orjson
import pytest
from typer.testing import CliRunner, Result

import agentlog as al
import agentlog.cli.commands as cli
from _procs import assert_turns_closed_with_every_call_answered, running_sleep
from agentlog.agent import loop
from agentlog.cli.commands import app
from agentlog.kernel.invariants import tool_pairing_problems
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing.demo_server import DemoModelServer, RecordedRequest, Reply, ToolCall
from agentlog.testing.demo_server import ToolCall as ScriptedCall

runner = CliRunner()

BACKENDS = [("jsonl", "zstd"), ("jsonl", "none"), ("sqlite", "zstd")]

TOOL_SCRIPT = [
    Reply(text="Reading.", tool_calls=[ToolCall("read_file", {"path": "notes.txt"}, id="call-1")]),
    Reply(text="It says 42.", chunk_chars=3),
]


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DEEPSEEK_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    directory = tmp_path / "work"
    directory.mkdir()
    (directory / "notes.txt").write_text("the answer is 42\n")
    return directory


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


def _tree_snapshot(root: Path) -> dict[str, bytes]:
    files = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as handle:
                files[path] = handle.read()
    return files


def _run(server: DemoModelServer, store: Path, work: Path, prompt: str, *extra: str) -> Result:
    args = ["run", prompt, "--store", str(store), "--base-url", server.base_url, "--cwd", str(work), *extra]
    return runner.invoke(app, args)


def _record(store: Path, work: Path, session_id: str = "s1") -> None:
    """A stored session with one closed turn: a read_file call and the final answer."""
    with DemoModelServer(TOOL_SCRIPT) as server:
        result = _run(server, store, work, "what is in notes.txt?", "--session-id", session_id)
    assert result.exit_code == 0, result.output + result.stderr


def _events(store: Path, session_id: str) -> list[dict[str, Any]]:
    result = runner.invoke(app, ["show", session_id, "--store", str(store), "--log", "--json"])
    assert result.exit_code == 0, result.stderr
    events: list[dict[str, Any]] = orjson.loads(result.stdout)["events"]
    return events


def _verify_ok(store: Path, *args: str) -> dict[str, str]:
    result = runner.invoke(app, ["verify", "--store", str(store), "--json", *args])
    assert result.exit_code == 0, result.stdout + result.stderr
    document = orjson.loads(result.stdout)
    assert document["ok"] is True
    return {row["id"]: row["status"] for row in document["sessions"]}


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port  # nothing listens here any more: connections are refused at once


# --- run ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "compression"), BACKENDS)
def test_run__streams_a_text_answer_and_persists_a_valid_session(
    store: Path, work: Path, kind: str, compression: str
) -> None:
    backend = ["--backend", kind, "--compression", compression]
    with DemoModelServer([Reply(text="Hello there, friend.", chunk_chars=4)]) as server:
        result = _run(server, store, work, "hi", "--session-id", "s1", "--system", "Be terse.", *backend)
        requests = server.requests
    assert result.exit_code == 0, result.output + result.stderr
    assert result.stdout == "Hello there, friend.\nsession s1\n"
    body = requests[0].body
    assert body["model"] == "deepseek-chat"
    assert body["messages"][0] == {"role": "system", "content": "Be terse."}
    assert body["messages"][1] == {"role": "user", "content": "hi"}
    assert [tool["function"]["name"] for tool in body["tools"]] == [
        "read_file",
        "list_dir",
        "write_file",
        "run_command",
    ]
    listing = orjson.loads(runner.invoke(app, ["ls", "--store", str(store), *backend, "--json"]).stdout)
    [row] = listing["sessions"]
    assert row["id"] == "s1" and row["cwd"] == str(work)
    assert _verify_ok(store, *backend) == {"s1": "ok"}
    exported = orjson.loads(runner.invoke(app, ["export", "s1", "--store", str(store), *backend]).stdout)
    assert [m["role"] for m in exported["messages"]] == ["user", "assistant"]
    assert exported["requestHeader"]["system"] == "Be terse."


def test_run__defaults_to_the_current_directory_and_a_fresh_session_id(
    store: Path, work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(work)
    with DemoModelServer(["one", "two"]) as server:
        first = runner.invoke(app, ["run", "hi", "--store", "../store", "--base-url", server.base_url, "--json"])
        second = runner.invoke(app, ["run", "hi", "--store", "../store", "--base-url", server.base_url, "--json"])
    assert first.exit_code == 0 and second.exit_code == 0, first.stderr + second.stderr
    ids = {orjson.loads(first.stdout)["sessionId"], orjson.loads(second.stdout)["sessionId"]}
    assert len(ids) == 2
    rows = orjson.loads(runner.invoke(app, ["ls", "--store", str(store), "--json"]).stdout)["sessions"]
    assert {row["id"] for row in rows} == ids
    assert {row["cwd"] for row in rows} == {str(work)}  # absolute, though the store was given relative


def test_run__shows_tool_calls_and_their_results_then_the_final_answer(store: Path, work: Path) -> None:
    with DemoModelServer(TOOL_SCRIPT) as server:
        result = _run(server, store, work, "what is in notes.txt?", "--session-id", "s1")
        requests = server.requests
    assert result.exit_code == 0, result.output + result.stderr
    assert result.stdout.splitlines() == [
        "Reading.",
        '→ read_file {"path": "notes.txt"}',
        "← ok",
        "It says 42.",
        "session s1",
    ]
    tool_message = requests[1].body["messages"][-1]
    assert tool_message["role"] == "tool" and "the answer is 42" in tool_message["content"]


def test_run__a_failing_tool_shows_its_error_code(store: Path, work: Path) -> None:
    script = [Reply(tool_calls=[ToolCall("read_file", {"path": "missing.txt"})]), Reply(text="No such file.")]
    with DemoModelServer(script) as server:
        result = _run(server, store, work, "read missing.txt")
    assert result.exit_code == 0, result.stderr
    assert "← error NOT_FOUND\nNo such file.\n" in result.stdout


def test_run__json_prints_one_document_instead_of_streaming(store: Path, work: Path) -> None:
    with DemoModelServer(TOOL_SCRIPT) as server:
        result = _run(server, store, work, "what is in notes.txt?", "--session-id", "s1", "--json")
    assert result.exit_code == 0, result.stderr
    document = orjson.loads(result.stdout)  # the whole stdout is the document
    assert set(document) == {"sessionId", "turns", "messages"}
    assert document["sessionId"] == "s1"
    assert document["turns"] == [{"turn": 1, "reason": {"kind": "completed"}}]
    assert [m["role"] for m in document["messages"]] == ["user", "assistant", "user", "assistant"]
    assert document["messages"][-1]["content"] == [{"type": "text", "text": "It says 42."}]
    assert document["messages"][2]["content"][0]["toolCallId"] == "call-1"


def test_run__missing_api_key_fails_before_anything_is_written(
    store: Path, work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = runner.invoke(app, ["run", "hi", "--store", str(store), "--cwd", str(work), "--json"])
    assert result.exit_code == 1
    error = orjson.loads(result.stderr)["error"]
    assert error["code"] == "MISSING_API_KEY"
    assert "DEEPSEEK_API_KEY" in error["message"] and "OPENAI_API_KEY" in error["message"]
    assert result.stdout == ""
    assert not store.exists() or _tree_snapshot(store) == {}
    plain = runner.invoke(app, ["run", "hi", "--store", str(store), "--cwd", str(work)])
    assert plain.exit_code == 1 and "MISSING_API_KEY" in plain.stderr


def test_run__unreachable_endpoint_is_a_transport_error_and_the_log_stays_valid(store: Path, work: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    args = ["run", "hi", "--store", str(store), "--cwd", str(work), "--base-url", url]
    result = runner.invoke(app, [*args, "--session-id", "s1", "--max-retries", "0", "--json"])
    assert result.exit_code == 1
    assert orjson.loads(result.stderr)["error"]["code"] == "TRANSPORT"
    document = orjson.loads(result.stdout)
    assert document["turns"][0]["reason"]["kind"] == "error"
    assert document["turns"][0]["reason"]["error"]["code"] == "TRANSPORT"
    # Streaming mode: the logged retry is announced, the failure ends the command after the session id.
    plain = runner.invoke(app, [*args, "--session-id", "s2", "--max-retries", "1"])
    assert plain.exit_code == 1
    assert "retry 1/1" in plain.stderr and "TRANSPORT" in plain.stderr
    assert plain.stdout.endswith("session s2\n")
    assert _verify_ok(store) == {"s1": "ok", "s2": "ok"}
    events = _events(store, "s2")
    assert [e["type"] for e in events if e["type"].startswith("llm/")] == ["llm/retry", "llm/retry-started"]
    assert events[-1]["type"] == "turn/end" and events[-1]["data"]["reason"]["kind"] == "error"


def test_run__refuses_an_existing_session_id(store: Path, work: Path) -> None:
    _record(store, work)
    before = _tree_snapshot(store)
    with DemoModelServer(["unused"]) as server:
        result = _run(server, store, work, "hi", "--session-id", "s1", "--json")
        assert server.requests == []
    assert result.exit_code == 1
    assert orjson.loads(result.stderr)["error"]["code"] == "SESSION_ALREADY_EXISTS"
    assert _tree_snapshot(store) == before


# --- resume ---------------------------------------------------------------------------------------------


def test_resume__a_follow_up_prompt_continues_at_turn_two(store: Path, work: Path) -> None:
    _record(store, work)
    with DemoModelServer(["Still 42."]) as server:
        result = runner.invoke(
            app, ["resume", "s1", "and now?", "--store", str(store), "--base-url", server.base_url, "--json"]
        )
        requests = server.requests
    assert result.exit_code == 0, result.stderr
    document = orjson.loads(result.stdout)
    assert document["turns"] == [{"turn": 2, "reason": {"kind": "completed"}}]
    assert document["repaired"] is False
    assert [m["role"] for m in document["messages"]] == ["user", "assistant"] * 3
    sent = requests[0].body["messages"]
    assert sent[0] == {"role": "user", "content": "what is in notes.txt?"} and sent[-1]["content"] == "and now?"
    events = _events(store, "s1")
    assert [e["data"]["reason"] for e in events if e["type"] == "request/header"] == ["initial", "resume"]
    assert [e["data"]["turn"] for e in events if e["type"] == "turn/start"] == [1, 2]
    assert _verify_ok(store) == {"s1": "ok"}
    # Streaming mode: the session's model route and tool directory are kept.
    with DemoModelServer(["Yes."]) as server:
        plain = runner.invoke(app, ["resume", "s1", "sure?", "--store", str(store), "--base-url", server.base_url])
        assert server.requests[0].body["model"] == "deepseek-chat"
    assert plain.exit_code == 0, plain.stderr
    assert plain.stdout == "Yes.\nsession s1\n"


def _write_interrupted(root: Path, session_id: str) -> None:
    """A session that crashed inside turn 1, after its tool call was recorded."""
    sessions = al.SessionStore()
    coordinator = PersistenceCoordinator(sessions, JsonlBackend(str(root)))
    try:
        session = sessions.create(session_id, meta={"cwd": str(root)})
        session.append("turn/start", {"turn": 1})
        session.append("user/message", al.user_message("hello"), {"surfaceOp": "append"})
        session.append("step/start", {"turn": 1, "step": 1})
        session.append(
            "assistant/message",
            {
                "turn": 1,
                "step": 1,
                "message": al.assistant_message(
                    [al.tool_call_block("c1", "read_file", "{}")], provider="deepseek", model="deepseek-chat"
                ),
            },
            {"surfaceOp": "append"},
        )
        session.append("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "read_file", "arguments": "{}"})
        sessions.flush(session)
    finally:
        coordinator.close()


def test_resume__without_a_prompt_repairs_and_reports_the_session_state(store: Path, work: Path) -> None:
    _write_interrupted(store, "crashed")
    assert _verify_ok(store) == {"crashed": "repairable"}
    result = runner.invoke(app, ["resume", "crashed", "--store", str(store), "--json"])
    assert result.exit_code == 0, result.stderr
    document = orjson.loads(result.stdout)
    assert document["repaired"] is True
    assert document["lastTurn"] == {"turn": 1, "reason": {"kind": "interrupted"}}
    assert _verify_ok(store) == {"crashed": "ok"}
    again = runner.invoke(app, ["resume", "crashed", "--store", str(store)])
    assert again.exit_code == 0
    assert "last turn 1 (interrupted)" in again.stdout and "repaired: no" in again.stdout
    missing = runner.invoke(app, ["resume", "nope", "--store", str(store), "--json"])
    assert missing.exit_code == 1 and orjson.loads(missing.stderr)["error"]["code"] == "SESSION_NOT_FOUND"


# --- show and replay ------------------------------------------------------------------------------------


def test_show__transcript_log_and_view_at_a_seq_without_writing(store: Path, work: Path) -> None:
    _record(store, work)
    before = _tree_snapshot(store)
    transcript = runner.invoke(app, ["show", "s1", "--store", str(store)])
    assert transcript.exit_code == 0, transcript.stderr
    assert transcript.stdout.splitlines()[1:] == [
        "user: what is in notes.txt?",
        "assistant: Reading.",
        '  → read_file {"path": "notes.txt"}',
        "  ← read_file ok: the answer is 42",
        "assistant: It says 42.",
    ]
    structured = orjson.loads(runner.invoke(app, ["show", "s1", "--store", str(store), "--json"]).stdout)
    assert structured["lastTurn"] == {"turn": 1, "reason": {"kind": "completed"}}
    assert [m["role"] for m in structured["messages"]] == ["user", "assistant", "user", "assistant"]

    log = runner.invoke(app, ["show", "s1", "--store", str(store), "--log"])
    assert log.exit_code == 0
    events = _events(store, "s1")
    lines = log.stdout.splitlines()
    assert len(lines) == len(events)
    call_seq = next(e["seq"] for e in events if e["type"] == "tool/call")
    assert lines[call_seq].split()[:2] == [str(call_seq), "tool/call"]

    at = runner.invoke(app, ["show", "s1", "--store", str(store), "--at", str(call_seq), "--json"])
    assert at.exit_code == 0, at.stderr
    view = orjson.loads(at.stdout)
    assert view["seq"] == call_seq
    assert [m["role"] for m in view["messages"]] == ["user", "assistant"]  # the result is not in yet
    assert view["requestHeader"]["config"] == {"provider": "deepseek", "model": "deepseek-chat"}
    plain_at = runner.invoke(app, ["show", "s1", "--store", str(store), "--at", str(call_seq)])
    assert "request header: deepseek/deepseek-chat" in plain_at.stdout and "← read_file" not in plain_at.stdout
    out_of_range = runner.invoke(app, ["show", "s1", "--store", str(store), "--at", "9999", "--json"])
    assert out_of_range.exit_code == 1
    assert orjson.loads(out_of_range.stderr)["error"]["code"] == "SEQ_OUT_OF_RANGE"

    assert runner.invoke(app, ["replay", "s1", "--store", str(store), "--speed", "0"]).exit_code == 0
    _verify_ok(store)
    assert _tree_snapshot(store) == before


def test_show__an_interrupted_session_is_shown_balanced_without_writing(store: Path) -> None:
    _write_interrupted(store, "crashed")
    before = _tree_snapshot(store)
    result = runner.invoke(app, ["show", "crashed", "--store", str(store)])
    assert result.exit_code == 0, result.stderr
    assert "  ← read_file error: The tool call was interrupted" in result.stdout
    assert runner.invoke(app, ["replay", "crashed", "--store", str(store), "--speed", "0"]).exit_code == 0
    assert _tree_snapshot(store) == before


def test_replay__plays_back_the_recorded_text_at_the_recorded_pace(store: Path, work: Path) -> None:
    _record(store, work)
    fast = runner.invoke(app, ["replay", "s1", "--store", str(store), "--speed", "0"])
    assert fast.exit_code == 0, fast.stderr
    assert fast.stdout.splitlines() == [
        "> what is in notes.txt?",
        "Reading.",
        '→ read_file {"path": "notes.txt"}',
        "← ok",
        "It says 42.",
    ]
    slow_reply = Reply(text="tick tock tick", chunk_chars=2, delay_s=0.05)  # ~0.35 s of recorded chunks
    with DemoModelServer([slow_reply]) as server:
        assert _run(server, store, work, "time?", "--session-id", "slow").exit_code == 0
    started = time.monotonic()
    paced = runner.invoke(app, ["replay", "slow", "--store", str(store)])
    elapsed = time.monotonic() - started
    assert paced.exit_code == 0
    assert paced.stdout == "> time?\ntick tock tick\n"
    assert elapsed >= 0.2
    missing = runner.invoke(app, ["replay", "nope", "--store", str(store)])
    assert missing.exit_code == 1 and "SESSION_NOT_FOUND" in missing.stderr


# --- fork -----------------------------------------------------------------------------------------------


def test_fork__at_a_closed_turn_creates_a_listed_child_and_leaves_the_source_free(store: Path, work: Path) -> None:
    _record(store, work)
    events = _events(store, "s1")
    end_seq = next(e["seq"] for e in events if e["type"] == "turn/end")
    result = runner.invoke(
        app, ["fork", "s1", "--store", str(store), "--at", str(end_seq), "--child-id", "child", "--json"]
    )
    assert result.exit_code == 0, result.stderr
    assert orjson.loads(result.stdout) == {"childId": "child", "parentSession": "s1", "seedLength": end_seq + 1}
    rows = {
        row["id"]: row
        for row in orjson.loads(runner.invoke(app, ["ls", "--store", str(store), "--json"]).stdout)["sessions"]
    }
    assert rows["child"]["parentSession"] == "s1" and rows["child"]["cwd"] == str(work)
    assert _verify_ok(store) == {"child": "ok", "s1": "ok"}
    # Neither session is left live or locked: both can be resumed and continued right away.
    with DemoModelServer(["From the child.", "From the source."]) as server:
        url = ["--store", str(store), "--base-url", server.base_url, "--json"]
        child = runner.invoke(app, ["resume", "child", "go on", *url])
        source = runner.invoke(app, ["resume", "s1", "go on", *url])
    assert child.exit_code == 0 and source.exit_code == 0, child.stderr + source.stderr
    assert orjson.loads(child.stdout)["turns"][0]["turn"] == 2
    plain = runner.invoke(app, ["fork", "s1", "--store", str(store)])
    assert plain.exit_code == 0 and plain.stdout.startswith("s1-fork-")


def test_fork__refuses_open_turns_bad_boundaries_and_existing_children(store: Path, work: Path) -> None:
    _record(store, work)
    events = _events(store, "s1")
    open_seq = next(e["seq"] for e in events if e["type"] == "tool/call")
    before = _tree_snapshot(store)
    cases = [
        (["--at", str(open_seq)], "OPEN_TURN"),
        (["--at", "9999"], "INVALID_BOUNDARY"),
        (["--child-id", "s1"], "SESSION_ALREADY_EXISTS"),
    ]
    for extra, code in cases:
        result = runner.invoke(app, ["fork", "s1", "--store", str(store), "--child-id", "c", *extra, "--json"])
        assert result.exit_code == 1, extra
        assert orjson.loads(result.stderr)["error"]["code"] == code
    plain = runner.invoke(app, ["fork", "s1", "--store", str(store), "--at", str(open_seq)])
    assert plain.exit_code == 1 and "OPEN_TURN" in plain.stderr
    assert _tree_snapshot(store) == before  # the refusals wrote nothing at all
    ids = [
        row["id"]
        for row in orjson.loads(runner.invoke(app, ["ls", "--store", str(store), "--json"]).stdout)["sessions"]
    ]
    assert ids == ["s1"]
    assert _verify_ok(store) == {"s1": "ok"}


@pytest.mark.parametrize(("kind", "compression"), BACKENDS)
def test_fork__a_refused_fork_leaves_the_store_byte_for_byte_as_it_was(
    store: Path, work: Path, kind: str, compression: str
) -> None:
    backend = ["--backend", kind, "--compression", compression]
    with DemoModelServer(TOOL_SCRIPT) as server:
        result = _run(server, store, work, "what is in notes.txt?", "--session-id", "s1", *backend)
    assert result.exit_code == 0, result.stderr
    shown = runner.invoke(app, ["show", "s1", "--store", str(store), "--log", "--json", *backend])
    events = orjson.loads(shown.stdout)["events"]
    start = next(e["seq"] for e in events if e["type"] == "turn/start")
    end = next(e["seq"] for e in events if e["type"] == "turn/end")
    before = _tree_snapshot(store)
    for extra in (["--at", str(start + 4)], ["--at", "9999"], ["--at", str(start + 4), "--child-id", "s1"]):
        refused = runner.invoke(app, ["fork", "s1", "--store", str(store), *backend, *extra, "--json"])
        assert refused.exit_code == 1, refused.stdout
        assert _tree_snapshot(store) == before, extra
    inside = runner.invoke(app, ["fork", "s1", "--store", str(store), *backend, "--at", str(start + 4), "--json"])
    error = orjson.loads(inside.stderr)["error"]
    assert error["code"] == "OPEN_TURN"
    assert error["message"] == (
        f'fork boundary {start + 4} in session "s1" ends inside open turn 1: the nearest closed-turn '
        f"boundaries are {start - 1} (before turn 1 started) and {end} (its turn/end)"
    )
    assert _tree_snapshot(store) == before
    # The boundaries it names are accepted.
    for boundary in (start - 1, end):
        forked = runner.invoke(app, ["fork", "s1", "--store", str(store), *backend, "--at", str(boundary), "--json"])
        assert forked.exit_code == 0, forked.stderr
        assert orjson.loads(forked.stdout)["seedLength"] == boundary + 1


# Issue 7, defects 1 and 7 through the ``agentlog`` command: real processes, real signals.
#
# SIGINT (Ctrl-C) and SIGTERM to ``agentlog run`` while a command runs close the turn with every call
# answered and flushed, then exit 130 / 143; ``verify`` reports a log with an unanswered call as damaged;
# ``--max-steps`` ends a turn that keeps calling tools with ``MAX_STEPS_EXCEEDED``.


SID = "s1"
SLOW = [Reply(text="Running it.", tool_calls=[ScriptedCall("run_command", {"command": "sleep 30"}, id="slow")])]


def _agentlog() -> list[str]:
    found = shutil.which("agentlog", path=os.path.dirname(sys.executable))
    return [found] if found else [sys.executable, "-c", "from agentlog.cli import main; main()"]


def _stored(root: Path, compression: Literal["zstd", "none", "auto"] = "none") -> list[dict[str, Any]]:
    # The running child's own mode by default: "auto" decides from the root as it finds it, and a root
    # polled before the child's first file exists would be taken for a zstd store.
    backend = JsonlBackend(str(root), compression=compression)
    try:
        stored = backend.load_stored(SID)
    finally:
        backend.close()
    return [] if stored is None else [al.thaw(e) for e in stored.events]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["DEEPSEEK_API_KEY"] = "test-key"
    env.pop("OPENAI_API_KEY", None)
    return env


def _interrupt_run(
    tmp_path: Path, signals: list[signal.Signals], command: tuple[str, ...] = ("run", "run the slow command")
) -> tuple[int, str, list[dict[str, Any]]]:
    """Start ``agentlog run`` (or ``command``), wait until its tool body runs (tool/call durable), send
    ``signals``; return the exit code, stderr and the stored events."""
    root = tmp_path / "store"
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    session = ("--session-id", SID) if command[0] == "run" else ()
    args = [
        *_agentlog(),
        *command,
        "--store",
        str(root),
        "--compression",
        "none",
        "--cwd",
        str(work),
        *session,
        "--yes",
        "--json",
    ]
    with DemoModelServer(SLOW) as server:
        child = subprocess.Popen(
            [*args, "--base-url", server.base_url],
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 300  # a hang guard; the loop ends at the child's progress
            while "run_command" not in [e["data"].get("name") for e in _stored(root) if e["type"] == "tool/call"]:
                assert time.monotonic() < deadline, "the command never reached the tool body"
                assert child.poll() is None, f"agentlog run exited on its own: {child.communicate()}"
                time.sleep(0.05)
            # The tool/call is durable before the body starts; wait until the body's `sleep 30` process
            # exists (a fixed pause raced with a loaded machine and hit the not-yet-dispatched path).
            while not running_sleep(child.pid):
                assert time.monotonic() < deadline, "the tool body never started its command"
                assert child.poll() is None, f"agentlog run exited on its own: {child.communicate()}"
                time.sleep(0.05)
            for number in signals:
                os.kill(child.pid, number)
                time.sleep(0.05)
            _out, err = child.communicate(timeout=300)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    return child.returncode, err, _stored(root)


def _result_of(events: list[dict[str, Any]], call_id: str) -> dict[str, Any]:
    return next(e for e in events if e["type"] == "tool/result" and e["data"]["message"]["source"]["callId"] == call_id)


def test_sigint_to_agentlog_run_closes_the_turn_and_exits_130(tmp_path: Path) -> None:
    code, err, events = _interrupt_run(tmp_path, [signal.SIGINT])
    assert code == 130, err
    assert orjson.loads(err.strip().splitlines()[-1])["error"]["code"] == "TURN_ABORTED"
    assert_turns_closed_with_every_call_answered(events)
    assert _result_of(events, "slow")["data"]["error"]["code"] == "ABORTED"  # killed, and recorded as such
    assert events[-1]["data"]["reason"] == {"kind": "aborted", "reason": {"kind": "user"}}

    # verify agrees, and a resumed follow-up sends a request whose tool calls are all answered.
    store = str(tmp_path / "store")
    verified = runner.invoke(cli.app, ["verify", "--store", store, "--json"])
    assert verified.exit_code == 0, verified.output
    assert [s["status"] for s in orjson.loads(verified.stdout)["sessions"]] == ["ok"]
    seen: list[Any] = []

    def answer(request: RecordedRequest) -> Reply:
        messages = request.body["messages"]
        calls = {c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []}
        seen.append((calls, {m["tool_call_id"] for m in messages if m["role"] == "tool"}))
        return Reply(text="It was interrupted.")

    with DemoModelServer([answer]) as server:
        resumed = runner.invoke(
            cli.app,
            [
                *("resume", SID, "what happened?", "--store", store, "--compression", "none"),
                *("--base-url", server.base_url, "--json"),
            ],
            env={"DEEPSEEK_API_KEY": "k"},
        )
    assert resumed.exit_code == 0, resumed.output
    assert seen == [({"slow"}, {"slow"})]


def test_sigterm_to_agentlog_run_closes_the_turn_and_exits_143(tmp_path: Path) -> None:
    code, err, events = _interrupt_run(tmp_path, [signal.SIGTERM])
    assert code == 143, err
    assert_turns_closed_with_every_call_answered(events)
    assert _result_of(events, "slow")["data"]["error"]["code"] == "ABORTED"
    assert events[-1]["data"]["reason"] == {"kind": "aborted", "reason": {"kind": "hook", "reason": "SIGTERM"}}


def test_sigint_to_agentlog_resume_closes_its_turn_and_exits_130(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with DemoModelServer([Reply(text="Hello.")]) as server:
        first = runner.invoke(
            cli.app,
            [
                *("run", "hi", "--store", str(tmp_path / "store"), "--compression", "none", "--cwd", str(work)),
                *("--session-id", SID, "--base-url", server.base_url, "--json"),
            ],
            env={"DEEPSEEK_API_KEY": "k"},
        )
    assert first.exit_code == 0, first.output
    code, err, events = _interrupt_run(tmp_path, [signal.SIGINT], ("resume", SID, "now run the slow command"))
    assert code == 130, err
    assert_turns_closed_with_every_call_answered(events)
    assert [e["data"]["turn"] for e in events if e["type"] == "turn/end"] == [1, 2]
    assert _result_of(events, "slow")["data"]["error"]["code"] == "ABORTED"


def test_two_quick_sigints_still_close_the_turn_and_exit_130(tmp_path: Path) -> None:
    code, err, events = _interrupt_run(tmp_path, [signal.SIGINT, signal.SIGINT])
    assert code == 130, err
    assert_turns_closed_with_every_call_answered(events)
    assert _result_of(events, "slow")["data"]["error"]["code"] in ("ABORTED", "TOOL_OUTCOME_UNKNOWN")
    assert events[-1]["type"] == "turn/end" and events[-1]["data"]["reason"]["kind"] == "aborted"


def _poisoned_store(root: Path) -> None:
    """What an older build left after a cancel: a closed turn whose tool/call has no tool/result."""
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(root), compression="none"))
    session = store.create(SID)
    session.append("turn/start", {"turn": 1})  # a healthy first turn: seqs 0-4
    session.append("step/start", {"turn": 1, "step": 1})
    hello = al.assistant_message([al.text_block("hello")], provider="p", model="m")
    session.append("assistant/message", {"turn": 1, "step": 1, "message": hello}, {"surfaceOp": "append"})
    session.append("step/end", {"turn": 1, "step": 1})
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    session.append("turn/start", {"turn": 2})
    session.append("step/start", {"turn": 2, "step": 1})
    message = al.assistant_message(
        [al.tool_call_block("c1", "run_command", "{}")], provider="p", model="m"
    )
    session.append("assistant/message", {"turn": 2, "step": 1, "message": message}, {"surfaceOp": "append"})
    session.append("tool/call", {"turn": 2, "step": 1, "callId": "c1", "name": "run_command", "arguments": "{}"})
    session.append("step/end", {"turn": 2, "step": 1})
    session.append("turn/end", {"turn": 2, "reason": {"kind": "aborted", "reason": {"kind": "user"}}})
    store.flush(session)
    coordinator.close()


def test_verify_reports_an_unanswered_tool_call_as_damaged(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _poisoned_store(root)
    result = runner.invoke(cli.app, ["verify", "--store", str(root), "--json"])
    assert result.exit_code == 1, result.output
    [report] = orjson.loads(result.stdout)["sessions"]
    assert report["status"] == "failed"
    assert report["error"]["code"] == "UNPAIRED_TOOL_CALL"
    assert "c1" in report["error"]["message"]
    # The message names the remedy, and the remedy works: a fork at the last sound turn verifies.
    assert f"agentlog fork {SID} --at 4" in report["error"]["message"]
    forked = runner.invoke(cli.app, ["fork", SID, "--at", "4", "--store", str(root), "--compression", "none", "--json"])
    assert forked.exit_code == 0, forked.output
    child_id = orjson.loads(forked.stdout)["childId"]
    checked = runner.invoke(cli.app, ["verify", child_id, "--store", str(root), "--json"])
    assert checked.exit_code == 0, checked.output


@pytest.mark.subprocess  # the agent's shell tool starts the command
def test_max_steps_option_ends_a_tool_loop_with_a_typed_error(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("42\n")
    again = [Reply(tool_calls=[ScriptedCall("read_file", {"path": "notes.txt"}, id=f"c{i}")]) for i in range(6)]
    root = tmp_path / "store"
    with DemoModelServer(again) as server:
        result = runner.invoke(
            cli.app,
            [
                *("run", "loop", "--store", str(root), "--base-url", server.base_url, "--cwd", str(work)),
                *("--session-id", SID, "--max-steps", "3", "--json"),
            ],
            env={"DEEPSEEK_API_KEY": "k"},
        )
        requests = len(server.requests)
    assert result.exit_code == 1, result.output
    assert orjson.loads(result.stderr.strip().splitlines()[-1])["error"]["code"] == "MAX_STEPS_EXCEEDED"
    assert requests == 3
    document = orjson.loads(result.stdout)
    assert document["turns"][0]["reason"]["error"]["code"] == "MAX_STEPS_EXCEEDED"
    assert tool_pairing_problems(document["messages"]) == []  # the model-facing history stays sendable
    assert_turns_closed_with_every_call_answered(_stored(root, "auto"))


def test_max_steps_cli_default_is_the_loop_default() -> None:
    assert cli.DEFAULT_MAX_STEPS == loop.DEFAULT_MAX_STEPS == 50


@pytest.mark.parametrize("value", ["0", "-1"])
def test_max_steps_must_be_positive(value: str, tmp_path: Path) -> None:
    result = runner.invoke(cli.app, ["run", "x", "--store", str(tmp_path / "s"), "--max-steps", value])
    assert result.exit_code == 2
