"""Codex CLI rollouts as Codex writes them (current, autumn-2025 and older layouts): every shell command,
patch and web search is a paired tool call, each response's token usage is on its assistant message,
and a ``compacted`` record is a compaction like agentlog's own (the history shadowed by a checkpoint,
still in the log). The fixtures follow the public descriptions of the rollout format (codex-rs
``protocol``: ``ResponseItem``, ``RolloutItem::Compacted``, ``EventMsg::TokenCount``)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from agentlog.cli import app
from agentlog.compaction.invariants import replay
from agentlog.errors import ConversionError, TranscriptError
from agentlog.interop.transcripts import IMPORT_RECORD, ExportReport, export_session, import_transcript
from agentlog.kernel.events import ASSISTANT_MESSAGE, USER_MESSAGE
from agentlog.kernel.invariants import check_tool_pairing
from agentlog.kernel.jsonvalue import thaw
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "transcripts"
CURRENT = FIXTURES / "codex-current.jsonl"
AUTUMN = FIXTURES / "codex-2025-09.jsonl"
OLDER = FIXTURES / "codex-older.jsonl"

runner = CliRunner()


def _coordinator(root: Path) -> PersistenceCoordinator:
    return PersistenceCoordinator(SessionStore(), JsonlBackend(str(root)))


def _import(root: Path, path: Path, session_id: str) -> Any:
    coordinator = _coordinator(root)
    try:
        return import_transcript(coordinator, "codex", path, session_id=session_id)
    finally:
        coordinator.close()


def _view(root: Path, session_id: str) -> Any:
    reader = _coordinator(root)
    try:
        return reader.view(session_id)
    finally:
        reader.close()


def _payloads(path: Path) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [record.get("payload", record) for record in records]


def _calls(messages: list[Any]) -> list[tuple[str, str, str]]:
    return [
        (block["id"], block["name"], block["arguments"])
        for message in messages
        for block in message["content"]
        if block["type"] == "tool-call"
    ]


def _result_texts(messages: list[Any]) -> dict[str, tuple[str, Any]]:
    results = {}
    for message in messages:
        for block in message["content"]:
            if block["type"] == "tool-result":
                text = "".join(part["text"] for part in block["content"])
                results[block["toolCallId"]] = (text, block.get("isError"))
    return results


def _full_history(view: Any) -> list[Any]:
    """The messages as they were just before the first checkpoint (the compacted history)."""
    checkpoint = next(e for e in view.events if e["type"] == USER_MESSAGE and isinstance(e.get("surfaceOp"), dict))
    return thaw(view.at(checkpoint["seq"] - 1).derive_messages().to_list())


# --------------------------------------------------------------------------- tool calls


def test_local_shell_call__every_shell_command_of_an_older_rollout_is_a_shell_call_with_its_output(
    tmp_path: Path,
) -> None:
    _import(tmp_path, OLDER, "old")
    view = _view(tmp_path, "old")
    messages = thaw(view.derive_messages().to_list())
    calls = _calls(messages)
    shells = [p for p in _payloads(OLDER) if p.get("type") == "local_shell_call"]
    assert [(call_id, name) for call_id, name, _ in calls] == [(p["call_id"], "shell") for p in shells]
    # the arguments are the action itself, every field kept
    assert [json.loads(arguments) for _, _, arguments in calls] == [p["action"] for p in shells]
    results = _result_texts(messages)
    assert results["call_ls"] == (
        '{"output":"cli.py\\nmain.py\\n","metadata":{"exit_code":0,"duration_seconds":0.0}}',
        None,
    )
    assert results["call_wc"][0].startswith("wc: missing.py: No such file") and results["call_wc"][1] is True
    # the item kind and status stay on the message, by call id
    first = next(m for m in messages if m["role"] == "assistant" and _calls([m]))
    assert first["source"]["replayState"] == {
        "codex": {"items": {"call_ls": {"type": "local_shell_call", "status": "completed"}}}
    }
    check_tool_pairing(view.derive_messages(), "old", view.events)


def test_custom_tool_call__a_patch_and_its_list_output_pair_up(tmp_path: Path) -> None:
    _import(tmp_path, CURRENT, "cur")
    history = _full_history(_view(tmp_path, "cur"))
    patch = next(p for p in _payloads(CURRENT) if p.get("type") == "custom_tool_call")
    assert ("call_B2", "apply_patch", patch["input"]) in _calls(history)
    assert _result_texts(history)["call_B2"] == ("Success. Updated the following files:\nM parser/core.py\n", None)


def test_web_search_call__a_search_call_with_a_placeholder_result_the_report_lists(tmp_path: Path) -> None:
    report = _import(tmp_path, CURRENT, "cur")
    history = _full_history(_view(tmp_path, "cur"))
    search = [call for call in _calls(history) if call[1] == "web_search"]
    assert len(search) == 1
    call_id, _, arguments = search[0]
    assert json.loads(arguments) == {"type": "search", "query": "pytest parametrize ids"}
    text, is_error = _result_texts(history)[call_id]
    assert "not in the Codex transcript" in text and is_error is None
    # the search and the answer after it are one assistant message (one response)
    message = next(m for m in history if any(b.get("id") == call_id for b in m["content"]))
    assert [b["type"] for b in message["content"]] == ["tool-call", "text"]
    assert report.lossy["web_search_call: placeholder result (the transcript holds none)"] == 1


def test_tool_outputs__a_result_without_its_call_is_kept_and_a_bad_output_is_a_bad_line(tmp_path: Path) -> None:
    lines = CURRENT.read_text().splitlines()
    orphan = json.dumps(
        {
            "timestamp": "2025-11-20T09:02:00.000Z",
            "type": "response_item",
            "payload": {"type": "function_call_output", "call_id": "call_nowhere", "output": "x"},
        }
    )
    path = tmp_path / "orphan.jsonl"
    path.write_text("\n".join([*lines, orphan]) + "\n")
    report = _import(tmp_path / "a", path, "o")
    assert report.dropped["function_call_output without its call"] == 1
    bad = json.dumps({"type": "response_item", "payload": {"type": "local_shell_call", "call_id": "c", "action": "ls"}})
    path.write_text("\n".join([*lines[:5], bad, *lines[5:]]) + "\n")
    with pytest.raises(TranscriptError, match=r":6: line 6 is a local_shell_call without an action object") as caught:
        _import(tmp_path / "b", path, "b")
    assert caught.value.line == 6


# --------------------------------------------------------------------------- usage


def test_token_count__each_response_usage_is_on_its_assistant_message(tmp_path: Path) -> None:
    _import(tmp_path, CURRENT, "cur")
    view = _view(tmp_path, "cur")
    lasts = [
        p["info"]["last_token_usage"]
        for p in _payloads(CURRENT)
        if p.get("type") == "token_count" and p.get("info") is not None
    ]
    messages = [e for e in view.events if e["type"] == ASSISTANT_MESSAGE]
    assert len(messages) == len(lasts) == 5
    for event, last in zip(messages, lasts, strict=True):
        assert thaw(event["data"]["usage"]) == {
            "inputTokens": last["input_tokens"] - last["cached_input_tokens"],
            "outputTokens": last["output_tokens"],
            "cacheReadTokens": last["cached_input_tokens"],
            "reasoningTokens": last["reasoning_output_tokens"],
        }
    # the token_count records themselves stay in the log (rate limits, context window)
    kept = [e for e in view.events if e["type"] == IMPORT_RECORD and e["data"]["record"]["type"] == "event_msg"]
    assert sum(e["data"]["record"]["payload"]["type"] == "token_count" for e in kept) == 6


def test_token_count__a_response_without_one_is_unknown_and_reported(tmp_path: Path) -> None:
    report = _import(tmp_path, AUTUMN, "aut")
    view = _view(tmp_path, "aut")
    usage = [e["data"].get("usage") for e in view.events if e["type"] == ASSISTANT_MESSAGE]
    assert [u is not None for u in usage] == [True, True, False, True]  # "kill" had no token_count
    assert report.lossy["assistant message: usage unknown (no token_count for it)"] == 1


def test_token_count__only_totals_are_differenced_and_the_older_bare_usage_is_read(tmp_path: Path) -> None:
    def line(payload: dict[str, Any]) -> str:
        return json.dumps({"timestamp": "2025-08-01T10:00:00Z", "type": "event_msg", "payload": payload})

    def answer(text: str) -> str:
        item = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
        return json.dumps({"timestamp": "2025-08-01T10:00:00Z", "type": "response_item", "payload": item})

    prompt = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    path = tmp_path / "totals.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps({"timestamp": "2025-08-01T10:00:00Z", "type": "response_item", "payload": prompt}),
                answer("one"),
                line(
                    {"type": "token_count", "info": {"total_token_usage": {"input_tokens": 100, "output_tokens": 10}}}
                ),
                line(
                    {"type": "token_count", "info": {"total_token_usage": {"input_tokens": 100, "output_tokens": 10}}}
                ),
                answer("two"),
                line(
                    {"type": "token_count", "info": {"total_token_usage": {"input_tokens": 250, "output_tokens": 30}}}
                ),
                answer("three"),
                line({"type": "token_count", "input_tokens": 40, "cached_input_tokens": 30, "output_tokens": 5}),
            ]
        )
        + "\n"
    )
    report = _import(tmp_path / "s", path, "t")
    view = _view(tmp_path / "s", "t")
    usage = [thaw(e["data"].get("usage")) for e in view.events if e["type"] == ASSISTANT_MESSAGE]
    assert usage == [
        {"inputTokens": 100, "outputTokens": 10},
        {"inputTokens": 150, "outputTokens": 20},
        {"inputTokens": 10, "outputTokens": 5, "cacheReadTokens": 30},
    ]
    assert report.lossy == {"token_count: usage derived from total_token_usage (no last_token_usage)": 2}


def test_token_count__stats_and_ls_show_the_rollout_usage_and_unknown_without_any(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    for path, session_id in ((CURRENT, "cur"), (OLDER, "old")):
        result = runner.invoke(app, ["import", str(path), "--from", "codex", "--store", store, "--id", session_id])
        assert result.exit_code == 0, result.stderr
    total = next(p for p in reversed(_payloads(CURRENT)) if p.get("type") == "token_count")["info"]["total_token_usage"]
    result = runner.invoke(app, ["ls", "--store", store, "--json"])
    rows = {row["id"]: row for row in orjson.loads(result.stdout)["sessions"]}
    assert rows["cur"]["tokenUsage"] == {
        "uncachedInputTokens": total["input_tokens"] - total["cached_input_tokens"],
        "outputTokens": total["output_tokens"],
        "cacheReadTokens": total["cached_input_tokens"],
        "cacheWriteTokens": 0,
    }
    assert rows["cur"]["tokens"] == total["input_tokens"] + total["output_tokens"]
    assert rows["old"]["tokens"] is None and rows["old"]["tokenUsage"] is None  # the older layout has no counts
    result = runner.invoke(app, ["stats", "cur", "--store", store])
    assert f"{total['input_tokens'] + total['output_tokens']:,}" in result.stdout
    result = runner.invoke(app, ["stats", "old", "--store", store])
    assert "unknown" in result.stdout


# --------------------------------------------------------------------------- compaction


def test_compacted__the_history_is_shadowed_by_a_checkpoint_and_stays_in_the_log(tmp_path: Path) -> None:
    report = _import(tmp_path, CURRENT, "cur")
    view = _view(tmp_path, "cur")
    events = list(view.events)
    types = [e["type"] for e in events]
    start = types.index("compaction/start")
    assert types[start : start + 4] == ["compaction/start", "compaction/summary", USER_MESSAGE, "compaction/end"]
    summary_event, checkpoint = events[start + 1], events[start + 2]
    compacted = next(p for p in _payloads(CURRENT) if "replacement_history" in p)
    # the surface before the boundary, all of it, is what the checkpoint shadows
    before = view.at(checkpoint["seq"] - 1)
    shadowed = list(before.surface.nodes)
    assert thaw(summary_event["data"]["shadowedSeqs"]) == shadowed
    assert thaw(checkpoint["surfaceOp"]) == {"op": "replace", "start": shadowed[0], "end": shadowed[-1]}
    assert thaw(checkpoint["sourceEventSeqs"]) == [events[start]["seq"], summary_event["seq"], *shadowed]
    assert thaw(summary_event["data"]["summary"]) == [{"type": "text", "text": compacted["message"]}]
    assert summary_event["data"]["shadowedTokenCount"] > 0
    assert replay(events).compaction is None  # a closed, well-formed bracket (agentlog's compaction invariants)
    # before: the whole history; after: the checkpoint first, then what followed
    history = thaw(before.derive_messages().to_list())
    assert len(history) == 8 and history[1]["content"][0]["text"] == "Why does tests/test_parse.py fail?"
    after = thaw(view.at(checkpoint["seq"]).derive_messages().to_list())
    assert len(after) == 1 and after[0]["source"]["kind"] == "plugin" and after[0]["source"]["plugin"] == "compact"
    # the checkpoint holds what Codex went on from: replacement_history's texts (the summary last)
    kept = [
        part["text"]
        for item in compacted["replacement_history"]
        if item["role"] != "developer"
        for part in item["content"]
    ]
    assert [block["text"] for block in after[0]["content"]] == kept
    assert kept[-1].endswith(compacted["message"])
    final = thaw(view.derive_messages().to_list())
    assert final[0] == after[0] and [m["role"] for m in final[1:]] == ["user", "assistant", "user", "assistant"]
    assert report.lossy["compacted.replacement_history message developer: not in the checkpoint"] == 1
    assert report.messages["checkpoint"] == 1
    check_tool_pairing(view.derive_messages(), "cur", view.events)


def test_compacted__without_replacement_history_the_checkpoint_holds_the_summary(tmp_path: Path) -> None:
    report = _import(tmp_path, AUTUMN, "aut")
    view = _view(tmp_path, "aut")
    compacted = next(p for p in _payloads(AUTUMN) if set(p) == {"message"})
    messages = thaw(view.derive_messages().to_list())
    assert messages[0]["content"] == [{"type": "text", "text": compacted["message"]}]
    assert [m["content"][0].get("text") for m in messages[1:2]] == ["Stop it."]
    assert report.lossy["compacted without replacement_history: the checkpoint holds the summary only"] == 1
    assert report.kept_records["compacted"] == 1  # the record itself stays too
    assert replay(list(view.events)).compaction is None


def test_compacted__with_an_unanswered_call_the_surface_stays_and_the_report_says_so(tmp_path: Path) -> None:
    lines = AUTUMN.read_text().splitlines()
    # the compaction moved before the output of the shell call it would cut in two
    compacted = next(line for line in lines if '"compacted"' in line)
    rest = [line for line in lines if line is not compacted]
    index = next(i for i, line in enumerate(rest) if '"function_call_output"' in line)
    path = tmp_path / "open.jsonl"
    path.write_text("\n".join([*rest[:index], compacted, *rest[index:]]) + "\n")
    report = _import(tmp_path / "s", path, "o")
    view = _view(tmp_path / "s", "o")
    assert not any(e["type"].startswith("compaction/") for e in view.events)
    assert report.lossy["compacted while tool calls were unanswered: kept as import/record, surface not replaced"] == 1
    check_tool_pairing(view.derive_messages(), "o", view.events)


# --------------------------------------------------------------------------- export


def test_export_anthropic__a_patch_call_is_refused_by_default_naming_the_flag(tmp_path: Path) -> None:
    _import(tmp_path, AUTUMN.parent / "codex.jsonl", "cx")
    out = io.StringIO()
    with pytest.raises(ConversionError, match="wrap_arguments") as caught:
        export_session(_view(tmp_path, "cx"), "anthropic", out)
    assert out.getvalue() == "" and caught.value.index == 6


def test_export_anthropic__wrapped_arguments_are_reported_and_the_rest_is_untouched(tmp_path: Path) -> None:
    _import(tmp_path, FIXTURES / "codex.jsonl", "cx")
    out = io.StringIO()
    report = ExportReport("anthropic")
    count = export_session(_view(tmp_path, "cx"), "anthropic", out, wrap_arguments=True, report=report)
    document = json.loads(out.getvalue())
    uses = [
        b for m in document["messages"] if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"
    ]
    patch = next(p for p in _payloads(FIXTURES / "codex.jsonl") if p.get("type") == "custom_tool_call")
    assert uses == [
        {"type": "tool_use", "id": "call_1", "name": "shell", "input": {"command": ["wc", "-l", "main.py"]}},
        {"type": "tool_use", "id": "call_2", "name": "apply_patch", "input": {"input": patch["input"]}},
    ]
    assert count == len(document["messages"])
    assert report.to_json() == {
        "format": "anthropic",
        "items": count,
        "wrappedArguments": [{"message": 6, "callId": "call_2", "name": "apply_patch"}],
    }


def test_export_cli__wrap_arguments_writes_the_document_and_reports_on_stderr(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    args = ["import", str(FIXTURES / "codex.jsonl"), "--from", "codex", "--store", store, "--id", "cx"]
    assert runner.invoke(app, args).exit_code == 0
    refused = runner.invoke(app, ["export", "cx", "--to", "anthropic", "--store", store, "--json"])
    assert refused.exit_code != 0 and "--wrap-arguments" in refused.stderr
    result = runner.invoke(app, ["export", "cx", "--to", "anthropic", "--wrap-arguments", "--store", store])
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["messages"][6]["content"][0]["input"]["input"].startswith("*** Begin Patch")
    assert 'wrapped as {"input": <text>}' in result.stderr and "call_2" in result.stderr
    result = runner.invoke(app, ["export", "cx", "--to", "anthropic", "--wrap-arguments", "--store", store, "--json"])
    assert json.loads(result.stderr.splitlines()[-1])["exportReport"]["wrappedArguments"][0]["callId"] == "call_2"


def test_compacted__show_at_gives_the_history_before_the_checkpoint_and_the_checkpoint_after(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    result = runner.invoke(app, ["import", str(CURRENT), "--from", "codex", "--store", store, "--id", "cur"])
    assert result.exit_code == 0, result.stderr
    assert any(line.startswith("approximate: ") and "web_search_call" in line for line in result.stdout.splitlines())
    view = _view(tmp_path / "store", "cur")
    checkpoint = next(e for e in view.events if e["type"] == USER_MESSAGE and isinstance(e.get("surfaceOp"), dict))
    before = runner.invoke(app, ["show", "cur", "--store", store, "--at", str(checkpoint["seq"] - 1)])
    after = runner.invoke(app, ["show", "cur", "--store", store, "--at", str(checkpoint["seq"])])
    assert "8 messages" in before.stdout.splitlines()[0] and "Why does tests/test_parse.py fail?" in before.stdout
    assert "1 messages" in after.stdout.splitlines()[0]
    assert "Another language model started to solve this problem" in after.stdout
    assert "→ shell_command" not in after.stdout


_placement = st.sampled_from(["before-outputs", "after-outputs", "missing", "repeated"])
_response = st.tuples(st.integers(1, 2), _placement, st.integers(1, 5000), st.integers(0, 900), st.integers(1, 300))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(responses=st.lists(_response, min_size=1, max_size=4), last=_placement)
def test_token_count__wherever_it_comes_each_usage_lands_on_its_own_response(
    tmp_path_factory: pytest.TempPathFactory, responses: list[tuple[int, str, int, int, int]], last: str
) -> None:
    """Codex writes a response's token_count before or after its tool outputs, repeats it, or (a
    cancelled response) writes none: each assistant message gets its own response's usage or none, the
    calls stay paired, and the held steps come out in file order."""
    tmp = tmp_path_factory.mktemp("prop")
    lines: list[Any] = [
        {
            "type": "response_item",
            "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        }
    ]
    expected: list[Any] = []
    total = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0}
    calls = 0

    def count(fresh: int, cached: int, taken: int) -> dict[str, Any]:
        last_usage = {"input_tokens": fresh + cached, "cached_input_tokens": cached, "output_tokens": taken}
        for key, value in last_usage.items():
            total[key] += value
        info = {"total_token_usage": dict(total), "last_token_usage": last_usage}
        return {"type": "event_msg", "payload": {"type": "token_count", "info": info}}

    shape = [*responses, (0, last, 7, 3, 2)]  # the final answer: text, no calls
    for n_calls, placement, fresh, cached, taken in shape:
        outputs = []
        for _ in range(n_calls):
            calls += 1
            lines.append(
                {
                    "type": "response_item",
                    "payload": {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": f"c{calls}"},
                }
            )
            outputs.append(
                {
                    "type": "response_item",
                    "payload": {"type": "function_call_output", "call_id": f"c{calls}", "output": "ok"},
                }
            )
        if n_calls == 0:
            lines.append(
                {
                    "type": "response_item",
                    "payload": {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": "done"}],
                    },
                }
            )
        token = count(fresh, cached, taken) if placement != "missing" else None
        lines += [token] if token and placement == "before-outputs" else []
        lines += outputs
        lines += [token] if token and placement in ("after-outputs", "repeated") else []
        lines += [token] if token and placement == "repeated" else []
        expected.append(
            None if token is None else {"inputTokens": fresh, "outputTokens": taken, "cacheReadTokens": cached}
        )
    path = tmp / "rollout.jsonl"
    path.write_text("".join(json.dumps({"timestamp": "2025-11-20T09:00:00Z", **line}) + "\n" for line in lines))
    _import(tmp / "store", path, "p")
    view = _view(tmp / "store", "p")
    got = [thaw(e["data"].get("usage")) for e in view.events if e["type"] == ASSISTANT_MESSAGE]
    assert got == expected
    check_tool_pairing(view.derive_messages(), "p", view.events)
    seqs = [e["seq"] for e in view.events]
    assert seqs == list(range(len(seqs)))
    kept_lines = [e["data"]["line"] for e in view.events if e["type"] == IMPORT_RECORD]
    assert kept_lines == sorted(kept_lines)  # the held records keep the file's order


def test_compacted__the_inspector_shows_the_history_then_the_checkpoint_over_it(tmp_path: Path) -> None:
    from agentlog.inspector.views import Inspector

    _import(tmp_path, CURRENT, "cur")
    view = _view(tmp_path, "cur")
    checkpoint = next(e for e in view.events if e["type"] == USER_MESSAGE and isinstance(e.get("surfaceOp"), dict))
    inspector = Inspector(JsonlBackend(str(tmp_path)), search=False)
    try:
        before = inspector.state_at("cur", checkpoint["seq"] - 1)
        after = inspector.state_at("cur", checkpoint["seq"])
    finally:
        inspector.close()
    assert before["messageCount"] == 8 and before["replacements"] == []
    shadowed = thaw(checkpoint["sourceEventSeqs"])[2:]
    assert after["messageCount"] == 1 and after["messageSeqs"] == [checkpoint["seq"]]
    assert after["replacements"] == [
        {"seq": checkpoint["seq"], "start": shadowed[0], "end": shadowed[-1], "shadowedCount": len(shadowed)}
    ]
    assert after["shadowed"] == shadowed
