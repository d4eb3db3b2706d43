"""``agentlog demo``: a real agent is SIGKILLed in the middle of a tool call, then resumed, repaired and forked.

The point of an append-only session log is what happens when things go wrong, so the demo shows
exactly that, with nothing faked but the model:

1. A scripted model (:class:`~agentlog.testing.demo_server.DemoModelServer`) serves the OpenAI streaming
   API on loopback. It is labelled as scripted everywhere it appears, because a transcript must never
   be mistaken for a real model's. No API key and no network are needed.
2. A **child process** runs a real :class:`~agentlog.agent.loop.Agent` with the real ``openai`` client,
   streamed tool calls and the built-in tools, writing a JSONL/zstd store. Turn 1 reads a file; in
   turn 2 the model starts ``sleep 30``. The parent watches the *store* (not the child's output) for the
   durable ``tool/call`` event — the loop flushes it before the tool body runs — and SIGKILLs the child
   while the command runs. A separate process is the only honest way to show a crash: nothing in it
   gets to clean up, flush or close.
3. The parent resumes the session (``PersistenceCoordinator.resume``): the open turn is closed with a
   ``TOOL_OUTCOME_UNKNOWN`` result and synthetic ``step/end`` / ``turn/end``. One more turn then runs
   against the scripted model, whose script is a function that checks the request it receives: every
   assistant tool call must be answered by a tool message, or it answers 400 as a real API would.
4. The session is forked at its last closed turn, and the fork delegates one task to a subagent: a child
   session linked to it (``parentSession``, ``origin: "subagent"``, ``delegationDepth: 1``) whose answer
   becomes the fork's tool result, naming the child and the seqs of its answer.
5. Compaction: one more turn reads a large build log, then ``Agent.compact_now()`` replaces everything
   but the newest message with one summary checkpoint (written by the scripted model, which answers
   compaction requests with a short fixed-structure summary). The surface the model is sent shrinks;
   the log only grows by the four compaction events, and ``session.at(seq)`` before them still derives
   the full history.
6. A summary compares the session and the fork.

``python -m agentlog.demo`` runs the same thing; ``--child`` is the internal entry point of step 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..agent.builtin_tools import CommandPolicy, builtin_registry
from ..agent.loop import Agent, AgentOptions, TurnOutcome
from ..agent.subagents import SubagentConfig
from ..agent.tools import ToolRegistry
from ..compaction.events import COMPACTION_END, COMPACTION_START, COMPACTION_SUMMARY
from ..errors import AgentlogError
from ..kernel.events import (
    ASSISTANT_MESSAGE,
    SESSION_END_SEED,
    STEP_END,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
)
from ..kernel.invariants import SessionInvariants
from ..kernel.jsonvalue import thaw
from ..kernel.repair import TOOL_OUTCOME_UNKNOWN, interrupted_turn_closers
from ..kernel.session import Session
from ..kernel.store import SessionStore
from ..persistence.coordinator import PersistenceCoordinator
from ..persistence.jsonl.backend import JsonlBackend
from ..testing.demo_server import DemoModelServer, ErrorReply, RecordedRequest, Reply, ScriptItem, ToolCall
from .render import _emit_json, _emit_json_line, _TableOutput

if TYPE_CHECKING:
    from ..compaction import CompactionResult
    from ..llm.openai_compat import OpenAICompatibleProvider

DEMO_MODEL_LABEL = "scripted demo model — no real LLM"
MODEL = "demo-model"
PROVIDER_ROUTE = "demo"
SYSTEM_PROMPT = "You are a careful coding agent working in the user's workspace."
NOTES_FILE = "notes.txt"
NOTES_TEXT = "Release checklist\n- run the nightly job before tagging\n- the answer is 42\n"
READ_CALL_ID = "call-read-notes"
SLOW_CALL_ID = "call-nightly-job"
SLOW_COMMAND = "sleep 30"
CHILD_PROMPTS = (
    f"What does {NOTES_FILE} say?",
    f"Run the nightly job now (`{SLOW_COMMAND}` stands in for it).",
)
FOLLOWUP_PROMPT = "We lost you for a moment there. Did the nightly job finish?"
BUILD_LOG = "build.log"
BUILD_STEPS = 120
BUILD_LOG_TEXT = "".join(
    f"[00:{step // 60:02d}:{step % 60:02d}] step {step:3d}/{BUILD_STEPS}: compile module_{step:03d} ... ok\n"
    for step in range(1, BUILD_STEPS + 1)
)
BUILD_CALL_ID = "call-read-build-log"
BUILD_PROMPT = f"Did last night's build pass? The log is {BUILD_LOG}."
BUILD_ANSWER = f"Yes: all {BUILD_STEPS} steps compiled without an error."
DELEGATE_PROMPT = f"Ask a helper to double-check {NOTES_FILE}, then tell me what it found."
DELEGATE_CALL_ID = "call-delegate-check"
DELEGATE_TASK = f"Check {NOTES_FILE}: does it still say to run the nightly job before tagging?"
HELPER_ANSWER = f"Yes: {NOTES_FILE} still says to run the nightly job before tagging."
COMPACTION_EVENTS = (COMPACTION_START, COMPACTION_SUMMARY, USER_MESSAGE, COMPACTION_END)
"""What one successful compaction appends, in order (runtime spec §5.2); the checkpoint is the user/message."""

TOOL_CALL_DEADLINE_S = 30.0
"""How long the parent waits for the child's durable ``tool/call`` (interpreter start included)."""
TOOL_PROCESS_WAIT_S = 3.0
"""How long the parent waits to see the tool's process appear before it kills the child anyway."""
_POLL_S = 0.05


class DemoFailure(Exception):
    """A demo step did not do what it must; the message says which step and why."""

    def __init__(self, message: str, code: str = "DEMO_FAILED") -> None:
        super().__init__(message)
        self.code = code


# --- small helpers -----------------------------------------------------------------------------------


def _clip(text: str, width: int = 72) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _block_text(blocks: Sequence[Any]) -> str:
    return "".join(b["text"] for b in blocks if isinstance(b, Mapping) and b.get("type") == "text")


def _render_message(message: Mapping[str, Any], width: int = 72) -> str:
    """One derived message as one readable line (text, tool calls, tool results with their error)."""
    parts: list[str] = []
    for block in message.get("content") or ():
        kind = block.get("type")
        if kind == "text":
            parts.append(_clip(block["text"], width))
        elif kind == "reasoning":
            continue  # streamed and logged, but one line has no room for it
        elif kind == "tool-call":
            parts.append(f"→ {block['id']}: {block['name']} {block['arguments']}")
        elif kind == "tool-result":
            flag = " ERROR" if block.get("isError") else ""
            parts.append(f"← {block['toolCallId']}{flag}: {_clip(_block_text(block.get('content') or ()), width)}")
        else:
            parts.append(f"<{kind}>")
    return "  ".join(parts)


def _transcript(rows: Sequence[tuple[Mapping[str, Any], bool]], width: int) -> Table:
    """Messages as a table, one line each: content is cut to fit ``width`` columns, never wrapped.

    ``rows`` pairs each message with whether to highlight it (the repaired result stands out)."""
    table = Table(show_header=True, header_style="bold", box=None, padding=(0, 1), expand=False)
    table.add_column("#", justify="right", style="dim")
    table.add_column("role")
    table.add_column("content")
    room = max(width - 18, 30)
    for index, (message, highlight) in enumerate(rows):
        table.add_row(
            str(index),
            str(message.get("role")),
            escape(_clip(_render_message(message, room), room)),
            style="bold red" if highlight else None,
        )
    return table


def _options(workspace: Path) -> AgentOptions:
    """The same options in the child and the parent, so the resumed request header is unchanged."""
    return AgentOptions(provider=PROVIDER_ROUTE, model=MODEL, system=SYSTEM_PROMPT, cwd=workspace)


def _tools() -> ToolRegistry:
    """The built-in tools, with ``run_command`` allowed exactly the scripted command and nothing else
    (the same in the child and the parent: the tool descriptions are part of the request header)."""
    return builtin_registry(command_policy=CommandPolicy(allow_patterns=(SLOW_COMMAND,)))


@contextlib.contextmanager
def _loopback_without_proxy() -> Iterator[None]:
    """While the HTTP client is built, exempt loopback from any ``*_PROXY`` settings.

    httpx reads proxy variables when a client is constructed; a user's corporate proxy must not
    swallow requests to the local demo model (the demo has to work offline, proxies or not).
    """
    saved = {name: os.environ.get(name) for name in ("NO_PROXY", "no_proxy")}
    for name, value in saved.items():
        os.environ[name] = ",".join(p for p in (value, "127.0.0.1", "localhost") if p)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _provider(base_url: str) -> OpenAICompatibleProvider:
    """The real ``openai``-based provider, pointed at the scripted model.

    Imported here, not at module level: ``openai`` takes half a second to import, and the ``agentlog``
    command should not pay that for commands other than ``demo``.
    """
    from ..llm.openai_compat import OpenAICompatibleProvider

    with _loopback_without_proxy():
        return OpenAICompatibleProvider(base_url=base_url, api_key="demo", model=MODEL)


def _child_pids(pid: int) -> list[int]:
    """Direct children of ``pid`` from ``/proc`` (empty where there is no ``/proc``).

    Used to find the tool's shell: ``run_command`` starts it in a new session, so SIGKILLing the agent
    process leaves it running, and the demo must not leave a stray ``sleep`` behind.
    """
    found: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            stat = Path("/proc", name, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[1] == str(pid):
            found.append(int(name))
    return found


def _cmdline(pid: int) -> str:
    try:
        raw = Path("/proc", str(pid), "cmdline").read_bytes()
    except OSError:
        return ""
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)


def _kill_tool_group(pid: int) -> None:
    """SIGKILL the tool's process group (it leads its own), as the crash of a whole machine would."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)


# --- the scripted model ------------------------------------------------------------------------------


def _answer_from_tool_result(request: RecordedRequest) -> ScriptItem:
    """Turn 1, step 2: answer from the file content the client sent back (so the data really flowed)."""
    messages = request.body.get("messages", []) if isinstance(request.body, dict) else []
    results = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "tool"]
    text = results[-1] if results and isinstance(results[-1], str) else ""
    lines = [line.lstrip("- ").strip() for line in text.splitlines()[1:] if line.strip()]
    if not lines:
        return Reply(text=f"{NOTES_FILE} came back empty.")
    return Reply(text=f"{NOTES_FILE} is a release checklist: " + "; ".join(lines) + ".")


def child_script() -> list[ScriptItem]:
    """What the scripted model answers to the child's three requests (two turns)."""
    return [
        Reply(
            reasoning="The user asks about a file; read it before answering.",
            text="Reading it.",
            tool_calls=[ToolCall("read_file", {"path": NOTES_FILE}, id=READ_CALL_ID)],
        ),
        _answer_from_tool_result,
        Reply(
            reasoning="Start the job and wait for it.",
            text="Starting it.",
            tool_calls=[ToolCall("run_command", {"command": SLOW_COMMAND}, id=SLOW_CALL_ID)],
        ),
    ]


def delegation_script() -> list[ScriptItem]:
    """Step 4's turn on the fork: the model delegates one task, the subagent answers, the model reports."""
    return [
        Reply(
            text="Asking a helper.",
            tool_calls=[ToolCall("delegate", {"task": DELEGATE_TASK, "label": "checker"}, id=DELEGATE_CALL_ID)],
        ),
        Reply(text=HELPER_ANSWER),  # the subagent's own session
        Reply(text=f"The helper confirms it: {HELPER_ANSWER}"),
    ]


def build_log_script() -> list[ScriptItem]:
    """Step 5's turn: read the (large) build log, then answer. The compaction request after it is answered
    by the server's built-in summary, not by the script."""
    return [
        Reply(
            reasoning="Read the log before answering.",
            text="Reading the build log.",
            tool_calls=[ToolCall("read_file", {"path": BUILD_LOG}, id=BUILD_CALL_ID)],
        ),
        Reply(text=BUILD_ANSWER),
    ]


class RequestCheck:
    """A script item that checks the request it answers, as a strict chat-completions API would.

    Every assistant message with ``tool_calls`` must be followed by one ``tool`` message per call (and
    every ``tool`` message must answer a call). A real API rejects anything else with a 400 — a
    session that fails this once fails on every later turn, which is what crash repair prevents.
    """

    def __init__(self) -> None:
        self.ran = False
        self.passed = False
        self.tool_calls = 0
        self.answered = 0
        self.unknown_outcome_seen = False
        self.messages = 0
        self.problems: list[str] = []

    def __call__(self, request: RecordedRequest) -> ScriptItem:
        self.ran = True
        body = request.body if isinstance(request.body, dict) else {}
        raw = body.get("messages")
        messages: list[Any] = raw if isinstance(raw, list) else []
        self.messages = len(messages)
        called: set[str] = set()
        for index, message in enumerate(messages):
            if not isinstance(message, dict):
                self.problems.append(f"message {index} is not an object")
                continue
            if message.get("role") == "assistant" and message.get("tool_calls"):
                ids = [call.get("id") for call in message["tool_calls"]]
                self.tool_calls += len(ids)
                called.update(i for i in ids if isinstance(i, str))
                following = messages[index + 1 : index + 1 + len(ids)]
                answers = {m.get("tool_call_id") for m in following if isinstance(m, dict) and m.get("role") == "tool"}
                missing = [i for i in ids if i not in answers]
                self.answered += len(ids) - len(missing)
                if missing:
                    self.problems.append(f"message {index}: tool call(s) {', '.join(map(str, missing))} not answered")
            elif message.get("role") == "tool":
                call_id = message.get("tool_call_id")
                if call_id not in called:
                    self.problems.append(f"message {index}: tool message for unknown call {call_id}")
                content = message.get("content")
                if call_id == SLOW_CALL_ID and isinstance(content, str) and "outcome is unknown" in content:
                    self.unknown_outcome_seen = True
        if not self.unknown_outcome_seen:
            self.problems.append(f"no tool message tells the model that {SLOW_CALL_ID}'s outcome is unknown")
        self.passed = not self.problems
        if not self.passed:
            return ErrorReply(400, message="; ".join(self.problems), type="invalid_request_error")
        return Reply(
            reasoning="The job's result is unknown; sleeping has no side effects, so rerunning is safe.",
            text=(
                f"I can't tell: `{SLOW_COMMAND}` was interrupted and its outcome is unknown "
                f"({TOOL_OUTCOME_UNKNOWN}). It has no side effects, so I can simply run it again if you want."
            ),
        )

    def facts(self) -> dict[str, Any]:
        return {
            "ran": self.ran,
            "passed": self.passed,
            "messages": self.messages,
            "assistantToolCalls": self.tool_calls,
            "answeredByToolMessages": self.answered,
            "unknownOutcomeSeen": self.unknown_outcome_seen,
            "problems": list(self.problems),
        }


# --- the child process -------------------------------------------------------------------------------


async def _child_session(base_url: str, store_root: Path, workspace: Path, session_id: str) -> int:
    """Run both turns; the parent SIGKILLs this process during turn 2's tool body."""
    store = SessionStore()
    SessionInvariants(store).install()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(store_root)))
    session = store.create(session_id, meta={"cwd": str(workspace)})
    provider = _provider(base_url)
    agent = Agent(session, provider, _options(workspace), tools=_tools(), store=store)
    try:
        for prompt in CHILD_PROMPTS:
            print(f"child: user: {prompt}", flush=True)
            agent.followup(prompt)
            outcomes = await agent.run()
            for outcome in outcomes:
                print(f"child: turn {outcome.turn} ended: {outcome.reason}", flush=True)
                if outcome.reason.get("kind") != "completed":
                    return 2
        print("child: finished without being killed", flush=True)
        return 3
    finally:
        await provider.aclose()
        coordinator.close()


def child_main(base_url: str, store_root: Path, workspace: Path, session_id: str) -> int:
    """The ``--child`` entry point (a separate interpreter, so a SIGKILL is a real crash)."""
    return asyncio.run(_child_session(base_url, store_root, workspace, session_id))


# --- the demo ----------------------------------------------------------------------------------------


class _Demo:
    """The parent side: one instance per run, holding everything that must be cleaned up."""

    def __init__(self, console: Console, store: Path | None) -> None:
        self.console = console
        self.step = "setup"
        self.work = Path(tempfile.mkdtemp(prefix="agentlog-demo-"))
        self.workspace = self.work / "workspace"
        self.temporary_store = store is None
        self.root = (self.work / "store") if store is None else store.absolute()
        self.session_id = f"demo-{uuid.uuid4().hex[:8]}"  # unique, so a kept store can hold many runs
        self.fork_id = f"{self.session_id}-fork"
        self.server: DemoModelServer | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self.child_log_path = self.work / "child.log"
        self.child_log: IO[bytes] | None = None
        self.tool_pid: int | None = None
        self.coordinator: PersistenceCoordinator | None = None
        self.facts: dict[str, Any] = {}

    # -- output -----------------------------------------------------------------------------------------
    def heading(self, number: int, title: str) -> None:
        self.console.print()
        self.console.print(f"[bold cyan]{number} · {escape(title)}[/]")

    def say(self, text: str) -> None:
        self.console.print(f"  {text}")

    def child_log_tail(self, lines: int = 15) -> str:
        try:
            text = self.child_log_path.read_text(errors="replace")
        except OSError:
            return ""
        tail = text.strip().splitlines()[-lines:]
        return "\n".join("    " + line for line in tail)

    # -- the run -------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        started = time.monotonic()
        self.workspace.mkdir()
        (self.workspace / NOTES_FILE).write_text(NOTES_TEXT)
        (self.workspace / BUILD_LOG).write_text(BUILD_LOG_TEXT)
        self.root.mkdir(parents=True, exist_ok=True)
        self.server = DemoModelServer(child_script()).start()
        self.console.print("[bold]agentlog demo[/]: crash an agent mid-tool-call, resume, repair, fork, compact")
        self.console.print(f"[bold yellow]{DEMO_MODEL_LABEL}[/]")
        self.say(f"model: DemoModelServer at {self.server.base_url} (no API key)")
        self.say(f"store: {escape(str(self.root))} (JSONL, zstd{', temporary' if self.temporary_store else ''})")
        self.say(f"workspace: {escape(str(self.workspace))}")
        self.facts.update(
            model={"label": DEMO_MODEL_LABEL, "server": "DemoModelServer", "baseUrl": self.server.base_url},
            store={
                "root": str(self.root),
                "backend": "jsonl",
                "compression": "zstd",
                "temporary": self.temporary_store,
            },
            workspace=str(self.workspace),
            session={"id": self.session_id},
        )

        self.step = "the child session"
        durable = self.crash_child()
        self.step = "resume"
        session = self.resume(durable)
        self.step = "the follow-up turn"
        self.followup(session)
        self.step = "fork"
        fork = self.fork(session)
        self.step = "compaction"
        self.compact(session)
        self.step = "summary"
        self.summarize(session, fork)
        self.facts["elapsedSeconds"] = round(time.monotonic() - started, 2)
        self.facts["ok"] = True
        self.console.print()
        self.console.print(f"[bold green]demo complete[/] in {self.facts['elapsedSeconds']:.1f} s")
        if not self.temporary_store:
            self.say(f"check it: agentlog verify --store {escape(str(self.root))}")
        return self.facts

    # -- step 1: a real process, really killed ------------------------------------------------------------
    def spawn_child(self) -> subprocess.Popen[bytes]:
        assert self.server is not None
        import agentlog

        package_parent = str(Path(agentlog.__file__).resolve().parent.parent)
        env = dict(os.environ)
        # The child must import this very agentlog, whatever the caller's cwd or install mode.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        command = [
            sys.executable,
            "-m",
            "agentlog.cli.demo",
            "--child",
            "--base-url",
            self.server.base_url,
            "--store",
            str(self.root),
            "--workspace",
            str(self.workspace),
            "--session-id",
            self.session_id,
        ]
        self.child_log = self.child_log_path.open("wb")
        return subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=self.child_log, stderr=subprocess.STDOUT, env=env
        )

    def wait_for_tool_call(self, child: subprocess.Popen[bytes]) -> list[dict[str, Any]]:
        """Poll the store (read-only) until the slow call's ``tool/call`` is durable.

        The loop flushes ``tool/call`` before running the tool body, so once it is on disk the command
        is running or about to. Watching the store rather than the child's output keeps the demo honest:
        the only channel between the two processes is the durable log.
        """
        reader = JsonlBackend(str(self.root))
        deadline = time.monotonic() + TOOL_CALL_DEADLINE_S
        try:
            while True:
                code = child.poll()
                if code is not None:
                    raise DemoFailure(
                        f"the child process exited on its own (exit code {code}) before the tool call started:\n"
                        + self.child_log_tail()
                    )
                try:
                    stored = reader.load_stored(self.session_id)
                except AgentlogError:
                    stored = None  # a write in progress; the next poll sees it complete
                if stored is not None:
                    events: list[dict[str, Any]] = stored.events
                    if any(e["type"] == TOOL_CALL and e["data"].get("callId") == SLOW_CALL_ID for e in events):
                        return events
                if time.monotonic() > deadline:
                    raise DemoFailure(
                        f"no durable tool/call for {SLOW_CALL_ID} after {TOOL_CALL_DEADLINE_S:g} s:\n"
                        + self.child_log_tail()
                    )
                time.sleep(_POLL_S)
        finally:
            reader.close()

    def find_tool_process(self, child_pid: int) -> int | None:
        """The running tool's process (a child of the agent process), if ``/proc`` can show it."""
        if not os.path.isdir("/proc"):
            time.sleep(0.3)
            return None
        deadline = time.monotonic() + TOOL_PROCESS_WAIT_S
        while time.monotonic() < deadline:
            for pid in _child_pids(child_pid):
                if "sleep" in _cmdline(pid):
                    return pid
            time.sleep(_POLL_S)
        return None

    def crash_child(self) -> list[dict[str, Any]]:
        self.heading(1, "an agent session in a child process, SIGKILLed mid-tool-call")
        started = time.monotonic()
        child = self.child = self.spawn_child()
        self.say(f"child pid {child.pid}: Agent + real openai client, streamed tool calls")
        with self.console.status("waiting for the durable tool/call of the slow command…"):
            events = self.wait_for_tool_call(child)
            tool_pid = self.tool_pid = self.find_tool_process(child.pid)
        tool_cmdline = _cmdline(tool_pid) if tool_pid is not None else None  # gone after the kill
        call = next(e for e in events if e["type"] == TOOL_CALL and e["data"]["callId"] == SLOW_CALL_ID)
        self.say(f"tool/call seq {call['seq']} is durable: {call['data']['name']} {escape(call['data']['arguments'])}")
        if tool_pid is not None:
            self.say(f"the tool body is running: pid {tool_pid} `{escape(tool_cmdline or '?')}`")
        if child.poll() is not None:
            raise DemoFailure(f"the child exited (code {child.returncode}) before it could be killed")
        os.kill(child.pid, signal.SIGKILL)
        code = child.wait(timeout=10)
        killed_after = time.monotonic() - started
        if code != -signal.SIGKILL:
            raise DemoFailure(f"the child ended with exit code {code}, not by SIGKILL")
        if tool_pid is not None:
            _kill_tool_group(tool_pid)  # orphaned by the crash: a dead machine would not keep it either
            self.tool_pid = None  # done: cleanup must never signal a pid that may since have been reused
        self.say(f"[bold red]SIGKILL[/] → child pid {child.pid} after {killed_after:.1f} s: no flush, no close")

        reader = JsonlBackend(str(self.root))
        try:
            stored = reader.load_stored(self.session_id)
        finally:
            reader.close()
        if stored is None:
            raise DemoFailure("the session is not in the store after the kill")
        durable: list[dict[str, Any]] = stored.events
        closers = interrupted_turn_closers(durable)
        open_turn = closers[-1]["data"]["turn"] if closers else None
        last = durable[-1]
        self.say(f"durable log: {len(durable)} events, ending with seq {last['seq']} {last['type']}")
        if not closers:
            raise DemoFailure("the killed session has no open turn: the kill came too late")
        self.say(f"turn {open_turn} is open: no tool/result, step/end or turn/end")
        self.facts["child"] = {
            "pid": child.pid,
            "signal": "SIGKILL",
            "exitCode": code,
            "killedAfterSeconds": round(killed_after, 2),
            "toolCall": {
                "seq": call["seq"],
                "callId": SLOW_CALL_ID,
                "name": call["data"]["name"],
                "arguments": call["data"]["arguments"],
            },
            "toolProcess": {"pid": tool_pid, "cmdline": tool_cmdline},
        }
        self.facts["durableBeforeResume"] = {
            "events": len(durable),
            "lastSeq": last["seq"],
            "lastType": last["type"],
            "openTurn": open_turn,
            "turns": sum(1 for e in durable if e["type"] == TURN_START),
        }
        return durable

    # -- step 2: resume and repair ----------------------------------------------------------------------
    def resume(self, durable: list[dict[str, Any]]) -> Session:
        self.heading(2, "resume in this process: the interrupted turn is closed")
        store = SessionStore()
        SessionInvariants(store).install()  # the repaired log must satisfy the loop's invariants too
        self.coordinator = PersistenceCoordinator(store, JsonlBackend(str(self.root)))
        session = self.coordinator.resume(self.session_id)
        added = [thaw(e) for e in session.events][len(durable) :]
        closing = sum(1 for e in added if e["type"] in (TOOL_RESULT, STEP_END, TURN_END))
        self.say(f"PersistenceCoordinator.resume({self.session_id!r}) closed the turn with {closing} events:")
        table = Table(show_header=True, header_style="bold", box=None, padding=(0, 1), expand=False)
        table.add_column("seq", justify="right", style="dim")
        table.add_column("type")
        table.add_column("detail")
        room = max(self.console.width - 26, 30)
        repaired: list[dict[str, Any]] = []
        tool_result: dict[str, Any] | None = None
        for event in added:
            data = event["data"]
            fact: dict[str, Any] = {"seq": event["seq"], "type": event["type"]}
            if event["type"] == TOOL_RESULT:
                block = data["message"]["content"][0]
                text = _block_text(block["content"])
                fact.update(callId=block["toolCallId"], code=data["error"]["code"], text=text)
                if block["toolCallId"] == SLOW_CALL_ID:
                    tool_result = fact
                shown = _clip(f"{block['toolCallId']}: {text}", room - len(TOOL_OUTCOME_UNKNOWN) - 1)
                detail = f"[bold red]{escape(data['error']['code'])}[/] {escape(shown)}"
            elif event["type"] == STEP_END:
                fact.update(turn=data["turn"], step=data["step"])
                detail = f"turn {data['turn']} step {data['step']} (synthetic)"
            elif event["type"] == TURN_END:
                fact.update(turn=data["turn"], reason=data["reason"]["kind"])
                detail = f"turn {data['turn']}, reason {data['reason']['kind']} (synthetic)"
            elif event["type"] == SESSION_END_SEED:
                detail = "[dim]marker: the restored prefix ends here[/]"
            else:
                detail = ""
            repaired.append(fact)
            table.add_row(str(event["seq"]), event["type"], detail)
        self.console.print(table)
        if tool_result is None or tool_result["code"] != TOOL_OUTCOME_UNKNOWN:
            raise DemoFailure(f"resume did not answer {SLOW_CALL_ID} with {TOOL_OUTCOME_UNKNOWN}: {repaired}")
        self.say("the messages the next request is built from (derived from the surface):")
        repaired_ids = {e["data"]["message"]["id"] for e in added if e["type"] == TOOL_RESULT}
        rows = [(m, m.get("id") in repaired_ids) for m in session.derive_messages()]
        self.console.print(_transcript(rows, self.console.width))
        self.facts["repair"] = {"events": repaired, "toolResult": tool_result}
        return session

    # -- step 3: the next request is well-formed ---------------------------------------------------------
    def followup(self, session: Session) -> None:
        self.heading(3, "one more turn: is the next request well-formed?")
        assert self.server is not None and self.coordinator is not None
        check = RequestCheck()
        self.server.push(check)
        before = len(self.server.requests)
        outcomes = asyncio.run(self._run_turn(session, FOLLOWUP_PROMPT))
        requests = self.server.requests[before:]
        outcome = outcomes[0] if outcomes else None
        facts = check.facts()
        if check.ran and requests:
            facts["requestPath"] = requests[-1].path
        answer = ""
        for event in reversed(session.events):
            if event["type"] == ASSISTANT_MESSAGE:
                answer = _block_text(event["data"]["message"]["content"])
                break
        self.say(f"user: {escape(FOLLOWUP_PROMPT)}")
        if check.passed:
            self.say(
                f"[bold green]✓ request check passed[/]: {check.tool_calls} assistant tool calls, "
                f"{check.answered} answered by tool messages"
            )
            self.say(f"[bold green]✓[/] the model is told that {SLOW_CALL_ID}'s outcome is unknown")
        else:
            self.say(f"[bold red]✗[/] request check failed: {escape('; '.join(check.problems) or 'not run')}")
        if outcome is not None:
            self.say(f"assistant: {escape(answer)}")
        self.facts["followUp"] = {
            "prompt": FOLLOWUP_PROMPT,
            "turn": outcome.turn if outcome else None,
            "outcome": thaw(outcome.reason) if outcome else None,
            "requestCheck": facts,
            "answer": answer,
        }
        if not check.passed:
            raise DemoFailure("the request after the repair was not well-formed: " + "; ".join(check.problems))
        if outcome is None or outcome.reason.get("kind") != "completed":
            raise DemoFailure(f"the follow-up turn did not complete: {outcome.reason if outcome else 'no turn ran'}")

    async def _run_turn(self, session: Session, prompt: str, *, subagents: bool = False) -> list[TurnOutcome]:
        assert self.server is not None and self.coordinator is not None
        provider = _provider(self.server.base_url)
        try:
            agent = Agent(
                session,
                provider,
                _options(self.workspace),
                tools=_tools(),
                store=self.coordinator.store,
                subagents=SubagentConfig() if subagents else None,
            )
            agent.followup(prompt)
            return await agent.run()
        finally:
            await provider.aclose()

    async def _compact_now(self, session: Session) -> CompactionResult | None:
        """``Agent.compact_now()`` with the default engine: the summary is one call to the (scripted) model."""
        from ..compaction import CompactionEngine

        assert self.server is not None and self.coordinator is not None
        provider = _provider(self.server.base_url)
        try:
            agent = Agent(
                session,
                provider,
                _options(self.workspace),
                tools=_tools(),
                store=self.coordinator.store,
                compaction=CompactionEngine(),
            )
            result: CompactionResult | None = await agent.compact_now()
            return result
        finally:
            await provider.aclose()

    # -- step 5: compaction ------------------------------------------------------------------------------
    def compact(self, session: Session) -> None:
        from ..compaction import TokenMeter

        self.heading(5, "compaction: the model sees less, the log keeps everything")
        assert self.server is not None
        self.server.push(*build_log_script())
        outcomes = asyncio.run(self._run_turn(session, BUILD_PROMPT))
        if not outcomes or outcomes[-1].reason.get("kind") != "completed":
            raise DemoFailure(f"the build-log turn did not complete: {outcomes[-1].reason if outcomes else 'no turn'}")
        self.say(f"user: {escape(BUILD_PROMPT)}  (the model reads {len(BUILD_LOG_TEXT):,} characters)")
        meter = TokenMeter()
        events_before = list(session.events)
        messages_before = thaw(session.derive_messages().to_list())
        tokens_before = meter.measure(session).total_tokens
        requests_before = len(self.server.requests)
        result = asyncio.run(self._compact_now(session))
        if result is None:
            raise DemoFailure("compact_now found nothing to compact")
        summary_calls = sum(1 for r in self.server.requests[requests_before:] if r.answer == "summary")
        events_after = list(session.events)
        messages_after = thaw(session.derive_messages().to_list())
        tokens_after = meter.measure(session).total_tokens
        added = [e["type"] for e in events_after[len(events_before) :]]
        unchanged = events_after[: len(events_before)] == events_before
        earlier = thaw(session.at(len(events_before) - 1).derive_messages().to_list())
        self.say(
            f"agent.compact_now(): {len(result.shadowed_seqs)} messages (~{result.shadowed_token_count:,} tokens) "
            f"→ one checkpoint, summarized in {summary_calls} call(s) to the scripted model"
        )
        numbers = ("before", "after")
        table = _TableOutput(("", *numbers), fold=False, right=numbers, header_style="bold")
        table.add_row("surface: messages sent to the model", str(len(messages_before)), str(len(messages_after)))
        table.add_row("next request: estimated tokens", f"{tokens_before:,}", f"{tokens_after:,}")
        table.add_row("log: events", str(len(events_before)), str(len(events_after)))
        table.print(self.console)
        first = len(events_before)
        self.say(f"the log grew by {len(added)} events (seqs {first}–{first + len(added) - 1}): {', '.join(added)}")
        if unchanged:
            self.say(f"[bold green]✓[/] the {len(events_before)} earlier events are unchanged")
        if earlier == messages_before:
            self.say(f"[bold green]✓[/] session.at({first - 1}) still derives all {len(earlier)} earlier messages")
        self.facts["compaction"] = {
            "prompt": BUILD_PROMPT,
            "result": result.to_json(),
            "summaryCalls": summary_calls,
            "surfaceBefore": {"messages": len(messages_before), "tokens": tokens_before},
            "surfaceAfter": {"messages": len(messages_after), "tokens": tokens_after},
            "eventsBefore": len(events_before),
            "eventsAfter": len(events_after),
            "added": added,
            "earlierEventsUnchanged": unchanged,
            "earlierViewIntact": earlier == messages_before,
        }
        if tuple(added) != COMPACTION_EVENTS or not unchanged or earlier != messages_before:
            raise DemoFailure(
                f"compaction did not only append its events: added {added}, earlier unchanged {unchanged}"
            )
        if not (len(messages_after) < len(messages_before) and tokens_after < tokens_before):
            raise DemoFailure("compaction did not shrink the surface")

    # -- step 4: fork ------------------------------------------------------------------------------------
    def fork(self, session: Session) -> Session:
        self.heading(4, "fork at the last closed turn; the fork delegates to a subagent")
        assert self.coordinator is not None
        store = self.coordinator.store
        boundary = max(e.seq for e in session.events if e.type == TURN_END)
        fork = store.fork(session, boundary, child_id=self.fork_id)
        store.flush(session)
        store.flush(fork)
        header = thaw(fork.header)
        self.say(f"store.fork(session, boundary={boundary}) → {escape(fork.id)}")
        self.say(f"parentSession: {escape(str(header.get('parentSession')))}, seedLength: {header.get('seedLength')}")
        self.say(f"the fork sees the same {len(fork.derive_messages())} messages as its parent")
        self.facts["fork"] = {
            "id": fork.id,
            "parentSession": header.get("parentSession"),
            "boundary": boundary,
            "seedLength": header.get("seedLength"),
            "messages": len(fork.derive_messages()),
            "sameMessagesAsParent": thaw(fork.derive_messages().to_list()) == thaw(session.derive_messages().to_list()),
        }
        self.delegate(fork)
        return fork

    def delegate(self, fork: Session) -> None:
        """The fork delegates one task to a subagent: a child session linked to it, answering in its place."""
        assert self.server is not None and self.coordinator is not None
        self.server.push(*delegation_script())
        outcomes = asyncio.run(self._run_turn(fork, DELEGATE_PROMPT, subagents=True))
        if not outcomes or outcomes[-1].reason.get("kind") != "completed":
            raise DemoFailure(f"the delegating turn did not complete: {outcomes[-1].reason if outcomes else 'no turn'}")
        result = next(e for e in reversed(fork.events) if e.type == TOOL_RESULT)
        record = thaw(result.data.get("meta") or {}).get("subagent")
        child = self.coordinator.store.get(record["sessionId"]) if isinstance(record, dict) else None
        if child is None:
            raise DemoFailure("the delegate call's result names no subagent session")
        self.coordinator.store.flush(child)
        first, last = record["seqs"]
        answer = _block_text(child.events[last]["data"]["message"]["content"])
        self.say(f"user (on the fork): {escape(DELEGATE_PROMPT)}")
        self.say(
            f"delegate → subagent {escape(child.id)} (parentSession {escape(fork.id)}, "
            f"depth {child.header.get('delegationDepth')})"
        )
        self.say(f"its answer, seqs {first}–{last} of its own log: {escape(answer)}")
        self.facts["delegation"] = {
            "parentSession": child.header.get("parentSession"),
            "childId": child.id,
            "origin": child.header.get("origin"),
            "delegationDepth": child.header.get("delegationDepth"),
            "seqs": [first, last],
            "answer": answer,
            "toolResult": _block_text(result.data["message"]["content"][0]["content"]),
        }

    # -- step 5: summary ---------------------------------------------------------------------------------
    def summarize(self, session: Session, fork: Session) -> None:
        assert self.coordinator is not None
        rows: list[dict[str, Any]] = []
        for role, live in (("session", session), ("fork", fork)):
            rows.append(
                {
                    "role": role,
                    "id": live.id,
                    "events": len(live.events),
                    "turns": sum(1 for e in live.events if e.type == TURN_START),
                    "surface": len(live.surface.nodes),
                    "messages": len(live.derive_messages()),
                }
            )
        self.coordinator.close()  # drains every write: the sizes below are final
        self.coordinator = None
        reader = JsonlBackend(str(self.root))
        try:
            locations = {item.id: item.location for item in reader.list_sessions()}
        finally:
            reader.close()
        for row in rows:
            location = locations.get(row["id"])
            row["file"] = location
            row["fileBytes"] = os.path.getsize(location) if location and os.path.exists(location) else None
        self.heading(6, "summary")
        numbers = ("events", "turns", "surface", "file bytes")
        table = _TableOutput(("", "id", *numbers), fold=False, right=numbers, header_style="bold")
        for row in rows:
            table.add_row(
                row["role"],
                escape(row["id"]),
                str(row["events"]),
                str(row["turns"]),
                str(row["surface"]),
                "" if row["fileBytes"] is None else f"{row['fileBytes']:,}",
            )
        table.print(self.console)
        self.facts["summary"] = rows

    # -- cleanup -----------------------------------------------------------------------------------------
    def cleanup(self) -> None:
        """Leave nothing behind: no child, no tool process, no server thread, no temporary files."""
        child = self.child
        if child is not None and child.poll() is None:
            # A step failed while the child still runs: its tool processes are found while it is alive
            # (once it is gone they are orphans nobody can attribute), then both are killed.
            tools = _child_pids(child.pid)
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=10)
            for pid in tools:
                _kill_tool_group(pid)
        elif self.tool_pid is not None:
            _kill_tool_group(self.tool_pid)
        if self.child_log is not None:
            self.child_log.close()
        if self.coordinator is not None:
            with contextlib.suppress(Exception):
                self.coordinator.close()
        if self.server is not None:
            self.server.stop()
        shutil.rmtree(self.work, ignore_errors=True)


def run_demo(*, store: Path | None, as_json: bool) -> int:
    """Run the whole demo (see the module docstring); 0 on success, 1 with a message on any failure.

    ``store`` keeps the sessions in that directory (so ``agentlog ls/export/verify`` can inspect them);
    by default a temporary store is used and removed. ``as_json`` prints one JSON document with the
    facts instead of the readable transcript, and on failure ``{"error": {code, message, step}}`` on
    stderr, like the other commands.
    """
    console = Console(quiet=as_json, highlight=False)
    demo: _Demo | None = None
    try:
        demo = _Demo(console, store)
        facts = demo.run()
    except Exception as err:  # any failure, expected or not, becomes a message and an exit code
        step = demo.step if demo is not None else "setup"
        if isinstance(err, (AgentlogError, DemoFailure)):
            code, message = err.code, str(err)
        else:
            code, message = "DEMO_FAILED", f"{type(err).__name__}: {err}"
        if as_json:
            error = {"code": code, "message": message, "step": step}
            _emit_json_line({"error": error}, stderr=True)
        else:
            tag = escape(f"[{code}]")
            Console(stderr=True, highlight=False).print(
                f"[bold red]demo failed[/] during {escape(step)} {tag}: {escape(message)}"
            )
        return 1
    finally:
        if demo is not None:
            demo.cleanup()
    if as_json:
        _emit_json(facts)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agentlog.demo [--store DIR] [--json]``; ``--child`` is internal (step 1's process)."""
    parser = argparse.ArgumentParser(prog="python -m agentlog.demo", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--store", type=Path, default=None, help="keep the sessions in this store directory")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--workspace", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--session-id", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        if not (args.base_url and args.store and args.workspace and args.session_id):
            parser.error("--child needs --base-url, --store, --workspace and --session-id")
        return child_main(args.base_url, args.store, args.workspace, args.session_id)
    return run_demo(store=args.store, as_json=args.json)


if __name__ == "__main__":
    sys.exit(main())
