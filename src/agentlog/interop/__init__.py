"""Interop: agentlog under the code people already have.

Converters between derived messages and the OpenAI chat-completions, OpenAI Responses and Anthropic
Messages formats (both directions), a recorder that writes the turn/step/tool-call protocol for a loop
the user keeps, and importers/exporters of other tools' transcripts. The framework adapters live in
:mod:`agentlog.integrations`, each behind its optional extra.
"""
