"""Built-in tools against real files and real processes (no mocks).

Each test gets ``tmp_path/"work"`` as the working directory, with ``tmp_path/"outside.txt"`` as a file
the confinement must protect.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from agentlog.agent import (
    ListDirTool,
    ReadFileTool,
    RunCommandTool,
    ToolContext,
    ToolDefinitionError,
    ToolOutcome,
    ToolRegistry,
    WriteFileTool,
    builtin_registry,
    run_tool_call,
)
from agentlog.agent.builtin_tools import OUTPUT_TRUNCATED
from agentlog.kernel.jsonvalue import is_json_value

GUARD = 10.0


@pytest.fixture
def work(tmp_path: Path) -> Path:
    cwd = tmp_path / "work"
    cwd.mkdir()
    (tmp_path / "outside.txt").write_text("secret outside\n")
    (tmp_path / "outside_dir").mkdir()
    (tmp_path / "outside_dir" / "secret.txt").write_text("deep secret\n")
    return cwd


def _run(coro: Awaitable[Any]) -> Any:
    async def guarded() -> Any:
        return await asyncio.wait_for(coro, GUARD)

    return asyncio.run(guarded())


def call(tool: Any, cwd: Path, args: dict[str, Any] | str, cancel: asyncio.Event | None = None) -> ToolOutcome:
    """Run ``tool`` the way the loop will: through a registry, from raw argument text."""

    async def go() -> ToolOutcome:
        ctx = ToolContext("s1", cwd, cancel if cancel is not None else asyncio.Event(), turn=1, step=1)
        raw = args if isinstance(args, str) else json.dumps(args)
        outcome = await run_tool_call(ToolRegistry([tool]), "c1", tool.name, raw, ctx)
        assert is_json_value(list(outcome.content)) and is_json_value(outcome.meta)
        return outcome

    result: ToolOutcome = _run(go())
    return result


def code(outcome: ToolOutcome) -> str | None:
    return outcome.error["code"] if outcome.error else None


def _alive(pid: int) -> bool:
    """A reaped or zombie process counts as dead (a container's PID 1 may never reap orphans)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _wait_dead(pid: int) -> bool:
    deadline = time.monotonic() + 60  # a hang guard: returns as soon as the process is gone
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# --- read_file ------------------------------------------------------------------------------------


def test_read_file__reads_text_relative_to_cwd(work: Path) -> None:
    (work / "docs").mkdir()
    (work / "docs" / "a.txt").write_text("héllo\nworld\n")
    out = call(ReadFileTool(), work, {"path": "docs/a.txt"})
    assert not out.is_error and out.text_content == "héllo\nworld\n"
    assert out.meta == {"path": "docs/a.txt", "size": 13, "offset": 0, "end": 13}
    # An absolute path inside the working directory is fine.
    assert call(ReadFileTool(), work, {"path": str(work / "docs" / "a.txt")}).text_content == "héllo\nworld\n"


def test_read_file__offset_limit_and_cap_with_a_continuation_note(work: Path) -> None:
    (work / "big.txt").write_text("0123456789" * 10)
    tool = ReadFileTool(max_output_bytes=25)
    first = call(tool, work, {"path": "big.txt"})
    assert first.text_content.startswith("0123456789012345678901234\n\n[OUTPUT_TRUNCATED: showed bytes 0-25 of 100")
    assert "offset=25" in first.text_content and not first.is_error
    assert first.meta["truncated"] is True and first.meta["notes"] == [OUTPUT_TRUNCATED]
    second = call(tool, work, {"path": "big.txt", "offset": 25, "limit": 5})
    assert second.text_content.startswith("56789\n\n[OUTPUT_TRUNCATED: showed bytes 25-30 of 100")
    tail = call(tool, work, {"path": "big.txt", "offset": 90, "limit": 1000})  # the limit never exceeds the cap
    assert tail.text_content == "0123456789" and "truncated" not in tail.meta
    past = call(tool, work, {"path": "big.txt", "offset": 500})
    assert not past.is_error and "past the end" in past.text_content


def test_read_file__a_cap_never_splits_a_character(work: Path) -> None:
    (work / "e.txt").write_text("ééééé")  # 2 bytes each
    out = call(ReadFileTool(max_output_bytes=5), work, {"path": "e.txt"})
    assert out.text_content.startswith("éé\n\n[OUTPUT_TRUNCATED: showed bytes 0-4 of 10")
    rest = call(ReadFileTool(max_output_bytes=5), work, {"path": "e.txt", "offset": out.meta["end"]})
    assert rest.text_content.startswith("éé\n")


def test_read_file__binary_is_reported_not_dumped(work: Path) -> None:
    (work / "blob.bin").write_bytes(b"PK\x03\x04\x00\x00\xff\xfe" * 100)
    out = call(ReadFileTool(), work, {"path": "blob.bin"})
    assert not out.is_error and out.meta["binary"] is True
    assert out.text_content == "blob.bin is a binary file (800 bytes); its content is not shown."


def test_read_file__empty_missing_directory_and_fifo(work: Path) -> None:
    (work / "empty.txt").write_text("")
    assert call(ReadFileTool(), work, {"path": "empty.txt"}).text_content == "(empty file)"
    missing = call(ReadFileTool(), work, {"path": "nope.txt"})
    assert code(missing) == "NOT_FOUND" and "nope.txt" in missing.text_content
    (work / "sub").mkdir()
    assert code(call(ReadFileTool(), work, {"path": "sub"})) == "IS_A_DIRECTORY"
    os.mkfifo(work / "pipe")
    assert code(call(ReadFileTool(), work, {"path": "pipe"})) == "NOT_A_FILE"  # and does not hang


@pytest.mark.parametrize("path", ["../outside.txt", "sub/../../outside.txt", "ABS", "link.txt", "dirlink/secret.txt"])
def test_read_file__refuses_paths_that_resolve_outside_cwd(work: Path, path: str) -> None:
    (work / "sub").mkdir()
    (work / "link.txt").symlink_to(work.parent / "outside.txt")
    (work / "dirlink").symlink_to(work.parent / "outside_dir")
    path = str(work.parent / "outside.txt") if path == "ABS" else path
    out = call(ReadFileTool(), work, {"path": path})
    assert out.is_error and code(out) == "PATH_OUTSIDE_CWD"
    assert "secret outside" not in out.text_content and "deep secret" not in out.text_content
    allowed = call(ReadFileTool(allow_outside_cwd=True), work, {"path": path})
    assert not allowed.is_error and allowed.text_content in ("secret outside\n", "deep secret\n")


def test_read_file__symlink_inside_cwd_is_followed(work: Path) -> None:
    (work / "real.txt").write_text("inside\n")
    (work / "alias.txt").symlink_to("real.txt")
    assert call(ReadFileTool(), work, {"path": "alias.txt"}).text_content == "inside\n"


# --- list_dir -------------------------------------------------------------------------------------


def test_list_dir__sorted_with_directories_and_symlinks_marked(work: Path) -> None:
    for name in ("b.txt", "a.txt", "C.md"):
        (work / name).write_text("x")
    (work / "zdir").mkdir()
    (work / "adir").mkdir()
    (work / "alink").symlink_to("a.txt")
    (work / "adir" / "inner.txt").write_text("x")
    out = call(ListDirTool(), work, {})
    assert out.text_content.splitlines() == ["C.md", "a.txt", "adir/", "alink@", "b.txt", "zdir/"]
    assert call(ListDirTool(), work, {"path": "adir"}).text_content == "inner.txt"
    assert call(ListDirTool(), work, {"path": "zdir"}).text_content == "zdir: (empty directory)"


def test_list_dir__cap_missing_not_a_directory_and_confinement(work: Path) -> None:
    for i in range(7):
        (work / f"f{i}").write_text("x")
    out = call(ListDirTool(max_entries=3), work, {"path": "."})
    assert out.text_content == "f0\nf1\nf2\n\n[OUTPUT_TRUNCATED: showing 3 of 7 entries]" and not out.is_error
    assert out.meta == {"path": ".", "entries": 7, "truncated": True, "notes": [OUTPUT_TRUNCATED]}
    assert code(call(ListDirTool(), work, {"path": "nope"})) == "NOT_FOUND"
    assert code(call(ListDirTool(), work, {"path": "f0"})) == "NOT_A_DIRECTORY"
    assert code(call(ListDirTool(), work, {"path": ".."})) == "PATH_OUTSIDE_CWD"
    (work / "out").symlink_to(work.parent / "outside_dir")
    assert code(call(ListDirTool(), work, {"path": "out"})) == "PATH_OUTSIDE_CWD"
    assert call(ListDirTool(allow_outside_cwd=True), work, {"path": "out"}).text_content == "secret.txt"


def test_list_dir__undecodable_names_still_make_valid_json(work: Path) -> None:
    fd = os.open(os.fsencode(work) + b"/bad\xff.txt", os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)
    out = call(ListDirTool(), work, {})
    assert out.text_content == "bad\ufffd.txt"


# --- write_file -----------------------------------------------------------------------------------


def test_write_file__creates_parents_and_reports_bytes(work: Path) -> None:
    out = call(WriteFileTool(), work, {"path": "new/deep/file.txt", "content": "héllo"})
    assert not out.is_error and out.text_content == "created new/deep/file.txt (6 bytes written)"
    assert out.meta == {"path": "new/deep/file.txt", "bytes": 6, "created": True}
    assert (work / "new" / "deep" / "file.txt").read_text() == "héllo"
    again = call(WriteFileTool(), work, {"path": "new/deep/file.txt", "content": ""})
    assert again.text_content == "overwrote new/deep/file.txt (0 bytes written)"
    assert (work / "new" / "deep" / "file.txt").read_bytes() == b""
    assert WriteFileTool().execution == "exclusive"


@pytest.mark.parametrize("path", ["../outside.txt", "../evil/new.txt", "ABS", "link.txt", "dirlink/new.txt"])
def test_write_file__refuses_outside_cwd_and_touches_nothing(work: Path, path: str) -> None:
    (work / "link.txt").symlink_to(work.parent / "outside.txt")
    (work / "dirlink").symlink_to(work.parent / "outside_dir")
    before = sorted(p.name for p in work.parent.rglob("*"))
    path = str(work.parent / "outside.txt") if path == "ABS" else path
    out = call(WriteFileTool(), work, {"path": path, "content": "pwned"})
    assert code(out) == "PATH_OUTSIDE_CWD"
    assert (work.parent / "outside.txt").read_text() == "secret outside\n"
    assert sorted(p.name for p in work.parent.rglob("*")) == before


def test_write_file__outside_allowed_when_configured(work: Path) -> None:
    out = call(WriteFileTool(allow_outside_cwd=True), work, {"path": "../outside.txt", "content": "ok"})
    assert not out.is_error and (work.parent / "outside.txt").read_text() == "ok"


def test_write_file__directory_targets_and_file_parents_are_errors(work: Path) -> None:
    (work / "adir").mkdir()
    (work / "afile").write_text("x")
    assert code(call(WriteFileTool(), work, {"path": "adir", "content": "x"})) == "IS_A_DIRECTORY"
    assert code(call(WriteFileTool(), work, {"path": "afile/child.txt", "content": "x"})) == "NOT_A_DIRECTORY"
    assert code(call(WriteFileTool(), work, {"path": "x.txt"})) == "INVALID_ARGUMENTS"  # content is required


# --- run_command ----------------------------------------------------------------------------------


@pytest.mark.subprocess
def test_run_command__output_exit_code_and_cwd(work: Path) -> None:
    out = call(RunCommandTool(), work, {"command": "pwd; echo to-stderr >&2; exit 3"})
    assert not out.is_error  # a failing command is data, not a tool failure
    assert out.text_content == f"{os.path.realpath(work)}\nto-stderr\n[exit code: 3]"
    assert out.meta == {"exitCode": 3, "outputBytes": len(str(os.path.realpath(work))) + 11}
    silent = call(RunCommandTool(), work, {"command": "true"})
    assert silent.text_content == "[exit code: 0]"
    assert RunCommandTool().execution == "exclusive"


@pytest.mark.subprocess
def test_run_command__output_cap_keeps_head_and_tail(work: Path) -> None:
    command = "echo START; head -c 300000 /dev/zero | tr '\\0' x; echo; echo END"
    out = call(RunCommandTool(max_output_bytes=1000), work, {"command": command})
    text = out.text_content
    assert text.startswith("START\n") and text.endswith("END\n[exit code: 0]")
    assert f"[{OUTPUT_TRUNCATED}: " in text and len(text) < 1200
    assert out.meta["truncated"] is True and out.meta["outputBytes"] == 300011 and not out.is_error


@pytest.mark.subprocess
def test_run_command__timeout_kills_the_process_group(work: Path) -> None:
    command = "sleep 30 & echo $! > child.pid; echo $$ > shell.pid; echo begun; sleep 30"
    started = time.monotonic()
    out = call(RunCommandTool(), work, {"command": command, "timeout_seconds": 0.5})
    assert time.monotonic() - started < 5
    assert out.is_error and out.error == {"name": "TimeoutError", "code": "TIMEOUT"}
    assert "timed out after 0.5 s" in out.text_content and "begun" in out.text_content
    assert out.meta["timedOut"] is True
    for name in ("shell.pid", "child.pid"):
        assert _wait_dead(int((work / name).read_text())), name


@pytest.mark.subprocess
def test_run_command__cancellation_kills_it(work: Path) -> None:
    async def scenario() -> ToolOutcome:
        cancel = asyncio.Event()
        ctx = ToolContext("s1", work, cancel)
        registry = ToolRegistry([RunCommandTool()])
        task = asyncio.create_task(
            run_tool_call(registry, "c1", "run_command", json.dumps({"command": "echo $$ > sh.pid; sleep 30"}), ctx)
        )
        while not (work / "sh.pid").exists() or not (work / "sh.pid").read_text().strip():
            await asyncio.sleep(0.01)
        cancel.set()
        return await task

    out = _run(scenario())
    assert out.is_error and out.error == {"name": "AbortError", "code": "ABORTED"}
    assert _wait_dead(int((work / "sh.pid").read_text()))


@pytest.mark.subprocess
def test_run_command__background_job_holding_output_is_killed_after_exit(work: Path) -> None:
    out = call(RunCommandTool(drain_grace=0.1), work, {"command": "sleep 30 & echo $! > bg.pid; echo done"})
    assert not out.is_error and out.text_content.startswith("done\n[exit code: 0]")
    assert out.meta["killedBackground"] is True
    assert _wait_dead(int((work / "bg.pid").read_text()))
    # A properly detached job (output redirected) is left alone.
    detached = call(RunCommandTool(drain_grace=0.1), work, {"command": "sleep 30 >/dev/null 2>&1 & echo $! > d.pid"})
    pid = int((work / "d.pid").read_text())
    try:
        assert "killedBackground" not in detached.meta and _alive(pid)
    finally:
        os.kill(pid, 9)


@pytest.mark.subprocess
def test_run_command__missing_cwd_is_an_error(work: Path) -> None:
    out = call(RunCommandTool(), work / "gone", {"command": "true"})
    assert code(out) == "NOT_FOUND"


# --- registry -------------------------------------------------------------------------------------


def test_builtin_registry__four_tools_and_cwd_policies(work: Path) -> None:
    registry = builtin_registry()
    assert registry.names() == ["read_file", "list_dir", "write_file", "run_command"]
    assert [registry.execution_of(n) for n in registry.names()] == ["parallel", "parallel", "exclusive", "exclusive"]
    assert all(is_json_value(s) and s["parameters"]["type"] == "object" for s in registry.schemas())

    async def go(reg: ToolRegistry, name: str, args: dict[str, Any]) -> ToolOutcome:
        return await run_tool_call(reg, "c1", name, json.dumps(args), ToolContext("s1", work))

    read = {"path": "../outside.txt"}
    write = {"path": "../outside.txt", "content": "changed"}
    confined, read_outside, unconfined = (builtin_registry(p) for p in ("confined", "read-outside", "unconfined"))
    assert code(_run(go(confined, "read_file", read))) == "PATH_OUTSIDE_CWD"
    assert _run(go(read_outside, "read_file", read)).text_content == "secret outside\n"
    assert code(_run(go(read_outside, "write_file", write))) == "PATH_OUTSIDE_CWD"
    assert not _run(go(unconfined, "write_file", write)).is_error
    assert (work.parent / "outside.txt").read_text() == "changed"
    with pytest.raises(ToolDefinitionError):
        builtin_registry("everywhere")  # type: ignore[arg-type]
