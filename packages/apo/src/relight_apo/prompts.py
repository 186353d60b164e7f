"""The prompts a search works on: each one a resource the agent reads, with its seed text and its limits."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from relight.errors import ConfigError

__all__ = ["Prompt", "placeholders", "prompts_of"]

_PLACEHOLDER = re.compile(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_]*)\}(?!\})")
"""``{name}`` as ``str.format`` fills it; ``{{literal}}`` braces are not one."""


def placeholders(text: str) -> tuple[str, ...]:
    """The ``{name}`` placeholders in ``text``, each once, in the order they first appear."""
    return tuple(dict.fromkeys(_PLACEHOLDER.findall(text)))


@dataclass(frozen=True, slots=True)
class Prompt:
    """A prompt the agent reads as a resource (``relight.resource(name, default=...)``), and how it may change.

    Args:
        text: the seed: the prompt the agent has now.
        frozen: published as it is with every version and never edited (a role's prompt that already works).
        max_chars: the longest text an edit may have; by default four times the seed's length, at least 2,000.
        variables: the placeholders the agent fills in, which every edit must keep; by default the
            ``{name}`` placeholders of the seed.
    """

    text: str
    frozen: bool = False
    max_chars: int = 0
    variables: tuple[str, ...] | None = field(default=None)

    def __post_init__(self) -> None:
        if not self.text.strip():
            raise ConfigError("a Prompt's text is its seed: the prompt the agent has now, which cannot be empty")
        if self.max_chars == 0:
            object.__setattr__(self, "max_chars", max(2000, 4 * len(self.text)))
        if self.max_chars < len(self.text):
            raise ConfigError(f"max_chars ({self.max_chars}) is below the seed's own length ({len(self.text)})")
        if self.variables is None:
            object.__setattr__(self, "variables", placeholders(self.text))
        missing = [variable for variable in self.variables or () if "{" + variable + "}" not in self.text]
        if missing:
            raise ConfigError(f"the seed text has no placeholder {', '.join(missing)} among its variables")


def prompts_of(prompts: Mapping[str, str | Prompt]) -> dict[str, Prompt]:
    """``prompts`` with each plain text made a :class:`Prompt`; ConfigError when none can be edited."""
    made = {name: prompt if isinstance(prompt, Prompt) else Prompt(prompt) for name, prompt in prompts.items()}
    for name in made:
        if not name:
            raise ConfigError(f"a prompt needs a name (the resource the agent reads), got {name!r}")
    if not any(not prompt.frozen for prompt in made.values()):
        raise ConfigError("every prompt is frozen: give APO at least one prompt it may edit")
    return made
