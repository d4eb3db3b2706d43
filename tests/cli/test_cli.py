"""The ``agentlog`` command (ls, export, verify) through typer's runner, over real stores."""

from __future__ import annotations

import os
import re
import subprocess
import sys
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


def _backend(root: Path, kind: str, compression: Any = "zstd") -> Any:
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


# Issue 7, defect 9 (CLI truth): what the read-only commands say and leave behind, over real stores.


LONG_ID = "a-rather-long-session-identifier-that-a-narrow-table-would-cut-0123456789"
LONG_CWD = "/work/projects/with/a/deeply/nested/and/long/working/directory/name"




def _write(
    root: Path,
    kind: str = "jsonl",
    compression: str = "zstd",
    *,
    ids: tuple[str, ...] = ("s0", "s1"),
    open_last: bool = False,
    cwd: str = "/work/project",
) -> None:
    store = al.SessionStore(now=lambda: 1_700_000_000_000)
    coordinator = PersistenceCoordinator(store, _backend(root, kind, compression))
    try:
        for index, session_id in enumerate(ids):
            session = store.create(session_id, meta={"cwd": cwd})
            session.append("turn/start", {"turn": 1})
            session.append("user/message", al.user_message(f"hello {index}", id=f"u{index}"), {"surfaceOp": "append"})
            session.append("step/start", {"turn": 1, "step": 1})
            session.append(
                "assistant/message",
                {
                    "turn": 1,
                    "step": 1,
                    "message": al.assistant_message(
                        [al.tool_call_block("c1", "read_file", "{}")],
                        provider="deepseek",
                        model="deepseek-chat",
                        id=f"a{index}",
                    ),
                },
                {"surfaceOp": "append"},
            )
            session.append("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "read_file", "arguments": "{}"})
            if not (open_last and index == len(ids) - 1):
                session.append(
                    "tool/result",
                    {"turn": 1, "step": 1, "message": al.tool_result_message("c1", "content", id=f"r{index}")},
                    {"surfaceOp": "append"},
                )
                session.append("step/end", {"turn": 1, "step": 1})
                session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
            store.flush(session)
    finally:
        coordinator.close()


def _tree(root: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for dirpath, dirs, names in os.walk(root):
        for name in dirs:
            files[os.path.join(dirpath, name) + "/"] = b""
        for name in names:
            path = os.path.join(dirpath, name)
            files[path] = Path(path).read_bytes()
    return files




def _damage_second_frame(root: Path, session_id: str) -> None:
    log = _zstd_log(root, session_id)
    data = bytearray(log.read_bytes())
    second = data.index(b"\x28\xb5\x2f\xfd", 4)
    data[second + 12] ^= 0xFF
    log.write_bytes(bytes(data))


# --- --version ------------------------------------------------------------------------------------------


def test_version_prints_the_installed_distribution_version() -> None:
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"agentlog {version('agentlog')}"


def test_version_through_the_console_script() -> None:
    from importlib.metadata import version

    exe = Path(sys.executable).with_name("agentlog")
    if not exe.exists():
        pytest.skip(f"the agentlog console script is not installed next to {sys.executable}")
    done = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"agentlog {version('agentlog')}"


# --- ls: headers only, full ids -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_ls_without_a_cache_reports_the_figures_of_each_log(tmp_path: Path, kind: str) -> None:
    """No projection cache (these logs were written without one): ``ls`` folds each log in memory and
    reports what it holds, never a blank that reads as "nothing happened"."""
    _write(tmp_path, kind)
    result = runner.invoke(app, ["ls", "--store", str(tmp_path), "--backend", kind, "--json"])
    assert result.exit_code == 0, result.output
    rows = orjson.loads(result.stdout)["sessions"]
    assert [row["id"] for row in rows] == ["s0", "s1"]
    for row in rows:
        assert row["events"] == 8 and row["lastActivity"] == 1_700_000_000_000
        assert row["createdAt"] == 1_700_000_000_000 and row["cwd"] == "/work/project"
        assert row["error"] is None


def test_ls_leaves_the_figures_of_a_damaged_body_unknown_the_damage_is_for_verify(tmp_path: Path) -> None:
    _write(tmp_path)
    _damage_second_frame(tmp_path, "s1")
    result = runner.invoke(app, ["ls", "--store", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["id"]: row for row in orjson.loads(result.stdout)["sessions"]}
    assert rows["s1"]["error"] is None  # the header is fine
    assert rows["s1"]["events"] is None and rows["s1"]["lastActivity"] is None  # unknown, not 0
    assert rows["s0"]["events"] == 8
    verify = runner.invoke(app, ["verify", "s1", "--store", str(tmp_path), "--json"])
    assert verify.exit_code == 1
    assert orjson.loads(verify.stdout)["sessions"][0]["error"]["code"] == "SESSION_CORRUPT"


def test_ls_table_keeps_full_ids_when_not_a_terminal(tmp_path: Path) -> None:
    _write(tmp_path, ids=(LONG_ID, LONG_ID + "-b"), cwd=LONG_CWD)
    result = runner.invoke(app, ["ls", "--store", str(tmp_path)], env={"COLUMNS": "60"})
    assert result.exit_code == 0, result.output
    assert LONG_ID in result.stdout and LONG_ID + "-b" in result.stdout
    assert LONG_CWD in result.stdout
    assert "…" not in result.stdout


def test_ls_table_keeps_full_ids_through_a_real_pipe(tmp_path: Path) -> None:
    _write(tmp_path, ids=(LONG_ID,), cwd=LONG_CWD)
    env = {**os.environ, "COLUMNS": "50"}
    done = subprocess.run(
        [sys.executable, "-m", "agentlog.cli", "ls", "--store", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert LONG_ID in done.stdout and LONG_CWD in done.stdout


def test_ls_table_reports_a_damaged_header_in_its_status_column(tmp_path: Path) -> None:
    _write(tmp_path)
    log = _zstd_log(tmp_path, "s1")
    log.write_bytes(b"\x00" * 16 + log.read_bytes()[16:])
    result = runner.invoke(app, ["ls", "--store", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "SESSION_CORRUPT" in result.stdout
    assert "status" in result.stdout


# --- show --log: closers of an unrepaired session ---------------------------------------------------------


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_show_log_marks_closers_that_would_be_added_on_resume(tmp_path: Path, kind: str) -> None:
    _write(tmp_path, kind, open_last=True)
    before = _tree(tmp_path)
    result = runner.invoke(app, ["show", "s1", "--store", str(tmp_path), "--backend", kind, "--log"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    stored = [line for line in lines if line.strip()[:1].isdigit()]
    assert len(stored) == 8  # five stored events + three closers
    assert not any("would be added on resume" in line for line in stored[:5])
    closers = stored[5:]
    assert [line.split()[1] for line in closers] == ["tool/result", "step/end", "turn/end"]
    assert all("would be added on resume" in line for line in closers)
    document = orjson.loads(
        runner.invoke(app, ["show", "s1", "--store", str(tmp_path), "--backend", kind, "--log", "--json"]).stdout
    )
    assert document["storedEvents"] == 5
    assert document["wouldBeAddedOnResume"] == [5, 6, 7]
    assert [event["seq"] for event in document["events"]] == list(range(8))
    assert document["events"][5]["data"]["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
    assert _tree(tmp_path) == before


def test_show_log_of_a_balanced_session_marks_nothing(tmp_path: Path) -> None:
    _write(tmp_path)
    result = runner.invoke(app, ["show", "s1", "--store", str(tmp_path), "--log"])
    assert result.exit_code == 0, result.output
    assert "would be added on resume" not in result.stdout
    document = orjson.loads(runner.invoke(app, ["show", "s1", "--store", str(tmp_path), "--log", "--json"]).stdout)
    assert document["wouldBeAddedOnResume"] == []
    assert document["storedEvents"] == 8


# --- a store that does not exist; read commands create nothing ---------------------------------------------

READ_COMMANDS = [["ls"], ["verify"], ["verify", "s0"], ["export", "s0"], ["show", "s0"], ["show", "s0", "--log"]]


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
@pytest.mark.parametrize("command", READ_COMMANDS, ids=" ".join)
def test_a_mistyped_store_is_store_not_found_and_nothing_is_created(
    tmp_path: Path, kind: str, command: list[str]
) -> None:
    missing = tmp_path / "no-such-store"
    result = runner.invoke(app, [*command, "--store", str(missing), "--backend", kind, "--json"])
    assert result.exit_code == 1, result.output
    error = orjson.loads(result.stderr)["error"]
    assert error["code"] == "STORE_NOT_FOUND"
    assert "does not exist" in error["message"]
    assert not missing.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_replay_of_a_missing_store_is_store_not_found(tmp_path: Path, kind: str) -> None:
    missing = tmp_path / "nope"
    result = runner.invoke(app, ["replay", "s0", "--store", str(missing), "--backend", kind, "--speed", "0"])
    assert result.exit_code == 1
    assert "STORE_NOT_FOUND" in result.stderr
    assert not missing.exists()


def test_sqlite_read_commands_never_create_the_database(tmp_path: Path) -> None:
    _write(tmp_path, "jsonl")  # a JSONL store: no sessions.sqlite3 in it
    before = _tree(tmp_path)
    for command in READ_COMMANDS:
        result = runner.invoke(app, [*command, "--store", str(tmp_path), "--backend", "sqlite", "--json"])
        assert result.exit_code == 1, (command, result.output)
        assert orjson.loads(result.stderr)["error"]["code"] == "STORE_NOT_FOUND", command
    assert _tree(tmp_path) == before
    assert not (tmp_path / "sessions.sqlite3").exists()


def test_an_existing_empty_jsonl_store_lists_nothing_and_stays_empty(tmp_path: Path) -> None:
    result = runner.invoke(app, ["ls", "--store", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout) == {"sessions": [], "nextCursor": None}
    assert runner.invoke(app, ["verify", "--store", str(tmp_path), "--json"]).exit_code == 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_read_commands_leave_an_existing_store_byte_identical(tmp_path: Path, kind: str) -> None:
    _write(tmp_path, kind, open_last=True)
    before = _tree(tmp_path)
    for command in [*READ_COMMANDS, ["show", "s1", "--at", "2"], ["export", "s1"]]:
        result = runner.invoke(app, [*command, "--store", str(tmp_path), "--backend", kind, "--json"])
        assert result.exit_code == 0, (command, result.output)
    replay = runner.invoke(app, ["replay", "s1", "--store", str(tmp_path), "--backend", kind, "--speed", "0"])
    assert replay.exit_code == 0, replay.output
    assert _tree(tmp_path) == before


# --- read commands detect the JSONL encoding -------------------------------------------------------------


@pytest.mark.parametrize(("stored", "flag"), [("zstd", "none"), ("none", "zstd")])
def test_read_commands_detect_the_jsonl_encoding(tmp_path: Path, stored: str, flag: str) -> None:
    _write(tmp_path, "jsonl", stored)
    before = _tree(tmp_path)
    args = ["--store", str(tmp_path), "--compression", flag, "--json"]
    listing = runner.invoke(app, ["ls", *args])
    assert listing.exit_code == 0, listing.output
    assert [row["id"] for row in orjson.loads(listing.stdout)["sessions"]] == ["s0", "s1"]
    assert all(row["error"] is None for row in orjson.loads(listing.stdout)["sessions"])
    verify = runner.invoke(app, ["verify", *args])
    assert verify.exit_code == 0, verify.output
    assert orjson.loads(verify.stdout)["ok"] is True
    exported = runner.invoke(app, ["export", "s1", *args])
    assert exported.exit_code == 0, exported.output
    assert len(orjson.loads(exported.stdout)["events"]) == 8
    shown = runner.invoke(app, ["show", "s1", *args])
    assert shown.exit_code == 0, shown.output
    assert _tree(tmp_path) == before


# --- export --partial --------------------------------------------------------------------------------------


def _write_two_turns(root: Path, kind: str, compression: str = "zstd") -> None:
    """Session "s" with two turns, each flushed on its own (zstd: header frame + one frame per turn)."""
    store = al.SessionStore(now=lambda: 1_700_000_000_000)
    coordinator = PersistenceCoordinator(store, _backend(root, kind, compression))
    try:
        session = store.create("s", meta={"cwd": "/work/project"})
        for turn in (1, 2):
            session.append("turn/start", {"turn": turn})
            session.append("user/message", al.user_message(f"q{turn}", id=f"u{turn}"), {"surfaceOp": "append"})
            session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
            store.flush(session)
    finally:
        coordinator.close()


def _damage(root: Path, kind: str, compression: str) -> None:
    """Damage turn 2 (seqs 3..5) of session "s" with complete, valid-looking records around it."""
    if kind == "sqlite":
        import sqlite3

        with sqlite3.connect(root / "sessions.sqlite3") as con:
            con.execute("UPDATE events SET data = '{\"broken\":' WHERE seq = 4")
        con.close()
    elif compression == "zstd":
        log = _zstd_log(root, "s")
        data = bytearray(log.read_bytes())
        frames = [i for i in range(len(data)) if data.startswith(b"\x28\xb5\x2f\xfd", i)]
        assert len(frames) == 3
        data[frames[2] + 12] ^= 0xFF
        log.write_bytes(bytes(data))
    else:
        (log,) = root.glob("*/s/session.jsonl")
        lines = log.read_bytes().split(b"\n")
        assert orjson.loads(lines[5])["seq"] == 4
        lines[5] = lines[5][:-1]  # seq 4: a complete but unparsable line, with seq 5 complete after it
        log.write_bytes(b"\n".join(lines))


PARTIAL_CASES = [("jsonl", "zstd"), ("jsonl", "none"), ("sqlite", "zstd")]


@pytest.mark.parametrize(("kind", "compression"), PARTIAL_CASES)
def test_export_partial_writes_the_readable_prefix_and_says_where_it_stopped(
    tmp_path: Path, kind: str, compression: str
) -> None:
    _write_two_turns(tmp_path, kind, compression)
    _damage(tmp_path, kind, compression)
    before = _tree(tmp_path)
    args = ["--store", str(tmp_path), "--backend", kind, "--compression", compression]
    refused = runner.invoke(app, ["export", "s", *args, "--json"])
    assert refused.exit_code == 1
    error = orjson.loads(refused.stderr)["error"]
    assert error["code"] == "SESSION_CORRUPT"
    assert "agentlog export --partial" in error["message"]  # the advice names a command that works

    result = runner.invoke(app, ["export", "s", *args, "--partial"])
    assert result.exit_code == 3, result.output  # documented: the export is partial
    document = orjson.loads(result.stdout)
    assert document["header"]["id"] == "s"
    seqs = [event["seq"] for event in document["events"]]
    assert seqs == list(range(len(seqs))) and 3 <= len(seqs) < 6  # turn 1 whole, nothing after the damage
    damage = document["damage"]
    assert damage["code"] == "SESSION_CORRUPT"
    assert damage["location"] and damage["offset"] is not None
    assert damage["afterSeq"] == seqs[-1]
    assert "partial export" in result.stderr and str(damage["location"]) in result.stderr
    as_json = runner.invoke(app, ["export", "s", *args, "--partial", "--json"])
    assert as_json.exit_code == 3
    assert orjson.loads(as_json.stderr)["error"]["code"] == "SESSION_CORRUPT"
    assert orjson.loads(as_json.stderr)["partial"]["events"] == len(seqs)
    assert _tree(tmp_path) == before


@pytest.mark.parametrize(("kind", "compression"), PARTIAL_CASES)
def test_export_partial_of_a_healthy_session_is_the_full_export(
    tmp_path: Path, kind: str, compression: str
) -> None:
    _write_two_turns(tmp_path, kind, compression)
    args = ["export", "s", "--store", str(tmp_path), "--backend", kind, "--compression", compression]
    full = runner.invoke(app, args)
    partial = runner.invoke(app, [*args, "--partial"])
    assert full.exit_code == 0 and partial.exit_code == 0, partial.output
    assert orjson.loads(partial.stdout) == orjson.loads(full.stdout)


def test_verify_table_keeps_full_ids_when_not_a_terminal(tmp_path: Path) -> None:
    _write(tmp_path, ids=(LONG_ID,), cwd=LONG_CWD)
    result = runner.invoke(app, ["verify", "--store", str(tmp_path)], env={"COLUMNS": "40"})
    assert result.exit_code == 0, result.output
    assert LONG_ID in result.stdout


def test_export_partial_with_a_damaged_header_has_nothing_to_salvage(tmp_path: Path) -> None:
    _write_two_turns(tmp_path, "jsonl", "zstd")
    log = _zstd_log(tmp_path, "s")
    log.write_bytes(b"\x00" * 16 + log.read_bytes()[16:])
    before = _tree(tmp_path)
    result = runner.invoke(app, ["export", "s", "--store", str(tmp_path), "--partial", "--json"])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert orjson.loads(result.stderr)["error"]["code"] == "SESSION_CORRUPT"
    assert _tree(tmp_path) == before
