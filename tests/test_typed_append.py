"""Session.append's typed forms: mypy flags a core type with the wrong data or a surface type without
its intent, and accepts correct core calls and registered custom types (issue 8)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import mypy.api

import agentlog

SNIPPET = '''
from agentlog import Session, StepData, TurnStartData, user_message

session = Session.create("s")
good_start: TurnStartData = {"turn": 1}
session.append("turn/start", good_start)
session.append("turn/start", {"turn": 1})
session.append("step/start", StepData(turn=1, step=1))
session.append("user/message", user_message("hi"), {"surfaceOp": "append"})
session.append("plugin/custom", {"anything": [1, "two"]})
session.append("turn/start", {"turn": "1"})  # BAD
session.append("user/message", user_message("hi"))  # BAD
session.append("turn/end", {"turn": 1})  # BAD
session.append("tool/call", {"turn": 1, "step": 1, "callId": "c", "name": "n"})  # BAD
'''


def test_mypy_flags_exactly_the_wrong_core_appends(tmp_path: Path) -> None:
    source = textwrap.dedent(SNIPPET)
    path = tmp_path / "user_code.py"
    path.write_text(source)
    stdout, stderr, status = mypy.api.run(
        [
            "--strict",
            "--enable-error-code",
            "deprecated",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-error-summary",
            "--hide-error-context",
            str(path),
        ]
    )
    bad_lines = {i for i, line in enumerate(source.splitlines(), start=1) if line.endswith("# BAD")}
    flagged = {int(m.group(1)) for m in re.finditer(r"user_code\.py:(\d+): error:", stdout)}
    assert flagged == bad_lines, stdout + stderr
    assert status == 1


def test_data_typeddicts_importable_from_agentlog() -> None:
    for name in (
        "TurnStartData",
        "TurnEndData",
        "StepData",
        "AssistantChunkData",
        "AssistantMessageData",
        "ToolCallData",
        "ToolResultData",
        "TodoWriteData",
        "RequestHeaderData",
        "RequestContextData",
        "SurfaceIntent",
    ):
        assert name in agentlog.__all__
        assert getattr(agentlog, name).__class__.__name__ == "_TypedDictMeta"


def test_typed_forms_cost_nothing_at_runtime() -> None:
    session = agentlog.Session.create("s")
    event = session.append("turn/start", {"turn": 1})
    assert event.type == agentlog.TURN_START == "turn/start"
    assert type(event.type) is str


def test_an_intent_that_is_not_a_mapping_is_refused_with_the_mapping_to_pass() -> None:
    """``append(..., al.APPEND)`` passes the bare op; the refusal shows the intent mapping that was meant."""
    import pytest

    session = agentlog.Session.create("s")
    with pytest.raises(agentlog.InvalidEventError) as caught:
        session.append("user/message", agentlog.user_message("hi"), agentlog.APPEND)  # type: ignore[call-overload]
    assert str(caught.value) == (
        'session event "user/message" surface intent must be a mapping, got \'append\' (str): '
        'pass {"surfaceOp": "append"} (the op goes inside the intent mapping)'
    )
    assert session.events == []
