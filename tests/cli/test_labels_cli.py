"""``ls --label/--tag`` and ``search --label/--tag`` on every backend: sessions are chosen by their user
labels and tags, served from the projection cache (no log is read when the cache is current), and a
malformed filter is a typed error in ``--json``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

import agentlog as al
from _postgres import drop_schema, fresh_schema
from agentlog.cli.commands import app
from agentlog.cli.options import SQLITE_FILENAME
from agentlog.cli.projection_commands import attach_projections
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.sqlite.backend import SqliteBackend

runner = CliRunner()

KINDS = ("jsonl", "sqlite", "postgres")

SESSIONS: list[tuple[str, dict[str, str], list[str], str]] = [
    ("s-bob-eval", {"user": "bob", "project": "x"}, ["eval"], "the release plan for bob"),
    ("s-bob", {"user": "bob"}, [], "the release plan, bob again"),
    ("s-alice-eval", {"user": "alice"}, ["eval", "nightly"], "the release plan for alice"),
    ("s-plain", {}, [], "the release plan, nobody's"),
]


class Store:
    def __init__(self, kind: str, root: Path, dsn: str = "", schema: str = "") -> None:
        self.kind, self.root, self.dsn, self.schema = kind, root, dsn, schema

    def args(self) -> list[str]:
        if self.kind == "postgres":
            return ["--backend", "postgres", "--dsn", self.dsn, "--pg-schema", self.schema]
        return ["--store", str(self.root), "--backend", self.kind]

    def backend(self) -> Any:
        if self.kind == "postgres":
            from agentlog.persistence.postgres import PostgresBackend

            return PostgresBackend(self.dsn, schema=self.schema)
        if self.kind == "sqlite":
            self.root.mkdir(parents=True, exist_ok=True)
            return SqliteBackend(str(self.root / SQLITE_FILENAME))
        return JsonlBackend(str(self.root))


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "host-cache"))
    for name in ("AGENTLOG_DSN", "AGENTLOG_PG_SCHEMA", "AGENTLOG_STORE"):
        monkeypatch.delenv(name, raising=False)
    if request.param == "postgres":
        made = Store("postgres", tmp_path, request.getfixturevalue("pg_dsn"), fresh_schema())
        yield made
        drop_schema(made.dsn, made.schema)
    else:
        yield Store(request.param, tmp_path / "store")


def _write(store: Store) -> None:
    """The four sessions, through a coordinator with the commands' cache kept current (as ``run`` does)."""
    for index, (session_id, labels, tags, text) in enumerate(SESSIONS):
        sessions = al.SessionStore(now=lambda index=index: 1_700_000_000_000 + index * 1000)
        coordinator = PersistenceCoordinator(sessions, store.backend())
        projections = attach_projections(coordinator)
        session = sessions.create(session_id, meta={"cwd": "/work"}, labels=labels or None, tags=tags or None)
        session.append("turn/start", {"turn": 1})
        session.append("user/message", al.user_message(text, id="u1"), {"surfaceOp": "append"})
        session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        sessions.flush(session)
        projections.checkpoint(session)
        sessions.dispose(session)
        projections.close()
        coordinator.close()


def _json(*args: str) -> Any:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.stdout + result.stderr
    return orjson.loads(result.stdout)


def _error(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 1, result.stdout + result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    error: dict[str, Any] = orjson.loads(result.stderr)["error"]
    return error


def _ids(store: Store, *filters: str) -> list[str]:
    return [row["id"] for row in _json("ls", *store.args(), *filters)["sessions"]]


def test_ls_filters_by_every_label_and_tag_given_and_rows_carry_them(store: Store) -> None:
    _write(store)
    assert _ids(store, "--label", "user=bob") == ["s-bob", "s-bob-eval"]
    assert _ids(store, "--label", "user=bob", "--tag", "eval") == ["s-bob-eval"]
    assert _ids(store, "--tag", "eval") == ["s-alice-eval", "s-bob-eval"]
    assert _ids(store, "--tag", "eval", "--tag", "nightly") == ["s-alice-eval"]
    assert _ids(store, "--label", "user=carol") == []
    rows = {row["id"]: row for row in _json("ls", *store.args())["sessions"]}
    assert rows["s-bob-eval"]["labels"] == {"user": "bob", "project": "x"}
    assert rows["s-bob-eval"]["tags"] == ["eval"]
    assert rows["s-plain"]["labels"] == {} and rows["s-plain"]["tags"] == []


def test_ls_serves_labels_from_a_current_cache_without_reading_a_log(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(store)

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("ls read a log")

    monkeypatch.setattr(PersistenceCoordinator, "read_from", refuse)
    monkeypatch.setattr(PersistenceCoordinator, "view", refuse)
    assert _ids(store, "--label", "user=bob", "--tag", "eval") == ["s-bob-eval"]


def test_ls_sees_labels_changed_later_by_a_writer_that_keeps_no_cache(store: Store) -> None:
    _write(store)
    sessions = al.SessionStore()
    coordinator = PersistenceCoordinator(sessions, store.backend())
    try:
        session = coordinator.resume("s-plain")
        session.set_labels({"user": "bob"})
        session.add_tags(["eval"])
        sessions.flush(session)
        sessions.dispose(session)
    finally:
        coordinator.close()
    assert _ids(store, "--label", "user=bob", "--tag", "eval") == ["s-plain", "s-bob-eval"]


def test_the_ls_table_shows_a_labels_column_only_when_a_session_has_labels(store: Store) -> None:
    _write(store)
    result = runner.invoke(app, ["ls", *store.args(), "--tag", "nightly"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "labels" in result.stdout and "user=alice #eval #nightly" in result.stdout
    result = runner.invoke(app, ["ls", *store.args(), "--label", "user=bob"], env={"COLUMNS": "250"})
    assert "user=bob" in result.stdout
    plain = runner.invoke(app, ["ls", *store.args(), "--label", "user=nobody"], env={"COLUMNS": "250"})
    assert "labels" not in plain.stdout


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [("--label", "user", "must be KEY=VALUE"), ("--label", "bad key=x", "label key 'bad key'"),
     ("--label", "user=", "1-256 characters"), ("--tag", "a/b", "tag 'a/b'")],
)  # fmt: skip
def test_a_malformed_filter_is_a_typed_error(store: Store, flag: str, value: str, needle: str) -> None:
    _write(store)
    for command in (["ls"], ["search", "release"]):
        error = _error(*command, *store.args(), flag, value)
        assert error["code"] == "SESSION_LABEL_INVALID"
        assert needle in error["message"]


def test_search_looks_only_in_the_sessions_carrying_every_label_and_tag(store: Store) -> None:
    _write(store)
    everything = _json("search", "release plan", *store.args())
    assert {item["bestMatch"]["sessionId"] for item in everything["items"]} == {sid for sid, *_ in SESSIONS}
    bob = _json("search", "release plan", *store.args(), "--label", "user=bob")
    assert {item["bestMatch"]["sessionId"] for item in bob["items"]} == {"s-bob", "s-bob-eval"}
    evals = _json("search", "release plan", *store.args(), "--label", "user=bob", "--tag", "eval")
    assert [item["bestMatch"]["sessionId"] for item in evals["items"]] == ["s-bob-eval"]
    none = _json("search", "release plan", *store.args(), "--tag", "missing")
    assert none["items"] == []


def test_search_pages_with_a_label_filter_continue_with_the_same_filter(store: Store) -> None:
    _write(store)
    first = _json("search", "release plan", *store.args(), "--label", "user=bob", "--limit", "1")
    assert len(first["items"]) == 1 and "nextCursor" in first
    second = _json(
        "search", "release plan", *store.args(), "--label", "user=bob", "--limit", "1", "--cursor", first["nextCursor"]
    )
    seen = {first["items"][0]["bestMatch"]["sessionId"], second["items"][0]["bestMatch"]["sessionId"]}
    assert seen == {"s-bob", "s-bob-eval"}
    error = _error("search", "release plan", *store.args(), "--limit", "1", "--cursor", first["nextCursor"])
    assert error["code"].startswith("SESSION_QUERY")  # a cursor of another filter is refused


def test_search_refuses_label_filters_with_session(store: Store) -> None:
    _write(store)
    error = _error("search", "release", *store.args(), "--session", "s-bob", "--label", "user=bob")
    assert error["code"] == "INVALID_OPTION" and "--session" in error["message"]


# --- agentlog label and run --label/--tag -------------------------------------------------------------------


def test_label_shows_sets_removes_and_appends_nothing_for_no_change(store: Store) -> None:
    _write(store)
    assert _json("label", "s-bob", *store.args()) == {"sessionId": "s-bob", "labels": {"user": "bob"}, "tags": []}
    changed = _json("label", "s-bob", "team=core", "note=two words", "--remove", "user", "--tag", "eval", *store.args())
    assert changed == {
        "sessionId": "s-bob", "labels": {"team": "core", "note": "two words"}, "tags": ["eval"], "changed": True,
    }  # fmt: skip
    again = _json("label", "s-bob", "team=core", "--tag", "eval", *store.args())
    assert again["changed"] is False
    assert _ids(store, "--label", "team=core", "--tag", "eval") == ["s-bob"]
    assert _ids(store, "--label", "user=bob") == ["s-bob-eval"]
    untagged = _json("label", "s-bob", "--untag", "eval", *store.args())
    assert untagged["tags"] == [] and untagged["changed"] is True
    text = runner.invoke(app, ["label", "s-bob", *store.args()])
    assert text.exit_code == 0 and text.stdout.strip() == "s-bob: team=core note=two words"


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [(["s-bob", "user"], "SESSION_LABEL_INVALID", "label 'user' must be KEY=VALUE"),
     (["s-bob", "a=1", "--remove", "a"], "INVALID_OPTION", "both set and removed"),
     (["s-bob", "--tag", "x", "--untag", "x"], "INVALID_OPTION", "both added and removed"),
     (["s-bob", "--tag", "a b"], "SESSION_LABEL_INVALID", "tag 'a b'"),
     (["missing", "a=1"], "SESSION_NOT_FOUND", "missing")],
)  # fmt: skip
def test_label_refusals_are_typed_and_change_nothing(store: Store, args: list[str], code: str, needle: str) -> None:
    _write(store)
    error = _error("label", *args, *store.args())
    assert error["code"] == code and needle in error["message"]
    assert _json("label", "s-bob", *store.args())["labels"] == {"user": "bob"}


def test_run_labels_and_tags_the_new_session(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentlog.testing.demo_server import DemoModelServer, Reply

    monkeypatch.setenv("DEEPSEEK_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with DemoModelServer([Reply(text="Hello.")]) as server:
        result = runner.invoke(app, [
            "run", "hi", *store.args(), "--base-url", server.base_url, "--cwd", str(tmp_path), "--session-id", "r1",
            "--label", "user=bob", "--tag", "eval",
        ])  # fmt: skip
    assert result.exit_code == 0, result.output + result.stderr
    row = _json("ls", *store.args(), "--tag", "eval")["sessions"]
    assert [(r["id"], r["labels"], r["tags"]) for r in row] == [("r1", {"user": "bob"}, ["eval"])]
    refused = runner.invoke(app, ["run", "hi", *store.args(), "--label", "nope", "--json"])
    assert refused.exit_code == 1 and orjson.loads(refused.stderr)["error"]["code"] == "SESSION_LABEL_INVALID"
