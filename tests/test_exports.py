"""The root namespace, like httpx's exported-members test: ``agentlog`` exports exactly ``agentlog.__all__``.

The rules:

* every name in ``agentlog.__all__`` is importable from the root (``from agentlog import X`` and
  ``agentlog.X``, the same object) and ``dir(agentlog)`` lists it, before and after it loaded;
* the root's public names are ``__all__``, its subpackages (``agentlog.kernel``…) and ``__version__``, nothing
  else: no helper of the lazy exports (``lazy_exports``, ``TYPE_CHECKING``) leaks, and ``__all__`` holds no
  private name, no module and no duplicate;
* each exported class and function says where it lives: its ``__module__`` is the ``agentlog`` submodule that
  defines it (``agentlog.kernel.session`` for ``agentlog.Session``, so its class repr is
  ``<class 'agentlog.kernel.session.Session'>``), that module's attribute of its ``__qualname__`` is the very
  same object, and the root exports it under that name. So the repr names an importable path, pickle finds
  it, ``inspect.getsource`` finds its source, and ``typing.get_type_hints`` works on the class and on each of
  its methods (dataclass fields, TypedDict keys and the errors' ``ClassVar`` codes included).

Why not httpx's ``__module__ = "agentlog"`` (class reprs ``agentlog.Session``)? The classes use
``from __future__ import annotations``, and ``typing.get_type_hints`` resolves a class's annotations in
``sys.modules[cls.__module__]``: rewritten to the root, it raised ``NameError`` for 36 of the exported classes
(every error's ``ClassVar`` codes, the ``CompactionConfig`` and ``CompactionResult`` dataclass fields, ``Recorder``,
``ExtractiveSummarizer``), and ``inspect.getsource`` lost every exported class (it looks for the class in
``agentlog/__init__.py``). A true module path costs a longer class repr and breaks nothing. What users print
most, the handles, say the public name in their instance reprs (``<agentlog.Session 's' events=3>``,
``<agentlog.SessionView 's' at seq 2>``, ``<agentlog.SessionStore sessions=1>``); value types keep their
dataclass reprs (``CompactionConfig(...)``).
"""

from __future__ import annotations

import dataclasses
import inspect
import pickle
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

import agentlog

SRC = Path(__file__).resolve().parents[1] / "src"
SUBPACKAGES = {"agent", "compaction", "errors", "kernel", "llm", "persistence", "projection", "query"}


def _exported() -> dict[str, Any]:
    return {name: getattr(agentlog, name) for name in agentlog.__all__}


def _defined(value: Any) -> bool:
    """A class or function (what carries a ``__module__``); the constants are plain values."""
    return inspect.isclass(value) or inspect.isfunction(value)


def test_every_exported_name_is_importable_from_the_root_and_listed() -> None:
    assert len(set(agentlog.__all__)) == len(agentlog.__all__)
    listed = set(dir(agentlog))
    for name, value in _exported().items():
        namespace: dict[str, Any] = {}
        exec(f"from agentlog import {name} as imported", namespace)
        assert namespace["imported"] is value, name
        assert name in listed, name


def test_dir_lists_every_export_before_any_loaded() -> None:
    code = "import agentlog, json; print(json.dumps(sorted(set(agentlog.__all__) - set(dir(agentlog)))))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(SRC)}
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_root_namespace_holds_the_exports_the_subpackages_and_nothing_else() -> None:
    public = {name for name in dir(agentlog) if not name.startswith("_")}
    modules = {name for name in public if isinstance(getattr(agentlog, name), types.ModuleType)}
    assert not modules & set(agentlog.__all__)
    assert all(getattr(agentlog, name).__name__ == f"agentlog.{name}" for name in modules)
    assert SUBPACKAGES <= modules
    assert public - modules == set(agentlog.__all__)
    assert not [name for name in agentlog.__all__ if name.startswith("_")]
    assert isinstance(agentlog.__version__, str)


def test_each_exported_class_and_function_lives_where_its_module_says() -> None:
    for name, value in _exported().items():
        if not _defined(value):
            continue
        module = value.__module__
        assert module.startswith("agentlog.") and not module.split(".")[-1].startswith("_"), (name, module)
        assert value.__qualname__ == value.__name__ == name, (name, value.__qualname__)
        assert getattr(sys.modules[module], name) is value, (name, module)
        if inspect.isclass(value):
            assert repr(value) == f"<class '{module}.{name}'>"
        assert pickle.loads(pickle.dumps(value)) is value, name
        assert inspect.getsource(value), name


def _functions_of(cls: type) -> list[tuple[str, Any]]:
    found = []
    for attribute, member in vars(cls).items():
        function = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
        if inspect.isfunction(function):
            found.append((attribute, function))
    return found


def test_type_hints_resolve_on_every_exported_class_its_methods_and_every_exported_function() -> None:
    failures: list[str] = []
    for name, value in _exported().items():
        targets: list[tuple[str, Any]] = []
        if inspect.isclass(value):
            targets = [(name, value), *((f"{name}.{a}", f) for a, f in _functions_of(value))]
        elif inspect.isfunction(value):
            targets = [(name, value)]
        for label, target in targets:
            try:
                typing.get_type_hints(target)
            except Exception as err:  # collect them all: one report names every unresolvable annotation
                failures.append(f"{label}: {type(err).__name__}: {err}")
    assert failures == []


def test_the_named_introspection_a_user_reaches_for_works() -> None:
    hints = typing.get_type_hints(agentlog.Session.append)
    assert hints["return"] is agentlog.Event
    assert typing.get_type_hints(agentlog.AgentlogError)["codes"] == typing.ClassVar[frozenset[str]]
    config_fields = typing.get_type_hints(agentlog.CompactionConfig)
    assert [field.name for field in dataclasses.fields(agentlog.CompactionConfig)] == list(config_fields)
    assert set(typing.get_type_hints(agentlog.TurnEndData)) == {"turn", "reason"}


def test_the_handles_instance_reprs_name_the_public_path() -> None:
    store = agentlog.SessionStore()
    session = store.create("s")
    session.append(agentlog.TURN_START, {"turn": 1})
    assert repr(store) == "<agentlog.SessionStore sessions=1>"
    assert repr(session) == "<agentlog.Session 's' events=1>"
    assert repr(session.at(0)) == "<agentlog.SessionView 's' at seq 0>"
