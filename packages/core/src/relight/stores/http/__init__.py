"""The HTTP store: a server (:mod:`relight.stores.http.server`) and this client, :class:`HttpStore`."""

from relight.stores.http.client import HttpStore

__all__ = ["HttpStore"]
