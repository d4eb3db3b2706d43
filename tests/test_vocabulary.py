"""One vocabulary: every event type name is spelled once, in its package's vocabulary module, and used by
name; shared limits are defined once; kernel modules touch only their own private attributes."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import agentlog
from agentlog.kernel import events
from agentlog.kernel.jsoncodec import DEFAULT_MAX_DEPTH
from agentlog.kernel.jsonvalue import MAX_JSON_DEPTH, MAX_SAFE_INTEGER

SRC = Path(agentlog.__file__).parent
NAMES = {
    "TURN_START": "turn/start",
    "TURN_END": "turn/end",
    "STEP_START": "step/start",
    "STEP_END": "step/end",
    "USER_MESSAGE": "user/message",
    "ASSISTANT_CHUNK": "assistant/chunk",
    "ASSISTANT_MESSAGE": "assistant/message",
    "TOOL_CALL": "tool/call",
    "TOOL_RESULT": "tool/result",
    "TODO_WRITE": "todo/write",
    "REQUEST_HEADER": "request/header",
    "REQUEST_CONTEXT": "request/context",
    "SESSION_END_SEED": "session/end-seed",
}
VOCABULARY_MODULES = {
    "kernel/events.py": "the core names, and the catalog of every type a reader knows",
    "agent/events.py": "agent/inbox/spliced",
    "compaction/events.py": "compaction/start, summary, end, prune",
    "llm/events.py": "llm/retry, llm/retry-started",
    "projection/events.py": "session/title, session/title-llm-request",
    "interop/events.py": "import/record, import/done",
    "integrations/openai_agents.py": "an integration declares its events in its one module",
}
"""Where each event type name is spelled (relative to the package)."""
TEST_DATA_MODULES = {
    "testing/contract.py": "the backend contract is a test suite: it appends wire type names as test data",
}
PACKAGE_VOCABULARIES = ("agent.events", "compaction.events", "llm.events", "projection.events", "interop.events")


def test_core_names_are_plain_strings_equal_to_the_wire_names() -> None:
    for name, wire in NAMES.items():
        value = getattr(events, name)
        assert value == wire and type(value) is str  # the accelerator requires exact str
        assert getattr(agentlog, name) is value
    assert events.CORE_EVENT_TYPES == frozenset(NAMES.values())
    assert frozenset(get_args(events.CoreEventType)) == events.CORE_EVENT_TYPES
    assert events.SURFACE_EVENT_TYPES == {events.USER_MESSAGE, events.ASSISTANT_MESSAGE, events.TOOL_RESULT}
    assert events.CORE_EVENT_TYPES <= events.KNOWN_SESSION_EVENT_TYPES


def test_shared_limits_are_defined_once() -> None:
    assert DEFAULT_MAX_DEPTH == 100_000
    assert MAX_JSON_DEPTH == DEFAULT_MAX_DEPTH - 1
    assert MAX_SAFE_INTEGER == 2**53 - 1
    offenders = []
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        for literal in ("2**53 - 1", "99_999", "= 100_000"):
            if literal in text and path.name not in ("jsonvalue.py", "jsoncodec.py"):
                offenders.append(f"{path.relative_to(SRC)}: {literal}")
    assert offenders == [], offenders


def _looks_like_event_type(value: str) -> bool:
    return "/" in value and all(part and part.replace("-", "").isalpha() for part in value.split("/"))


def _declared_names(path: Path, *, reexported: bool = False) -> set[str]:
    """The event type names a vocabulary module assigns at module level (``NAME: Final = "x/y"``); with
    ``reexported``, also the kernel's names it binds (``NAME: Final = _core.NAME``), which it does not own."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Constant) and isinstance(value.value, str) and _looks_like_event_type(value.value):
            names.add(value.value)
        elif (
            reexported
            and isinstance(value, ast.Attribute)
            and isinstance(value.value, ast.Name)
            and value.value.id == "_core"
        ):
            # a catalog name the kernel spells (written by more than one layer), re-exported by its package
            names.add(getattr(events, value.attr))
    return names


def _known_event_types() -> set[str]:
    import agentlog.interop.transcripts  # noqa: F401  # registers the import types

    known = set(events.KNOWN_SESSION_EVENT_TYPES) | {events.REQUEST_HEADER_DELTA} | set(events.event_types.types())
    for rel in VOCABULARY_MODULES:
        known |= _declared_names(SRC / rel)
    return known


def _event_type_literals(path: Path, known: set[str], label: str) -> list[str]:
    """Known event type names spelled as a whole string constant in code.

    Documentation is not code: docstrings and other bare string statements are skipped, and so are the
    arguments of ``Literal[...]`` (a type cannot name a constant). Comments never reach the tree.
    """
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skipped.add(id(node.value))
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal":
            skipped.update(id(inner) for inner in ast.walk(node.slice))
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value in known
            and id(node) not in skipped
        ):
            found.append(f"{label}:{node.lineno}: {node.value!r}")
    return found


def test_event_type_names_are_spelled_only_in_their_vocabulary_module() -> None:
    known = _known_event_types()
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in VOCABULARY_MODULES or rel in TEST_DATA_MODULES:
            continue
        found.extend(_event_type_literals(path, known, rel))
    assert not found, "spell these with the vocabulary module's name:\n" + "\n".join(found)


def test_the_scan_sees_a_literal_in_code_and_not_in_documentation(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        '"""Writes ``llm/retry``."""\n'
        "from typing import Literal\n"
        'Kind = Literal["llm/retry"]\n'
        "def f(session):\n"
        '    """llm/retry"""\n'
        '    session.append("llm/retry", {})  # llm/retry\n'
        '    return "compaction/prune" == session\n'
    )
    found = _event_type_literals(probe, _known_event_types(), "probe.py")
    assert found == ["probe.py:6: 'llm/retry'", "probe.py:7: 'compaction/prune'"]


def test_package_event_names_are_known_to_every_reader() -> None:
    """A package's log-only types are in the kernel's catalog (a reader refuses unknown types), the
    import types are registered as ignorable, and each name is declared by exactly one module."""
    import importlib

    import agentlog.interop.transcripts  # noqa: F401  # registers the import types

    owners: dict[str, str] = {}
    for rel in VOCABULARY_MODULES:
        for name in _declared_names(SRC / rel):
            assert name not in owners, f"{name} is declared by {owners[name]} and {rel}"
            owners[name] = rel
    for module_name in PACKAGE_VOCABULARIES:
        module = importlib.import_module(f"agentlog.{module_name}")
        names = {getattr(module, n) for n in module.__all__ if isinstance(getattr(module, n), str)}
        assert names and names == _declared_names(SRC / (module_name.replace(".", "/") + ".py"), reexported=True)
        for name in names:
            assert type(name) is str  # the accelerator requires exact str
            if module_name == "interop.events":
                assert events.event_types.is_ignorable(name)
            else:
                assert name in events.KNOWN_SESSION_EVENT_TYPES


def _own_private_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
            ):
                names.update(c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return names


def test_kernel_modules_touch_only_their_own_private_attributes() -> None:
    problems = []
    for path in sorted((SRC / "kernel").glob("*.py")):
        tree = ast.parse(path.read_text())
        imported: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported |= {a.asname or a.name for a in node.names}
        own = _own_private_names(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            base = node.value
            if isinstance(base, ast.Name) and (base.id in ("self", "cls") or base.id in imported):
                continue
            if node.attr not in own:
                problems.append(f"kernel/{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert not problems, "\n".join(problems)
