"""The session kernel: pure, synchronous, no I/O and no clock but an injected one.

Event envelope and vocabulary, the lossless-JSON gate, the surface, derived messages, the request
header fold, seeds, repair closers and invariants. Everything above (persistence, agent, cli) reaches
the log only through :class:`~agentlog.kernel.session.Session` and its store; the kernel never imports
them (an import-linter contract in ``pyproject.toml`` keeps it so).
"""
