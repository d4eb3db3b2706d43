"""Issue 7, defects 1 and 7 through the ``agentlog`` command: real processes, real signals.

SIGINT (Ctrl-C) and SIGTERM to ``agentlog run`` while a command runs close the turn with every call
answered and flushed, then exit 130 / 143; ``verify`` reports a log with an unanswered call as damaged;
``--max-steps`` ends a turn that keeps calling tools with ``MAX_STEPS_EXCEEDED``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from _procs import running_sleep
from test_issue7_cancel import assert_turns_closed_with_every_call_answered
from typer.testing import CliRunner

import agentlog as al
import agentlog.cli.commands as cli
from agentlog.agent import loop
from agentlog.kernel.invariants import tool_pairing_problems
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing.demo_server import DemoModelServer, RecordedRequest, Reply
from agentlog.testing.demo_server import ToolCall as ScriptedCall

runner = CliRunner()
SID = "s1"
SLOW = [Reply(text="Running it.", tool_calls=[ScriptedCall("run_command", {"command": "sleep 30"}, id="slow")])]


def _agentlog() -> list[str]:
    found = shutil.which("agentlog", path=os.path.dirname(sys.executable))
    return [found] if found else [sys.executable, "-c", "from agentlog.cli import main; main()"]


def _stored(root: Path) -> list[dict[str, Any]]:
    backend = JsonlBackend(str(root), compression="auto")
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


def test_issue7_d1_sigint_to_agentlog_run_closes_the_turn_and_exits_130(tmp_path: Path) -> None:
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


def test_issue7_d1_sigterm_to_agentlog_run_closes_the_turn_and_exits_143(tmp_path: Path) -> None:
    code, err, events = _interrupt_run(tmp_path, [signal.SIGTERM])
    assert code == 143, err
    assert_turns_closed_with_every_call_answered(events)
    assert _result_of(events, "slow")["data"]["error"]["code"] == "ABORTED"
    assert events[-1]["data"]["reason"] == {"kind": "aborted", "reason": {"kind": "hook", "reason": "SIGTERM"}}


def test_issue7_d1_sigint_to_agentlog_resume_closes_its_turn_and_exits_130(tmp_path: Path) -> None:
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


def test_issue7_d1_two_quick_sigints_still_close_the_turn_and_exit_130(tmp_path: Path) -> None:
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


def test_issue7_d1_verify_reports_an_unanswered_tool_call_as_damaged(tmp_path: Path) -> None:
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
def test_issue7_d7_max_steps_option_ends_a_tool_loop_with_a_typed_error(tmp_path: Path) -> None:
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
    assert_turns_closed_with_every_call_answered(_stored(root))


def test_issue7_d7_max_steps_cli_default_is_the_loop_default() -> None:
    assert cli.DEFAULT_MAX_STEPS == loop.DEFAULT_MAX_STEPS == 50


@pytest.mark.parametrize("value", ["0", "-1"])
def test_issue7_d7_max_steps_must_be_positive(value: str, tmp_path: Path) -> None:
    result = runner.invoke(cli.app, ["run", "x", "--store", str(tmp_path / "s"), "--max-steps", value])
    assert result.exit_code == 2
