"""``agentlog import --from claude-code|codex FILE`` and ``agentlog export ID --to FORMAT``: the new id and
the report (``--json`` one document), a bad line as TRANSCRIPT_INVALID with nothing stored, and export
without ``--to`` unchanged."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from agentlog.cli import app

runner = CliRunner()
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "transcripts"


def _run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_import__json_report_and_the_session_reads_back(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    code, out, err = _run("import", str(FIXTURES / "codex.jsonl"), "--from", "codex", "--store", store, "--json")
    assert code == 0, err
    report = orjson.loads(out)
    session_id = report["sessionId"]
    assert report["source"] == "codex" and report["turns"] == 2
    assert report["messages"] == {"assistant": 4, "tool": 2, "user": 3}
    assert report["dropped"] == {"reasoning.encrypted_content": 1}
    code, out, err = _run("ls", "--store", store, "--json")
    assert [row["id"] for row in orjson.loads(out)["sessions"]] == [session_id]
    code, out, err = _run("verify", session_id, "--store", store, "--json")
    assert code == 0 and orjson.loads(out)["ok"] is True


def test_import__readable_output_starts_with_the_id(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    code, out, err = _run(
        "import", str(FIXTURES / "claude-code.jsonl"), "--from", "claude-code", "--store", store, "--id", "cc1"
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "cc1"
    assert "2 turns" in lines[1]
    assert any(line.startswith("kept as import/record: ") and "summary ×1" in line for line in lines)
    assert any(line.startswith("not mapped: ") and "user block image ×1" in line for line in lines)


def test_import__a_bad_line_is_transcript_invalid_and_nothing_is_stored(tmp_path: Path) -> None:
    lines = (FIXTURES / "claude-code.jsonl").read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*lines[:4], '{"type": "assistant", ', *lines[4:]]) + "\n")
    store = tmp_path / "store"
    code, out, err = _run("import", str(bad), "--from", "claude-code", "--store", str(store), "--id", "x", "--json")
    assert code == 1 and out == ""
    error = orjson.loads(err)["error"]
    assert error["code"] == "TRANSCRIPT_INVALID"
    assert f"{bad}:5: line 5 is not JSON" in error["message"]
    assert not list(store.rglob("session.jsonl*"))  # no log at all (the store itself need not exist)


def test_import__from_is_required(tmp_path: Path) -> None:
    code, out, _err = _run("import", str(FIXTURES / "codex.jsonl"), "--store", str(tmp_path / "store"))
    assert code == 2 and out == ""
    assert not (tmp_path / "store").exists()


def test_import__an_existing_id_is_refused(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    assert _run("import", str(FIXTURES / "codex.jsonl"), "--from", "codex", "--store", store, "--id", "one")[0] == 0
    code, _out, err = _run(
        "import", str(FIXTURES / "codex.jsonl"), "--from", "codex", "--store", store, "--id", "one", "--json"
    )
    assert code == 1 and orjson.loads(err)["error"]["code"] == "PERSISTENCE_ERROR"


@pytest.mark.parametrize(
    ("fmt", "key"),
    [
        ("openai-chat", "messages"),
        ("openai-responses", "input"),
        ("anthropic", "messages"),
        ("sharegpt", "conversations"),
    ],
)
def test_export_to__each_format_is_one_document(tmp_path: Path, fmt: str, key: str) -> None:
    store = str(tmp_path / "store")
    assert (
        _run("import", str(FIXTURES / "claude-code.jsonl"), "--from", "claude-code", "--store", store, "--id", "cc")[0]
        == 0
    )
    code, out, err = _run("export", "cc", "--store", store, "--to", fmt)
    assert code == 0, err
    document = orjson.loads(out)
    assert len(document[key]) >= 8
    if fmt != "sharegpt":
        assert document["model"] == "claude-sonnet-4-20250514"


def test_export__without_to_is_the_agentlog_document(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    assert (
        _run("import", str(FIXTURES / "claude-code.jsonl"), "--from", "claude-code", "--store", store, "--id", "cc")[0]
        == 0
    )
    code, out, _err = _run("export", "cc", "--store", store)
    assert code == 0
    document = orjson.loads(out)
    assert set(document) == {"header", "events", "surface", "messages", "requestHeader", "requestContext"}
    assert document["events"][0]["type"] == "import/record" and document["events"][0]["ignorable"] is True


def test_export_to__a_refusal_is_a_typed_error(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    assert _run("import", str(FIXTURES / "codex.jsonl"), "--from", "codex", "--store", store, "--id", "cx")[0] == 0
    code, out, err = _run("export", "cx", "--store", store, "--to", "anthropic", "--json")
    assert code == 1 and out == ""
    assert orjson.loads(err)["error"]["code"] == "CONVERSION_UNSUPPORTED"
    code, out, err = _run("export", "missing", "--store", store, "--to", "sharegpt", "--json")
    assert code == 1 and orjson.loads(err)["error"]["code"] == "SESSION_NOT_FOUND"
