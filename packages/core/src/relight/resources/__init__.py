"""Resources: the named, versioned things an agent reads (prompt templates), and the prompt versions of a run.

:mod:`relight.resources.reading` is the agent's side (``llm.resources``, :func:`relight.resource`);
:mod:`relight.resources.prompts` reads a store's prompt versions back (each one's parent, text, diff and
validation reward) for ``relight show --prompts``, ``relight export --format prompt`` and the dashboard.
"""

from relight.resources.reading import AttemptResources, current_resources, resource, resources_scope

__all__ = ["AttemptResources", "current_resources", "resource", "resources_scope"]
