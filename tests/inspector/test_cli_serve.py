"""``agentlog serve`` as a user runs it (a fresh interpreter each): it serves, refuses what it must, and no
other command imports the web stack."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from .stores import write_store

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
TIMEOUT_S = 120
WEB_MODULES = ("starlette", "uvicorn", "agentlog.inspector")


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    env.pop("AGENTLOG_INSPECTOR_TOKEN", None)
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


_MODULES_AFTER = """
import json, sys
sys.argv = ["agentlog", *sys.argv[1:]]
from agentlog.cli import main
try:
    main()
except SystemExit:
    pass
print("MODULES=" + json.dumps(sorted(sys.modules)))
"""


def test_other_commands_do_not_import_the_web_stack(tmp_path: Path) -> None:
    write_store(tmp_path, "jsonl")
    for argv in (["--version"], ["--help"], ["ls", "--store", str(tmp_path)], ["serve", "--help"]):
        run = subprocess.run(
            [sys.executable, "-c", _MODULES_AFTER, *argv], capture_output=True, text=True, timeout=TIMEOUT_S, env=_env()
        )
        line = next(line for line in run.stdout.splitlines() if line.startswith("MODULES="))
        modules = json.loads(line.removeprefix("MODULES="))
        loaded = [m for m in modules if any(m == p or m.startswith(p + ".") for p in WEB_MODULES)]
        assert loaded == [], (argv, loaded)


def test_serve_serves_the_store_until_stopped(tmp_path: Path) -> None:
    write_store(tmp_path, "sqlite")
    command = [sys.executable, "-m", "agentlog.cli", "serve", "--store", str(tmp_path), "--backend", "sqlite"]
    process = subprocess.Popen(
        [*command, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    serving_json = subprocess.Popen(
        [*command, "--port", "0", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # printed once the server listens
        assert line.startswith("agentlog inspector on http://127.0.0.1:"), line
        url = line.split()[3].rstrip("/")
        address = json.loads(serving_json.stdout.readline())  # type: ignore[union-attr]
        assert address["url"] == f"http://127.0.0.1:{address['port']}/" and address["host"] == "127.0.0.1"
        with urllib.request.urlopen(address["url"] + "api/sessions/main", timeout=30) as response:
            assert json.loads(response.read())["id"] == "main"
        with urllib.request.urlopen(url + "/api/sessions", timeout=30) as response:
            rows = json.loads(response.read())["sessions"]
        assert {row["id"] for row in rows} == {"main", "main-fork", "crashed", "hostile"}
        for running in (process, serving_json):
            running.send_signal(signal.SIGTERM)
            assert running.wait(timeout=TIMEOUT_S) == 0
    finally:
        for running in (process, serving_json):
            if running.poll() is None:
                running.kill()
                running.wait()


def _serve(*argv: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    command = (
        [sys.executable, "-m", "agentlog.cli", "serve", *argv] if code is None else [sys.executable, "-c", code, *argv]
    )
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, env=_env())


def test_serve_refuses_a_public_host_without_a_token_and_a_missing_store(tmp_path: Path) -> None:
    write_store(tmp_path, "jsonl")
    run = _serve("--store", str(tmp_path), "--host", "0.0.0.0", "--port", "0")
    assert run.returncode == 1 and "INVALID_OPTION" in run.stderr and "--token" in run.stderr
    run = _serve("--store", str(tmp_path / "absent"), "--port", "0")
    assert run.returncode == 1 and "STORE_NOT_FOUND" in run.stderr
    assert not (tmp_path / "absent").exists()


_WITHOUT_STARLETTE = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("starlette", "uvicorn"):
            raise ImportError(f"No module named {name!r}")
        return None
sys.meta_path.insert(0, Block())
sys.argv = ["agentlog", "serve", *sys.argv[1:]]
from agentlog.cli import main
main()
"""


def test_a_missing_extra_names_the_install_command(tmp_path: Path) -> None:
    write_store(tmp_path, "jsonl")
    run = _serve("--store", str(tmp_path), "--port", "0", code=_WITHOUT_STARLETTE)
    assert run.returncode == 1, run.stderr
    assert "INVALID_OPTION" in run.stderr and "pip install 'agentlog[inspector]'" in run.stderr
