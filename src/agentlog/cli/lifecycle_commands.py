"""The lifecycle commands ``rm`` (delete sessions) and ``gc`` (retention by last activity).

Both delete through :meth:`PersistenceCoordinator.delete`: each session goes atomically (whole or not at
all, on every backend), a session open for writing anywhere is refused (``SESSION_LOCKED``), and its
derived records go with it — its projection cache row and its search index documents, in the files
beside the store or, for PostgreSQL, in this host's cache (:mod:`agentlog.persistence.host_cache`).
Other hosts' caches of a PostgreSQL store never serve a deleted session's rows (reads go by the store's
listing): their search index drops them at its next search, and ``reindex`` rebuilds both without it.

``gc`` selects by last activity (the time of the newest event, else the creation time) and never
deletes a session one of whose descendants is still recent: a subtree goes whole or stays. The
selection is :func:`expired_sessions`, a predicate over the listing rows (``keep`` is the seam for
retention by label or tag once sessions carry them).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Final

import typer

from ..errors import AgentlogError, InvalidOptionError
from ..kernel.labels import check_tag, parse_label_filter
from ..kernel.store import SessionStore
from ..persistence.backend import Backend, ListsRevisions
from ..persistence.coordinator import PersistenceCoordinator
from .options import DEFAULT_OPTIONS, StoreOptions, shared_options
from .render import _emit_json, _iso, render_error

__all__ = ["expired_sessions", "gc_command", "parse_age", "rm_command"]

_UNITS: Final = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_AGE: Final = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")


def parse_age(text: str) -> int:
    """``30d`` → milliseconds (units ``s``, ``m``, ``h``, ``d``, ``w``); anything else is ``INVALID_OPTION``."""
    match = _AGE.match(text)
    if match is None:
        raise InvalidOptionError(
            f'--older-than must be a whole number and a unit (s, m, h, d, w), e.g. "30d" or "12h"; got "{text}"'
        )
    return int(match.group(1)) * _UNITS[match.group(2)]


@contextmanager
def _deleting(opts: StoreOptions) -> Iterator[tuple[PersistenceCoordinator, list[Callable[[str], None]]]]:
    """A coordinator over the store opened for writing, and the hooks that drop a deleted session's
    derived records from the derived files that exist (none is created for it)."""
    from ..projection.cache_storage import cache_path_for, open_cache_storage
    from ..query.provider import is_postgres_store
    from ..query.sqlite import SqliteSearch, default_index_path

    probe = opts.open_backend(read_only=True)
    try:
        probe.list_revisions() if isinstance(probe, ListsRevisions) else probe.list_sessions()
    finally:  # a missing store is STORE_NOT_FOUND here, before a writable open could create it
        probe.close()
    storage = opts.open_backend()
    coordinator = PersistenceCoordinator(SessionStore(), storage)
    forget: list[Callable[[str], None]] = []
    closers: list[Callable[[], None]] = []
    try:
        cache_path = cache_path_for(storage)
        if cache_path is not None and os.path.isfile(cache_path):
            medium = open_cache_storage(storage)
            forget.append(medium.delete)
            closers.append(medium.close)
        index_path = default_index_path(storage)
        if is_postgres_store(storage):
            # The index is in the store's database, shared by every host: its rows go at delete time too
            # (an index not created yet is created empty by the first forget, which is harmless).
            from ..query.postgres import PostgresSearch

            pg_search = PostgresSearch(coordinator, open_at="first-search")
            forget.append(lambda session_id: _forget_documents(pg_search, session_id))
            closers.append(pg_search.close)
        elif index_path is not None and os.path.isfile(index_path):
            search = SqliteSearch(path=index_path, store=SessionStore(), open_at="first-search")
            forget.append(lambda session_id: _forget_documents(search, session_id))
            closers.append(search.close)
        yield coordinator, forget
    finally:
        for close in reversed(closers):
            close()
        coordinator.close()
        storage.close()


def _forget_documents(search: Any, session_id: str) -> None:
    search.forget([session_id])


def _failure(session_id: str, err: AgentlogError) -> dict[str, Any]:
    return {"id": session_id, "error": {"code": err.code, "message": str(err)}}


def _children_mode(with_children: bool, orphan: bool) -> str:
    if with_children and orphan:
        raise InvalidOptionError("--with-children and --orphan exclude each other: say which one")
    return "delete" if with_children else "orphan" if orphan else "refuse"


@shared_options()
def rm_command(
    session_ids: Annotated[list[str], typer.Argument(help="The sessions to delete.", show_default=False)],
    opts: StoreOptions = DEFAULT_OPTIONS,
    with_children: Annotated[
        bool, typer.Option("--with-children", help="Delete each session's forks and subagents with it.")
    ] = False,
    orphan: Annotated[
        bool, typer.Option("--orphan", help="Delete the session and leave its children without their parent.")
    ] = False,
) -> None:
    """Delete sessions for good: the log and every derived record of it (projection cache, search index).

    Each session goes atomically (a crash leaves it whole or gone). Refused per session: one open for
    writing (SESSION_LOCKED), one with children unless --with-children or --orphan (SESSION_HAS_CHILDREN),
    an unknown id (SESSION_NOT_FOUND); the other ids are still deleted. --json: {deleted: [ids],
    orphaned: [ids], failed: [{id, error: {code, message}}]}. Exit code 1 if any id failed.
    """
    deleted: list[str] = []
    orphaned: list[str] = []
    failed: list[dict[str, Any]] = []
    try:
        mode = _children_mode(with_children, orphan)
        with _deleting(opts) as (coordinator, forget):
            for session_id in session_ids:
                if session_id in deleted:
                    continue  # deleted already, as a descendant of an earlier one
                try:
                    result = coordinator.delete(session_id, children=mode, forget=forget)
                except AgentlogError as err:
                    failed.append(_failure(session_id, err))
                    continue
                deleted.extend(result.deleted)
                orphaned.extend(result.orphaned)
    except AgentlogError as err:
        render_error(err, opts.as_json)
    if opts.as_json:
        _emit_json({"deleted": deleted, "orphaned": orphaned, "failed": failed})
    else:
        for session_id in deleted:
            typer.echo(f"deleted {session_id}")
        for session_id in orphaned:
            typer.echo(f"orphaned {session_id} (its parent was deleted)")
        for item in failed:
            typer.echo(f"not deleted {item['id']}: [{item['error']['code']}] {item['error']['message']}", err=True)
    if failed:
        raise typer.Exit(code=1)


def expired_sessions(
    rows: Sequence[Mapping[str, Any]],
    cutoff_ms: int,
    *,
    keep: Callable[[Mapping[str, Any]], bool] | None = None,
) -> tuple[list[str], list[dict[str, Any]]]:
    """Which sessions retention removes: ``(tops, kept)``.

    ``rows`` are listing rows (``id``, ``parentSession``, ``lastActivity``, ``createdAt``). A session
    expires when its last activity (else its creation time) is before ``cutoff_ms`` and ``keep`` (if
    given) does not keep it. It goes only with its whole subtree expired; ``tops`` are the expired
    sessions whose parent does not go, each to be deleted with its descendants, and ``kept`` lists
    ``{id, reason}`` for expired sessions that stay because a descendant is recent or kept.
    """
    by_id = {row["id"]: row for row in rows}
    children: dict[str, list[str]] = {}
    for row in rows:
        parent = row.get("parentSession")
        if isinstance(parent, str) and parent != row["id"] and parent in by_id:
            children.setdefault(parent, []).append(row["id"])

    def expired(row: Mapping[str, Any]) -> bool:
        when = row.get("lastActivity") if type(row.get("lastActivity")) is int else row.get("createdAt")
        return type(when) is int and when < cutoff_ms and not (keep is not None and keep(row))

    whole: dict[str, bool] = {}

    def subtree_expired(session_id: str, seen: frozenset[str] = frozenset()) -> bool:
        if session_id not in whole:
            below = [c for c in children.get(session_id, ()) if c not in seen]
            whole[session_id] = expired(by_id[session_id]) and all(
                subtree_expired(child, seen | {session_id}) for child in below
            )
        return whole[session_id]

    tops: list[str] = []
    kept: list[dict[str, Any]] = []
    for row in rows:
        session_id = row["id"]
        if not expired(row):
            continue
        if not subtree_expired(session_id):
            kept.append({"id": session_id, "reason": "a descendant is recent or kept"})
            continue
        parent = row.get("parentSession")
        if not (isinstance(parent, str) and parent in by_id and subtree_expired(parent)):
            tops.append(session_id)
    return tops, kept


def _listing_rows(storage: Backend) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every session's gc row, and the sessions skipped because their header cannot be read."""
    from ..projection.labels import labels_of
    from .read_commands import _projected

    listings = storage.list_sessions()
    projected = _projected(storage, listings)
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for item in listings:
        if item.error_code is not None or item.header is None:
            skipped.append(
                {"id": item.id, "error": {"code": item.error_code or "SESSION_CORRUPT", "message": item.error_message}}
            )
            continue
        values = projected.get(item.id, ({}, None))[0]
        labels, tags = labels_of(values)
        rows.append(
            {
                "id": item.id,
                "parentSession": item.header.get("parentSession"),
                "createdAt": item.header.get("createdAt"),
                "lastActivity": values.get("lastActivity"),
                "title": values.get("title"),
                "labels": labels,
                "tags": tags,
            }
        )
    return rows, skipped


@shared_options()
def gc_command(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than", help="Delete sessions whose last activity is older than this (30d, 12h, 90m, 2w)."
        ),
    ],
    opts: StoreOptions = DEFAULT_OPTIONS,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would be deleted.")] = False,
    keep_tag: Annotated[
        list[str] | None,
        typer.Option("--keep-tag", help="Keep every session with this tag (repeatable), and its ancestors."),
    ] = None,
    keep_label: Annotated[
        list[str] | None,
        typer.Option(
            "--keep-label", help="Keep every session with this label, KEY=VALUE (repeatable), and its ancestors."
        ),
    ] = None,
    archive: Annotated[
        Path | None,
        typer.Option(
            "--archive",
            help="Before deleting, copy each session into this JSONL store (verified by its sha256) and record "
            "it in DIR/archive-manifest.jsonl.",
        ),
    ] = None,
) -> None:
    """Retention: delete every session whose last activity (the newest event, else its creation) is older
    than --older-than, each with its whole subtree; a session with a recent descendant is kept.
    --keep-tag T and --keep-label K=V (repeatable) keep every session carrying any of them (read from the
    projection cache, not the logs), and so its ancestors too.

    --archive DIR first copies each session, losslessly, into DIR (a JSONL store: read it with
    `agentlog --store DIR ls/show/export`) and checks the copy's digest against the stored log; a
    session whose copy cannot be made or verified is not deleted. Sessions whose header cannot be read
    are skipped (never deleted by gc). --json: {cutoff, dryRun, selected: [{id, lastActivity, title}],
    deleted: [ids], archived: [{id, events, sha256, archivedAt, source}], kept: [{id, reason}], skipped,
    failed: [{id, error}]}. Exit code 1 if any selected session failed.
    """
    failed: list[dict[str, Any]] = []
    deleted: list[str] = []
    archived: list[dict[str, Any]] = []
    try:
        age = parse_age(older_than)
        cutoff = time.time_ns() // 1_000_000 - age
        keep_tags = frozenset(check_tag(tag) for tag in keep_tag or ())
        keep_labels = frozenset(parse_label_filter(text) for text in keep_label or ())
        storage = opts.open_backend(read_only=True)
        try:
            rows, skipped = _listing_rows(storage)
        finally:
            storage.close()

        def keep(row: Mapping[str, Any]) -> bool:
            return bool(keep_tags & set(row["tags"])) or any(row["labels"].get(k) == v for k, v in keep_labels)

        tops, kept = expired_sessions(rows, cutoff, keep=keep if keep_tags or keep_labels else None)
        by_id = {row["id"]: row for row in rows}
        index: dict[str, list[str]] = {}
        for row in rows:
            if isinstance(row["parentSession"], str) and row["parentSession"] in by_id:
                index.setdefault(row["parentSession"], []).append(row["id"])
        groups = {top: _subtree(index, top) for top in tops}
        selected = [
            {"id": sid, "lastActivity": by_id[sid]["lastActivity"], "title": by_id[sid]["title"]}
            for top in tops
            for sid in groups[top]
        ]
        if not dry_run and tops:
            with _deleting(opts) as (coordinator, forget):
                listings = coordinator.list()  # once: each delete finds the children in it
                archive_store = _open_archive(archive) if archive is not None else None
                for top in tops:
                    try:
                        if archive_store is not None:
                            from ..persistence.archive import archive_session

                            for sid in groups[top]:
                                archived.append(archive_session(coordinator.backend, archive_store, sid).manifest())
                        result = coordinator.delete(top, children="delete", forget=forget, listings=listings)
                    except AgentlogError as err:
                        failed.append(_failure(top, err))
                        continue
                    deleted.extend(result.deleted)
                    gone = set(result.deleted)
                    listings = [listing for listing in listings if listing.id not in gone]
    except AgentlogError as err:
        render_error(err, opts.as_json)
    document = {
        "cutoff": cutoff,
        "dryRun": dry_run,
        "selected": selected,
        "deleted": deleted,
        "archived": archived,
        "kept": kept,
        "skipped": skipped,
        "failed": failed,
    }
    if opts.as_json:
        _emit_json(document)
    else:
        verb = "would delete" if dry_run else "deleted"
        done = set(deleted)
        for item in selected:
            if dry_run or item["id"] in done:
                when = _iso(item["lastActivity"]) or "unknown activity"
                typer.echo(f"{verb} {item['id']}  (last activity {when})")
        for item in kept:
            typer.echo(f"kept {item['id']}: {item['reason']}")
        for item in failed:
            typer.echo(f"not deleted {item['id']}: [{item['error']['code']}] {item['error']['message']}", err=True)
        count = len(selected) if dry_run else len(deleted)
        typer.echo(
            f"{count} session(s) {'would be deleted' if dry_run else 'deleted'}"
            + (f", archived in {archive}" if archived else "")
        )
    if failed:
        raise typer.Exit(code=1)


def _subtree(index: Mapping[str, Sequence[str]], root: str) -> list[str]:
    """``root`` and its descendants, parents first (a cycle stops)."""
    found: list[str] = []
    stack = [root]
    while stack:
        session_id = stack.pop()
        if session_id in found:
            continue
        found.append(session_id)
        stack.extend(reversed(index.get(session_id, ())))
    return found


def _open_archive(directory: Path) -> Any:
    from ..persistence.jsonl.backend import JsonlBackend

    return JsonlBackend(str(directory.absolute()), compression="none")
