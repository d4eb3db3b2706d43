"""Write, once, everything both sides of the side-by-side comparison read (see README.md here).

Usage: python make_data.py OUTDIR [--curves [--sessions 250,1000,4000]]

OUTDIR/w<T>.jsonl       W(T), one ``[type, data, intent]`` JSON array a line, from benchmarks/workload.py: the
                        ONE builder. ``figures.mjs`` (the original) and ``agentlog_side.py`` append these very
                        events, so both sides see byte-identical logs.
OUTDIR/m4/<kind>-<T>    the W(T) session ``bench`` stored by agentlog (kind jsonl-zstd or sqlite); the original
                        reads the jsonl-zstd one (the registry's SQLite provider cannot open schema-17 files).
OUTDIR/ls               1,000 W(5) sessions, jsonl-zstd, each titled, with agentlog's projection cache (M5, M10)
OUTDIR/search           1,000 W(20) sessions with CJK turns, jsonl-zstd (M13-M16; each side indexes a copy)

T is 2000 and 8000; --curves adds 500 and the search stores of the
--sessions counts other than 1,000 (``search-<n>``). Existing parts are kept.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from persist import write_session  # noqa: E402
from workload import build_workload  # noqa: E402

M4_KINDS = ("jsonl-zstd", "sqlite")


def write_log(path: Path, turns: int) -> None:
    with open(path.with_suffix(".tmp"), "w", encoding="utf-8") as out:
        for type_, data, intent in build_workload(turns):
            out.write(json.dumps([type_, data, intent], ensure_ascii=False, separators=(",", ":")))
            out.write("\n")
    os.replace(path.with_suffix(".tmp"), path)


def read_log(path: Path) -> list[tuple[str, object, object]]:
    """The events of a ``w<T>.jsonl`` file, as both sides append them."""
    with open(path, encoding="utf-8") as lines:
        return [tuple(json.loads(line)) for line in lines]  # type: ignore[misc]


def step(label: str, target: Path, make: object) -> None:
    if target.exists():
        return
    start = time.perf_counter()
    make()  # type: ignore[operator]
    print(f"{target}: {label} ({time.perf_counter() - start:.1f} s)", file=sys.stderr)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    curves = "--curves" in argv[1:]
    out.mkdir(parents=True, exist_ok=True)
    sizes = (500, 2000, 8000) if curves else (2000, 8000)
    for turns in sizes:
        log = out / f"w{turns}.jsonl"
        step(f"W({turns})", log, lambda log=log, turns=turns: write_log(log, turns))
        for kind in M4_KINDS:
            root = out / "m4" / f"{kind}-{turns}"

            def make(root: Path = root, kind: str = kind, log: Path = log) -> None:
                os.makedirs(root)
                write_session(kind, str(root), read_log(log), "bulk")

            step(f"W({turns}) on {kind}", root, make)

    from projections import build_store as build_ls_store
    from search import build_store as build_search_store

    counts = argv[argv.index("--sessions") + 1] if "--sessions" in argv else "250,1000,4000"
    for sessions in sorted({1000, *(int(n) for n in counts.split(","))}) if curves else (1000,):
        suffix = "" if sessions == 1000 else f"-{sessions}"
        if sessions == 1000:
            ls_root = out / "ls"
            if not ls_root.exists():  # the original's cache of an earlier ls store would serve nothing
                shutil.rmtree(out / "orig-ls-cache", ignore_errors=True)
            step(
                f"{sessions} W(5) sessions",
                ls_root,
                lambda r=ls_root, n=sessions: build_ls_store("jsonl-zstd", str(r), n),
            )
        root = out / f"search{suffix}"

        def make_search(root: Path = root, n: int = sessions) -> None:
            os.makedirs(root)
            build_search_store("jsonl-zstd", str(root), n)

        step(f"{sessions} W(20) sessions", root, make_search)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
