"""Transcript import (Claude Code, Codex CLI) and export: what maps is kept exactly, what does not is kept
as ignorable records and reported, a bad line fails the import with its file and line and leaves nothing
in the store, and a large transcript is imported in bounded memory."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.errors import ConversionError, PersistenceError, TranscriptError
from agentlog.interop.transcripts import IMPORT_DONE, IMPORT_RECORD, export_session, import_transcript
from agentlog.kernel.events import ASSISTANT_MESSAGE, TOOL_CALL, TURN_END, TURN_START
from agentlog.kernel.invariants import check_tool_pairing
from agentlog.kernel.jsonvalue import thaw
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend

from .conftest import Store

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "transcripts"
CLAUDE = FIXTURES / "claude-code.jsonl"
CODEX = FIXTURES / "codex.jsonl"


def _coordinator(root: Path) -> PersistenceCoordinator:
    return PersistenceCoordinator(SessionStore(), JsonlBackend(str(root)))


def _import(root: Path, source: str, path: Path, **options: Any) -> Any:
    coordinator = _coordinator(root)
    try:
        return import_transcript(coordinator, source, path, **options)
    finally:
        coordinator.close()


def _cold_view(root: Path, session_id: str) -> Any:
    """The stored session as a fresh process reads it (every validation layer)."""
    reader = _coordinator(root)
    try:
        return reader.view(session_id)
    finally:
        reader.close()


def _nothing_stored(root: Path) -> None:
    backend = JsonlBackend(str(root))
    try:
        assert backend.list_sessions() == []
    finally:
        backend.close()
    files = [p for p in root.rglob("*") if p.is_file() and p.name != ".lock"] if root.exists() else []
    assert not [p for p in files if "session" in p.name], files


def _texts(message: dict[str, Any]) -> list[Any]:
    return [
        (block["type"], block.get("text") or block.get("name") or block.get("toolCallId"))
        for block in message["content"]
    ]


# --------------------------------------------------------------------------- Claude Code


def test_claude_code__the_conversation_maps_exactly_and_the_rest_is_kept(tmp_path: Path) -> None:
    report = _import(tmp_path, "claude-code", CLAUDE, session_id="cc")
    view = _cold_view(tmp_path, "cc")
    messages = thaw(view.derive_messages().to_list())
    assert [(m["role"], m["source"]["kind"]) for m in messages] == [
        ("user", "user"),
        ("assistant", "model"),
        ("user", "tool"),
        ("assistant", "model"),
        ("user", "user"),
        ("assistant", "model"),
        ("user", "tool"),
        ("assistant", "model"),
    ]
    # the three records of API message msg_01A are one assistant message, in block order
    first = messages[1]
    assert first["id"] == "msg_01A"
    assert first["source"] == {
        "kind": "model",
        "provider": "anthropic",
        "model": "claude-sonnet-4-20250514",
        "replayState": {"anthropic": {"signatures": ["c2lnbmF0dXJl"]}},  # where the Anthropic converter keeps them
    }
    assert first["content"] == [
        {"type": "reasoning", "text": "I should read the file."},
        {"type": "text", "text": "Let me read it."},
        {
            "type": "tool-call",
            "id": "toolu_01",
            "name": "Read",
            "arguments": '{"file_path":"/home/dev/project/notes.txt"}',
        },
    ]
    assert messages[2]["content"] == [
        {
            "type": "tool-result",
            "toolCallId": "toolu_01",
            "content": [{"type": "text", "text": "     1\tthe answer is 42\n"}],
        }
    ]
    assert messages[6]["content"][0]["isError"] is True
    assert messages[4]["content"] == [{"type": "text", "text": "Thanks. Now list the directory."}]
    check_tool_pairing(view.derive_messages(), "cc", view.events)
    events = view.events
    # usage of the merged message is its last record's (Claude Code repeats it per record)
    usage = next(e["data"]["usage"] for e in events if e["type"] == ASSISTANT_MESSAGE)
    assert usage == {"inputTokens": 12, "outputTokens": 30, "cacheReadTokens": 100, "cacheWriteTokens": 0}
    assert [e["data"]["callId"] for e in events if e["type"] == TOOL_CALL] == ["toolu_01", "toolu_02"]
    assert [e["type"] for e in events].count(TURN_START) == 2 == [e["type"] for e in events].count(TURN_END)
    # unmapped records, verbatim, ignorable, with their line
    kept = [e for e in events if e["type"] == IMPORT_RECORD]
    assert all(e["ignorable"] is True for e in kept)
    assert [(e["data"]["line"], e["data"]["record"]["type"]) for e in kept] == [(8, "system"), (10, "user")]
    assert kept[1]["data"]["record"]["isSidechain"] is True  # the summary became the title (test_claude_import_titles)
    assert events[-1]["type"] == IMPORT_DONE and events[-1]["data"]["lines"] == 14
    # times come from the records' timestamps and never go back
    times = [e["time"] for e in events]
    assert times == sorted(times) and times[-1] == 1748779208000
    assert view.header["cwd"] == "/home/dev/project" and view.header["createdAt"] == 1748779200000
    assert view.request_header() == {"config": {"provider": "anthropic", "model": "claude-sonnet-4-20250514"}}
    assert report.to_json() == {
        "sessionId": "cc",
        "source": "claude-code",
        "path": str(CLAUDE),
        "lines": 14,
        "bytes": CLAUDE.stat().st_size,
        "events": len(events),
        "turns": 2,
        "messages": {"assistant": 4, "tool": 2, "user": 2},
        "keptRecords": {"system": 1, "user (sidechain)": 1},
        "dropped": {"user block image": 1},
        "synthesizedToolResults": 0,
        "parentSession": None,
    }


def _anthropic_of_fixture(path: Path) -> list[dict[str, Any]]:
    """The fixture's main conversation as Anthropic messages (records merged by API message id), minus
    what the report says does not map (images)."""
    out: list[dict[str, Any]] = []
    last_id = None
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        if record.get("type") not in ("user", "assistant") or record.get("isSidechain"):
            continue
        message = record["message"]
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        cleaned = []
        for block in blocks:
            if block["type"] == "image":
                continue
            if block["type"] == "tool_result":
                if isinstance(block["content"], str):
                    block["content"] = [{"type": "text", "text": block["content"]}]
                block = {k: block[k] for k in ("type", "tool_use_id", "content", "is_error") if k in block}
            cleaned.append(block)
        if message["role"] == "assistant" and last_id == message.get("id") and out:
            out[-1]["content"].extend(cleaned)
        else:
            out.append({"role": message["role"], "content": cleaned})
        last_id = message.get("id") if message["role"] == "assistant" else None
    return out


def _export(view: Any, fmt: str) -> dict[str, Any]:
    out = io.StringIO()
    export_session(view, fmt, out)
    document = orjson.loads(out.getvalue())
    assert isinstance(document, dict)
    return document


def test_claude_code__import_then_export_to_anthropic_gives_the_transcript_back(tmp_path: Path) -> None:
    _import(tmp_path, "claude-code", CLAUDE, session_id="cc")
    document = _export(_cold_view(tmp_path, "cc"), "anthropic")
    assert document["model"] == "claude-sonnet-4-20250514"
    exported = document["messages"]
    expected = _anthropic_of_fixture(CLAUDE)
    for message in exported:  # the converter writes is_error only when it is known
        for block in message["content"]:
            if block.get("type") == "tool_result" and block.get("is_error") is False:
                del block["is_error"]
    assert exported == expected


# --------------------------------------------------------------------------- Codex


def test_codex__the_rollout_maps_and_its_meta_becomes_the_header(tmp_path: Path) -> None:
    report = _import(tmp_path, "codex", CODEX, session_id="cx")
    view = _cold_view(tmp_path, "cx")
    messages = thaw(view.derive_messages().to_list())
    assert [_texts(m) for m in messages] == [
        [("text", "<environment_context>\n  <cwd>/home/dev/app</cwd>\n</environment_context>")],
        [("text", "How many lines does main.py have?")],
        [("reasoning", "**Counting lines**"), ("tool-call", "shell")],
        [("tool-result", "call_1")],
        [("text", "main.py has 12 lines.")],
        [("text", "Add a docstring.")],
        [("tool-call", "apply_patch")],
        [("tool-result", "call_2")],
        [("text", "Done: main.py has a module docstring.")],
    ]
    assert messages[2]["content"][1]["arguments"] == '{"command":["wc","-l","main.py"]}'
    assert messages[2]["source"] == {"kind": "model", "provider": "openai", "model": "gpt-5-codex"}
    assert view.request_header() == {
        "config": {"provider": "openai", "model": "gpt-5-codex"},
        "system": "You are Codex, a coding agent.",
    }
    assert view.header["cwd"] == "/home/dev/app"
    # the environment context and the prompt are one turn: two turns in all
    assert [e["type"] for e in view.events].count(TURN_START) == 2
    assert report.kept_records == {
        "event_msg token_count": 1,
        "event_msg user_message": 1,
        "session_meta": 1,
        "turn_context": 1,
    }
    assert report.dropped == {"reasoning.encrypted_content": 1}
    check_tool_pairing(view.derive_messages(), "cx", view.events)


def test_codex__import_then_export_to_openai_responses_keeps_every_mapped_item(tmp_path: Path) -> None:
    _import(tmp_path, "codex", CODEX, session_id="cx")
    document = _export(_cold_view(tmp_path, "cx"), "openai-responses")
    assert document["instructions"] == "You are Codex, a coding agent."
    items = document["input"]
    rollout = [json.loads(line)["payload"] for line in CODEX.read_text().splitlines()]
    source_calls = [
        (p["call_id"], p["name"]) for p in rollout if p.get("type") in ("function_call", "custom_tool_call")
    ]
    exported_calls = [(i["call_id"], i["name"]) for i in items if i["type"] == "function_call"]
    assert exported_calls == source_calls
    source_outputs = [p["output"] for p in rollout if p.get("type", "").endswith("_call_output")]
    assert [i["output"] for i in items if i["type"] == "function_call_output"] == source_outputs
    texts = [
        part["text"]
        for p in rollout
        if p.get("type") == "message"
        for part in p["content"]
        if part["type"] in ("input_text", "output_text")
    ]
    exported_texts = [
        text
        for i in items
        if i["type"] == "message"
        for text in ([i["content"]] if isinstance(i["content"], str) else [part["text"] for part in i["content"]])
    ]
    assert exported_texts == texts


def test_codex__the_older_layout_is_read_too(tmp_path: Path) -> None:
    path = tmp_path / "rollout-old.jsonl"
    lines = [
        {"id": "old-1", "timestamp": "2025-05-01T10:00:00Z", "instructions": "Be brief."},
        {"record_type": "state"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = _import(tmp_path / "store", "codex", path, session_id="old")
    view = _cold_view(tmp_path / "store", "old")
    assert [_texts(m) for m in thaw(view.derive_messages().to_list())] == [[("text", "hi")], [("text", "hello")]]
    assert report.kept_records == {"record_type": 1, "session meta": 1}
    assert view.header["createdAt"] == 1746093600000


# --------------------------------------------------------------------------- export formats


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses", "anthropic", "sharegpt"])
def test_export__every_format_is_one_json_document_with_the_conversation(tmp_path: Path, fmt: str) -> None:
    _import(tmp_path, "claude-code", CLAUDE, session_id="cc")
    document = _export(_cold_view(tmp_path, "cc"), fmt)
    key = {"openai-chat": "messages", "openai-responses": "input", "anthropic": "messages", "sharegpt": "conversations"}
    assert len(document[key[fmt]]) >= 8


def test_export__what_a_format_cannot_hold_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """Codex's apply_patch input is kept verbatim (not JSON): Anthropic's tool_use input must be an object."""
    _import(tmp_path, "codex", CODEX, session_id="cx")
    out = io.StringIO()
    with pytest.raises(ConversionError, match="not a JSON object") as caught:
        export_session(_cold_view(tmp_path, "cx"), "anthropic", out)
    assert caught.value.index == 6 and out.getvalue() == ""


def test_export__sharegpt_turns(tmp_path: Path) -> None:
    _import(tmp_path, "claude-code", CLAUDE, session_id="cc")
    document = _export(_cold_view(tmp_path, "cc"), "sharegpt")
    assert [turn["from"] for turn in document["conversations"]] == [
        "human",
        "gpt",
        "function_call",
        "observation",
        "gpt",
        "human",
        "function_call",
        "observation",
        "gpt",
    ]
    call = json.loads(document["conversations"][2]["value"])
    assert call == {"name": "Read", "arguments": {"file_path": "/home/dev/project/notes.txt"}}


def test_export__an_unknown_format_is_refused(tmp_path: Path) -> None:
    _import(tmp_path, "codex", CODEX, session_id="cx")
    with pytest.raises(ConversionError, match="unknown export format"):
        export_session(_cold_view(tmp_path, "cx"), "markdown", io.StringIO())


# --------------------------------------------------------------------------- round trip property

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=30)
_input = st.dictionaries(
    st.text(min_size=1, max_size=5), st.one_of(st.integers(-1000, 1000), _text, st.booleans()), max_size=3
)


@st.composite
def _conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Anthropic-shaped conversations: prompts, answers with thinking/text/tool_use, tool results."""
    messages: list[dict[str, Any]] = []
    calls = 0
    for _ in range(draw(st.integers(1, 4))):
        messages.append({"role": "user", "content": [{"type": "text", "text": draw(_text)}]})
        for _ in range(draw(st.integers(1, 3))):
            blocks: list[dict[str, Any]] = []
            if draw(st.booleans()):
                blocks.append({"type": "thinking", "thinking": draw(_text)})
            blocks.append({"type": "text", "text": draw(_text)})
            ids = []
            for _ in range(draw(st.integers(0, 2))):
                calls += 1
                ids.append(f"toolu_{calls}")
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": ids[-1],
                        "name": draw(st.sampled_from(["Read", "Bash"])),
                        "input": draw(_input),
                    }
                )
            messages.append({"role": "assistant", "content": blocks})
            if not ids:
                break
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": [{"type": "text", "text": draw(_text)}],
                    "is_error": draw(st.booleans()),
                }
                for call_id in ids
            ]
            messages.append({"role": "user", "content": results})
    return messages


def _claude_lines(messages: list[dict[str, Any]], split: bool) -> Iterator[dict[str, Any]]:
    for index, message in enumerate(messages):
        stamp = f"2025-06-01T12:{index // 60:02d}:{index % 60:02d}.000Z"
        if message["role"] == "assistant":
            parts = [[block] for block in message["content"]] if split else [message["content"]]
            for part in parts:
                body = {"id": f"msg_{index}", "role": "assistant", "model": "claude-x", "content": part}
                yield {"type": "assistant", "uuid": f"a{index}-{id(part)}", "timestamp": stamp, "message": body}
        else:
            yield {"type": "user", "uuid": f"u{index}", "timestamp": stamp, "message": message}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conversation=_conversations(), split=st.booleans())
def test_round_trip__claude_code_import_then_anthropic_export_is_the_identity(
    tmp_path_factory: pytest.TempPathFactory, conversation: list[dict[str, Any]], split: bool
) -> None:
    root = tmp_path_factory.mktemp("rt")
    path = root / "t.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in _claude_lines(conversation, split)))
    report = _import(root / "store", "claude-code", path, session_id="rt")
    assert report.dropped == {} and report.kept_records == {} and report.synthesized_results == 0
    exported = _export(_cold_view(root / "store", "rt"), "anthropic")["messages"]
    assert exported == conversation


# --------------------------------------------------------------------------- bad input


def _write(path: Path, lines: list[str], *, newline_at_end: bool = True) -> Path:
    path.write_text("\n".join(lines) + ("\n" if newline_at_end else ""))
    return path


def _good_lines(n: int) -> list[str]:
    return CLAUDE.read_text().splitlines()[:n]


@pytest.mark.parametrize(
    ("bad", "line", "match"),
    [
        ("{not json", 6, "line 6 is not JSON"),
        ("[1, 2]", 6, "line 6 is not a JSON object"),
        ('{"type": "assistant", "uuid": "x"}', 6, 'line 6 is a "assistant" record without a "message" object'),
        ('{"type": "user", "message": {"role": "user", "content": 7}}', 6, "message.content is not a string or a list"),
        (
            '{"type": "user", "message": {"role": "user", "content": ["text"]}}',
            6,
            "has a content block at index 0 that is not an object",
        ),
        ('{"type": "system", "n": -0.0}', 6, "line 6 maps to an event agentlog refuses"),
        ('{"type": "system", "n": 18014398509481984}', 6, "maps to an event agentlog refuses"),
    ],
)
def test_bad_line__names_file_and_line_and_nothing_is_written(tmp_path: Path, bad: str, line: int, match: str) -> None:
    path = _write(tmp_path / "t.jsonl", [*_good_lines(5), bad, *_good_lines(14)[5:]])
    store = tmp_path / "store"
    with pytest.raises(TranscriptError, match=match) as caught:
        # tiny batches: without the check pass, earlier batches would already be on disk
        _import(store, "claude-code", path, session_id="bad", batch_bytes=1, batch_events=1)
    assert caught.value.line == line and caught.value.path == str(path) and caught.value.code == "TRANSCRIPT_INVALID"
    assert str(path) in str(caught.value)
    _nothing_stored(store)


def test_a_torn_last_line_of_a_live_transcript_is_dropped_with_a_note(tmp_path: Path) -> None:
    lines = _good_lines(14)
    path = tmp_path / "t.jsonl"
    torn = lines[-1][: len(lines[-1]) // 2]
    path.write_text("\n".join(lines) + "\n" + torn)
    store = tmp_path / "store"
    report = _import(store, "claude-code", path, session_id="live", batch_bytes=1)
    whole = _import(tmp_path / "other", "claude-code", CLAUDE, session_id="whole")
    assert report.torn_last_line == 15
    document = report.to_json()
    assert document["tornLastLine"] == {"line": 15, "bytes": len(torn.encode())}
    assert document["lines"] == 15 and document["bytes"] == path.stat().st_size
    assert (report.events, report.messages) == (whole.events, whole.messages)  # the first 14 lines, all of them


def test_a_last_line_without_its_newline_that_is_whole_is_imported(tmp_path: Path) -> None:
    lines = _good_lines(14)
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines))
    report = _import(tmp_path / "store", "claude-code", path, session_id="whole")
    assert report.torn_last_line is None and "tornLastLine" not in report.to_json()
    assert report.lines == 14


def test_a_truncated_line_before_the_last_is_still_refused(tmp_path: Path) -> None:
    lines = _good_lines(14)
    path = _write(tmp_path / "t.jsonl", [*lines[:5], lines[5][: len(lines[5]) // 2], *lines[6:]])
    with pytest.raises(TranscriptError, match="line 6 is not JSON") as caught:
        _import(tmp_path / "store", "claude-code", path, session_id="bad", batch_bytes=1)
    assert caught.value.line == 6
    _nothing_stored(tmp_path / "store")


def test_bad_line__codex_shapes(tmp_path: Path) -> None:
    good = CODEX.read_text().splitlines()
    bad = '{"type": "response_item", "payload": {"type": "function_call", "name": "shell", "call_id": 3}}'
    path = _write(tmp_path / "t.jsonl", [*good[:6], bad, *good[6:]])
    with pytest.raises(TranscriptError, match="line 7 is a function_call without a string call_id") as caught:
        _import(tmp_path / "store", "codex", path, session_id="bad", batch_bytes=1)
    assert caught.value.line == 7
    _nothing_stored(tmp_path / "store")


def test_a_final_line_without_newline_that_parses_is_fine(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", _good_lines(14), newline_at_end=False)
    report = _import(tmp_path / "store", "claude-code", path, session_id="ok")
    assert report.lines == 14


def test_an_unanswered_tool_call_is_closed_with_an_error_result_and_reported(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", _good_lines(5))  # ends after the tool_use record
    report = _import(tmp_path / "store", "claude-code", path, session_id="open")
    assert report.synthesized_results == 1
    view = _cold_view(tmp_path / "store", "open")
    last = thaw(view.derive_messages().to_list())[-1]
    assert last["content"][0]["isError"] is True and last["content"][0]["toolCallId"] == "toolu_01"
    check_tool_pairing(view.derive_messages(), "open", view.events)


def test_an_existing_id_is_refused_and_the_stored_session_kept(tmp_path: Path) -> None:
    _import(tmp_path, "codex", CODEX, session_id="same")
    before = thaw(_cold_view(tmp_path, "same").events.to_list())
    with pytest.raises(PersistenceError, match="already has a persisted log"):
        _import(tmp_path, "claude-code", CLAUDE, session_id="same")
    assert thaw(_cold_view(tmp_path, "same").events.to_list()) == before


def test_an_unknown_format_and_a_missing_file_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match="unknown transcript format"):
        _import(tmp_path, "cursor", CLAUDE)
    with pytest.raises(TranscriptError, match="cannot read the transcript"):
        _import(tmp_path, "codex", tmp_path / "missing.jsonl")
    _nothing_stored(tmp_path)


# --------------------------------------------------------------------------- bounded memory

_GENERATE_AND_IMPORT = r"""
import json, resource, sys
sys.path.insert(0, sys.argv[3])
from import_bench import generate
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.interop.transcripts import import_transcript
path, root, _, megabytes = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
size = generate(__import__("pathlib").Path(path), megabytes)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
coordinator = PersistenceCoordinator(SessionStore(), JsonlBackend(root))
report = import_transcript(coordinator, "claude-code", path, session_id="big", batch_bytes=1 << 20)
coordinator.close()
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"size": size, "grew_kb": after - before, "events": report.events}))
"""


def test_streaming__a_large_transcript_is_imported_in_bounded_memory(tmp_path: Path) -> None:
    """The peak RSS of the importing process grows by a bounded amount, far below the file's size:
    nothing holds the whole transcript (the generator writes it line by line before the import)."""
    benchmarks = str(Path(__file__).resolve().parents[2] / "benchmarks")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _GENERATE_AND_IMPORT,
            str(tmp_path / "big.jsonl"),
            str(tmp_path / "store"),
            benchmarks,
            "40",
        ],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ},
    )
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["size"] >= 40 * 1024 * 1024
    grew_mb = figures["grew_kb"] / 1024
    assert grew_mb < 40, f"peak RSS grew by {grew_mb:.1f} MB while importing a {figures['size'] >> 20} MB transcript"
    view = _cold_view(tmp_path / "store", "big")
    assert len(view.events) == figures["events"]


# --------------------------------------------------------------------------- all or nothing, on every backend


def _long_transcript(path: Path, turns: int, *, tail: bytes = b"") -> Path:
    """A Claude Code transcript of ``turns`` prompt/answer pairs (two lines each), then ``tail``."""
    lines = []
    for i in range(turns):
        stamp = f"2025-06-01T12:{i // 3600 % 60:02d}:{i % 60:02d}.000Z"
        prompt = {"role": "user", "content": f"question {i}"}
        content = [{"type": "text", "text": f"a{i}"}]
        answer = {"id": f"msg_{i}", "role": "assistant", "model": "claude-x", "content": content}
        lines.append({"type": "user", "uuid": f"u{i}", "timestamp": stamp, "message": prompt})
        lines.append({"type": "assistant", "uuid": f"a{i}", "timestamp": stamp, "message": answer})
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines) + tail)
    return path


def _import_into(store: Store, path: Path, **options: Any) -> Any:
    coordinator = PersistenceCoordinator(SessionStore(), store.open())
    try:
        return import_transcript(coordinator, "claude-code", path, **options)
    finally:
        coordinator.close()


def _nothing_in(store: Store) -> None:
    assert store.listed() == []
    assert store.session_files() == []
    assert store.staged_files() == [], "a staged file was left behind"


def _complete(store: Store, session_id: str, events: int) -> None:
    """The session is listed once and holds the whole import, ``import/done`` last."""
    assert store.listed() == [session_id]
    reader = PersistenceCoordinator(SessionStore(), store.open())
    try:
        view = reader.view(session_id)
        assert len(view.events) == events and view.events[-1]["type"] == IMPORT_DONE
    finally:
        reader.close()


def _append_broken_line(path: Path) -> None:
    with path.open("ab") as handle:
        handle.write(b'{"type": "assistant", \n')


def _rewrite_last_line(path: Path) -> None:
    """Same size, one byte changed near the end (beyond what the write pass has read so far)."""
    with path.open("r+b") as handle:
        handle.seek(-20, os.SEEK_END)
        chunk = handle.read(20)
        index = chunk.rindex(b"a")
        handle.seek(-20 + index, os.SEEK_END)
        handle.write(b"b")


def _truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


@pytest.mark.parametrize("change", [_append_broken_line, _rewrite_last_line, _truncate])
def test_a_transcript_changed_while_it_is_imported_is_refused_and_nothing_is_stored(
    store: Store, tmp_path: Path, change: Any
) -> None:
    """The check pass saw a valid file; the file changes after the write pass wrote its first batch."""
    path = _long_transcript(tmp_path / "t.jsonl", 3000)
    changed = []

    def after_batch(written: int) -> None:
        if not changed:
            change(path)
            changed.append(written)

    with pytest.raises(TranscriptError, match="changed while it was being imported") as caught:
        _import_into(store, path, session_id="moving", batch_events=64, batch_bytes=1 << 30, progress=after_batch)
    assert changed == [64] and caught.value.path == str(path)
    _nothing_in(store)


def test_a_broken_line_late_in_a_transcript_stores_nothing(store: Store, tmp_path: Path) -> None:
    path = _long_transcript(tmp_path / "t.jsonl", 5000, tail=b'{"type": "assistant", \n')
    with pytest.raises(TranscriptError, match="line 10001 is not JSON") as caught:
        _import_into(store, path, session_id="late", batch_events=64, batch_bytes=1 << 30)
    assert caught.value.line == 10001
    _nothing_in(store)


def test_nothing_is_listed_until_the_import_is_complete(store: Store, tmp_path: Path) -> None:
    path = _long_transcript(tmp_path / "t.jsonl", 300)
    seen: list[list[str]] = []
    report = _import_into(
        store, path, session_id="whole", batch_events=100, progress=lambda written: seen.append(store.listed())
    )
    assert len(seen) >= 10 and all(listed == [] for listed in seen)
    _complete(store, "whole", report.events)


def test_an_interrupted_import_leaves_nothing_and_the_id_stays_free(store: Store, tmp_path: Path) -> None:
    path = _long_transcript(tmp_path / "t.jsonl", 300)

    def interrupt(written: int) -> None:
        if written >= 300:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _import_into(store, path, session_id="again", batch_events=100, progress=interrupt)
    _nothing_in(store)
    report = _import_into(store, path, session_id="again")
    _complete(store, "again", report.events)


_KILLED_CHILD = r"""
import sys
from agentlog.interop.transcripts import import_transcript
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
kind, root, dsn, schema, path = sys.argv[1:6]
if kind.startswith("jsonl"):
    from agentlog.persistence.jsonl.backend import JsonlBackend
    backend = JsonlBackend(root, compression="zstd" if kind == "jsonl-zstd" else "none")
elif kind == "sqlite":
    from agentlog.persistence.sqlite.backend import SqliteBackend
    backend = SqliteBackend(root + "/sessions.db")
else:
    from agentlog.persistence.postgres import PostgresBackend
    backend = PostgresBackend(dsn, schema=schema)

def report(written):
    if written >= 500:
        sys.stdout.write(f"written {written}\n")
        sys.stdout.flush()
        sys.stdin.readline()  # wait here to be killed

import_transcript(PersistenceCoordinator(SessionStore(), backend), "claude-code", path, session_id="killed",
                  batch_events=100, progress=report)
"""


@pytest.mark.crash
def test_an_import_killed_midway_leaves_no_listed_session(durable_store: Store, tmp_path: Path) -> None:
    """SIGKILL after 500 events were written (the child says so, then waits): nothing is listed, and
    importing the same id again succeeds (no lock, row or file of the dead import is in the way). What
    the dead import staged is at most one unlisted ``*.tmp`` file (PostgreSQL: nothing, the server
    rolled the transaction back), and the next import removes it."""
    store = durable_store
    path = _long_transcript(tmp_path / "t.jsonl", 1000)
    args = [store.kind, str(store.root), store.dsn, store.schema, str(path)]
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_CHILD, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "written 500\n"
        child.kill()
    finally:
        child.wait(timeout=120)
    assert store.listed() == []
    assert store.session_files() == []
    assert len(store.staged_files()) <= (0 if store.kind == "postgres" else 1)
    report = _import_into(store, path, session_id="killed")
    _complete(store, "killed", report.events)
    assert store.staged_files() == []


_OUT_OF_MEMORY_CHILD = r"""
import json, os, resource, sys
from agentlog.interop.transcripts import import_transcript
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
path, root, extra = sys.argv[1], sys.argv[2], int(sys.argv[3])
coordinator = PersistenceCoordinator(SessionStore(), JsonlBackend(root))
with open("/proc/self/statm") as handle:
    used = int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
resource.setrlimit(resource.RLIMIT_AS, (used + extra, resource.RLIM_INFINITY))
try:
    import_transcript(coordinator, "claude-code", path, session_id="big")
    out = {"ok": True}
except BaseException as err:
    out = {"ok": False, "code": getattr(err, "code", type(err).__name__), "message": str(err)}
resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
sys.stdout.write(json.dumps(out) + "\n")
sys.stdout.flush()
os._exit(0)
"""


def test_a_valid_line_too_large_for_the_memory_limit_is_resource_exhausted_not_a_bad_line(tmp_path: Path) -> None:
    """An 8 MB prompt under an address-space limit 40 MB above the child's use: orjson's allocation
    failure (reported as a decode error) is RESOURCE_EXHAUSTED naming the line, and nothing is stored."""
    path = tmp_path / "big-line.jsonl"
    prompt = {"role": "user", "content": "x" * (8 << 20)}
    path.write_bytes(orjson.dumps({"type": "user", "uuid": "u1", "message": prompt}) + b"\n")
    done = subprocess.run(
        [sys.executable, "-c", _OUT_OF_MEMORY_CHILD, str(path), str(tmp_path / "store"), str(40 << 20)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["code"] == "RESOURCE_EXHAUSTED", out
    assert f"{path}:1: out of memory while parsing line 1" in out["message"]
    assert "not a bad line" in out["message"] and "more memory" in out["message"]
    _nothing_stored(tmp_path / "store")


def test_an_import_during_another_import_leaves_the_live_staging_alone(store: Store, tmp_path: Path) -> None:
    """The second import's sweep of abandoned staging files skips the first import's (its writer lives)."""
    first = _long_transcript(tmp_path / "first.jsonl", 300)
    second = _long_transcript(tmp_path / "second.jsonl", 50)
    inner: list[Any] = []

    def import_the_second(written: int) -> None:
        if not inner:
            inner.append(_import_into(store, second, session_id="second"))

    outer = _import_into(store, first, session_id="first", batch_events=100, progress=import_the_second)
    assert sorted(store.listed()) == ["first", "second"]
    pairs = [(outer, "first"), (inner[0], "second")]
    reader = PersistenceCoordinator(SessionStore(), store.open())
    try:
        for report, session_id in pairs:
            view = reader.view(session_id)
            assert len(view.events) == report.events and view.events[-1]["type"] == IMPORT_DONE
    finally:
        reader.close()
    assert store.staged_files() == []


def test_an_in_memory_sqlite_store_is_published_whole_too(tmp_path: Path) -> None:
    from agentlog.persistence.sqlite.backend import SqliteBackend

    path = _long_transcript(tmp_path / "t.jsonl", 300)
    coordinator = PersistenceCoordinator(SessionStore(), SqliteBackend(":memory:"))
    try:
        seen: list[list[str]] = []

        def listed(written: int) -> None:
            seen.append([listing.id for listing in coordinator.list()])

        report = import_transcript(coordinator, "claude-code", path, session_id="m", batch_events=100, progress=listed)
        assert len(seen) >= 10 and all(ids == [] for ids in seen)
        view = coordinator.view("m")
        assert len(view.events) == report.events and view.events[-1]["type"] == IMPORT_DONE

        def interrupt(written: int) -> None:
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            import_transcript(coordinator, "claude-code", path, session_id="n", batch_events=100, progress=interrupt)
        assert [listing.id for listing in coordinator.list()] == ["m"]
    finally:
        coordinator.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    change=st.sampled_from(["append", "rewrite", "truncate"]),
    at_batch=st.integers(1, 6),
    where=st.floats(0.0, 1.0),
)
def test_whenever_the_transcript_changes_the_import_is_the_original_or_nothing(
    tmp_path_factory: pytest.TempPathFactory, change: str, at_batch: int, where: float
) -> None:
    """Change the file after any batch of the write pass, anywhere in it: the import is refused with
    nothing stored, or (a byte rewritten where the write pass had already read) the stored session is
    exactly the import of the file as it was."""
    from agentlog.persistence.memory import MemoryBackend

    root = tmp_path_factory.mktemp("change")
    path = _long_transcript(root / "t.jsonl", 60)
    original = path.read_bytes()
    expected_store = PersistenceCoordinator(SessionStore(), MemoryBackend())
    import_transcript(expected_store, "claude-code", path, session_id="x", batch_events=20)
    expected = thaw(expected_store.view("x").events.to_list())
    offset = min(int(where * len(original)), len(original) - 1)

    def mutate(written: int) -> None:
        if written // 20 != at_batch:
            return
        if change == "append":
            _append_broken_line(path)
        elif change == "truncate":
            os.truncate(path, offset)
        else:
            with path.open("r+b") as handle:
                handle.seek(offset)
                handle.write(b"#" if original[offset : offset + 1] != b"#" else b"$")

    coordinator = PersistenceCoordinator(SessionStore(), MemoryBackend())
    try:
        import_transcript(coordinator, "claude-code", path, session_id="x", batch_events=20, progress=mutate)
    except TranscriptError as err:
        assert "changed while it was being imported" in str(err)
        assert coordinator.list() == []
    else:
        assert change == "rewrite" or at_batch * 20 >= len(expected)  # the change came after the last batch
        assert thaw(coordinator.view("x").events.to_list()) == expected
