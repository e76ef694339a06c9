"""The gateway: an OpenAI-compatible chat API (``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /healthz``).

- ``app``: ``create_app()`` and its lifespan; ``deps``: shared state and the auth dependency; ``routes``: one router
  per resource; ``schemas``: request / response bodies; ``errors``: the OpenAI error shape.
- ``chat``: prepare a turn (session, turn type, prompt ids), generate (whole or streamed), hand the turn on;
  ``render``: chat template and tool-call parsing; ``sink``: delivery to Temporal, with the local spool.
- ``cli``: ``openclaw-rl gateway serve``.
"""
