"""The ``agentlog`` commands against a real PostgreSQL store (``--backend postgres --dsn DSN``).

Every test works in its own schema (``--pg-schema``, the ``pg_schema`` fixture drops it) and keeps the
reading host's derived files (projection cache, search index) under its own ``XDG_CACHE_HOME``. The
model is the local scripted ``DemoModelServer`` over real HTTP, as in tests/cli/test_cli_agent.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from typer.testing import CliRunner, Result

from _postgres import drop_schema
from agentlog.cli.commands import app
from agentlog.errors import StorageAccessError
from agentlog.persistence.host_cache import POSTGRES_CACHE_FILE, POSTGRES_INDEX_FILE, store_key
from agentlog.persistence.postgres import PostgresBackend
from agentlog.testing.demo_server import DemoModelServer, Reply, ToolCall, Usage

# The PostgreSQL backend's accelerated paths, as in tests/postgres/ (accel by its directory there).
pytestmark = pytest.mark.accel

runner = CliRunner()

SCRIPT = [
    Reply(
        text="Reading.", tool_calls=[ToolCall("read_file", {"path": "notes.txt"}, id="call-1")], usage=Usage(100, 20)
    ),
    Reply(text="It says 42, the migration answer.", chunk_chars=5, usage=Usage(150, 10)),
]


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DEEPSEEK_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("AGENTLOG_DSN", raising=False)
    monkeypatch.delenv("AGENTLOG_PG_SCHEMA", raising=False)
    monkeypatch.delenv("AGENTLOG_STORE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "host-cache"))
    monkeypatch.chdir(tmp_path)
    directory = tmp_path / "work"
    directory.mkdir()
    (directory / "notes.txt").write_text("the answer is 42\n")
    return directory


def _at(dsn: str, schema: str) -> list[str]:
    return ["--backend", "postgres", "--dsn", dsn, "--pg-schema", schema]


def _invoke(*args: str) -> Result:
    return runner.invoke(app, list(args))


def _json(*args: str) -> Any:
    result = _invoke(*args, "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    return orjson.loads(result.stdout)


def _error(*args: str) -> dict[str, Any]:
    result = _invoke(*args, "--json")
    assert result.exit_code == 1, result.stdout + result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    error: dict[str, Any] = orjson.loads(result.stderr)["error"]
    assert error["message"]
    return error


def _record(work: Path, at: list[str], session_id: str = "s1") -> None:
    with DemoModelServer(SCRIPT) as server:
        result = _invoke(
            "run", "what is in notes.txt?", *at, "--base-url", server.base_url, "--cwd", str(work),
            "--session-id", session_id,
        )  # fmt: skip
    assert result.exit_code == 0, result.output + result.stderr
    assert "It says 42" in result.stdout


def test_run_then_every_read_command_works_against_the_postgres_store(
    pg_dsn: str, pg_schema: str, work: Path, tmp_path: Path
) -> None:
    at = _at(pg_dsn, pg_schema)
    _record(work, at)

    [row] = _json("ls", *at)["sessions"]
    assert row["id"] == "s1" and row["cwd"] == str(work) and row["error"] is None
    assert row["turns"] == 1 and row["tokens"] == 280  # served by the projection cache the run kept

    events = _json("show", "s1", *at, "--log")["events"]
    assert [event["seq"] for event in events] == list(range(len(events)))
    assert "turn/start" in {event["type"] for event in events} and events[-1]["type"] == "turn/end"
    assert "It says 42" in _invoke("show", "s1", *at).stdout

    exported = _json("export", "s1", *at)
    assert [m["role"] for m in exported["messages"]] == ["user", "assistant", "user", "assistant"]
    assert exported["events"] == events

    verified = _json("verify", *at)
    assert verified["ok"] is True and [(r["id"], r["status"]) for r in verified["sessions"]] == [("s1", "ok")]

    hits = _json("search", "migration", *at)["items"]
    assert [item["header"]["id"] for item in hits] == ["s1"]
    assert "migration" in hits[0]["bestMatch"]["snippet"]

    # The projection cache lives in the reading host's cache directory, keyed by the store's address;
    # the search index lives in the store's database (one index for every host), never on the host.
    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    key = store_key(backend)
    backend.close()
    derived = tmp_path / "host-cache" / "agentlog" / "postgres" / str(key)
    assert (derived / POSTGRES_CACHE_FILE).is_file() and not (derived / POSTGRES_INDEX_FILE).exists()
    with psycopg.connect(pg_dsn) as conn:
        indexed = conn.execute(f'SELECT id FROM "{pg_schema}_search".persisted_sessions').fetchall()
    assert indexed == [("s1",)]
    assert not (tmp_path / ".agentlog").exists()  # --store plays no part in a PostgreSQL store


def test_resume_continues_the_session_and_search_sees_the_new_turn(pg_dsn: str, pg_schema: str, work: Path) -> None:
    at = _at(pg_dsn, pg_schema)
    _record(work, at)
    assert _json("search", "zebra", *at)["items"] == []  # builds the index before the new turn
    with DemoModelServer([Reply(text="A zebra crossing.")]) as server:
        result = _invoke("resume", "s1", "and a zebra?", *at, "--base-url", server.base_url)
    assert result.exit_code == 0, result.output + result.stderr
    [row] = _json("ls", *at)["sessions"]
    assert row["turns"] == 2
    hits = _json("search", "zebra", *at)["items"]  # the index reconciles by revision
    assert [item["header"]["id"] for item in hits] == ["s1"]
    assert _json("verify", "s1", *at)["ok"] is True


def test_the_dsn_and_schema_come_from_the_environment_and_schemas_are_separate_stores(
    pg_dsn: str, pg_schema: str, work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _record(work, _at(pg_dsn, pg_schema), session_id="envs")
    monkeypatch.setenv("AGENTLOG_DSN", pg_dsn)
    monkeypatch.setenv("AGENTLOG_PG_SCHEMA", pg_schema)
    assert [row["id"] for row in _json("ls", "--backend", "postgres")["sessions"]] == ["envs"]
    other = f"{pg_schema}_other"
    try:
        # Another schema is another store: reading one that was never written finds no store.
        assert _error("ls", "--backend", "postgres", "--pg-schema", other)["code"] == "STORE_NOT_FOUND"
        assert _error("search", "migration", "--backend", "postgres", "--pg-schema", other)["code"] == "STORE_NOT_FOUND"
    finally:
        drop_schema(pg_dsn, other)


def test_bad_input_is_a_typed_error_never_a_traceback(pg_dsn: str, pg_schema: str, work: Path) -> None:
    at = _at(pg_dsn, pg_schema)
    assert _error("ls", "--backend", "postgres")["code"] == "INVALID_OPTION"  # no DSN anywhere
    assert _error("ls", "--backend", "postgres", "--dsn", pg_dsn, "--pg-schema", "Bad-Name")["code"] == "INVALID_OPTION"
    refused = _error("ls", "--backend", "postgres", "--dsn", "postgresql://postgres@127.0.0.1:1/nothing")
    assert refused["code"] == "DATABASE_UNAVAILABLE"
    _record(work, at)  # the store exists; a session id it does not hold is SESSION_NOT_FOUND
    assert _error("show", "missing", *at)["code"] == "SESSION_NOT_FOUND"
    assert _error("export", "missing", *at)["code"] == "SESSION_NOT_FOUND"
    with DemoModelServer(SCRIPT) as server:
        down = _invoke(
            "run", "hi", "--backend", "postgres", "--dsn", "postgresql://postgres@127.0.0.1:1/nothing",
            "--base-url", server.base_url, "--cwd", str(work), "--json",
        )  # fmt: skip
    assert down.exit_code == 1 and "Traceback" not in down.stderr
    assert orjson.loads(down.stderr)["error"]["code"] == "DATABASE_UNAVAILABLE"


@pytest.mark.postgres  # one of the PostgreSQL command-line tests, though it needs no server
def test_the_command_line_imports_psycopg_only_for_a_postgres_store(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from agentlog.cli.commands import app\n"
        f"result = CliRunner().invoke(app, ['ls', '--store', {str(tmp_path / 'store')!r}, '--json'])\n"
        "assert result.exit_code == 1, result.stderr\n"  # STORE_NOT_FOUND: the JSONL store does not exist
        "assert 'psycopg' not in sys.modules, 'psycopg imported for a JSONL store'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_host_cache_key_names_the_store_address_without_the_password(pg_dsn: str, pg_schema: str) -> None:
    def key(dsn: str, schema: str) -> str | None:
        backend = PostgresBackend(dsn, schema=schema)  # constructing one connects to nothing
        try:
            return store_key(backend)
        finally:
            backend.close()

    url = "postgresql://agents@db.example:5432/work"
    assert key(url, "agentlog") == key("postgresql://agents:secret@db.example:5432/work", "agentlog")
    assert key(url, "agentlog") == key("host=db.example port=5432 dbname=work user=agents", "agentlog")
    assert (
        len({key(url, "agentlog"), key(url, "other"), key("postgresql://agents@db.example:5432/w2", "agentlog")}) == 3
    )
    assert key(pg_dsn, pg_schema) is not None


def test_read_commands_on_a_schema_never_written_are_store_not_found_and_create_nothing(
    pg_dsn: str, pg_schema: str, work: Path
) -> None:
    at = _at(pg_dsn, pg_schema)
    for command in (["ls"], ["show", "s1"], ["export", "s1"], ["verify", "s1"], ["stats", "s1"], ["tail", "s1"]):
        assert _error(*command, *at)["code"] == "STORE_NOT_FOUND", command
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (pg_schema,)).fetchone()
    assert found is None  # nothing was created by reading
    _record(work, at)  # a writing command creates it
    listed = _invoke("ls", *at)
    assert listed.exit_code == 0, listed.stderr
    assert f"schema {pg_schema}" in listed.stdout and "postgresql://" in listed.stdout
    assert "password" not in listed.stdout


def test_a_read_only_backend_refuses_writes_and_leases(pg_dsn: str, pg_schema: str, work: Path) -> None:
    _record(work, _at(pg_dsn, pg_schema))
    backend = PostgresBackend(pg_dsn, schema=pg_schema, read_only=True)
    try:
        assert backend.read_revision("s1") is not None
        with pytest.raises(StorageAccessError) as caught:
            backend.lock_writer({"id": "s1"})
        assert caught.value.code == "STORAGE_READ_ONLY"
        with pytest.raises(StorageAccessError):
            backend.append_batch({"id": "s1"}, [{"type": "plugin/note", "seq": 99, "time": 1, "data": {}}], True)
    finally:
        backend.close()


def _schema_dump(dsn: str, schema: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table in ``schema``, in a stable order: the store's whole durable state."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1", (schema,)
            )
        ]
        return {
            table: sorted(
                conn.execute(
                    psycopg.sql.SQL("SELECT t::text FROM {}.{} AS t").format(
                        psycopg.sql.Identifier(schema), psycopg.sql.Identifier(table)
                    )
                ).fetchall()
            )
            for table in tables
        }


def test_a_refused_fork_leaves_every_table_as_it_was(pg_dsn: str, pg_schema: str, work: Path) -> None:
    at = _at(pg_dsn, pg_schema)
    _record(work, at)
    events = _json("show", "s1", *at, "--log")["events"]
    start = next(e["seq"] for e in events if e["type"] == "turn/start")
    before = _schema_dump(pg_dsn, pg_schema)
    assert before
    for extra in (["--at", str(start + 4)], ["--at", "9999"], ["--child-id", "s1"]):
        code = _error("fork", "s1", *at, *extra)["code"]
        assert code in {"OPEN_TURN", "INVALID_BOUNDARY", "SESSION_ALREADY_EXISTS"}
        assert _schema_dump(pg_dsn, pg_schema) == before, extra
