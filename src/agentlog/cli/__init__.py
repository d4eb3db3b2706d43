"""The ``agentlog`` command (typer + rich): read commands, agent commands and the offline demo."""

from .commands import app, main

__all__ = ["app", "main"]
