"""The inspector: ``agentlog serve``, a read-only web app over any store (docs/inspector.md).

:mod:`.views` is the data layer (no web imports): the sessions listing, log pages, the state at a seq,
search. :mod:`.app` is the Starlette application over it (the ``agentlog[inspector]`` extra installs
Starlette and uvicorn); ``static/`` holds the page's HTML, CSS and JavaScript, shipped in the package.
"""

from .views import Inspector, validate_seq, validate_session_id

__all__ = ["Inspector", "validate_seq", "validate_session_id"]
