"""Imported traces as transitions: retokenized with the policy's chat template, each call's fidelity reported.

A trace holds text, never the token ids the model saw, so every imported call is rendered again with
the policy's tokenizer and chat template (:class:`TemplateRetokenizer`) and marked ``retokenized``, as
the gateway marks calls whose upstream gave no ids. Rendering can lose what the text said: a template
may trim or drop a message, cannot show an image, or renders the history differently once the answer
follows it; a tokenizer may normalize text. Each call therefore says whether its tokens reproduce
the traced text exactly (``relight.retokenized.exact``, and ``relight.retokenized.mismatch`` naming
what differs); an inexact call is still trained unless the caller leaves it out, never dropped silently.

The role of a call is the nearest agent its span sits in (the span itself, then its parents):
``gen_ai.agent.name``, OpenInference's agent spans and LangGraph node metadata, OpenLLMetry's agent
and task spans (:func:`relight.otlp.dialects.agent_name`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from pydantic import JsonValue

from relight import semconv
from relight.otlp.dialects import agent_name
from relight.records import Rollout, Span, SpanKind, Transition
from relight.store import Store
from relight.transitions.builder import RoleFilter, TransitionBuilder, episode_return, role_matches
from relight.transitions.verdicts import Reason, RolloutVerdict

__all__ = [
    "EXACT",
    "MISMATCH",
    "ImportedRollout",
    "Retokenized",
    "TemplateRetokenizer",
    "chat_records",
    "explain_imported",
    "prepare_spans",
]

EXACT = semconv.RETOKENIZED_EXACT
MISMATCH = semconv.RETOKENIZED_MISMATCH


@dataclass(frozen=True, slots=True)
class Retokenized:
    """One call's token ids, and whether they reproduce the traced text."""

    prompt_ids: list[int]
    response_ids: list[int]
    mismatch: str | None = None

    @property
    def exact(self) -> bool:
        return self.mismatch is None


class TemplateRetokenizer:
    """Renders a chat call with a Hugging Face tokenizer's chat template and checks what survived.

    The response is the template's own rendering of the assistant turn (the conversation with the
    answer appended, less the prompt), so it ends as the model must end a turn (its end-of-turn token).

    Args:
        tokenizer: a ``transformers`` tokenizer (anything with ``apply_chat_template``, ``encode`` and ``decode``).
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    @classmethod
    def for_model(cls, name: str) -> TemplateRetokenizer:
        """The tokenizer of a model folder or cached model name (no download).

        Raises:
            ImportError: transformers is not installed.
        """
        try:
            from transformers import AutoTokenizer  # pyright: ignore[reportMissingImports, reportUnknownVariableType]
        except ImportError as error:
            raise ImportError("retokenizing traces needs transformers: pip install transformers") from error
        return cls(AutoTokenizer.from_pretrained(name, local_files_only=True))  # pyright: ignore[reportUnknownMemberType]

    def retokenize(
        self, messages: Sequence[Mapping[str, Any]], response: Mapping[str, Any], tools: Sequence[Mapping[str, Any]]
    ) -> Retokenized:
        problems = [p for index, m in enumerate(messages) if (p := _not_text(index, m)) is not None]
        history = [_renderable(m) for m in messages]
        answer = _renderable(response)
        prompt = self._render(history, tools, generation_prompt=True)
        whole = self._render([*history, answer], tools, generation_prompt=False)
        if whole.startswith(prompt):
            reply = whole[len(prompt) :]
        else:
            problems.append("the template renders the conversation differently once the answer follows it")
            reply = str(answer.get("content") or "") + "".join(
                json.dumps(call.get("function", {})) for call in answer.get("tool_calls") or ()
            )
        problems += _missing_texts(history, prompt, "message")
        problems += _missing_texts([answer], reply, "the answer")
        prompt_ids, response_ids = self._encode(prompt), self._encode(reply)
        if self._decode(prompt_ids) != prompt or self._decode(response_ids) != reply:
            problems.append("the tokenizer does not decode its ids back to the rendered text")
        return Retokenized(prompt_ids, response_ids, "; ".join(problems) or None)

    def _render(
        self, messages: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]], *, generation_prompt: bool
    ) -> str:
        return str(
            self.tokenizer.apply_chat_template(
                messages,
                tools=[dict(t) for t in tools] or None,
                tokenize=False,
                add_generation_prompt=generation_prompt,
            )
        )

    def _encode(self, text: str) -> list[int]:
        return [int(i) for i in self.tokenizer.encode(text, add_special_tokens=False)]

    def _decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))


def _not_text(index: int, message: Mapping[str, Any]) -> str | None:
    content = message.get("content")
    if content is None or isinstance(content, str):
        return None
    kinds = sorted(
        {str(cast(dict[str, Any], p).get("type")) for p in cast(list[Any], content) if isinstance(p, dict)} - {"text"}
    )
    if kinds:
        return f"message {index} ({message.get('role')}) holds {', '.join(kinds)} content a text template cannot render"
    return None


def _renderable(message: Mapping[str, Any]) -> dict[str, Any]:
    """The message as templates expect it: text parts joined, tool-call arguments as dicts."""
    result = dict(message)
    content = result.get("content")
    if isinstance(content, list):
        result["content"] = "".join(
            str(cast(dict[str, Any], p).get("text", "")) for p in cast(list[Any], content) if isinstance(p, dict)
        )
    calls: list[dict[str, Any]] = []
    for call in cast(list[Any], result.get("tool_calls") or []):
        function = dict(cast(dict[str, Any], call).get("function") or {})
        if isinstance(function.get("arguments"), str):
            with contextlib.suppress(ValueError):
                function["arguments"] = json.loads(function["arguments"])
        calls.append({**cast(dict[str, Any], call), "function": function})
    if calls:
        result["tool_calls"] = calls
    return result


def _missing_texts(messages: Iterable[Mapping[str, Any]], rendered: str, what: str) -> list[str]:
    """Each message whose text is not found in the rendering, in order."""
    problems: list[str] = []
    cursor = 0
    for index, message in enumerate(messages):
        text = str(message.get("content") or "")
        found = rendered.find(text, cursor)
        if found < 0:
            label = f"{what} {index} ({message.get('role')})" if what == "message" else what
            problems.append(f"{label}'s text does not appear in the rendered prompt")
        else:
            cursor = found + len(text)
    return problems


def prepare_spans(spans: Sequence[Span], retokenizer: TemplateRetokenizer | None) -> list[Span]:
    """An imported attempt's spans made ready for :class:`relight.TransitionBuilder`.

    Each LLM call without token ids is retokenized (when a retokenizer is given) and gets a role span
    naming the agent it ran in, joined to it by response id; the store is left as it was.
    """
    by_id = {span.span_id: span for span in spans}
    prepared: list[Span] = []
    for span in spans:
        if span.kind is not SpanKind.LLM:
            prepared.append(span)
            continue
        if retokenizer is not None and semconv.PROMPT_TOKEN_IDS not in span.attributes:
            span = _retokenized(span, retokenizer)
        prepared.append(span)
        role = _role(span, by_id)
        attributes: dict[str, JsonValue] = {
            semconv.SPAN_KIND: SpanKind.ROLE.value,
            semconv.GEN_AI_RESPONSE_ID: span.attributes.get(semconv.GEN_AI_RESPONSE_ID),
        }
        if role is not None:
            attributes[semconv.ROLE] = role
        prepared.append(
            span.model_copy(update={"span_id": f"{span.span_id}-role", "name": "role", "attributes": attributes})
        )
    return prepared


def _role(span: Span, by_id: Mapping[str, Span]) -> str | None:
    current: Span | None = span
    seen: set[str] = set()
    while current is not None and current.span_id not in seen:
        seen.add(current.span_id)
        name = agent_name(current.name, current.attributes)
        if name is not None:
            return name
        current = by_id.get(current.parent_id) if current.parent_id else None
    return None


def _retokenized(span: Span, retokenizer: TemplateRetokenizer) -> Span:
    messages, response, tools = _call(span)
    if messages is None or response is None:
        return span
    result = retokenizer.retokenize(messages, response, tools)
    attributes = dict(span.attributes)
    attributes[semconv.PROMPT_TOKEN_IDS] = list[JsonValue](result.prompt_ids)
    attributes[semconv.RESPONSE_TOKEN_IDS] = list[JsonValue](result.response_ids)
    attributes[semconv.RETOKENIZED] = True
    attributes[EXACT] = result.exact
    if result.mismatch is not None:
        attributes[MISMATCH] = result.mismatch
    return span.model_copy(update={"attributes": attributes})


def _call(span: Span) -> tuple[list[dict[str, Any]] | None, dict[str, Any] | None, list[dict[str, Any]]]:
    """The call's request messages, its answer and its tools, from the attributes the importer wrote."""
    messages = _json_list(span.attributes.get(semconv.GEN_AI_INPUT_MESSAGES))
    outputs = _json_list(span.attributes.get(semconv.GEN_AI_OUTPUT_MESSAGES))
    tools = _json_list(span.attributes.get(semconv.GEN_AI_TOOL_DEFINITIONS)) or []
    return messages, (outputs[0] if outputs else None), tools


def _json_list(value: JsonValue | None) -> list[dict[str, Any]] | None:
    if not isinstance(value, str):
        return None
    try:
        parsed: Any = json.loads(value)
    except ValueError:
        return None
    if not isinstance(parsed, list):
        return None
    return [cast(dict[str, Any], m) for m in cast(list[Any], parsed) if isinstance(m, dict)]


@dataclass(frozen=True, slots=True)
class ImportedRollout:
    """An imported rollout's verdicts and the reward its trace recorded (None: it recorded none)."""

    verdict: RolloutVerdict
    reward: float | None

    @property
    def transitions(self) -> list[Transition]:
        return self.verdict.transitions


async def explain_imported(
    store: Store,
    builder: TransitionBuilder,
    retokenizer: TemplateRetokenizer | None,
    rollouts: Iterable[Rollout],
) -> list[ImportedRollout]:
    """Every call of the imported ``rollouts``: the transition it became (retokenized) or why it became none."""
    imported: list[ImportedRollout] = []
    for rollout in rollouts:
        attempts = await store.list_attempts(rollout.rollout_id)
        spans = await store.query_spans(rollout.rollout_id)
        verdict = builder.explain_spans(rollout, attempts, prepare_spans(spans, retokenizer), training=False)
        used = [s for s in spans if s.attempt_id == verdict.attempt_id]
        imported.append(ImportedRollout(verdict, episode_return(used)))
    return imported


def chat_records(
    imported: Iterable[ImportedRollout], *, roles: RoleFilter = None, min_reward: float | None = None
) -> list[dict[str, JsonValue]]:
    """One SFT conversation per call (its request messages, then its answer), role filter applied.

    Earlier assistant turns are context, marked ``"weight": 0`` as in OpenAI's fine-tuning format
    (relight-torch's SFT skips them), so a call's record teaches only that call's answer and the
    role filter holds.

    ``reward`` is the call's credited reward when its trace recorded one, else null; ``min_reward``
    keeps only calls credited at least that (so it leaves out unrewarded ones).
    """
    records: list[dict[str, JsonValue]] = []
    for rollout in imported:
        for call in rollout.verdict.calls:
            if call.reason is Reason.FAILED_CALL or not role_matches(roles, call.role):
                continue
            messages, response, tools = _call(call.span)
            if messages is None or response is None:
                continue
            reward = call.reward if rollout.reward is not None else None
            if min_reward is not None and (reward is None or reward < min_reward):
                continue
            context = [{**m, "weight": 0} if m.get("role") == "assistant" else m for m in messages]
            record: dict[str, JsonValue] = {"messages": cast(list[JsonValue], [*context, response])}
            if tools:
                record["tools"] = cast(list[JsonValue], tools)
            record |= {
                "role": call.role,
                "reward": reward,
                "rollout_id": rollout.verdict.rollout.rollout_id,
                "span_id": call.span.span_id,
            }
            records.append(record)
    return records
