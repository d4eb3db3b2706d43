"""``agentlog export ID --html``: the document replays to ``session.at(seq)`` at every seq (the viewer's
algorithm, mirrored here), the file is self-contained and locked down, and the redaction hook applies."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentlog.cli.commands import app
from agentlog.inspector.export import export_html
from agentlog.inspector.views import Inspector
from agentlog.kernel.jsonvalue import thaw
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator

from .stores import SEARCH_WORD, open_read_only, write_store

runner = CliRunner()


def replay(document: dict[str, Any], seq: int) -> tuple[list[int], list[Any], Any]:
    """The exported page's algorithm (app.js ``exportedState``): surface nodes, messages, request header."""
    nodes: list[int] = []
    for op in document["surfaceOps"]:
        if op[0] > seq:
            break
        if len(op) == 1:
            nodes.append(op[0])
            continue
        at = nodes.index(op[1][0]) if op[1] else -1
        nodes = [n for n in nodes if n not in set(op[1])]
        if at < 0:
            nodes.append(op[0])
        else:
            nodes.insert(at, op[0])
    messages = [document["messages"][str(n)] for n in nodes if str(n) in document["messages"]]
    header = None
    for at_seq, value in document["headers"]:
        if at_seq <= seq:
            header = value
    return nodes, messages, header


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
            covered = [
                s for item in document["items"] for s in range(item["seq"], item.get("lastSeq", item["seq"]) + 1)
            ]
            assert covered == list(range(view.seq + 1))
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
    block = re.search(r'<script type="application/json" id="agentlog-data">(.*?)</script>', html, re.DOTALL)
    assert block is not None and "<" not in block.group(1)  # no content can close the block
    assert json.loads(block.group(1))["sessionId"] == "hostile"
    assert html.count("<script") == 2  # the data block and the page's own script


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
