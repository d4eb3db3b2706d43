"""Issue 7, defect 11: the README and docs/*.md say only what holds.

* Every fenced code block is either run here, once, or explicitly marked as not runnable with an HTML
  comment ``<!-- not-tested: reason -->`` on the line right before its fence. Python blocks run in a fresh
  directory; a block whose doc says what its next run does (a durable session resumed) is marked
  ``<!-- run-again: reason -->`` and runs a second time there, over what its first run left. ``sh``
  blocks run under ``bash -euo pipefail`` in a fresh directory with this interpreter's ``agentlog`` first
  on ``PATH``.
* Every repository path the docs cite exists.
* Checkable claims (command options, dependencies, defaults, counts, codes) are compared with the code.
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer

import agentlog
import agentlog.errors as errors
from agentlog.cli.commands import app

pytestmark = pytest.mark.docs

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
PYTHON_LANGS = {"python", "py"}
SHELL_LANGS = {"sh", "bash", "shell", "console"}
MARKER = re.compile(r"^<!--\s*not-tested:\s*(?P<reason>.*?)\s*-->\s*$")
RUN_AGAIN = re.compile(r"^<!--\s*run-again:\s*(?P<reason>.*?)\s*-->\s*$")
NEEDS = re.compile(r"^<!--\s*needs:\s*(?P<command>[\w-]+)\s*-->\s*$")
"""``<!-- needs: COMMAND -->``: the block runs a program that lives outside this environment (Arize Phoenix
in its own one); it is skipped when COMMAND is not on ``PATH``, and fails instead when
``AGENTLOG_REQUIRE_<COMMAND>=1`` (``.ci/run`` installs it and sets that)."""
WALKTHROUGH = re.compile(r"^<!--\s*walkthrough:\s*(?P<server>[\w-]+)\s*-->\s*$")
"""``<!-- walkthrough: password-cluster -->``: the block is one step of its doc's walkthrough against a
server that asks for a password; the steps run in order, as one script, against a fresh such cluster
(``bare_password_cluster``), never one by one. The script gets the cluster as ``PGPORT`` and ``PGHOST``
(its socket directory), the variables the doc tells its reader to set."""
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)[^\n]*$")
BLOCK_TIMEOUT_S = 600
"""Only a guard against a block that hangs, never a measure: on a loaded two-core machine (load 8-14) a
shell block of several ``agentlog`` commands took over a minute."""


@dataclass(frozen=True)
class Block:
    file: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    not_tested: str | None  # the marker's reason, or None when the block must run
    run_again: str | None = None  # why a second run over what the first left shows what the doc says
    needs: str | None = None  # a command outside this environment the block runs (skipped without it)
    walkthrough: str | None = None  # the server a walkthrough step runs against (all steps run together)

    @property
    def name(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}"


def _blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence = opening["fence"]
        start = index
        index += 1
        body: list[str] = []
        while index < len(lines) and not lines[index].strip().startswith(fence):
            body.append(lines[index])
            index += 1
        index += 1  # the closing fence
        previous = lines[start - 1] if start > 0 else ""
        marker = MARKER.match(previous.strip())
        again = RUN_AGAIN.match(previous.strip())
        needs = NEEDS.match(previous.strip())
        walkthrough = WALKTHROUGH.match(previous.strip())
        blocks.append(
            Block(
                file=path,
                line=start + 1,
                lang=opening["lang"].lower(),
                code="\n".join(body) + "\n",
                not_tested=marker["reason"] if marker else None,
                run_again=again["reason"] if again else None,
                needs=needs["command"] if needs else None,
                walkthrough=walkthrough["server"] if walkthrough else None,
            )
        )
    return blocks


ALL_BLOCKS = [block for doc in DOCS for block in _blocks(doc)]
PYTHON_BLOCKS = [b for b in ALL_BLOCKS if b.not_tested is None and b.lang in PYTHON_LANGS]
SHELL_BLOCKS = [b for b in ALL_BLOCKS if b.not_tested is None and b.lang in SHELL_LANGS and b.walkthrough is None]
PASSWORD_WALKTHROUGHS = {
    doc: [b for b in ALL_BLOCKS if b.file == doc and b.walkthrough == "password-cluster"]
    for doc in sorted({b.file for b in ALL_BLOCKS if b.walkthrough == "password-cluster"})
}


def _env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTLOG_", "DEEPSEEK_", "OPENAI_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(work)
    env["COLUMNS"] = "120"
    return env


def _shell_script(block: Block) -> str:
    if block.lang != "console":
        return block.code
    # A console transcript: "$ command" lines run, everything else is output.
    return "".join(line[2:] + "\n" for line in block.code.splitlines() if line.startswith("$ "))


def test_docs_exist_and_hold_code_blocks() -> None:
    assert (ROOT / "README.md") in DOCS and len(DOCS) >= 3
    assert PYTHON_BLOCKS and SHELL_BLOCKS


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=lambda b: b.name)
def test_every_doc_block_runs_here_or_is_marked_not_tested_with_a_reason(block: Block) -> None:
    if block.not_tested is not None:
        assert block.not_tested, f"{block.name}: a not-tested marker needs a reason"
        return
    assert block.lang in PYTHON_LANGS | SHELL_LANGS, (
        f"{block.name}: a ```{block.lang or '(no language)'} block is neither runnable here nor marked "
        "<!-- not-tested: reason -->"
    )
    if block.walkthrough is not None:
        assert block.walkthrough == "password-cluster", f"{block.name}: no walkthrough runs on {block.walkthrough}"
        assert block.lang in SHELL_LANGS - {"console"}, f"{block.name}: a walkthrough step is a shell block"
    if block.run_again is not None:
        assert block.run_again, f"{block.name}: a run-again marker needs a reason"
        assert block.lang in PYTHON_LANGS, f"{block.name}: only a Python block runs again"


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=lambda b: b.name)
def test_docs_python_block_runs(block: Block, tmp_path: Path) -> None:
    """Once; a ``run-again`` block a second time, over what its first run left in its directory."""
    _require(block)
    script = tmp_path / "block.py"
    script.write_text(block.code, encoding="utf-8")
    work = tmp_path / "work"  # the block's directory and HOME: what it leaves there, and nothing else
    work.mkdir()
    for attempt in (1, 2) if block.run_again is not None else (1,):
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=work,
            env=_env(work),
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 0, f"{block.name} failed on run {attempt}:\n{done.stdout}\n{done.stderr}"
        if block.run_again is not None:
            assert any(work.iterdir()), f"{block.name} is marked run-again but left nothing to run again over"


def _require(block: Block) -> None:
    if block.needs is None or shutil.which(block.needs) is not None:
        return
    if os.environ.get(f"AGENTLOG_REQUIRE_{block.needs.upper()}") == "1":
        pytest.fail(f"{block.name} needs `{block.needs}` on PATH (AGENTLOG_REQUIRE_{block.needs.upper()}=1)")
    pytest.skip(f"{block.name} needs `{block.needs}` on PATH")


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=lambda b: b.name)
def test_docs_shell_block_runs(block: Block, tmp_path: Path) -> None:
    _require(block)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", _shell_script(block)],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"{block.name} failed:\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize("doc", list(PASSWORD_WALKTHROUGHS), ids=lambda d: str(d.relative_to(ROOT)))
def test_docs_password_walkthrough_runs_against_a_server_that_asks_for_a_password(
    doc: Path, bare_password_cluster: Any, tmp_path: Path
) -> None:
    """The steps as a reader runs them, one shell: its variables (the generated password) carry over."""
    if os.geteuid() != 0:
        pytest.skip("the walkthrough's server steps run as root (runuser -u postgres)")
    blocks = PASSWORD_WALKTHROUGHS[doc]
    script = "".join(f"# --- {block.name}\n{block.code}" for block in blocks)
    env = {k: v for k, v in _env(tmp_path).items() if not k.startswith("PG")}
    env.update(PGHOST=bare_password_cluster.socket_dir, PGPORT=str(bare_password_cluster.port))
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{doc.name}'s password walkthrough failed:\n{done.stdout}\n{done.stderr}"
    assert "exit status 1" in done.stdout and "[DATABASE_AUTH]" in done.stderr, done.stdout + done.stderr


# --- cited files --------------------------------------------------------------------------------------

CITED_PATH = re.compile(
    r"(?<![\w./-])(?P<path>(?:shared|tests|src|docs|examples|benchmarks|\.ci|agentlog)/[\w.*/-]*[\w*])"
)


def _cited_paths() -> list[tuple[str, str]]:
    cited = []
    for doc in DOCS:
        for match in CITED_PATH.finditer(doc.read_text(encoding="utf-8")):
            cited.append((str(doc.relative_to(ROOT)), match["path"]))
    return cited


def _exists_in_repository(path: str) -> bool:
    bases = [ROOT, ROOT / "src"] if path.startswith("agentlog/") else [ROOT]
    return any(list(base.glob(path)) if "*" in path else (base / path).exists() for base in bases)


def test_docs_cite_only_files_that_are_in_the_repository() -> None:
    cited = _cited_paths()
    assert cited  # the docs do cite files (docs/kernel-api.md, examples/quickstart.py, …)
    missing = [f"{doc}: {path}" for doc, path in cited if not _exists_in_repository(path)]
    assert not missing, "the docs cite files that are not in the repository:\n" + "\n".join(missing)


def test_docs_markdown_links_resolve() -> None:
    broken = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken, broken


# --- claims --------------------------------------------------------------------------------------------


def _readme() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def _commands() -> dict[str, Any]:
    group: Any = typer.main.get_command(app)
    return dict(group.commands)


def _options(command: Any) -> set[str]:
    return {opt for param in command.params for opt in getattr(param, "opts", ())}


def test_docs_command_line_synopsis_names_real_commands_and_options() -> None:
    commands = _commands()
    synopsis = [b for b in ALL_BLOCKS if b.file.name == "README.md" and "agentlog run" in b.code]
    assert len(synopsis) == 1, "the README's command synopsis block"
    seen = set()
    for line in synopsis[0].code.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) < 2 or words[0] != "agentlog":
            continue
        name = words[1]
        if name.startswith("--"):
            assert name in _options(typer.main.get_command(app)), line
            continue
        assert name in commands, f"no command {name!r}: {line}"
        seen.add(name)
        for option in re.findall(r"--[a-z][a-z-]*", line.split("#", 1)[0]):
            assert option in _options(commands[name]), f"agentlog {name} has no {option}"
    assert seen == set(commands), f"commands missing from the synopsis: {set(commands) - seen}"


def test_docs_common_options_are_where_the_readme_says() -> None:
    text = " ".join(_readme().split())
    assert (
        "Every command takes `--store ROOT` (default `$AGENTLOG_STORE` or `./.agentlog`); every command except "
        "`demo` takes `--backend jsonl|sqlite|postgres` (with `--dsn`/`--pg-schema` for postgres) and "
        "`--compression zstd|none`, and every command takes `--json` "
        "(`replay --json` streams one JSON object per event, then a summary line)."
    ) in text
    for name, command in _commands().items():
        options = _options(command)
        assert "--store" in options, name
        if name != "demo":
            assert {"--backend", "--compression"} <= options, name
        assert "--json" in options, name


def test_docs_runtime_dependencies_match_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {re.split(r"[<>=!~\[ ]", dep, maxsplit=1)[0] for dep in project["dependencies"]}
    sentence = re.search(r"runtime dependencies: ([^)]*)\)", _readme())
    assert sentence is not None
    assert set(re.findall(r"`([\w-]+)`", sentence[1])) == declared


def test_docs_version_claims() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert agentlog.__version__ == project["version"]
    assert "agentlog --version" in _readme()


def test_docs_persistence_figures_match_the_code() -> None:
    from agentlog.persistence.coordinator import PersistenceCoordinator
    from agentlog.persistence.jsonl.backend import JsonlBackend
    from agentlog.persistence.sqlite.backend import SCHEMA_VERSION, SqliteBackend

    text = _readme()
    assert f"SQLite (schema {SCHEMA_VERSION}" in text
    delay = inspect.signature(PersistenceCoordinator).parameters["batch_delay_ms"].default
    assert f"a fixed {delay} ms window" in text
    persistence = (ROOT / "docs" / "persistence-api.md").read_text(encoding="utf-8")
    assert f'`"{JsonlBackend.name}"`, True; SQLite: `"{SqliteBackend.name}"`, False' in persistence
    assert JsonlBackend.supports_raw_artifacts is True and SqliteBackend.supports_raw_artifacts is False
    limits = inspect.signature(JsonlBackend).parameters
    assert limits["max_frame_bytes"].default == 256 * 2**20 and "`max_frame_bytes = 256 MiB`" in persistence
    assert limits["max_line_bytes"].default == 256 * 2**20 and "`max_line_bytes = 256 MiB`" in persistence
    assert "AGENTLOG_PURE_PYTHON" in (ROOT / "src" / "agentlog" / "kernel" / "_gc.py").read_text() + "".join(
        p.read_text() for p in (ROOT / "src" / "agentlog").rglob("*.py")
    )


def test_docs_kernel_api_counts_and_error_codes_match_the_code() -> None:
    text = (ROOT / "docs" / "kernel-api.md").read_text(encoding="utf-8")
    assert f"(frozenset of the {len(agentlog.KNOWN_SESSION_EVENT_TYPES)} names)" in text
    assert f"`CORE_EVENT_TYPES` ({len(agentlog.CORE_EVENT_TYPES)} names)" in text
    assert f"`SURFACE_EVENT_TYPES` (the {len(agentlog.SURFACE_EVENT_TYPES)} names)" in text
    rows = re.findall(r"^\| `(\w+)\([^`]*\)` \| (`?[\w —]+`?|one of [^|]+) \|", text, re.MULTILINE)
    assert len(rows) >= 15
    for name, code in rows:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.AgentlogError)
        code = code.strip("` ")
        if code not in ("—",) and not code.startswith("one of"):
            assert cls.code == code, (name, cls.code, code)


def test_docs_kernel_api_names_are_importable_where_it_says() -> None:
    import agentlog.kernel.events as events

    text = (ROOT / "docs" / "kernel-api.md").read_text(encoding="utf-8")
    assert "every other public name below is importable from `agentlog` directly" in " ".join(text.split())
    typed_dicts = set(re.findall(r"`(\w+Data|Message|ContentBlock)`", text))
    assert typed_dicts and all(hasattr(events, name) for name in typed_dicts)
    codes = {code for code in re.findall(r"`([A-Z][A-Z_]+)`", text) if not hasattr(agentlog, code)}
    source = "".join(path.read_text(encoding="utf-8") for path in (ROOT / "src" / "agentlog").rglob("*.py"))
    unknown = {code for code in codes if f'"{code}"' not in source}
    assert not unknown, f"error codes the kernel never raises: {unknown}"
    public = set(re.findall(r"`([A-Z][A-Za-z]+|[a-z_]+(?=\())", text))
    free_functions = {name for name in re.findall(r"(?:^|[\s,(])`([a-z_]+)\(", text, re.MULTILINE) if "_" in name}
    # "String(err)" quotes the original's JavaScript; None/True/False are Python's.
    classes = {name for name in public if name[:1].isupper() and not name.isupper()}
    classes -= typed_dicts | {"String", "None", "True", "False"}
    errors_only = set(re.findall(r"^\| `(\w+)\(.*`agentlog\.errors` only \|$", text, re.MULTILINE))
    assert all(hasattr(errors, name) for name in errors_only)
    classes -= errors_only
    import agentlog.kernel.chunkrows as chunkrows

    codec_only = {"pack_chunk_runs", "decode_storage_record", "MIN_RUN"}  # "`agentlog.kernel.chunkrows` only"
    assert "importable from `agentlog.kernel.chunkrows` only" in text
    assert all(hasattr(chunkrows, name) and not hasattr(agentlog, name) for name in codec_only)
    missing = sorted(
        name for name in (classes | free_functions) - codec_only if not hasattr(agentlog, name) and not _is_method(name)
    )
    assert not missing, missing


def _is_method(name: str) -> bool:
    owners = (agentlog.Session, agentlog.SessionStore, agentlog.EventTypes, agentlog.SurfaceManager)
    return any(hasattr(owner, name) for owner in owners)


def test_docs_quickstart_example_runs(tmp_path: Path) -> None:
    assert "python examples/quickstart.py" in _readme()
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_docs_benchmark_commands_exist() -> None:
    text = _readme()
    expected = {
        "kernel": ["--turns"],
        "persist": ["--backend", "jsonl-zstd", "jsonl-none", "sqlite", "--style", "bulk", "step"],
        "list": ["--backend", "--sessions"],
        "compaction": ["--turns", "--repeat"],
        "projections": ["--backends", "jsonl-zstd", "sqlite", "--sessions", "--turns", "--repeat"],
        "search": ["--sessions", "--backend"],
        "cli-start": ["--sessions", "--backend", "--repeat"],
    }
    for name, words in expected.items():
        assert f"python benchmarks/run.py {name}" in text
        done = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "run.py"), name, "--help"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        for word in words:
            assert word in done.stdout, (name, word)


def _documented_calls(text: str) -> list[tuple[str, str, str, str]]:
    """``(section title, qualifier, name, arguments)`` for every backticked ``name(arguments)``."""
    calls = []
    for section in re.split(r"^## ", text, flags=re.MULTILINE):
        title = section.split("\n", 1)[0]
        for qualifier, name, args in re.findall(r"`(?:([A-Za-z_][\w.]*)\.)?([A-Za-z_]\w*)\(([^`]*?)\)`", section):
            calls.append((title, qualifier, name, args))
    return calls


def _resolve(qualifier: str, name: str, owner: Any) -> Any:
    if qualifier:
        base: Any = agentlog
        for part in qualifier.split("."):
            if part == "agentlog":
                continue
            base = getattr(base, part, None)
            if base is None:
                return None
        return getattr(base, name, None)
    found = getattr(agentlog, name, None)
    if found is None and owner is not None:
        found = getattr(owner, name, None)
    return found


def _keyword_names(args: str) -> list[str]:
    """The documented names a caller may pass by keyword: those with a default or after ``*``."""
    names, keyword_only = [], False
    for raw in args.split(","):
        arg = raw.strip()
        if arg == "*":
            keyword_only = True
        elif arg and (keyword_only or "=" in arg) and re.fullmatch(r"\w+(=.*)?", arg):
            names.append(arg.split("=", 1)[0])
    return names


@pytest.mark.parametrize("doc", ["kernel-api.md", "persistence-api.md"])
def test_docs_documented_keyword_arguments_exist(doc: str) -> None:
    from agentlog.persistence.coordinator import PersistenceCoordinator

    owners = {
        "Store": agentlog.SessionStore,
        "Session": agentlog.Session,
        "Events": agentlog.EventTypes,
        "Surface": agentlog.SurfaceManager,
        "Coordinator": PersistenceCoordinator,
    }
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    checked, wrong = 0, []
    for title, qualifier, name, args in _documented_calls(text):
        owner = next((cls for prefix, cls in owners.items() if title.startswith(prefix)), None)
        target = _resolve(qualifier, name, owner)
        keywords = _keyword_names(args)
        if target is None or not keywords:
            continue
        try:
            parameters = inspect.signature(target).parameters
        except (TypeError, ValueError):
            continue
        checked += 1
        wrong += [f"{name}({args}): no parameter {kw!r}" for kw in keywords if kw not in parameters]
    assert checked >= (10 if doc == "kernel-api.md" else 1)
    assert not wrong, wrong


def test_docs_lossless_json_claim_every_listed_value_is_refused_naming_its_path() -> None:
    import math

    class Custom:
        pass

    class SubDict(dict[str, Any]):
        pass

    cycle: list[Any] = []
    cycle.append(cycle)
    assert "`session.append` raises `InvalidEventError` (`INVALID_EVENT`" in " ".join(_readme().split())
    refused = [math.nan, math.inf, -math.inf, -0.0, 2**53, -(2**53), "\ud800", {1: 2}, (1,), {1}, b"x"]
    refused += [SubDict(), [], Custom(), cycle]
    refused[12] = type("SubList", (list,), {})()
    session = agentlog.SessionStore().create(meta={"cwd": "/work"})
    for value in refused:
        with pytest.raises(agentlog.InvalidEventError, match=r"\$\.items\[3\]") as info:
            session.append("turn/start", {"turn": 1, "items": [0, 0, 0, value]})
        assert info.value.code == "INVALID_EVENT"
        with pytest.raises(agentlog.NonJsonValueError) as gate:
            agentlog.snapshot_json({"items": [0, 0, 0, value]})
        assert gate.value.path.startswith("$.items[3]")
    assert len(session.events) == 0


def test_docs_immutability_claim() -> None:
    session = agentlog.SessionStore().create(meta={"cwd": "/work"})
    event = session.append("turn/start", {"turn": 1})
    assert event == {"type": "turn/start", "seq": 0, "time": event["time"], "data": {"turn": 1}}
    assert isinstance(event, dict) and isinstance(event["data"], dict)
    with pytest.raises(agentlog.FrozenError):
        event["data"]["turn"] = 2
    assert issubclass(agentlog.FrozenError, TypeError)
    assert event.json_bytes is event.json_bytes and b'"turn/start"' in event.json_bytes


PROTOCOL_METHODS = (
    "load_stored",
    "read_revision",
    "append_batch",
    "commit_repair",
    "list_sessions",
    "read_raw",
    "locate",
    "lock_writer",
    "close",
)


def test_docs_backend_protocol_table_matches_both_backends(tmp_path: Path) -> None:
    from agentlog.errors import PersistenceError
    from agentlog.kernel.jsoncodec import DEFAULT_MAX_DEPTH, loads
    from agentlog.persistence.jsonl.backend import JsonlBackend, encode_segment
    from agentlog.persistence.sqlite.backend import SqliteBackend

    text = (ROOT / "docs" / "persistence-api.md").read_text(encoding="utf-8")
    for method in PROTOCOL_METHODS:
        assert f"| `{method}(" in text or f"| `{method}" in text, method
        assert callable(getattr(JsonlBackend, method)) and callable(getattr(SqliteBackend, method))
    assert f"max_depth={DEFAULT_MAX_DEPTH:_}" in text
    assert inspect.signature(loads).parameters["max_depth"].default == DEFAULT_MAX_DEPTH
    meta = {"version": 0, "id": "a/b", "createdAt": 1, "cwd": "/work"}
    jsonl = JsonlBackend(tmp_path / "jsonl")
    lock = jsonl.lock_writer(meta)
    assert "`<root>/.locks/<encodeSegment(id)>.lock`" in text
    assert (tmp_path / "jsonl" / ".locks" / f"{encode_segment('a/b')}.lock").exists()
    lock.release()
    jsonl.close()
    sqlite = SqliteBackend(tmp_path / "db" / "sessions.sqlite3")
    sqlite_lock = sqlite.lock_writer(meta)
    assert "`<db path>.locks/<encodeSegment(id)>.lock`" in text
    assert (tmp_path / "db" / "sessions.sqlite3.locks" / f"{encode_segment('a/b')}.lock").exists()
    sqlite_lock.release()
    with pytest.raises(PersistenceError, match="this session persistence backend does not expose raw artifacts"):
        sqlite.read_raw("a/b")
    sqlite.close()


def test_docs_persistence_read_only_section_matches_the_code() -> None:
    from agentlog.persistence import jsonl, sqlite
    from agentlog.persistence.backend import PartialRead
    from agentlog.persistence.coordinator import PersistenceCoordinator
    from agentlog.persistence.memory import MemoryBackend

    text = " ".join((ROOT / "docs" / "persistence-api.md").read_text(encoding="utf-8").split())
    jsonl_params = inspect.signature(jsonl.JsonlBackend).parameters
    assert jsonl_params["max_header_bytes"].default == 2**20 and "`max_header_bytes = 1 MiB`" in text
    assert jsonl_params["max_log_bytes"].default == 2 * 2**30 and "`max_log_bytes = 2 GiB`" in text
    assert "read_only" in jsonl_params and "read_only" in inspect.signature(sqlite.SqliteBackend).parameters
    assert "auto" in str(jsonl_params["compression"].annotation)
    assert callable(jsonl.detect_compression)
    for backend in (jsonl.JsonlBackend, sqlite.SqliteBackend, MemoryBackend, PersistenceCoordinator):
        assert callable(getattr(backend, "read_prefix", None)), backend
    fields = "PartialRead(meta, events, revision, damage, torn_offset)"
    assert fields in text
    assert list(PartialRead.__dataclass_fields__) == ["meta", "events", "revision", "damage", "torn_offset"]
    source = "".join(path.read_text(encoding="utf-8") for path in (ROOT / "src" / "agentlog").rglob("*.py"))
    for code in re.findall(r"`([A-Z][A-Z_]{3,})`", text):
        assert f'"{code}"' in source, f"persistence-api.md names a code nothing raises: {code}"


def test_docs_benchmark_workload_size_claim() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_workload", ROOT / "benchmarks" / "workload.py")
    assert spec is not None and spec.loader is not None
    workload = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(workload)
    per_turn = (len(workload.build_workload(3)) - 1) / 3
    assert len(workload.build_workload(3)) == 3 * per_turn + 1 == len(workload.build_workload(1)) + 2 * per_turn
    assert "W(2000) (102,001 events)" in _readme()
    assert int(2000 * per_turn + 1) == 102_001


def test_docs_nesting_depth_claim_names_the_limit_the_gate_enforces() -> None:
    from agentlog.kernel.jsonvalue import MAX_JSON_DEPTH

    text = " ".join(_readme().split())
    assert "limited by memory only" not in text, "the gate has a depth limit; the README must name it"
    assert f"{MAX_JSON_DEPTH:,}" in text
    deep: Any = 0
    for _ in range(MAX_JSON_DEPTH):
        deep = [deep]
    agentlog.snapshot_json(deep)
    with pytest.raises(agentlog.NonJsonValueError):
        agentlog.snapshot_json([deep])


def test_docs_every_option_the_command_line_section_names_exists() -> None:
    section = _readme().split("## Command line", 1)[1].split("\n## ", 1)[0]
    known = set().union(*(_options(command) for command in _commands().values()))
    known |= _options(typer.main.get_command(app))
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*[a-z]", section))
    assert named - known == set(), f"options the README names that no command has: {named - known}"
    for option in ("--max-steps", "--api-key", "--timeout", "--allow-command", "--yes", "--max-retries"):
        if option in named:
            assert option in _options(_commands()["run"]), option
