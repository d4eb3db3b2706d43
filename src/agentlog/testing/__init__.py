"""Test support for code built on agentlog: what a user writing their own backend or agent tests needs.

* :class:`BackendContract` (:mod:`agentlog.testing.contract`) — the shared persistence conformance suite
  as a base test class with one abstract factory; ``class TestMyBackend(BackendContract)`` plus a
  ``make_backend(location)`` runs the whole contract against your backend (see
  ``docs/persistence-api.md``, "Testing your own backend");
* :mod:`agentlog.testing.builders` — builders of typical sessions, turns and messages (wire events, seeds
  and live appends);
* :class:`ScriptedProvider` (:mod:`agentlog.testing.provider`) — an in-process model that streams scripted
  replies through the provider protocol, with :func:`text_reply`, :func:`tool_call_reply` and
  :func:`failure_reply`;
* :class:`DemoModelServer` (:mod:`agentlog.testing.demo_server`) — a scripted model behind a real
  OpenAI-compatible HTTP endpoint on loopback (``agentlog demo`` runs on it), loaded on first access.

The contract imports pytest (install the slim ``contract`` extra, ``pip install agentlog[contract]``, or
the ``test`` extra); it is loaded on first access to one of its names, so the builders and the scripted
provider work without pytest, and ``import agentlog`` never imports ``agentlog.testing`` at all. Under
pytest (pytest already imported), importing this package registers the contract module for pytest's
assertion rewriting, so a failing contract test shows the values it compared, as a test module's own
asserts do; it must therefore happen before the contract module is first imported, which importing it
through this package guarantees.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if "pytest" in sys.modules:  # under pytest: before .contract is first imported (it is loaded lazily below)
    sys.modules["pytest"].register_assert_rewrite(__name__ + ".contract")

from .._lazy import lazy_exports
from ..persistence.memory import MemoryStorage
from . import builders
from .provider import ScriptedProvider, failure_reply, text_reply, tool_call_reply

if TYPE_CHECKING:
    from .contract import BackendContract, ContractBackends, ContractHarness
    from .demo_server import DemoModelServer

__all__ = [
    "BackendContract",
    "ContractBackends",
    "ContractHarness",
    "DemoModelServer",
    "MemoryStorage",
    "ScriptedProvider",
    "builders",
    "failure_reply",
    "text_reply",
    "tool_call_reply",
]

_EXPORTS = {
    ".contract": ("BackendContract", "ContractBackends", "ContractHarness"),
    ".demo_server": ("DemoModelServer",),
}

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
