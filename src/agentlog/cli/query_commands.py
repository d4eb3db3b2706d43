"""The query commands ``search`` and ``trace`` (runtime spec §4), and the search index the CLI shares
with ``reindex --search``.

``search`` is the only read command that creates something: the store's search index, a derived
SQLite FTS5 file (:func:`agentlog.query.sqlite.default_index_path`: ``ROOT/.agentlog-search.sqlite3``
in a JSONL store, ``sessions.sqlite3.search.sqlite3`` beside a SQLite one; for a PostgreSQL store the
index is in the store's own database, :class:`agentlog.query.PostgresSearch`), made on the first search and
reconciled with the store by revision inside every search after that. The store itself is opened
read-only: a search never writes a log and never takes a writer lock. ``trace`` reads through the query
engine alone (:class:`agentlog.query.SessionQuery`) and never touches the index.

Why the command has its own cursor: an index cursor belongs to one :class:`SqliteSearch` instance (a
random id per instance, runtime spec §4.3), and every command runs in a fresh process, so the index's
own cursor could never be handed to the next command. The command's cursor records the normalized
request, the offset and the last hit it showed; the next command asks the index for the first
``offset + limit`` hits and shows the last ``limit`` of them. A cursor of another request is
``SESSION_QUERY_INVALID_CURSOR``; a cursor whose boundary moved (the hit before the offset is no longer
the one shown: the corpus changed in between) is ``SESSION_QUERY_STALE_CURSOR`` — start from the first
page again. The ``nextCursor`` of ``search --json`` is this cursor.

The query modules are imported inside the commands: every other command (``ls`` above all) starts
without loading SQLite FTS code it does not use.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import shlex
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Final

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text
from rich.tree import Tree

from ..errors import AgentlogError, InvalidOptionError, SessionQueryError
from ._marks import seq_ranges
from ._reading import _reader, _require_store
from .options import DEFAULT_OPTIONS, BackendKind, Compression, StoreOptions, shared_options
from .render import _emit_json, _iso, _short, _table_console, _TableOutput, render_error

if TYPE_CHECKING:
    from ..persistence.backend import Backend
    from ..persistence.coordinator import PersistenceCoordinator
    from ..query.sqlite import SqliteSearch

SURFACE_CHOICES: Final = ("current", "shadowed", "log-only")
DEFAULT_LIMIT: Final = 20
MAX_LIMIT: Final = 100

CURSOR_VERSION: Final = 1
_CURSOR_SCOPE: Final = "cli-search"
_HIGHLIGHT: Final = "bold yellow"
_SURFACE_STYLE: Final = {"current": "green", "shadowed": "yellow", "log-only": "dim"}


# --- the index ------------------------------------------------------------------------------------------


def index_path(backend: Backend) -> str:
    """Where the store's search index lives (a CLI store is never in memory, so there always is one):
    a file, or ``postgresql:<schema>`` for a PostgreSQL store (the index is in its database)."""
    from ..query.provider import index_location

    path = index_location(backend)
    if path is None:  # pragma: no cover - the CLI opens only file stores
        raise InvalidOptionError("this store has no place for a search index (an in-memory store)")
    return path


def open_search(reader: PersistenceCoordinator, *, max_limit: int) -> SqliteSearch:
    """The store's index over ``reader`` (opened, and created if missing, by its first search).

    Its snippets are the index's default length (:data:`agentlog.query.sqlite.SNIPPET_CHARS`, the
    original engine's 240 code points): the CLI shows what the library returns.
    """
    from ..query.provider import open_store_search

    index_path(reader.backend)  # refuses a store with no place for an index
    return open_store_search(
        reader,
        open_at="first-search",
        default_limit=DEFAULT_LIMIT,
        max_limit=max_limit,
    )


# --- the command's cursor ----------------------------------------------------------------------------------


def _request_digest(request: Mapping[str, Any]) -> str:
    canonical = orjson.dumps(request, option=orjson.OPT_SORT_KEYS)
    return base64.urlsafe_b64encode(hashlib.sha256(canonical).digest()).rstrip(b"=").decode()


def _invalid_cursor() -> SessionQueryError:
    return SessionQueryError("session-search cursor is invalid", "SESSION_QUERY_INVALID_CURSOR")


def _stale_cursor() -> SessionQueryError:
    return SessionQueryError(
        "session-search cursor is stale because its relevant corpus changed", "SESSION_QUERY_STALE_CURSOR"
    )


def encode_cli_cursor(digest: str, offset: int, last: tuple[str, int]) -> str:
    """The cursor ``search`` prints: the request it continues, where, and the last hit it showed."""
    payload = {
        "version": CURSOR_VERSION,
        "scope": _CURSOR_SCOPE,
        "request": digest,
        "offset": offset,
        "after": [last[0], last[1]],
    }
    return base64.urlsafe_b64encode(orjson.dumps(payload)).rstrip(b"=").decode()


def decode_cli_cursor(cursor: str, digest: str) -> tuple[int, tuple[str, int]]:
    """``(offset, last hit shown)`` of a cursor of this request; anything else is INVALID_CURSOR."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        payload = orjson.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (ValueError, UnicodeEncodeError, binascii.Error, orjson.JSONDecodeError):
        raise _invalid_cursor() from None
    if not isinstance(payload, dict):
        raise _invalid_cursor()
    offset, after = payload.get("offset"), payload.get("after")
    if (
        payload.get("version") != CURSOR_VERSION
        or payload.get("scope") != _CURSOR_SCOPE
        or payload.get("request") != digest
        or type(offset) is not int
        or not 0 < offset <= 2**53 - 2
        or not isinstance(after, list)
        or len(after) != 2
        or not isinstance(after[0], str)
        or type(after[1]) is not int
    ):
        raise _invalid_cursor()
    return offset, (after[0], after[1])


# --- highlighting ------------------------------------------------------------------------------------------


def _folded(text: str) -> tuple[str, list[int]]:
    """``text`` case- and diacritic-folded as the index's ``unicode61`` tokenizer compares it, with the
    index in ``text`` of every folded character (folding may lengthen a character: ``ß`` → ``ss``)."""
    out: list[str] = []
    origin: list[int] = []
    for index, char in enumerate(text):
        base = "".join(c for c in unicodedata.normalize("NFD", char) if not unicodedata.combining(c))
        for folded in (base or char).casefold():
            out.append(folded)
            origin.append(index)
    return "".join(out), origin


_TOKEN: Final = re.compile(r"[^\W_]+")


def highlight_spans(snippet: str, query: str) -> list[tuple[int, int]]:
    """Where ``query`` matches in ``snippet``, as ``[start, end)`` spans of ``snippet``.

    The index's snippets are plain text (its match markers are removed), so the command finds the
    match again for the table: a query with CJK characters as a folded substring (the index's substring
    semantics), any other query as its phrase of whole ``unicode61``-style tokens. A snippet cut inside
    the match shows no highlight rather than a wrong one.
    """
    from ..query.cjk import fold, uses_substring
    from ..query.normalize import sanitize_fts_text

    query = sanitize_fts_text(" ".join(query.split()))
    spans: list[tuple[int, int]] = []
    if uses_substring(query):  # the index's substring semantics: its own fold, one code point to one
        haystack, needle = fold(snippet), fold(query)
        at = haystack.find(needle)
        while at >= 0:
            spans.append((at, at + len(needle)))
            at = haystack.find(needle, at + len(needle))
        return spans
    folded, origin = _folded(snippet)
    wanted = _TOKEN.findall(_folded(query)[0])
    if not wanted:
        return []
    tokens = [(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(folded)]
    index = 0
    while index + len(wanted) <= len(tokens):
        if all(tokens[index + k][0] == wanted[k] for k in range(len(wanted))):
            first, last = tokens[index], tokens[index + len(wanted) - 1]
            spans.append((origin[first[1]], origin[last[2] - 1] + 1))
            index += len(wanted)
        else:
            index += 1
    return spans


def highlighted(snippet: str, query: str) -> Text:
    """``snippet`` as rich text with every match of ``query`` in bold yellow.

    A styled :class:`~rich.text.Text`, not markup: escaping arbitrary text into markup is lossy at the
    edges (rich doubles a trailing backslash that ``from_markup`` then keeps), and a snippet is arbitrary.
    """
    text = Text(snippet)
    for start, end in highlight_spans(snippet, query):
        text.stylize(_HIGHLIGHT, start, end)
    return text


# --- search ------------------------------------------------------------------------------------------------


def _page_limit(limit: int | None) -> int:
    from ..query.normalize import normalize_limit

    return normalize_limit(limit, DEFAULT_LIMIT, MAX_LIMIT)


def _search_request(
    query: str,
    session: str | None,
    types: Sequence[str],
    surfaces: Sequence[str],
    cwds: Sequence[str],
    limit: int,
    parents: Sequence[str] = (),
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """``(request for the cursor digest, session filters, event filters)`` of one command line."""
    from ..query.normalize import normalize_query

    normalized = normalize_query(query)
    if session is not None and cwds:
        raise InvalidOptionError("search: --cwd chooses sessions; it cannot be combined with --session")
    event_filters: list[dict[str, Any]] = []
    if types:
        event_filters.append({"kind": "type", "values": list(types)})
    if surfaces:
        event_filters.append({"kind": "surface", "values": list(surfaces)})
    if session is not None and parents:
        raise InvalidOptionError("search: --parent chooses sessions; it cannot be combined with --session")
    session_filters = [{"kind": "cwd", "values": list(cwds)}] if cwds else []
    if parents:
        session_filters.append({"kind": "parent", "values": list(parents)})
    request: dict[str, Any] = {
        "query": normalized,
        "session": session,
        "types": sorted(set(types)),
        "surfaces": sorted(set(surfaces)),
        "cwds": sorted(set(cwds)),
        "limit": limit,
    }
    if parents:  # only when given: the cursors of searches without it keep their digest
        request["parents"] = sorted(set(parents))
    return request, session_filters, event_filters


@dataclass(frozen=True)
class LabelChoice:
    """The sessions ``--label``/``--tag`` chose (``ids``) and the filters that chose them (for the cursor)."""

    ids: frozenset[str]
    labels: tuple[tuple[str, str], ...]
    tags: tuple[str, ...]


def _labelled_sessions(
    storage: Any, labels: Sequence[str], tags: Sequence[str], session: str | None
) -> LabelChoice:
    """The stored sessions carrying every ``KEY=VALUE`` label and every tag, from the projection cache
    (``ls``'s read: a current record is served, a stale one refolded), never from the search index."""
    from ..kernel.labels import check_tag, parse_label_filter
    from ..projection.labels import labels_match, labels_of
    from .read_commands import _projected

    if session is not None:
        raise InvalidOptionError("search: --label and --tag choose sessions; they cannot be combined with --session")
    wanted_labels = tuple(parse_label_filter(text) for text in labels)
    wanted_tags = tuple(check_tag(text) for text in tags)
    projected = _projected(storage, storage.list_sessions())
    ids = frozenset(
        session_id
        for session_id, (values, _as_of) in projected.items()
        if labels_match(*labels_of(values), wanted_labels, wanted_tags)
    )
    return LabelChoice(ids, wanted_labels, wanted_tags)


def _hit_key(item: Mapping[str, Any]) -> tuple[str, int]:
    hit = item.get("bestMatch", item)
    return (str(hit["sessionId"]), int(hit["seq"]))


def run_search(
    search: SqliteSearch,
    *,
    query: str,
    session: str | None = None,
    types: Sequence[str] = (),
    surfaces: Sequence[str] = (),
    cwds: Sequence[str] = (),
    limit: int | None = None,
    cursor: str | None = None,
    parents: Sequence[str] = (),
    labelled: LabelChoice | None = None,
) -> dict[str, Any]:
    """One page of ``search``: the index's result shape, with the command's own ``nextCursor`` and the
    sessions the index left out.

    Without ``session``: :meth:`SqliteSearch.search_sessions` (``{items: [{header, live, persisted,
    bestMatch}], nextCursor?, skipped}``); with it: :meth:`SqliteSearch.search_events` (``{session, items:
    [{sessionId, seq, type, time, surface, snippet}], nextCursor?, skipped}``). ``skipped`` is
    ``[{id, code, message}]``, the stored sessions of the request that could not be read
    (:attr:`SqliteSearch.skipped`), always present: a page that silently lacked a damaged session's hits
    would claim it has none.
    ``labelled`` (from ``--label``/``--tag``) limits the search to the sessions it names.
    ``search`` must allow limits up to ``offset + limit``: the pages before the cursor are fetched again
    (see the module docstring).
    """
    page = _page_limit(limit)
    request, session_filters, event_filters = _search_request(query, session, types, surfaces, cwds, page, parents)
    if labelled is not None:
        session_filters.append({"kind": "id", "values": sorted(labelled.ids)})
        request["labels"] = sorted(f"{key}={value}" for key, value in labelled.labels)
        request["tags"] = sorted(labelled.tags)
    digest = _request_digest(request)
    offset, after = (0, None) if cursor is None else decode_cli_cursor(cursor, digest)
    wanted = offset + page
    if session is None:
        result = search.search_sessions(
            query=query, session_filters=session_filters, event_filters=event_filters, limit=wanted
        )
    else:
        result = search.search_events(session_id=session, query=query, filters=event_filters, limit=wanted)
    items: list[dict[str, Any]] = list(result["items"])
    if after is not None and (len(items) < offset or _hit_key(items[offset - 1]) != after):
        raise _stale_cursor()
    shown = items[offset:]
    document: dict[str, Any] = {key: value for key, value in result.items() if key not in ("items", "nextCursor")}
    document["items"] = shown
    if "nextCursor" in result and shown:
        document["nextCursor"] = encode_cli_cursor(digest, wanted, _hit_key(shown[-1]))
    # The index reconciles the whole store in every search; with --session only that session is asked
    # for (and a damaged one is refused as SESSION_QUERY_CORRUPT_SESSION), so another's damage is not
    # this page's.
    document["skipped"] = [
        {"id": item.get("sessionId"), "code": item.get("code"), "message": item.get("message")}
        for item in search.skipped
        if session is None or item.get("sessionId") == session
    ]
    return document


def _continuation(argv: Sequence[str], opts: StoreOptions, cursor: str) -> str:
    words = ["agentlog", "search", *argv]
    if opts.store is not None:
        words += ["--store", str(opts.store)]
    if opts.backend is not BackendKind.jsonl:
        words += ["--backend", str(opts.backend)]
    if opts.compression is not Compression.zstd:
        words += ["--compression", opts.compression.value]
    return shlex.join([*words, "--cursor", cursor])


def _print_hits(document: Mapping[str, Any], query: str, session: str | None, title: str) -> Console:
    """The page as a table: (session,) seq, type, surface, time and the snippet with the match highlighted."""
    items: Sequence[Mapping[str, Any]] = document["items"]
    columns = ("seq", "type", "surface", "time", "match")
    table = _TableOutput(columns if session else ("session", *columns), title=title, right=("seq",))
    for item in items:
        hit = item if session else item["bestMatch"]
        surface, snippet = str(hit["surface"]), str(hit["snippet"])
        cells = [str(hit["seq"]), str(hit["type"]), surface, _iso(hit["time"]), snippet]
        marked: list[str | Text] = [
            escape(cells[0]),
            escape(cells[1]),
            f"[{_SURFACE_STYLE.get(surface, 'default')}]{escape(surface)}[/]",
        ]
        marked += [escape(cells[3]), highlighted(snippet, query)]
        if not session:
            cells.insert(0, str(hit["sessionId"]))
            marked.insert(0, escape(cells[0]))
        table.add_row(*marked, plain=cells)
    return table.print()


@shared_options()
def search_command(
    query: Annotated[str, typer.Argument(help="Words or a phrase (matched as one phrase; CJK as a substring).")],
    opts: StoreOptions = DEFAULT_OPTIONS,
    session: Annotated[
        str | None, typer.Option("--session", help="Search the events of this session only.", show_default=False)
    ] = None,
    types: Annotated[
        list[str] | None,
        typer.Option("--type", help="Only events of this type (repeatable), e.g. tool/result.", show_default=False),
    ] = None,
    surfaces: Annotated[
        list[str] | None,
        typer.Option(
            "--surface",
            help="Only events that are current, shadowed (replaced by compaction) or log-only (repeatable).",
            show_default=False,
        ),
    ] = None,
    cwds: Annotated[
        list[str] | None,
        typer.Option("--cwd", help="Only sessions whose cwd is DIR (repeatable).", metavar="DIR", show_default=False),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option("--limit", help=f"Hits per page (1..{MAX_LIMIT}, default {DEFAULT_LIMIT}).", show_default=False),
    ] = None,
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="Continue with the page after the one that printed it.")
    ] = None,
    parents: Annotated[
        list[str] | None,
        typer.Option(
            "--parent",
            help="Only sessions whose parentSession is ID: its forks and subagents (repeatable).",
            metavar="ID",
            show_default=False,
        ),
    ] = None,
    labels: Annotated[
        list[str] | None,
        typer.Option(
            "--label", help="Only sessions labelled KEY=VALUE (repeatable: all must match).", metavar="KEY=VALUE",
            show_default=False,
        ),
    ] = None,
    tags: Annotated[
        list[str] | None,
        typer.Option("--tag", help="Only sessions tagged TAG (repeatable: all must match).", metavar="TAG",
                     show_default=False),
    ] = None,
) -> None:
    """Full-text search over every stored session: the best hit of each session, or with --session every hit in it.

    Hits are ranked by the number of matches, then the shorter text, then the newer event; each row
    shows the seq to open (``agentlog show ID --at SEQ``, ``agentlog trace ID --seq SEQ``) and a snippet
    with the match highlighted. Words and phrases match whole words (case and accents ignored); a query
    with Chinese or Japanese characters matches as a substring. The first search creates the store's
    search index; every search brings it up to date with the store first (only changed logs are read).
    --json prints the page: {items: [{header, live, persisted, bestMatch: {sessionId, seq, type, time,
    surface, snippet}}], nextCursor?, skipped}, with --session {session, items: [{sessionId, seq, type,
    time, surface, snippet}], nextCursor?, skipped}; skipped lists the sessions that could not be read
    ([{id, code, message}], also named on stderr). --label KEY=VALUE and --tag TAG search only the
    sessions carrying every one given (chosen from the projection cache, as ``ls --label`` chooses).
    """
    argv = [query]
    if session is not None:
        argv += ["--session", session]
    for flag, values in (
        ("--type", types), ("--surface", surfaces), ("--cwd", cwds), ("--parent", parents), ("--label", labels),
        ("--tag", tags),
    ):  # fmt: skip
        for value in values or ():
            argv += [flag, value]
    if limit is not None:
        argv += ["--limit", str(limit)]
    try:
        page = _page_limit(limit)
        storage = opts.open_backend(read_only=True)
        _require_store(storage, session if session is not None else "-")
        chosen = _labelled_sessions(storage, labels or (), tags or (), session) if labels or tags else None
        reader = _reader(storage)
        offset = 0 if cursor is None else _cursor_offset(cursor)
        search = open_search(reader, max_limit=max(MAX_LIMIT, offset + page))
        try:
            document = run_search(
                search,
                query=query,
                session=session,
                types=types or (),
                surfaces=surfaces or (),
                cwds=cwds or (),
                limit=page,
                cursor=cursor,
                parents=parents or (),
                labelled=chosen,
            )
        finally:
            search.close()
            reader.close()
    except AgentlogError as err:
        render_error(err, opts.as_json)
    _warn_skipped(document["skipped"])  # on stderr with --json too: a script that reads only items is told
    if opts.as_json:
        _emit_json(document)
        return
    items = document["items"]
    if not items:
        typer.echo(f'no hits for "{query}"' + (f" in session {session}" if session else ""))
        return
    # Quoted as written, not as a Python repr (which escapes quotes and backslashes); a title is markup.
    title = escape(f"hits in session {session}" if session else f'sessions matching "{_short(query, 60)}"')
    console = _print_hits(document, query, session, title)
    first = items[0] if session else items[0]["bestMatch"]
    console.print(
        f"open a hit: agentlog show {shlex.quote(str(first['sessionId']))} --at {first['seq']}"
        f"  ·  its provenance: agentlog trace {shlex.quote(str(first['sessionId']))} --seq {first['seq']}",
        soft_wrap=True,
        markup=False,
        highlight=False,
    )
    if "nextCursor" in document:
        console.print(
            f"more: {_continuation(argv, opts, document['nextCursor'])}", soft_wrap=True, markup=False, highlight=False
        )


def _cursor_offset(cursor: str) -> int:
    """The offset a cursor asks for, read before the request is checked (to size the index's limit);
    a malformed cursor is refused by :func:`run_search` itself."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        offset = orjson.loads(base64.urlsafe_b64decode(padded.encode("ascii"))).get("offset")
    except (ValueError, UnicodeEncodeError, binascii.Error, orjson.JSONDecodeError, AttributeError):
        return 0
    return offset if type(offset) is int and 0 < offset <= 2**53 - 2 - MAX_LIMIT else 0


def _warn_skipped(skipped: Sequence[Mapping[str, Any]]) -> None:
    """Sessions the index could not read (a damaged log): they are not searched, and the user is told
    (``skipped`` as the document carries it: ``[{id, code, message}]``)."""
    if not skipped:
        return
    console = Console(stderr=True)
    console.print(
        f"[yellow]warning[/] {len(skipped)} session(s) could not be read and are not searched "
        "(agentlog verify reports why):",
        highlight=False,
    )
    for item in skipped:
        line = f"  {item['id']}: [{item['code']}] {_short(str(item['message']), 200)}"
        console.print(line, highlight=False, markup=False, soft_wrap=True)


# --- trace -------------------------------------------------------------------------------------------------


def _record_label(record: Mapping[str, Any], *, target: bool = False) -> str:
    header = record.get("header") or {}
    parts = [f"[bold]{escape(str(header.get('id')))}[/]" if target else escape(str(header.get("id")))]
    created = _iso(header.get("createdAt"))
    if created:
        parts.append(f"[dim]{created}[/]")
    if header.get("cwd") is not None:
        parts.append(escape(str(header["cwd"])))
    if record.get("live"):
        parts.append("[green]live[/]")
    if target:
        parts.append("[cyan]← this session[/]")
    return "  ".join(parts)


def _lineage_tree(trace: Mapping[str, Any]) -> Tree:
    """Root (or the first missing parent) at the top, the ancestors down to the target, its descendants."""
    ancestors = list(reversed(trace["ancestors"]))
    if trace.get("complete"):
        top = Tree(_record_label(ancestors[0]) if ancestors else _record_label(trace["target"], target=True))
        chain = ancestors[1:] if ancestors else []
    else:
        missing = escape(str(trace.get("unresolvedParentId")))
        top = Tree(f"[red]{missing}[/]  [dim](parent not in this store)[/]")
        chain = ancestors
    node = top
    for record in chain:
        node = node.add(_record_label(record))
    if ancestors or not trace.get("complete"):
        node = node.add(_record_label(trace["target"], target=True))

    def grow(parent: Tree, children: Sequence[Mapping[str, Any]]) -> None:
        for child in children:
            grow(parent.add(_record_label(child["session"])), child["descendants"])

    grow(node, trace["descendants"])
    return top


def _seq_list(seqs: Sequence[int], types: Mapping[int, str]) -> str:
    """Seqs as runs, each run with its event type(s): ``3–22 assistant/chunk, 24 tool/result``."""
    parts: list[str] = []
    run: list[int] = []

    def close() -> None:
        if run:
            kinds = sorted({types.get(seq, "?") for seq in run})
            parts.append(f"{seq_ranges(run)} {'/'.join(kinds) if len(kinds) < 3 else 'mixed'}")

    for seq in seqs:
        if run and (seq != run[-1] + 1 or types.get(seq) != types.get(run[-1])):
            close()
            run = []
        run.append(seq)
    close()
    return ", ".join(parts) if parts else "none"


def _event_tree(trace: Mapping[str, Any], types: Mapping[int, str]) -> Tree:
    target = trace["target"]
    surface = str(target["surface"])
    top = Tree(
        f"[bold]seq {target['seq']}[/] {escape(str(target['type']))}  "
        f"[{_SURFACE_STYLE.get(surface, 'default')}]{escape(surface)}[/]  [dim]{_iso(target['time'])}[/]"
    )
    chain = trace["replacementChain"]
    if chain:
        steps = " → ".join(f"{seq} {types.get(seq, '?')}" for seq in chain)
        top.add(f"replaced by: {escape(steps)}" + ("  [dim](the final replacement last)[/]" if len(chain) > 1 else ""))
    else:
        top.add("replaced by: nothing")
    removed = _seq_list(trace["replacedEventSeqs"], types)
    top.add(f"replaced seqs (what this event removed from the surface): {escape(removed)}")
    top.add(f"sources (what it cites): {escape(_seq_list(trace['sourceEventSeqs'], types))}")
    top.add(f"derived (later events citing it): {escape(_seq_list(trace['derivedEventSeqs'], types))}")
    delegated = trace.get("subagent")
    if delegated is not None:
        child, (first, last) = str(delegated["sessionId"]), delegated["seqs"]
        top.add(
            f"answered by subagent {escape(child)}, seqs {first}–{last}: "
            f"agentlog show {escape(shlex.quote(child))} --at {last}"
        )
    return top


def _print_tree(tree: Tree) -> None:
    console = _table_console([[line] for line in _plain_lines(tree)])
    console.print(tree, highlight=False)


def _plain_lines(tree: Tree) -> list[str]:
    lines: list[str] = []

    def walk(node: Tree, depth: int) -> None:
        label = node.label
        lines.append("    " * depth + (Text.from_markup(label).plain if isinstance(label, str) else str(label)))
        for child in node.children:
            walk(child, depth + 1)

    walk(tree, 0)
    return lines


@shared_options()
def trace_command(
    session_id: Annotated[str, typer.Argument(help="The session to trace.")],
    opts: StoreOptions = DEFAULT_OPTIONS,
    seq: Annotated[
        int | None,
        typer.Option("--seq", help="Trace one event instead: what replaced it, what it replaced, cites, is cited by."),
    ] = None,
) -> None:
    """A session's lineage (the fork tree around it), or with --seq the provenance of one event.

    Lineage: its ancestors from the root (or the first parent missing from the store) down to the session,
    then every descendant fork. Provenance: the replacement chain that shadowed the event (compaction),
    the seqs the event itself replaced on the surface, the events it cites as its sources and the later
    events that cite it. Never writes, and never creates the search index. --json: the lineage {target,
    ancestors, descendants, complete, root | unresolvedParentId}; with --seq {session, target, replacedBy?,
    replacementChain, replacedEventSeqs, sourceEventSeqs, derivedEventSeqs}.
    """
    from ..query.engine import SessionQuery

    try:
        storage = opts.open_backend(read_only=True)
        _require_store(storage, session_id)
        reader = _reader(storage)
        engine = SessionQuery(reader)
        try:
            if seq is None:
                document = engine.trace_session(session_id)
                types: dict[int, str] = {}
            else:
                document = engine.trace_event(session_id, seq)
                types = {record["seq"]: record["type"] for record in engine.list_events(session_id)}
        finally:
            engine.close()
            reader.close()
    except AgentlogError as err:
        render_error(err, opts.as_json)
    if opts.as_json:
        _emit_json(document)
        return
    _print_tree(_lineage_tree(document) if seq is None else _event_tree(document, types))


# --- reindex --search ----------------------------------------------------------------------------------------


def rebuild_search_index(
    reader: PersistenceCoordinator, progress: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    """Drop every row of the store's search index and index every stored session again
    (``reindex --search``).

    The rows are dropped in place by :meth:`SqliteSearch.rebuild`; the file itself is never deleted here:
    opening it already rebuilds a damaged index that is provably agentlog's, and refuses (untouched) a
    file at the index path that belongs to something else — the error names it, so the user can move it.

    Returns ``{sessions, indexed, failed: [{id, error: {code, message}}], index}`` (``failed``: the
    sessions the index had to leave out, see :attr:`SqliteSearch.skipped`).
    """
    path = index_path(reader.backend)
    listings = reader.list()
    search = open_search(reader, max_limit=MAX_LIMIT)
    try:
        search.rebuild(progress=progress)
        skipped = list(search.skipped)
    finally:
        search.close()
    failed = [
        {"id": item.get("sessionId"), "error": {"code": item.get("code"), "message": item.get("message")}}
        for item in skipped
    ]
    return {"sessions": len(listings), "indexed": len(listings) - len(failed), "failed": failed, "index": path}
