"""The marker rules of ``tests/conftest.py``: what a test is decides its markers, wherever it lives.

Each rule is checked on stand-in items (a path under ``tests/``, a name, the function, fixtures and
parameters: what the hook reads of a collected item) passed through the conftest's own
``pytest_collection_modifyitems``, and the audit hook that lists a test starting a process without the
``subprocess`` marker is fed the audit event it listens for. A last check holds the collected suite itself
to the rules.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import conftest as suite

TESTS = Path(__file__).resolve().parent


# Stand-in test bodies and fixtures. The tests below reach them through ``BODIES`` only: a test whose own
# source named a function that starts a process would be marked ``subprocess`` itself.


def _plain_body() -> None:
    """Starts no process."""


def _spawning_body() -> None:
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def _spawning_helper() -> None:
    subprocess.run(["true"], check=True)


def _body_calling_a_spawning_helper() -> None:
    """Starts a process through a helper of the suite (found by reading the helper's source)."""
    _spawning_helper()


def _spawning_fixture() -> None:
    subprocess.run(["true"], check=True)


def _property_body() -> None: ...


_property_body.is_hypothesis_test = True  # type: ignore[attr-defined]

BODIES = SimpleNamespace(
    plain=_plain_body,
    spawning=_spawning_body,
    calling_a_spawning_helper=_body_calling_a_spawning_helper,
    spawning_fixture=_spawning_fixture,
    property=_property_body,
)


class Item:
    """What the marker hook reads of a collected test."""

    def __init__(
        self,
        where: str,
        name: str = "test_something",
        function: Any = _plain_body,
        fixtures: tuple[str, ...] = (),
        params: dict[str, Any] | None = None,
        marks: tuple[str, ...] = (),
        fixture_functions: tuple[Any, ...] = (),
    ) -> None:
        self.path = TESTS / where
        self.name = self.originalname = name
        self.nodeid = f"tests/{where}::{name}"
        self.function = function
        self.fixturenames = list(fixtures)
        self.callspec = SimpleNamespace(params=params) if params is not None else None
        self.marks = [getattr(pytest.mark, mark).mark for mark in marks]
        definitions = {f"f{i}": [SimpleNamespace(func=func)] for i, func in enumerate(fixture_functions)}
        self._fixtureinfo = SimpleNamespace(name2fixturedefs=definitions)

    def add_marker(self, marker: Any) -> None:
        self.marks.append(marker.mark)

    def get_closest_marker(self, name: str) -> Any:
        return next((mark for mark in self.marks if mark.name == name), None)

    @property
    def names(self) -> set[str]:
        return {mark.name for mark in self.marks}


def marked(*items: Item, profile: str = "ci") -> list[set[str]]:
    config = SimpleNamespace(getoption=lambda name, default=None: profile, args=[str(TESTS / "test_markers.py")])
    suite.pytest_collection_modifyitems(config, list(items))  # type: ignore[arg-type]
    return [item.names for item in items]


def test_the_conftest_under_test_is_the_suites() -> None:
    assert Path(suite.__file__).resolve() == TESTS / "conftest.py"


def test_every_test_under_an_accelerated_directory_is_accel() -> None:
    assert suite.ACCEL_DIRECTORIES == {"kernel", "persistence", "postgres"}
    for directory in ("kernel", "persistence"):
        assert marked(Item(f"{directory}/test_x.py"), Item(f"{directory}/deeper/test_y.py")) == [{"accel"}] * 2
    assert marked(Item("postgres/test_x.py")) == [{"accel", "postgres", "slow"}]


@pytest.mark.parametrize("where", ["test_x.py", "cli/test_x.py", "agent/test_x.py", "query/test_x.py"])
def test_a_test_elsewhere_is_accel_only_if_its_module_says_so(where: str) -> None:
    assert marked(Item(where)) == [set()]
    assert marked(Item(where, marks=("accel",))) == [{"accel"}]


def test_postgres_by_directory_by_fixture_or_by_backend_parameter_and_then_slow() -> None:
    assert marked(
        Item("postgres/test_x.py"),
        *(Item("cli/test_x.py", fixtures=(fixture,)) for fixture in sorted(suite.PG_FIXTURES)),
        Item("interop/test_x.py", params={"store": "postgres"}),
    ) == [{"accel", "postgres", "slow"}] + [{"postgres", "slow"}] * (len(suite.PG_FIXTURES) + 1)
    others = Item("interop/test_x.py", params={"store": "sqlite"}), Item("cli/test_x.py", fixtures=("tmp_path",))
    assert marked(*others) == [set(), set()]


def test_a_test_that_starts_a_process_is_subprocess_and_slow() -> None:
    assert marked(
        Item("test_x.py", function=BODIES.spawning),
        Item("test_x.py", function=BODIES.calling_a_spawning_helper),
        Item("test_x.py", fixture_functions=(BODIES.spawning_fixture,)),
        Item("test_x.py"),
    ) == [{"subprocess", "slow"}] * 3 + [set()]


def test_a_declared_subprocess_marker_counts_as_starting_a_process() -> None:
    """A process the library starts (the agent's shell tool) is not in the test's source: the test says so."""
    assert marked(Item("agent/test_x.py", marks=("subprocess",))) == [{"subprocess", "slow"}]


@pytest.mark.parametrize(
    ("where", "name"),
    [
        ("crash/test_x.py", "test_something"),
        ("agent/test_loop_crash.py", "test_something"),
        ("test_x.py", "test_a_crash_mid_write"),
        ("test_x.py", "test_sigkill_of_the_writer"),
        ("test_x.py", "test_kill9_then_resume"),
        ("test_x.py", "test_kill_9_then_resume"),
    ],
)
def test_crash_is_a_process_test_named_or_placed_as_one(where: str, name: str) -> None:
    assert marked(Item(where, name, function=BODIES.spawning)) == [{"crash", "subprocess", "slow"}]
    # Without a process of its own it is an in-process crash *repair* test: no crash marker.
    assert marked(Item(where, name)) == [set()]


def test_a_declared_crash_marker_is_kept_and_makes_the_test_slow() -> None:
    assert marked(Item("test_x.py", marks=("crash",))) == [{"crash", "slow"}]


def test_a_test_named_in_slow_tests_txt_is_slow_wherever_it_is_defined() -> None:
    name = sorted(suite._slow_names())[0]
    assert marked(Item("test_x.py", name), Item("query/test_y.py", name)) == [{"slow"}, {"slow"}]
    assert marked(Item("test_x.py", name, params={"kind": "jsonl"})) == [{"slow"}]


def test_under_the_dev_profile_a_named_property_is_not_slow_and_a_named_plain_test_still_is() -> None:
    name = sorted(suite._slow_names())[0]
    assert marked(Item("test_x.py", name, function=BODIES.property), profile="dev") == [set()]
    assert marked(Item("test_x.py", name, function=BODIES.property), profile="ci") == [{"slow"}]
    assert marked(Item("test_x.py", name), profile="dev") == [{"slow"}]


def test_a_stale_name_in_slow_tests_txt_is_an_error_when_the_whole_suite_is_collected() -> None:
    config = SimpleNamespace(getoption=lambda name, default=None: "ci", args=[str(TESTS)])
    with pytest.raises(pytest.UsageError, match="renamed or removed"):
        suite.pytest_collection_modifyitems(config, [Item("test_x.py")])  # type: ignore[arg-type]


def test_a_process_started_without_the_marker_is_listed_at_the_end() -> None:
    unmarked, declared = Item("test_x.py", "test_unmarked"), Item("test_x.py", "test_declared", marks=("subprocess",))
    try:
        for item in (unmarked, declared):
            suite._running.append(item)  # type: ignore[arg-type]
            try:
                suite._audit("os.exec", ("true", ["true"], None))  # an exec, one of the audited process starts
                suite._audit("open", ("a-file", "r", 0))  # not a process start
            finally:
                suite._running.pop()
        assert suite._unmarked_spawners.get(unmarked.nodeid) == "os.exec"
        assert declared.nodeid not in suite._unmarked_spawners
    finally:
        suite._unmarked_spawners.pop(unmarked.nodeid, None)


def test_the_collected_suite_keeps_the_rules(request: pytest.FixtureRequest) -> None:
    """Every test this run collected carries the markers its place and kind call for."""
    items = request.session.items
    assert items
    for item in items:
        names = {mark.name for mark in item.iter_markers()}
        parts = item.path.resolve().relative_to(TESTS).parts
        if parts[0] in suite.ACCEL_DIRECTORIES:
            assert "accel" in names, item.nodeid
        if parts[0] == "postgres":
            assert "postgres" in names, item.nodeid
        if names & {"crash", "postgres", "subprocess"}:
            assert "slow" in names, item.nodeid
        if "crash" in names:
            assert "subprocess" in names or item.get_closest_marker("crash") is not None, item.nodeid
