"""The shared persistence conformance suite lives in ``agentlog.testing.BackendContract``.

Spec ``persistence.md`` §8.3 (items 31–42) and §8.4 (43–82), plus durability, locking and failure
handling, run once per backend from ``test_contract_memory.py``, ``test_contract_jsonl.py`` (``none`` and
``zstd``) and ``test_contract_sqlite.py``, each a subclass with one factory. This module checks that the
contract runs over every backend of the repository and that the base class itself is never collected.
"""

from __future__ import annotations

import inspect

from agentlog.testing import BackendContract

from . import test_contract_jsonl, test_contract_memory, test_contract_sqlite
from .conftest import BACKEND_KINDS

# Modules, not classes, are imported: a ``Test…`` class imported here would be collected (and run) again.
CONTRACTS: list[type[BackendContract]] = [
    test_contract_memory.TestMemoryContract,
    test_contract_jsonl.TestJsonlNoneContract,
    test_contract_jsonl.TestJsonlZstdContract,
    test_contract_sqlite.TestSqliteContract,
]


def test_every_backend_of_the_repository_runs_the_contract() -> None:
    assert sorted(contract.kind for contract in CONTRACTS) == sorted(BACKEND_KINDS)


def test_the_base_class_is_not_collected_and_has_one_abstract_factory() -> None:
    assert not BackendContract.__name__.startswith("Test") and not hasattr(BackendContract, "__test__")
    assert BackendContract.__abstractmethods__ == frozenset({"make_backend"})
    assert not any(inspect.isabstract(contract) for contract in CONTRACTS)


def test_the_contract_covers_spec_items_31_to_82() -> None:
    names = [name for name in dir(BackendContract) if name.startswith("test_")]
    items = {int(name.split("_")[1]) for name in names if name.split("_")[1].isdigit()}
    assert items == set(range(31, 83))
