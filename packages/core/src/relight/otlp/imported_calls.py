"""Imported traces as transitions: retokenized with the policy's chat template, each call's exactness said.

A trace holds text, never the token ids the model saw, so every imported call is rendered again with
the policy's tokenizer and chat template by relight's one renderer (:mod:`relight.chat`, the one
relight-torch's engine and SFT use) and marked ``retokenized``, as the gateway marks calls whose
upstream gave no ids. :func:`retokenize_call` decides whether a call is *exact*: its ids hold its
text, tool calls, tool results and tools (``relight.retokenized.exact``); otherwise it lists why
(``relight.retokenized.reasons``: ``tools_missing``, ``text_missing``, ``tool_calls_not_rendered``…, and
``relight.retokenized.mismatch`` in words). Training and export leave inexact calls out and count
them, unless told to keep them (:class:`relight.TransitionBuilder` ``include_inexact``).

GenAI events that arrived as OTLP log records are joined to their call here, whichever came first
(:func:`relight.otlp.call_record.with_log_events`).

The role of a call is the nearest agent its span sits in (the span itself, then its parents):
``gen_ai.agent.name``, OpenInference's agent spans and LangGraph node metadata, OpenLLMetry's agent
and task spans (:func:`relight.otlp.dialects.agent_name`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import JsonValue

from relight import semconv
from relight.chat import Inexact, Mismatch, Retokenized, recorded_mismatches, retokenize
from relight.otlp.call_record import log_event, with_log_events
from relight.otlp.dialects import agent_name
from relight.records import Rollout, Span, SpanKind, Transition
from relight.store import Store
from relight.transitions.builder import RoleFilter, TransitionBuilder, episode_return, role_matches
from relight.transitions.verdicts import Reason, RolloutVerdict

__all__ = [
    "EXACT",
    "MISMATCH",
    "ChatExport",
    "ImportedRollout",
    "Retokenized",
    "TemplateRetokenizer",
    "chat_records",
    "explain_imported",
    "prepare_spans",
    "retokenize_call",
    "text_mismatches",
]

EXACT = semconv.RETOKENIZED_EXACT
MISMATCH = semconv.RETOKENIZED_MISMATCH


class TemplateRetokenizer:
    """Renders a chat call with a Hugging Face tokenizer's chat template (:mod:`relight.chat`) and checks it.

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
        self,
        messages: Sequence[Mapping[str, Any]],
        response: Mapping[str, Any],
        tools: Sequence[Mapping[str, Any]],
        *,
        truncated: bool = False,
        known: Iterable[Mismatch] = (),
    ) -> Retokenized:
        """See :func:`relight.chat.retokenize`."""
        return retokenize(self.tokenizer, messages, response, tools, truncated=truncated, known=known)


def retokenize_call(
    span: Span, retokenizer: TemplateRetokenizer | None, *, rollout_spans: Sequence[Span] = ()
) -> Retokenized:
    """Whether an imported call's ids, made from its record, are exactly the call: its ids and every mismatch.

    The one decision of exactness for imported calls: :func:`prepare_spans` (so export and training)
    and ``relight verify`` all ask it. ``rollout_spans`` are the other spans of its rollout, among
    which the GenAI events logged for the call are found and read in. Without a ``retokenizer`` the
    ids are empty and the mismatches those the record shows by itself (text or tools it lacks).
    """
    events = [event for s in rollout_spans if s.parent_id == span.span_id and (event := log_event(s)) is not None]
    if events:
        span = with_log_events(span, events)
    messages, answer, tools = _call(span)
    known = text_mismatches(span)
    if messages is None or answer is None:
        return Retokenized([], [], tuple(known))
    if retokenizer is None:
        return Retokenized([], [], (*known, *recorded_mismatches(messages, answer, tools)))
    finish = span.attributes.get(semconv.GEN_AI_RESPONSE_FINISH_REASONS)
    truncated = isinstance(finish, list) and "length" in finish
    return retokenizer.retokenize(messages, answer, tools, truncated=truncated, known=known)


def text_mismatches(span: Span) -> list[Mismatch]:
    """What an imported call's record lacks (messages, or the text of some), as ``text_missing`` with the cause."""
    attributes = span.attributes
    missing = attributes.get(semconv.IMPORT_MISSING)
    listed = [str(m) for m in cast(list[JsonValue], missing)] if isinstance(missing, list) else []
    cause = attributes.get(semconv.IMPORT_MISSING_TEXT_CAUSE)
    why = f": {cause}" if isinstance(cause, str) else ""
    found: list[Mismatch] = []
    if "input_messages" in listed or "output_messages" in listed:
        lacking = " and ".join(
            what for key, what in (("input_messages", "request"), ("output_messages", "answer")) if key in listed
        )
        found.append(Mismatch(Inexact.TEXT_MISSING, f"the trace holds no {lacking} messages{why}"))
    texts = attributes.get(semconv.IMPORT_MISSING_TEXT)
    if isinstance(texts, list) and texts:
        pieces = ", ".join(str(t) for t in cast(list[JsonValue], texts))
        found.append(Mismatch(Inexact.TEXT_MISSING, f"no text for {pieces}{why}"))
    return found


def prepare_spans(spans: Sequence[Span], retokenizer: TemplateRetokenizer | None) -> list[Span]:
    """An imported attempt's spans made ready for :class:`relight.TransitionBuilder`.

    Each LLM call without token ids gets the GenAI events logged for it read in and its exactness
    (:func:`retokenize_call`): with a retokenizer, its ids too; without one, only what its record
    lacks. Each gets a role span naming the agent it ran in, joined to it by response id. The store
    is left as it was.
    """
    by_id = {span.span_id: span for span in spans}
    prepared: list[Span] = []
    for span in spans:
        if span.kind is not SpanKind.LLM:
            prepared.append(span)
            continue
        if semconv.PROMPT_TOKEN_IDS not in span.attributes:
            span = _retokenized(span, retokenizer, spans)
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


def _retokenized(span: Span, retokenizer: TemplateRetokenizer | None, spans: Sequence[Span]) -> Span:
    events = [event for s in spans if s.parent_id == span.span_id and (event := log_event(s)) is not None]
    if events:
        span = with_log_events(span, events)
    result = retokenize_call(span, retokenizer)
    attributes = dict(span.attributes)
    if result.prompt_ids:
        attributes[semconv.PROMPT_TOKEN_IDS] = list[JsonValue](result.prompt_ids)
        attributes[semconv.RESPONSE_TOKEN_IDS] = list[JsonValue](result.response_ids)
        attributes[semconv.RETOKENIZED] = True
    if result.prompt_ids or not result.exact:
        attributes[EXACT] = result.exact
    if not result.exact:
        attributes[MISMATCH] = result.mismatch
        attributes[semconv.RETOKENIZED_REASONS] = list[JsonValue](result.reasons)
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


@dataclass(slots=True)
class ChatExport:
    """SFT conversations, and the calls left out of them with why (``{"inexact: text_missing": 2}``)."""

    records: list[dict[str, JsonValue]] = field(default_factory=list[dict[str, JsonValue]])
    skipped: Counter[str] = field(default_factory=Counter[str])


def chat_records(
    imported: Iterable[ImportedRollout],
    *,
    roles: RoleFilter = None,
    min_reward: float | None = None,
    include_inexact: bool = False,
) -> ChatExport:
    """One SFT conversation per call (its request messages, then its answer), role filter applied.

    Earlier assistant turns are context, marked ``"weight": 0`` as in OpenAI's fine-tuning format
    (relight-torch's SFT skips them), so a call's record teaches only that call's answer and the
    role filter holds.

    ``reward`` is the call's credited reward when its trace recorded one, else null; ``min_reward``
    keeps only calls credited at least that (so it leaves out unrewarded ones). A call whose record is
    not the whole call (text it lacks, tools it used but does not hold) is left out and counted, as
    training leaves it out, unless ``include_inexact``; so is one that failed.
    """
    export = ChatExport()
    for rollout in imported:
        for call in rollout.verdict.calls:
            if call.reason is Reason.FAILED_CALL:
                export.skipped["failed call"] += 1
                continue
            if not role_matches(roles, call.role):
                export.skipped[Reason.FILTERED_ROLE.value] += 1
                continue
            messages, response, tools = _call(call.span)
            flaws = text_mismatches(call.span)
            if messages is not None and response is not None:
                flaws += recorded_mismatches(messages, response, tools)
            if messages is None or response is None or (flaws and not include_inexact):
                reasons = ", ".join(dict.fromkeys(m.reason.value for m in flaws)) or Inexact.NO_TEXT.value
                export.skipped[f"inexact ({reasons})"] += 1
                continue
            reward = call.reward if rollout.reward is not None else None
            if min_reward is not None and (reward is None or reward < min_reward):
                export.skipped["below --min-reward" if reward is not None else "no reward"] += 1
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
            export.records.append(record)
    return export
