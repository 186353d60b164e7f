"""Span attribute names: OpenTelemetry's GenAI conventions where they exist, ``relight.*`` where not.

Every part that writes or reads spans (gateway, adapters, emitters, transitions) uses these
constants, so a name is spelled in one place.
"""

from __future__ import annotations

from typing import Final

# -- OpenTelemetry GenAI semantic conventions ---------------------------------------------------
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_SYSTEM: Final = "gen_ai.system"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_REQUEST_TEMPERATURE: Final = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P: Final = "gen_ai.request.top_p"
GEN_AI_REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_STOP_SEQUENCES: Final = "gen_ai.request.stop_sequences"
"""The request's ``stop`` strings: a call they ended stopped without the end-of-turn token."""
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
"""JSON text of the request's messages (or prompt)."""
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
"""JSON text of the response's messages (or completion)."""
GEN_AI_TOOL_DEFINITIONS: Final = "gen_ai.tool.definitions"
"""JSON text of the tools a request offered (OpenAI's ``tools``), so a call can be re-rendered for training."""
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
ERROR_TYPE: Final = "error.type"

# -- relight ------------------------------------------------------------------------------------
SPAN_KIND: Final = "relight.span.kind"
"""One of :class:`relight.models.SpanKind`'s values."""
ROLLOUT_ID: Final = "relight.rollout_id"
ATTEMPT_ID: Final = "relight.attempt_id"
PROMPT_TOKEN_IDS: Final = "relight.prompt_token_ids"
RESPONSE_TOKEN_IDS: Final = "relight.response_token_ids"
RESPONSE_LOGPROBS: Final = "relight.response_logprobs"
POLICY_VERSION: Final = "relight.policy_version"
POLICY_VERSION_SEGMENTS: Final = "relight.policy_version.segments"
"""On a call whose tokens two policy versions sampled (an update landed mid-call): ``[[first_token, version], …]``;
``relight.policy_version`` is then the oldest."""
DROPPED_REASON: Final = "relight.dropped.reason"
"""Why the trainer never trained on a rollout (:class:`relight.drops.DropReason`)."""
DROPPED_SPAN: Final = "relight.dropped"
"""The name of the annotation span a trainer leaves on an attempt whose group it dropped."""
RETOKENIZED: Final = "relight.retokenized"
"""True when the upstream returned no token ids and the gateway tokenized the text itself."""
UPSTREAM: Final = "relight.upstream"
"""Which upstream replica served an LLM call."""
UPSTREAM_STATUS: Final = "relight.upstream.status_code"
STREAM: Final = "relight.stream"
"""True when the client asked for a streamed (SSE) response."""
DROPPED_TOOLS: Final = "relight.dropped_tools"
"""Hosted tool kinds (``web_search``…) the gateway dropped from a Responses request: no local engine runs them."""
MAX_TOKENS_CAPPED: Final = "relight.max_tokens_capped"
"""The output budget the gateway sent after capping one larger than the context left (the request's is
``gen_ai.request.max_tokens``)."""
REFUSED: Final = "relight.refused"
"""True on the failed LLM span of a request the gateway refused itself (bad input, context overflow):
nothing reached the model, and nothing of it can be trained on."""
HTTP_STATUS: Final = "http.response.status_code"
ROLE: Final = "relight.role"
"""The agent or node that made an LLM call; a path for nested ones (``researcher/agent``)."""
FRAMEWORK: Final = "relight.framework"
FRAMEWORK_RUN_ID: Final = "relight.framework.run_id"
REWARD: Final = "relight.reward"
REWARD_NAME: Final = "relight.reward.name"
TOOL_SUCCESS: Final = "relight.tool.success"
ANNOTATION: Final = "relight.annotation"
"""JSON text of an annotation's payload."""
