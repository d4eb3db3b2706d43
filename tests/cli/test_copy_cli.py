"""``agentlog copy``: one line per session and a count (``--json``: one document), exit 1 when a session
failed, a re-run that skips what was copied, and refusals to open either store as typed errors."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from agentlog.cli import app
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing.builders import closed_turn, header

runner = CliRunner()


def _run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def _store(root: Path, lineage: bool = True) -> None:
    coordinator = PersistenceCoordinator(SessionStore(), JsonlBackend(str(root), compression="zstd"))
    coordinator.create(header("parent"))
    coordinator.append("parent", closed_turn(0))
    if lineage:
        coordinator.create(header("child", parentSession="parent", origin="subagent", delegationDepth=1))
        coordinator.append("child", [*closed_turn(0), *closed_turn(6, turn=2)])
    coordinator.close()


def test_copy__json_document_then_a_rerun_skips_and_ls_of_the_target_shows_the_lineage(tmp_path: Path) -> None:
    _store(tmp_path / "a")
    args = ["copy", "--from-store", str(tmp_path / "a"), "--to-store", str(tmp_path / "b"), "--to-backend", "sqlite"]

    code, out, err = _run(*args, "--json")

    assert code == 0, err
    document = orjson.loads(out)
    assert (document["copied"], document["skipped"], document["failed"], document["events"]) == (2, 0, 0, 18)
    assert [(s["id"], s["status"], s["events"]) for s in document["sessions"]] == [
        ("child", "copied", 12),
        ("parent", "copied", 6),
    ]
    assert all(s["digest"].startswith("sha256:") for s in document["sessions"])
    again = orjson.loads(_run(*args, "--json")[1])
    assert (again["copied"], again["skipped"]) == (0, 2)
    listing = orjson.loads(_run("ls", "--store", str(tmp_path / "b"), "--backend", "sqlite", "--json")[1])
    assert {row["id"]: row.get("parentSession") for row in listing["sessions"]} == {"child": "parent", "parent": None}


def test_copy__readable_lines_name_each_session_and_the_count(tmp_path: Path) -> None:
    _store(tmp_path / "a")

    code, out, _ = _run("copy", "parent", "--from-store", str(tmp_path / "a"), "--to-store", str(tmp_path / "b"))

    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("copied   parent  6 events, sha256:")
    assert lines[-1] == "copied 1 sessions (6 events), skipped 0, failed 0"
    code, out, _ = _run("copy", "--from-store", str(tmp_path / "a"), "--to-store", str(tmp_path / "b"))
    assert code == 0 and "skipped  parent" in out and "copied   child" in out


def test_copy__a_conflicting_target_session_fails_alone_with_exit_1(tmp_path: Path) -> None:
    _store(tmp_path / "a")
    target = PersistenceCoordinator(SessionStore(), JsonlBackend(str(tmp_path / "b"), compression="none"))
    target.create(header("parent", cwd="/other"))
    target.append("parent", closed_turn(0))
    target.close()
    args = ["copy", "--from-store", str(tmp_path / "a"), "--to-store", str(tmp_path / "b")]

    code, out, _ = _run(*args, "--json")

    assert code == 1
    document = orjson.loads(out)
    assert (document["copied"], document["failed"]) == (1, 1)
    failed = next(s for s in document["sessions"] if s["status"] == "failed")
    assert failed["id"] == "parent" and failed["error"]["code"] == "COPY_CONFLICT"
    code, out, _ = _run(*args)
    assert code == 1 and "failed   parent  [COPY_CONFLICT]" in out


def test_copy__a_store_that_cannot_be_opened_is_a_typed_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = _run("copy", "--from-store", str(tmp_path / "missing"), "--to-store", str(tmp_path / "b"), "--json")
    assert code == 1 and orjson.loads(err)["error"]["code"] == "STORE_NOT_FOUND"
    assert not (tmp_path / "b").exists()
    _store(tmp_path / "a")
    monkeypatch.delenv("AGENTLOG_DSN", raising=False)
    code, _, err = _run("copy", "--from-store", str(tmp_path / "a"), "--to-backend", "postgres", "--json")
    assert code == 1 and orjson.loads(err)["error"]["code"] == "INVALID_OPTION"


def test_copy__a_jsonl_store_moves_to_postgres_and_back(tmp_path: Path, pg_dsn: str, pg_schema: str) -> None:
    _store(tmp_path / "a")
    to_pg = ["--to-backend", "postgres", "--to-dsn", pg_dsn, "--to-pg-schema", pg_schema]

    code, out, err = _run("copy", "--from-store", str(tmp_path / "a"), *to_pg, "--json")

    assert code == 0, err
    assert orjson.loads(out)["copied"] == 2
    from_pg = ["--from-backend", "postgres", "--from-dsn", pg_dsn, "--from-pg-schema", pg_schema]
    code, out, err = _run("copy", *from_pg, "--to-store", str(tmp_path / "back"), "--compression", "none", "--json")
    assert code == 0, err
    digests = {s["id"]: s["digest"] for s in orjson.loads(out)["sessions"]}
    # Into the raw store without --compression: its own encoding is kept, and every session is there already.
    back = ["--to-store", str(tmp_path / "back"), "--json"]
    first = orjson.loads(_run("copy", "--from-store", str(tmp_path / "a"), *back)[1])
    assert {s["id"]: (s["status"], s["digest"]) for s in first["sessions"]} == {
        session_id: ("skipped", digest) for session_id, digest in digests.items()
    }


def test_copy__store_backend_and_dsn_default_both_sides(tmp_path: Path) -> None:
    _store(tmp_path / "a")

    code, out, err = _run("copy", "--store", str(tmp_path / "a"), "--to-backend", "sqlite", "--json")

    assert code == 0, err
    assert orjson.loads(out)["copied"] == 2
    assert (tmp_path / "a" / "sessions.sqlite3").is_file()  # the SQLite store beside the JSONL one
    for backend in ("jsonl", "sqlite"):
        listing = orjson.loads(_run("ls", "--store", str(tmp_path / "a"), "--backend", backend, "--json")[1])
        assert sorted(row["id"] for row in listing["sessions"]) == ["child", "parent"]


def test_copy__compression_chooses_a_jsonl_targets_encoding_and_its_absence_keeps_the_stores(tmp_path: Path) -> None:
    _store(tmp_path / "a")
    source = ["--from-store", str(tmp_path / "a")]

    assert _run("copy", "parent", *source, "--to-store", str(tmp_path / "raw"), "--compression", "none")[0] == 0
    assert _run("copy", "parent", *source, "--to-store", str(tmp_path / "new"))[0] == 0
    assert _run("copy", "child", *source, "--to-store", str(tmp_path / "raw"))[0] == 0  # a raw store stays raw

    def names(root: str) -> list[str]:
        return sorted(path.name for path in (tmp_path / root).rglob("session.*"))

    assert names("raw") == ["session.jsonl", "session.jsonl"]
    assert names("new") == ["session.jsonl.zstd"]
