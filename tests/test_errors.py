"""Issue 8: every public error lives in ``agentlog.errors``, each code names exactly one class, and the CLI
prints only class codes, through one renderer.

The rule (the module docstring of :mod:`agentlog.errors` says it in prose):

* a class that declares ``code`` owns it, and no two classes declare the same code;
* a class whose instances may carry other codes lists them in ``codes``; a listed code is either owned by
  a class (it then means what that class means) or listed by this class alone;
* a refinement declares no code and keeps its parent's (the four named in ``REFINEMENTS``).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest
import typer

import agentlog
import agentlog.errors as errors
from agentlog.errors import AgentlogError

SRC = Path(agentlog.__file__).resolve().parent
CLI = SRC / "cli"

REFINEMENTS = {"ReaderLimitError", "FrameTooLargeError", "AppendRollbackError", "EncodeError"}
"""Classes that keep their parent's code on purpose (callers branch on the family's code)."""

OPEN = {"AgentlogError", "LlmError", "TurnFailedError"}
"""Classes whose instance codes are not a closed set (see the module docstring)."""

MOVED = {
    "agentlog.agent.loop": [
        "AgentError",
        "ReconstructionError",
        "TurnAborted",
        "StepLimitError",
        "AgentNotDurableError",
        "InvalidAgentOptionError",
        "OpenTurnError",
    ],
    "agentlog.agent.tools": ["ToolConflictError", "ToolDefinitionError", "ToolSchedulerError"],
    "agentlog.agent.inbox": ["InboxError"],
    "agentlog.llm.types": ["LlmError", "MissingApiKeyError"],
    "agentlog.llm.replay": ["ReplayError", "ReplayMismatchError", "ReplayExhaustedError", "ReplayRecordingError"],
    "agentlog.kernel.jsoncodec": ["JsonDecodeError"],
    "agentlog.kernel.session": ["SeqOutOfRangeError"],
    "agentlog.persistence.coordinator": ["InvalidOptionError"],
    "agentlog.persistence.jsonl._scanner": ["ReaderLimitError"],
    "agentlog.persistence.jsonl._zstdframes": ["FrameTooLargeError"],
    "agentlog.persistence.jsonl.backend": ["AppendRollbackError"],
    "agentlog.persistence.sqlite._codec": ["EncodeError"],
}
"""Where each moved class was defined before issue 8: the old import path keeps working."""


def _error_classes() -> list[type[AgentlogError]]:
    return [
        obj
        for obj in vars(errors).values()
        if isinstance(obj, type) and issubclass(obj, AgentlogError) and obj.__module__ == errors.__name__
    ]


def _all_modules() -> list[str]:
    names = ["agentlog"]
    for info in pkgutil.walk_packages(agentlog.__path__, "agentlog."):
        if info.name.rsplit(".", 1)[-1] != "__main__":
            names.append(info.name)
    return names


def _owners() -> dict[str, type[AgentlogError]]:
    """Code → the one class that owns it (declares it, or alone lists it in ``codes``)."""
    owners: dict[str, type[AgentlogError]] = {}
    for cls in _error_classes():
        if "code" in cls.__dict__:
            owners[cls.code] = cls
    listed: dict[str, list[type[AgentlogError]]] = {}
    for cls in _error_classes():
        for code in cls.__dict__.get("codes", ()):
            if code not in owners:
                listed.setdefault(code, []).append(cls)
    for code, classes in listed.items():
        assert len(classes) == 1, f"{code} is listed by {[c.__name__ for c in classes]} and owned by none"
        owners[code] = classes[0]
    return owners


def _code_of_error(code: str) -> type[AgentlogError]:
    owners = _owners()
    assert code in owners, f"no class of agentlog.errors has the code {code}"
    return owners[code]


# --- every error class lives in agentlog.errors ---------------------------------------------------------


def test_every_agentlog_error_class_is_defined_in_agentlog_errors() -> None:
    misplaced = set()
    for name in _all_modules():
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if isinstance(obj, type) and issubclass(obj, AgentlogError) and obj.__module__ != "agentlog.errors":
                misplaced.add(f"{name}.{attr} (defined in {obj.__module__})")
    assert not misplaced, misplaced


def test_no_module_but_errors_defines_an_agentlog_error_subclass() -> None:
    """The source check behind the import check: no ``class X(...Error...)`` whose base is ours."""
    ours = {cls.__name__ for cls in _error_classes()}
    found = []
    for path in SRC.rglob("*.py"):
        if path == SRC / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if bases & ours:
                    found.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name}")
    assert not found, found


@pytest.mark.parametrize("module_name", sorted(MOVED))
def test_moved_classes_stay_importable_from_their_old_modules(module_name: str) -> None:
    module = importlib.import_module(module_name)
    for name in MOVED[module_name]:
        assert getattr(module, name) is getattr(errors, name), (module_name, name)


def test_errors_imports_nothing_of_agentlog_at_run_time() -> None:
    tree = ast.parse((SRC / "errors.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            assert not node.level and not (node.module or "").startswith("agentlog"), ast.dump(node)
        if isinstance(node, ast.Import):
            assert not any(alias.name.startswith("agentlog") for alias in node.names)


def test_moved_classes_keep_their_behaviour() -> None:
    from agentlog.llm.types import FAILURE_CODES

    assert errors.LlmError.codes == FAILURE_CODES
    err = errors.LlmError("slow", code="TIMEOUT", status=504, provider_retry_after_ms=10, request_id="r")
    facts = {"message": "slow", "code": "TIMEOUT", "status": 504, "providerRetryAfterMs": 10, "requestId": "r"}
    assert err.failure == facts
    assert errors.LlmError.from_failure(err.failure).failure == err.failure
    assert errors.MissingApiKeyError("none").code == "MISSING_API_KEY"
    assert errors.ReaderLimitError("x", offset=3).code == "SESSION_CORRUPT"
    assert errors.FrameTooLargeError("x").code == "SESSION_CORRUPT"
    rollback = errors.AppendRollbackError("x", (OSError(), OSError()))
    assert rollback.code == "PERSISTENCE_ERROR" and len(rollback.errors) == 2
    assert isinstance(errors.EncodeError("x"), TypeError) and errors.EncodeError("x").code == "PERSISTENCE_ERROR"
    assert isinstance(errors.SeqOutOfRangeError("x"), IndexError)
    assert errors.AsyncFlushInLoopError("x").code == "ASYNC_FLUSH_IN_LOOP"
    assert errors.AsyncFlushInLoopError.__bases__ == (AgentlogError,)  # was a plain AgentlogError


# --- codes --------------------------------------------------------------------------------------------


def test_declared_codes_are_unique() -> None:
    seen: dict[str, str] = {}
    for cls in _error_classes():
        if "code" in cls.__dict__:
            assert cls.code not in seen, f"{cls.__name__} and {seen[cls.code]} both declare {cls.code}"
            seen[cls.code] = cls.__name__
    assert len(seen) >= 50


def test_only_the_named_refinements_inherit_their_code() -> None:
    inheriting = {cls.__name__ for cls in _error_classes() if "code" not in cls.__dict__}
    assert inheriting == REFINEMENTS


def test_instance_code_sets_map_each_code_to_one_class() -> None:
    owners = _owners()  # asserts that an unowned listed code is listed by one class only
    for cls in _error_classes():
        for code in cls.__dict__.get("codes", ()):
            owner = owners[code]
            assert owner is cls or code == owner.__dict__.get("code"), (cls.__name__, code)


def _called_class(node: ast.Call) -> type[AgentlogError] | None:
    name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
    obj = getattr(errors, name, None) if name else None
    return obj if isinstance(obj, type) and issubclass(obj, AgentlogError) else None


def _literal_code(node: ast.Call, cls: type[AgentlogError]) -> ast.expr | None:
    for keyword in node.keywords:
        if keyword.arg == "code":
            return keyword.value
    params = [p for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self"]
    for index, param in enumerate(params):
        if param.name == "code" and param.kind is param.POSITIONAL_OR_KEYWORD and index < len(node.args):
            return node.args[index]
    return None


def test_codes_given_at_raise_sites_are_in_the_class_set() -> None:
    problems = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or (cls := _called_class(node)) is None:
                continue
            value = _literal_code(node, cls)
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                where = f"{path.relative_to(SRC)}:{node.lineno}"
                if cls.__name__ in OPEN - {"LlmError"}:
                    problems.append(f"{where}: inline code {value.value} on {cls.__name__}")
                elif value.value != cls.code and value.value not in cls.codes:
                    problems.append(f"{where}: {value.value} is not a code of {cls.__name__}")
    assert not problems, problems


def test_storage_codes_in_the_sources_are_storage_access_codes() -> None:
    source = "".join(p.read_text(encoding="utf-8") for p in SRC.rglob("*.py") if p.name != "errors.py")
    used = set(re.findall(r'"(STORAGE_[A-Z_]+)"', source))
    assert used and used <= errors.StorageAccessError.codes, used - errors.StorageAccessError.codes


def test_relayed_and_demo_codes() -> None:
    from agentlog.agent.loop import DEFAULT_RETRY_CODES
    from agentlog.cli.demo import DemoFailure

    # A turn's recorded error code is an LlmError code or another class's code; the CLI relays it.
    assert errors.TurnFailedError.relays_codes
    for code in (*DEFAULT_RETRY_CODES, "UNKNOWN", "MAX_STEPS_EXCEEDED", "RECONSTRUCTION_DESYNC"):
        _code_of_error(code)
    # The demo's own failure code names no error class.
    assert DemoFailure("x").code not in _owners()


def test_the_docstring_draws_the_hierarchy() -> None:
    doc = errors.__doc__ or ""
    tree = doc[doc.index("**Hierarchy**") :].split("::", 1)[1].split("\n\n", 2)[1]
    stack: list[tuple[int, str]] = []
    drawn: dict[str, str | None] = {}
    for line in tree.splitlines():
        match = re.match(r"^(?P<lead>[\s│├└─]*)(?P<name>[A-Z][a-z]\w*)\b(?P<rest>.*)$", line)
        if match is None:
            continue
        depth = len(match["lead"])
        while stack and stack[-1][0] >= depth:
            stack.pop()
        drawn[match["name"]] = stack[-1][1] if stack else None
        stack.append((depth, match["name"]))
        cls = getattr(errors, match["name"])
        if "code" in cls.__dict__:
            assert f"[{cls.code}" in match["rest"], line
        else:
            assert "(refinement)" in match["rest"], line
    classes = {cls.__name__: cls for cls in _error_classes()}
    assert set(drawn) == set(classes), set(drawn) ^ set(classes)
    for name, parent in drawn.items():
        if parent is not None:
            assert classes[name].__bases__[0] is classes[parent], (name, parent)


# --- the CLI ------------------------------------------------------------------------------------------


def _cli_trees() -> list[tuple[Path, ast.AST]]:
    return [(path, ast.parse(path.read_text(encoding="utf-8"))) for path in sorted(CLI.glob("*.py"))]


def test_the_cli_invents_no_codes() -> None:
    """No code string literal in the CLI: every code it prints is a typed error's code."""
    problems = []
    for path, tree in _cli_trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                for keyword in node.keywords:
                    if keyword.arg == "code" and isinstance(keyword.value, ast.Constant):
                        if isinstance(keyword.value.value, str):
                            problems.append(f"{path.name}:{node.lineno} code={keyword.value.value!r}")
                if _called_class(node) is AgentlogError and (node.keywords or len(node.args) > 1):
                    problems.append(f"{path.name}:{node.lineno} AgentlogError with a code")
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "code" and isinstance(value, ast.Constant):
                        problems.append(f"{path.name}:{node.lineno} {{'code': {value.value!r}}}")
    assert not problems, problems


def test_command_modules_report_errors_only_through_render_error() -> None:
    """Outside the renderer, no CLI module writes an ``{"error": ...}`` document or an ``error [CODE]``
    line of its own (the demo's step-aware report and export --partial's damage report excepted)."""
    from agentlog.cli import render

    assert callable(render.render_error)
    assert not hasattr(render, "_fail") and not hasattr(render, "_fail_with")
    for path in CLI.glob("*.py"):
        if path.name in {"render.py", "demo.py"}:
            continue
        text = path.read_text(encoding="utf-8")
        assert "[bold red]error[/]" not in text, path.name
        assert '{"error": {"code": err.code' not in text, path.name


@pytest.mark.parametrize(
    "err",
    [
        errors.TurnAborted("interrupted: the turn was closed as aborted (the log stays valid)"),
        errors.TurnBlockedError("the turn was blocked"),
        errors.TurnFailedError("rate limited", code="RATE_LIMIT"),
        errors.SessionNotFoundError('session "x" not found'),
    ],
)
def test_render_error_keeps_the_shape_and_exit_code(err: AgentlogError, capsys: pytest.CaptureFixture[str]) -> None:
    import orjson

    from agentlog.cli.render import render_error

    with pytest.raises(typer.Exit) as exited:
        render_error(err, True)
    assert exited.value.exit_code == 1
    document = orjson.loads(capsys.readouterr().err)
    assert document == {"error": {"code": err.code, "message": str(err)}}
    _code_of_error(err.code)
    with pytest.raises(typer.Exit):
        render_error(err, False)
    assert f"[{err.code}]" in capsys.readouterr().err
