"""The contract every ``agentlog`` command keeps: ``--help`` text, a ``--json`` option, and machine output.

The commands are read from the Typer app itself, so a new command is held to the contract the moment it
is registered: it must have help text and ``--json``, and belong to one of the tables below (a read
command whose ``--json`` output is checked here, or a command whose machine output its own tests check).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import typer
from typer.testing import CliRunner

from agentlog.cli import app
from agentlog.testing.demo_server import DemoModelServer, Reply, ToolCall

runner = CliRunner()

SESSION = "s1"

READ_COMMANDS: dict[str, list[list[str]]] = {
    "ls": [["ls"]],
    "export": [["export", SESSION]],
    "verify": [["verify"], ["verify", SESSION]],
    "show": [["show", SESSION], ["show", SESSION, "--log"], ["show", SESSION, "--at", "3"]],
    "stats": [["stats", SESSION]],
    "title": [["title", SESSION]],
    "label": [["label", SESSION]],
    "trace": [["trace", SESSION], ["trace", SESSION, "--seq", "3"]],
}
"""Read commands and the command lines whose ``--json`` standard output must be one JSON document."""

STREAM_COMMANDS: dict[str, list[list[str]]] = {"replay": [["replay", SESSION, "--speed", "0"]]}
"""Read commands whose ``--json`` output is NDJSON: one JSON object per line, the last a summary."""

EVENT_STREAM_COMMANDS: dict[str, list[list[str]]] = {"tail": [["tail", SESSION], ["tail", SESSION, "--from-seq", "3"]]}
"""Read commands whose ``--json`` output is NDJSON of the stored events themselves, exactly as ``export``
writes them (``tail`` without ``--follow``; following is tested in tests/cli/test_tail_cli.py)."""

OTHER_COMMANDS = {
    "run": "tests/cli/test_cli_agent.py (run --json)",
    "resume": "tests/cli/test_cli_agent.py (resume --json)",
    "fork": "tests/cli/test_cli_agent.py (fork --json)",
    "compact": "tests/cli/test_compaction_cli.py (compact --json)",
    "demo": "tests/cli/test_demo.py (demo --json)",
    "reindex": "tests/cli/test_projection_cli.py (reindex --projections --json)",
    "search": "tests/cli/test_query_cli.py (search --json; it creates the store's search index)",
    "import": "tests/cli/test_import_cli.py (import --json)",
    "copy": "tests/cli/test_copy_cli.py (copy --json)",
    "serve": "tests/inspector/test_cli_serve.py (serve --json prints its address; it serves until stopped)",
    "rm": "tests/cli/test_lifecycle_cli.py (rm --json)",
    "gc": "tests/cli/test_lifecycle_cli.py (gc --json, --dry-run, --archive)",
}
"""Commands that write or run a model: their ``--json`` documents are checked where they are tested."""


def _commands() -> dict[str, Any]:
    group: Any = typer.main.get_command(app)
    return {name: group.get_command(None, name) for name in group.list_commands(None)}


def test_contract__every_command_is_in_one_table() -> None:
    tables = [set(READ_COMMANDS), set(STREAM_COMMANDS), set(EVENT_STREAM_COMMANDS), set(OTHER_COMMANDS)]
    assert sum(len(table) for table in tables) == len(set().union(*tables))
    assert set(_commands()) == set().union(*tables)


@pytest.mark.parametrize("name", sorted(_commands()))
def test_contract__every_command_has_help_text_and_a_json_option(name: str) -> None:
    command = _commands()[name]
    assert (command.help or "").strip(), f"{name} has no help text"
    assert (command.short_help or command.help or "").strip()
    options = {opt for param in command.params for opt in getattr(param, "opts", ())}
    assert "--json" in options, f"{name} has no --json (machine-readable output)"
    result = runner.invoke(app, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert "--json" in result.stdout
    first_line = (command.help or "").strip().splitlines()[0]
    assert first_line.split()[0] in result.stdout


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with one session of one closed turn (text chunks, a tool call and its result)."""
    root = tmp_path_factory.mktemp("contract")
    store, work = root / "store", root / "work"
    work.mkdir()
    (work / "notes.txt").write_text("the answer is 42\n")
    script = [
        Reply(text="Reading.", tool_calls=[ToolCall("read_file", {"path": "notes.txt"}, id="call-1")]),
        Reply(text="It says 42.", chunk_chars=3),
    ]
    with DemoModelServer(script) as server:
        args = ["run", "what is in notes.txt?", "--store", str(store), "--cwd", str(work)]
        args += ["--base-url", server.base_url, "--session-id", SESSION, "--api-key", "", "--json"]
        result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert orjson.loads(result.stdout)["sessionId"] == SESSION
    return store


@pytest.mark.parametrize("argv", [argv for runs in READ_COMMANDS.values() for argv in runs], ids=" ".join)
def test_contract__read_commands_print_one_json_document(recorded: Path, argv: list[str]) -> None:
    result = runner.invoke(app, [*argv, "--store", str(recorded), "--json"])
    assert result.exit_code == 0, result.stdout + result.stderr
    document = orjson.loads(result.stdout)
    assert isinstance(document, dict) and document


@pytest.mark.parametrize("argv", [argv for runs in STREAM_COMMANDS.values() for argv in runs], ids=" ".join)
def test_contract__replay_json_is_one_object_per_event_then_a_summary(recorded: Path, argv: list[str]) -> None:
    result = runner.invoke(app, [*argv, "--store", str(recorded), "--json"])
    assert result.exit_code == 0, result.stdout + result.stderr
    lines = [orjson.loads(line) for line in result.stdout.splitlines()]
    *events, last = lines
    exported = orjson.loads(runner.invoke(app, ["export", SESSION, "--store", str(recorded)]).stdout)["events"]
    assert events == exported
    chunks = [event for event in events if event["type"] == "assistant/chunk"]
    assert chunks, "the recorded session streams its answer"
    assert last == {
        "summary": {
            "sessionId": SESSION,
            "events": len(exported),
            "chunks": len(chunks),
            "lastTurn": {"turn": 1, "reason": {"kind": "completed"}},
        }
    }
    plain = runner.invoke(app, [*argv, "--store", str(recorded)])
    assert plain.exit_code == 0 and "It says 42." in plain.stdout


@pytest.mark.parametrize("argv", [argv for runs in EVENT_STREAM_COMMANDS.values() for argv in runs], ids=" ".join)
def test_contract__tail_json_is_one_object_per_stored_event(recorded: Path, argv: list[str]) -> None:
    result = runner.invoke(app, [*argv, "--store", str(recorded), "--json"])
    assert result.exit_code == 0, result.stdout + result.stderr
    events = [orjson.loads(line) for line in result.stdout.splitlines()]
    exported = orjson.loads(runner.invoke(app, ["export", SESSION, "--store", str(recorded)]).stdout)["events"]
    start = int(argv[argv.index("--from-seq") + 1]) if "--from-seq" in argv else 0
    assert events == exported[start:] and events


@pytest.mark.parametrize("name", sorted([*READ_COMMANDS, *STREAM_COMMANDS, *EVENT_STREAM_COMMANDS]))
def test_contract__read_command_failures_are_one_json_error_on_stderr(tmp_path: Path, name: str) -> None:
    argv = [*(READ_COMMANDS.get(name) or STREAM_COMMANDS.get(name) or EVENT_STREAM_COMMANDS[name])[0]]
    result = runner.invoke(app, [*argv, "--store", str(tmp_path / "missing"), "--json"])
    assert result.exit_code == 1
    assert result.stdout == ""
    error = orjson.loads(result.stderr)["error"]
    assert error["code"] == "STORE_NOT_FOUND" and error["message"]


def test_contract__shared_options_are_one_declaration_after_the_subcommand(tmp_path: Path) -> None:
    declarations: dict[str, set[tuple[Any, ...]]] = {}
    for command in _commands().values():
        for param in command.params:
            for opt in getattr(param, "opts", ()):
                if opt in ("--store", "--backend", "--compression", "--json"):
                    declarations.setdefault(opt, set()).add((param.name, param.help, repr(param.default)))
    assert set(declarations) == {"--store", "--backend", "--compression", "--json"}
    assert all(len(found) == 1 for found in declarations.values()), declarations
    missing = str(tmp_path / "missing")
    for argv in (["ls", "--store", missing, "--json"], ["ls", "--json", "--store", missing]):
        result = runner.invoke(app, argv)
        assert result.exit_code == 1 and orjson.loads(result.stderr)["error"]["code"] == "STORE_NOT_FOUND"
    before = runner.invoke(app, ["--store", missing, "ls"])
    assert before.exit_code == 2  # the options belong to the subcommands, as they always have


def test_contract__an_option_group_refuses_a_command_without_its_parameter() -> None:
    from agentlog.cli.options import shared_options

    def no_slot(name: str) -> None:
        raise AssertionError("never called")

    with pytest.raises(TypeError, match="StoreOptions"):
        shared_options()(no_slot)
    with pytest.raises(ValueError, match="not an option"):
        shared_options("stores")
