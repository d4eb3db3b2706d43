"""``agentlog import --from claude-code|codex FILE`` and ``agentlog export ID --to FORMAT``: the new id and
the report (``--json`` one document), a bad line as TRANSCRIPT_INVALID with nothing stored, a path that is
no readable transcript file (a directory, a FIFO, a missing or unreadable file) as a typed refusal naming
it, and export without ``--to`` unchanged."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from agentlog.cli import app

runner = CliRunner()
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts"


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
    assert any(line.startswith("kept as import/record: ") and "system ×1" in line for line in lines)
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


def test_import__a_file_no_tool_wrote_needs_from(tmp_path: Path) -> None:
    other = tmp_path / "other.jsonl"
    other.write_text('{"hello": "world"}\n')
    code, out, err = _run("import", str(other), "--store", str(tmp_path / "store"), "--json")
    assert code == 1 and out == ""
    error = orjson.loads(err)["error"]
    assert error["code"] == "CONVERSION_UNSUPPORTED" and "--from claude-code or --from codex" in error["message"]
    assert not list((tmp_path / "store").rglob("*.jsonl*"))


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
    kept = [event for event in document["events"] if event["type"] == "import/record"]
    assert kept and all(event["ignorable"] is True for event in kept)


def test_export_to__a_refusal_is_a_typed_error(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    assert _run("import", str(FIXTURES / "codex.jsonl"), "--from", "codex", "--store", store, "--id", "cx")[0] == 0
    code, out, err = _run("export", "cx", "--store", store, "--to", "anthropic", "--json")
    assert code == 1 and out == ""
    assert orjson.loads(err)["error"]["code"] == "CONVERSION_UNSUPPORTED"
    code, out, err = _run("export", "missing", "--store", store, "--to", "sharegpt", "--json")
    assert code == 1 and orjson.loads(err)["error"]["code"] == "SESSION_NOT_FOUND"


def _refusal(*args: str) -> dict[str, object]:
    code, out, err = _run(*args, "--json")
    assert code == 1 and out == "", (code, out, err)
    error = orjson.loads(err)["error"]
    assert isinstance(error, dict)
    return error


def test_import__an_empty_directory_imports_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "projects"
    folder.mkdir()
    store = tmp_path / "store"
    code, out, _err = _run("import", str(folder), "--from", "claude-code", "--store", str(store))
    assert code == 0 and out.splitlines()[-1] == "imported 0 transcripts, skipped 0, failed 0"
    assert not list(store.rglob("*.jsonl*"))


def test_import__the_python_call_refuses_a_directory_naming_it(tmp_path: Path) -> None:
    from agentlog.errors import StorageAccessError
    from agentlog.interop.transcripts import import_transcript
    from agentlog.kernel.store import SessionStore
    from agentlog.persistence.coordinator import PersistenceCoordinator
    from agentlog.persistence.jsonl.backend import JsonlBackend

    folder = tmp_path / "projects"
    folder.mkdir()
    coordinator = PersistenceCoordinator(SessionStore(), JsonlBackend(str(tmp_path / "store")))
    try:
        with pytest.raises(StorageAccessError) as caught:
            import_transcript(coordinator, "claude-code", folder)
    finally:
        coordinator.close()
    assert caught.value.code == "STORAGE_NOT_A_FILE"
    message = str(caught.value)
    assert message.startswith(f"{folder}: is a directory, not a transcript file") and "import_tree" in message


def test_import__a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    error = _refusal("import", str(fifo), "--from", "codex", "--store", str(tmp_path / "store"))
    assert error["code"] == "STORAGE_NOT_A_FILE"
    assert str(error["message"]).startswith(f"{fifo}: is a FIFO (named pipe), not a transcript file")


def test_import__a_missing_file_is_transcript_invalid_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "missing.jsonl"
    error = _refusal("import", str(missing), "--from", "codex", "--store", str(tmp_path / "store"))
    assert error["code"] == "TRANSCRIPT_INVALID"
    assert str(error["message"]).startswith(f"{missing}: cannot read the transcript: No such file or directory")


def test_import__an_unreadable_file_is_permission_denied(tmp_path: Path) -> None:
    """Run as an unprivileged user (root reads any file) in a forked child; the result comes back by pipe."""
    if os.geteuid() != 0:
        pytest.skip("needs root to hand the files to an unprivileged user (root itself bypasses chmod)")
    nobody = 65534
    top = Path(tempfile.mkdtemp(prefix="agentlog-import-denied-"))
    try:
        secret = top / "secret.jsonl"
        shutil.copy(FIXTURES / "codex.jsonl", secret)
        os.chmod(secret, 0o000)
        os.chown(top, nobody, nobody)
        os.chmod(top, 0o700)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            status = 1
            try:
                os.close(read_end)
                os.setgroups([])
                os.setgid(nobody)
                os.setuid(nobody)
                args = ["import", str(secret), "--from", "codex", "--store", str(top / "s"), "--json"]
                result = runner.invoke(app, args)
                os.write(write_end, orjson.dumps({"code": result.exit_code, "stderr": result.stderr}))
                status = 0
            finally:
                os._exit(status)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as handle:
            payload = orjson.loads(handle.read())
        os.waitpid(pid, 0)
        assert payload["code"] == 1, payload
        error = orjson.loads(payload["stderr"])["error"]
        assert error["code"] == "STORAGE_PERMISSION_DENIED"
        assert error["message"].startswith(f"{secret}: cannot read the transcript: Permission denied")
        assert "make it readable by this user" in error["message"]
        assert not list((top / "s").rglob("session.jsonl*"))
    finally:
        shutil.rmtree(top, ignore_errors=True)
