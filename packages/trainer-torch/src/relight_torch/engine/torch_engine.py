"""A transformers model served in-process: relight's :class:`~relight.engine.Engine` for the CPU or one GPU.

Calls from many concurrent rollouts are batched continuously: ``generate`` templates and tokenizes
the request, queues it and waits; one worker thread starts a batch with what is queued (up to
``max_batch_size``, waiting while requests keep arriving less than ``batch_window`` seconds
apart) and samples it with one forward pass per token (left-padded prompts, a KV cache). Between
two passes, rows that finished leave and hand their caller the result at once, and requests queued
meanwhile join (:mod:`relight_torch.engine.running_batch`): an agent's next call never waits for a batch
it was not in to end. The window matters for the first pass: requests reach the engine one by one
through HTTP and the event loop, and a worker that started on the first would prefill them one by one.
The weights change only between two generation steps (one forward pass of the batch):
:meth:`TorchEngine.updating_weights` (training in place) and :meth:`TorchEngine.load_weights`
(swapping in weights trained elsewhere) take the lock each step holds, then raise the policy version.

A call that spans an update is resumed on the new weights, never lost or restarted: its prompt and
the tokens sampled so far are prefilled again under the new weights (the old KV cache belongs to the
old policy) and sampling goes on. Each token's logprob is that of the policy that sampled it, so the
behaviour logprobs stay exact; the generation's ``policy_version_segments`` says which version
sampled which tokens (``[(first_token, version), …]``, set only when there is more than one) and its
``policy_version`` is the oldest of them, the one a trainer's staleness rule must count.

Logprobs are those of the model at temperature 1, computed exactly as
:func:`relight_torch.learner.packing.response_logprobs` computes them for training, whatever the request's
temperature, top-p or grammar. Tool calls are parsed from hermes-style ``<tool_call>`` blocks
(:mod:`relight_torch.engine.tool_calls`) when the request offers tools; forced tool calls and JSON output
are decoded under a grammar (:mod:`relight_torch.engine.constrained_decoding`). A request the engine cannot serve as
asked (an unknown model, a template that cannot render it, an option it cannot honour) raises
:class:`relight.engine.EngineRequestError`, which the gateway answers with a 4xx.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from relight.engine import ContextLengthError, EngineRequestError, Generation, GenerationRequest, SamplingParams
from relight_torch.engine.chat import render
from relight_torch.engine.constrained_decoding import Decoding, first_call_forced, parses_tool_calls
from relight_torch.engine.prefix_cache import PrefixCache
from relight_torch.engine.running_batch import RunningBatch
from relight_torch.engine.tool_calls import parse_tool_calls
from relight_torch.engine.weights_gate import WeightsGate
from relight_torch.models.naming import model_name

__all__ = ["DEFAULT_MAX_TOKENS", "EngineAbandoned", "Sampled", "TorchEngine", "configured_max_tokens"]


DEFAULT_MAX_TOKENS = 1024
"""New tokens for a request without ``max_tokens`` when the model's generation config gives no cap either."""


def configured_max_tokens(model: Any) -> int | None:
    """The ``max_new_tokens`` a model's generation config sets, if it sets one."""
    value = getattr(getattr(model, "generation_config", None), "max_new_tokens", None)
    return value if isinstance(value, int) and value > 0 else None


class EngineAbandoned(RuntimeError):
    """The engine shut down before the request's answer was finished (:meth:`TorchEngine.abandon`)."""


_LONGER = (
    "Use a model with a longer context (its config's max_position_embeddings; tiny_engine(max_positions=N) "
    "for the tiny model)"
)


@dataclass(frozen=True, slots=True)
class Sampled:
    """What the worker sampled for one tokenized prompt."""

    response_ids: list[int]
    logprobs: list[float]
    finish: Literal["stop", "length"]
    policy_version: int
    """The version that sampled the first token (the oldest)."""
    segments: list[tuple[int, int]] | None = None
    """``[(first_token, version), …]`` when an update landed mid-call; None when one version sampled it all."""
    top: list[list[tuple[int, float]]] = field(default_factory=list[list[tuple[int, float]]])
    """The most likely ``(token id, logprob)`` pairs at each position, when the request asked for them."""


@dataclass(eq=False)
class _Row:
    """One request in flight inside a batch."""

    prompt_ids: list[int]
    sampling: SamplingParams
    max_new_tokens: int
    future: Future[Sampled]
    generator: torch.Generator | None = None
    matcher: Any = None
    """An xgrammar matcher constraining what may be sampled, or None."""
    top_logprobs: int = 0
    top: list[list[tuple[int, float]]] = field(default_factory=list[list[tuple[int, float]]])
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: Literal["stop", "length"] | None = None
    segments: list[tuple[int, int]] = field(default_factory=list[tuple[int, int]])


class TorchEngine:
    """Serve a Hugging Face causal LM to many rollouts at once, with token ids and logprobs.

    Args:
        model: The policy, put in eval mode (dropout off: sampling and training must compute the
            same probabilities). A trainer shares it: the engine only reads it, and a batch never
            runs while :meth:`updating_weights` is held.
        tokenizer: Its tokenizer, with a chat template for chat requests.
        name: The model name the engine answers to.
        max_batch_size: Most sequences sampled together in one batch.
        batch_window: Seconds a new batch waits for the next request before it starts.
        seed: Seeds the sampling of requests that bring no seed of their own.
        default_max_tokens: New tokens for a request that sets no ``max_tokens``; None: the rest of the context.
        force_first_tool_call: Decode a request that offers tools with ``tool_choice`` ``auto`` (or
            none given) as ``required`` while its messages hold no tool result
            (:func:`relight_torch.engine.constrained_decoding.first_call_forced`): for a model that never picks
            a tool by itself, driven by a framework that always leaves the choice to the model. The logprobs
            recorded stay the model's own, as for any forced call.
        prefix_cache_tokens: Tokens of finished sequences whose keys and values are kept for later prompts
            that start the same way (:mod:`relight_torch.engine.prefix_cache`); 0 turns it off.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        name: str = "relight-tiny",
        max_batch_size: int = 128,
        batch_window: float = 0.005,
        seed: int = 0,
        default_max_tokens: int | None = None,
        force_first_tool_call: bool = False,
        prefix_cache_tokens: int = 8192,
    ) -> None:
        if tokenizer.pad_token_id is None and tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has neither a pad nor an eos token; set tokenizer.pad_token")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.max_batch_size = max_batch_size
        self.batch_window = batch_window
        self.policy_version = 0
        self.context_length: int = getattr(model.config, "max_position_embeddings", None) or 2048
        self.default_max_tokens = default_max_tokens
        """New tokens for a request that sets no ``max_tokens``; None: the rest of the context."""
        self.force_first_tool_call = force_first_tool_call
        pad = tokenizer.pad_token_id
        self.pad_id: int = pad if pad is not None else tokenizer.eos_token_id  # type: ignore[assignment]
        self._eos_ids = _eos_ids(model, tokenizer)
        self.decoding = Decoding(tokenizer, model.config.vocab_size, self._eos_ids)
        self.generator = torch.Generator().manual_seed(seed)
        """Samples for requests that bring no seed; checkpoints keep its state."""
        self._weights = WeightsGate()
        self.prefixes = PrefixCache(prefix_cache_tokens)
        """Keys and values of finished sequences, for prompts that extend them; its ``hits`` count the reuses."""
        self._queue: queue.SimpleQueue[_Row | None] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.batches = 0
        """Batches the worker has run; with :attr:`rows`, how well requests shared them."""
        self.rows = 0
        """Sequences sampled, over all batches."""
        self.joined = 0
        """Sequences that joined a batch already running (continuous batching)."""
        self.steps = 0
        """Generation steps (forward passes of a batch) run; :attr:`tokens` over it is the mean batch filled."""
        self.tokens = 0
        """Tokens sampled, over all steps."""
        self._stopping = False
        self._abandoning = False

    @classmethod
    def from_pretrained(
        cls, path: str | Path, *, name: str | None = None, device: str = "cpu", **kwargs: Any
    ) -> TorchEngine:
        """Load a model and tokenizer that transformers can load from a local directory.

        The engine answers to ``name``, by default the one the folder's config gives
        (:func:`relight_torch.models.naming.model_name`). A request that sets no ``max_tokens`` gets at most
        the folder's ``generation_config.max_new_tokens``, else :data:`DEFAULT_MAX_TOKENS`
        (``default_max_tokens=None`` lifts the cap): agent frameworks often send none, and a small
        model may never stop by itself.
        """
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path).to(device)
        if "default_max_tokens" not in kwargs:
            kwargs["default_max_tokens"] = configured_max_tokens(model) or DEFAULT_MAX_TOKENS
        return cls(model, tokenizer, name=name or model_name(path), **kwargs)

    # -- the Engine protocol ---------------------------------------------------------------------

    def models(self) -> list[str]:
        return [self.name]

    async def generate(self, request: GenerationRequest) -> Generation:
        if request.model and request.model != self.name:
            raise EngineRequestError(f"The model `{request.model}` does not exist.", param="model", status_code=404)
        if self.force_first_tool_call:
            request = first_call_forced(request)
        self.decoding.check(request)
        try:
            prompt_ids = self.prompt_ids(request)
        except Exception as error:  # the template refused the messages: the request's fault
            raise EngineRequestError(
                f"the chat template cannot render the request: {error}", param="messages"
            ) from error
        future = self.submit(
            prompt_ids, request.sampling, matcher=self.decoding.matcher(request), top_logprobs=request.top_logprobs
        )
        sampled = await asyncio.wrap_future(future)
        text = _cut_at_stop(self._decode(sampled.response_ids), request.sampling.stop)
        tool_calls = None
        if parses_tool_calls(request):
            text, calls = parse_tool_calls(text)
            tool_calls = calls or None
        finish_reason: Literal["stop", "length", "tool_calls"] = "tool_calls" if tool_calls else sampled.finish
        token = self.decoding.token
        return Generation(
            text=text,
            prompt_token_ids=prompt_ids,
            response_token_ids=sampled.response_ids,
            response_logprobs=sampled.logprobs,
            finish_reason=finish_reason,
            model=self.name,
            policy_version=sampled.policy_version,
            policy_version_segments=sampled.segments,
            tool_calls=tool_calls,
            tokens=[token(t, lp) for t, lp in zip(sampled.response_ids, sampled.logprobs, strict=True)],
            top_logprobs=[[token(t, lp) for t, lp in step] for step in sampled.top] if request.top_logprobs else None,
        )

    # -- lower level -----------------------------------------------------------------------------

    def prompt_ids(self, request: GenerationRequest) -> list[int]:
        """The token ids the model sees for a request: the chat template's, or the prompt's."""
        if request.messages is not None:
            return render(self.tokenizer, request.messages, tools=request.tools, add_generation_prompt=True)
        if request.prompt is not None:
            return list(self.tokenizer.encode(request.prompt))
        raise ValueError("a generation request needs messages or a prompt; it had neither")

    def submit(
        self, prompt_ids: list[int], sampling: SamplingParams, *, matcher: Any = None, top_logprobs: int = 0
    ) -> Future[Sampled]:
        """Queue a tokenized prompt for the next batch; raises ValueError naming a bad field.

        ``matcher`` (an xgrammar matcher) constrains what is sampled; ``top_logprobs`` asks for the
        most likely tokens at each position.
        """
        room = self.context_length - len(prompt_ids)
        if room < 1:
            raise ContextLengthError(
                f"the prompt has {len(prompt_ids)} tokens; the model's context is {self.context_length}. {_LONGER}",
                context_length=self.context_length,
                prompt_tokens=len(prompt_ids),
            )
        if sampling.max_tokens is not None and sampling.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {sampling.max_tokens}")
        if sampling.max_tokens is not None and sampling.max_tokens > room:
            raise ContextLengthError(
                f"max_tokens must be between 1 and {room} (the context of {self.context_length} tokens less the "
                f"prompt's {len(prompt_ids)}), got {sampling.max_tokens}. Ask for fewer, or {_LONGER[0].lower()}"
                f"{_LONGER[1:]}",
                context_length=self.context_length,
                prompt_tokens=len(prompt_ids),
                max_tokens=sampling.max_tokens,
            )
        if sampling.temperature < 0 or not 0 < sampling.top_p <= 1:
            raise ValueError(
                f"temperature must be >= 0 and top_p in (0, 1]; got {sampling.temperature} and {sampling.top_p}"
            )
        row = _Row(
            prompt_ids=prompt_ids,
            sampling=sampling,
            max_new_tokens=sampling.max_tokens or min(room, self.default_max_tokens or room),
            future=Future(),
            generator=torch.Generator().manual_seed(sampling.seed) if sampling.seed is not None else None,
            matcher=matcher,
            top_logprobs=top_logprobs,
        )
        if self._abandoning:  # shutting down: a request that arrives now is never started
            row.future.set_exception(EngineAbandoned("the engine is shutting down; the request was never started"))
            return row.future
        self._ensure_worker()
        self._queue.put(row)
        return row.future

    @contextmanager
    def updating_weights(self) -> Iterator[None]:
        """Hold generation between two steps while the weights change in place; the version rises on exit."""
        with self._weights.update():
            yield
            self.policy_version += 1

    def load_weights(self, source: torch.nn.Module) -> None:
        """Copy ``source``'s weights (the same architecture, trained elsewhere) into the served model, between
        two generation steps, and raise the policy version: an update without a stop."""
        with self._weights.update(), torch.no_grad():
            for served, trained in zip(self.model.parameters(), source.parameters(), strict=True):
                served.copy_(trained)
            self.policy_version += 1

    def abandon(self) -> None:
        """Finish the step being sampled, then fail every request in flight or queued and stop: a shutdown
        that cannot wait for a request that may never end (a model with no output cap)."""
        self._abandoning = True
        while True:
            try:
                row = self._queue.get_nowait()
            except queue.Empty:
                break
            if row is not None and row.future.set_running_or_notify_cancel():
                row.future.set_exception(EngineAbandoned("the engine is shutting down; the request was never started"))
        if self._worker is not None:  # wake a worker waiting for work, so it stops
            self._queue.put(None)

    def close(self) -> None:
        """Stop the worker thread once the queued requests are served; safe to call twice."""
        with self._start_lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            self._queue.put(None)
            worker.join()

    def __enter__(self) -> TorchEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the worker ------------------------------------------------------------------------------

    def _ensure_worker(self) -> None:
        with self._start_lock:
            if self._worker is None:
                self._stopping = False
                self._worker = threading.Thread(target=self._serve, name="relight-torch-engine", daemon=True)
                self._worker.start()

    def _serve(self) -> None:
        while not self._stopping:
            first = self._queue.get()
            if first is None:
                return
            rows = [first, *self._take(self.max_batch_size - 1, wait=self.batch_window)]
            rows = [row for row in rows if row.future.set_running_or_notify_cancel()]
            if rows:
                self._run(rows)

    def _take(self, most: int, *, wait: float | None = None) -> list[_Row]:
        """Up to ``most`` queued rows: those waiting now, or while they keep arriving less than ``wait`` s apart."""
        rows: list[_Row] = []
        while len(rows) < most and not self._stopping:
            try:
                row = self._queue.get(timeout=wait) if wait else self._queue.get_nowait()
            except queue.Empty:
                break
            if row is None:
                self._stopping = True
            else:
                rows.append(row)
        return rows

    def _run(self, rows: list[_Row]) -> None:
        self.batches += 1
        in_flight = list(rows)
        try:
            with torch.inference_mode():
                self._sample(in_flight)
        except Exception as error:
            for row in in_flight:
                if not row.future.done():
                    row.future.set_exception(error)

    def _sample(self, in_flight: list[_Row]) -> None:
        """Sample until every row has finished, one forward pass at a time, each under the weights lock.

        Queued requests join at each step (see :mod:`relight_torch.engine.running_batch`); a row's caller gets its
        result as soon as the row finishes. ``in_flight`` is kept up to date, for failing what is left.
        """
        batch = RunningBatch(self.model, self.pad_id, self.prefixes)
        active: list[_Row] = []
        version: int | None = None
        tokens = torch.empty(0, dtype=torch.long)
        while True:
            with self._weights.step():
                self.prefixes.use((self.policy_version, sum(p._version for p in self.model.parameters())))
                joining = in_flight[len(active) :]
                if version != self.policy_version:  # new weights: every row again, from its tokens so far
                    version, active = self.policy_version, in_flight[:]
                    for row in active:
                        row.segments.append((len(row.response_ids), version))
                    logits = batch.prefill([row.prompt_ids + row.response_ids for row in active])
                else:
                    logits = batch.step(tokens)
                    if joining:
                        for row in joining:
                            row.segments.append((0, version))
                        logits = torch.cat([logits, batch.join([row.prompt_ids for row in joining])])
                        active = in_flight[:]
                        self.joined += len(joining)
                tokens, logprobs = self._next_tokens(logits, active)
                _note_top_logprobs(logits, active)
            self.steps, self.tokens = self.steps + 1, self.tokens + len(active)
            keep: list[int] = []
            for i, (row, token, logprob) in enumerate(zip(active, tokens.tolist(), logprobs.tolist(), strict=True)):
                if self._extend(row, token, logprob):
                    keep.append(i)
                else:
                    batch.remember(i, row.prompt_ids + row.response_ids)
                    self._finish(row)
            if not keep:
                return
            if self._abandoning:  # after this step: the rows still sampling fail, the worker stops
                self._stopping = True
                raise EngineAbandoned("the engine is shutting down; the request was abandoned mid-answer")
            batch.keep(keep)
            if len(keep) < len(active):
                active = in_flight[:] = [active[i] for i in keep]
                tokens = tokens[torch.tensor(keep, dtype=torch.long, device=tokens.device)]
            joining = self._take(self.max_batch_size - len(active))
            in_flight.extend(row for row in joining if row.future.set_running_or_notify_cancel())

    def _finish(self, row: _Row) -> None:
        self.rows += 1
        segments = row.segments if len(row.segments) > 1 else None
        finish = row.finish or "length"
        result = Sampled(row.response_ids, row.logprobs, finish, row.segments[0][1], segments, row.top)
        row.future.set_result(result)

    def _next_tokens(self, logits: torch.Tensor, rows: Sequence[_Row]) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's next token (within its grammar, if any), and its logprob at temperature 1."""
        logprobs = torch.log_softmax(logits, dim=-1)
        allowed = self.decoding.constrain(logits, [row.matcher for row in rows])
        chosen = allowed.argmax(dim=-1)
        sampled = [i for i, row in enumerate(rows) if row.sampling.temperature > 0]
        if sampled:
            index = torch.tensor(sampled, device=logits.device)
            temperature = torch.tensor([rows[i].sampling.temperature for i in sampled], device=logits.device)
            top_p = torch.tensor([rows[i].sampling.top_p for i in sampled], device=logits.device)
            probs = _nucleus(torch.softmax(allowed[index] / temperature.unsqueeze(1), dim=-1), top_p)
            shared = [j for j, i in enumerate(sampled) if rows[i].generator is None]
            if shared:
                picks = torch.multinomial(probs[shared].cpu(), 1, generator=self.generator).squeeze(1)
                chosen[index[shared]] = picks.to(chosen.device)
            for j, i in enumerate(sampled):
                generator = rows[i].generator
                if generator is not None:
                    chosen[i] = int(torch.multinomial(probs[j].cpu(), 1, generator=generator))
        return chosen, logprobs.gather(-1, chosen.unsqueeze(1)).squeeze(1)

    def _extend(self, row: _Row, token: int, logprob: float) -> bool:
        """Add a sampled token to its row; False once the row has finished."""
        row.response_ids.append(token)
        row.logprobs.append(logprob)
        if row.matcher is not None and not row.matcher.is_terminated():
            row.matcher.accept_token(token)
        if token in self._eos_ids or (row.sampling.stop and self._has_stop(row)):
            row.finish = "stop"
        elif len(row.response_ids) >= row.max_new_tokens:
            row.finish = "length"
        return row.finish is None

    def _has_stop(self, row: _Row) -> bool:
        text = self._decode(row.response_ids)
        return any(stop and stop in text for stop in row.sampling.stop)

    def _decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))


def _note_top_logprobs(logits: torch.Tensor, rows: Sequence[_Row]) -> None:
    """Add each row's most likely ``(token id, logprob)`` pairs at this position, if it asked for them."""
    wanted = max(row.top_logprobs for row in rows)
    if not wanted:
        return
    values, indices = torch.log_softmax(logits, dim=-1).topk(wanted, dim=-1)
    for row, row_values, row_indices in zip(rows, values.tolist(), indices.tolist(), strict=True):
        if row.top_logprobs:
            row.top.append(list(zip(row_indices[: row.top_logprobs], row_values[: row.top_logprobs], strict=True)))


def _nucleus(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Zero each row's tail beyond its ``top_p`` mass (the most likely token always stays)."""
    if bool((top_p >= 1).all()):
        return probs
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    outside = (sorted_probs.cumsum(-1) - sorted_probs) > top_p.unsqueeze(1)
    sorted_probs = sorted_probs.masked_fill(outside, 0.0)
    return torch.zeros_like(probs).scatter(-1, order, sorted_probs)


def _cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """The text up to the earliest stop string (OpenAI leaves the stop string out)."""
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=-1)
    return text if cut < 0 else text[:cut]


def _eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config, tokenizer):
        value = getattr(source, "eos_token_id", None)
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    return frozenset(ids)
