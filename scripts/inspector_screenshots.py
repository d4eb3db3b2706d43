"""The screenshots of docs/inspector.md, generated: ``python scripts/inspector_screenshots.py [--out docs/img]``.

It writes a store with ``agentlog demo`` (a real agent against the scripted demo model: tool calls, a
crash repaired on resume, a fork, a compaction), serves it with the inspector on a free loopback port,
drives Debian's chromium (``/usr/bin/chromium``, or ``$AGENTLOG_CHROMIUM``) through playwright for
Python, and saves one PNG per main view:

* ``inspector-sessions.png`` — the sessions page;
* ``inspector-session.png`` — a session page with its three panes at the last seq;
* ``inspector-checkpoint.png`` — the compaction checkpoint opened in the Surface pane;
* ``inspector-diff.png`` — diff mode across the compaction;
* ``inspector-charts.png`` — the charts;
* ``inspector-forks.png`` — the fork page with its fork tree opened.

Needs the inspector and test extras (Starlette, uvicorn, playwright) and chromium. Waits are on the
page's own state (``body[data-at]``, ``body[data-charts]``), never sleeps. The store's ids, times and
paths are fresh on every run, so the images differ in those details from one run to the next.
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

ROOT = Path(__file__).resolve().parent.parent
VIEWPORT = {"width": 1280, "height": 760}
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def write_demo_store(root: Path) -> dict[str, Any]:
    """``agentlog demo --store root --json`` in a fresh interpreter: its facts."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "agentlog.cli.demo", "--store", str(root), "--json"],
        check=True,
        capture_output=True,
        env=env,
        timeout=300,
    )
    facts: dict[str, Any] = json.loads(done.stdout)
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="where the PNGs go")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    from playwright.sync_api import sync_playwright

    from agentlog.inspector.app import create_app
    from agentlog.inspector.server import start_server
    from agentlog.inspector.views import Inspector
    from agentlog.persistence.jsonl.backend import JsonlBackend

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    chromium = os.environ.get("AGENTLOG_CHROMIUM", "/usr/bin/chromium")
    with tempfile.TemporaryDirectory(prefix="agentlog-screenshots-") as tmp:
        facts = write_demo_store(Path(tmp) / "store")
        session_id = facts["session"]["id"]
        fork_id = facts["fork"]["id"]
        compaction = facts["compaction"]["result"]
        inspector = Inspector(JsonlBackend(str(Path(tmp) / "store"), compression="auto", read_only=True))
        last = inspector.summary(session_id)["lastSeq"]
        checkpoint = next(
            node["seq"] for node in inspector.state_at(session_id, last)["surface"] if "checkpoint" in node
        )
        before = compaction["startSeq"] - 1
        running = start_server(create_app(inspector))
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport=VIEWPORT)  # type: ignore[arg-type]
                errors: list[str] = []
                page.on("pageerror", lambda err: errors.append(str(err)))

                def shot(name: str) -> None:
                    page.screenshot(path=str(out / name))
                    print(out / name)

                def at(seq: int) -> None:
                    page.locator(f"body[data-at='{seq}']").wait_for(state="attached")

                page.goto(running.url + "/")
                page.locator(f"#sessions tbody tr[data-id='{fork_id}']").wait_for()
                page.set_viewport_size({"width": VIEWPORT["width"], "height": 220})  # two rows: no empty page
                shot("inspector-sessions.png")
                page.set_viewport_size(VIEWPORT)  # type: ignore[arg-type]

                page.goto(running.url + f"/s/{session_id}")
                at(last)
                shot("inspector-session.png")

                page.goto(running.url + f"/s/{session_id}?at={checkpoint}")
                at(checkpoint)
                card = page.locator(f"#surface > .card[data-seq='{checkpoint}']")
                card.locator("details.checkpoint-details > summary").click()
                card.locator("details.replaces > summary").click()
                card.evaluate("node => node.scrollIntoView({block: 'start'})")
                shot("inspector-checkpoint.png")

                page.goto(running.url + f"/s/{session_id}?at={checkpoint}&diff={before}")
                at(checkpoint)
                page.locator("#messages .card.diff-added").first.wait_for()
                shot("inspector-diff.png")

                page.goto(running.url + f"/s/{session_id}?at={last}")
                at(last)
                page.locator("#charts > summary").click()
                page.locator("body[data-charts='1']").wait_for(state="attached")
                page.locator("#charts").scroll_into_view_if_needed()
                shot("inspector-charts.png")

                page.goto(running.url + f"/s/{fork_id}")
                page.locator("#forks:not([hidden])").wait_for()
                page.locator("body[data-at]:not([data-at=''])").wait_for(state="attached")
                page.locator("#forks > summary").click()
                page.locator("#fork-tree li.current").wait_for()
                shot("inspector-forks.png")
                browser.close()
                if errors:
                    raise SystemExit(f"the page reported errors: {errors}")
        finally:
            running.stop()
            inspector.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
