"""``transduce serve``: an HTTP translation service with dynamic batching and a page that shows
attention. Needs the ``serve`` extra (FastAPI, uvicorn); ``batcher`` and ``metrics`` need
neither."""
