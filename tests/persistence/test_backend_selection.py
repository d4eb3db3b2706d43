"""Backends by name (``agentlog.persistence.registry``): built-ins, entry points, ``module:attribute`` paths.

A third-party backend needs no edit of agentlog: a package registers a factory in the entry-point group
``agentlog.backends`` (here a distribution written into ``tmp_path`` and put on ``sys.path``), or the
user names it as ``module:attribute``; ``agentlog --backend NAME`` opens it. The built-in names resolve
without reading the installed entry points, and the command line's built-in path does not even import
the registry.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

import agentlog
from agentlog.cli.commands import app
from agentlog.cli.options import BackendKind, parse_backend
from agentlog.errors import InvalidOptionError, UnknownBackendError
from agentlog.persistence import registry
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.memory import MemoryBackend
from agentlog.persistence.registry import (
    BUILTIN_BACKENDS,
    ENTRY_POINT_GROUP,
    BackendOptions,
    open_named_backend,
    registered_backends,
    resolve_backend,
)
from agentlog.persistence.sqlite.backend import SqliteBackend

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

PLUGIN = '''
from agentlog.persistence.memory import MemoryBackend, MemoryStorage

STORES = {}


def open_backend(options):
    """One shared MemoryStorage per store directory, so two commands see the same sessions."""
    return MemoryBackend(STORES.setdefault(options.store, MemoryStorage()))


class PluginBackend(MemoryBackend):
    name = "plugin-backend"

    def __init__(self, options):
        super().__init__()
        self.options = options


NOT_CALLABLE = 42


def not_a_backend(options):
    return object()
'''


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A distribution ``agentlog-plugin`` whose module ``agentlog_plugin`` registers the backend ``plugged``."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "agentlog_plugin.py").write_text(PLUGIN)
    info = site / "agentlog_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: agentlog-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nplugged = agentlog_plugin:open_backend\nclassy = agentlog_plugin:PluginBackend\n"
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "agentlog_plugin", raising=False)
    return str(site)


def _options(tmp_path: Path, **changes: Any) -> BackendOptions:
    return BackendOptions(str(tmp_path / "store"), **changes)


# --- the registry ---------------------------------------------------------------------------------------------


def test_the_built_in_names_resolve_without_reading_the_entry_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse() -> dict[str, str]:
        raise AssertionError("the entry points were read")

    monkeypatch.setattr(registry, "_entry_points", refuse)
    opened = [open_named_backend(name, _options(tmp_path)) for name in ("jsonl", "sqlite", "memory")]
    assert [type(backend) for backend in opened] == [JsonlBackend, SqliteBackend, MemoryBackend]
    assert opened[0].root == str(tmp_path / "store")
    assert opened[1].path == str(tmp_path / "store" / "sessions.sqlite3")
    for backend in opened:
        backend.close()


def test_pyproject_registers_the_built_in_names_as_entry_points() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"][ENTRY_POINT_GROUP] == BUILTIN_BACKENDS


def test_a_registered_entry_point_is_listed_resolved_and_opened(plugin: str, tmp_path: Path) -> None:
    assert registered_backends()["plugged"] == "agentlog_plugin:open_backend"
    assert set(BUILTIN_BACKENDS) <= set(registered_backends())
    backend = open_named_backend("plugged", _options(tmp_path))
    assert isinstance(backend, MemoryBackend)
    classy = open_named_backend("classy", _options(tmp_path, read_only=True))
    assert classy.name == "plugin-backend" and classy.options.read_only is True  # type: ignore[attr-defined]


def test_a_module_attribute_path_is_imported(plugin: str, tmp_path: Path) -> None:
    backend = open_named_backend("agentlog_plugin:PluginBackend", _options(tmp_path))
    assert backend.name == "plugin-backend"
    assert isinstance(open_named_backend(f"{registry.__name__}:open_memory", _options(tmp_path)), MemoryBackend)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("bogus", 'unknown backend "bogus": not one of classy, jsonl, memory, plugged, postgres, sqlite (built in'),
        ("no_such_module_here:factory", "cannot import no_such_module_here"),
        ("agentlog_plugin:missing", "agentlog_plugin has no attribute missing"),
        ("agentlog_plugin:NOT_CALLABLE", "agentlog_plugin:NOT_CALLABLE is not callable"),
        (":factory", "is not a module:attribute path"),
        ("", "a backend name must be a non-empty string"),
    ],
)
def test_an_unknown_or_unloadable_name_is_unknown_backend(plugin: str, name: str, says: str) -> None:
    with pytest.raises(UnknownBackendError, match=re.escape(says)) as info:
        resolve_backend(name)
    assert info.value.code == "UNKNOWN_BACKEND"
    assert isinstance(info.value, InvalidOptionError)  # an option error, as before


def test_a_factory_that_returns_no_backend_is_refused(plugin: str, tmp_path: Path) -> None:
    with pytest.raises(UnknownBackendError, match="returned object, not a Backend"):
        open_named_backend("agentlog_plugin:not_a_backend", _options(tmp_path))


def test_the_postgres_factory_needs_a_dsn(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match="needs a database"):
        open_named_backend("postgres", _options(tmp_path))


# --- the command line -----------------------------------------------------------------------------------------


def test_the_built_in_names_parse_to_their_kind_and_others_stay_names() -> None:
    assert [parse_backend(name) for name in ("jsonl", "sqlite", "postgres")] == list(BackendKind)
    assert all(type(parse_backend(name)) is BackendKind for name in ("jsonl", "sqlite", "postgres"))
    assert parse_backend("plugged") == "plugged" and type(parse_backend("plugged")) is str


def test_the_command_line_opens_a_registered_backend_by_name(plugin: str, tmp_path: Path) -> None:
    import agentlog_plugin  # type: ignore[import-not-found]

    store = str(tmp_path / "store")
    backend = agentlog_plugin.open_backend(BackendOptions(store))
    backend.append_batch(
        {"version": 0, "id": "s1", "createdAt": 1},
        [{"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}}],
        False,
    )
    for name in ("plugged", "agentlog_plugin:open_backend"):
        result = runner.invoke(app, ["ls", "--store", store, "--backend", name, "--json"])
        assert result.exit_code == 0, result.output
        assert [row["id"] for row in orjson.loads(result.stdout)["sessions"]] == ["s1"]


def test_an_unknown_backend_name_is_a_typed_json_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["ls", "--store", str(tmp_path), "--backend", "bogus", "--json"])
    assert result.exit_code == 1
    error = orjson.loads(result.stderr)["error"]
    assert error["code"] == "UNKNOWN_BACKEND" and 'unknown backend "bogus"' in error["message"]


def test_the_help_still_names_the_built_in_backends() -> None:
    result = runner.invoke(app, ["ls", "--help"], terminal_width=200)
    assert "<jsonl|sqlite|postgres>" in result.stdout and "Storage backend." in result.stdout


def test_a_built_in_backend_on_the_command_line_does_not_import_the_registry(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys
        from agentlog.cli.commands import main
        sys.argv = ["agentlog", "ls", "--store", sys.argv[1], "--backend", "sqlite", "--json"]
        try:
            main()
        except SystemExit:
            pass
        assert "agentlog.persistence.registry" not in sys.modules, "the registry was imported"
        """
    )
    src = str(Path(agentlog.__file__).resolve().parents[1])
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "STORE_NOT_FOUND" in result.stderr  # the command ran (over a store that does not exist)
