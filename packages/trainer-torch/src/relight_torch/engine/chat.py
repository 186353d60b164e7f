"""Messages in OpenAI's shape to the token ids a Hugging Face chat template gives them.

The engine (to build prompts) and SFT (to find each assistant turn's tokens) render through the
core's one renderer (:mod:`relight.chat`), which imported traces use too, so a demonstration is
tokenized exactly as the engine would prompt and sample it, tools and tool calls included.
"""

from relight.chat import assistant_turns, render

__all__ = ["assistant_turns", "render"]
