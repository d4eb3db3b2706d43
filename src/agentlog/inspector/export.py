"""``agentlog export ID --html``: one self-contained HTML file of the session page.

The file holds the page's own HTML, CSS and JavaScript (``static/``) inline and the session as JSON
data blocks (:func:`build_document`); the script, finding them, answers the page's requests from them
instead of a server: the log, the surface and messages at any seq of the slider (the surface replayed
from the kernel's recorded operations, each node's message as the kernel derives it), the diff between
two seqs (``difflib.SequenceMatcher``'s algorithm over the same message identities as the server's
diff), search within the session, the charts and the fork tree. It opens from disk, offline, with no
server.

Why several blocks: a long session is tens of megabytes, and the page must show its last seq in well
under two seconds. Only the head block (the summary, the surface operations as integers, the charts) is
parsed when the page opens; the log items, the messages and surface nodes, and the search documents sit
in blocks of their own, each parsed the first time a view needs it (a log page, a window of messages,
the first search), and a view builds only its window's DOM.

Its Content-Security-Policy (a ``<meta>`` element) allows exactly the one inline script and the one
inline style by their SHA-256 hashes and nothing else: no other script, no network, no frames. Session
content is inserted as text, as on the served page; the data blocks are JSON with every ``<`` written
as ``\\u003c``, so no content can close them.

Redaction (:class:`agentlog.projection.redaction.Redactor`, or any ``str -> str`` function) rewrites
the content taken from the log and the header — every string of event data, tool output dropped first
when asked — before anything is derived from it, while the page's structure (seqs, kinds, pairing,
marks, the surface) is derived from the log as stored, so a rule that rewrites ids or vocabulary cannot
break the view or leak through it.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import orjson

from ..compaction.events import COMPACTION_SUMMARY
from ..kernel._gc import gc_paused
from ..kernel.events import ASSISTANT_CHUNK
from ..kernel.jsonvalue import thaw
from ..kernel.request_header import fold_request_header
from ..kernel.session import EventsView, derive_event_message
from ..projection.redaction import Redactor, as_redactor
from ..query.cjk import _CJK_CLASS
from ..query.documents import extract_event_text
from ..query.normalize import sanitize_fts_text
from ..query.sqlite import SNIPPET_CHARS
from .views import CLIP_CHARS, MAX_DIFF_MESSAGES, MAX_PAGE_LIMIT, _clip, _message_text, _node, _role, _text_of

if TYPE_CHECKING:
    from .views import Inspector

__all__ = ["DOCUMENT_VERSION", "ITEMS_PER_PAGE", "OPS_PER_BLOCK", "build_document", "export_html", "export_html_bytes"]

STATIC: Final = Path(__file__).resolve().parent / "static"

DOCUMENT_VERSION: Final = 2
ITEMS_PER_PAGE: Final = 500
"""Log items per data block (a folded chunk run is one item): the page parses the blocks it shows."""
OPS_PER_BLOCK: Final = 1000
"""Surface events per block of messages and nodes (the slider's window parses the blocks it needs)."""
DOCS_PER_BLOCK: Final = 5000
"""Search documents per block (all parsed on the first search)."""


class _Events:
    """The log's events as the file may show them: each event's data redacted once, on first use."""

    def __init__(self, events: Sequence[Any], redactor: Redactor | None) -> None:
        self._events = events
        self._redactor = redactor
        self._done: dict[int, Any] = {}

    def __getitem__(self, seq: int) -> Any:
        if self._redactor is None:
            return self._events[seq]
        event = self._done.get(seq)
        if event is None:
            event = self._done[seq] = self._redactor.event(self._events[seq])
        return event


def build_document(
    inspector: Inspector, session_id: str, redact: Redactor | Callable[[str], str] | None = None
) -> dict[str, Any]:
    """Everything the session page shows, for ``agentlog export ID --html`` (see the module docstring):
    ``head`` (parsed when the page opens) and ``blocks`` (``items``, ``ops``, ``search``: lists of
    blocks, each parsed on first use). In ``head``: ``ops`` lists the seq of every surface event in
    order, ``replaced`` maps a replacement's seq to the seqs it shadowed, ``silent`` lists the surface
    events that derive no message and ``keys`` gives each surface event's message identity (equal JSON
    text, equal number; ``-1`` for none), what the diff compares; ``itemPages`` is the first seq of each
    block of log items."""
    with gc_paused():  # (hundreds of thousands of new containers: no collection would find garbage among them)
        return _build_document(inspector, session_id, redact)


def _build_document(
    inspector: Inspector, session_id: str, redact: Redactor | Callable[[str], str] | None
) -> dict[str, Any]:
    redactor = as_redactor(redact)
    loaded = inspector.load(session_id)
    events = loaded.events
    last = loaded.last_seq
    shown = _Events(events, redactor)
    text: Callable[[str], str] = redactor if redactor is not None else (lambda value: value)

    items: list[dict[str, Any]] = []
    next_seq: int | None = 0
    while next_seq is not None:
        page = inspector.log_page(session_id, next_seq, MAX_PAGE_LIMIT)
        items.extend(page["items"])
        next_seq = page["nextSeq"]
    if redactor is not None:
        items = [_redacted_item(item, events, shown, redactor) for item in items]

    timeline = loaded.timeline()  # the surface fold the server already made: its replacements, final nodes
    replaced = {r.seq: r for r in timeline.replacements}
    ops: list[int] = []
    silent: list[int] = []
    keys: list[int] = []
    identities: dict[bytes, int] = {}
    messages: list[Any] = []
    nodes: list[dict[str, Any]] = []
    surface_class: dict[int, int] = dict.fromkeys(timeline.nodes_at(last), 0)
    for replacement in timeline.replacements:
        for seq in replacement.shadowed_seqs:
            surface_class[seq] = 1
    documents: list[list[Any]] = []
    index = loaded.index()
    # packed chunk runs stepped over unbuilt (chunks are not searched); a paged-out log is read page by page
    walk = events.outside_runs(0) if isinstance(events, EventsView) else iter(events)
    for event in walk:
        etype = event["type"]
        if etype == ASSISTANT_CHUNK:
            continue
        seq = event["seq"]
        searchable = extract_event_text(shown[seq])
        if searchable:
            documents.append([seq, etype, surface_class.get(seq, 2), event.get("time"), sanitize_fts_text(searchable)])
        if event.get("surfaceOp") is None:
            continue
        ops.append(seq)
        message = derive_event_message(shown[seq])
        if message is None:
            silent.append(seq)
            keys.append(-1)
        else:
            message = orjson.loads(orjson.dumps(message))  # a plain copy (as thaw makes one), in C
            identity = orjson.dumps(message, option=orjson.OPT_SORT_KEYS)
            keys.append(identities.setdefault(identity, len(identities)))
        messages.append(message)
        node = _node(events, seq, replaced.get(seq))
        nodes.append(_redacted_node(node, shown, text) if redactor is not None else node)
    value: Callable[[Any], Any] = redactor.value if redactor is not None else thaw
    head: dict[str, Any] = {
        "version": DOCUMENT_VERSION,
        "sessionId": session_id,
        "lastSeq": last,
        "summary": value(inspector.summary(session_id)),
        "headers": [[seq, value(thaw(fold_request_header([events[seq]])))] for seq in index.header_seqs],
        "contexts": [[seq, value(thaw(loaded.events[seq]["data"]))] for seq in index.context_seqs],
        "charts": inspector.charts(session_id),
        "forks": value(inspector.fork_tree(session_id)),
        "ops": ops,
        "replaced": {str(seq): list(r.shadowed_seqs) for seq, r in replaced.items()},
        "silent": silent,
        "keys": keys,
        "opsPerBlock": OPS_PER_BLOCK,
        "itemPages": [items[start]["seq"] for start in range(0, len(items), ITEMS_PER_PAGE)],
        "searchBlocks": -(-len(documents) // DOCS_PER_BLOCK),
        "clipChars": CLIP_CHARS,
        "maxDiffMessages": MAX_DIFF_MESSAGES,
        "snippetChars": SNIPPET_CHARS,
        "cjkClass": _CJK_CLASS,
    }
    return {
        "head": head,
        "blocks": {
            "items": [items[start : start + ITEMS_PER_PAGE] for start in range(0, len(items), ITEMS_PER_PAGE)],
            "ops": [
                {"messages": messages[start : start + OPS_PER_BLOCK], "nodes": nodes[start : start + OPS_PER_BLOCK]}
                for start in range(0, len(ops), OPS_PER_BLOCK)
            ],
            "search": [documents[start : start + DOCS_PER_BLOCK] for start in range(0, len(documents), DOCS_PER_BLOCK)],
        },
    }


def _redacted_item(item: dict[str, Any], events: Sequence[Any], shown: _Events, redactor: Redactor) -> dict[str, Any]:
    """A log item (built from the stored log: kinds, pairing, marks) with its content taken from the
    redacted events; a chunk run's text is joined first and redacted whole (a secret split across chunks
    is still one match), then cut as the page cuts it."""
    seq = item["seq"]
    if item["kind"] == "chunks":
        text: list[str] = []
        reasoning: list[str] = []
        for at in range(seq, item["lastSeq"] + 1):
            chunk = events[at]["data"].get("chunk")
            ctype = chunk.get("type") if isinstance(chunk, Mapping) else None
            if ctype == "text-delta" and isinstance(chunk.get("text"), str):
                text.append(chunk["text"])
            elif ctype == "reasoning-delta" and isinstance(chunk.get("text"), str):
                reasoning.append(chunk["text"])
        joined, clipped = _clip({"text": redactor("".join(text)), "reasoning": redactor("".join(reasoning))})
        return {**item, "text": joined["text"], "reasoning": joined["reasoning"], "clipped": clipped}
    event = shown[seq]
    out = dict(item)
    out["data"], clipped = _clip(event.get("data"))
    if "text" in item:
        out["text"], cut = _clip(_message_text(event))
        clipped = clipped or cut
    out["clipped"] = clipped
    for key in ("callId", "name", "role"):
        if isinstance(item.get(key), str):
            out[key] = redactor(item[key])
    if "toolCalls" in item:
        out["toolCalls"] = [{**call, "callId": redactor.value(call.get("callId"))} for call in item["toolCalls"]]
    if "mark" in item:
        out["mark"] = redactor.value(item["mark"])
    return out


def _redacted_node(node: dict[str, Any], shown: _Events, text: Callable[[str], str]) -> dict[str, Any]:
    """A surface node (provenance from the stored log) with its previews taken from the redacted events."""
    seq = node["seq"]
    out = dict(node)
    out["text"], out["clipped"] = _clip(_message_text(shown[seq]))
    out["role"] = _role(shown[seq])
    replaces = node.get("replaces")
    if replaces is not None:
        out["replaces"] = {
            **replaces,
            "shadowed": [
                {
                    **preview,
                    "role": _role(shown[preview["seq"]]),
                    "text": _clip(_message_text(shown[preview["seq"]]), 400)[0],
                }
                for preview in replaces["shadowed"]
            ],
        }
    checkpoint = node.get("checkpoint")
    if checkpoint is not None:
        summary_seq = checkpoint.get("summarySeq")
        summary = None
        if isinstance(summary_seq, int) and checkpoint.get("summary") is not None:
            event = shown[summary_seq]
            if event["type"] == COMPACTION_SUMMARY:
                summary = _text_of(event["data"].get("summary"))
        out["checkpoint"] = {
            key: (summary if key == "summary" else text(inner) if isinstance(inner, str) else inner)
            for key, inner in checkpoint.items()
        }
    if "pruned" in node:
        out["pruned"] = {key: text(inner) if isinstance(inner, str) else inner for key, inner in node["pruned"].items()}
    return out


def item_page_of(head: Mapping[str, Any], seq: int) -> int:
    """The block of log items holding ``seq`` (what the page's script computes to find it)."""
    return max(0, bisect.bisect_right(head["itemPages"], seq) - 1)


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def _json_block(element_id: str, value: Any) -> bytes:
    """One data block as UTF-8 bytes (a block is megabytes: its escapes are replaced in the bytes orjson
    wrote, before any decoding; UTF-8 is self-synchronizing, so a byte pattern matches only the character)."""
    text = orjson.dumps(value)
    # Never "</script", "<!--" or "<script" inside a block: "<" is written as its JSON escape (the parse
    # is unchanged), and so are the two line separators JavaScript source once refused.
    text = text.replace(b"<", b"\\u003c").replace(_LS, b"\\u2028").replace(_PS, b"\\u2029")
    return b'<script type="application/json" id="' + element_id.encode("utf-8") + b'">' + text + b"</script>\n"


_LS: Final = "\u2028".encode()
_PS: Final = "\u2029".encode()


def export_html(document: Mapping[str, Any]) -> str:
    """The self-contained HTML page of a :func:`build_document` (``Inspector.export_document``)."""
    return export_html_bytes(document).decode("utf-8")


def export_html_bytes(document: Mapping[str, Any]) -> bytes:
    """:func:`export_html` encoded as UTF-8, built as bytes (what ``export --html`` writes: tens of
    megabytes of data blocks are never decoded and encoded again)."""
    page = (STATIC / "session.html").read_text(encoding="utf-8")
    style = (STATIC / "style.css").read_text(encoding="utf-8")
    script = (STATIC / "app.js").read_text(encoding="utf-8")
    if "</script" in script.lower() or "</style" in style.lower():  # pragma: no cover - a packaging mistake
        raise ValueError("the inspector's script or style would close its own element")
    policy = (
        f"default-src 'none'; script-src {_sha256(script)}; style-src {_sha256(style)}; img-src 'none'; "
        "connect-src 'none'; object-src 'none'; base-uri 'none'; form-action 'none'"
    )
    head = (
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n'
        f"<style>{style}</style>\n"
        f"<script>{script}</script>\n"
    )
    # The data blocks go at the end of the body: the page's script runs on DOMContentLoaded, after they
    # are parsed, and the browser can lay out the page's frame before it reaches them.
    blocks = [_json_block("agentlog-data", document["head"])]
    for kind in ("items", "ops", "search"):
        blocks.extend(_json_block(f"agentlog-{kind}-{n}", block) for n, block in enumerate(document["blocks"][kind]))
    page = page.replace('<link rel="stylesheet" href="/static/style.css">\n', "")
    page = page.replace('<script src="/static/app.js" defer></script>\n', head)
    page = page.replace('<body data-page="session">', '<body data-page="session" data-export="1">')
    before, body_end, after = page.partition("</body>")  # (the page's one closing body tag)
    if not body_end:  # pragma: no cover - a packaging mistake
        raise ValueError("the inspector's session page has no </body>")
    return b"".join([before.encode("utf-8"), *blocks, (body_end + after).encode("utf-8")])
