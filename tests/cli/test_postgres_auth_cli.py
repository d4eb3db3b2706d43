"""Logging in to a PostgreSQL server that asks for a password, as a fresh Debian cluster does.

Every command runs as its own process (``python -m agentlog.cli``) against ``password_cluster``
(``scram-sha-256`` over TCP), with a home directory of its own (no ``~/.pgpass`` unless the test writes
one) and no ``PG*`` variable but the ones the test sets. A refused login is ``DATABASE_AUTH`` at once:
never a prompt (libpq reads no terminal; nor does agentlog), never a retry.
"""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from _postgres import PasswordCluster

ROOT = Path(__file__).resolve().parents[2]
GUARD_S = 120
"""Only a guard against a command that hangs (a prompt would), never a measure."""


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTLOG_", "PG"))}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / "cache"), COLUMNS="400", **extra)
    return env


def _agentlog(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentlog.cli", *args],
        env=_env(home, **env), cwd=home, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=GUARD_S,
    )  # fmt: skip


def _refusal(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    error: dict[str, Any] = orjson.loads(done.stderr.splitlines()[-1])["error"]  # after any libpq warning
    return error


@pytest.fixture(scope="module")
def stored(password_cluster: PasswordCluster, tmp_path_factory: pytest.TempPathFactory) -> PasswordCluster:
    """The cluster with the demo's sessions copied in, the password given in the DSN."""
    home = tmp_path_factory.mktemp("writer")
    demo = _agentlog(home, "demo", "--store", str(home / "demo"))
    assert demo.returncode == 0, demo.stderr
    dsn = password_cluster.dsn(password=password_cluster.password)
    copied = _agentlog(home, "copy", "--from-store", str(home / "demo"), "--to-backend", "postgres", "--to-dsn", dsn)
    assert copied.returncode == 0, copied.stdout + copied.stderr
    return password_cluster


@pytest.fixture(scope="module")
def demo_session(stored: PasswordCluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The id of the demo's first session (the one its fork and subagent come from)."""
    home = tmp_path_factory.mktemp("reader")
    ids = _listed(
        _agentlog(home, "ls", "--backend", "postgres", "--json", "--dsn", stored.dsn(password=stored.password))
    )
    return next(i for i in ids if i.startswith("demo-") and not i.endswith("-fork"))


def _listed(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert done.returncode == 0, done.stderr
    return [row["id"] for row in orjson.loads(done.stdout)["sessions"]]


def test_the_password_in_the_dsn_logs_in(stored: PasswordCluster, tmp_path: Path) -> None:
    listed = _agentlog(tmp_path, "ls", "--backend", "postgres", "--dsn", stored.dsn(password=stored.password), "--json")
    assert len(_listed(listed)) == 3


def test_pgpassword_logs_in_when_the_dsn_has_no_password(stored: PasswordCluster, tmp_path: Path) -> None:
    listed = _agentlog(
        tmp_path, "ls", "--backend", "postgres", "--json", AGENTLOG_DSN=stored.dsn(), PGPASSWORD=stored.password
    )
    assert len(_listed(listed)) == 3


def test_a_pgpass_file_of_mode_0600_logs_in_and_a_readable_one_is_ignored(
    stored: PasswordCluster, tmp_path: Path
) -> None:
    pgpass = tmp_path / ".pgpass"
    pgpass.write_text(f"127.0.0.1:{stored.port}:agentlog:agentlog:{stored.password}\n")
    pgpass.chmod(0o644)  # libpq ignores a password file others can read: as if there were none
    ignored = _refusal(_agentlog(tmp_path, "ls", "--backend", "postgres", "--json", "--dsn", stored.dsn()))
    assert ignored["code"] == "DATABASE_AUTH" and "no password was given" in ignored["message"]
    pgpass.chmod(0o600)
    listed = _agentlog(tmp_path, "ls", "--backend", "postgres", "--json", "--dsn", stored.dsn())
    assert len(_listed(listed)) == 3


def test_a_wrong_password_is_database_auth_saying_what_to_do(stored: PasswordCluster, tmp_path: Path) -> None:
    error = _refusal(
        _agentlog(tmp_path, "ls", "--backend", "postgres", "--json", "--dsn", stored.dsn(password="wrong"))
    )
    assert error["code"] == "DATABASE_AUTH"
    message = error["message"]
    assert 'password authentication failed for user "agentlog"' in message
    assert "PGPASSWORD" in message and "~/.pgpass" in message and 'docs/postgres.md, "Setting up a server"' in message
    assert "wrong" not in message  # the password is never shown


def test_a_wrong_password_in_the_pgpass_file_names_the_file(stored: PasswordCluster, tmp_path: Path) -> None:
    pgpass = tmp_path / ".pgpass"
    pgpass.write_text(f"*:*:*:agentlog:stale-{stored.password}\n")
    pgpass.chmod(0o600)
    error = _refusal(_agentlog(tmp_path, "ls", "--backend", "postgres", "--json", "--dsn", stored.dsn()))
    assert error["code"] == "DATABASE_AUTH" and f'the password from "{pgpass}"' in error["message"]


def test_no_password_anywhere_is_database_auth_at_once_never_a_prompt(
    stored: PasswordCluster, demo_session: str, tmp_path: Path
) -> None:
    for command in (
        ["ls"],
        ["show", demo_session],
        ["search", "x"],
        ["tail", demo_session],
        ["tail", demo_session, "--follow"],
    ):
        error = _refusal(_agentlog(tmp_path, *command, "--backend", "postgres", "--json", "--dsn", stored.dsn()))
        assert error["code"] == "DATABASE_AUTH", (command, error)
        assert "no password was given" in error["message"] and "never prompts" in error["message"]


def test_a_refused_login_with_a_terminal_on_stdin_ends_without_touching_it(
    stored: PasswordCluster, tmp_path: Path
) -> None:
    """The process gets a terminal as its controlling tty and stdin: a prompt would write to it and wait."""
    master, slave = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "agentlog.cli", "ls", "--backend", "postgres", "--json", "--dsn", stored.dsn()],
            env=_env(tmp_path), cwd=tmp_path, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, process_group=None,
            preexec_fn=lambda: __import__("fcntl").ioctl(0, __import__("termios").TIOCSCTTY, 0),
        )  # fmt: skip
        _, stderr = process.communicate(timeout=GUARD_S)
        os.close(slave)
        slave = -1
        assert process.returncode == 1, stderr
        assert orjson.loads(stderr)["error"]["code"] == "DATABASE_AUTH"
        written = b""
        while select.select([master], [], [], 0)[0]:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the terminal's other side is closed and nothing is left to read
                break
            if not chunk:
                break
            written += chunk
        assert written == b"", f"the command wrote to its terminal: {written!r}"
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)


def test_tail_follow_stops_on_a_password_changed_under_it(
    stored: PasswordCluster, demo_session: str, tmp_path: Path
) -> None:
    """A follow reconnects through a restart (DATABASE_UNAVAILABLE), but a refused login ends it."""
    stored.psql(
        "-v", f"password={stored.password}",
        stdin="CREATE ROLE follower LOGIN PASSWORD :'password';\nGRANT agentlog TO follower;\n",
    )  # fmt: skip
    try:
        dsn = stored.dsn(user="follower", password=stored.password)
        args = ["tail", demo_session, "--follow", "--json", "--backend", "postgres", "--dsn", dsn]
        process = subprocess.Popen(
            [sys.executable, "-m", "agentlog.cli", *args], env=_env(tmp_path), cwd=tmp_path,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            assert process.stdout is not None
            first = orjson.loads(process.stdout.readline())  # following: it has printed the stored events
            assert first["seq"] == 0
            stored.psql(
                "-c", "ALTER ROLE follower PASSWORD 'changed'",
                "-c", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'follower'",
            )  # fmt: skip
            _, stderr = process.communicate(timeout=GUARD_S)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert process.returncode == 1, stderr
        lines = [orjson.loads(line) for line in stderr.decode().splitlines()]
        assert lines[-1]["error"]["code"] == "DATABASE_AUTH", lines
        assert all(line.get("warning", {}).get("code") != "DATABASE_AUTH" for line in lines)  # never retried
    finally:
        stored.psql("-c", "DROP OWNED BY follower", "-c", "DROP ROLE follower")


def test_the_refusal_docs_postgres_shows_is_the_one_agentlog_prints(stored: PasswordCluster, tmp_path: Path) -> None:
    doc = (ROOT / "docs" / "postgres.md").read_text(encoding="utf-8")
    shown = re.search(r"<!-- not-tested: the output of the command above -->\n```text\n(?P<out>.*?)\n```", doc, re.S)
    assert shown is not None, "docs/postgres.md shows no refused login"
    done = _agentlog(tmp_path, "ls", "--backend", "postgres", "--dsn", stored.dsn(password="wrong-password"))
    assert done.returncode == 1
    printed = " ".join(done.stderr.split()).replace(f":{stored.port}/", ":5432/")
    assert printed == " ".join(shown["out"].split())
