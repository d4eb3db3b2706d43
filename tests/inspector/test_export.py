"""``agentlog export ID --html``: the document replays to ``session.at(seq)`` at every seq (the viewer's
algorithm, mirrored here), the file is self-contained and locked down, and the redaction hook applies."""

from __future__ import annotations

import base64
import difflib
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import agentlog as al
from agentlog.cli.commands import app
from agentlog.inspector.export import export_html
from agentlog.inspector.views import Inspector
from agentlog.kernel.jsonvalue import thaw
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.projection.redaction import DROPPED_TOOL_OUTPUT, Redactor

from .stores import SEARCH_WORD, SUMMARY, open_backend, open_read_only, write_store

runner = CliRunner()


def replay(document: dict[str, Any], seq: int) -> tuple[list[int], list[Any], Any]:
    """The exported page's algorithm (app.js ``surfaceAt`` and ``exportedState``): surface nodes,
    messages, request header."""
    head = document["head"]
    nodes: list[int] = []
    for op in head["ops"]:
        if op > seq:
            break
        shadowed = head["replaced"].get(str(op))
        if shadowed is None:
            nodes.append(op)
            continue
        at = nodes.index(shadowed[0]) if shadowed else -1
        nodes = [n for n in nodes if n not in set(shadowed)]
        if at < 0:
            nodes.append(op)
        else:
            nodes.insert(at, op)
    silent = set(head["silent"])
    messages = [entry(document, n)["message"] for n in nodes if n not in silent]
    header = None
    for at_seq, value in head["headers"]:
        if at_seq <= seq:
            header = value
    return nodes, messages, header


def entry(document: dict[str, Any], seq: int) -> dict[str, Any]:
    """The message and node of the surface event at ``seq`` (app.js ``opEntry``)."""
    head = document["head"]
    index = head["ops"].index(seq)
    block = document["blocks"]["ops"][index // head["opsPerBlock"]]
    per = head["opsPerBlock"]
    return {"message": block["messages"][index % per], "node": block["nodes"][index % per]}


def all_items(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for block in document["blocks"]["items"] for item in block]


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_the_document_replays_to_session_at_every_seq(tmp_path: Path, kind: str) -> None:
    write_store(tmp_path, kind)
    inspector = Inspector(open_read_only(tmp_path, kind), search=False)
    reference = PersistenceCoordinator(SessionStore(), open_read_only(tmp_path, kind))
    try:
        for session_id in ("main", "crashed", "hostile"):
            document = json.loads(json.dumps(inspector.export_document(session_id)))  # as the page parses it
            view = reference.view(session_id)
            for seq in range(view.seq + 1):
                point = view.at(seq)
                nodes, messages, header = replay(document, seq)
                assert nodes == list(point.surface.nodes), (session_id, seq)
                assert messages == thaw(point.derive_messages().to_list()), (session_id, seq)
                assert header == thaw(point.request_header()), (session_id, seq)
            items = all_items(document)
            covered = [s for item in items for s in range(item["seq"], item.get("lastSeq", item["seq"]) + 1)]
            assert covered == list(range(view.seq + 1))
            assert document["head"]["itemPages"] == [block[0]["seq"] for block in document["blocks"]["items"]]
    finally:
        reference.close()
        inspector.close()


def _inline(html: str, tag: str) -> str:
    match = re.search(rf"<{tag}>(.*?)</{tag}>", html, re.DOTALL)
    assert match is not None
    return match.group(1)


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_the_file_is_self_contained_and_locked_down(tmp_path: Path) -> None:
    write_store(tmp_path, "jsonl")
    inspector = Inspector(open_read_only(tmp_path, "jsonl"), search=False)
    try:
        html = export_html(inspector.export_document("hostile"))
    finally:
        inspector.close()
    assert "/static/" not in html
    assert re.search(r"<(link|script|img|iframe)[^>]*\s(src|href)=", html) is None  # nothing loaded
    policy = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', html)
    assert policy is not None
    assert f"script-src {_hash(_inline(html, 'script'))};" in policy.group(1)
    assert f"style-src {_hash(_inline(html, 'style'))};" in policy.group(1)
    assert "default-src 'none'" in policy.group(1) and "connect-src 'none'" in policy.group(1)
    assert "unsafe-inline" not in policy.group(1)
    blocks = re.findall(
        r'<script type="application/json" id="(agentlog-[a-z]+(?:-\d+)?)">(.*?)</script>', html, re.DOTALL
    )
    assert all("<" not in text for _id, text in blocks)  # no content can close a block
    head = json.loads(dict(blocks)["agentlog-data"])
    assert head["sessionId"] == "hostile"
    assert html.count("<script") == 1 + len(blocks)  # the data blocks and the page's own script
    assert {name for name, _text in blocks} == {
        "agentlog-data",
        *(f"agentlog-items-{n}" for n in range(len(head["itemPages"]))),
        "agentlog-ops-0",
        *(f"agentlog-search-{n}" for n in range(head["searchBlocks"])),
    }


def test_the_command_writes_the_file_and_redacts(tmp_path: Path) -> None:
    write_store(tmp_path / "store", "jsonl")
    out = tmp_path / "main.html"
    result = runner.invoke(app, ["export", "main", "--html", "-o", str(out), "--store", str(tmp_path / "store")])
    assert result.exit_code == 0, result.output
    assert SEARCH_WORD in out.read_text(encoding="utf-8")
    redacted = tmp_path / "redacted.html"
    args = ["export", "main", "--html", "-o", str(redacted), "--redact", "zebra[a-z]+", "--json"]
    result = runner.invoke(app, [*args, "--store", str(tmp_path / "store")])
    assert result.exit_code == 0, result.output
    reported = json.loads(result.stdout)
    assert reported["sessionId"] == "main" and reported["file"] == str(redacted) and reported["events"] > 0
    text = redacted.read_text(encoding="utf-8")
    assert SEARCH_WORD not in text and "[redacted]" in text
    result = runner.invoke(
        app, ["export", "main", "--html", "--redact", "(", "--json", "--store", str(tmp_path / "store")]
    )
    assert result.exit_code == 1 and json.loads(result.stderr)["error"]["code"] == "INVALID_OPTION"


def test_the_files_message_identities_give_the_servers_diff(tmp_path: Path) -> None:
    """The page diffs with SequenceMatcher over ``keys`` (one number per distinct message JSON): over
    every pair of seqs that is the server's ``Inspector.diff``, op for op."""
    write_store(tmp_path, "jsonl")
    inspector = Inspector(open_read_only(tmp_path, "jsonl"), search=False)
    try:
        document = inspector.export_document("main")
        head = document["head"]
        last = head["lastSeq"]
        for before in range(0, last + 1, 3):
            for after in range(0, last + 1, 5):
                sides = []
                for seq in (before, after):
                    nodes, _messages, _header = replay(document, seq)
                    seqs = [n for n in nodes if n not in set(head["silent"])]
                    sides.append([head["keys"][head["ops"].index(n)] for n in seqs])
                matcher = difflib.SequenceMatcher(None, sides[0], sides[1], autojunk=False)
                ops = [[tag, [i1, i2], [j1, j2]] for tag, i1, i2, j1, j2 in matcher.get_opcodes()]
                served = inspector.diff("main", before, after)["ops"]
                assert ops == [[op["op"], op["from"], op["to"]] for op in served], (before, after)
    finally:
        inspector.close()


CANARY = "canary-7f3a"
TOOL_CANARY = "toolout-9b2c"


def write_secret_store(root: Path) -> None:
    """A session with ``CANARY`` in every kind of content (the header's cwd, a prompt and its tail past the
    page's 4,000-character cut, the system prompt, streamed chunks with the canary split across two,
    tool arguments, the title) and ``TOOL_CANARY`` only in a tool's output (its result and meta)."""
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, open_backend(root, "jsonl"))
    try:
        session = store.create("secret", meta={"cwd": f"/work/{CANARY}"})
        session.append("turn/start", {"turn": 1})
        session.append("user/message", al.user_message(f"my key is {CANARY}"), {"surfaceOp": "append"})
        session.append("user/message", al.user_message("z" * 3997 + CANARY), {"surfaceOp": "append"})
        session.append("step/start", {"turn": 1, "step": 1})
        header = {"config": {"provider": "p", "model": "m"}, "system": f"system {CANARY}", "tools": []}
        session.append("request/header", {"header": header, "reason": "initial"})
        for piece in (f"so {CANARY[:4]}", f"{CANARY[4:]} it is"):
            chunk = {"type": "text-delta", "index": 0, "text": piece}
            session.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": chunk})
        arguments = json.dumps({"path": CANARY})
        reply = al.assistant_message(
            [al.text_block(f"reading {CANARY}"), al.tool_call_block("c1", "read_file", arguments)],
            provider="p",
            model="m",
        )
        session.append("assistant/message", {"turn": 1, "step": 1, "message": reply}, {"surfaceOp": "append"})
        session.append("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "read_file", "arguments": arguments})
        output = al.tool_result_message("c1", f"the file says {TOOL_CANARY}")
        session.append(
            "tool/result",
            {"turn": 1, "step": 1, "message": output, "meta": {"stdout": TOOL_CANARY}},
            {"surfaceOp": "append"},
        )
        session.append("step/end", {"turn": 1, "step": 1})
        session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        session.append("session/title", {"title": f"title {CANARY}", "messageSeqs": [1], "source": {"kind": "user"}})
        store.flush(session)
        store.dispose(session)
    finally:
        coordinator.close()


def _exported(root: Path, session_id: str, redact: Any) -> tuple[str, dict[str, Any]]:
    inspector = Inspector(open_read_only(root, "jsonl"), search=False)
    try:
        document = inspector.export_document(session_id, redact=redact)
        return export_html(document), document
    finally:
        inspector.close()


def test_a_redaction_function_is_applied_to_every_string_before_anything_is_derived(tmp_path: Path) -> None:
    write_secret_store(tmp_path)
    plain, _document = _exported(tmp_path, "secret", None)
    assert plain.count(CANARY) > 5 and TOOL_CANARY in plain
    seen: list[str] = []

    def hide(text: str) -> str:
        seen.append(text)
        return text.replace(CANARY, "[gone]")

    html, _document = _exported(tmp_path, "secret", hide)
    assert "canary" not in html  # not even the part before the page's cut of a long prompt, nor a split one
    assert "[gone]" in html and TOOL_CANARY in html
    assert any(CANARY in text for text in seen)
    # The main session: the compaction summary and the searched prompt are content like any other.
    write_store(tmp_path / "main", "jsonl")
    html, document = _exported(
        tmp_path / "main", "main", lambda text: text.replace("Primary", "P*").replace(SEARCH_WORD, "z")
    )
    assert "Primary" not in html and SEARCH_WORD not in html
    checkpoints = [entry(document, seq)["node"].get("checkpoint") for seq in document["head"]["ops"]]
    assert [c["summary"] for c in checkpoints if c] == [SUMMARY.replace("Primary", "P*")]


def test_dropping_tool_output_leaves_none_of_it_in_the_file(tmp_path: Path) -> None:
    write_secret_store(tmp_path)
    html, document = _exported(tmp_path, "secret", Redactor(drop_tool_output=True))
    assert TOOL_CANARY not in html
    assert CANARY in html  # only tool output is dropped
    result = next(item for item in all_items(document) if item["kind"] == "tool-result")
    assert result["text"] == DROPPED_TOOL_OUTPUT and result["pairedSeq"] is not None
    assert result["data"]["meta"] == DROPPED_TOOL_OUTPUT
    message = entry(document, result["seq"])["message"]
    assert message["content"][0]["content"] == [{"type": "text", "text": DROPPED_TOOL_OUTPUT}]


def test_a_rule_that_rewrites_every_string_keeps_the_view_whole(tmp_path: Path) -> None:
    """Structure comes from the stored log: a function that turns every string into "x" (ids, roles, block
    types) still leaves the surface, pairing, marks and log items of the unredacted file."""
    write_store(tmp_path, "jsonl")
    _html, plain = _exported(tmp_path, "main", None)
    _html, rewritten = _exported(tmp_path, "main", lambda text: "x")
    view = PersistenceCoordinator(SessionStore(), open_read_only(tmp_path, "jsonl"))
    try:
        reference = view.view("main")
        for seq in range(reference.seq + 1):
            assert replay(rewritten, seq)[0] == list(reference.at(seq).surface.nodes)
    finally:
        view.close()
    assert (
        rewritten["head"]["ops"] == plain["head"]["ops"] and rewritten["head"]["replaced"] == plain["head"]["replaced"]
    )
    shape = ("kind", "seq", "lastSeq", "type", "pairedSeq", "closer", "turn", "step")
    assert [[item.get(key) for key in shape] for item in all_items(rewritten)] == [
        [item.get(key) for key in shape] for item in all_items(plain)
    ]
    assert [("mark" in item) for item in all_items(rewritten)] == [("mark" in item) for item in all_items(plain)]
    checkpoint = entry(rewritten, plain["head"]["ops"][-2])["node"]
    assert {key for key in checkpoint} == {key for key in entry(plain, plain["head"]["ops"][-2])["node"]}


def test_the_command_drops_tool_output(tmp_path: Path) -> None:
    write_secret_store(tmp_path / "store")
    out = tmp_path / "secret.html"
    args = ["export", "secret", "--html", "-o", str(out), "--redact-tool-output", "--redact", "canary-[0-9a-f]+"]
    result = runner.invoke(app, [*args, "--store", str(tmp_path / "store")])
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    assert TOOL_CANARY not in text and "canary" not in text and DROPPED_TOOL_OUTPUT in text
