"""``agentlog export ID --html``: one self-contained HTML file of the session page.

The file holds the page's own HTML, CSS and JavaScript (``static/``) inline and the session as a JSON
data block (:meth:`Inspector.export_document`); the script, finding the block, answers the page's
requests from it instead of a server: the log, the surface and messages at any seq of the slider (the
surface replayed from the kernel's recorded operations, each node's message as the kernel derives it),
the diff between two seqs, the charts and the fork tree. It opens from disk, offline, with no server.

Its Content-Security-Policy (a ``<meta>`` element) allows exactly the one inline script and the one
inline style by their SHA-256 hashes and nothing else: no other script, no network, no frames. Session
content is inserted as text, as on the served page; the data block is JSON with every ``<`` written as
``\\u003c``, so no content can close it.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any, Final

import orjson

__all__ = ["export_html"]

STATIC: Final = Path(__file__).resolve().parent / "static"


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def _data_block(document: Any) -> str:
    text = orjson.dumps(document).decode("utf-8")
    # Never "</script", "<!--" or "<script" inside the block: "<" is written as its JSON escape (the parse
    # is unchanged), and so are the two line separators JavaScript source once refused.
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def export_html(document: Any) -> str:
    """The self-contained HTML page of an :meth:`~agentlog.inspector.views.Inspector.export_document`."""
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
        f'<script type="application/json" id="agentlog-data">{_data_block(document)}</script>\n'
        f"<script>{script}</script>\n"
    )
    page = page.replace('<link rel="stylesheet" href="/static/style.css">\n', "")
    page = page.replace('<script src="/static/app.js" defer></script>\n', head)
    return page.replace('<body data-page="session">', '<body data-page="session" data-export="1">')
