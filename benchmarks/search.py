"""Search benchmarks: M13 first index build, M14 reconciliation after one turn, M15/M16 query latency.

The store holds ``--sessions`` stored W(20) sessions (1,000 by default: 1,021,000 events), each written
by ``persist.write_session`` (one coordinator, appended in bulk, flushed). W(T) is English-only
("q{i} " user text, "r{i} " tool results, ``read_file`` calls), so the benchmark adds CJK text to the
workload's messages, which W(T) itself does not have: in every fourth turn the user message is a mixed
Chinese/Japanese sentence of the same 200 characters (built from a small vocabulary, varied by session
and turn, so CJK queries match some sessions and not others). Everything else is W(T) unchanged.

* M13 — the first full index build: a :class:`~agentlog.query.SqliteSearch` over the store opened on a
  missing index file (``open_at="startup"``: the schema is created at construction), then its first
  ``search_sessions`` (which reconciles every stored session: inspect, extract, insert). Timed from the
  construction to the first page.
* M14 — after one session gained one turn (appended and flushed by another coordinator, as another
  process would), one ``search_sessions`` on the same instance: the reconciliation lists the store,
  re-reads only the changed log, replaces its documents, then answers. The new turn's words must be
  found in that very search, or the figure would not be what M14 claims. ``M14_reopen_seconds``: the
  same search from a fresh instance over the existing index (nothing changed: no log is read).
* M15 / M16 — p50 / p95 latency of 100 mixed ``search_sessions`` queries (English words, phrases, words
  that are in no session, Chinese and Japanese substrings of two, three and more characters, mixed
  CJK + Latin), each a full search including its reconciliation with the (unchanged) store.

Targets (issue 11): M13 <= 60 s, M14 <= 0.05 s, M15 <= 0.01 s, M16 <= 0.05 s.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import agentlog as al
from agentlog.persistence.coordinator import PersistenceCoordinator

try:
    from persist import BACKENDS, bench_database, bench_dsn, bench_root, make_backend, write_session
    from workload import build_workload
except ImportError:  # imported as ``benchmarks.search``
    from benchmarks.persist import BACKENDS, bench_database, bench_dsn, bench_root, make_backend, write_session
    from benchmarks.workload import build_workload

TURNS = 20
TARGETS = {"M13": 60.0, "M14": 0.05, "M15": 0.01, "M16": 0.05}
POSTGRES_TARGETS = {"M13": 60.0, "M14": 0.05, "M15": 0.02, "M16": 0.06}
"""A PostgreSQL store's (the index in its database, measured from a second host): M13 is also to be no
more than the SQLite provider's over the same store."""
CJK_EVERY = 4
"""Every fourth turn's user message is CJK text (turns 4, 8, 12, 16, 20 of W(20))."""

_ZH = ("会话日志", "数据库迁移", "回滚计划", "修复", "测试用例", "配置文件", "部署", "性能", "索引", "搜索结果")
_JA = ("ログを確認", "マイグレーション", "テストを実行", "設定ファイル", "ロールバック", "検索インデックス")
_VOCABULARY = _ZH + _JA
USER_TEXT_CHARS = 200
NEW_TURN_TEXT = "zebra quokka axolotl: the one turn appended after the index was built"


def cjk_text(session: int, turn: int) -> str:
    """A deterministic 200-character Chinese/Japanese user message for ``session``'s ``turn``.

    The words vary with the session (which sessions a CJK query matches) and the turn; ``itgc修复``
    occurs in one session in seven, for the mixed-script query.
    """
    words: list[str] = []
    state = session * 1_000 + turn
    while sum(len(word) + 1 for word in words) < USER_TEXT_CHARS:
        state = (state * 1_103_515_245 + 12_345) % 2**31  # a fixed LCG: the same text on every run
        words.append(_VOCABULARY[(state >> 16) % len(_VOCABULARY)])
    if session % 7 == 0:
        words.insert(1, "itgc修复")
    return "，".join(words)[:USER_TEXT_CHARS]


def session_workload(base: Sequence[Any], session: int) -> list[Any]:
    """W(T) with every :data:`CJK_EVERY`-th turn's user message replaced by :func:`cjk_text`."""
    out = list(base)
    turn = 0
    for index, (type_, data, intent) in enumerate(out):
        if type_ == "turn/start":
            turn = data["turn"]
        elif type_ == "user/message" and turn % CJK_EVERY == 0:
            out[index] = (type_, al.user_message(cjk_text(session, turn), id=f"u{turn}"), intent)
    return out


def build_store(kind: str, root: str, sessions: int, turns: int = TURNS) -> int:
    """``sessions`` stored W(turns) sessions (with CJK turns); returns the number of events written."""
    base = build_workload(turns)
    for index in range(sessions):
        write_session(kind, root, session_workload(base, index), "bulk", session_id=f"s{index:05d}")
    return sessions * len(base)


QUERIES: tuple[str, ...] = (
    # English words and phrases of W(T) (tool results, answers, user text, tool arguments)
    *(f"r{i}" for i in range(1, 21)),
    *(f"q{i} q{i}" for i in range(1, 11)),
    *(f"f{i} f{i} f{i}" for i in range(1, 11)),
    "read_file",
    "src pkg module_00007",
    "module_00013 py",
    "a5 a5",
    "s3 s3 s3",
    # words in no session
    "migration",
    "rollback plan",
    "zeppelin",
    "NEAR OR *",
    "café",
    # Chinese: two, three, four or more characters inside longer runs
    "日志",
    "会话",
    "迁移",
    "修复",
    "部署",
    "性能",
    "索引",
    "回滚",
    "数据库",
    "会话日志",
    "数据库迁移",
    "测试用例",
    "配置文件",
    "搜索结果",
    "回滚计划，部署",
    "会话日志，数据库迁移",
    # Japanese kana (and kanji)
    "ログ",
    "テスト",
    "マイグレーション",
    "ロールバック",
    "を確認",
    "設定ファイル",
    "検索インデックス",
    "実行",
    # mixed CJK + Latin
    "itgc修复",
    "ITGC修复",
    # CJK in no session
    "火星",
    "量子计算机",
    "カレーライス",
)
QUERY_COUNT = 100


def mixed_queries() -> list[str]:
    """100 queries: :data:`QUERIES` cycled (English words, phrases, misses, CJK, mixed)."""
    return [QUERIES[i % len(QUERIES)] for i in range(QUERY_COUNT)]


def timed_queries(search: Any) -> tuple[list[float], int]:
    """M15/M16's measurement, the one definition (``original/agentlog_side.py`` calls it too): each of
    :func:`mixed_queries` as one full ``search_sessions`` call, timed; returns the latencies and how
    many of the queries found something."""
    latencies: list[float] = []
    matched = 0
    for query in mixed_queries():
        start = time.perf_counter()
        page = search.search_sessions(query=query)
        latencies.append(time.perf_counter() - start)
        matched += bool(page["items"])
    return latencies, matched


def append_one_turn(kind: str, root: str, session_id: str, turns: int) -> None:
    """One closed turn with :data:`NEW_TURN_TEXT` appended to a stored session by another coordinator."""
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, make_backend(kind, root))
    session = coordinator.resume(session_id)
    turn = turns + 1
    session.append("turn/start", {"turn": turn})
    session.append("user/message", al.user_message(NEW_TURN_TEXT, id=f"u{turn}"), {"surfaceOp": "append"})
    session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    store.flush(session)
    store.dispose(session)
    coordinator.close()


def _search(kind: str, root: str, *, open_at: str = "startup") -> Any:
    from agentlog.query.provider import index_location, open_store_search

    backend = make_backend(kind, root)
    if index_location(backend) is None:
        raise SystemExit("search benchmark: the store has no index path")
    coordinator = PersistenceCoordinator(al.SessionStore(), backend)
    return open_store_search(coordinator, open_at=open_at), coordinator


def _percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (p50 of 100 values: the 50th smallest; p95: the 95th)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(fraction * len(ordered))))
    return ordered[rank - 1]


def _index_bytes(kind: str, root: str) -> int:
    if kind != "postgres":
        return sum(os.path.getsize(os.path.join(root, name)) for name in os.listdir(root) if "search" in name)
    import psycopg

    from agentlog.query.postgres import index_schema

    with psycopg.connect(bench_dsn()) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
            (index_schema(root),),
        ).fetchone()
    return int(row[0]) if row else 0


def _second_host() -> Any:
    """For a PostgreSQL store: what another host is — an empty working directory and home, no cache."""
    host = tempfile.mkdtemp(prefix="agentlog-bench-host-")
    previous = (os.getcwd(), os.environ.get("HOME"), os.environ.get("XDG_CACHE_HOME"))
    os.chdir(host)
    os.environ["HOME"] = host
    os.environ["XDG_CACHE_HOME"] = os.path.join(host, ".cache")
    return host, previous


def _leave_host(state: Any) -> list[str]:
    """Back to this host; the files the second host made (there must be none)."""
    host, (cwd, home, cache) = state
    os.chdir(cwd)
    for key, value in (("HOME", home), ("XDG_CACHE_HOME", cache)):
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    made = [os.path.join(d, f) for d, _dirs, files in os.walk(host) for f in files]
    shutil.rmtree(host, ignore_errors=True)
    return made


def measure(kind: str, sessions: int, turns: int = TURNS) -> dict[str, Any]:
    """Build the store, then M13, M14 (and its reopen figure), M15 and M16; the store is removed after.

    For a PostgreSQL store the index is in the store's database: M13 is the first host's first index,
    and M14, M15, M16 and the "reopen" figure are measured from a second host (another search instance in
    an empty working directory and home, with no local files) over the index the first one built.
    """
    with bench_database(kind), bench_root(kind, "search") as root:
        try:
            return _measure(kind, root, sessions, turns)
        finally:
            if kind == "postgres":
                import psycopg
                from psycopg import sql

                from agentlog.query.postgres import index_schema

                with psycopg.connect(bench_dsn(), autocommit=True) as conn:
                    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(index_schema(root))))


def _measure(kind: str, root: str, sessions: int, turns: int) -> dict[str, Any]:
    import agentlog.persistence.jsonl.backend
    import agentlog.persistence.sqlite.backend
    import agentlog.query.sqlite  # imports are not what M13 measures

    if kind == "postgres":
        import agentlog.query.postgres  # noqa: F401
    second_host = kind == "postgres"
    start = time.perf_counter()
    events = build_store(kind, root, sessions, turns)
    build_seconds = time.perf_counter() - start
    print(f"store: {sessions} W({turns}) sessions, {events:,} events, built in {build_seconds:.1f} s", file=sys.stderr)

    gc.collect()
    start = time.perf_counter()
    search, coordinator = _search(kind, root)
    first = search.search_sessions(query="r1")
    m13 = time.perf_counter() - start
    if not first["items"]:
        raise SystemExit("M13: the first search found nothing")
    skipped = len(search.skipped)
    if skipped:
        raise SystemExit(f"M13: {skipped} sessions were not indexed: {search.skipped[:3]}")
    host_files: list[str] = []
    second_first = None
    if second_host:
        search.close()
        coordinator.close()
        state = _second_host()
        try:
            gc.collect()
            start = time.perf_counter()
            search, coordinator = _search(kind, root)
            again_first = search.search_sessions(query="r1")
            second_first = time.perf_counter() - start
        except BaseException:
            _leave_host(state)
            raise
        if again_first["items"] != first["items"]:  # (cursors name their instance)
            _leave_host(state)
            raise SystemExit("second host: the first search differs from the first host's")
    else:
        state = None
    try:
        target = f"s{sessions // 2:05d}"
        append_one_turn(kind, root, target, turns)
        gc.collect()
        start = time.perf_counter()
        found = search.search_sessions(query="zebra quokka axolotl")
        m14 = time.perf_counter() - start
        hits = [item["header"]["id"] for item in found["items"]]
        if hits != [target]:
            raise SystemExit(f"M14: the appended turn was not found by the reconciling search: {hits}")

        latencies, matched = timed_queries(search)
        search.close()
        coordinator.close()

        gc.collect()
        start = time.perf_counter()
        reopened, coordinator = _search(kind, root)
        again = reopened.search_sessions(query="zebra quokka axolotl")
        m14_reopen = time.perf_counter() - start
        reopened.close()
        coordinator.close()
    finally:
        if state is not None:
            host_files = _leave_host(state)
    if [item["header"]["id"] for item in again["items"]] != [target]:
        raise SystemExit("M14 (reopen): the reopened index lost the appended turn")
    if host_files:
        raise SystemExit(f"second host: the search made local files: {host_files[:5]}")
    return {
        "sessions": sessions,
        "events": events,
        "M13": m13,
        "M14": m14,
        "M14_reopen": m14_reopen,
        "M15": _percentile(latencies, 0.50),
        "M16": _percentile(latencies, 0.95),
        "max": max(latencies),
        "matched": matched,
        "index_bytes": _index_bytes(kind, root),
        "build_seconds": build_seconds,
        "second_host_first_search": second_first,
    }


def cmd_search(args: argparse.Namespace) -> dict[str, Any]:
    load = os.getloadavg()[0]
    result = measure(args.backend, args.sessions, args.turns)
    events = f"{result['events']:,} events"
    rows = [
        (f"M13 first full index build ({args.sessions} W({args.turns}) sessions, {events})", "M13"),
        ("M14 one search after one session gained one turn", "M14"),
        (f"M15 p50 of {QUERY_COUNT} mixed search_sessions queries", "M15"),
        (f"M16 p95 of {QUERY_COUNT} mixed search_sessions queries", "M16"),
    ]
    print(f"agentlog search — backend {args.backend}, load average {load:.2f} at start")
    width = max(len(label) for label, _ in rows)
    for label, key in rows:
        targets = POSTGRES_TARGETS if args.backend == "postgres" else TARGETS
        print(f"{label.ljust(width)}  {result[key]:>10.4f} s  <= {targets[key]} s")
    print(f"{'M14 the same search from a freshly opened index'.ljust(width)}  {result['M14_reopen']:>10.4f} s")
    if result["second_host_first_search"] is not None:
        print(
            f"{'second host (no local files): its first search'.ljust(width)}  "
            f"{result['second_host_first_search']:>10.4f} s  (M14-M16 above are this host's)"
        )
    print(
        f"{'queries with at least one hit'.ljust(width)}  {result['matched']:>10} of {QUERY_COUNT}"
        f"  (slowest {result['max']:.4f} s; index {result['index_bytes'] / 2**20:.1f} MiB)"
    )
    return {
        "M13_seconds": round(result["M13"], 6),
        "M14_seconds": round(result["M14"], 6),
        "M15_seconds": round(result["M15"], 6),
        "M16_seconds": round(result["M16"], 6),
        "M14_reopen_seconds": round(result["M14_reopen"], 6),
        "sessions": args.sessions,
        "turns": args.turns,
        "events": result["events"],
        "backend": args.backend,
        "index_bytes": result["index_bytes"],
        "load_average": round(load, 2),
    }


def add_search_parser(sub: Any) -> None:
    p = sub.add_parser("search", help="M13 index build, M14 reconciliation after one turn, M15/M16 query latency")
    p.add_argument("--sessions", type=int, default=1000, help="stored W(20) sessions (default 1000)")
    p.add_argument("--turns", type=int, default=TURNS, help=f"turns T of each W(T) session (default {TURNS})")
    p.add_argument("--backend", choices=BACKENDS, default="jsonl-zstd", help="store backend (default jsonl-zstd)")
    p.set_defaults(func=cmd_search)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    parser = argparse.ArgumentParser(prog="benchmarks/search.py")
    add_search_parser(parser.add_subparsers(dest="command", required=True))
    arguments = parser.parse_args(["search", *sys.argv[1:]])
    print(arguments.func(arguments))
