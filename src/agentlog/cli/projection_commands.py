"""The projection commands ``stats``, ``title`` and ``reindex --projections``, and the projection wiring
the other commands share (the registry, the persisted cache, the title service).

Every command composes the same registry (:func:`cli_registry`, i.e.
:func:`agentlog.projection.listing.command_registry`): the five built-in units plus ``lastActivity``
(the time of the newest event) and ``usageSteps`` (whether a token total is known), so a cache record
written by ``run`` serves ``ls`` without reading the log. The cache is derived and rebuildable
(``agentlog.projection.cache``): a command never *needs* it to answer correctly, it only makes answers
cheap.

Who creates the cache database: the commands and adapters that write a store (``run``, ``resume``,
``title NEW_TITLE``, ``import``, the openai-agents ``AgentlogSession``) and ``reindex --projections``.
The read commands use it when it exists (and refresh stale rows in it) but never create it: ``ls`` over
a store without one folds every log in memory (true figures, nothing written).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..errors import AgentlogError, InvalidOptionError, StorageAccessError, describe_error
from ..kernel.jsonvalue import thaw
from ..kernel.labels import check_label_key, check_tag, fold_labels, parse_label_filter
from ..kernel.session import Session
from ..kernel.store import SessionStore
from ..persistence.backend import Backend
from ..persistence.coordinator import PersistenceCoordinator
from ..persistence.storage_errors import storage_error
from ..projection.cache import InlineWriter, ProjectionCache
from ..projection.cache_storage import CacheStorage, MemoryCacheStorage, cache_path_for, open_cache_storage
from ..projection.labels import LABELS_KEY
from ..projection.listing import LAST_ACTIVITY_KEY, command_registry
from ..projection.listing import LAST_ACTIVITY_UNIT as LAST_ACTIVITY_UNIT  # re-exported: tests and callers name it here
from ..projection.registry import ProjectionRegistry
from ..projection.title import fold_session_title
from ..projection.title_service import DEFAULT_SESSION_TITLE_CONFIG, SessionTitleService
from ..projection.usage_steps import USAGE_STEPS_KEY, usage_known
from ._lineage import children_index, descendants, lineage_of, rolled_up_usage
from ._reading import _reader, _require_store
from .options import DEFAULT_OPTIONS, StoreOptions, shared_options
from .render import _emit_json, _iso, _TableOutput, render_error

logger = logging.getLogger("agentlog.projection.cache")


def cli_registry(store: SessionStore | None = None) -> ProjectionRegistry:
    """The registry every command uses (:func:`agentlog.projection.listing.command_registry`)."""
    return command_registry(store)


def listing_registry() -> ProjectionRegistry:
    """The units ``ls`` shows (title, sessionStats, tokenUsage, lastActivity, usageSteps, labels): serving a
    listing parses only their rows. Only for reading rows: a cold read through it would write back a record without the
    other units' rows, so ``ls`` refreshes stale rows through :func:`cli_registry`'s cache."""
    registry = ProjectionRegistry()
    for unit in cli_registry().units:
        if unit.key in _LISTED:
            registry.register(unit)
    return registry


_LISTED: Final = frozenset({"title", "sessionStats", "tokenUsage", LAST_ACTIVITY_KEY, USAGE_STEPS_KEY, LABELS_KEY})


def cache_exists(backend: Backend) -> bool:
    """Whether the store already has its cache database (read commands never create one)."""
    path = cache_path_for(backend)
    return path is not None and os.path.isfile(path)


def read_cache(coordinator: PersistenceCoordinator) -> ProjectionCache:
    """A cache for a read command: the store's database if it exists, else a throw-away memory medium.

    Writes (the cold read's write-back) run inline: the command returns only once they have landed.
    """
    backend = coordinator.backend
    storage: CacheStorage = open_cache_storage(backend) if cache_exists(backend) else MemoryCacheStorage()
    return ProjectionCache(
        cli_registry(), coordinator, storage, writer=InlineWriter(), store=SessionStore(), owns_storage=True
    )


@dataclass
class LiveProjections:
    """The projection services a writing command attaches to its store (see :func:`attach_projections`)."""

    registry: ProjectionRegistry
    cache: ProjectionCache
    titles: SessionTitleService

    def checkpoint(self, session: Session) -> None:
        """Write ``session``'s cache record now, after its log was flushed (fail-soft: a failure only
        warns). This lands a record bound to the stored revision, so the next ``ls`` serves it without
        reading the log; the detach write of a disposal cannot (it runs when the log can no longer be
        flushed, so it cannot tell the record is the complete fold)."""
        try:
            self.cache.write(session)
        except Exception as err:  # the cache is never required for correctness
            logger.warning('session projection cache: final write for "%s" failed: %s', session.id, describe_error(err))

    def close(self) -> None:
        """Stop the title service and the cache (waits for queued cache writes). Call it after the
        sessions are disposed (their detach writes are queued then) and before the coordinator closes."""
        self.titles.close()
        self.cache.close()
        self.registry.dispose()


def attach_projections(coordinator: PersistenceCoordinator) -> LiveProjections:
    """Keep the store's cache current while a command appends (``run``, ``resume``, ``title``): the
    registry and the cache on the coordinator's store (write policy: ``turn/end``, 200 events, 5 s,
    detach), and the title service that gives a session its fallback title after its first prompt."""
    store = coordinator.store
    registry = cli_registry(store)
    cache = ProjectionCache(registry, coordinator, open_cache_storage(coordinator.backend), owns_storage=True)
    titles = SessionTitleService(store, DEFAULT_SESSION_TITLE_CONFIG)
    return LiveProjections(registry, cache, titles)


def total_tokens(usage: object) -> int | None:
    """The four usage buckets added up (``None`` when the unit was not served)."""
    if not isinstance(usage, Mapping):
        return None
    return sum(int(usage.get(name) or 0) for name in _BUCKETS)


_BUCKETS: Final = ("uncachedInputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens")


# --- stats ---------------------------------------------------------------------------------------------


def _seconds(ms: object) -> str:
    return f"{float(ms) / 1000:.2f} s" if isinstance(ms, int | float) else ""


def _number(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else ("" if value is None else str(value))


def _stats_rows(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    stats = values.get("sessionStats") or {}
    usage = values.get("tokenUsage") or {}
    pressure = values.get("contextPressure") or {}
    breakdown = values.get("contextBreakdown") or {}
    ttft_steps = stats.get("ttftSteps") or 0
    decode_ms = stats.get("decodeMs") or 0
    rows = [
        ("title", str(values.get("title") or "(untitled)")),
        ("last activity", _iso(values.get(LAST_ACTIVITY_KEY))),
        ("turns", _number(stats.get("turns"))),
        ("steps", _number(stats.get("steps"))),
        ("time in the model", _seconds(stats.get("llmMs"))),
        ("time in tools", _seconds(stats.get("toolMs"))),
        ("mean time to first token", _seconds(stats["ttftMs"] / ttft_steps) if ttft_steps else ""),
        (
            "decode rate",
            f"{stats['decodeTokens'] * 1000 / decode_ms:,.1f} tokens/s" if decode_ms else "",
        ),
    ]
    if usage_known(values):
        rows += [(f"tokens: {name}", _number(usage.get(name))) for name in _BUCKETS]
        rows.append(("tokens: total", _number(total_tokens(usage))))
    else:  # steps, none of which reported usage: the zero buckets would be a false 0
        rows.append(("tokens: total", "unknown (no step of the log reported usage)"))
    for name in ("pressureTokens", "projectedTokens", "contextWindow"):
        if name in pressure:
            rows.append((f"context: {name}", _number(pressure[name])))
    for name in ("systemTokens", "toolsTokens", "messageTokens"):
        if name in breakdown:
            rows.append((f"surface: {name}", _number(breakdown[name])))
    return rows


@shared_options()
def stats_command(
    session_id: Annotated[str, typer.Argument(help="The session to report on.")],
    opts: StoreOptions = DEFAULT_OPTIONS,
) -> None:
    """Per-session projections: title, turns, steps, model and tool time, token use, context pressure.

    Read from the projection cache (only the log's tail past the cached rows is read) and never written
    to the log. --json prints the snapshot: {sessionId, asOfSeq, values} with every unit's view
    (tokenUsage, contextPressure, contextBreakdown, sessionStats, title, lastActivity, usageSteps),
    and lineage {parentSession, origin, delegationDepth, seedLength, tokens: {own, withChildren,
    children: [{id, level, usage}]}}: own is tokenUsage, withChildren adds each descendant (fork or
    subagent) once, counting only what it reported past its seed, so an inherited prefix is never
    counted twice.
    """
    try:
        storage = opts.open_backend(read_only=True)
        _require_store(storage, session_id)
        reader = _reader(storage)
        cache = read_cache(reader)
        try:
            snapshot = cache.cold_snapshot(session_id)
            values = thaw(snapshot["values"])
            lineage = _lineage_stats(session_id, storage, reader, values)
        finally:
            cache.close()
            reader.close()
    except AgentlogError as err:
        render_error(err, opts.as_json)
    if opts.as_json:
        _emit_json({"sessionId": session_id, "asOfSeq": snapshot["asOfSeq"], "values": values, "lineage": lineage})
        return
    table = _TableOutput(("projection", "value"), title=f"session {session_id} (as of seq {snapshot['asOfSeq']})")
    for name, value in _stats_rows(values) + _lineage_rows(lineage):
        table.add_row(name, value)
    table.print()


def _lineage_stats(
    session_id: str, storage: Backend, reader: PersistenceCoordinator, values: Mapping[str, Any]
) -> dict[str, Any]:
    """``stats``' lineage block: the session's parent and depth, and its token use ``own`` (the
    ``tokenUsage`` figure) and ``withChildren`` (plus every descendant's own use, past its seed, once)."""
    listings = storage.list_sessions()
    headers = {item.id: item.header or {} for item in listings}
    kids = descendants(children_index(headers.items()), session_id)

    def read(child: str) -> tuple[Mapping[str, Any], Any] | None:
        try:
            view = reader.view(child)
        except AgentlogError:
            return None
        return view.header, view.events

    own = values.get("tokenUsage") if usage_known(values) else None
    document = lineage_of(headers.get(session_id) or {})
    document["tokens"] = rolled_up_usage(own, kids, read)
    return document


def _lineage_rows(lineage: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    if lineage.get("parentSession"):
        kind = "subagent of" if lineage.get("origin") == "subagent" else "forked from"
        rows.append(("parent", f"{kind} {lineage['parentSession']}"))
    if lineage.get("delegationDepth"):
        rows.append(("delegation depth", str(lineage["delegationDepth"])))
    tokens = lineage["tokens"]
    if tokens["children"]:
        rows.append(("descendants", f"{len(tokens['children']):,}"))
        own, total = tokens["own"], tokens["withChildren"]
        rows.append(("tokens: own", "unknown" if own is None else _number(total_tokens(own))))
        rows.append(("tokens: with children", "unknown" if total is None else _number(total_tokens(total))))
    return rows


# --- title ---------------------------------------------------------------------------------------------


def _title_document(session_id: str, events: Any) -> dict[str, Any]:
    current = fold_session_title(events)
    if current is None:
        return {"sessionId": session_id, "title": None, "source": None, "messageSeqs": [], "eventSeq": None}
    return {
        "sessionId": session_id,
        "title": current["title"],
        "source": thaw(current["source"]),
        "messageSeqs": list(current["messageSeqs"]),
        "eventSeq": current["eventSeq"],
    }


def _rename(session_id: str, new_title: str, opts: StoreOptions) -> dict[str, Any]:
    """Resume the session, append the pinned user title, flush, release (cache record updated)."""
    from .agent_commands import _release

    storage = opts.open_backend()
    coordinator = PersistenceCoordinator(SessionStore(), storage)
    projections = attach_projections(coordinator)
    session: Session | None = None
    failure: AgentlogError | None = None
    try:
        session = coordinator.resume(session_id)
        projections.titles.rename(session, new_title)
        document = _title_document(session_id, session.events)
    except AgentlogError as err:
        failure = err
    finally:
        released = _release(coordinator, [session] if session is not None else [], projections=projections)
    failure = failure or released
    if failure is not None:
        raise failure
    return document


@shared_options()
def title_command(
    session_id: Annotated[str, typer.Argument(help="The session whose title to show or set.")],
    new_title: Annotated[
        str | None, typer.Argument(help="Rename: the new title (pinned: no automatic title replaces it).")
    ] = None,
    opts: StoreOptions = DEFAULT_OPTIONS,
) -> None:
    """Show a session's title, or with NEW_TITLE rename it (a pinned user title, appended to the log).

    The title is a log fact (the last session/title event), normalized to one printable line of at most
    80 UTF-8 bytes. A new session gets a fallback title (the first words of its first prompt) from
    run; a rename pins the title. --json: {sessionId, title, source, messageSeqs, eventSeq}.
    """
    try:
        if new_title is None:
            reader = _reader(opts.open_backend(read_only=True))
            try:
                document = _title_document(session_id, reader.view(session_id).events)
            finally:
                reader.close()
        else:
            document = _rename(session_id, new_title, opts)
    except AgentlogError as err:
        render_error(err, opts.as_json)
    if opts.as_json:
        _emit_json(document)
        return
    shown = document["title"] if document["title"] is not None else "(untitled)"
    source = document["source"]["kind"] if document["source"] else "none"
    typer.echo(f"{shown}  ({source})" if new_title is None else f"session {session_id}: title set to {shown}")


# --- label --------------------------------------------------------------------------------------------


def _labels_document(session_id: str, events: Any, changed: bool | None = None) -> dict[str, Any]:
    state = fold_labels(events)
    document: dict[str, Any] = {"sessionId": session_id, "labels": state["labels"], "tags": state["tags"]}
    if changed is not None:
        document["changed"] = changed
    return document


def _relabel(
    session_id: str, labels: dict[str, str | None], add: list[str], remove: list[str], opts: StoreOptions
) -> dict[str, Any]:
    """Resume the session, append the label and tag changes, flush, release (cache record updated)."""
    from .agent_commands import _release

    storage = opts.open_backend()
    coordinator = PersistenceCoordinator(SessionStore(), storage)
    projections = attach_projections(coordinator)
    session: Session | None = None
    failure: AgentlogError | None = None
    try:
        session = coordinator.resume(session_id)
        before = len(session.events)
        if labels:
            session.set_labels(labels)
        if add:
            session.add_tags(add)
        if remove:
            session.remove_tags(remove)
        document = _labels_document(session_id, session.events, changed=len(session.events) > before)
    except AgentlogError as err:
        failure = err
    finally:
        released = _release(coordinator, [session] if session is not None else [], projections=projections)
    failure = failure or released
    if failure is not None:
        raise failure
    return document


@shared_options()
def label_command(
    session_id: Annotated[str, typer.Argument(help="The session whose labels and tags to show or change.")],
    assignments: Annotated[
        list[str] | None,
        typer.Argument(help="Labels to set, as KEY=VALUE (a label already set is replaced).", metavar="[KEY=VALUE]..."),
    ] = None,
    remove: Annotated[
        list[str] | None,
        typer.Option("--remove", help="Remove the label KEY (repeatable).", metavar="KEY", show_default=False),
    ] = None,
    tag: Annotated[
        list[str] | None, typer.Option("--tag", help="Add the tag TAG (repeatable).", metavar="TAG", show_default=False)
    ] = None,
    untag: Annotated[
        list[str] | None,
        typer.Option("--untag", help="Remove the tag TAG (repeatable).", metavar="TAG", show_default=False),
    ] = None,
    opts: StoreOptions = DEFAULT_OPTIONS,
) -> None:
    """Show a session's labels and tags, or change them (appended to its log as ignorable
    session/labels and session/tags events, which the original harness skips when it loads the log).

    A key or tag is 1-64 characters of A-Z a-z 0-9 _ . -; a value 1-256 printable characters; a session
    carries at most 64 labels and 64 tags. A change that changes nothing appends nothing. ``ls --label``,
    ``ls --tag`` and ``search --label`` filter on them. --json: {sessionId, labels, tags} (with a change
    also changed: whether anything was appended).
    """
    try:
        changes: dict[str, str | None] = dict(parse_label_filter(text, "label") for text in assignments or ())
        for key in remove or ():
            if check_label_key(key) in changes:
                raise InvalidOptionError(f'label: "{key}" is both set and removed; give it once')
            changes[key] = None
        add = [check_tag(text) for text in tag or ()]
        drop = [check_tag(text) for text in untag or ()]
        if set(add) & set(drop):
            raise InvalidOptionError(f"label: tag(s) {', '.join(sorted(set(add) & set(drop)))} both added and removed")
        if not changes and not add and not drop:
            reader = _reader(opts.open_backend(read_only=True))
            try:
                document = _labels_document(session_id, reader.view(session_id).events)
            finally:
                reader.close()
        else:
            document = _relabel(session_id, changes, add, drop, opts)
    except AgentlogError as err:
        render_error(err, opts.as_json)
    if opts.as_json:
        _emit_json(document)
        return
    words = [f"{key}={value}" for key, value in document["labels"].items()] + [f"#{t}" for t in document["tags"]]
    shown = " ".join(words) if words else "(no labels or tags)"
    if document.get("changed") is False:
        shown += "  (unchanged)"
    typer.echo(f"{session_id}: {shown}")


# --- reindex -------------------------------------------------------------------------------------------


def _drop_cache_file(path: str) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(path + suffix)
        except FileNotFoundError:
            pass
        except OSError as err:
            raise storage_error(err, path + suffix, "remove the session projection cache to rebuild it") from err


@shared_options()
def reindex_command(
    opts: StoreOptions = DEFAULT_OPTIONS,
    projections: Annotated[
        bool, typer.Option("--projections", help="Drop and rebuild the projection cache of every session.")
    ] = False,
    search: Annotated[
        bool, typer.Option("--search", help="Drop and rebuild the full-text search index of every session.")
    ] = False,
) -> None:
    """Rebuild derived data: --projections refolds every stored log into the projection cache, --search
    indexes every stored log again into the search index (both may be given; each drops its file first).

    Neither is ever needed for correctness (ls, stats and title work without the cache; search builds
    and reconciles its index by itself), only for speed or to replace a damaged file. Sessions whose log
    cannot be read are reported and left out. --json: {sessions, indexed, failed: [{id, error: {code,
    message}}], cache} for --projections, {sessions, indexed, failed, index} for --search, and
    {projections: {...}, search: {...}} for both. Exit code 1 if any session failed.
    """
    documents: dict[str, dict[str, Any]] = {}
    try:
        if not projections and not search:
            raise InvalidOptionError("reindex: say what to rebuild (--projections, --search)")
        if projections:
            documents["projections"] = _reindex_projections(opts)
        if search:
            documents["search"] = _reindex_search(opts)
    except AgentlogError as err:
        render_error(err, opts.as_json)
    if opts.as_json:
        _emit_json(documents["projections" if projections else "search"] if len(documents) == 1 else documents)
    else:
        for kind, document in documents.items():
            what = "projection cache" if kind == "projections" else "search index"
            where = document["cache"] if kind == "projections" else document["index"]
            typer.echo(
                f"{what} rebuilt: {document['indexed']} of {document['sessions']} sessions"
                + (f" ({where})" if where else "")
            )
            for item in document["failed"]:
                typer.echo(f"  {item['id']}: [{item['error']['code']}] {item['error']['message']}")
    if any(document["failed"] for document in documents.values()):
        raise typer.Exit(code=1)


def _progress(label: str, opts: StoreOptions) -> Progress:
    return Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=opts.as_json,
    )


def _reindex_projections(opts: StoreOptions) -> dict[str, Any]:
    """Drop the projection cache and refold every stored log: ``{sessions, indexed, failed, cache}``."""
    storage = opts.open_backend(read_only=True)
    listings = storage.list_sessions()
    path = cache_path_for(storage)
    if path is not None:
        _drop_cache_file(path)
    reader = _reader(storage)
    medium = open_cache_storage(storage)
    cache = ProjectionCache(
        cli_registry(), reader, medium, writer=InlineWriter(), store=SessionStore(), owns_storage=True
    )
    failed: list[dict[str, Any]] = []
    indexed = 0
    try:
        medium.clear()  # a medium that cannot be written (full disk, read-only) is typed: nothing to rebuild into
        with _progress("reindexing projections", opts) as progress:
            task = progress.add_task("reindex", total=len(listings))
            for listing in listings:
                if listing.error_code is not None:
                    failed.append(
                        {"id": listing.id, "error": {"code": listing.error_code, "message": listing.error_message}}
                    )
                else:
                    try:
                        cache.cold_snapshot(listing.id, strict=True)
                        indexed += 1
                    except StorageAccessError as err:
                        if path is not None and err.path == os.path.abspath(path):
                            raise  # the cache file failed, not this log: every session would fail the same way
                        failed.append({"id": listing.id, "error": {"code": err.code, "message": str(err)}})
                    except AgentlogError as err:
                        failed.append({"id": listing.id, "error": {"code": err.code, "message": str(err)}})
                progress.advance(task)
    finally:
        cache.close()
        reader.close()
    return {"sessions": len(listings), "indexed": indexed, "failed": failed, "cache": path}


def _reindex_search(opts: StoreOptions) -> dict[str, Any]:
    """Drop the search index and index every stored log again: ``{sessions, indexed, failed, index}``."""
    from .query_commands import rebuild_search_index

    storage = opts.open_backend(read_only=True)
    storage.list_sessions()  # a missing store is STORE_NOT_FOUND before the index file is made
    reader = _reader(storage)
    try:
        with _progress("reindexing search", opts) as progress:
            task = progress.add_task("reindex", total=None)

            def advance(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)

            return rebuild_search_index(reader, advance)
    finally:
        reader.close()
