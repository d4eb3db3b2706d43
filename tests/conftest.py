"""The suite's markers and Hypothesis profiles: what the fast inner loop and CI's two passes select by.

The markers are registered in ``pyproject.toml`` (with ``--strict-markers``, a misspelt one is an error) and
applied here from what a test *is*, so a test keeps its markers when it moves to another module:

* ``postgres``: under ``tests/postgres/``, using a PostgreSQL fixture, or parametrised with the
  ``postgres`` backend kind.
* ``subprocess``: the test, a fixture it uses, or a function of the suite they name starts a process (read
  from their source, :func:`_spawns`). A test whose process the library starts (the agent's shell tool)
  carries the marker itself. A run lists at its end any test that started a process without it.
* ``crash``: a ``subprocess`` test under ``tests/crash/``, in a ``*_crash.py`` module, or named after a
  crash, a SIGKILL or a ``kill -9`` (an in-process crash *repair* test is none); any other test that kills
  a process of its own mid-work carries the marker itself.
* ``slow``: every ``crash``, ``postgres`` and ``subprocess`` test (a process start or a server round trip
  costs a fifth of a second or more here), and the tests named in ``tests/slow_tests.txt`` (measured).
  Under the ``dev`` profile a property named there is not slow: with its examples capped it is quick.
* ``accel``: everything under ``tests/kernel/``, ``tests/persistence/`` and ``tests/postgres/``, and the
  modules that declare it: the tests CI runs a second time with ``AGENTLOG_PURE_PYTHON=1``.
* ``docs``: ``tests/test_docs.py`` declares it.

The PostgreSQL fixtures every directory shares are here too: ``pg_dsn``, the run's database
(``tests/_postgres.py``: ``AGENTLOG_TEST_DSN``, else a throwaway one; under pytest-xdist each worker's own
database beside it), and ``pg_schema``, a fresh schema per test. ``tests/postgres/conftest.py`` adds backends
over them and a private server. ``password_cluster`` (a role with a password, shared by the session) and
``bare_password_cluster`` (no role yet, one per test) are throwaway clusters that ask for a password over TCP,
skipped only on a machine without ``initdb``.

Hypothesis profiles: ``ci``, the default, is Hypothesis's defaults under each test's own ``@settings``
(what CI runs); ``HYPOTHESIS_PROFILE=dev`` caps every property at :data:`DEV_MAX_EXAMPLES` examples,
including those whose ``@settings`` ask for more.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import os
import platform
import re
import sys
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from _postgres import PasswordCluster, drop_schema, fresh_schema, run_database, server_bindir, worker_database

TESTS = Path(__file__).resolve().parent

DEV_MAX_EXAMPLES = 10
"""The ``dev`` profile's examples per property: enough to catch a broken invariant in a tenth of the time."""

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.register_profile("ci", settings.get_profile("default"))
settings.register_profile("dev", max_examples=DEV_MAX_EXAMPLES)
settings.load_profile(PROFILE)

ACCEL_DIRECTORIES = frozenset({"kernel", "persistence", "postgres"})
"""Directories of ``tests/`` whose every test reaches an accelerated path (``accel``)."""

PG_FIXTURES = frozenset(
    {"pg_dsn", "pg_schema", "pg_backends", "private_server", "password_cluster", "bare_password_cluster"}
)

SLOW_TESTS_FILE = TESTS / "slow_tests.txt"

SPAWN = re.compile(
    r"\bsubprocess\.|\bPopen\b|\bmultiprocessing\b|\bos\.fork\b|\bos\.system\b|\bposix_spawn|\bsys\.executable\b"
)
"""What starts a process in the suite's own code (``sys.executable`` is only ever a child's interpreter)."""

CRASH_NAME = re.compile(r"crash|sigkill|kill_?9")
NAME = re.compile(r"\b[A-Za-z_]\w*\b")


def _slow_names() -> frozenset[str]:
    lines = SLOW_TESTS_FILE.read_text(encoding="utf-8").splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#"))


_DEFINITIONS: dict[str, dict[str, str]] = {}


def _definitions(path: str) -> dict[str, str]:
    """The source of every function and class of one module of ``tests/``, by qualified name (one parse)."""
    if path not in _DEFINITIONS:
        text = Path(path).read_text(encoding="utf-8")
        lines = text.splitlines(keepends=True)
        found: dict[str, str] = {}

        def visit(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    found[prefix + child.name] = "".join(lines[child.lineno - 1 : child.end_lineno])
                    if isinstance(child, ast.ClassDef):
                        visit(child, f"{prefix}{child.name}.")

        visit(ast.parse(text), "")
        _DEFINITIONS[path] = found
    return _DEFINITIONS[path]


def _suite_source(obj: Any) -> str:
    """The source of a function or class defined in ``tests/`` ("" for anything else)."""
    code = getattr(obj, "__code__", None)
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    path = code.co_filename if code is not None else getattr(module, "__file__", None)
    if not path or not Path(path).is_relative_to(TESTS):
        return ""
    definitions = _definitions(path)
    qualname = getattr(obj, "__qualname__", "")
    if qualname in definitions:
        return definitions[qualname]
    # A wrapped test (Hypothesis's ``@given``) is named ``accept.<locals>.<name>``: find it by its name.
    name = getattr(obj, "__name__", "")
    return next((source for key, source in definitions.items() if key.rsplit(".", 1)[-1] == name), "")


_SPAWNS: dict[int, bool] = {}


def _spawns(obj: Any, seen: set[int] | None = None) -> bool:
    """Whether ``obj`` (a test, fixture or helper of the suite) or a suite function it names starts a process.

    A static reading: the source of ``obj``, then, transitively, of every function or class of ``tests/``
    that its source names (looked up in its module's globals). Processes the library starts are not seen.
    """
    obj = inspect.unwrap(obj) if inspect.isfunction(obj) else obj
    key = id(obj)
    if key in _SPAWNS:
        return _SPAWNS[key]
    seen = set() if seen is None else seen
    if key in seen:
        return False
    seen.add(key)
    source = _suite_source(obj)
    found = bool(SPAWN.search(source))
    if source and not found:
        module = inspect.getmodule(obj)
        scope: dict[str, Any] = vars(module) if module is not None else {}
        for name in sorted(set(NAME.findall(source))):
            named = scope.get(name)
            if (inspect.isfunction(named) or inspect.isclass(named)) and _spawns(named, seen):
                found = True
                break
    _SPAWNS[key] = found
    return found


def _fixture_functions(item: pytest.Item) -> Iterable[Any]:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return ()
    return [definition.func for definitions in info.name2fixturedefs.values() for definition in definitions]


def _is_postgres(item: pytest.Item, parts: tuple[str, ...]) -> bool:
    if parts[0] == "postgres" or PG_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "postgres" in callspec.params.values()


def _is_property(item: pytest.Item) -> bool:
    return bool(getattr(getattr(item, "function", None), "is_hypothesis_test", False))


def _profile(config: pytest.Config) -> str:
    return str(config.getoption("hypothesis_profile", None) or PROFILE)


def _whole_suite(config: pytest.Config) -> bool:
    return {Path(arg.split("::", 1)[0]).resolve() for arg in config.args} == {TESTS}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the markers given here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    slow_names = _slow_names()
    dev = _profile(config) == "dev"
    named: set[str] = set()
    for item in items:
        parts = item.path.resolve().relative_to(TESTS).parts
        name = getattr(item, "originalname", item.name)
        if parts[0] in ACCEL_DIRECTORIES:
            item.add_marker(pytest.mark.accel)
        postgres = _is_postgres(item, parts)
        if postgres:
            item.add_marker(pytest.mark.postgres)
        function = getattr(item, "function", None)
        spawns = item.get_closest_marker("subprocess") is not None
        if not spawns and function is not None:
            spawns = _spawns(function) or any(_spawns(f) for f in _fixture_functions(item))
            if spawns:
                item.add_marker(pytest.mark.subprocess)
        crash = item.get_closest_marker("crash") is not None or (
            spawns and (parts[0] == "crash" or item.path.stem.endswith("_crash") or CRASH_NAME.search(name) is not None)
        )
        if crash:
            item.add_marker(pytest.mark.crash)
        if name in slow_names:
            named.add(name)
        measured = name in slow_names and not (dev and _is_property(item))
        if crash or postgres or spawns or measured:
            item.add_marker(pytest.mark.slow)
    if _whole_suite(config) and slow_names - named:
        raise pytest.UsageError(
            f"{SLOW_TESTS_FILE.name} names tests that are not in the suite (renamed or removed?): "
            f"{', '.join(sorted(slow_names - named))}; give their new names or remove them"
        )
    if dev:
        _cap_examples(items)


def _cap_examples(items: list[pytest.Item]) -> None:
    """Under the ``dev`` profile, also cap the properties whose own ``@settings`` ask for more examples.

    An explicit ``@settings(max_examples=...)`` outranks any profile, and Hypothesis offers no public way to
    scale it; the settings a ``@given`` test runs with are its ``_hypothesis_internal_use_settings``. Should
    a Hypothesis release rename that, the cap silently stops applying (the tests still run, only longer).
    """
    for item in items:
        function: Any = getattr(item, "function", None)
        own = getattr(function, "_hypothesis_internal_use_settings", None)
        if isinstance(own, settings) and own.max_examples > DEV_MAX_EXAMPLES:
            function._hypothesis_internal_use_settings = settings(own, max_examples=DEV_MAX_EXAMPLES)


# --- the PostgreSQL database of the run ------------------------------------------------------------------

_worker_database = contextlib.ExitStack()


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each worker points ``AGENTLOG_TEST_DSN`` at a database of its own (before any
    test runs, so the processes and shell blocks the tests start inherit it too)."""
    given, worker = os.environ.get("AGENTLOG_TEST_DSN"), os.environ.get("PYTEST_XDIST_WORKER")
    if given and worker:
        os.environ["AGENTLOG_TEST_DSN"] = _worker_database.enter_context(worker_database(given, worker))


def pytest_unconfigure(config: pytest.Config) -> None:
    _worker_database.close()  # drops the worker's database, if it made one


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """The DSN of the test database (``AGENTLOG_TEST_DSN``, or a database created for this session)."""
    with run_database() as dsn:
        yield dsn


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    """A unique schema name for one test (not created: the backend creates it); dropped afterwards."""
    schema = fresh_schema()
    yield schema
    drop_schema(pg_dsn, schema)
    drop_schema(pg_dsn, f"{schema}_search")  # the store's search index (agentlog.query.postgres.index_schema)


def _password_cluster(role: str | None) -> Iterator[PasswordCluster]:
    bindir = server_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (initdb) on this machine: cannot create a password cluster")
    cluster = PasswordCluster(bindir, role=role)
    try:
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture(scope="session")
def password_cluster() -> Iterator[PasswordCluster]:
    """A cluster that asks for a password over TCP, with the login role ``agentlog`` and its database."""
    yield from _password_cluster("agentlog")


@pytest.fixture
def bare_password_cluster() -> Iterator[PasswordCluster]:
    """A cluster that asks for a password over TCP and has no role but the superuser yet."""
    yield from _password_cluster(None)


# --- the subprocess marker kept honest ------------------------------------------------------------------

SPAWN_EVENTS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.spawn"})
"""The audit events (``sys.addaudithook``) by which this interpreter starts a process."""

_running: list[pytest.Item] = []
_unmarked_spawners: dict[str, str] = {}


UNMARKED_SPAWN = "unmarked-spawn"
"""The report property that carries a spawn to the process that prints the summary (under pytest-xdist,
the controller: the spawn happened in a worker)."""


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event in SPAWN_EVENTS and _running:
        item = _running[-1]
        if item.get_closest_marker("subprocess") is None and item.nodeid not in _unmarked_spawners:
            _unmarked_spawners[item.nodeid] = event
            properties = getattr(item, "user_properties", None)  # a test function's; not a bare Item's
            if properties is not None:
                properties.append((UNMARKED_SPAWN, event))


sys.addaudithook(_audit)

# The ``openai`` client names the platform in its headers, and ``platform.processor()`` runs ``uname -p``
# once per interpreter (then caches it): whichever test first used the client started that process,
# without the marker. Asked here, before any test runs, it is no test's process.
platform.processor()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, value in report.user_properties:
        if name == UNMARKED_SPAWN:
            _unmarked_spawners.setdefault(report.nodeid, str(value))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _unmarked_spawners:
        terminalreporter.write_sep("=", "tests that started a process without the subprocess marker", yellow=True)
        for nodeid, event in sorted(_unmarked_spawners.items()):
            terminalreporter.write_line(f"{nodeid} ({event}): mark it @pytest.mark.subprocess")
