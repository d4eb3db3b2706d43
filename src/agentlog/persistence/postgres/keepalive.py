"""How each end of an agentlog PostgreSQL connection notices that the other end is gone: TCP keepalives.

A host cut off by a network partition (a dead link, a lost route, a host that lost power) closes
nothing: its connections stay open on the server, whose backend waits for a next command that never
comes. It keeps what the connection holds, a writer lease (a session-level advisory lock) above all,
so no other host could take the session over: for more than two hours with the operating system's
default keepalive, as long as the retransmission timeout when an answer is left unacknowledged. The
client's own deadline (``call_timeout_s``) ends the client's wait, not the server's.

So every connection agentlog opens asks the server, in its startup ``options``, to probe the client and
give up on it once it has not answered for about twice the call deadline (``tcp_keepalives_idle``,
``tcp_keepalives_interval``, ``tcp_keepalives_count``, and ``tcp_user_timeout`` for an answer left
unacknowledged), and libpq to probe the server the same way from the client's end (an idle pooled or
lease connection to a server that is gone is then found dead before it is used). The keepalives start
only after the call deadline (``idle`` is at least ``call_timeout_s``), so a wait on a silent server
ends by that deadline, with its own message, never by the probes. Settings the DSN gives itself win:
its libpq parameters are kept, and its ``options`` (else ``PGOPTIONS``) come after these, so its
``-c`` settings override them. They apply to TCP connections only (a Unix socket never partitions).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

PROBES: Final = 3
"""Unanswered probes after which a peer is given up on."""


@dataclass(frozen=True)
class Keepalive:
    """The keepalive settings of a connection whose every call is bounded by ``call_timeout_s``."""

    idle_s: int
    """Silence before the first probe: the call deadline, rounded up (at least 1 s)."""
    interval_s: int
    """Between probes: a third of the call deadline, rounded up (at least 1 s)."""
    count: int
    """Unanswered probes after which the peer is gone."""

    @classmethod
    def for_call_timeout(cls, call_timeout_s: float) -> Keepalive:
        return cls(max(1, math.ceil(call_timeout_s)), max(1, math.ceil(call_timeout_s / PROBES)), PROBES)

    @property
    def give_up_s(self) -> int:
        """How long a silent peer lasts: idle, then every probe unanswered (about twice the deadline)."""
        return self.idle_s + self.count * self.interval_s

    def server_options(self) -> str:
        """The server's settings for the connection, as ``-c`` options of its startup packet."""
        return (
            f"-c tcp_keepalives_idle={self.idle_s} -c tcp_keepalives_interval={self.interval_s} "
            f"-c tcp_keepalives_count={self.count} -c tcp_user_timeout={self.give_up_s * 1000}"
        )

    def connect_kwargs(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """libpq connection parameters for a DSN whose parameters are ``params`` (what it sets is kept)."""
        kwargs: dict[str, Any] = {
            name: value
            for name, value in (
                ("keepalives", 1),
                ("keepalives_idle", self.idle_s),
                ("keepalives_interval", self.interval_s),
                ("keepalives_count", self.count),
            )
            if name not in params
        }
        given = params.get("options") if "options" in params else os.environ.get("PGOPTIONS")
        kwargs["options"] = f"{self.server_options()} {given}" if given else self.server_options()
        return kwargs


def keepalive_kwargs(params: Mapping[str, Any], call_timeout_s: float) -> dict[str, Any]:
    """The libpq parameters to add to a DSN of ``params`` for a connection bounded by ``call_timeout_s``."""
    return Keepalive.for_call_timeout(call_timeout_s).connect_kwargs(params)
