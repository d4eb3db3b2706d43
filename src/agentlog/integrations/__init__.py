"""Framework adapters, each behind its optional extra: :mod:`agentlog.integrations.openai_agents`
(``agentlog[openai-agents]``) and :mod:`agentlog.integrations.pydantic_ai` (``agentlog[pydantic-ai]``).
Importing this package imports no framework; importing an adapter without its extra raises an
``ImportError`` that names the extra to install."""
