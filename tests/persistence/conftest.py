"""Shared fixtures of the persistence tests.

The conformance suite itself (spec ``persistence.md`` §8.3/§8.4) is ``agentlog.testing.BackendContract``,
run per backend by ``test_contract_*.py``; the fixtures here serve the backend-specific and coordinator
tests that run over several backends.

``backend_factory`` is parametrized over ``memory``, ``jsonl-none``, ``jsonl-zstd`` and ``sqlite``: the
``kind`` of each contract subclass of ``test_contract_*.py``, which says how to open its backend. A
factory is the contract's ``ContractBackends`` over one location of the test (``new_location``), so each
call returns a NEW backend instance over the SAME storage (the same in-memory record set, JSONL root or
SQLite file), which is how the tests simulate a restart or a second process. The factory also carries
the contract's torn-tail injector (spec §8 preamble), or ``None`` when the contract defines none: the
memory and SQLite backends have none (a SQLite row cannot tear), so the torn-tail tests use
``torn_backend_factory``, which covers the kinds that tear (the two JSONL encodings).

The event builders (plain wire dicts, times ``1000 + seq``) live in ``agentlog.testing.builders`` and
are re-exported here, as is the harness (``Harness`` = ``agentlog.testing.ContractHarness``).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentlog.testing.builders import (  # noqa: F401 - re-exported for the test modules
    APPEND_INTENT,
    CWD,
    SID,
    append_closed_turn,
    assistant_data,
    assistant_event,
    chunk_event,
    closed_turn,
    ev,
    event_bytes,
    header,
    live_meta,
    open_turn_with_chunks,
    seqs,
    step_end,
    step_start,
    tool_call_data,
    tool_call_event,
    tool_result_data,
    tool_result_event,
    turn_end,
    turn_start,
    types,
    user_data,
    user_event,
)
from agentlog.testing.contract import BackendContract, ContractBackends
from agentlog.testing.contract import ContractHarness as Harness

from .test_contract_jsonl import (  # the injectors are re-exported for the test modules
    TestJsonlNoneContract,
    TestJsonlZstdContract,
    inject_raw_torn_tail,  # noqa: F401
    inject_zstd_torn_tail,  # noqa: F401
)
from .test_contract_memory import TestMemoryContract
from .test_contract_sqlite import TestSqliteContract

# --- the backends: the contract subclasses ------------------------------------------------------------------

CONTRACTS: dict[str, type[BackendContract]] = {
    contract.kind: contract
    for contract in (TestMemoryContract, TestJsonlNoneContract, TestJsonlZstdContract, TestSqliteContract)
}
BACKEND_KINDS: list[str] = list(CONTRACTS)
# Only file backends can tear: a SQLite row is written by a transaction, so an unparsable row is damage
# (issue 7, defect 13: SESSION_CORRUPT, nothing deleted), never a torn tail.
TORN_KINDS: list[str] = [kind for kind, contract in CONTRACTS.items() if contract().tears()]


class BackendFactory(ContractBackends):
    """``factory()`` → a new backend instance over this test's storage (see ``ContractBackends``).

    ``BackendFactory(kind, tmp_path)`` opens the storage of the contract subclass named ``kind`` at its
    ``new_location(tmp_path)``. ``root`` (JSONL) and ``db_path`` (SQLite) name that location; assigning
    ``root`` moves a factory that has not opened a backend yet elsewhere.
    """

    def __init__(self, kind: str, tmp_path: Path) -> None:
        contract = CONTRACTS[kind]()
        super().__init__(contract, contract.new_location(tmp_path))
        self.tmp_path = tmp_path

    def __call__(self, wrap: type | None = None) -> Any:
        """``factory(wrap=Mixin)`` constructs the backend as ``class _(Mixin, BackendClass)`` (the mixin's
        ``__init__`` runs): the repository's contracts take the class as ``make_backend(location, cls=…)``."""
        if wrap is None:
            return super().__call__()
        base = inspect.signature(type(self.contract).make_backend).parameters["cls"].default
        cls = type(f"{wrap.__name__}{base.__name__}", (wrap, base), {})
        backend = self.contract.make_backend(self.location, cls=cls)  # type: ignore[call-arg]
        self.created.append(backend)
        return backend

    @property
    def root(self) -> Path:
        assert self.kind.startswith("jsonl"), self.kind
        return Path(self.location)

    @root.setter
    def root(self, value: Path) -> None:
        assert self.kind.startswith("jsonl") and not self.created, self.kind
        self.location = Path(value)

    @property
    def db_path(self) -> Path:
        assert self.kind == "sqlite", self.kind
        return Path(self.location)

    @property
    def _args(self) -> tuple[str]:
        """The backend's positional argument (the location's path), as the old table spelled it."""
        return (str(self.location),)

    @_args.setter
    def _args(self, value: tuple[str]) -> None:
        self.root = Path(value[0])

    @property
    def _kwargs(self) -> dict[str, Any]:
        """The JSONL backend's keyword arguments, as the old table spelled them."""
        return {"compression": getattr(self.contract, "compression", "none")}


@pytest.fixture(params=BACKEND_KINDS)
def backend_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendFactory]:
    factory = BackendFactory(request.param, tmp_path)
    yield factory
    factory.close_all()


@pytest.fixture(params=TORN_KINDS)
def torn_backend_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendFactory]:
    factory = BackendFactory(request.param, tmp_path)
    yield factory
    factory.close_all()


@pytest.fixture
def env(backend_factory: BackendFactory) -> Iterator[Harness]:
    harness = Harness(backend_factory)
    yield harness
    harness.close()


@pytest.fixture
def torn_env(torn_backend_factory: BackendFactory) -> Iterator[Harness]:
    harness = Harness(torn_backend_factory)
    yield harness
    harness.close()


@pytest.fixture
def memory_env(tmp_path: Path) -> Iterator[Harness]:
    """The memory backend only (coordinator-specific tests of §8.5)."""
    harness = Harness(BackendFactory("memory", tmp_path))
    yield harness
    harness.close()
