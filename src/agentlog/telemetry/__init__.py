"""Telemetry: the spec's sink contract and OpenTelemetry GenAI spans (:mod:`.otel`, extra ``otel``)."""
