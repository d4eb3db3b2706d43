"""CJK search recall: ``SqliteSearch`` against a plain substring scan over a mixed zh/ja/en corpus.

``python benchmarks/search_recall.py [--sessions 200] [--queries 200] [--seed 11]`` writes a generated
corpus of agent sessions into a real JSONL store (a tenth of them stay live in the writing process),
runs CJK queries through :class:`agentlog.query.sqlite.SqliteSearch` — ``search_sessions`` and
``search_events``, following every ``nextCursor`` with small pages — and compares every hit set with
the ground truth: a plain scan of every indexed document for the query as a substring, ignoring case
and treating every whitespace run as one space. It prints recall and precision per query kind and, as
its last line, one JSON object ``{"recall": ..., "precision": ..., "queries": N, ...}`` (micro-averaged
over (query, session, seq) triples; the session-level figures are in the same object).

The corpus is deterministic (one seed) and reads like agent work: prompts and answers in Chinese,
Japanese and English, tool calls whose raw JSON arguments carry CJK text (escaped or not), tool results
with code identifiers glued to CJK (``itgc修复``, ``parse_ログ()``), half- and full-width forms,
punctuation and emoji, todo lists; and things that must *not* be found — assistant reasoning and
streamed chunks, which the index never holds.

The ground truth deliberately shares no code with the index: the document text is rebuilt here from the
parts the generator wrote (the test suite checks it equals the extraction the index uses), and case is
folded with ``str.lower``.

``tests/query/test_cjk.py`` imports this module (by path) for its end-to-end recall tests.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

CorpusEvent = tuple[str, Any, dict[str, Any] | None]

PROVIDER = "deepseek"
MODEL = "deepseek-chat"
APPEND: dict[str, Any] = {"surfaceOp": "append"}
REASONING_ONLY = "推理专用暗号"
"""Written only into assistant reasoning blocks: never indexed, so searching it must find nothing."""
CHUNK_ONLY = "流式片段专用词"
"""Written only into streamed assistant chunks: never indexed either."""

ZH = (
    "请帮我看一下会话日志里为什么没有记录工具调用",
    "修复了登录页面的空指针异常",
    "数据库迁移脚本在生产环境执行失败",
    "单元测试全部通过",
    "内存泄漏出现在缓存模块",
    "配置文件中的超时时间太短",
    "已经回滚到上一个稳定版本",
    "性能优化之后接口响应时间减少了一半",
    "代码审查发现了并发问题",
    "用户权限校验逻辑有漏洞",
    "日志级别应该调成调试模式",
    "超时重试机制需要指数退避",
    "把这个函数拆成两个更小的函数",
    "为什么搜索不到中文关键词",
    "全文检索索引需要重建",
    "分词器把整句当成一个词",
    "会话日志已保存到磁盘",
    "部署流水线卡在构建阶段",
    "请用中文回答",
    "先运行迁移再重启服务",
    "这个正则表达式匹配不到换行符",
    "线上告警显示磁盘使用率超过百分之九十",
    "依赖升级以后类型检查报错",
    "接口文档和实现不一致",
    "我已经更新了测试用例",
    "排查一下为什么任务队列一直堆积",
    "缓存失效策略改成写后失效",
    "子会话的委托深度不能超过三层",
)
JA = (
    "ログを確認してください",
    "テストが失敗しました",
    "データベースの移行が完了しました",
    "キャッシュをクリアしてから再実行します",
    "設定ファイルを更新しました",
    "このエラーメッセージの意味を教えてください",
    "ビルドは成功しましたが、デプロイで止まっています",
    "日本語の検索ができません",
    "ありがとうございます",
    "ｾｯｼｮﾝﾛｸﾞを表示",
    "関数名をキャメルケースに変更しました",
    "コミットする前にフォーマッタを実行してね",
    "プルリクエストをレビューしてください",
    "ちょっと待ってください",
    "型チェックでエラーが出ています",
    "ひらがなとカタカナが混ざった文章",
)
KO = ("로그를 확인하세요", "테스트 통과", "배포 실패")
EN = (
    "run the migration on staging",
    "check the session logs",
    "fix the null pointer in the login handler",
    "An AI helper",
    "BRAID the cables",
    "order a café au lait",
    "alpha beta",
    "alpha middle beta",
    "the cache is stale",
    "All tests passed",
    "retry with exponential backoff",
    "where did the agent run that migration?",
)
MIXED = (
    "itgc修复",
    "ITGC修复",
    "fix_日志_parser",
    "useSession钩子",
    "handle请求()",
    "config.yaml配置",
    "db迁移v2",
    "parse_ログ()",
    "日志Level=DEBUG",
    "会话ID: 7f3a",
    "API文档",
    "ＡＰＩ文档",
    "PR#42の修正",
    "Itgc修复补丁",
    "v2.3.1版本",
)
CODE = (
    "def parse_日志(path):\n    # 解析日志文件\n    return load(path)",
    "SELECT * FROM 会话 WHERE 状态 = '进行中';",
    "Traceback (most recent call last):\n  File \"app.py\", line 12\nKeyError: '用户名'",
    "src/日志/handler.py:42: 警告 未使用的变量",
    "npm ERR! ビルドに失敗しました",
    "$ pytest -q\n3 failed, 97 passed\nFAILED tests/test_会话.py::test_保存",
    'git commit -m "itgc修复: 处理空会话"',
    "const ユーザー = await fetchUser(id) // ユーザー取得",
)
PUNCT = ("。", "，", "！", "？", "、", "「", "」", "（", "）", "：", "…", "——")
EMOJI = ("🚀", "✅", "🔥", "😅", "👍", "🎉", "⚠️")
SEPARATORS = ("", "", " ", "，", "。", "\n", "、", ": ", "  ", " — ", "\n\n", "\t", "\u3000")
TOOLS = ("read_file", "bash", "grep", "write_file", "搜索代码")
TODO_STATUS = ("pending", "in_progress", "completed")

_HAN_RUN = re.compile(r"[\u4e00-\u9fff]+")
_KANA_RUN = re.compile(r"[\u3041-\u30ff\uff66-\uff9f]+")
_CJK_CHAR = re.compile(r"[\u3041-\u30ff\u4e00-\u9fff\uac00-\ud7a3\uff01-\uff9f]")


@dataclass
class CorpusSession:
    """One generated session: its events in append order and, per indexed seq, the document text."""

    id: str
    cwd: str
    created_at: int
    events: list[CorpusEvent] = field(default_factory=list)
    docs: dict[int, str] = field(default_factory=dict)
    live: bool = False


def _join_parts(parts: Iterable[str]) -> str:
    """The search document of one event from its text parts: trimmed, empty parts dropped, newline-joined."""
    return "\n".join(part.strip() for part in parts if part.strip())


class _Writer:
    """Random agent-session prose from the pools above (every choice from one seeded ``random.Random``)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def fragment(self) -> str:
        pick = self.rng.random()
        pool: Sequence[str]
        if pick < 0.36:
            pool = ZH
        elif pick < 0.56:
            pool = JA
        elif pick < 0.60:
            pool = KO
        elif pick < 0.78:
            pool = EN
        elif pick < 0.92:
            pool = MIXED
        else:
            pool = PUNCT + EMOJI
        return self.rng.choice(pool)

    def prose(self, low: int = 1, high: int = 5) -> str:
        pieces: list[str] = []
        for index in range(self.rng.randint(low, high)):
            if index:
                pieces.append(self.rng.choice(SEPARATORS))
            pieces.append(self.fragment())
            if self.rng.random() < 0.15:
                pieces.append(self.rng.choice(PUNCT + EMOJI))
        return "".join(pieces)

    def arguments(self) -> str:
        args = {"path": f"src/{self.rng.choice(('日志', 'app', 'ログ', 'core'))}/{self.rng.randint(1, 99)}.py"}
        args["note"] = self.prose(1, 2)
        return json.dumps(args, ensure_ascii=self.rng.random() < 0.2)

    def tool_output(self) -> str:
        parts = [self.rng.choice(CODE) if self.rng.random() < 0.6 else self.prose(2, 6)]
        if self.rng.random() < 0.5:
            parts.append(self.prose(1, 3))
        return "\n".join(parts)


def _session_events(writer: _Writer, turns: int) -> tuple[list[CorpusEvent], dict[int, str]]:
    """A session as the agent loop writes it (turn/step framing, chunks, tool round trips, todos)."""
    from agentlog.kernel.messages import (
        assistant_message,
        reasoning_block,
        text_block,
        text_delta,
        tool_call_block,
        tool_result_message,
        user_message,
    )

    rng = writer.rng
    events: list[CorpusEvent] = []
    docs: dict[int, str] = {}

    def add(event_type: str, data: Any, intent: dict[str, Any] | None = None, doc: str = "") -> None:
        if doc:
            docs[len(events)] = doc
        events.append((event_type, data, intent))

    for turn in range(1, turns + 1):
        add("turn/start", {"turn": turn})
        prompt = writer.prose(1, 4)
        add("user/message", user_message(prompt, id=f"u{turn}"), APPEND, _join_parts([prompt]))
        step = 1
        while True:
            add("step/start", {"turn": turn, "step": step})
            answer = writer.prose(1, 5)
            for piece in (answer[: len(answer) // 2], CHUNK_ONLY, answer[len(answer) // 2 :]):
                if piece:
                    add("assistant/chunk", {"turn": turn, "step": step, "chunk": text_delta(0, piece)})
            reasoning = f"思考：{REASONING_ONLY}，{writer.prose(1, 2)}"
            calls = step < 3 and rng.random() < 0.6
            blocks: list[Any] = [reasoning_block(reasoning), text_block(answer)]
            doc_parts = [answer]
            call_id = f"c{turn}-{step}"
            tool = rng.choice(TOOLS)
            arguments = writer.arguments()
            if calls:
                blocks.append(tool_call_block(call_id, tool, arguments))
                doc_parts += [tool, arguments]
            message = assistant_message(blocks, provider=PROVIDER, model=MODEL, id=f"a{turn}-{step}")
            add("assistant/message", {"turn": turn, "step": step, "message": message}, APPEND, _join_parts(doc_parts))
            if not calls:
                add("step/end", {"turn": turn, "step": step})
                break
            add(
                "tool/call",
                {"turn": turn, "step": step, "callId": call_id, "name": tool, "arguments": arguments},
                None,
                _join_parts([tool, arguments]),
            )
            output = writer.tool_output()
            result: dict[str, Any] = {
                "turn": turn,
                "step": step,
                "message": tool_result_message(call_id, output, id=f"t{turn}-{step}"),
            }
            result_parts = [output]
            if rng.random() < 0.1:
                result["error"] = {"name": "ToolError", "code": "E_超时"}
                result_parts += ["ToolError", "E_超时"]
            add("tool/result", result, APPEND, _join_parts(result_parts))
            add("step/end", {"turn": turn, "step": step})
            step += 1
        if rng.random() < 0.3:
            todos = [
                {"content": writer.prose(1, 2), "status": rng.choice(TODO_STATUS)} for _ in range(rng.randint(1, 3))
            ]
            add(
                "todo/write", {"todos": todos}, None, _join_parts(p for t in todos for p in (t["status"], t["content"]))
            )
        kind = "completed" if rng.random() < 0.9 else rng.choice(("interrupted", "max-tokens"))
        add("turn/end", {"turn": turn, "reason": {"kind": kind}}, None, "" if kind == "completed" else kind)
    return events, docs


def build_corpus(sessions: int, *, seed: int = 11, turns: tuple[int, int] = (1, 4)) -> list[CorpusSession]:
    """``sessions`` deterministic sessions; every tenth one is marked ``live`` (kept open when written)."""
    rng = random.Random(seed)
    writer = _Writer(rng)
    corpus: list[CorpusSession] = []
    for index in range(sessions):
        events, docs = _session_events(writer, rng.randint(*turns))
        corpus.append(
            CorpusSession(
                id=f"s{index:04d}",
                cwd=f"/work/项目{index % 5}",
                created_at=1_700_000_000_000 + index * 1000,
                events=events,
                docs=docs,
                live=index % 10 == 9,
            )
        )
    return corpus


def write_store(root: str, corpus: Sequence[CorpusSession]) -> tuple[Any, Any]:
    """Write the corpus through a real store into a JSONL backend at ``root``.

    Returns ``(store, coordinator)``; sessions marked ``live`` stay open in ``store`` (flushed, so they
    are stored too), the others are disposed. The caller closes the coordinator.
    """
    from agentlog.kernel.store import SessionStore
    from agentlog.persistence.coordinator import PersistenceCoordinator
    from agentlog.persistence.jsonl.backend import JsonlBackend

    store = SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(root))
    for item in corpus:
        session = store.create(item.id, meta={"cwd": item.cwd, "createdAt": item.created_at})
        for event_type, data, intent in item.events:
            session.append(event_type, data, intent)
        store.flush(session)
        if not item.live:
            store.dispose(session)
    return store, coordinator


# --------------------------------------------------------------------------- queries and ground truth


def _collapse(text: str) -> str:
    return " ".join(text.split())


@dataclass(frozen=True)
class Query:
    kind: str
    text: str


def _runs(corpus: Sequence[CorpusSession], pattern: re.Pattern[str], minimum: int) -> list[str]:
    runs = {m.group() for item in corpus for doc in item.docs.values() for m in pattern.finditer(doc)}
    return sorted(run for run in runs if len(run) >= minimum)


def _inside(rng: random.Random, run: str, length: int) -> str:
    """A substring of ``run`` of ``length`` characters, strictly inside it when the run allows."""
    if len(run) >= length + 2:
        start = rng.randint(1, len(run) - length - 1)
    else:
        start = rng.randint(0, len(run) - length)
    return run[start : start + length]


def make_queries(corpus: Sequence[CorpusSession], count: int, *, seed: int = 11) -> list[Query]:
    """``count`` CJK queries cycling through the kinds the issue names (and a few that must find nothing)."""
    rng = random.Random(seed * 7919 + 1)
    han = _runs(corpus, _HAN_RUN, 4)
    han_long = [run for run in han if len(run) >= 10]
    kana = _runs(corpus, _KANA_RUN, 3)
    texts = sorted({_collapse(doc) for item in corpus for doc in item.docs.values() if _CJK_CHAR.search(doc)})

    def spanning() -> str:
        while True:
            text = rng.choice(texts)
            length = rng.randint(4, 12)
            if len(text) <= length:
                continue
            start = rng.randint(0, len(text) - length)
            piece = text[start : start + length].strip()
            if _CJK_CHAR.search(piece) and re.search(r"[^\u4e00-\u9fff]", piece):
                return piece

    def recased(text: str) -> str:
        return "".join(c.upper() if c.isascii() and rng.random() < 0.5 else c for c in text)

    makers: list[tuple[str, Callable[[], str]]] = [
        ("zh-2", lambda: _inside(rng, rng.choice(han), 2)),
        ("zh-3", lambda: _inside(rng, rng.choice(han), 3)),
        ("zh-8", lambda: _inside(rng, rng.choice(han_long), 8)),
        ("kana", lambda: _inside(rng, run := rng.choice(kana), rng.randint(2, min(5, len(run))))),
        ("mixed", lambda: recased(rng.choice(MIXED))),
        ("span", spanning),
        ("zh-1", lambda: rng.choice(rng.choice(han))),
        ("zh-absent", lambda: rng.choice(han)[::-1][:4]),
    ]
    queries = [Query(kind, make()) for kind, make in (makers[n % len(makers)] for n in range(count))]
    if count >= len(makers) + 2:
        queries[-2:] = [Query("never-indexed", REASONING_ONLY), Query("never-indexed", CHUNK_ONLY)]
    return queries


def ground_truth(corpus: Sequence[CorpusSession], query: str) -> dict[str, set[int]]:
    """Every indexed document holding ``query`` as a substring (case-insensitive, whitespace runs as one space)."""
    needle = _collapse(query).lower()
    hits: dict[str, set[int]] = {}
    for item in corpus:
        seqs = {seq for seq, doc in item.docs.items() if needle in _collapse(doc).lower()}
        if seqs:
            hits[item.id] = seqs
    return hits


# --------------------------------------------------------------------------- searching through every page


def search_sessions_all(search: Any, query: str, *, limit: int) -> list[dict[str, Any]]:
    """Every session hit of ``query``, following ``nextCursor`` pages of ``limit``."""
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        page = search.search_sessions(query=query, limit=limit, cursor=cursor)
        items.extend(page["items"])
        cursor = page.get("nextCursor")
        if cursor is None:
            return items


def search_events_all(search: Any, session_id: str, query: str, *, limit: int) -> list[dict[str, Any]]:
    """Every event hit of ``query`` in one session, following ``nextCursor`` pages of ``limit``."""
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        page = search.search_events(session_id=session_id, query=query, limit=limit, cursor=cursor)
        items.extend(page["items"])
        cursor = page.get("nextCursor")
        if cursor is None:
            return items


@dataclass
class Tally:
    """True positives, hits returned, and truth size — for sessions and for events."""

    session_tp: int = 0
    session_returned: int = 0
    session_truth: int = 0
    event_tp: int = 0
    event_returned: int = 0
    event_truth: int = 0
    failures: list[str] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        for name in ("session_tp", "session_returned", "session_truth", "event_tp", "event_returned", "event_truth"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.failures.extend(other.failures)

    @staticmethod
    def ratio(hits: int, total: int) -> float:
        return 1.0 if total == 0 else hits / total

    def figures(self) -> dict[str, float]:
        return {
            "recall": self.ratio(self.event_tp, self.event_truth),
            "precision": self.ratio(self.event_tp, self.event_returned),
            "session_recall": self.ratio(self.session_tp, self.session_truth),
            "session_precision": self.ratio(self.session_tp, self.session_returned),
        }


def check_query(
    search: Any,
    corpus: Sequence[CorpusSession],
    query: str,
    *,
    limit: int = 7,
    extra_sessions: Sequence[str] = (),
) -> Tally:
    """Search ``query`` at both levels and score it against :func:`ground_truth`.

    Event level covers every session the truth or the session search names, plus ``extra_sessions``
    (spot checks that a session without a match yields no event hits either). Duplicated hits across
    pages count as false positives.
    """
    truth = ground_truth(corpus, query)
    tally = Tally()
    hits = search_sessions_all(search, query, limit=limit)
    returned = [hit["header"]["id"] for hit in hits]
    tally.session_returned = len(returned)
    tally.session_truth = len(truth)
    tally.session_tp = len(set(returned) & truth.keys()) - (len(returned) - len(set(returned)))
    for hit in hits:
        best = hit["bestMatch"]
        if best["seq"] not in truth.get(hit["header"]["id"], set()):
            tally.failures.append(f"{query!r}: bestMatch {hit['header']['id']}#{best['seq']} is not a match")
    missing = sorted(truth.keys() - set(returned))
    if missing:
        tally.failures.append(f"{query!r}: sessions missed {missing[:5]}")
    for session_id in sorted(truth.keys() | set(returned) | set(extra_sessions)):
        expected = truth.get(session_id, set())
        found = [item["seq"] for item in search_events_all(search, session_id, query, limit=limit)]
        tally.event_returned += len(found)
        tally.event_truth += len(expected)
        tally.event_tp += len(set(found) & expected) - (len(found) - len(set(found)))
        if set(found) != expected or len(found) != len(set(found)):
            tally.failures.append(
                f"{query!r} in {session_id}: missed {sorted(expected - set(found))[:5]}, "
                f"extra {sorted(set(found) - expected)[:5]}"
            )
    return tally


# --------------------------------------------------------------------------- the benchmark


def run(sessions: int, queries: int, seed: int, limit: int) -> dict[str, Any]:
    from agentlog.query.sqlite import SqliteSearch

    corpus = build_corpus(sessions, seed=seed)
    query_list = make_queries(corpus, queries, seed=seed)
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="agentlog-recall-") as root:
        store_root = os.path.join(root, "store")
        started = time.perf_counter()
        _store, coordinator = write_store(store_root, corpus)
        written = time.perf_counter() - started
        search = SqliteSearch(coordinator, path=os.path.join(root, "index.sqlite3"))
        try:
            started = time.perf_counter()
            search.search_sessions(query="日志", limit=1)  # the first search builds the index
            indexed = time.perf_counter() - started
            total = Tally()
            per_kind: dict[str, Tally] = defaultdict(Tally)
            started = time.perf_counter()
            for query in query_list:
                extra = rng.sample([item.id for item in corpus], k=min(2, len(corpus)))
                tally = check_query(search, corpus, query.text, limit=limit, extra_sessions=extra)
                per_kind[query.kind].add(tally)
                total.add(tally)
            searched = time.perf_counter() - started
        finally:
            search.close()
            coordinator.close()
    documents = sum(len(item.docs) for item in corpus)
    print(
        f"corpus: {sessions} sessions, {sum(len(i.events) for i in corpus)} events, {documents} documents "
        f"(written in {written:.1f} s, indexed in {indexed:.1f} s); {len(query_list)} CJK queries "
        f"checked in {searched:.1f} s, pages of {limit}"
    )
    print(f"{'kind':<14}{'queries':>8}{'truth':>8}{'recall':>9}{'precision':>11}{'sess.recall':>13}{'sess.prec':>11}")
    kinds: dict[str, int] = defaultdict(int)
    for query in query_list:
        kinds[query.kind] += 1
    for kind, tally in per_kind.items():
        f = tally.figures()
        print(
            f"{kind:<14}{kinds[kind]:>8}{tally.event_truth:>8}{f['recall']:>9.4f}{f['precision']:>11.4f}"
            f"{f['session_recall']:>13.4f}{f['session_precision']:>11.4f}"
        )
    for failure in total.failures[:20]:
        print("FAIL", failure)
    figures = total.figures()
    print(f"recall {figures['recall']:.4f}, precision {figures['precision']:.4f} (event level, micro-averaged)")
    return {
        **{name: round(value, 6) for name, value in figures.items()},
        "queries": len(query_list),
        "sessions": sessions,
        "documents": documents,
        "event_truth": total.event_truth,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--limit", type=int, default=7, help="page size (small, to exercise cursors)")
    args = parser.parse_args(argv)
    result = run(args.sessions, args.queries, args.seed, args.limit)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
