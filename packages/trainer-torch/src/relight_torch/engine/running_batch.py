"""The engine's running batch: a KV cache that sequences join and leave between two forward passes.

Requests reach the engine staggered: an agent's next call follows its tool, asynchronous training keeps
rollouts of several policy versions in flight. A batch that ran to its longest row before taking the
next request kept each newcomer waiting for a whole generation and ran most of its steps with few rows,
while each step of a small model costs about the same whatever its rows (Python overhead, not
arithmetic). So a sequence that arrives joins the batch at the next step (continuous batching): its
prompt is prefilled alone, and its cache is merged with the running one, both left-padded to the same
length. Padding is masked and each row's positions count only its own tokens, so every row gets the
logits it would get alone (the engine's tests compare them with a fresh forward pass). Rows prefilled
together that share a long prompt start compute it once (:meth:`RunningBatch._prefill`), and a row
whose prompt starts like a sequence the batch finished earlier reuses its keys and values
(:mod:`relight_torch.engine.prefix_cache`): only the rest runs.

The cache is transformers' :class:`~transformers.DynamicCache` built without a config: one plain
:class:`~transformers.cache_utils.DynamicLayer` (keys and values shaped ``[rows, heads, length, dim]``)
per layer, which is what the merge and the trim of all-padding columns rely on.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache, PreTrainedModel

from relight_torch.engine.prefix_cache import Prefix, PrefixCache
from relight_torch.learner.packing import forward_sharing, left_pad, positions, shared_prefix

__all__ = ["RunningBatch"]


class RunningBatch:
    """The rows a model is sampling together: their KV cache, attention mask and next positions.

    Every method runs one forward pass (or none) and returns the last-position logits of the rows it
    ran, in row order; the caller samples from them and says which rows go on (:meth:`keep`).
    """

    def __init__(self, model: PreTrainedModel, pad_id: int, prefixes: PrefixCache | None = None) -> None:
        self.model = model
        self.pad_id = pad_id
        self.prefixes = prefixes
        self.device = model.device
        self.cache = DynamicCache()
        self.mask = torch.empty(0, 0, dtype=torch.long, device=self.device)
        self.next_position = torch.empty(0, dtype=torch.long, device=self.device)

    def __len__(self) -> int:
        return self.mask.shape[0]

    def prefill(self, sequences: Sequence[Sequence[int]]) -> torch.Tensor:
        """Start over with ``sequences`` (a new batch, or every row again under new weights)."""
        self.cache, self.mask, self.next_position, logits = self._prefill(sequences)
        return logits

    def remember(self, index: int, tokens: Sequence[int]) -> None:
        """Keep row ``index``'s keys and values in the prefix cache; ``tokens`` starts with those it was fed."""
        if self.prefixes is not None and self.prefixes.max_tokens:
            real = self.mask[index].bool()
            keys = [layer.keys[index][:, real] for layer in self.cache.layers]
            values = [layer.values[index][:, real] for layer in self.cache.layers]
            self.prefixes.add(tokens[: int(real.sum())], keys, values)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed each row its last sampled token (one per row)."""
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(self), 1)], dim=1)
        output = self.model(
            input_ids=tokens.unsqueeze(1),
            attention_mask=self.mask,
            position_ids=self.next_position.unsqueeze(1),
            past_key_values=self.cache,
            use_cache=True,
        )
        self.next_position = self.next_position + 1
        return output.logits[:, -1].float()

    def join(self, sequences: Sequence[Sequence[int]]) -> torch.Tensor:
        """Add ``sequences`` after the running rows: prefilled alone, their cache merged into the batch's."""
        cache, mask, next_position, logits = self._prefill(sequences)
        width = max(self.mask.shape[1], mask.shape[1])
        for running, joining in zip(self.cache.layers, cache.layers, strict=True):
            running.keys = torch.cat([_pad_left(running.keys, width), _pad_left(joining.keys, width)])
            running.values = torch.cat([_pad_left(running.values, width), _pad_left(joining.values, width)])
        self.mask = torch.cat([_pad_left(self.mask, width, dim=1), _pad_left(mask, width, dim=1)])
        self.next_position = torch.cat([self.next_position, next_position])
        return logits

    def keep(self, index: Sequence[int]) -> None:
        """Keep only the rows at ``index`` (the others finished), and drop columns that are padding in all of them."""
        if len(index) < len(self):
            chosen = torch.tensor(index, dtype=torch.long, device=self.device)
            self.cache.batch_select_indices(chosen)
            self.mask, self.next_position = self.mask[chosen], self.next_position[chosen]
        start = int(self.mask.any(dim=0).int().argmax()) if len(self) else 0
        if start:
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[:, :, start:], layer.values[:, :, start:]
            self.mask = self.mask[:, start:]

    def _prefill(
        self, sequences: Sequence[Sequence[int]]
    ) -> tuple[DynamicCache, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One forward pass over ``sequences`` into a new cache: the cache, mask, next positions and logits.

        An agent's calls share a long start (system prompt, tool list): that part is computed once
        and its keys and values repeated for every row, then each row's rest follows, left-padded
        after it (``prefix, pads, rest``: padding masked, positions counted over real tokens, so
        each row sees what it would see alone). On a CPU the prompt's forward pass is most of a
        call's cost, and a batch of 32 calls of the same agent costs about one prompt plus 32 rests.
        """
        found = [self.prefixes.longest(s) for s in sequences] if self.prefixes else []
        if any(found):
            return self._prefill_after(sequences, found)
        cache = DynamicCache()
        shared = shared_prefix(sequences)
        input_ids, mask = left_pad(sequences, pad_id=self.pad_id, device=self.device, shared=shared)
        output = forward_sharing(self.model, input_ids, mask, shared=shared, cache=cache, logits_to_keep=1)
        return cache, mask, mask.sum(-1), output.logits[:, -1].float()

    def _prefill_after(
        self, sequences: Sequence[Sequence[int]], found: Sequence[Prefix | None]
    ) -> tuple[DynamicCache, torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`_prefill` for rows some of which start with kept keys and values: only the rest runs.

        Row ``i`` is laid out ``pads, its kept start, pads, its rest`` (the starts left-padded to the
        longest, then the rests), the kept starts fed as the cache the forward pass extends.
        """
        lengths = [prefix.length if prefix else 0 for prefix in found]
        width = max(lengths)
        input_ids, rest_mask = left_pad([s[n:] for s, n in zip(sequences, lengths, strict=True)], pad_id=self.pad_id)
        start_mask = torch.tensor([[0] * (width - n) + [1] * n for n in lengths], dtype=torch.long)
        mask = torch.cat([start_mask, rest_mask], dim=1).to(self.device)
        template = next(prefix for prefix in found if prefix)
        cache = DynamicCache()
        for layer, (keys, values) in enumerate(zip(template.keys, template.values, strict=True)):
            empty_keys, empty_values = keys[:, :0], values[:, :0]
            cache.update(
                torch.stack([_pad_left(p.keys[layer] if p else empty_keys, width, dim=1) for p in found]),
                torch.stack([_pad_left(p.values[layer] if p else empty_values, width, dim=1) for p in found]),
                layer,
            )
        output = self.model(
            input_ids=input_ids.to(self.device),
            attention_mask=mask,
            position_ids=positions(mask)[:, width:],
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return cache, mask, mask.sum(-1), output.logits[:, -1].float()


def _pad_left(tensor: torch.Tensor, width: int, *, dim: int = 2) -> torch.Tensor:
    """``tensor`` with zeros prepended along ``dim`` up to ``width`` (masked columns: their values are never seen)."""
    missing = width - tensor.shape[dim]
    if not missing:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)
