"""Lazy re-exports for a package ``__init__``: names resolve to their defining module on first access.

A package that re-exports a wide API would otherwise import every module behind it at ``import``
time, and every ``agentlog`` command (even ``--version``) starts by importing ``agentlog``. With
:func:`lazy_exports` the package module defines ``__getattr__`` and ``__dir__`` (PEP 562) from a
table ``{module: names}``: ``from agentlog import Session`` and ``agentlog.Session`` import
``agentlog.kernel.session`` then, and only then; the value is cached in the package's namespace so
the hook runs once per name. ``dir()`` lists every exported name whether it has loaded or not.

Static type checkers do not run ``__getattr__``: the package also imports the same names under
``if TYPE_CHECKING:`` so mypy sees their real types (``tests/test_lazy_imports.py`` checks that the
table and those imports agree).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping, MutableMapping
from typing import Any


def lazy_exports(
    namespace: MutableMapping[str, Any],
    table: Mapping[str, Collection[str]],
    *,
    submodules: Collection[str] = (),
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the package (or module) whose globals are ``namespace``.

    ``table`` maps a module (relative to the package, like ``".kernel.session"``, or absolute) to the names it
    exports; ``submodules`` are subpackages reachable as attributes (``agentlog.kernel``) before
    anything imported them, as they were when the package imported them eagerly.
    """
    package = str(namespace["__name__"])
    anchor = str(namespace.get("__package__") or package)  # what relative names resolve against (a module's package)
    where: dict[str, str] = {}
    for module, names in table.items():
        for name in names:
            if name in where:
                raise ValueError(f"{package}: {name!r} is exported by both {where[name]} and {module}")
            where[name] = module
    children = frozenset(submodules)

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is not None:
            value = getattr(importlib.import_module(module, anchor), name)
        elif name in children:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where, *children})

    return __getattr__, __dir__
