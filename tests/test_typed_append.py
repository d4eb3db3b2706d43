"""Session.append's typed forms: plain ``mypy --strict`` reports a core type with the wrong data, a surface
type without its intent or with a wrong one, and a non-core name passed to ``append``; it accepts correct
core calls and plugin/extension events appended with ``append_custom``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import agentlog

GOOD = """
from agentlog import APPEND, Session, StepData, TurnStartData, canonical_header, event_types, replace_op, text_delta
from agentlog import user_message
from agentlog.llm.types import finish_chunk

event_types.register("plugin/custom")
session = Session.create("s")
good_start: TurnStartData = {"turn": 1}
session.append("turn/start", good_start)
session.append("turn/start", {"turn": 1})
session.append("step/start", StepData(turn=1, step=1))
session.append("user/message", user_message("hi"), {"surfaceOp": APPEND})
session.append("user/message", user_message("hi"), {"surfaceOp": replace_op(3, 3), "sourceEventSeqs": [3]})
session.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": text_delta(0, "hi")})
session.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": finish_chunk("stop")})  # an llm StreamChunk
header = canonical_header({"config": {"provider": "p", "model": "m"}})
session.append("request/header", {"header": header, "reason": "initial"})
session.append("step/end", {"turn": 1, "step": 1})
session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
session.append_custom("plugin/custom", {"anything": [1, "two"]})
session.append_custom("plugin/custom", {"note": "with a surface op"}, None)
name: str = "plugin/custom"
session.append_custom(name, None)
"""

BAD = """
from agentlog import Session, user_message

session = Session.create("s")
session.append("turn/start", {"turn": "1"})  # BAD: wrong payload type
session.append("turn/end", {"turn": 1})  # BAD: a payload key missing
session.append("tool/call", {"turn": 1, "step": 1, "callId": "c", "name": "n"})  # BAD: a key missing
session.append("step/start", {"turn": 1, "step": 1, "stp": 2})  # BAD: an unknown key
session.append("user/message", user_message("hi"))  # BAD: a surface type without its intent
session.append("user/message", user_message("hi"), {"surfaceOp": "apend"})  # BAD: a wrong surface op
session.append("tool/result", {"turn": 1}, {"sourceEventSeqs": "3"})  # BAD: wrong data and intent
session.append("turn/start", {"turn": 1}, {"surfaceOp": "append"})  # BAD: an intent on a log-only type
session.append("plugin/custom", {"anything": 1})  # BAD: a non-core name goes through append_custom
"""


def run_plain_mypy(tmp_path: Path, **scripts: str) -> str:
    """Plain ``mypy --strict`` (a subprocess, as a user runs it) over ``scripts``, with this checkout's agentlog."""
    for name, source in scripts.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    env = dict(os.environ, MYPYPATH=str(Path(agentlog.__file__).parents[1]))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(tmp_path / "cache"),
            *(f"{name}.py" for name in scripts),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode in (0, 1), result.stdout + result.stderr  # 2: mypy itself failed
    return result.stdout


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> str:
    return run_plain_mypy(tmp_path_factory.mktemp("typed_append"), good=GOOD, bad=BAD)


def test_plain_mypy_strict_reports_each_wrong_core_append(mypy_output: str) -> None:
    source = textwrap.dedent(BAD)
    bad_lines = {i for i, line in enumerate(source.splitlines(), start=1) if "# BAD" in line}
    flagged = {int(m.group(1)) for m in re.finditer(r"^bad\.py:(\d+): error:", mypy_output, re.M)}
    assert flagged == bad_lines, mypy_output


def test_plain_mypy_strict_reports_wrong_appends_in_short_lines(mypy_output: str) -> None:
    lines = [line for line in mypy_output.splitlines() if line.startswith("bad.py:")]
    assert lines, mypy_output
    long = [line for line in lines if len(line) > 200]
    assert long == [], "\n".join(long)


def test_plain_mypy_strict_accepts_correct_core_and_custom_appends(mypy_output: str) -> None:
    assert [line for line in mypy_output.splitlines() if line.startswith("good.py:")] == [], mypy_output


def test_append_custom_appends_a_registered_type_with_the_checks_of_append() -> None:
    registry = agentlog.EventTypes()
    registry.register("plugin/custom", validator=lambda data: "n" in data)
    session = agentlog.Session.create("s", registry=registry)
    event = session.append_custom("plugin/custom", {"n": 1})
    assert event == {"type": "plugin/custom", "seq": 0, "time": event.time, "data": {"n": 1}}
    assert session.append("plugin/custom", {"n": 2}).data == {"n": 2}  # type: ignore[call-overload]
    with pytest.raises(agentlog.EventDataError):
        session.append_custom("plugin/custom", {"m": 1})
    with pytest.raises(agentlog.errors.UnknownEventTypeError):
        session.append_custom("plugin/unregistered", {})
    with pytest.raises(agentlog.EventDataError):
        session.append_custom("turn/start", {"turn": "1"})  # the core rules hold whichever entry is used
    assert [e.type for e in session.events] == ["plugin/custom", "plugin/custom"]


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
    session = agentlog.Session.create("s")
    with pytest.raises(agentlog.InvalidEventError) as caught:
        session.append("user/message", agentlog.user_message("hi"), agentlog.APPEND)  # type: ignore[call-overload]
    assert str(caught.value) == (
        "session event \"user/message\" surface intent must be a mapping, got 'append' (str): "
        'pass {"surfaceOp": "append"} (the op goes inside the intent mapping)'
    )
    assert session.events == []
