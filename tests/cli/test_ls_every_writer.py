"""``ls``, ``ls --json`` and ``stats`` give the true figures of sessions written by every writer agentlog
ships, not only ``agentlog run``: the openai-agents adapter and the pydantic-ai adapter (the real
frameworks, through the real openai client over HTTP to the local scripted model), the ``Recorder``,
and ``agentlog import``. ``ls`` folds a log whose cache record is missing or stale (in memory when the
store has no cache file), and a figure it cannot know is shown as unknown (``—`` in the table,
``null`` in JSON), never as 0 or as the creation time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

import agentlog as al
from agentlog.cli.commands import app
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing.demo_server import DemoModelServer, Reply, ToolCall, Usage

runner = CliRunner()
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts"


def _json(*args: str) -> Any:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.stdout + result.stderr
    return orjson.loads(result.stdout)


def _row(store: Path, session_id: str) -> dict[str, Any]:
    rows = {row["id"]: row for row in _json("ls", "--store", str(store))["sessions"]}
    return rows[session_id]


def _stored_events(store: Path, session_id: str) -> list[Any]:
    return list(_json("show", session_id, "--store", str(store), "--log")["events"])


# --- the writers ----------------------------------------------------------------------------------------


def _write_with_openai_agents(store: Path) -> str:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    from agentlog.integrations.openai_agents import AgentlogSession

    set_tracing_disabled(True)

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    async def conversation() -> None:
        script: list[Any] = [
            Reply(tool_calls=[ToolCall("get_weather", {"city": "Paris"}, id="call-1")], usage=Usage(40, 5)),
            Reply(text="It is sunny in Paris.", usage=Usage(60, 7)),
            Reply(text="You are welcome.", usage=Usage(80, 4)),
        ]
        with DemoModelServer(script) as server:
            client = AsyncOpenAI(base_url=server.base_url, api_key="k")
            model = OpenAIChatCompletionsModel(model="demo-model", openai_client=client)
            agent = Agent(name="weather", instructions="Answer briefly.", model=model, tools=[get_weather])
            with AgentlogSession("oa-1", str(store), cwd="/work/oa") as session:
                for prompt in ("Weather in Paris?", "Thanks!"):
                    result = Runner.run_streamed(agent, prompt, session=session)
                    async for _ in result.stream_events():
                        pass

    asyncio.run(conversation())
    return "oa-1"


def _write_with_pydantic_ai(store: Path) -> str:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from agentlog.integrations.pydantic_ai import record_run

    async def drain(_ctx: Any, events: AsyncIterable[Any]) -> None:
        async for _ in events:
            pass

    async def conversation() -> None:
        script: list[Any] = [
            Reply(tool_calls=[ToolCall("add", {"a": 1, "b": 2}, id="c1")], usage=Usage(30, 6)),
            Reply(text="It is 3.", usage=Usage(45, 3)),
        ]
        with DemoModelServer(script) as server:
            provider = OpenAIProvider(base_url=server.base_url, api_key="demo")
            agent: Agent[None, str] = Agent(OpenAIChatModel("demo-model", provider=provider), system_prompt="Terse.")

            @agent.tool_plain
            def add(a: int, b: int) -> int:
                """Add two numbers."""
                return a + b

            result = await agent.run("What is 1+2?", event_stream_handler=drain)
        sessions = al.SessionStore()
        coordinator = PersistenceCoordinator(sessions, JsonlBackend(str(store)))
        try:
            session = sessions.create("pai-1", meta={"cwd": "/work/pai"})
            record_run(session, result)
            sessions.flush(session)
            sessions.dispose(session)
        finally:
            coordinator.close()

    asyncio.run(conversation())
    return "pai-1"


def _write_with_the_recorder(store: Path) -> str:
    from agentlog.interop.recorder import Recorder
    from agentlog.projection.title_service import DEFAULT_SESSION_TITLE_CONFIG, SessionTitleService

    sessions = al.SessionStore()
    coordinator = PersistenceCoordinator(sessions, JsonlBackend(str(store)))
    titles = SessionTitleService(sessions, DEFAULT_SESSION_TITLE_CONFIG)
    try:
        session = sessions.create("rec-1", meta={"cwd": "/work/rec"})
        rec = Recorder(session, provider="p", model="m")
        for prompt, answer, usage in (("What is up?", "Not much.", (10, 3)), ("And now?", "Still not.", (20, 4))):
            with rec.turn(prompt) as turn:
                turn.assistant(text=answer, usage={"inputTokens": usage[0], "outputTokens": usage[1]})
        titles.rename(session, "Recorded by hand")
        sessions.flush(session)
        sessions.dispose(session)
    finally:
        titles.close()
        coordinator.close()
    return "rec-1"


def _write_with_import(store: Path) -> str:
    result = runner.invoke(
        app, ["import", str(FIXTURES / "codex.jsonl"), "--from", "codex", "--store", str(store), "--id", "imp-1"]
    )
    assert result.exit_code == 0, result.stdout + result.stderr
    return "imp-1"


WRITERS = {
    "openai-agents": _write_with_openai_agents,
    "pydantic-ai": _write_with_pydantic_ai,
    "recorder": _write_with_the_recorder,
    "import": _write_with_import,
}


EXPECTED = {
    # writer: (title, turns, tokens); tokens None: no step of the log reported usage (unknown, not 0)
    "openai-agents": (None, 2, None),  # the SDK's Session protocol hands over items, never usage
    "pydantic-ai": (None, 1, 30 + 6 + 45 + 3),
    "recorder": ("Recorded by hand", 2, 10 + 3 + 20 + 4),
    "import": (None, 2, 2000 + 40),  # the codex fixture's token_count, on the assistant message it follows
}


KEEP_THE_CACHE = {"openai-agents", "import"}
"""The writers that own their store's coordinator and write the session's cache record when they
release it, as ``agentlog run`` does; the others are handed a session (``record_run``, ``Recorder``)."""


@pytest.mark.parametrize("writer", list(WRITERS))
def test_ls_and_stats_give_the_true_figures_of_a_session_any_writer_wrote(
    tmp_path: Path, writer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ls`` (the record a writer left, else a fold of the log), ``ls --json`` and ``stats`` say what the
    stored log says; a writer that keeps the cache leaves a record the next ``ls`` serves unread."""
    store = tmp_path / "store"
    session_id = WRITERS[writer](store)
    events = _stored_events(store, session_id)
    title, turns, tokens = EXPECTED[writer]
    row = _row(store, session_id)
    assert row["title"] == title
    assert row["turns"] == turns
    assert row["tokens"] == tokens
    assert (row["tokenUsage"] is None) == (tokens is None)
    assert row["events"] == len(events)
    assert row["lastActivity"] == events[-1]["time"]
    if writer == "import":  # the transcript's own times: the header's createdAt is its first line's
        assert row["lastActivity"] > row["createdAt"]

    stats = _json("stats", session_id, "--store", str(store))
    assert stats["asOfSeq"] == len(events) - 1
    values = stats["values"]
    assert values["title"] == title and values["sessionStats"]["turns"] == turns
    assert values["lastActivity"] == row["lastActivity"]
    assert (values["usageSteps"] == 0) == (tokens is None)
    table = runner.invoke(app, ["stats", session_id, "--store", str(store)])
    assert table.exit_code == 0, table.stdout + table.stderr
    if tokens is None:
        assert "unknown (no step of the log reported usage)" in table.stdout
    else:
        assert f"{tokens:,}" in table.stdout

    cache = store / ".projections.sqlite"
    if writer not in KEEP_THE_CACHE:  # folded in memory again, and a read command creates nothing
        assert _row(store, session_id) == row and not cache.exists()
        return

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("ls read a log")

    assert cache.is_file()
    with monkeypatch.context() as patch:  # the writer left a current record: no log is read
        patch.setattr(PersistenceCoordinator, "read_from", refuse)
        assert _row(store, session_id) == row


@pytest.mark.parametrize("writer", ["openai-agents", "recorder"])
def test_ls_table_shows_unknown_figures_as_unknown_and_the_last_activity_not_the_creation_time(
    tmp_path: Path, writer: str
) -> None:
    """The table: true figures, ``—`` for the tokens of a log that reports none, and the newest event's
    time in "last activity"."""
    store = tmp_path / "store"
    session_id = WRITERS[writer](store)
    row = _row(store, session_id)
    result = runner.invoke(app, ["ls", "--store", str(store)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stdout + result.stderr
    line = next(line for line in result.stdout.splitlines() if f" {session_id} " in line)
    cells = [cell.strip() for cell in line.strip("│┃ ").split("│")]
    title, turns, tokens, last_activity = cells[1:5]
    assert title == (row["title"] or "")
    assert turns == str(row["turns"])
    assert tokens == ("—" if row["tokens"] is None else f"{row['tokens']:,}")
    shown = datetime.fromtimestamp(row["lastActivity"] / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    assert last_activity == shown
