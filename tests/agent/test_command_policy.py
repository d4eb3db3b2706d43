"""Issue 7, defect 10 (tools): ``run_command`` says what it confines, and commands pass a policy first.

Real processes and real files: a refused command must leave no trace (the file it would create does
not exist), an allowed one must really run. The CLI cases drive ``agentlog run`` / ``resume`` against
the scripted ``DemoModelServer`` over real HTTP.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner, Result

from agentlog.agent import RunCommandTool, ToolContext, ToolOutcome, ToolRegistry, builtin_registry, run_tool_call
from agentlog.agent.builtin_tools import COMMAND_NOT_ALLOWED, CommandPolicy
from agentlog.cli.commands import app
from agentlog.testing.demo_server import DemoModelServer, Reply, ToolCall

runner = CliRunner()


@pytest.fixture
def work(tmp_path: Path) -> Path:
    directory = tmp_path / "work"
    directory.mkdir()
    return directory


def _call(registry: ToolRegistry, cwd: Path, command: str) -> ToolOutcome:
    async def go() -> ToolOutcome:
        raw = json.dumps({"command": command})
        return await asyncio.wait_for(run_tool_call(registry, "c1", "run_command", raw, ToolContext("s1", cwd)), 10)

    return asyncio.run(go())


def _code(outcome: ToolOutcome) -> str | None:
    return outcome.error["code"] if outcome.error else None


# --- the library policy ---------------------------------------------------------------------------------


def test_a_denied_command_runs_nothing_and_says_how_to_allow_it(work: Path) -> None:
    registry = ToolRegistry([RunCommandTool(policy=CommandPolicy())])
    out = _call(registry, work, "touch created.txt")
    assert out.is_error and _code(out) == COMMAND_NOT_ALLOWED == "COMMAND_NOT_ALLOWED"
    assert "touch created.txt" in out.text_content and "allow" in out.text_content
    assert "nothing was run" in out.text_content.lower()
    assert not (work / "created.txt").exists()


@pytest.mark.subprocess  # the agent's shell tool starts the command
def test_allow_patterns_match_the_whole_command_line(work: Path) -> None:
    policy = CommandPolicy(allow_patterns=("touch *", "echo hi"))
    registry = builtin_registry(command_policy=policy)
    assert not _call(registry, work, "touch a.txt").is_error
    assert (work / "a.txt").exists()
    assert _call(registry, work, "echo hi").text_content == "hi\n[exit code: 0]"
    # A pattern is matched against the whole line (not a prefix) ...
    assert _code(_call(registry, work, "echo hi there")) == COMMAND_NOT_ALLOWED
    # ... and its wildcards never match a shell operator, so an allowed command cannot chain another.
    for chained in ("touch b.txt; touch c.txt", "touch b.txt && touch c.txt", "touch b.txt | tee c.txt",
                    "touch $(echo c.txt)", "touch `echo c.txt`", "touch b.txt > c.txt", "touch b.txt\ntouch c.txt"):
        assert _code(_call(registry, work, chained)) == COMMAND_NOT_ALLOWED, chained
    assert not (work / "b.txt").exists() and not (work / "c.txt").exists()
    assert policy.allows("touch x") and not policy.allows("rm -rf x")


@pytest.mark.subprocess  # the agent's shell tool starts the command
def test_approve_hook_sync_async_and_failing(work: Path) -> None:
    seen: list[str] = []

    def sync_approve(command: str) -> bool:
        seen.append(command)
        return command.startswith("touch ok")

    async def async_approve(command: str) -> bool:
        await asyncio.sleep(0)
        return "yes" in command

    def broken(command: str) -> bool:
        raise RuntimeError("approval service down")

    sync = builtin_registry(command_policy=CommandPolicy(approve=sync_approve))
    assert not _call(sync, work, "touch ok1").is_error and (work / "ok1").exists()
    assert _code(_call(sync, work, "touch no1")) == COMMAND_NOT_ALLOWED and not (work / "no1").exists()
    assert seen == ["touch ok1", "touch no1"]
    asynchronous = builtin_registry(command_policy=CommandPolicy(approve=async_approve))
    assert not _call(asynchronous, work, "touch yes2").is_error and (work / "yes2").exists()
    assert _code(_call(asynchronous, work, "touch no2")) == COMMAND_NOT_ALLOWED and not (work / "no2").exists()
    failing = builtin_registry(command_policy=CommandPolicy(approve=broken))
    out = _call(failing, work, "touch no3")
    assert _code(out) == COMMAND_NOT_ALLOWED and "approval service down" in out.text_content
    assert not (work / "no3").exists()
    # A pattern match needs no approval; the hook decides only what the patterns do not allow.
    mixed = builtin_registry(command_policy=CommandPolicy(allow_patterns=("touch p*",), approve=lambda c: False))
    assert not _call(mixed, work, "touch p4").is_error and (work / "p4").exists()


def test_cancel_while_waiting_for_approval_runs_nothing(work: Path) -> None:
    asked = asyncio.Event()

    async def never(command: str) -> bool:
        asked.set()
        await asyncio.sleep(60)
        return True

    async def scenario() -> ToolOutcome:
        cancel = asyncio.Event()
        registry = builtin_registry(command_policy=CommandPolicy(approve=never))
        raw = json.dumps({"command": "touch late.txt"})
        task = asyncio.create_task(run_tool_call(registry, "c1", "run_command", raw, ToolContext("s1", work, cancel)))
        await asked.wait()
        cancel.set()
        return await asyncio.wait_for(task, 5)

    out = asyncio.run(scenario())
    assert out.is_error and _code(out) == "ABORTED"
    assert "nothing was run" in out.text_content
    assert not (work / "late.txt").exists()


@pytest.mark.subprocess  # the agent's shell tool starts the command
def test_run_command_documents_what_it_confines(work: Path, tmp_path: Path) -> None:
    tool = RunCommandTool()
    text = tool.description
    # It starts in the working directory, with a timeout and an output cap, and says it is not confined.
    assert "working directory" in text and "not confined" in text
    assert "timeout" in text and str(tool.max_output_bytes) in text
    # The truth of "not confined": an allowed command can write outside the working directory.
    outside = tmp_path / "outside-written.txt"
    out = _call(builtin_registry(command_policy=CommandPolicy.allow_all()), work, f"touch {outside}")
    assert not out.is_error and outside.exists()
    assert RunCommandTool.__doc__ is not None and "not confined" in RunCommandTool.__doc__


# --- the command line -------------------------------------------------------------------------------------


def _touch_script(name: str) -> list[Any]:
    return [
        Reply(text="Creating it.", tool_calls=[ToolCall("run_command", {"command": f"touch {name}"}, id="call-1")]),
        Reply(text="Done."),
    ]


def _run(server: DemoModelServer, store: Path, work: Path, *extra: str) -> Result:
    args = ["run", "make the file", "--store", str(store), "--base-url", server.base_url, "--cwd", str(work)]
    return runner.invoke(app, [*args, "--json", *extra])


def _tool_result(result: Result) -> dict[str, Any]:
    assert result.exit_code == 0, result.stdout + result.stderr
    messages = orjson.loads(result.stdout)["messages"]
    [block] = [b for m in messages for b in m["content"] if b.get("type") == "tool-result"]
    return dict(block)


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def test_cli_run_denies_commands_by_default(tmp_path: Path, work: Path, keyed: None) -> None:
    with DemoModelServer(_touch_script("made.txt")) as server:
        result = _run(server, tmp_path / "store", work)
    block = _tool_result(result)
    assert block["isError"] is True
    text = block["content"][0]["text"]
    assert COMMAND_NOT_ALLOWED in text or "not allowed" in text
    assert "--allow-command" in text and "--yes" in text
    assert not (work / "made.txt").exists()


@pytest.mark.subprocess  # the agent's shell tool starts the command
def test_cli_run_yes_runs_the_command(tmp_path: Path, work: Path, keyed: None) -> None:
    with DemoModelServer(_touch_script("made.txt")) as server:
        result = _run(server, tmp_path / "store", work, "--yes")
    assert "isError" not in _tool_result(result)
    assert (work / "made.txt").exists()


@pytest.mark.subprocess  # the agent's shell tool starts the command
def test_cli_allow_command_patterns(tmp_path: Path, work: Path, keyed: None) -> None:
    store = tmp_path / "store"
    with DemoModelServer(_touch_script("a.txt")) as server:
        allowed = _run(server, store, work, "--allow-command", "ls *", "--allow-command", "touch *")
    assert "isError" not in _tool_result(allowed) and (work / "a.txt").exists()
    with DemoModelServer(_touch_script("b.txt")) as server:
        denied = _run(server, store, work, "--allow-command", "ls *")
    assert _tool_result(denied)["isError"] is True and not (work / "b.txt").exists()


@pytest.mark.subprocess  # the agent's shell tool starts the command
def test_cli_resume_takes_the_same_command_flags(tmp_path: Path, work: Path, keyed: None) -> None:
    store = tmp_path / "store"
    with DemoModelServer(["Hello."]) as server:
        first = _run(server, store, work, "--session-id", "s1")
        assert first.exit_code == 0, first.stderr
    base = ["resume", "s1", "again", "--store", str(store), "--json"]
    with DemoModelServer(_touch_script("r1.txt")) as server:
        denied = runner.invoke(app, [*base, "--base-url", server.base_url])
    assert denied.exit_code == 0, denied.stderr
    assert not (work / "r1.txt").exists()
    with DemoModelServer(_touch_script("r2.txt")) as server:
        allowed = runner.invoke(app, [*base, "--base-url", server.base_url, "--allow-command", "touch r2.txt"])
    assert allowed.exit_code == 0, allowed.stderr
    assert (work / "r2.txt").exists()
