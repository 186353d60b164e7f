"""Keys and values of sequences the engine has finished, reused by prompts that start the same way.

An agent's next call repeats its last one: the same system prompt and tools, the question, the
previous answer, then a tool result and a new assistant turn. Requests reach a running batch one by
one (each agent's call follows its own tool), and a joiner prefilled from scratch costs its whole
prompt: profiled on SmolLM2-135M replaying calc rollouts (prompts of ~300 tokens, replies of ~20),
these single-row prefills took 72% of the engine's CPU. Keeping each finished sequence's keys and
values (prompt and reply) lets the next call compute only what is new (~30-60 tokens).

Keys and values depend only on the tokens before them, so any common leading run of tokens can reuse
them, whatever the batch they were computed in (padding is masked; positions count real tokens).
They belong to the weights that made them: :meth:`PrefixCache.use` empties the cache when the
weights change (the engine passes its policy version and the parameters' in-place change counters,
so a checkpoint loaded or weights copied in without a new version are caught too). The cache holds
at most ``max_tokens`` tokens (least recently used go first); a sequence that extends a kept one
replaces it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["Prefix", "PrefixCache"]


@dataclass(frozen=True, slots=True)
class Prefix:
    """The keys and values of a prompt's first ``length`` tokens, one ``[heads, length, dim]`` pair per layer."""

    length: int
    keys: list[torch.Tensor]
    values: list[torch.Tensor]


@dataclass(slots=True)
class _Entry:
    tokens: list[int]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]


class PrefixCache:
    """Finished sequences' keys and values, looked up by the longest run of leading tokens a prompt shares."""

    def __init__(self, max_tokens: int) -> None:
        if max_tokens < 0:
            raise ValueError(f"prefix_cache_tokens must be >= 0, got {max_tokens}")
        self.max_tokens = max_tokens
        self.version: object = None
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next = 0
        self._tokens = 0
        self.hits = 0
        """Prompts that reused a kept start."""
        self.reused_tokens = 0
        """Prompt tokens whose keys and values came from the cache rather than a forward pass."""

    def __len__(self) -> int:
        return len(self._entries)

    def use(self, version: object) -> None:
        """Serve the weights ``version`` stands for: what other weights computed is dropped."""
        if version != self.version:
            self._entries.clear()
            self._tokens, self.version = 0, version

    def add(self, tokens: Sequence[int], keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        """Keep ``tokens``' keys and values (``[heads, len(tokens), dim]`` per layer)."""
        if not self.max_tokens or len(tokens) > self.max_tokens:
            return
        tokens = list(tokens)
        for key, entry in list(self._entries.items()):
            if _shared(entry.tokens, tokens) == len(entry.tokens):  # the new sequence extends it
                self._drop(key)
        self._entries[self._next] = _Entry(tokens, keys, values)
        self._next += 1
        self._tokens += len(tokens)
        while self._tokens > self.max_tokens:
            self._drop(next(iter(self._entries)))

    def longest(self, prompt: Sequence[int]) -> Prefix | None:
        """The kept keys and values of ``prompt``'s longest shared start, leaving it at least one token to run.

        None when no kept sequence shares its first token.
        """
        best_key, best = -1, 0
        for key, entry in self._entries.items():
            shared = _shared(entry.tokens, prompt, limit=len(prompt) - 1)
            if shared > best:
                best_key, best = key, shared
        if not best:
            return None
        self._entries.move_to_end(best_key)
        entry = self._entries[best_key]
        self.hits, self.reused_tokens = self.hits + 1, self.reused_tokens + best
        return Prefix(best, [k[:, :best] for k in entry.keys], [v[:, :best] for v in entry.values])

    def _drop(self, key: int) -> None:
        self._tokens -= len(self._entries.pop(key).tokens)


def _shared(a: Sequence[int], b: Sequence[int], *, limit: int | None = None) -> int:
    """How many leading tokens ``a`` and ``b`` share (at most ``limit``): a binary search over slice comparisons,
    which run at C speed."""
    high = min(len(a), len(b), limit if limit is not None else len(b))
    if high <= 0 or a[0] != b[0]:
        return 0
    a, b = list(a[:high]), list(b[:high])
    if a == b:
        return high
    low = 1  # a[:low] == b[:low] holds; a[:high] != b[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle
    return low
