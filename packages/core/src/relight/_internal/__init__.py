"""relight's private plumbing, shared by the gateway, the store's HTTP server and the runners.

An HTTP/1.1 client to one origin (:mod:`.http`), the event loop relight runs its own work on
(:mod:`.event_loop`), retries with backoff (:mod:`.retry`) and an ASGI server on a loop or a thread
(:mod:`.server`). Nothing here is public API.
"""
