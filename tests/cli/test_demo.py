"""``agentlog demo`` end to end: a real child process is SIGKILLed mid-tool-call, then resumed and forked.

These run the real thing (a second interpreter, the real ``openai`` client, a JSONL/zstd store on disk)
because the demo's claim is about real processes and real files; a mocked crash would prove nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from agentlog.cli.commands import app
from agentlog.cli.demo import DEMO_MODEL_LABEL, SLOW_CALL_ID, RequestCheck, run_demo
from agentlog.kernel.repair import TOOL_OUTCOME_UNKNOWN
from agentlog.testing.demo_server import ErrorReply, RecordedRequest, Reply

SRC = Path(__file__).resolve().parents[2] / "src"


def _request(messages: list[dict[str, Any]]) -> RecordedRequest:
    return RecordedRequest(method="POST", path="/v1/chat/completions", headers={}, body={"messages": messages})


@pytest.mark.subprocess  # agentlog demo starts the agent in a child process
def test_demo__json_facts_show_the_crash_the_repair_and_the_fork(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_demo(store=tmp_path, as_json=True) == 0
    out = capsys.readouterr().out
    facts = orjson.loads(out)  # stdout is exactly one JSON document

    assert facts["ok"] is True
    assert facts["model"]["label"] == DEMO_MODEL_LABEL
    assert facts["store"]["root"] == str(tmp_path.absolute()) and facts["store"]["temporary"] is False
    # The child really died by SIGKILL while its tool call was durable and unanswered.
    assert facts["child"]["signal"] == "SIGKILL" and facts["child"]["exitCode"] == -9
    assert facts["child"]["toolCall"]["callId"] == SLOW_CALL_ID
    assert facts["child"]["toolCall"]["name"] == "run_command"
    assert facts["durableBeforeResume"]["lastType"] == "tool/call"
    assert facts["durableBeforeResume"]["openTurn"] == 2
    # Resume answered it with an unknown outcome and closed the step and the turn.
    assert facts["repair"]["toolResult"]["code"] == TOOL_OUTCOME_UNKNOWN
    assert facts["repair"]["toolResult"]["callId"] == SLOW_CALL_ID
    types = [event["type"] for event in facts["repair"]["events"]]
    assert types[:3] == ["tool/result", "step/end", "turn/end"]
    assert facts["repair"]["events"][2]["reason"] == "interrupted"
    # The next request was well-formed, and the turn completed.
    check = facts["followUp"]["requestCheck"]
    assert check["ran"] is True and check["passed"] is True and check["problems"] == []
    assert check["assistantToolCalls"] == check["answeredByToolMessages"] == 2
    assert check["unknownOutcomeSeen"] is True
    assert facts["followUp"]["turn"] == 3 and facts["followUp"]["outcome"] == {"kind": "completed"}
    # The fork exists, with its lineage.
    session_id = facts["session"]["id"]
    assert facts["fork"]["parentSession"] == session_id
    assert facts["fork"]["sameMessagesAsParent"] is True
    # The fork delegated once: the subagent's session is linked to it and its answer is the fork's result.
    delegation = facts["delegation"]
    assert delegation["parentSession"] == facts["fork"]["id"]
    assert (delegation["origin"], delegation["delegationDepth"]) == ("subagent", 1)
    assert delegation["answer"] and delegation["answer"] == delegation["toolResult"]
    rows = {row["role"]: row for row in facts["summary"]}
    assert rows["session"]["id"] == session_id and rows["fork"]["id"] == facts["fork"]["id"]
    for row in rows.values():
        turns = 4  # the session had the compaction step's turn after the fork, the fork its delegating turn
        assert row["events"] > 0 and row["turns"] == turns and row["surface"] > 0 and row["fileBytes"] > 0
        assert Path(row["file"]).is_file() and Path(row["file"]).is_relative_to(tmp_path.absolute())
        assert row["file"].endswith(".jsonl.zstd")

    # Both sessions stay in the store and pass every check of `agentlog verify`.
    result = CliRunner().invoke(app, ["verify", "--store", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    verified = orjson.loads(result.stdout)
    assert verified["ok"] is True
    expected = [session_id, facts["fork"]["id"], delegation["childId"]]
    assert sorted(s["id"] for s in verified["sessions"]) == sorted(expected)
    assert all(s["status"] == "ok" for s in verified["sessions"])


def test_demo__python_dash_m_runs_and_labels_the_scripted_model(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    result = subprocess.run(
        [sys.executable, "-m", "agentlog.cli.demo"],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "scripted demo model" in result.stdout
    assert DEMO_MODEL_LABEL in result.stdout
    assert TOOL_OUTCOME_UNKNOWN in result.stdout
    assert "request check passed" in result.stdout
    assert "demo complete" in result.stdout


def test_request_check__refuses_an_unanswered_tool_call_like_a_real_api() -> None:
    check = RequestCheck()
    item = check(
        _request(
            [
                {"role": "user", "content": "run it"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": SLOW_CALL_ID, "type": "function"}]},
                {"role": "user", "content": "well?"},
            ]
        )
    )
    assert isinstance(item, ErrorReply) and item.status == 400
    assert check.passed is False and check.tool_calls == 1 and check.answered == 0
    assert any(SLOW_CALL_ID in problem and "not answered" in problem for problem in check.problems)


def test_request_check__accepts_a_repaired_history() -> None:
    check = RequestCheck()
    item = check(
        _request(
            [
                {"role": "user", "content": "run it"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": SLOW_CALL_ID, "type": "function"}]},
                {"role": "tool", "tool_call_id": SLOW_CALL_ID, "content": "... Its outcome is unknown. ..."},
                {"role": "user", "content": "well?"},
            ]
        )
    )
    assert isinstance(item, Reply)
    assert check.passed is True and check.answered == 1 and check.unknown_outcome_seen is True


def test_demo__the_agentlog_demo_command_through_the_runner_and_as_a_subprocess(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["demo", "--store", str(tmp_path / "runner"), "--json"])
    assert result.exit_code == 0, result.output
    document = orjson.loads(result.stdout)
    assert document["ok"] is True
    script = Path(sys.executable).with_name("agentlog")
    command = [str(script), "demo"] if script.exists() else [sys.executable, "-m", "agentlog.cli", "demo"]
    completed = subprocess.run(
        [*command, "--store", str(tmp_path / "subprocess")], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    assert DEMO_MODEL_LABEL in completed.stdout


def test_demo__run_command_is_allowed_the_scripted_command_only() -> None:
    from agentlog.agent import RunCommandTool
    from agentlog.cli.demo import SLOW_COMMAND, _tools

    tool = _tools().get("run_command")
    assert isinstance(tool, RunCommandTool)
    assert tool.policy.allows(SLOW_COMMAND)
    assert not tool.policy.allows("rm -rf ~") and not tool.policy.allows(f"{SLOW_COMMAND}; rm -rf ~")
