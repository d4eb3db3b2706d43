"""CLI start-up benchmark: the CPU an ``agentlog`` command costs before (and while) it does its work.

* ``agentlog --version``: the floor every command pays (interpreter, ``agentlog``, the command table, typer).
* ``agentlog ls`` over a store of ``--sessions`` (default 50) W(5) sessions written as ``agentlog run``
  leaves them (projection cache rows included, see ``projections.build_store``).
* ``python -c "import agentlog"`` for reference.

Each figure is the user and system CPU time of the child process (``os.wait4``), median of ``--repeat``
fresh processes, its stdout discarded. CPU time rather than wall time, so other processes on a shared
machine do not count (they still slow it a little through caches; note the load average printed).
The child runs the console script next to this interpreter (``python -m agentlog.cli`` if there is none)
with this process's environment. Byte code: by default compiled once into a private
``PYTHONPYCACHEPREFIX`` and reused, as an installed package runs; ``--bytecode none`` compiles every
module at every start (``PYTHONDONTWRITEBYTECODE=1`` and no cache, as some sandboxes run).

Targets (issue 20): ``--version`` <= 0.15 s, ``ls`` on 50 sessions <= 0.35 s (user + sys).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

try:
    from projections import build_store
except ImportError:  # imported as ``benchmarks.cli_start``
    from benchmarks.projections import build_store

TARGETS = {"version": 0.15, "ls": 0.35}


def _command() -> list[str]:
    script = Path(sys.executable).with_name("agentlog")
    return [str(script)] if script.exists() else [sys.executable, "-m", "agentlog.cli"]


def child_cpu(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(user, system) CPU seconds of one run of ``argv``; it must exit 0."""
    pid = os.fork()
    if pid == 0:  # the child: stdout to /dev/null, then exec
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    _pid, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"cli-start: {argv} exited {os.waitstatus_to_exitcode(status)}")
    return usage.ru_utime, usage.ru_stime


def measure(argv: list[str], env: dict[str, str], repeat: int) -> dict[str, float]:
    runs = [child_cpu(argv, env) for _ in range(repeat)]
    totals = [user + system for user, system in runs]
    return {
        "cpu": statistics.median(totals),
        "user": statistics.median(user for user, _s in runs),
        "sys": statistics.median(system for _u, system in runs),
        "min": min(totals),
        "max": max(totals),
    }


def _table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(row[c]) for row in [header, *rows]) for c in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(cell.ljust(widths[c]) if c == 0 else cell.rjust(widths[c]) for c, cell in enumerate(cells))

    print(title)
    print(line(header))
    for row in rows:
        print(line(row))


def cmd_cli_start(args: argparse.Namespace) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix="agentlog-bench-cli-start-")
    pycache = tempfile.mkdtemp(prefix="agentlog-bench-pycache-")
    env = dict(os.environ)
    if args.bytecode == "cached":
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONPYCACHEPREFIX"] = pycache  # stays empty: nothing is written, nothing reused
    cli = _command()
    store_args = ["--store", root, "--backend", "sqlite" if args.backend == "sqlite" else "jsonl"]
    if args.backend != "sqlite":
        store_args += ["--compression", "zstd" if args.backend == "jsonl-zstd" else "none"]
    cases = {
        "version": [*cli, "--version"],
        "ls": [*cli, "ls", *store_args],
        "import": [sys.executable, "-c", "import agentlog"],
    }
    try:
        build_store(args.backend, root, args.sessions)
        for argv in cases.values():  # warm-up: compiles the byte code (if cached) and the page cache
            child_cpu(argv, env)
        results = {name: measure(argv, env, args.repeat) for name, argv in cases.items()}
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(pycache, ignore_errors=True)
    load = os.getloadavg()
    labels = {
        "version": "agentlog --version",
        "ls": f"agentlog ls ({args.sessions} sessions, {args.backend})",
        "import": "python -c 'import agentlog'",
    }
    rows = [
        [
            labels[name],
            f"{r['cpu']:.3f}",
            f"{r['user']:.3f}",
            f"{r['sys']:.3f}",
            f"{r['min']:.3f}",
            f"{r['max']:.3f}",
            f"<= {TARGETS[name]} s" if name in TARGETS else "-",
        ]
        for name, r in results.items()
    ]
    _table(
        f"CLI start-up CPU (user + sys of the child), medians of {args.repeat} runs, byte code {args.bytecode}, "
        f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}",
        ["command", "cpu", "user", "sys", "min", "max", "target"],
        rows,
    )
    figures: dict[str, Any] = {"sessions": args.sessions, "backend": args.backend, "bytecode": args.bytecode}
    for name, r in results.items():
        figures[f"{name}_cpu_seconds"] = round(r["cpu"], 4)
        figures[f"{name}_user_seconds"] = round(r["user"], 4)
        figures[f"{name}_sys_seconds"] = round(r["sys"], 4)
    figures["load_average"] = [round(x, 2) for x in load]
    return figures


def add_cli_start_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("cli-start", help="CPU of agentlog --version and agentlog ls in fresh processes")
    p.add_argument("--sessions", type=int, default=50, help="sessions in the store ls lists (default 50)")
    p.add_argument("--backend", choices=("jsonl-zstd", "jsonl-none", "sqlite"), default="jsonl-zstd")
    p.add_argument("--repeat", type=int, default=7, help="fresh processes per figure; medians (default 7)")
    p.add_argument(
        "--bytecode", choices=("cached", "none"), default="cached", help="reuse compiled byte code (default)"
    )
    p.set_defaults(func=cmd_cli_start)
