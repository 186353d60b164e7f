"""The gateway's HTTP client to its upstreams is relight's own: :mod:`relight._internal.http` (named here too)."""

from relight._internal.http import HttpClient, HttpResponse

__all__ = ["HttpClient", "HttpResponse"]
