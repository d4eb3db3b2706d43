"""``python -m agentlog.cli`` runs the command line."""

from .commands import main

main()
