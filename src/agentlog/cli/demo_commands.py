"""The ``demo`` command (the demo itself is :mod:`agentlog.cli.demo`, imported only when it runs)."""

from __future__ import annotations

import importlib
from collections.abc import Callable

import typer

from .options import DEFAULT_OPTIONS, StoreOptions, shared_options


@shared_options("store", "as_json")
def demo_command(opts: StoreOptions = DEFAULT_OPTIONS) -> None:
    """A scripted, offline agent session against a local model (no API key needed)."""
    # Imported by name at call time: the demo module is optional for every other command.
    run_demo: Callable[..., int] = importlib.import_module(f"{__package__}.demo").run_demo
    code = run_demo(store=opts.store, as_json=opts.as_json)
    if code:
        raise typer.Exit(code=code)
