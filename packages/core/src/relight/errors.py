"""Exceptions raised by relight.

Each names what was wrong, the value seen and what would have been valid, so that a user
reading a traceback knows what to change without opening our source.
"""

from __future__ import annotations


class RelightError(Exception):
    """Base class of every error relight raises on purpose."""


class NotFoundError(RelightError, LookupError):
    """A rollout, attempt, resources version or plugin that does not exist was asked for."""


class InvalidStateError(RelightError):
    """An operation does not fit the current status of a rollout or attempt.

    For example a heartbeat for an attempt that has already finished, or whose lease expired
    and was handed to another worker.
    """


class LeaseLostError(InvalidStateError):
    """The attempt is no longer running under this worker: its lease expired or it finished."""


class StoreError(RelightError):
    """A store backend failed (I/O, a server answered with an error, a closed store)."""


class StoreUnavailableError(StoreError):
    """The store could not be reached, or is restarting: the same call may well succeed a little later.

    Clients retry these themselves (see :class:`relight._internal.retry.RetryPolicy`); one that reaches the
    caller means the store stayed away for the whole retry budget.
    """


class PluginError(RelightError):
    """A plugin is missing, registered twice, or failed to load."""


class ConfigError(RelightError, ValueError):
    """A configuration value is invalid; the message names the option and what is accepted."""


class RunFolderError(ConfigError):
    """A folder is not a run folder this relight can read: no ``run.json``, an unreadable one, one written by
    a relight whose run-folder layout this one does not know, or no checkpoint where one is needed."""
