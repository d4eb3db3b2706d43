"""The ``demo`` command (the demo itself is :mod:`agentlog.cli.demo`, imported only when it runs)."""

from __future__ import annotations

import importlib
from collections.abc import Callable

import typer

from .options import JsonOption, StoreOption


def demo_command(store: StoreOption = None, as_json: JsonOption = False) -> None:
    """A scripted, offline agent session against a local model (no API key needed)."""
    # Imported by name at call time: the demo module is optional for every other command.
    run_demo: Callable[..., int] = importlib.import_module(f"{__package__}.demo").run_demo
    code = run_demo(store=store, as_json=as_json)
    if code:
        raise typer.Exit(code=code)
