"""One vocabulary (issue 8): core event type names and shared limits are defined once and used by name;
kernel modules touch only their own private attributes."""

from __future__ import annotations

import ast
import io
import tokenize
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
# Modules that still spell some core type names as literals: none left.
NOT_YET_CONVERTED: set[str] = set()


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


def _literal_core_names(path: Path) -> list[str]:
    """Core type names spelled as a whole string literal in code (not in ``Literal[...]``)."""
    source = path.read_text()
    tree = ast.parse(source)
    in_literal: set[tuple[int, int]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal":
            for inner in ast.walk(node.slice):
                if isinstance(inner, ast.Constant):
                    in_literal.add((inner.lineno, inner.col_offset))
    found = []
    wire_names = set(NAMES.values())
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.STRING or len(token.string) < 3 or token.string[0] not in "\"'":
            continue
        if token.string[1:-1] in wire_names and token.start not in in_literal:
            found.append(f"{path.relative_to(SRC)}:{token.start[0]}: {token.string}")
    return found


def test_code_uses_the_names_not_literals() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = str(path.relative_to(SRC))
        if rel == "kernel/events.py" or rel in NOT_YET_CONVERTED:
            continue
        found.extend(_literal_core_names(path))
    assert not found, "\n".join(found)


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
