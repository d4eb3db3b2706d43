"""M17: import throughput of a Claude Code style transcript (MB/s) and the importing process's peak RSS.

The transcript is generated (user prompts, assistant records split per content block as Claude Code
writes them, thinking, tool_use and tool_result with realistic payload sizes, summary and system records),
then imported by ``agentlog.interop.transcripts.import_transcript`` into a fresh JSONL (zstd) store in a
*separate process*, which reports its own wall time and ``ru_maxrss``: the figure is the importer's
peak, not the generator's or this driver's. Targets: >= 50 MB/s, <= 200 MB peak RSS.

Usage: ``python benchmarks/run.py import [--mb 200]`` (``--mb 5`` for a quick run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

DEFAULT_MB = 200

_CHILD = r"""
import json, resource, sys, time
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.interop.transcripts import import_transcript

path, root = sys.argv[1], sys.argv[2]
coordinator = PersistenceCoordinator(SessionStore(), JsonlBackend(root))
start = time.perf_counter()
report = import_transcript(coordinator, "claude-code", path, session_id="bench-import")
coordinator.close()
elapsed = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": elapsed, "peak_rss_mb": rss, "bytes": report.bytes, "events": report.events,
                  "lines": report.lines}))
"""


def _records(turn: int) -> list[dict[str, Any]]:
    """One turn: a prompt, thinking + text + tool_use records of one API message, the result, an answer,
    each record linked to the one before it (``parentUuid``) as Claude Code links them."""
    base = {
        "isSidechain": False,
        "userType": "external",
        "cwd": "/home/bench/project",
        "sessionId": "5f0c1d2e-0000-4000-8000-00000000beef",
        "version": "1.0.51",
        "gitBranch": "main",
    }
    stamp = f"2025-06-01T{turn // 3600 % 24:02d}:{turn // 60 % 60:02d}:{turn % 60:02d}.000Z"
    usage = {
        "input_tokens": 1200,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 9000,
        "output_tokens": 300,
    }
    code = "".join(f"    {i:4d}\tdef function_{turn}_{i}(value):  # computes a thing\n" for i in range(60))
    prose = ("The file defines helpers that compute values; the tests cover the edge cases. " * 12).strip()

    def assistant(uid: str, parent: str, mid: str, block: dict[str, Any]) -> dict[str, Any]:
        message = {
            "id": mid,
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-20250514",
            "content": [block],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        return {
            **base,
            "parentUuid": parent,
            "type": "assistant",
            "message": message,
            "requestId": f"req_{mid}",
            "uuid": uid,
            "timestamp": stamp,
        }

    tool_id = f"toolu_{turn:08d}"
    return [
        {
            **base,
            "parentUuid": f"s{turn - 1}" if turn else None,
            "type": "user",
            "message": {"role": "user", "content": f"Turn {turn}: read src/m{turn}.py"},
            "uuid": f"u{turn}",
            "timestamp": stamp,
        },
        assistant(
            f"a{turn}", f"u{turn}", f"msg_{turn}a", {"type": "thinking", "thinking": prose, "signature": "c2ln" * 40}
        ),
        assistant(f"b{turn}", f"a{turn}", f"msg_{turn}a", {"type": "text", "text": "Let me read the file."}),
        assistant(
            f"c{turn}",
            f"b{turn}",
            f"msg_{turn}a",
            {
                "type": "tool_use",
                "id": tool_id,
                "name": "Read",
                "input": {"file_path": f"/home/bench/project/src/m{turn}.py"},
            },
        ),
        {
            **base,
            "parentUuid": f"c{turn}",
            "type": "user",
            "message": {"role": "user", "content": [{"tool_use_id": tool_id, "type": "tool_result", "content": code}]},
            "uuid": f"r{turn}",
            "timestamp": stamp,
            "toolUseResult": {"type": "text", "file": {"filePath": f"src/m{turn}.py", "numLines": 60}},
        },
        assistant(f"d{turn}", f"r{turn}", f"msg_{turn}b", {"type": "text", "text": prose}),
        {
            "parentUuid": f"d{turn}",
            "type": "system",
            "subtype": "informational",
            "content": "turn finished",
            "level": "info",
            "uuid": f"s{turn}",
            "timestamp": stamp,
        },
    ]


def generate(path: Path, megabytes: float) -> int:
    """Write a transcript of about ``megabytes`` MB (whole turns); return its size in bytes."""
    target = int(megabytes * 1024 * 1024)
    written = 0
    turn = 0
    with open(path, "w", encoding="utf-8") as out:
        out.write(json.dumps({"type": "summary", "summary": "Benchmark session", "leafUuid": "u0"}) + "\n")
        while written < target:
            turn += 1
            chunk = "".join(json.dumps(record, separators=(",", ":")) + "\n" for record in _records(turn))
            out.write(chunk)
            written += len(chunk.encode())
    return path.stat().st_size


def cmd_import(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="agentlog-import-bench-") as tmp:
        transcript = Path(tmp) / "transcript.jsonl"
        size = generate(transcript, args.mb)
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parent.parent / "src")
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(transcript), str(Path(tmp) / "store")],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        )
        child = json.loads(done.stdout.strip().splitlines()[-1])
    mb = size / (1024 * 1024)
    throughput = mb / child["seconds"]
    rows = [
        ("transcript", f"{mb:,.1f} MB", f"{child['lines']:,} lines"),
        ("events written", f"{child['events']:,}", ""),
        ("import time", f"{child['seconds']:.2f} s", ""),
        ("M17 throughput", f"{throughput:,.1f} MB/s", "target >= 50"),
        ("M17 peak RSS", f"{child['peak_rss_mb']:,.1f} MB", "target <= 200"),
    ]
    width = max(len(r[0]) for r in rows)
    print("M17 import of a Claude Code style transcript (JSONL zstd store, separate process)")
    for name, value, note in rows:
        print(f"{name.ljust(width)}  {value.rjust(16)}  {note}")
    return {
        "M17_mb_per_s": round(throughput, 2),
        "M17_peak_rss_mb": round(child["peak_rss_mb"], 1),
        "M17_mb": round(mb, 1),
    }


def add_import_parser(sub: Any) -> None:
    p = sub.add_parser("import", help="M17 import throughput (MB/s) and peak RSS of a Claude Code style transcript")
    p.add_argument("--mb", type=float, default=DEFAULT_MB, help=f"transcript size in MB (default {DEFAULT_MB})")
    p.set_defaults(func=cmd_import)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="benchmarks/import_bench.py")
    add_import_parser(parser.add_subparsers(dest="command", required=True))
    arguments = parser.parse_args(["import", *sys.argv[1:]])
    print(json.dumps(arguments.func(arguments)))
