"""Telemetry: hand each session's events, as records, to a reporting sink (runtime spec §6.11).

:mod:`.records` is the record vocabulary and its pure mapping (no I/O); :mod:`.sink` is the sink
contract and :class:`SessionTelemetry`, which attaches to a store; :mod:`.spans` and :mod:`.otel` (extra
``otel``) map sessions to OpenTelemetry GenAI spans, live and offline. Nothing here is imported by the rest
of agentlog, and the names load on first access, so ``import agentlog`` does not pay for threads or
optional exporters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .records import TelemetryRecord, TelemetryRule, redact_strings
    from .sink import SessionTelemetry, TelemetrySink, TelemetryStats

__all__ = [
    "SessionTelemetry",
    "TelemetryRecord",
    "TelemetryRule",
    "TelemetrySink",
    "TelemetryStats",
    "redact_strings",
]

_EXPORTS = {
    ".records": ("TelemetryRecord", "TelemetryRule", "redact_strings"),
    ".sink": ("SessionTelemetry", "TelemetrySink", "TelemetryStats"),
}

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
