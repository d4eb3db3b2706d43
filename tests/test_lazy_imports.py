"""What a command imports: the read commands never load the agent stack, and the lazy exports stay whole.

Every ``agentlog`` command starts by importing ``agentlog`` and the command table; when those imported
``openai`` and the agent loop, ``agentlog --version`` cost over a second of CPU. Each read command below
runs in a fresh interpreter (a real store, the real CLI entry point), which then reports
``sorted(sys.modules)``: none of the forbidden modules may be there. The package roots resolve their
names on first access (:mod:`agentlog._lazy`), so the second half checks that every public name is still
importable, listed by ``dir()``, and typed (the ``TYPE_CHECKING`` imports agree with the lazy table).
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import agentlog as al
from agentlog.persistence.coordinator import PersistenceCoordinator

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

FORBIDDEN_PREFIXES = (
    "openai",  # the LLM provider's client library
    "httpx",  # its HTTP client (and ``httpx2``, the fork some openai releases vendor)
    "agentlog.agent",  # the agent loop, its tools and their policies
    "agentlog.llm.openai_compat",  # the provider
    "agentlog.integrations",  # the framework adapters
    "agents",  # openai-agents
    "pydantic_ai",
    "opentelemetry",  # the otel extra (agentlog.telemetry.otel imports it when used)
)
"""Module name prefixes no read command (and no bare ``import agentlog``) may load."""

TIMEOUT_S = 300  # a fresh interpreter on a loaded two-core machine; the test never measures time


def _forbidden(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith((p + ".", p + "2")) for p in FORBIDDEN_PREFIXES)]


def _fresh_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=TIMEOUT_S, env=env, check=False
    )


# Runs the CLI's entry point as the console script does, then writes sys.modules to argv[1].
_RUN_CLI = """
import json, sys
report, argv = sys.argv[1], sys.argv[2:]
sys.argv = ["agentlog", *argv]
from agentlog.cli import main
code = 0
try:
    main()
except SystemExit as exit:
    code = exit.code or 0
with open(report, "w") as out:
    json.dump({"exit": code, "modules": sorted(sys.modules)}, out)
"""


SURFACE_APPEND = {"surfaceOp": "append"}


def _store(root: Path) -> None:
    """One closed session with a tool call and a title, as ``agentlog run`` would leave it."""
    sessions = al.SessionStore(now=lambda: 1_700_000_000_000)
    coordinator = PersistenceCoordinator(sessions, al.JsonlBackend(str(root), compression="zstd"))
    try:
        session = sessions.create("s1", meta={"cwd": "/work/project"})
        session.append("turn/start", {"turn": 1})
        session.append("user/message", al.user_message("find the shared config", id="u1"), SURFACE_APPEND)
        session.append("step/start", {"turn": 1, "step": 1})
        session.append(
            "assistant/message",
            {
                "turn": 1,
                "step": 1,
                "message": al.assistant_message(
                    [al.text_block("reading it"), al.tool_call_block("c1", "read_file", "{}")],
                    provider="deepseek",
                    model="deepseek-chat",
                    id="a1",
                ),
            },
            SURFACE_APPEND,
        )
        session.append("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "read_file", "arguments": "{}"})
        session.append(
            "tool/result",
            {"turn": 1, "step": 1, "message": al.tool_result_message("c1", "shared = true", id="r1")},
            SURFACE_APPEND,
        )
        session.append("step/end", {"turn": 1, "step": 1})
        session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        sessions.flush(session)
        sessions.dispose(session)
    finally:
        coordinator.close()


READ_COMMANDS: dict[str, list[str]] = {
    "version": ["--version"],
    "ls": ["ls", "--json"],
    "ls-table": ["ls"],
    "show": ["show", "s1"],
    "show-json": ["show", "s1", "--json"],
    "stats": ["stats", "s1"],
    "search": ["search", "shared"],
    "search-json": ["search", "shared", "--json"],
    "verify": ["verify", "--json"],
    "tail": ["tail", "s1", "--json"],
}
"""Each read command's path, as a user types it (``tail`` without ``--follow``)."""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("store")
    _store(root)
    return root


@pytest.mark.parametrize("name", list(READ_COMMANDS))
def test_read_command_runs_without_importing_the_agent_stack(store: Path, tmp_path: Path, name: str) -> None:
    argv = READ_COMMANDS[name]
    if name != "version":
        argv = [*argv, "--store", str(store)]
    report = tmp_path / "report.json"
    done = _fresh_python(_RUN_CLI, str(report), *argv)
    assert report.exists(), done.stderr
    result = json.loads(report.read_text())
    assert result["exit"] == 0, (done.stdout, done.stderr)  # the command's own path ran, not an error path
    assert done.stdout.strip(), done.stderr
    assert _forbidden(result["modules"]) == []


def test_import_agentlog_loads_neither_openai_nor_httpx_nor_the_agent_loop() -> None:
    done = _fresh_python("import json, sys, agentlog; print(json.dumps(sorted(sys.modules)))")
    assert done.returncode == 0, done.stderr
    modules = json.loads(done.stdout)
    assert _forbidden(modules) == []
    assert "agentlog.kernel.session" not in modules  # even the kernel loads on first use
    assert "asyncio" not in modules
    assert not [m for m in modules if m.startswith("agentlog.compaction")]


def test_a_synchronous_durable_store_loads_no_asyncio() -> None:
    """A script that only appends and flushes (the kernel, a file backend, the coordinator) never needs an
    event loop, so it does not pay for importing asyncio: the async entry points import it themselves."""
    code = (
        "import json, sys, tempfile, agentlog as al\n"
        "store = al.SessionStore()\n"
        "coordinator = al.PersistenceCoordinator(store, al.JsonlBackend(tempfile.mkdtemp()))\n"
        "session = store.create('s1')\n"
        "session.append('turn/start', {'turn': 1})\n"
        "store.flush(session)\n"
        "coordinator.close()\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = _fresh_python(code)
    assert done.returncode == 0, done.stderr
    modules = json.loads(done.stdout)
    assert "asyncio" not in modules
    assert not [m for m in modules if m.startswith(("agentlog.compaction", "agentlog.agent"))]


def test_a_lazily_exported_name_loads_its_module_on_first_access() -> None:
    done = _fresh_python(
        "import json, sys, agentlog\n"
        "before = 'agentlog.kernel.session' in sys.modules\n"
        "session = agentlog.Session.create('s')\n"
        "from agentlog import CheckpointPolicy\n"
        "print(json.dumps([before, 'agentlog.kernel.session' in sys.modules, 'agentlog.agent' in sys.modules]))"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [False, True, True]


# --- the lazy exports stay whole ---------------------------------------------------------------------


def _type_checking_imports(path: Path) -> dict[str, str]:
    """``name -> module`` of the ``if TYPE_CHECKING:`` imports of a package ``__init__``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom)
                for alias in statement.names:
                    found[alias.asname or alias.name] = "." * statement.level + (statement.module or "")
    return found


@pytest.mark.parametrize(
    ("package", "init"),
    [
        ("agentlog", SRC / "agentlog" / "__init__.py"),
        ("agentlog.compaction", SRC / "agentlog" / "compaction" / "__init__.py"),
        ("agentlog.llm", SRC / "agentlog" / "llm" / "__init__.py"),
        ("agentlog.testing", SRC / "agentlog" / "testing" / "__init__.py"),
        ("agentlog.telemetry", SRC / "agentlog" / "telemetry" / "__init__.py"),
    ],
)
def test_every_public_name_is_importable_listed_and_typed(package: str, init: Path) -> None:
    module = importlib.import_module(package)
    exported = module.__all__
    assert len(set(exported)) == len(exported)
    for name in exported:
        value = getattr(module, name)
        assert getattr(module, name) is value
        namespace: dict[str, Any] = {}
        exec(f"from {package} import {name} as imported", namespace)
        assert namespace["imported"] is value
    assert set(exported) <= set(dir(module))
    typed = _type_checking_imports(init)
    table: dict[str, tuple[str, ...]] = vars(module)["_EXPORTS"]
    lazy = {name: source for source, names in table.items() for name in names}
    assert typed == lazy  # mypy sees each lazily exported name where the table loads it from
    eager = {name for name in exported if name not in lazy}
    assert all(name in vars(module) for name in eager)


def test_the_subpackages_stay_reachable_as_attributes_of_the_root() -> None:
    done = _fresh_python(
        "import agentlog\n"
        "print(agentlog.agent.Agent.__name__, agentlog.kernel.session.Session.__name__, agentlog.errors.__name__)\n"
        "print(sorted({'agent', 'kernel', 'persistence', 'compaction', 'llm'} - set(dir(agentlog))))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["Agent Session agentlog.errors", "[]"]


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        al.NoSuchThing  # noqa: B018
    with pytest.raises(ImportError):
        exec("from agentlog import NoSuchThing", {})


def test_the_command_table_keeps_its_names_importable_and_lists_every_command_in_order() -> None:
    import typer

    import agentlog.cli.commands as commands

    for name in commands.__all__:
        assert getattr(commands, name) is not None
    assert commands.DEFAULT_MAX_STEPS == 50
    assert callable(commands.ls_command)
    group: Any = typer.main.get_command(commands.app)
    listed = list(group.list_commands(None))
    assert listed == [name for name, _module, _function in commands._TABLE]
    assert all(group.get_command(None, name).name == name for name in listed)
    assert group.get_command(None, "no-such-command") is None


def test_the_root_exports_the_seams_and_not_the_codec_or_prompt_internals() -> None:
    for name in ("Agent", "Provider", "Backend"):
        assert name in al.__all__ and name in dir(al)
    internals = (
        "MIN_RUN",
        "decode_storage_record",
        "pack_chunk_runs",
        "COMPACTION_INSTRUCTION",
        "PRUNE_MARKER",
        "CHECKPOINT_PREAMBLE",
    )
    for name in internals:
        assert name not in al.__all__
        assert not hasattr(al, name), name


@pytest.mark.parametrize("name", ["ls", "ls-table", "show"])
def test_a_read_command_over_a_jsonl_store_loads_no_sqlite_session_backend(
    store: Path, tmp_path: Path, name: str
) -> None:
    """The projection cache beside a JSONL store is SQLite, but its storage-error mapping lives in
    ``persistence.storage_errors``: reading a JSONL store never imports the SQLite backend's modules."""
    report = tmp_path / "report.json"
    done = _fresh_python(_RUN_CLI, str(report), *READ_COMMANDS[name], "--store", str(store))
    result = json.loads(report.read_text())
    assert result["exit"] == 0, (done.stdout, done.stderr)
    assert [m for m in result["modules"] if m.startswith("agentlog.persistence.sqlite")] == []
