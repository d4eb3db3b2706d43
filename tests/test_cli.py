"""The ``agentlog`` command (ls, export, verify) through typer's runner, over real stores."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

import agentlog as al
from agentlog.cli.commands import app
from agentlog.persistence.coordinator import PersistenceCoordinator

runner = CliRunner()

BACKENDS = [("jsonl", "zstd"), ("jsonl", "none"), ("sqlite", "zstd")]


def _backend(root: Path, kind: str, compression: str) -> Any:
    if kind == "sqlite":
        from agentlog.persistence.sqlite.backend import SqliteBackend

        return SqliteBackend(str(root / "sessions.sqlite3"))
    from agentlog.persistence.jsonl.backend import JsonlBackend

    return JsonlBackend(str(root), compression=compression)


def _write_sessions(root: Path, kind: str, compression: str, count: int = 3, open_last: bool = False) -> None:
    store = al.SessionStore(now=lambda: 1_700_000_000_000)
    coordinator = PersistenceCoordinator(store, _backend(root, kind, compression))
    try:
        for index in range(count):
            session = store.create(f"s{index}", meta={"cwd": "/work/project"})
            session.append("turn/start", {"turn": 1})
            session.append("user/message", al.user_message(f"hello {index}", id=f"u{index}"), {"surfaceOp": "append"})
            session.append("step/start", {"turn": 1, "step": 1})
            session.append(
                "request/header",
                {"header": {"config": {"provider": "deepseek", "model": "deepseek-chat"}}, "reason": "initial"},
            )
            session.append(
                "assistant/message",
                {
                    "turn": 1,
                    "step": 1,
                    "message": al.assistant_message(
                        [al.tool_call_block("c1", "read_file", "{}")],
                        provider="deepseek",
                        model="deepseek-chat",
                        id="a",
                    ),
                },
                {"surfaceOp": "append"},
            )
            session.append("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "read_file", "arguments": "{}"})
            if not (open_last and index == count - 1):
                session.append(
                    "tool/result",
                    {"turn": 1, "step": 1, "message": al.tool_result_message("c1", "content", id="r")},
                    {"surfaceOp": "append"},
                )
                session.append("step/end", {"turn": 1, "step": 1})
                session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
            store.flush(session)
        fork = store.fork("s0", child_id="s0-fork")
        store.flush(fork)
    finally:
        coordinator.close()


def _args(root: Path, kind: str, compression: str) -> list[str]:
    return ["--store", str(root), "--backend", kind, "--compression", compression]


def _tree_snapshot(root: Path) -> dict[str, bytes]:
    files = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as handle:
                files[path] = handle.read()
    return files


@pytest.mark.parametrize(("kind", "compression"), BACKENDS)
def test_cli__ls_lists_sessions_as_json_and_table_without_writing(tmp_path: Path, kind: str, compression: str) -> None:
    """``ls`` of sessions written without the projection cache folds their logs in memory (the figures
    are the logs') and writes nothing: no cache file, no ``-wal``/``-shm`` beside a SQLite store."""
    _write_sessions(tmp_path, kind, compression)
    before = _tree_snapshot(tmp_path)
    result = runner.invoke(app, ["ls", *_args(tmp_path, kind, compression), "--json"])
    assert result.exit_code == 0, result.output
    document = orjson.loads(result.stdout)
    ids = [row["id"] for row in document["sessions"]]
    assert ids == ["s0", "s0-fork", "s1", "s2"]
    by_id = {row["id"]: row for row in document["sessions"]}
    assert by_id["s0"]["events"] == 9 and by_id["s0"]["turns"] == 1
    assert by_id["s0"]["tokens"] is None  # a step, and no usage reported: unknown, not 0
    assert by_id["s0"]["cwd"] == "/work/project"
    assert by_id["s0-fork"]["parentSession"] == "s0"
    assert by_id["s1"]["createdAt"] == 1_700_000_000_000
    assert by_id["s1"]["lastActivity"] == 1_700_000_000_000  # the clock every event was written with
    assert document["nextCursor"] is None
    table = runner.invoke(app, ["ls", *_args(tmp_path, kind, compression)])
    assert table.exit_code == 0
    assert "s0-fork" in table.stdout and "/work/project" in table.stdout
    assert _tree_snapshot(tmp_path) == before


def test_cli__ls_is_cursor_paged(tmp_path: Path) -> None:
    _write_sessions(tmp_path, "jsonl", "zstd", count=5)
    first = orjson.loads(runner.invoke(app, ["ls", "--store", str(tmp_path), "--json", "--limit", "2"]).stdout)
    assert [row["id"] for row in first["sessions"]] == ["s0", "s0-fork"]
    assert first["nextCursor"] == "s0-fork"
    second = orjson.loads(
        runner.invoke(app, ["ls", "--store", str(tmp_path), "--json", "--limit", "2", "--cursor", "s0-fork"]).stdout
    )
    assert [row["id"] for row in second["sessions"]] == ["s1", "s2"]
    table = runner.invoke(app, ["ls", "--store", str(tmp_path), "--limit", "2"])
    assert "agentlog ls --cursor s0-fork" in table.stdout


def test_cli__store_defaults_to_the_environment_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_sessions(tmp_path, "jsonl", "zstd", count=1)
    monkeypatch.setenv("AGENTLOG_STORE", str(tmp_path))
    result = runner.invoke(app, ["ls", "--json"])
    assert result.exit_code == 0
    assert [row["id"] for row in orjson.loads(result.stdout)["sessions"]] == ["s0", "s0-fork"]


@pytest.mark.parametrize(("kind", "compression"), BACKENDS)
def test_cli__export_prints_header_events_surface_messages_and_request_state(
    tmp_path: Path, kind: str, compression: str
) -> None:
    _write_sessions(tmp_path, kind, compression)
    before = _tree_snapshot(tmp_path)
    result = runner.invoke(app, ["export", "s1", *_args(tmp_path, kind, compression)])
    assert result.exit_code == 0, result.output
    document = orjson.loads(result.stdout)
    assert set(document) == {"header", "events", "surface", "messages", "requestHeader", "requestContext"}
    assert document["header"]["id"] == "s1"
    assert [event["seq"] for event in document["events"]] == list(range(9))
    assert document["surface"] == [1, 4, 6]
    assert [message["role"] for message in document["messages"]] == ["user", "assistant", "user"]
    assert document["requestHeader"] == {"config": {"provider": "deepseek", "model": "deepseek-chat"}}
    assert document["requestContext"] is None
    assert _tree_snapshot(tmp_path) == before


def test_cli__export_of_an_interrupted_session_shows_the_repair_without_writing(tmp_path: Path) -> None:
    _write_sessions(tmp_path, "jsonl", "zstd", count=2, open_last=True)
    before = _tree_snapshot(tmp_path)
    document = orjson.loads(runner.invoke(app, ["export", "s1", "--store", str(tmp_path)]).stdout)
    kinds = [event["type"] for event in document["events"]][-3:]
    assert kinds == ["tool/result", "step/end", "turn/end"]
    assert document["events"][-3]["data"]["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
    assert _tree_snapshot(tmp_path) == before


@pytest.mark.parametrize(("kind", "compression"), BACKENDS)
def test_cli__verify_passes_a_healthy_store_and_reports_repairable_sessions(
    tmp_path: Path, kind: str, compression: str
) -> None:
    _write_sessions(tmp_path, kind, compression, open_last=True)
    before = _tree_snapshot(tmp_path)
    result = runner.invoke(app, ["verify", *_args(tmp_path, kind, compression), "--json"])
    assert result.exit_code == 0, result.output
    document = orjson.loads(result.stdout)
    status = {row["id"]: row["status"] for row in document["sessions"]}
    assert status == {"s0": "ok", "s0-fork": "ok", "s1": "ok", "s2": "repairable"}
    assert document["ok"] is True
    assert runner.invoke(app, ["verify", "s0", *_args(tmp_path, kind, compression)]).exit_code == 0
    assert _tree_snapshot(tmp_path) == before


def _zstd_log(root: Path, session_id: str) -> Path:
    matches = list(root.glob(f"*/{session_id}/session.jsonl.zstd"))
    assert len(matches) == 1
    return matches[0]


def test_cli__verify_fails_with_session_corrupt_on_a_damaged_frame_and_leaves_it_untouched(tmp_path: Path) -> None:
    _write_sessions(tmp_path, "jsonl", "zstd")
    log = _zstd_log(tmp_path, "s1")
    data = bytearray(log.read_bytes())
    header_frame_end = data.index(b"\x28\xb5\x2f\xfd", 4)  # second frame: the first batch
    data[header_frame_end + 12] ^= 0xFF
    log.write_bytes(bytes(data))
    before = _tree_snapshot(tmp_path)
    result = runner.invoke(app, ["verify", "--store", str(tmp_path), "--json"])
    assert result.exit_code == 1
    rows = {row["id"]: row for row in orjson.loads(result.stdout)["sessions"]}
    assert rows["s1"]["status"] == "failed"
    assert rows["s1"]["error"]["code"] == "SESSION_CORRUPT"
    assert rows["s0"]["status"] == "ok"
    exported = runner.invoke(app, ["export", "s1", "--store", str(tmp_path), "--json"])
    assert exported.exit_code == 1
    assert orjson.loads(exported.stderr)["error"]["code"] == "SESSION_CORRUPT"
    assert _tree_snapshot(tmp_path) == before


def test_cli__missing_session_is_session_not_found(tmp_path: Path) -> None:
    _write_sessions(tmp_path, "jsonl", "zstd", count=1)
    result = runner.invoke(app, ["export", "nope", "--store", str(tmp_path), "--json"])
    assert result.exit_code == 1
    error = orjson.loads(result.stderr)["error"]
    assert error["code"] == "SESSION_NOT_FOUND"
    assert 'session "nope" not found' in error["message"]
    plain = runner.invoke(app, ["export", "nope", "--store", str(tmp_path)])
    assert plain.exit_code == 1 and "SESSION_NOT_FOUND" in plain.stderr
    verify = runner.invoke(app, ["verify", "nope", "--store", str(tmp_path), "--json"])
    assert verify.exit_code == 1


def test_cli__future_format_version_is_reported_by_ls_and_refused_by_export(tmp_path: Path) -> None:
    _write_sessions(tmp_path, "jsonl", "none", count=1)
    log = next(tmp_path.glob("*/s0/session.jsonl"))
    lines = log.read_bytes().split(b"\n")
    header = orjson.loads(lines[0])
    header["version"] = 7
    log.write_bytes(b"\n".join([orjson.dumps(header), *lines[1:]]))
    listing = runner.invoke(app, ["ls", "--store", str(tmp_path), "--compression", "none", "--json"])
    assert listing.exit_code == 0
    rows = {row["id"]: row for row in orjson.loads(listing.stdout)["sessions"]}
    assert "s0" in rows  # reported, not hidden
    exported = runner.invoke(app, ["export", "s0", "--store", str(tmp_path), "--compression", "none", "--json"])
    assert exported.exit_code == 1
    error = orjson.loads(exported.stderr)["error"]
    assert error["code"] == "SESSION_FORMAT_UNSUPPORTED"
    assert "v7" in error["message"]


# --- human output: one labelled count, no Python reprs -----------------------------------------------------


def _sparse_sessions(root: Path, kind: str) -> None:
    """Sessions without any optional field: no cwd, no title, no tools or system prompt in the request
    header, no usage; one closed (``bare``), its fork (``child``) and one interrupted inside a tool call
    (``open``: a resume would add closers)."""
    store = al.SessionStore(now=lambda: 1_700_000_000_000)
    coordinator = PersistenceCoordinator(store, _backend(root, kind, "zstd"))
    try:
        bare = store.create("bare", meta={})
        bare.append("turn/start", {"turn": 1})
        bare.append("user/message", al.user_message("hello there", id="u1"), {"surfaceOp": "append"})
        bare.append("step/start", {"turn": 1, "step": 1})
        bare.append("request/header", {"header": {"config": {"provider": "p", "model": "m"}}, "reason": "initial"})
        answer = al.assistant_message([al.text_block("hello back")], provider="p", model="m", id="a1")
        bare.append("assistant/message", {"turn": 1, "step": 1, "message": answer}, {"surfaceOp": "append"})
        bare.append("step/end", {"turn": 1, "step": 1})
        bare.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        store.flush(bare)
        store.flush(store.fork(bare, child_id="child"))
        opened = store.create("open", meta={})
        opened.append("turn/start", {"turn": 1})
        opened.append("user/message", al.user_message("hello tool", id="u1"), {"surfaceOp": "append"})
        opened.append("step/start", {"turn": 1, "step": 1})
        call = al.assistant_message([al.tool_call_block("c1", "read_file", "{}")], provider="p", model="m", id="a1")
        opened.append("assistant/message", {"turn": 1, "step": 1, "message": call}, {"surfaceOp": "append"})
        opened.append("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "read_file", "arguments": "{}"})
        store.flush(opened)
    finally:
        coordinator.close()
    for listing in _backend(root, kind, "zstd").list_sessions():
        assert listing.header is not None and "cwd" not in listing.header


QUOTED_QUERY = 'it\'s "quoted" \\ here'

_REPR = re.compile(r"\b(None|True|False)\b|[{\[(]'|'[}\])]|<[\w.]+ object at|Frozen(Dict|List)\(|\\'")
"""What Python's ``repr`` of a value left in a sentence looks like (JSON in an event line is ``null``,
``true``, ``false`` and double quotes)."""


@pytest.mark.parametrize(("kind", "compression"), [("jsonl", "zstd"), ("sqlite", "zstd")])
def test_cli__read_commands_print_no_python_reprs_for_sessions_without_optional_fields(
    tmp_path: Path, kind: str, compression: str
) -> None:
    _sparse_sessions(tmp_path, kind)
    at = _args(tmp_path, kind, compression)
    commands: list[list[str]] = [["ls"], ["verify"]]
    for sid in ("bare", "open", "child"):
        commands += [
            ["show", sid],
            ["show", sid, "--log"],
            ["stats", sid],
            ["title", sid],
            ["trace", sid],
            ["trace", sid, "--seq", "1"],
            ["tail", sid],
            ["replay", sid, "--speed", "0"],
        ]
        shown = orjson.loads(runner.invoke(app, ["show", sid, "--log", *at, "--json"]).stdout)["events"]
        commands += [["show", sid, "--at", str(event["seq"])] for event in shown]
    commands += [
        ["search", "hello"],
        ["search", "hello", "--session", "open"],
        ["search", QUOTED_QUERY],
        ["reindex", "--projections"],
        ["ls"],
        ["stats", "bare"],
    ]
    for argv in commands:
        result = runner.invoke(app, [*argv, *at])
        assert result.exit_code == 0, (argv, result.output)
        output = result.stdout + result.stderr
        assert output.strip(), argv
        leak = _REPR.search(output)
        assert leak is None, (argv, leak, output)
    query = QUOTED_QUERY
    nothing = runner.invoke(app, ["search", query, *at])
    assert nothing.stdout == f'no hits for "{query}"\n'  # as typed: not a repr's escapes


@pytest.mark.parametrize(("kind", "compression"), [("jsonl", "zstd"), ("sqlite", "zstd")])
def test_cli__show_counts_the_stored_events_as_verify_does_and_names_the_closers_apart(
    tmp_path: Path, kind: str, compression: str
) -> None:
    """``show``'s count is the stored events (``verify``'s and ``ls``'s); the closers a resume would add
    to an interrupted turn are a second, labelled figure, in the text and in ``--json``."""
    _sparse_sessions(tmp_path, kind)
    at = _args(tmp_path, kind, compression)
    verified = orjson.loads(runner.invoke(app, ["verify", *at, "--json"]).stdout)
    counts = {row["id"]: row["events"] for row in verified["sessions"]}
    assert counts["open"] == 5 and counts["bare"] == 7
    closed = runner.invoke(app, ["show", "bare", *at])
    assert closed.stdout.splitlines()[0] == "session bare: 7 stored events"
    interrupted = runner.invoke(app, ["show", "open", *at])
    assert interrupted.stdout.splitlines()[0] == "session open: 5 stored events, +3 closers a resume would add"
    child = runner.invoke(app, ["show", "child", *at])
    assert child.stdout.splitlines()[0] == f"session child (forked from bare): {counts['child']} stored events"
    for sid, closers in (("bare", []), ("open", [5, 6, 7]), ("child", [])):
        document = orjson.loads(runner.invoke(app, ["show", sid, *at, "--json"]).stdout)
        assert document["events"] == counts[sid]
        assert document["wouldBeAddedOnResume"] == closers


# --- a store the user cannot read ---------------------------------------------------------------------------

_AS_UNPRIVILEGED = r"""
import importlib, json, os, pkgutil, sys
import typer.rich_utils  # the usage panel's renderer, loaded now: it would be needed only after the drop
from typer.testing import CliRunner
import agentlog
from agentlog.cli.commands import app
# Every agentlog module a command may import lazily is loaded while the interpreter's own files are
# readable (they may be private to root); "__main__" modules would run the CLI.
for found in pkgutil.walk_packages(agentlog.__path__, "agentlog."):
    if found.name.split(".")[1] in ("cli", "query", "persistence", "projection", "kernel", "interop"):
        if not found.name.endswith("__main__"):
            importlib.import_module(found.name)
"".encode("utf-16-le")
uid = int(sys.argv[1])
if uid != os.geteuid():
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
runner = CliRunner()
out = []
for argv in json.loads(sys.argv[2]):
    result = runner.invoke(app, argv)
    out.append({"argv": argv, "exit": result.exit_code, "stdout": result.stdout, "stderr": result.stderr,
                "exception": None if result.exception is None or isinstance(result.exception, SystemExit)
                else repr(result.exception)})
print(json.dumps(out))
"""

_NOBODY = 65534


def _run_as_unprivileged(argvs: list[list[str]]) -> list[dict[str, Any]]:
    """Each command line through the CLI in one child process that runs as an unprivileged user: as
    ``nobody`` when the tests run as root (root reads any file whatever its mode), else as this user.

    The child drops its privileges itself, after its imports (a ``preexec_fn`` setuid would drop them
    before the interpreter starts, which may live where ``nobody`` cannot read)."""
    import json
    import subprocess
    import sys

    uid = _NOBODY if os.geteuid() == 0 else os.geteuid()
    source = str(Path(al.__file__).resolve().parents[1])  # this agentlog, whatever the child's directory
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))}
    child = subprocess.run(
        [sys.executable, "-c", _AS_UNPRIVILEGED, str(uid), json.dumps(argvs)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd="/",
        env=env,
    )
    assert child.returncode == 0, child.stderr[-4000:]
    results: list[dict[str, Any]] = json.loads(child.stdout)
    return results


@pytest.mark.parametrize(("kind", "compression"), [("jsonl", "zstd"), ("sqlite", "zstd")])
def test_cli__an_unreadable_store_root_is_storage_permission_denied_not_a_usage_error(
    kind: str, compression: str
) -> None:
    """A store root of mode 000 is a runtime fault of the store: every command reports the typed
    ``STORAGE_PERMISSION_DENIED`` (exit 1, ``{"error": {code}}`` under --json), never a usage panel."""
    import shutil
    import tempfile

    # Not under pytest's tmp_path: its parent is private to the user running the tests, and the
    # unprivileged user must reach the store root (but not read it).
    base = Path(tempfile.mkdtemp(prefix="agentlog-unreadable-"))
    try:
        base.chmod(0o755)
        root = base / "store"
        root.mkdir()
        _write_sessions(root, kind, compression, count=1)
        uid = _NOBODY if os.geteuid() == 0 else os.geteuid()
        for dirpath, _dirs, names in os.walk(root):  # the user's own store (a SQLite store must be)
            for name in [".", *names]:
                os.chown(os.path.join(dirpath, name), uid, uid)
        before = _tree_snapshot(root)
        root.chmod(0o000)
        commands = [
            ["ls"],
            ["stats", "s0"],
            ["title", "s0"],
            ["title", "s0", "a new title"],
            ["search", "hello"],
            ["show", "s0"],
            ["verify"],
            ["export", "s0"],
            ["trace", "s0"],
            ["tail", "s0"],
        ]
        argvs = [[*argv, *_args(root, kind, compression), *json] for argv in commands for json in ([], ["--json"])]
        try:
            results = _run_as_unprivileged(argvs)
        finally:
            root.chmod(0o700)
        assert _tree_snapshot(root) == before  # nothing was written, nor created
    finally:
        shutil.rmtree(base)
    for result in results:
        assert result["exception"] is None, result["exception"]
        assert result["exit"] == 1, (result["argv"], result["stderr"])
        assert result["stdout"] == "", result["argv"]
        assert "Usage" not in result["stderr"] and "Invalid value" not in result["stderr"], result["stderr"]
        if "--json" in result["argv"]:
            error = orjson.loads(result["stderr"])["error"]
            assert error["code"] == "STORAGE_PERMISSION_DENIED" and error["message"], result["stderr"]
        else:
            assert result["stderr"].startswith("error [STORAGE_PERMISSION_DENIED] "), result["stderr"]
