"""The backend contract as an outside author meets it: a minimal subclass, derived capabilities, readable failures.

* A subclass that only says how to open the backend (``new_location`` and ``make_backend``) runs the whole
  contract: over the JSONL backend it passes, the torn-tail cases skipped (no injector) and the raw-log
  citation checked because ``locate()`` names the log file.
* The capability flags default to ``None`` (derived); an explicit ``True``/``False`` wins.
* A failing contract assertion shows the compared values: ``agentlog.testing`` registers the contract
  module for pytest's assertion rewriting (checked in process, and in a child pytest over a broken backend).
* The slim ``contract`` extra installs pytest only, and the contract runs without hypothesis.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import agentlog
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.memory import MemoryBackend, MemoryStorage
from agentlog.testing import BackendContract

ROOT = Path(__file__).resolve().parents[2]


class TestMinimalJsonlContract(BackendContract):
    """What an outside author writes first: the factory, nothing else."""

    def new_location(self, tmp_path: Path) -> Path:
        return tmp_path / "store"

    def make_backend(self, location: Path) -> JsonlBackend:
        return JsonlBackend(str(location))


class _MinimalMemory(BackendContract):
    def new_location(self, tmp_path: Path) -> MemoryStorage:
        return MemoryStorage()

    def make_backend(self, location: MemoryStorage) -> MemoryBackend:
        return MemoryBackend(location)


class _Injecting(_MinimalMemory):
    def inject_torn_tail(self, location: Any, meta: Mapping[str, Any], next_seq: int) -> None:
        pass

    def damage_header(self, location: Any, meta: Mapping[str, Any]) -> None:
        pass


class _Explicit(_Injecting):
    has_torn_tail = False
    can_damage_header = False
    locates_raw_log = True


def test_capabilities_are_derived_from_what_the_subclass_defines(tmp_path: Path) -> None:
    minimal = _MinimalMemory()
    assert minimal.has_torn_tail is None and minimal.can_damage_header is None and minimal.locates_raw_log is None
    assert not minimal.tears() and not minimal.damages_header()
    assert _Injecting().tears() and _Injecting().damages_header()


def test_the_raw_log_citation_is_derived_from_what_locate_names(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_bytes(b"")
    minimal = TestMinimalJsonlContract()
    assert minimal.cites_raw_log(str(log))
    assert not minimal.cites_raw_log(None)  # SQLite, PostgreSQL, memory: no raw log
    assert not minimal.cites_raw_log(str(tmp_path / "absent.jsonl"))
    assert not minimal.cites_raw_log(str(tmp_path))  # a directory is no log file


def test_an_explicit_flag_overrides_the_derived_answer(tmp_path: Path) -> None:
    explicit = _Explicit()
    assert not explicit.tears() and not explicit.damages_header()
    assert explicit.cites_raw_log(None)


def test_the_contract_module_is_rewritten_for_readable_failures() -> None:
    from agentlog.testing import contract

    assert "@py_builtins" in vars(contract)  # what pytest's assertion rewriting adds to a module


def test_a_failing_contract_test_shows_the_compared_values(tmp_path: Path) -> None:
    """A backend that forgets its sessions in listing: the failure names what was listed and what was due."""
    (tmp_path / "test_broken_backend.py").write_text(
        textwrap.dedent(
            """
            from agentlog.persistence.memory import MemoryBackend, MemoryStorage
            from agentlog.testing import BackendContract


            class ForgetfulBackend(MemoryBackend):
                def list_sessions(self):
                    return []


            class TestForgetfulContract(BackendContract):
                def new_location(self, tmp_path):
                    return MemoryStorage()

                def make_backend(self, location):
                    return ForgetfulBackend(location)
            """
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "test_36", "test_broken_backend.py"],
        cwd=tmp_path,
        env=_child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "1 failed" in output, output
    assert "assert [] == ['written']" in output, output  # the values, not a bare AssertionError
    assert "Right contains one more item: 'written'" in output, output


def test_the_contract_extra_is_pytest_only() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["contract"] == ["pytest>=8"]


def test_the_contract_runs_without_hypothesis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The one property of the contract falls back to seeded random plans when hypothesis is missing."""
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # `import hypothesis` now raises ImportError
    monkeypatch.setitem(sys.modules, "hypothesis.strategies", None)
    with pytest.raises(ImportError):
        import hypothesis  # noqa: F401
    _Injecting.test_list_revisions_are_the_listed_revisions_and_move_with_appends(_MinimalMemory(), tmp_path)


def _child_env() -> dict[str, str]:
    src = str(Path(agentlog.__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PYTEST_ADDOPTS", None)
    return env
